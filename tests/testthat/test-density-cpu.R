# Exact evaluation on the CPU backend against the plain-R reference
# (helper-reference.R): every kernel, d = 1, 2, 3, 5, scalar / diagonal /
# full bandwidth, weighted and unweighted, near and far from the data.

test_that("every kernel matches the reference in d = 1, 2, 3, 5", {
  for (d in c(1, 2, 3, 5)) {
    x <- ref_data(97, d, seed = 10 + d)
    q <- ref_queries(x, 60, seed = 20 + d)
    sdv <- apply(x, 2, sd)
    bw_scalar <- 0.4 * mean(sdv)
    bw_vector <- 0.35 * sdv * seq(0.8, 1.2, length.out = d)
    H_full <- ref_full_H(d, 0.45 * mean(sdv), seed = 30 + d)
    set.seed(40 + d)
    w <- rexp(nrow(x))
    specs <- list(
      scalar = list(args = list(bw = bw_scalar), H = diag(bw_scalar^2, d)),
      vector = list(args = list(bw = bw_vector), H = diag(bw_vector^2, d)),
      full = list(args = list(H = H_full), H = H_full)
    )
    for (k in ref_kernels) {
      for (sp in names(specs)) {
        for (weighted in c(FALSE, TRUE)) {
          wt <- if (weighted) w else NULL
          lab <- sprintf("%s d=%d %s H%s", k, d, sp,
                         if (weighted) " weighted" else "")
          fit <- do.call(kde_gpu, c(list(x, kernel = k, weights = wt,
                                         backend = "cpu"), specs[[sp]]$args))
          expect_equal(fit$H, specs[[sp]]$H, tolerance = 1e-14,
                       ignore_attr = TRUE, label = paste("H of", lab))
          want <- ref_log_density(x, q, specs[[sp]]$H, k, wt)
          got <- predict(fit, q, log = TRUE)
          expect_log_density_equal(got, want, tol = 1e-10, label = lab)
          expect_density_equal(predict(fit, q), exp(want), tol = 1e-10,
                               label = lab)
        }
      }
    }
  }
})

test_that("predict() without newdata evaluates at the training points", {
  for (d in c(1, 3)) {
    x <- ref_data(80, d, seed = 50 + d)
    H <- ref_full_H(d, 0.5, seed = 51)
    for (k in c("gaussian", "biweight", "exponential")) {
      fit <- kde_gpu(x, H = H, kernel = k, backend = "cpu")
      want <- ref_log_density(x, x, H, k)
      expect_log_density_equal(predict(fit, log = TRUE), want,
                               label = paste(k, d))
      expect_equal(predict(fit, log = TRUE), predict(fit, x, log = TRUE),
                   tolerance = 1e-13)
    }
  }
})

test_that("the fitted object has the documented fields", {
  x <- ref_data(40, 3, seed = 60)
  w <- seq_len(40)
  fit <- kde_gpu(x, bw = 0.5, kernel = "cosine", weights = w, backend = "cpu")
  expect_s3_class(fit, "kde_gpu")
  expect_true(is.matrix(fit$x) && is.double(fit$x))
  expect_equal(fit$x, x, ignore_attr = TRUE)
  expect_equal(fit$n, 40)
  expect_equal(fit$d, 3)
  expect_equal(dim(fit$H), c(3L, 3L))
  expect_identical(fit$kernel, "cosine")
  expect_equal(fit$weights, w / sum(w), tolerance = 1e-15)
  expect_identical(fit$backend, "cpu")
  expect_identical(fit$precision, "double")
  expect_true(is.call(fit$call))
  expect_equal(kde_gpu(x[, 1], backend = "cpu")$x, matrix(x[, 1]),
               ignore_attr = TRUE)
})

test_that("kernel aliases map to their canonical kernels", {
  x <- ref_data(30, 2, seed = 61)
  q <- ref_queries(x, 20, seed = 62)
  for (pair in list(c("tophat", "rectangular"), c("linear", "triangular"))) {
    fit_alias <- kde_gpu(x, bw = 0.6, kernel = pair[1], backend = "cpu")
    fit_canon <- kde_gpu(x, bw = 0.6, kernel = pair[2], backend = "cpu")
    expect_identical(fit_alias$kernel, pair[2])
    expect_identical(predict(fit_alias, q), predict(fit_canon, q))
  }
})

test_that("default and named bandwidth rules follow the documented formulas", {
  x1 <- ref_data(150, 1, seed = 63)[, 1]
  expect_equal(c(kde_gpu(x1, backend = "cpu")$H), stats::bw.nrd0(x1)^2,
               tolerance = 1e-14)
  expect_equal(c(kde_gpu(x1, bw = "nrd0", backend = "cpu")$H),
               stats::bw.nrd0(x1)^2, tolerance = 1e-14)
  expect_equal(c(kde_gpu(x1, bw = "nrd", backend = "cpu")$H),
               stats::bw.nrd(x1)^2, tolerance = 1e-14)
  # The default bandwidth is used in the density, not only stored.
  bw <- stats::bw.nrd0(x1)
  q <- seq(-4, 4, length.out = 33)
  expect_log_density_equal(predict(kde_gpu(x1, backend = "cpu"), q, log = TRUE),
                           ref_log_density(x1, q, bw^2, "gaussian"))
  for (d in c(2, 3, 5)) {
    x <- ref_data(120, d, seed = 64 + d)
    scott <- nrow(x)^(-2 / (d + 4)) * stats::cov(x)
    expect_equal(kde_gpu(x, backend = "cpu")$H, scott, tolerance = 1e-13,
                 ignore_attr = TRUE)
    expect_equal(kde_gpu(x, bw = "scott", backend = "cpu")$H, scott,
                 tolerance = 1e-13, ignore_attr = TRUE)
    q <- ref_queries(x, 20, seed = 70)
    expect_log_density_equal(predict(kde_gpu(x, backend = "cpu"), q, log = TRUE),
                             ref_log_density(x, q, scott, "gaussian"))
  }
})

test_that("1-D scalar bw is density()'s bw, for every kernel", {
  x <- c(-2, -0.5, 0, 0.1, 3)
  q <- seq(-8, 8, by = 0.013)
  for (k in ref_kernels) {
    fit <- kde_gpu(x, bw = 0.9, kernel = k, backend = "cpu")
    want <- rowMeans(outer(q, x, function(a, b) ref_density_kernel_1d(k, a - b, 0.9)))
    # 1e-9: near the support edge the closed forms cancel differently.
    expect_density_equal(predict(fit, q), want, tol = 1e-9, label = k)
  }
})

test_that("data frames, vectors and single points are accepted as documented", {
  x <- ref_data(50, 3, seed = 71)
  df <- as.data.frame(x)
  q <- ref_queries(x, 10, seed = 72)
  fit_m <- kde_gpu(x, bw = 0.7, backend = "cpu")
  fit_d <- kde_gpu(df, bw = 0.7, backend = "cpu")
  expect_identical(predict(fit_d, q), predict(fit_m, q))
  # A data frame's row names name the values, as in predict.lm().
  p_df <- predict(fit_m, as.data.frame(q))
  expect_identical(names(p_df), row.names(as.data.frame(q)))
  expect_identical(unname(p_df), predict(fit_m, q))
  # A vector of length d is one point when d > 1.
  one <- predict(fit_m, q[3, ])
  expect_length(one, 1)
  expect_identical(one, predict(fit_m, q[3, , drop = FALSE]))
  # A vector is a set of points in 1-D.
  fit1 <- kde_gpu(x[, 1], bw = 0.4, backend = "cpu")
  v <- predict(fit1, q[, 1])
  expect_length(v, nrow(q))
  expect_null(dim(v))
  expect_identical(v, predict(fit1, matrix(q[, 1])))
  expect_identical(predict(fit1, q[1, 1]), v[1])
})

test_that("log = FALSE is exp(log = TRUE) and both are plain vectors", {
  x <- ref_data(60, 2, seed = 73)
  q <- ref_queries(x, 30, seed = 74)
  for (k in c("gaussian", "triangular")) {
    fit <- kde_gpu(x, bw = 0.5, kernel = k, backend = "cpu")
    lp <- predict(fit, q, log = TRUE)
    p <- predict(fit, q)
    expect_null(dim(p))
    expect_null(attributes(lp))
    expect_equal(p, exp(lp), tolerance = 1e-14)
  }
})

test_that("far from the data: finite unbounded log densities, -Inf for compact", {
  bw <- 0.25
  fit <- kde_gpu(0, bw = bw, backend = "cpu")
  expect_equal(predict(fit, 1e3, log = TRUE),
               -0.5 * 1e6 / bw^2 - log(sqrt(2 * pi) * bw), tolerance = 1e-13)
  expect_identical(predict(fit, 1e3), 0)
  fit_e <- kde_gpu(0, bw = bw, kernel = "exponential", backend = "cpu")
  expect_equal(predict(fit_e, -1e4, log = TRUE),
               -log(sqrt(2) * bw) - sqrt(2) * 1e4 / bw, tolerance = 1e-13)
  # A mixture far away is dominated by the nearest point but not equal to it.
  x <- c(0, 1, 5)
  q <- c(-300, 250, 1e5)
  for (k in c("gaussian", "exponential")) {
    got <- predict(kde_gpu(x, bw = 0.5, kernel = k, backend = "cpu"), q,
                   log = TRUE)
    expect_true(all(is.finite(got)))
    expect_log_density_equal(got, ref_log_density(x, q, 0.25, k), label = k)
  }
  # Every query outside the support of every point: all -Inf, density 0.
  x3 <- ref_data(40, 3, seed = 75)
  far <- matrix(c(100, 0, 0, -50, 80, 1, 0, 0, 1e6), 3, 3, byrow = TRUE)
  for (k in ref_compact) {
    fit <- kde_gpu(x3, bw = 0.5, kernel = k, backend = "cpu")
    expect_identical(predict(fit, far, log = TRUE), rep(-Inf, 3), label = k)
    expect_identical(predict(fit, far), rep(0, 3), label = k)
  }
})

test_that("compact kernels: zero exactly outside the support, positive inside", {
  # Points on a line, bw chosen so that the support radius is known.
  for (k in ref_compact) {
    a <- ref_constants(k, 1)$a
    fit <- kde_gpu(0, bw = 1, kernel = k, backend = "cpu")
    expect_gt(predict(fit, 0.999 * a), 0)
    expect_identical(predict(fit, c(-1.001 * a, 1.001 * a, 1.5 * a)), c(0, 0, 0))
  }
})

test_that("zero weights drop their points; weights are normalised", {
  x <- ref_data(50, 2, seed = 76)
  q <- ref_queries(x, 25, seed = 77)
  w <- rep(c(0, 1, 3), length.out = 50)
  for (k in c("gaussian", "epanechnikov")) {
    fw <- kde_gpu(x, bw = 0.6, kernel = k, weights = w, backend = "cpu")
    fsub <- kde_gpu(x[w > 0, ], bw = 0.6, kernel = k, weights = w[w > 0],
                    backend = "cpu")
    expect_log_density_equal(predict(fw, q, log = TRUE),
                             predict(fsub, q, log = TRUE), tol = 1e-13)
    f10 <- kde_gpu(x, bw = 0.6, kernel = k, weights = 10 * w, backend = "cpu")
    expect_log_density_equal(predict(f10, q, log = TRUE),
                             predict(fw, q, log = TRUE), tol = 1e-13)
  }
  # Equal weights equal the unweighted fit.
  expect_log_density_equal(
    predict(kde_gpu(x, bw = 0.6, weights = rep(2, 50), backend = "cpu"), q,
            log = TRUE),
    predict(kde_gpu(x, bw = 0.6, backend = "cpu"), q, log = TRUE), tol = 1e-13)
})

test_that("duplicated training points and a single training point work", {
  x <- rbind(matrix(1, 5, 2), matrix(c(0, 2), 1))
  q <- rbind(c(1, 1), c(0, 2), c(0.5, 1.5))
  H <- matrix(c(0.3, 0.1, 0.1, 0.2), 2)
  for (k in ref_kernels) {
    fit <- kde_gpu(x, H = H, kernel = k, backend = "cpu")
    expect_log_density_equal(predict(fit, q, log = TRUE),
                             ref_log_density(x, q, H, k), label = k)
    fit1 <- kde_gpu(x[6, , drop = FALSE], H = H, kernel = k, backend = "cpu")
    expect_log_density_equal(predict(fit1, q, log = TRUE),
                             ref_log_density(x[6, , drop = FALSE], q, H, k),
                             label = k)
  }
})

test_that("backend = 'auto' falls back to the CPU without a GPU", {
  skip_if(has_gpu(), "a GPU is available")
  fit <- kde_gpu(ref_data(20, 2, seed = 78), backend = "auto")
  expect_identical(fit$backend, "cpu")
})

test_that("backend = 'cuda' without a usable GPU errors and says why", {
  skip_if(has_gpu(), "a GPU is available")
  x <- ref_data(20, 2, seed = 79)
  expect_error({
    fit <- kde_gpu(x, backend = "cuda")
    predict(fit)
  }, "CUDA|GPU|cuda|gpu")
})
