# Comparisons with other packages' estimators: ks::kde (exact, unbinned
# Gaussian with full H) and stats::density (binned FFT approximation).

test_that("gaussian with full H matches ks::kde(binned = FALSE) in 2-D and 3-D", {
  skip_if_not_installed("ks")
  for (d in c(2, 3)) {
    x <- ref_data(300, d, seed = 100 + d)
    H <- ref_full_H(d, 0.5, seed = 110 + d)
    q <- ref_queries(x, 100, seed = 120 + d)[1:100, ]
    want <- ks::kde(x, H = H, eval.points = q, binned = FALSE)$estimate
    fit <- kde_gpu(x, H = H, backend = "cpu")
    expect_density_equal(predict(fit, q), want, tol = 1e-8,
                         label = paste("ks d =", d))
  }
})

test_that("gaussian default (Scott) bandwidth also agrees with ks::kde at that H", {
  skip_if_not_installed("ks")
  x <- ref_data(200, 2, seed = 130)
  fit <- kde_gpu(x, backend = "cpu")
  q <- ref_queries(x, 50, seed = 131)[1:50, ]
  want <- ks::kde(x, H = fit$H, eval.points = q, binned = FALSE)$estimate
  expect_density_equal(predict(fit, q), want, tol = 1e-8)
})

test_that("every density() kernel agrees with stats::density in 1-D (binned)", {
  # density() bins the data and convolves by FFT, so it is only an
  # approximation: compare in the bulk, on a fine grid.
  set.seed(140)
  x <- c(rnorm(700), rnorm(300, 3, 0.5))
  w <- rexp(1000)
  shared <- c("gaussian", "epanechnikov", "rectangular", "triangular",
              "biweight", "cosine", "optcosine")
  for (k in shared) {
    for (weighted in c(FALSE, TRUE)) {
      wt <- if (weighted) w / sum(w) else NULL
      dd <- stats::density(x, bw = 0.3, kernel = k, n = 2048, weights = wt)
      fit <- kde_gpu(x, bw = 0.3, kernel = k, weights = wt, backend = "cpu")
      got <- predict(fit, dd$x)
      bulk <- dd$y > 0.05 * max(dd$y)
      rel <- abs(got[bulk] / dd$y[bulk] - 1)
      lab <- paste(k, if (weighted) "weighted" else "")
      if (k == "rectangular") {
        # Binning blurs the jumps of the rectangular kernel.
        expect_lt(mean(rel), 1e-2, label = lab)
        expect_lt(max(rel), 0.15, label = lab)
      } else {
        expect_lt(max(rel), 5e-3, label = lab)
      }
    }
  }
})

test_that("the default bandwidth is density()'s default", {
  set.seed(141)
  x <- rgamma(500, 2)
  dd <- stats::density(x, n = 2048)
  fit <- kde_gpu(x, backend = "cpu")
  expect_equal(sqrt(c(fit$H)), dd$bw, tolerance = 1e-14)
  bulk <- dd$y > 0.05 * max(dd$y)
  expect_lt(max(abs(predict(fit, dd$x)[bulk] / dd$y[bulk] - 1)), 5e-3)
})
