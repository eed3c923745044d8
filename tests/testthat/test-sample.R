# Sampling from the fitted density: moments, the radial law of each kernel,
# reproducibility, and base::sample() left intact. The statistical checks
# run on every usable backend: with N >= 1e4 draws a CUDA fit samples on the
# GPU, with its own generator, so the same references check both samplers.

# Whitened radius s = |R^{-T} (y - center)| / a of draws y (rows).
whitened_radius <- function(y, center, H, kernel) {
  y <- ref_as_matrix(y, length(center))
  R <- chol(H)
  z <- sweep(y, 2, center) %*% backsolve(R, diag(ncol(y)))
  sqrt(rowSums(z^2)) / ref_constants(kernel, ncol(y))$a
}

test_that("draws have the weighted mean and weighted covariance + H", {
  N <- 2e4
  for (d in c(1, 3)) {
    x <- ref_data(40, d, seed = 300 + d)
    H <- ref_full_H(d, 0.6, seed = 310 + d)
    set.seed(320 + d)
    w <- rexp(40)
    p <- w / sum(w)
    mu <- colSums(p * x)
    xc <- sweep(x, 2, mu)
    Sigma <- crossprod(xc * sqrt(p)) + H
    for (backend in test_backends()) for (k in ref_kernels) {
      fit <- kde_gpu(x, H = H, kernel = k, weights = w, backend = backend)
      set.seed(330 + d)
      y <- sample(fit, N)
      if (d == 1) {
        expect_true(is.numeric(y) && is.null(dim(y)))
        expect_length(y, N)
      } else {
        expect_true(is.matrix(y))
        expect_equal(dim(y), c(N, d))
      }
      y <- ref_as_matrix(y)
      expect_true(all(is.finite(y)))
      lab <- paste(backend, k, "d =", d)
      # Means: 5 standard errors.
      se_mean <- sqrt(diag(Sigma) / N)
      expect_lt(max(abs(colMeans(y) - mu) / se_mean), 5, label = lab)
      # Covariances about the known mean: 5 standard errors, the SE estimated
      # from the draws' own products.
      yc <- sweep(y, 2, mu)
      for (i in seq_len(d)) for (j in i:d) {
        prod <- yc[, i] * yc[, j]
        z <- (mean(prod) - Sigma[i, j]) / (sd(prod) / sqrt(N))
        expect_lt(abs(z), 5, label = paste(lab, "cov", i, j))
      }
    }
  }
})

test_that("the radial law of the draws is the kernel's (KS test), d = 1 and 3", {
  N <- 2e4
  for (d in c(1, 3)) {
    center <- seq_len(d) - 0.5
    H <- ref_full_H(d, 0.8, seed = 340 + d)
    for (backend in test_backends()) for (k in ref_kernels) {
      fit <- kde_gpu(matrix(center, 1), H = H, kernel = k, backend = backend)
      set.seed(350 + d)
      s <- whitened_radius(sample(fit, N), center, H, k)
      if (k %in% ref_compact) {
        expect_lte(max(s), 1 + 1e-12, label = paste(backend, k, d))
      }
      p <- suppressWarnings(stats::ks.test(s, ref_radial_cdf(k, d))$p.value)
      expect_gt(p, 1e-4, label = paste("KS p-value of", backend, k, "d =", d))
    }
  }
})

test_that("draws come from the components with positive weight only", {
  x <- ref_data(30, 3, seed = 360)
  x[17, ] <- x[4, ] + 6   # far apart: the two supports are disjoint
  H <- ref_full_H(3, 0.2, seed = 361)
  w <- numeric(30)
  w[c(4, 17)] <- c(1, 3)
  N <- 1e4
  for (backend in test_backends()) for (k in c("epanechnikov", "rectangular", "optcosine")) {
    fit <- kde_gpu(x, H = H, kernel = k, weights = w, backend = backend)
    set.seed(362)
    y <- sample(fit, N)
    s4 <- whitened_radius(y, x[4, ], H, k)
    s17 <- whitened_radius(y, x[17, ], H, k)
    lab <- paste(backend, k)
    expect_true(all(pmin(s4, s17) <= 1 + 1e-12), label = lab)
    # Component frequencies 1:3.
    expect_true(all(s4 > 1 | s17 > 1), label = lab)
    frac17 <- mean(s17 <= 1)
    expect_lt(abs(frac17 - 0.75) / sqrt(0.75 * 0.25 / N), 5, label = lab)
  }
})

test_that("sample(fit) is reproducible under set.seed and varies without it", {
  for (d in c(1, 2)) {
    fit <- kde_gpu(ref_data(25, d, seed = 370), kernel = "biweight",
                   backend = "cpu")
    set.seed(11)
    a <- sample(fit, 50)
    set.seed(11)
    b <- sample(fit, 50)
    expect_identical(a, b)
    set.seed(12)
    expect_false(identical(a, sample(fit, 50)))
  }
})

test_that("sample() on anything else is base::sample, draw for draw", {
  calls <- list(
    quote(sample(1:10)),
    quote(sample(5, 3)),
    quote(sample(letters, 2, replace = TRUE)),
    quote(sample(c(0.5, 2, 7))),
    quote(sample(10, 4, prob = 1:10)),
    quote(sample(x = 3, size = 10, replace = TRUE)),
    quote(sample(list(1, "a", TRUE)))
  )
  for (cl in calls) {
    set.seed(2024)
    ours <- eval(cl, list(sample = kdegpu::sample))
    set.seed(2024)
    theirs <- eval(cl, list(sample = base::sample))
    expect_identical(ours, theirs, label = deparse(cl))
  }
  # The unqualified name that users (and these tests) see is kdegpu's.
  set.seed(1)
  a <- sample(100, 5)
  set.seed(1)
  expect_identical(a, base::sample(100, 5))
})

test_that("simulate() runs and is reproducible with seed", {
  fit <- kde_gpu(ref_data(30, 2, seed = 380), backend = "cpu")
  expect_error(s0 <- simulate(fit), NA)
  s1 <- simulate(fit, nsim = 2, seed = 99)
  s2 <- simulate(fit, nsim = 2, seed = 99)
  expect_identical(s1, s2)
  expect_false(identical(s1, simulate(fit, nsim = 2, seed = 100)))
  fit1 <- kde_gpu(ref_data(30, 1, seed = 381)[, 1], backend = "cpu")
  expect_identical(simulate(fit1, seed = 3), simulate(fit1, seed = 3))
})
