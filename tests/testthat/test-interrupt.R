# Ctrl-C during an evaluation: the backend stops at its next poll, frees
# everything, and the glue signals R's own interrupt condition, so that
# tryCatch(interrupt = ) and withCallingHandlers() see it as they see R's.
# A child process sends SIGINT to this R process during a long evaluation.

send_interrupt_after <- function(seconds) {
  system(sprintf("sh -c 'sleep %s; kill -INT %d' >/dev/null 2>&1 &", seconds, Sys.getpid()))
}

long_cpu_fit <- function() {
  set.seed(10)
  # about 1e11 pairs: minutes on 2 cores, so the signal lands mid-evaluation
  kde_gpu(matrix(rnorm(3e5 * 3), ncol = 3), backend = "cpu")
}

skip_without_signals <- function() {
  skip_on_os("windows")
  skip_if(Sys.which("kill") == "" || Sys.which("sh") == "", "no kill/sh to send SIGINT")
}

test_that("an interrupted CPU evaluation signals an interrupt condition, promptly", {
  skip_without_signals()
  fit <- long_cpu_fit()
  send_interrupt_after(0.5)
  started <- proc.time()[["elapsed"]]
  caught <- tryCatch(predict(fit, log = TRUE), interrupt = function(e) e,
                     error = function(e) e)
  elapsed <- proc.time()[["elapsed"]] - started
  expect_s3_class(caught, "interrupt")
  expect_false(inherits(caught, "error"))
  expect_lt(elapsed, 30) # stopped at a poll, not at the end (minutes)
})

test_that("calling handlers see the interrupt, and the search for a bandwidth passes it on", {
  skip_without_signals()
  fit <- long_cpu_fit()
  seen <- FALSE
  send_interrupt_after(0.5)
  outcome <- tryCatch(
    withCallingHandlers(logLik(fit), interrupt = function(e) seen <<- TRUE),
    interrupt = function(e) "interrupted")
  expect_true(seen)
  expect_identical(outcome, "interrupted")

  send_interrupt_after(0.5)
  outcome <- tryCatch(bw_mlcv(fit$x[1:1e5, 1], backend = "cpu"),
                      interrupt = function(e) "interrupted")
  expect_identical(outcome, "interrupted")
})

test_that("an interrupted GPU evaluation signals an interrupt condition", {
  skip_without_signals()
  skip_without_gpu()
  set.seed(11)
  fit <- kde_gpu(matrix(rnorm(2e6 * 3), ncol = 3), backend = "cuda")
  # 4e12 pairs in double with nothing skipped (tolerance = 0): about 8 s on
  # an H100, so the signal lands mid-evaluation
  queries <- matrix(rnorm(2e6 * 3), ncol = 3)
  send_interrupt_after(1)
  caught <- tryCatch(predict(fit, queries, tolerance = 0), interrupt = function(e) e,
                     error = function(e) e)
  # an evaluation that ended before the signal must not leave it to land
  # in a later test
  if (!inherits(caught, "interrupt")) tryCatch(Sys.sleep(3), interrupt = function(e) NULL)
  expect_s3_class(caught, "interrupt")
  # the model survives and evaluates again
  expect_equal(predict(fit, fit$x[1:3, ]), predict(kde_gpu(fit$x, H = fit$H, backend = "cpu"),
                                                    fit$x[1:3, ]), tolerance = 1e-10)
})

test_that("every long CPU loop answers Ctrl-C within a fraction of a second", {
  # The loops poll on wall time (src/slices.h), not after a count of terms
  # that took 1.3 s for the CDF, 0.7 s for the density.
  skip_without_signals()
  skip_on_cran()
  set.seed(12)
  fit <- kde_gpu(rnorm(2e5), backend = "cpu")
  q <- rnorm(2e5)
  x3 <- matrix(rnorm(3e4 * 3), ncol = 3)
  latency <- function(expr) {
    send_interrupt_after(0.5)
    started <- proc.time()[["elapsed"]]
    caught <- tryCatch(expr, interrupt = function(e) e)
    elapsed <- proc.time()[["elapsed"]] - started
    # an evaluation that ended before the signal must not leave it to land
    # in a later test
    if (!inherits(caught, "interrupt")) tryCatch(Sys.sleep(3), interrupt = function(e) NULL)
    expect_s3_class(caught, "interrupt")
    elapsed - 0.5
  }
  expect_lt(latency(predict(fit, q, type = "cdf")), 0.4)
  expect_lt(latency(predict(fit, q, type = "gradient")), 0.4)
  expect_lt(latency(predict(fit, q, tolerance = 0)), 0.4)
  expect_lt(latency(kdegpu:::gaussian_moments(x3, rep(1 / 3e4, 3e4), x3, 4L, "all", "cpu")),
            0.4)
})
