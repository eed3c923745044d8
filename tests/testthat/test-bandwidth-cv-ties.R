# Exact ties make LSCV unbounded below (and the leave-one-out likelihood
# above when every point has a twin): the selectors say so instead of
# returning a degenerate bandwidth.

test_that("LSCV on MASS::geyser's tied durations stops, naming the column, on every type", {
  skip_if_not_installed("MASS")
  x <- MASS::geyser
  # both columns are tied (waiting in whole minutes): the search collapses
  # along one of them, which one depends on its path
  expect_error(bw_lscv(x, shape = "full", backend = "cpu"),
               "LSCV has no minimum: column \"(waiting|duration)\" of `x` has tied values.*bw_mlcv")
  expect_error(kde_gpu(x, bw = "lscv", backend = "cpu"),
               "LSCV has no minimum: column \"(waiting|duration)\".*jitter")
  expect_error(bw_lscv(x, shape = "diagonal", backend = "cpu"),
               "LSCV has no minimum: column \"(waiting|duration)\" of `x` has tied values")
  expect_error(bw_lscv(x, shape = "scalar", backend = "cpu"),
               "LSCV has no minimum: `x` has tied rows")
  expect_error(bw_lscv(x$duration, backend = "cpu"),
               "LSCV has no minimum: `x` has tied values \\(3,670 tied pairs\\)")
  expect_error(kde_gpu(x$duration, bw = "ucv", backend = "cpu"), "LSCV has no minimum")
})

test_that("the tie limit of LSCV is what the criterion does as the bandwidth shrinks", {
  skip_if_not_installed("MASS")
  v <- MASS::geyser$duration
  w <- rep(1 / length(v), length(v))
  group <- kdegpu:::tie_groups(matrix(v))
  coefficient <- kdegpu:::lscv_tie_coefficient(group, w, 1)
  expect_lt(coefficient, 0)
  # LSCV(h) * sqrt(2 pi) h -> the coefficient as h -> 0 (K_h(0) = 1 / (sqrt(2 pi) h))
  h <- 1e-6
  lscv <- kdegpu:::cv_criterion(matrix(v), w, matrix(h^2), "gaussian", "cpu", "double", "lscv")
  expect_equal(lscv * sqrt(2 * pi) * h, coefficient, tolerance = 1e-8)
  # a few ties leave it bounded (the self terms of int f^2 win): no error
  set.seed(7)
  few <- c(rnorm(80), 0.5, 0.5)
  expect_gt(kdegpu:::lscv_tie_coefficient(kdegpu:::tie_groups(matrix(few)), rep(1 / 82, 82), 1), 0)
  expect_length(kdegpu:::unbounded_tie_directions(matrix(few), rep(1 / 82, 82), "lscv", "scalar"), 0)
  expect_no_error(bw_lscv(few, backend = "cpu"))
})

test_that("rounded data with a minimum above their spacing keep their LSCV bandwidth", {
  # faithful is rounded (waiting in whole minutes): LSCV falls without bound
  # only below the spacing, under the local minimum bw.ucv finds too.
  expect_length(kdegpu:::unbounded_tie_directions(matrix(faithful$waiting), rep(1 / 272, 272),
                                                  "lscv", "scalar"), 1)
  h <- expect_no_error(bw_lscv(faithful$waiting, backend = "cpu"))
  expect_equal(as.numeric(h), bw.ucv(faithful$waiting), tolerance = 0.02)
  expect_no_error(bw_lscv(faithful, shape = "full", backend = "cpu"))
})

test_that("MLCV stops when every point has a twin, and not on geyser", {
  set.seed(8)
  dice <- sample(1:6, 100, replace = TRUE)
  expect_error(bw_mlcv(dice, backend = "cpu"),
               "MLCV has no maximum: `x` has tied values \\(.*\\) and every point has a twin")
  x <- cbind(u = rnorm(100), dice = dice)
  for (type in c("diagonal", "full")) {
    expect_error(bw_mlcv(x, shape = type, backend = "cpu"),
                 "MLCV has no maximum: column \"dice\" of `x` has tied values.*plug-in")
  }
  expect_error(kde_gpu(x, bw = "mlcv", backend = "cpu"),
               "MLCV has no maximum: column \"dice\"")
  skip_if_not_installed("MASS")
  # geyser's untied points (63 durations occur once) bound the likelihood
  H <- bw_mlcv(MASS::geyser, shape = "full", backend = "cpu")
  expect_gt(sqrt(H[2, 2]), 0.05)
})
