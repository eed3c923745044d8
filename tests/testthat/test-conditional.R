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
               "`given` applies to type = \"density\", not \"cdf\"")
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
