# contour_levels(): density levels of highest-density regions. The
# estimate's own regions (the default) against the mass of {f >= c} by
# numeric integration; the data's against ks::contourLevels() and their
# definition (a weighted quantile of the density at the training points).

# A 2-D mixture of two correlated Gaussians, 300 points.
mixture_2d <- function(seed = 500) {
  set.seed(seed)
  first <- matrix(rnorm(400), 200, 2) %*% matrix(c(1, 0.6, 0, 0.8), 2)
  second <- sweep(matrix(rnorm(200, sd = 0.5), 100, 2), 2, c(3, -1), "+")
  x <- rbind(first, second)
  colnames(x) <- c("u", "v")
  x
}

test_that("contour_levels() agrees with ks::contourLevels() on faithful and a mixture", {
  skip_if_not_installed("ks")
  prob <- c(0.1, 0.25, 0.5, 0.75, 0.9)
  # ks's `cont` is the percentage inside the region, like 100 * prob here.
  # approx = FALSE makes ks evaluate the exact density at the data, as
  # kdegpu does; its default interpolates a grid (several % off in 2-D).
  for (x in list(as.matrix(faithful), mixture_2d())) {
    fit <- kde_gpu(x, backend = "cpu")
    want <- ks::contourLevels(ks::kde(x, H = fit$H, binned = FALSE), cont = 100 * prob,
                              approx = FALSE)
    got <- contour_levels(fit, prob, coverage = "data")
    expect_equal(unname(got), unname(want), tolerance = 1e-12)
    expect_lte(max(abs(got / want - 1)), 0.02)
  }
  # 1-D: ks evaluates exactly too, but truncates the Gaussian kernel at 3.7
  # bandwidths, which moves its levels by about 1e-4.
  for (x in list(faithful$eruptions, mixture_2d()[, 1])) {
    fit <- kde_gpu(x, backend = "cpu")
    want <- ks::contourLevels(ks::kde(x, h = fit$bw, binned = FALSE), cont = 100 * prob)
    got <- contour_levels(fit, prob, coverage = "data")
    expect_lte(max(abs(got / want - 1)), 0.02)
  }
})

test_that("contour_levels() is the weighted quantile of the density at the data", {
  x <- mixture_2d(501)
  set.seed(502)
  w <- rexp(nrow(x))
  for (kernel in c("gaussian", "epanechnikov")) {
    fit <- kde_gpu(x, kernel = kernel, weights = w, backend = "cpu")
    prob <- c(0.2, 0.5, 0.8)
    levels <- contour_levels(fit, prob, coverage = "data")
    expect_named(levels, c("20%", "50%", "80%"))
    expect_true(all(diff(levels) < 0))
    # The weighted share of the points in {f >= c} is prob, to within the
    # weight of one point on either side of the level.
    f <- ref_density(x, x, fit$H, kernel, w)
    share <- vapply(levels, function(level) sum(fit$weights[f >= level]), 0)
    expect_lte(max(abs(share - prob)), 2 * max(fit$weights))
  }
  # Equal weights: exactly quantile() of the densities, type 7.
  fit <- kde_gpu(x, backend = "cpu")
  f <- ref_density(x, x, fit$H, "gaussian")
  expect_equal(unname(contour_levels(fit, c(0.05, 0.5, 1), coverage = "data")),
               unname(quantile(f, 1 - c(0.05, 0.5, 1))), tolerance = 1e-12)
})

test_that("points of weight 0 neither count in the estimate nor in the quantile", {
  x <- mixture_2d(503)
  w <- rep(c(1, 0), length.out = nrow(x))
  weighted <- kde_gpu(x, H = diag(0.3, 2), weights = w, backend = "cpu")
  kept <- kde_gpu(x[w > 0, ], H = diag(0.3, 2), backend = "cpu")
  expect_equal(contour_levels(weighted, coverage = "data"),
               contour_levels(kept, coverage = "data"), tolerance = 1e-12)
  # Integer weights are repeats of the points, up to the quantile's
  # positions of the repeats: within one point's share.
  counts <- rep(c(1, 3), length.out = 60)
  fit_w <- kde_gpu(x[1:60, ], H = diag(0.3, 2), weights = counts, backend = "cpu")
  fit_r <- kde_gpu(x[rep(1:60, counts), ], H = diag(0.3, 2), backend = "cpu")
  f <- predict(fit_w)
  for (p in c(0.25, 0.5, 0.75)) {
    level_w <- contour_levels(fit_w, p, coverage = "data")
    expect_equal(mean(predict(fit_r) >= level_w), sum(fit_w$weights[f >= level_w]),
                 tolerance = 1e-12)
    level_r <- contour_levels(fit_r, p, coverage = "data")
    expect_lte(abs(sum(fit_w$weights[f >= level_r]) - p), 3 / 120)
  }
})

test_that("contour_levels() handles the ends of [0, 1] and a single point", {
  x <- faithful$waiting
  fit <- kde_gpu(x, backend = "cpu")
  f <- predict(fit)
  expect_equal(unname(contour_levels(fit, c(0, 1), coverage = "data")), c(max(f), min(f)))
  one <- kde_gpu(c(1, 2, 3), bw = 1, weights = c(0, 1, 0), backend = "cpu")
  expect_equal(unname(contour_levels(one, c(0.3, 0.9), coverage = "data")), rep(dnorm(0), 2),
               tolerance = 1e-14)
  expect_named(contour_levels(fit, c(0.125, 2 / 3)), c("12.5%", "66.67%"))
})

test_that("contour_levels() rejects bad input, naming the argument", {
  fit <- kde_gpu(faithful$eruptions, backend = "cpu")
  expect_error(contour_levels(fit, 1.5), "`prob`")
  expect_error(contour_levels(fit, -0.1), "`prob`")
  expect_error(contour_levels(fit, NA), "`prob`")
  expect_error(contour_levels(fit, numeric()), "`prob`")
  expect_error(contour_levels(fit, "50%"), "`prob`")
  expect_error(contour_levels(faithful), "`fit`")
  expect_error(contour_levels(fit, 0.5, coverage = "points"), "`coverage`")
  expect_error(contour_levels(fit, 0.5, draws = 1), "`draws`")
  expect_error(contour_levels(fit, 0.5, seed = NA), "`seed`")
})

# The estimate's mass in {f >= level}, on a fine grid: 2-D a midpoint sum
# over the fit's cells (the kernel's mass beyond the grid is < 1e-6).
mass_above_2d <- function(fit, level, n = 400) {
  lims <- lapply(1:2, function(k) range(fit$x[, k]) + c(-6, 6) * sqrt(fit$H[k, k]))
  u <- seq(lims[[1]][1], lims[[1]][2], length.out = n + 1)
  v <- seq(lims[[2]][1], lims[[2]][2], length.out = n + 1)
  mid <- function(a) (a[-1] + a[-length(a)]) / 2
  f <- predict(fit, unname(as.matrix(expand.grid(mid(u), mid(v)))))
  cell <- diff(u[1:2]) * diff(v[1:2])
  vapply(level, function(c) sum(f[f >= c]) * cell, 0)
}

test_that("the estimate's regions hold prob of its mass, within the Monte Carlo error", {
  fit <- kde_gpu(faithful, backend = "cpu")
  prob <- c(0.25, 0.5, 0.75, 0.9)
  levels <- contour_levels(fit, prob)
  se <- attr(levels, "se")
  expect_equal(se, sqrt(prob * (1 - prob) / 20000))
  mass <- mass_above_2d(fit, levels)
  # 4 standard errors of the draws, plus the grid's error in the region
  expect_lte(max(abs(mass - prob) - 4 * se), 2e-3)
  # ks's levels (the data's) hold much less: a third less at 50%
  data_mass <- mass_above_2d(fit, contour_levels(fit, prob, coverage = "data"))
  expect_lt(data_mass[2], 0.4)
  # 1-D, weighted, a compact kernel: a midpoint sum over 1e5 cells
  set.seed(504)
  x <- c(rnorm(150), rnorm(100, 4, 0.7))
  fit1 <- kde_gpu(x, kernel = "epanechnikov", weights = runif(250), backend = "cpu")
  levels1 <- contour_levels(fit1, prob)
  edges <- range(x) + c(-3, 3) * fit1$bw
  cell <- diff(edges) / 1e5
  f <- predict(fit1, edges[1] + cell * (seq_len(1e5) - 0.5))
  expect_equal(sum(f) * cell, 1, tolerance = 1e-6)
  mass1 <- vapply(levels1, function(c) sum(f[f >= c]) * cell, 0)
  expect_lte(max(abs(mass1 - prob) - 4 * attr(levels1, "se")), 1e-4)
})

test_that("the estimate's levels are the same at every call and leave the session's seed alone", {
  fit <- kde_gpu(faithful$eruptions, backend = "cpu")
  set.seed(9)
  before <- runif(1)
  set.seed(9)
  first <- contour_levels(fit, 0.5)
  expect_identical(runif(1), before)
  expect_identical(contour_levels(fit, 0.5), first)
  expect_false(identical(contour_levels(fit, 0.5, seed = 2), first))
})
