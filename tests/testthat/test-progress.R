# The progress bar of long evaluations: on standard error when asked for and
# the evaluation runs past the delay, cleared at the end, results unchanged.

# The CPU backend polls for interrupts, and so draws the bar, between time
# slices of 0.1 s (src/slices.h); the bar shows the share of queries done, as
# "%3.0f%%" (src/api_glue.c). Which shares depends on the machine's speed.

test_that("a long evaluation draws a progress bar at each chunk and clears it", {
  x <- ref_data(2e4, 2, seed = 640)
  q <- ref_queries(x, 40000, seed = 641)
  fit <- kde_gpu(x, bw = 0.3, backend = "cpu")
  quiet <- with_kde_options(list(kdegpu.progress = FALSE, kdegpu.threads = 1),
                            predict(fit, q, log = TRUE))
  shown <- NULL
  err <- capture.output(type = "message", {
    shown <- with_kde_options(
      list(kdegpu.progress = TRUE, kdegpu.progress_delay = 0, kdegpu.threads = 1),
      predict(fit, q, log = TRUE))
  })
  expect_identical(shown, quiet)
  text <- paste(err, collapse = "")
  draws <- regmatches(text, gregexpr("kdegpu: \\[=*\\s*\\] +[0-9]+%", text))[[1]]
  # drawn at the slices' ends: 1.6e9 pair-coordinates on one thread take
  # several slices (0.7 s on a 2-core VM; a third of it drew only one bar
  # there), and the share done only grows
  percent <- as.numeric(sub("%", "", sub(".* ", "", draws)))
  expect_gte(length(percent), 2)
  expect_true(all(diff(percent) >= 0) && all(percent > 0 & percent <= 100))
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
