# The fitted object and the inputs kde_gpu() and predict() accept, on the
# CPU backend. How well the backends evaluate the density is checked in
# test-evaluation.R, on every backend.

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
  # (test-evaluation.R checks that the density uses these bandwidths.)
  for (d in c(2, 3, 5)) {
    x <- ref_data(120, d, seed = 64 + d)
    scott <- nrow(x)^(-2 / (d + 4)) * stats::cov(x)
    expect_equal(kde_gpu(x, backend = "cpu")$H, scott, tolerance = 1e-13,
                 ignore_attr = TRUE)
    expect_equal(kde_gpu(x, bw = "scott", backend = "cpu")$H, scott,
                 tolerance = 1e-13, ignore_attr = TRUE)
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

test_that("backend = 'auto' falls back to the CPU without a GPU", {
  skip_if(has_gpu(), "a GPU is available")
  fit <- kde_gpu(ref_data(20, 2, seed = 78), backend = "auto")
  expect_identical(fit$backend, "cpu")
})

test_that("backend = 'cuda' without a usable GPU errors and says why", {
  skip_if(has_gpu(), "a GPU is available")
  x <- ref_data(20, 2, seed = 79)
  # kde_gpu() itself refuses, and gives the reason after the colon.
  expect_error(kde_gpu(x, backend = "cuda"),
               "`backend = \"cuda\"` needs a usable GPU: [[:alnum:]]")
})

test_that("single precision with weights below float's range computes in double, and says so", {
  # (the decision, made in R at fit time; the GPU stores a compact kernel's
  # weights as floats, where 1e-300 is 0)
  w <- c(1, 1e-300, 1e-300) / (1 + 2e-300)
  decide <- kdegpu:::fit_precision
  for (kernel in c("epanechnikov", "rectangular", "triangular", "biweight", "cosine",
                   "optcosine")) {
    expect_warning(precision <- decide("single", kernel, w, "cuda"),
                   "`precision = \"single\"` cannot hold these `weights`.*double precision instead")
    expect_identical(precision, "double")
  }
  # the Gaussian and exponential carry log-weights, which float holds
  expect_identical(expect_silent(decide("single", "gaussian", w, "cuda")), "single")
  expect_identical(expect_silent(decide("single", "exponential", w, "cuda")), "single")
  # weights float holds, double precision, and the CPU (always double) are left alone
  expect_identical(expect_silent(decide("single", "epanechnikov", c(0.5, 0.5 - 1e-30, 1e-30), "cuda")),
                   "single")
  expect_identical(expect_silent(decide("double", "epanechnikov", w, "cuda")), "double")
  expect_identical(expect_silent(decide("single", "epanechnikov", w, "cpu")), "single")
  expect_silent(kde_gpu(c(1, 2, 3), bw = 1, kernel = "epanechnikov", weights = c(1, 1e-300, 1e-300),
                        precision = "single", backend = "cpu"))
})
