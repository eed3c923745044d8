# The progress bar of long evaluations: on standard error when asked for and
# the evaluation runs past the delay, cleared at the end, results unchanged.

# The CPU backend's chunking (src/kde_cpu.c): it polls for interrupts, and
# so draws the bar, between chunks of floor(PAIRS_PER_POLL * threads /
# (n d)) queries rounded up to a whole number of QUERY_BLOCKs, and the bar
# shows the share of queries done, as "%3.0f%%" (src/api_glue.c). The constants
# are read from the C source when the tests run from a checkout; the values
# below are those in src/kde_cpu.c, for an installed package's tests.
cpu_chunk_constants <- function() {
  consts <- c(PAIRS_PER_POLL = 2.0e8, KDE_QUERY_BLOCK = 16)
  src <- list.files(test_path("..", "..", "src"), pattern = "\\.(c|h)$",
                    full.names = TRUE, recursive = TRUE)
  for (name in names(consts)) {
    for (f in src) {
      def <- grep(paste0("^#define ", name, " "), readLines(f), value = TRUE)
      value <- suppressWarnings(as.numeric(sub(".* ", "", def)))
      if (length(value) == 1 && !is.na(value)) consts[[name]] <- value
    }
  }
  consts
}

# The percentages the bar shows for m queries on n training points in d
# dimensions on `threads` threads: one per chunk boundary before the end.
cpu_progress_percentages <- function(n, d, m, threads) {
  consts <- cpu_chunk_constants()
  chunk <- floor(consts[["PAIRS_PER_POLL"]] * threads / (n * d))
  chunk <- (chunk %/% consts[["KDE_QUERY_BLOCK"]] + 1) * consts[["KDE_QUERY_BLOCK"]]
  ends <- seq(chunk, by = chunk, length.out = ceiling(m / chunk))
  ends <- ends[ends < m]
  trimws(sprintf("%3.0f%%", 100 * ends / m))
}

test_that("a long evaluation draws a progress bar at each chunk and clears it", {
  x <- ref_data(2e4, 2, seed = 640)
  q <- ref_queries(x, 12000, seed = 641)
  fit <- kde_gpu(x, bw = 0.3, backend = "cpu")
  quiet <- with_kde_options(list(kdegpu.progress = FALSE, kdegpu.threads = 1),
                            predict(fit, q, log = TRUE))
  # On one thread, this many chunks: the bar is drawn at every boundary.
  percent <- cpu_progress_percentages(nrow(x), ncol(x), nrow(q), threads = 1)
  expect_gte(length(percent), 2)
  shown <- NULL
  err <- capture.output(type = "message", {
    shown <- with_kde_options(
      list(kdegpu.progress = TRUE, kdegpu.progress_delay = 0, kdegpu.threads = 1),
      predict(fit, q, log = TRUE))
  })
  expect_identical(shown, quiet)
  text <- paste(err, collapse = "")
  draws <- regmatches(text, gregexpr("kdegpu: \\[=*\\s*\\] +[0-9]+%", text))[[1]]
  expect_identical(sub(".* ", "", draws), percent)
  # ends by blanking its line
  expect_match(text, "\r +\r$")
  # below the delay, nothing
  err <- capture.output(type = "message", with_kde_options(
    list(kdegpu.progress = TRUE, kdegpu.progress_delay = 60, kdegpu.threads = 1),
    invisible(predict(fit, q, log = TRUE))))
  expect_identical(err, character())
})

test_that("bad progress options name themselves", {
  fit <- kde_gpu(ref_data(20, 1, seed = 642), backend = "cpu")
  expect_error(with_kde_options(list(kdegpu.progress = "yes"), predict(fit, 0)),
               "kdegpu.progress")
  expect_error(with_kde_options(list(kdegpu.progress = TRUE, kdegpu.progress_delay = -1),
                                predict(fit, 0)), "kdegpu.progress_delay")
})
