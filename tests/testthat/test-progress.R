# The progress bar of long evaluations: on standard error when asked for and
# the evaluation runs past the delay, cleared at the end, results unchanged.

test_that("a long evaluation draws a progress bar and clears it", {
  x <- ref_data(2e4, 2, seed = 640)
  q <- ref_queries(x, 12000, seed = 641)
  fit <- kde_gpu(x, bw = 0.3, backend = "cpu")
  quiet <- with_kde_options(list(kdegpu.progress = FALSE, kdegpu.threads = 1),
                            predict(fit, q, log = TRUE))
  shown <- NULL
  # One thread polls every 5000 queries here: the bar is drawn twice.
  err <- capture.output(type = "message", {
    shown <- with_kde_options(
      list(kdegpu.progress = TRUE, kdegpu.progress_delay = 0, kdegpu.threads = 1),
      predict(fit, q, log = TRUE))
  })
  expect_identical(shown, quiet)
  text <- paste(err, collapse = "")
  expect_match(text, "kdegpu: [=", fixed = TRUE)
  expect_match(text, "42%", fixed = TRUE)
  expect_match(text, "83%", fixed = TRUE)
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
