# predict(type = "cdf") and quantile(): closed-form integrated kernels,
# checked against numerical integration of predict(), against sums of
# pnorm() and against ks::kcde(); the GPU's sums against the CPU's.

cdf_data <- function(n = 25, seed = 1) {
  set.seed(seed)
  list(x = c(rnorm(n - 5), 3 + rexp(5)), w = runif(n))
}

test_that("the CDF is the integral of the density for every kernel, weighted", {
  dat <- cdf_data()
  for (kernel in ref_kernels) {
    fit <- kde_gpu(dat$x, bw = 0.6, kernel = kernel, weights = dat$w, backend = "cpu")
    q <- c(-1.5, -0.2, 0.4, 2, 4.3)
    cdf <- predict(fit, q, type = "cdf")
    # from the left end of the support, pieces split at the data and at
    # the edges of the compact kernels' support, where the density kinks
    start <- min(dat$x) - 12
    reach <- 0.6 * kdegpu:::kernel_constants(kernel, 1L)$scale
    kinks <- c(dat$x, dat$x - reach, dat$x + reach)
    # q is sorted: each integral extends the previous one
    ends <- c(start, q)
    integral <- cumsum(vapply(seq_along(q), function(i) {
      a <- ends[i]
      b <- ends[i + 1L]
      knots <- sort(unique(c(a, kinks[kinks > a & kinks < b], b)))
      sum(vapply(seq_len(length(knots) - 1L), function(k) {
        integrate(function(t) predict(fit, t), knots[k], knots[k + 1L],
                  rel.tol = 1e-10, abs.tol = 1e-14, subdivisions = 500L)$value
      }, 0))
    }, 0))
    expect_lt(max(abs(cdf - integral)), 1e-9, label = paste(kernel, "CDF vs integrate()"))
    grid <- seq(min(dat$x) - 8, max(dat$x) + 8, length.out = 400)
    values <- predict(fit, grid, type = "cdf")
    expect_true(all(values >= 0 & values <= 1), label = paste(kernel, "in [0, 1]"))
    expect_true(all(diff(values) >= -1e-15), label = paste(kernel, "non-decreasing"))
    expect_equal(predict(fit, c(-Inf, Inf), type = "cdf"), c(0, 1))
  }
})

test_that("the Gaussian CDF is the weighted mean of pnorm(), far into the tails", {
  dat <- cdf_data()
  w <- dat$w / sum(dat$w)
  fit <- kde_gpu(dat$x, bw = 0.4, weights = dat$w, backend = "cpu")
  q <- c(min(dat$x) - c(10, 5, 1), 0.1, max(dat$x) + 1)
  expected <- vapply(q, function(u) sum(w * pnorm(u, dat$x, 0.4)), 0)
  got <- predict(fit, q, type = "cdf")
  expect_lt(max(abs(got / expected - 1)), 1e-13) # relative, also at 1e-138
  upper <- vapply(q, function(u) sum(w * pnorm(u, dat$x, 0.4, lower.tail = FALSE)), 0)
  expect_lt(abs(1 - got[5] - upper[5]), 1e-15)
})

test_that("the Gaussian CDF with a diagonal H in 2-D is a sum of pnorm() products", {
  set.seed(3)
  x <- cbind(a = rnorm(40), b = rnorm(40, 2))
  w <- runif(40)
  fit <- kde_gpu(x, bw = c(0.5, 0.8), weights = w, backend = "cpu")
  q <- rbind(c(0, 2), c(-1, 1), c(1.5, 4), c(-Inf, 3), c(Inf, 2))
  w <- w / sum(w)
  expected <- apply(q, 1, function(p) sum(w * pnorm(p[1], x[, 1], 0.5) * pnorm(p[2], x[, 2], 0.8)))
  expect_equal(unname(predict(fit, q, type = "cdf")), expected, tolerance = 1e-13)
  expect_error(predict(kde_gpu(x, backend = "cpu"), q, type = "cdf"),
               "needs a 1-D fit, or in d > 1 the Gaussian kernel with a diagonal H")
  expect_error(predict(kde_gpu(x, bw = 1, kernel = "epan", backend = "cpu"), q, type = "cdf"),
               "epanechnikov kernel")
})

test_that("small CDF values near a compact kernel's edge keep their relative accuracy", {
  for (kernel in ref_compact) {
    fit <- kde_gpu(0, bw = 1, kernel = kernel, backend = "cpu")
    a <- kdegpu:::kernel_constants(kernel, 1L)$scale
    for (delta in c(1e-2, 1e-4)) {
      tail <- integrate(function(t) predict(fit, t), -a, -a + delta * a, rel.tol = 1e-10,
                        abs.tol = 0)$value
      expect_lt(abs(predict(fit, -a + delta * a, type = "cdf") / tail - 1), 1e-9,
                label = paste(kernel, delta))
      # near 1 a double holds the upper tail to its spacing, 1.1e-16
      expect_lt(abs(1 - predict(fit, a - delta * a, type = "cdf") - tail), 3e-16,
                label = paste(kernel, delta, "upper"))
    }
  }
})

test_that("the CDF agrees with ks::kcde() to its grid's resolution", {
  skip_if_not_installed("ks")
  x <- faithful$eruptions
  fit <- kde_gpu(x, bw = 0.3, backend = "cpu")
  q <- c(1.8, 2.5, 3.5, 4.4, 5)
  ks_cdf <- ks::kcde(x, h = 0.3, binned = FALSE, eval.points = q, gridsize = 2001)$estimate
  # kcde sums the density on its grid (a Riemann sum), kdegpu integrates
  # in closed form: they agree to the grid's step times the density
  expect_lt(max(abs(predict(fit, q, type = "cdf") - ks_cdf)), 2e-3)
})

test_that("a fit on any backend gives the same CDF (computed on the CPU)", {
  dat <- cdf_data()
  cpu <- predict(kde_gpu(dat$x, bw = 0.5, backend = "cpu"), c(-1, 0, 1), type = "cdf")
  for (be in eval_backends()) {
    fit <- kde_on(be, dat$x, bw = 0.5)
    expect_equal(predict(fit, c(-1, 0, 1), type = "cdf"), cpu, tolerance = 1e-14,
                 label = be_label(be, "CDF"))
  }
})

test_that("a CUDA fit's CDF, summed on the GPU, equals the CPU's sums", {
  skip_without_gpu()
  set.seed(11)
  # 6000 points: the GPU splits every query's sum over 24 ranges of points
  x <- c(rexp(5000), 8 + rnorm(1000))
  w <- runif(6000)
  same <- function(args, q, label, tol = 1e-12) {
    cpu <- predict(do.call(kde_gpu, c(args, backend = "cpu")), q, type = "cdf")
    for (precision in c("double", "single")) {
      gpu <- predict(do.call(kde_gpu, c(args, backend = "cuda", precision = precision)),
                     q, type = "cdf")
      # relative, also where the CDF is 1e-200 (the sums are in double either way)
      err <- ifelse(cpu == 0, abs(gpu), abs(gpu / cpu - 1))
      expect_lt(max(err), tol, label = paste(label, precision))
    }
  }
  q <- c(-Inf, -30, -0.3, 0, 0.2, 1, 4, 8.5, 15, Inf)
  for (kernel in ref_kernels) {
    same(list(x = x, bw = 0.4, kernel = kernel, weights = w), q, kernel)
  }
  # reflection at a bound (0 below it), two bounds, an adaptive fit
  same(list(x = x, bw = 0.4, weights = w, lower = 0), q, "lower bound")
  same(list(x = x, bw = 0.4, kernel = "biweight", lower = 0, upper = 12), q, "two bounds")
  # (its factors come from each backend's pilot, equal to about 1e-12)
  same(list(x = x, bw = 0.4, adaptive = TRUE), q, "adaptive", tol = 1e-10)
  # the Gaussian with a diagonal H in 3-D, one query far in the tail
  X <- cbind(x, rnorm(6000), runif(6000))
  Q <- rbind(c(1, 0, 0.5), c(-5, -3, 0.1), c(Inf, Inf, Inf), c(20, 2, Inf), c(0.5, -Inf, 1))
  same(list(x = X, bw = c(0.5, 0.3, 0.1), weights = w), Q, "3-D diagonal")
  # a single query (a quantile's bisection) and quantile() itself
  fit <- kde_gpu(x, bw = 0.4, backend = "cuda")
  expect_equal(quantile(fit, c(0.01, 0.5, 0.99)),
               quantile(kde_gpu(x, bw = 0.4, backend = "cpu"), c(0.01, 0.5, 0.99)),
               tolerance = 1e-12)
})

test_that("a CUDA fit's CDF is the same bits under any budget and on two copies", {
  skip_without_gpu()
  set.seed(12)
  x <- c(rexp(5000), 8 + rnorm(5000))
  q <- seq(-1, 12, length.out = 1001)
  fit <- kde_gpu(x, bw = 0.3, backend = "cuda")
  ref <- predict(fit, q, type = "cdf")
  # 2e5 bytes: the points (160 kB) stream in shards of whole splits, the
  # queries in batches of a few hundred
  small <- with_kde_options(list(kdegpu.gpu_memory = 2e5), predict(fit, q, type = "cdf"))
  expect_identical(small, ref)
  two <- with_kde_options(list(kdegpu.devices = c(0L, 0L)), predict(fit, q, type = "cdf"))
  expect_identical(two, ref)
  both <- with_kde_options(list(kdegpu.devices = c(0L, 0L), kdegpu.gpu_memory = 2e5),
                           predict(fit, q[1:3], type = "cdf"))
  expect_identical(both, ref[1:3])
})

test_that("quantile() inverts the CDF for every kernel", {
  dat <- cdf_data()
  probs <- c(0, 1e-6, 0.1, 0.5, 0.9, 1)
  for (kernel in ref_kernels) {
    fit <- kde_gpu(dat$x, bw = 0.6, kernel = kernel, weights = dat$w, backend = "cpu")
    qs <- quantile(fit, probs)
    expect_named(qs, c("0%", "1e-04%", "10%", "50%", "90%", "100%"))
    inner <- 2:5
    expect_lt(max(abs(predict(fit, qs[inner], type = "cdf") - probs[inner])), 1e-10,
              label = paste(kernel, "F(quantile) - p"))
    expect_true(all(diff(qs) > 0))
    if (kernel %in% c("gaussian", "exponential")) {
      expect_equal(unname(qs[c(1, 6)]), c(-Inf, Inf))
    } else {
      reach <- 0.6 * kdegpu:::kernel_constants(kernel, 1L)$scale
      expect_equal(unname(qs[c(1, 6)]), c(min(dat$x) - reach, max(dat$x) + reach))
    }
  }
  expect_equal(unname(quantile(kde_gpu(0, bw = 1, backend = "cpu"), 0.975)), qnorm(0.975),
               tolerance = 1e-10)
})

test_that("type, quantile() and their arguments are checked", {
  fit <- kde_gpu(faithful$eruptions, backend = "cpu")
  expect_error(predict(fit, 2, type = "survival"),
               "`type` must be one of \"density\", \"cdf\", \"gradient\", \"hessian\"")
  expect_error(predict(fit, 2, type = "cdf", log = TRUE), "`log` applies to type = \"density\"")
  expect_error(predict(fit, type = "cdf", leave_one_out = TRUE),
               "`leave_one_out` applies to type = \"density\"")
  expect_error(predict(fit, NA_real_, type = "cdf"), "`newdata` must not contain NA")
  expect_equal(predict(fit, 2, type = "d"), predict(fit, 2))
  expect_error(quantile(fit, 1.5), "`probs` must be shares of probability")
  expect_error(quantile(fit, 0.5, type = 7), "quantile\\(\\) got unknown argument `type`")
  expect_error(quantile(kde_gpu(faithful, backend = "cpu"), 0.5), "`x` must be a 1-D fit")
  expect_named(predict(fit, c(a = 2, b = 3), type = "cdf"), c("a", "b"))
})
