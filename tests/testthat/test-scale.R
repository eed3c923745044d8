# Data and bandwidths at any magnitude: a fit of x * s with bandwidth b * s
# is the fit of x with b, its density at q * s divided by s^d, or an error
# that names the scale (kdegpu computes with kernel sds from 3e-151 to
# 3e150, where H and its inverse are normal doubles).

magnitudes <- c(1e-300, 1e-150, 1, 1e150, 1e300)
scale_error <- "outside the scale kdegpu computes at.*rescale the data"
rule_scale_error <- "`x` is on a scale kdegpu cannot compute at.*rescale the data"

test_that("a 1-D fit at any magnitude is the scale-free fit, or an error naming the scale", {
  x <- c(0.3, 1.1, 1.9, 2.2, 3.7, 4.0, 6.5)
  q <- c(-1, 0.5, 2, 3.1, 9)
  for (kernel in c("gaussian", "epanechnikov")) {
    unit <- kde_gpu(x, bw = 0.6, kernel = kernel, backend = "cpu")
    unit_rule <- kde_gpu(x, kernel = kernel, backend = "cpu")
    for (s in magnitudes) {
      label <- sprintf("%s at %g", kernel, s)
      if (s %in% c(1e-300, 1e300)) {
        expect_error(kde_gpu(x * s, bw = 0.6 * s, kernel = kernel, backend = "cpu"),
                     paste0("`bw` = .*", scale_error), label = label)
        expect_error(kde_gpu(x * s, kernel = kernel, backend = "cpu"),
                     paste0(rule_scale_error, ".*x / 1e", if (s > 1) "\\+30" else "-29"),
                     label = label)
        next
      }
      fit <- kde_gpu(x * s, bw = 0.6 * s, kernel = kernel, backend = "cpu")
      expect_equal(predict(fit, q * s, log = TRUE), predict(unit, q, log = TRUE) - log(s),
                   tolerance = 1e-13, label = label)
      expect_equal(predict(fit, q * s) * s, predict(unit, q), tolerance = 1e-13, label = label)
      expect_equal(predict(fit, q * s, type = "cdf"), predict(unit, q, type = "cdf"),
                   tolerance = 1e-13, label = label)
      expect_equal(quantile(fit, c(0.1, 0.5, 0.9)) / s, quantile(unit, c(0.1, 0.5, 0.9)),
                   tolerance = 1e-9, label = label)
      expect_equal(predict(fit, q[2:4] * s, type = "gradient", log = TRUE) * s,
                   predict(unit, q[2:4], type = "gradient", log = TRUE),
                   tolerance = 1e-12, label = label)
      grid <- kde_grid(fit, n = 7)
      unit_grid <- kde_grid(unit, n = 7)
      expect_equal(grid$x / s, unit_grid$x, tolerance = 1e-13, label = label)
      expect_equal(grid$density * s, unit_grid$density, tolerance = 1e-12, label = label)
      # the rules on data at this scale: the bandwidth scales with it
      expect_equal(kde_gpu(x * s, kernel = kernel, backend = "cpu")$bw / s, unit_rule$bw,
                   tolerance = 1e-14, label = label)
    }
  }
})

test_that("a 2-D fit at any magnitude is the scale-free fit, or an error naming the scale", {
  set.seed(29)
  x <- matrix(rnorm(40), ncol = 2) %*% matrix(c(1, 0.5, 0, 1), 2)
  q <- rbind(c(0, 0), c(1, -1), c(-0.5, 0.3))
  unit <- kde_gpu(x, backend = "cpu") # Scott's rule, full H
  unit_diag <- kde_gpu(x, bw = c(0.4, 0.7), backend = "cpu")
  for (s in magnitudes) {
    label <- sprintf("2-D at %g", s)
    if (s %in% c(1e-300, 1e300)) {
      expect_error(kde_gpu(x * s, backend = "cpu"), rule_scale_error, label = label)
      H <- if (s > 1) unit$H * 1e302 else unit$H * s^2 # 1e300 * s^2 is Inf, refused as such
      expect_error(kde_gpu(x * s, H = H, backend = "cpu"), "`H` is outside the scale",
                   label = label)
      expect_error(kde_gpu(x * s, bw = c(0.4, 0.7) * s, backend = "cpu"),
                   paste0("`bw` = .*", scale_error), label = label)
      next
    }
    fit <- kde_gpu(x * s, backend = "cpu")
    expect_equal(fit$H / s^2, unit$H, tolerance = 1e-14, label = label)
    expect_equal(predict(fit, q * s, log = TRUE), predict(unit, q, log = TRUE) - 2 * log(s),
                 tolerance = 1e-13, label = label)
    expect_equal(predict(fit, q * s, type = "gradient", log = TRUE) * s,
                 predict(unit, q, type = "gradient", log = TRUE), tolerance = 1e-12, label = label)
    fit_diag <- kde_gpu(x * s, bw = c(0.4, 0.7) * s, backend = "cpu")
    expect_equal(predict(fit_diag, q * s, type = "cdf"), predict(unit_diag, q, type = "cdf"),
                 tolerance = 1e-13, label = label)
    grid <- kde_grid(fit, n = c(4, 5))
    unit_grid <- kde_grid(unit, n = c(4, 5))
    # (at 1e150 the smallest densities underflow, as they must: compared as densities)
    expect_equal(grid$density * s * s, unit_grid$density, tolerance = 1e-12, label = label)
    modes <- kde_modes(fit)
    expect_equal(modes$modes / s, kde_modes(unit)$modes, tolerance = 1e-6, label = label)
  }
})

test_that("adaptive and bounded fits at any magnitude are the scale-free fits", {
  x <- c(0.3, 1.1, 1.9, 2.2, 3.7, 4.0, 6.5, 12)
  q <- c(0.1, 2, 5)
  unit_a <- kde_gpu(x, bw = 0.8, adaptive = TRUE, backend = "cpu")
  unit_b <- kde_gpu(x, bw = 0.8, lower = 0, backend = "cpu")
  for (s in c(1e-150, 1e150)) {
    fit_a <- kde_gpu(x * s, bw = 0.8 * s, adaptive = TRUE, backend = "cpu")
    expect_equal(fit_a$adaptive$lambda, unit_a$adaptive$lambda, tolerance = 1e-13)
    expect_equal(predict(fit_a, q * s, log = TRUE), predict(unit_a, q, log = TRUE) - log(s),
                 tolerance = 1e-13)
    fit_b <- kde_gpu(x * s, bw = 0.8 * s, lower = 0, backend = "cpu")
    expect_equal(predict(fit_b, q * s, log = TRUE), predict(unit_b, q, log = TRUE) - log(s),
                 tolerance = 1e-13)
    expect_equal(predict(fit_b, q * s, type = "cdf"), predict(unit_b, q, type = "cdf"),
                 tolerance = 1e-13)
    expect_equal(quantile(fit_b, 0.3) / s, quantile(unit_b, 0.3), tolerance = 1e-9)
  }
})

test_that("adjust that leaves the scale is an error naming it", {
  expect_error(kde_gpu(c(1, 2, 4) * 1e150, adjust = 1e10, backend = "cpu"),
               "`adjust` takes the bandwidth outside the scale")
  expect_error(kde_gpu(c(1, 2, 4), H = 1e-320, backend = "cpu"), "`H` is outside the scale")
})

test_that("the selectors scale with the data, or name the scale", {
  x <- faithful$eruptions[1:100]
  for (rule in c("SJ", "lscv", "plugin")) {
    unit <- kde_gpu(x, bw = rule, backend = "cpu")$bw
    expect_equal(kde_gpu(x * 1e150, bw = rule, backend = "cpu")$bw / 1e150, unit,
                 tolerance = 1e-6, label = rule)
    expect_error(kde_gpu(x * 1e300, bw = rule, backend = "cpu"),
                 "`x` is on a scale kdegpu cannot compute at.*overflows", label = rule)
    expect_error(kde_gpu(x * 1e-300, bw = rule, backend = "cpu"),
                 "`x` is on a scale kdegpu cannot compute at.*underflows", label = rule)
  }
})
