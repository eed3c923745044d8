# Conditional densities, predict(fit, newdata, given = ): against the
# plain-R ratio of the joint estimate and the estimate of the conditioning
# columns with H's block (helper-reference.R), on every backend.

test_that("given = gives f(x, y) / f_X(x) with H's block, on every backend", {
  set.seed(1201)
  x <- matrix(rnorm(3 * 150), ncol = 3, dimnames = list(NULL, c("a", "b", "c")))
  x[, 2] <- x[, 2] + 0.6 * x[, 1]
  w <- rexp(150)
  H <- ref_full_H(3, 0.5, seed = 1202)
  q <- ref_queries(x, 40, seed = 1203)
  colnames(q) <- colnames(x)
  for (be in eval_backends()) {
    for (weights in list(NULL, w)) {
      fit <- kde_on(be, x, H = H, weights = weights)
      lab <- be_label(be, if (is.null(weights)) "equal weights" else "weights")
      for (given in list("a", c("c", "a"), 2L)) {
        cols <- if (is.character(given)) match(given, colnames(x)) else given
        ref <- ref_log_density(x, q, H, "gaussian", weights) -
          ref_log_density(x[, cols, drop = FALSE], q[, cols, drop = FALSE],
                          H[cols, cols, drop = FALSE], "gaussian", weights)
        got <- predict(fit, q, log = TRUE, given = given)
        expect_log_density_equal(got, ref, tol = be$tol,
                                 label = paste(lab, "given", paste(given, collapse = ",")))
        expect_equal(predict(fit, q, given = given), exp(got), tolerance = 1e-14)
      }
    }
  }
})

test_that("given = leaves each training point out of both sums with leave_one_out", {
  set.seed(1211)
  x <- matrix(rnorm(2 * 80), ncol = 2)
  H <- diag(c(0.3, 0.2))
  for (be in eval_backends()) {
    fit <- kde_on(be, x, H = H)
    ref <- ref_loo_log_density(x, H, "gaussian") -
      ref_loo_log_density(x[, 1, drop = FALSE], H[1, 1, drop = FALSE], "gaussian")
    got <- predict(fit, log = TRUE, leave_one_out = TRUE, given = 1)
    expect_log_density_equal(got, ref, tol = be$tol, label = be_label(be, "leave one out"))
    # at the training points, not left out
    ref_in <- ref_log_density(x, x, H, "gaussian") -
      ref_log_density(x[, 1, drop = FALSE], x[, 1, drop = FALSE], H[1, 1, drop = FALSE],
                      "gaussian")
    expect_log_density_equal(predict(fit, log = TRUE, given = 1), ref_in, tol = be$tol,
                             label = be_label(be, "at the training points"))
  }
})

test_that("a conditional density integrates to 1 over the response", {
  set.seed(1221)
  x <- cbind(rnorm(200), rnorm(200))
  x[, 2] <- x[, 2] + x[, 1]^2
  fit <- kde_gpu(x, backend = "cpu")
  for (x0 in c(-1, 0, 1.5)) {
    density_y <- function(y) predict(fit, cbind(x0, y), given = 1)
    total <- stats::integrate(density_y, -Inf, Inf, rel.tol = 1e-10)$value
    expect_equal(total, 1, tolerance = 1e-8, label = paste("integral at x =", x0))
  }
})

test_that("an adaptive Gaussian fit's margin keeps its own factors", {
  set.seed(1231)
  x <- matrix(rexp(2 * 120), ncol = 2)
  q <- ref_queries(x, 20, seed = 1232)
  for (be in eval_backends()) {
    fit <- kde_on(be, x, adaptive = TRUE)
    lambda <- fit$adaptive$lambda
    w <- rep(1, nrow(x))
    ref <- ref_adaptive_log_density(x, q, fit$H, "gaussian", w, lambda) -
      ref_adaptive_log_density(x[, 2, drop = FALSE], q[, 2, drop = FALSE],
                               fit$H[2, 2, drop = FALSE], "gaussian", w, lambda)
    expect_log_density_equal(predict(fit, q, log = TRUE, given = 2), ref, tol = be$tol,
                             label = be_label(be, "adaptive"))
  }
})

test_that("given = refuses what it cannot compute exactly, naming the argument", {
  x <- matrix(rnorm(60), ncol = 3, dimnames = list(NULL, c("a", "b", "c")))
  fit <- kde_gpu(x, backend = "cpu")
  expect_error(predict(fit, x[1:2, ], given = "z"), "`given` names columns the data do not have: z")
  expect_error(predict(fit, x[1:2, ], given = c("a", "b", "c")),
               "`given` must leave at least one column to be the response")
  expect_error(predict(fit, x[1:2, ], given = 4), "`given` must be column numbers in 1..3")
  expect_error(predict(fit, x[1:2, ], given = c(1, 1)), "`given` names a column twice")
  expect_error(predict(fit, x[1:2, ], given = TRUE), "`given` must name the conditioning columns")
  expect_error(predict(fit, x[1:2, ], given = 1, type = "cdf"),
               "`given` must leave exactly one response column for type = \"cdf\"")
  expect_error(predict(fit, x[1:2, ], given = 1, leave_one_out = TRUE),
               "`leave_one_out` applies to the training points only")
  expect_error(predict(kde_gpu(x, kernel = "epanechnikov", backend = "cpu"), x[1:2, ], given = 1),
               "`given` needs a Gaussian fit: the margin of the epanechnikov kernel")
  expect_error(predict(kde_gpu(abs(x), lower = 0, backend = "cpu"), x[1:2, ], given = 1),
               "`given` does not apply to a bounded fit")
  # far from every x_i both sums are kept as logs: the nearest x_i's
  # conditional, not 0 / 0 (both logs are near -5e9, so their difference
  # keeps about 1e-6 in absolute terms)
  fit1 <- kde_gpu(cbind(c(0, 1), c(0, 1)), bw = 0.01, backend = "cpu")
  expect_equal(predict(fit1, cbind(1e3, 0), given = 1, log = TRUE),
               stats::dnorm(0, 1, 0.01, log = TRUE), tolerance = 1e-9)
})

test_that("bw_mlcv(given = ) maximises the leave-one-out conditional likelihood", {
  set.seed(1241)
  a <- rnorm(80)
  data <- cbind(a = a, b = a + rnorm(80, sd = 0.5))
  # sum_i log f_{-i}(b_i | a_i), from plain-R leave-one-out sums
  ref_criterion <- function(H) {
    sum(ref_loo_log_density(data, H, "gaussian") -
          ref_loo_log_density(data[, 1, drop = FALSE], H[1, 1, drop = FALSE], "gaussian"))
  }
  scaled <- function(H, k, f) {
    s <- rep(1, 2)
    s[k] <- f
    diag(s) %*% H %*% diag(s)
  }
  for (be in eval_backends()) {
    for (shape in c("scalar", "diagonal", "full")) {
      b <- bw_mlcv(data, shape = shape, given = "a", backend = be$backend,
                   precision = be$precision)
      H <- attr(b, "H")
      lab <- be_label(be, shape)
      expect_equal(attr(b, "criterion"), ref_criterion(H), tolerance = 100 * be$tol,
                   label = lab)
      expect_identical(attr(b, "given"), "a")
      # a maximum: 5% longer or shorter bandwidths have a lower likelihood
      steps <- if (shape == "scalar") list(1:2) else list(1L, 2L)
      for (k in steps) for (f in c(0.95, 1.05)) {
        expect_lt(ref_criterion(scaled(H, k, f)), ref_criterion(H),
                  label = paste(lab, "step", paste(k, collapse = ","), f))
      }
    }
  }
  expect_output(print(b), "for the conditional density given a")
})

test_that("bw_mlcv(given = ) refuses what it cannot compute exactly, naming the argument", {
  x <- cbind(a = rnorm(30), b = rnorm(30))
  expect_error(bw_mlcv(x, given = "z", backend = "cpu"),
               "`given` names columns the data do not have: z")
  expect_error(bw_mlcv(x, given = 1:2, backend = "cpu"),
               "`given` must leave at least one column to be the response")
  expect_error(bw_mlcv(x, given = 1, kernel = "biweight", backend = "cpu"),
               "`given` needs kernel = \"gaussian\"")
  expect_error(bw_mlcv(abs(x), given = 1, lower = 0, backend = "cpu"),
               "`given` does not apply with `lower` or `upper`")
})

# F(y | x) by its definition: the joint's terms at x, weighting each
# point's normal CDF of y given x (H's conditional mean and variance).
ref_conditional_cdf <- function(x, q, H, given, weights = NULL, lambda = NULL) {
  n <- nrow(x)
  w <- if (is.null(weights)) rep(1 / n, n) else weights / sum(weights)
  lambda <- if (is.null(lambda)) rep(1, n) else lambda
  response <- setdiff(seq_len(ncol(x)), given)
  Hxx <- H[given, given, drop = FALSE]
  B <- solve(Hxx, H[given, response])
  s2 <- H[response, response] - sum(B * H[given, response])
  vapply(seq_len(nrow(q)), function(i) {
    dx <- sweep(x[, given, drop = FALSE], 2L, q[i, given]) * -1
    log_a <- log(w) - length(given) * log(lambda) -
      0.5 * rowSums((dx %*% solve(Hxx)) * dx) / lambda^2
    mu <- x[, response] + drop(dx %*% B)
    log_cdf <- stats::pnorm(q[i, response], mu, sqrt(s2) * lambda, log.p = TRUE)
    top <- max(log_a)
    sum(exp(log_a - top + log_cdf)) / sum(exp(log_a - top))
  }, 0)
}

test_that("type = \"cdf\" with given is the conditional CDF, far queries and adaptive fits too", {
  set.seed(1231)
  x <- matrix(rnorm(3 * 200), ncol = 3, dimnames = list(NULL, c("a", "b", "c")))
  x[, 3] <- x[, 3] + x[, 1] * x[, 2]
  H <- ref_full_H(3, 0.4, seed = 1232)
  w <- rexp(200)
  q <- rbind(ref_queries(x, 20, seed = 1233), c(30, 0, 1), c(-2, 0, 10))
  colnames(q) <- colnames(x)
  for (be in eval_backends()) {
    fit <- kde_on(be, x, H = H, weights = w)
    for (given in list(c("a", "b"), c(1L, 3L), c("c", "b"))) {
      cols <- if (is.character(given)) match(given, colnames(x)) else given
      ref <- ref_conditional_cdf(x, q, H, cols, w)
      got <- predict(fit, q, type = "cdf", given = given)
      expect_equal(unname(got), ref, tolerance = 1e-12,
                   label = be_label(be, "conditional cdf given", paste(given, collapse = ",")))
    }
  }
  fit_a <- kde_gpu(x, H = H, adaptive = TRUE, backend = "cpu")
  expect_equal(unname(predict(fit_a, q, type = "cdf", given = 1:2)),
               ref_conditional_cdf(x, q, H, 1:2, lambda = fit_a$adaptive$lambda),
               tolerance = 1e-12)
  # the integral of the conditional density
  fit <- kde_gpu(x, H = H, backend = "cpu")
  density_c <- function(y) predict(fit, cbind(a = 0.3, b = -0.2, c = y), given = c("a", "b"))
  expect_equal(predict(fit, cbind(a = 0.3, b = -0.2, c = 0.4), type = "cdf", given = 1:2),
               stats::integrate(density_c, -Inf, 0.4, rel.tol = 1e-12)$value, tolerance = 1e-9)
  ends <- predict(fit, cbind(a = 0, b = 0, c = c(-Inf, Inf)), type = "cdf", given = 1:2)
  expect_identical(unname(ends), c(0, 1))
})

test_that("quantile(given = ) inverts the conditional CDF", {
  fit <- kde_gpu(faithful, backend = "cpu")
  probs <- c(0.01, 0.25, 0.5, 0.9)
  at <- data.frame(eruptions = c(1.8, 3.2, 4.6), row.names = c("short", "mid", "long"))
  qs <- quantile(fit, probs, given = at)
  expect_identical(dim(qs), c(3L, 4L))
  expect_identical(dimnames(qs), list(c("short", "mid", "long"), c("1%", "25%", "50%", "90%")))
  back <- predict(fit, cbind(eruptions = rep(at$eruptions, 4), waiting = as.vector(qs)),
                  type = "cdf", given = "eruptions")
  expect_equal(back, rep(probs, each = 3), tolerance = 1e-9)
  expect_true(all(apply(qs, 1, diff) > 0))
  ends <- quantile(fit, c(0, 1), given = c(eruptions = 3), names = FALSE)
  expect_identical(unname(ends), matrix(c(-Inf, Inf), 1L))
})

test_that("the conditional CDF and quantiles refuse what they cannot compute, naming it", {
  x <- as.matrix(faithful)
  fit <- kde_gpu(x, backend = "cpu")
  three <- kde_gpu(cbind(x, z = rnorm(nrow(x))), backend = "cpu")
  expect_error(predict(three, type = "cdf", given = "eruptions"),
               "`given` must leave exactly one response column for type = \"cdf\"")
  expect_error(predict(fit, x[1:2, ], type = "cdf", given = 1, log = TRUE),
               "`log` applies to type = \"density\", not \"cdf\"")
  expect_error(predict(fit, cbind(eruptions = Inf, waiting = 60), type = "cdf", given = 1),
               "`newdata` must have finite values in the conditioning")
  expect_error(predict(fit, x[1:2, ], type = "gradient", given = 1),
               "`given` applies to type = \"density\" or \"cdf\", not \"gradient\"")
  expect_error(quantile(kde_gpu(x, kernel = "epanechnikov", backend = "cpu"), 0.5,
                        given = data.frame(eruptions = 3)),
               "`given` needs a Gaussian fit")
  expect_error(quantile(fit, 0.5, given = data.frame(nope = 3)),
               "`given` names columns the data do not have: nope")
  expect_error(quantile(fit, 0.5, given = data.frame(eruptions = NA_real_)),
               "`given` must hold finite numbers")
  expect_error(quantile(fit, 0.5), "`x` must be a 1-D fit for quantile\\(\\), not 2-D")
})

test_that("CUDA: the conditional CDF on several GPUs and in batches is one GPU's bits", {
  skip_without_gpu()
  set.seed(1241)
  x <- matrix(rnorm(3 * 3000), ncol = 3, dimnames = list(NULL, c("a", "b", "c")))
  H <- ref_full_H(3, 0.3, seed = 1242)
  q <- ref_queries(x, 5000, seed = 1243)
  colnames(q) <- colnames(x)
  fit <- kde_gpu(x, H = H, backend = "cuda")
  cdf_with <- function(devices, budget) {
    with_kde_options(list(kdegpu.devices = devices, kdegpu.gpu_memory = budget),
                     predict(fit, q, type = "cdf", given = c("a", "c")))
  }
  one <- cdf_with(0L, NULL)
  expect_equal(unname(one), ref_conditional_cdf(x, q, H, c(1L, 3L)), tolerance = 1e-12)
  expect_identical(cdf_with(several_gpus(), NULL), one)
  # a budget that holds the points and a few hundred queries at a time
  expect_identical(cdf_with(several_gpus(), 3000 * 6 * 8 + 2e4), one)
  qs <- with_kde_options(list(kdegpu.devices = several_gpus()),
                         quantile(fit, c(0.2, 0.8), given = q[1:50, c("a", "c")]))
  expect_equal(qs, quantile(kde_gpu(x, H = H, backend = "cpu"), c(0.2, 0.8),
                            given = q[1:50, c("a", "c")]), tolerance = 1e-10)
})
