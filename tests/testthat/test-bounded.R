# Bounded support (kde_gpu(lower =, upper =)): the reflection estimator,
# checked against a plain-R reference that mirrors the *data* (with the
# mirrored kernel) rather than the queries, against integration to 1, and
# through every method that must honour the bounds.

# log f at the rows of q of the reflection estimator, from the data's
# mirror images: per column, x -> 2L - x for one bound, and for two bounds
# x -> x + 2kW and 2L - x + 2kW (|k| <= n_fold); every combination over the
# columns, each image with the point's weight and the kernel covariance
# S H S (S: the image's signs). -Inf outside the box.
ref_reflect_log_density <- function(x, q, H, kernel, weights = NULL, lower, upper,
                                    n_fold = 30) {
  x <- ref_as_matrix(x)
  d <- ncol(x)
  q <- ref_as_matrix(q, d)
  H <- as.matrix(H)
  maps <- lapply(seq_len(d), function(c) {
    L <- lower[c]
    U <- upper[c]
    if (is.finite(L) && is.finite(U)) {
      k <- -n_fold:n_fold
      W <- U - L
      data.frame(sign = rep(c(1, -1), each = length(k)), shift = c(2 * k * W, 2 * L + 2 * k * W))
    } else if (is.finite(L)) {
      data.frame(sign = c(1, -1), shift = c(0, 2 * L))
    } else if (is.finite(U)) {
      data.frame(sign = c(1, -1), shift = c(0, 2 * U))
    } else {
      data.frame(sign = 1, shift = 0)
    }
  })
  combos <- as.matrix(expand.grid(lapply(maps, function(m) seq_len(nrow(m)))))
  inside <- rep(TRUE, nrow(q))
  for (c in seq_len(d)) inside <- inside & q[, c] >= lower[c] & q[, c] <= upper[c]
  out <- rep(-Inf, nrow(q))
  if (!any(inside)) return(out)
  parts <- sapply(seq_len(nrow(combos)), function(r) {
    s <- vapply(seq_len(d), function(c) maps[[c]]$sign[combos[r, c]], 0)
    t <- vapply(seq_len(d), function(c) maps[[c]]$shift[combos[r, c]], 0)
    mirrored <- x * rep(s, each = nrow(x)) + rep(t, each = nrow(x))
    ref_log_density(mirrored, q[inside, , drop = FALSE], diag(s, d) %*% H %*% diag(s, d),
                    kernel, weights)
  })
  parts <- matrix(parts, sum(inside))
  out[inside] <- apply(parts, 1, ref_log_sum_exp)
  out
}

# Leave-one-out: the point and all its images left out.
ref_reflect_loo <- function(x, H, kernel, weights, lower, upper) {
  x <- ref_as_matrix(x)
  vapply(seq_len(nrow(x)), function(i) {
    ref_reflect_log_density(x[-i, , drop = FALSE], x[i, , drop = FALSE], H, kernel,
                            weights[-i], lower, upper)
  }, 0)
}

# The integral of a 1-D fit's density over [from, to], in pieces between
# the folded edges of the kernels' support and the folded data, where a
# compact kernel's folded density kinks or jumps.
integrate_fit <- function(fit, from, to) {
  reach <- fit$bw * kdegpu:::kernel_constants(fit$kernel, 1L)$scale
  kinks <- c(fit$x, fit$x - reach, fit$x + reach)
  if (all(is.finite(c(fit$lower, fit$upper)))) {
    kinks <- kdegpu:::fold_points(matrix(kinks), fit$lower, fit$upper)[, 1]
  }
  knots <- sort(unique(c(from, kinks[kinks > from & kinks < to], to)))
  sum(vapply(seq_len(length(knots) - 1L), function(k) {
    integrate(function(t) predict(fit, t), knots[k], knots[k + 1L], rel.tol = 1e-10,
              abs.tol = 1e-14, subdivisions = 500L)$value
  }, 0))
}

test_that("bad bounds and data outside them are errors naming the argument", {
  expect_error(kde_gpu(precip, lower = c(0, 1), backend = "cpu"),
               "`lower` must be one number, or one per column \\(1\\)")
  expect_error(kde_gpu(precip, lower = NA, backend = "cpu"), "`lower` must be one number")
  expect_error(kde_gpu(precip, upper = "100", backend = "cpu"), "`upper` must be one number")
  expect_error(kde_gpu(precip, lower = Inf, backend = "cpu"), "`lower` cannot be Inf")
  expect_error(kde_gpu(precip, upper = -Inf, backend = "cpu"), "`upper` cannot be -Inf")
  expect_error(kde_gpu(precip, lower = 10, upper = 10, backend = "cpu"),
               "`lower` must be below `upper` in every column \\(column 1: 10 >= 10\\)")
  expect_error(kde_gpu(precip, lower = 10, backend = "cpu"),
               "`x` has values below `lower` in column 1 \\(7 < 10\\)")
  expect_error(kde_gpu(faithful, upper = c(Inf, 90), backend = "cpu"),
               "`x` has values above `upper` in column waiting \\(96 > 90\\)")
  expect_error(kde_gpu(precip, bw = "lscv", lower = 0, backend = "cpu"),
               "`bw` = \"lscv\" scores an unbounded estimate; with `lower` or `upper` give \"mlcv\"")
  expect_error(bw_mlcv(precip, lower = 10, backend = "cpu"),
               "`x` has values below `lower` in column 1 \\(7 < 10\\)")
  expect_error(kde_gpu(precip, bw = 1, lower = 0, upper = 60, backend = "cpu"),
               "`x` has values above `upper` in column 1 \\(67 > 60\\)")
  expect_error(kde_gpu(c(0.1, 0.2), bw = 100, kernel = "exponential", lower = 0, upper = 0.3,
                       backend = "cpu"), "`lower` and `upper` need .* reflected images")
})

test_that("1-D: the reflection estimator, 0 outside, integrating to 1 (precip, rivers)", {
  set.seed(2)
  w <- runif(length(precip))
  q <- c(-0.5, 0, 0.3, 5, 30, 67, 120)
  for (be in eval_backends()) {
    for (kernel in c("gaussian", "epanechnikov", "exponential")) {
      fit <- kde_on(be, precip, bw = 4, kernel = kernel, weights = w, lower = 0)
      expected <- ref_reflect_log_density(precip, q, 16, kernel, w, 0, Inf)
      expect_log_density_equal(predict(fit, q, log = TRUE), expected, be$tol,
                               label = be_label(be, kernel, "one bound"))
      expect_identical(predict(fit, -1e-12), 0)
    }
  }
  for (data in list(precip, rivers)) {
    fit <- kde_gpu(data, lower = 0, backend = "cpu")
    top <- max(data) + 12 * fit$bw
    total <- integrate(function(t) predict(fit, t), 0, top, rel.tol = 1e-10,
                       subdivisions = 1000L)$value
    expect_equal(total, 1, tolerance = 1e-8)
  }
})

test_that("1-D with two bounds: repeated folding, also when the kernel spans the box", {
  set.seed(3)
  x <- precip[1:30]
  w <- runif(30)
  q <- c(0, 0.5, 20, 40, 69.9, 70, 70.1)
  cases <- list(list(kernel = "gaussian", bw = 25), list(kernel = "biweight", bw = 30),
                list(kernel = "rectangular", bw = 5), list(kernel = "exponential", bw = 8))
  for (case in cases) {
    fit <- kde_gpu(x, bw = case$bw, kernel = case$kernel, weights = w, lower = 0,
                   upper = 70, backend = "cpu")
    expected <- ref_reflect_log_density(x, q, case$bw^2, case$kernel, w, 0, 70)
    expect_log_density_equal(predict(fit, q, log = TRUE), expected, 1e-12,
                             label = paste(case$kernel, "two bounds"))
    expect_equal(integrate_fit(fit, 0, 70), 1, tolerance = 1e-8,
                 label = paste(case$kernel, "integral"))
  }
  # an upper bound alone
  fit <- kde_gpu(-precip, bw = 3, upper = -7, backend = "cpu")
  expect_log_density_equal(predict(fit, c(-80, -7, -6), log = TRUE),
                           ref_reflect_log_density(-precip, c(-80, -7, -6), 9, "gaussian",
                                                   NULL, -Inf, -7), 1e-12)
})

test_that("2-D: diagonal and full H, integrating to 1 on a fine grid", {
  x <- as.matrix(faithful)
  lower <- c(1.5, 40)
  q <- rbind(c(1.5, 40), c(2, 50), c(4, 80), c(1.4, 60), c(3, 39))
  for (be in eval_backends()) {
    for (H in list(diag(c(0.3, 6)^2), matrix(c(0.09, 0.9, 0.9, 36), 2))) {
      fit <- kde_on(be, x, H = H, lower = lower)
      expect_log_density_equal(predict(fit, q, log = TRUE),
                               ref_reflect_log_density(x, q, H, "gaussian", NULL, lower, c(Inf, Inf)),
                               be$tol, label = be_label(be, "2-D bounded"))
    }
  }
  for (H in list(diag(c(0.3, 6)^2), matrix(c(0.09, 0.9, 0.9, 36), 2))) {
    fit <- kde_gpu(x, H = H, kernel = "epanechnikov", lower = lower, upper = c(5.2, 100),
                   backend = "cpu")
    g <- kde_grid(fit, n = c(300, 300), lims = c(1.5, 5.2, 40, 100))
    step <- c(3.7, 60) / 299
    # the trapezoid rule on the grid
    z <- matrix(g$density, 300)
    wt <- outer(c(0.5, rep(1, 298), 0.5), c(0.5, rep(1, 298), 0.5))
    expect_equal(sum(z * wt) * prod(step), 1, tolerance = 2e-3)
  }
})

test_that("leave-one-out and logLik leave out a point with its mirror images", {
  set.seed(4)
  x <- precip[1:30]
  w <- runif(30)
  for (be in eval_backends()) {
    fit <- kde_on(be, x, bw = 12, kernel = "gaussian", weights = w, lower = 0, upper = 70)
    expected <- ref_reflect_loo(x, 144, "gaussian", w, 0, 70)
    loo <- unname(predict(fit, log = TRUE, leave_one_out = TRUE))
    expect_log_density_equal(loo, expected, be$tol, label = be_label(be, "bounded loo"))
    expect_equal(as.numeric(logLik(fit)), ref_loo_loglik(x, 144, "gaussian", w, expected),
                 tolerance = max(1e-10, be$tol), label = be_label(be, "bounded logLik"))
  }
  x2 <- as.matrix(faithful[1:25, ])
  fit <- kde_gpu(x2, bw = c(0.4, 5), kernel = "biweight", lower = c(1.5, 40), backend = "cpu")
  expect_log_density_equal(unname(predict(fit, log = TRUE, leave_one_out = TRUE)),
                           ref_reflect_loo(x2, diag(c(0.4, 5)^2), "biweight", rep(1, 25),
                                           c(1.5, 40), c(Inf, Inf)), 1e-12)
})

test_that("the CDF of a bounded fit: 0 below, 1 from the upper bound, the density's integral", {
  x <- precip[1:12]
  for (kernel in c("gaussian", "triangular")) {
    fit <- kde_gpu(x, bw = 15, kernel = kernel, weights = seq_along(x), lower = 0, upper = 70,
                   backend = "cpu")
    q <- c(-1, 0, 10, 35, 69, 70, 71)
    cdf <- predict(fit, q, type = "cdf")
    expect_equal(cdf[c(1, 2, 6, 7)], c(0, 0, 1, 1))
    integral <- vapply(q[3:5], function(b) integrate_fit(fit, 0, b), 0)
    expect_lt(max(abs(cdf[3:5] - integral)), 1e-9, label = kernel)
    qs <- quantile(fit, c(0, 0.3, 1))
    expect_equal(unname(qs[c(1, 3)]), c(0, 70))
    expect_lt(abs(predict(fit, qs[2], type = "cdf") - 0.3), 1e-10)
  }
})

test_that("draws stay within the bounds and follow the folded CDF", {
  fit <- kde_gpu(precip, bw = 15, lower = 0, upper = 70, backend = "cpu")
  set.seed(5)
  draws <- sample(fit, 4000)
  expect_true(all(draws >= 0 & draws <= 70))
  expect_gt(suppressWarnings(ks.test(draws, function(q) predict(fit, q, type = "cdf")))$p.value,
            1e-3)
  fit2 <- kde_gpu(faithful, bw = c(0.5, 8), lower = c(1.5, 40), upper = c(Inf, 100),
                  backend = "cpu")
  draws2 <- sample(fit2, 2000)
  expect_true(all(draws2[, 1] >= 1.5 & draws2[, 2] >= 40 & draws2[, 2] <= 100))
  expect_equal(dim(draws2), c(2000L, 2L))
})

test_that("print, grids and plots stay within the bounds", {
  fit <- kde_gpu(precip, lower = 0, backend = "cpu")
  expect_output(print(fit), "support:   \\[0, Inf\\] \\(reflection, 2 images\\)")
  expect_output(print(summary(fit)), "support:")
  expect_output(print(kde_gpu(precip, backend = "cpu")), "support", fixed = TRUE) |>
    expect_failure()
  expect_equal(min(kde_grid(fit)$x), 0)
  expect_equal(as.density(fit)$x[1], 0)
  fit2 <- kde_gpu(faithful, bw = c(0.3, 5), lower = c(1.5, 40), backend = "cpu")
  expect_output(print(fit2), "eruptions \\[1.5, Inf\\], waiting \\[40, Inf\\]")
  g <- kde_grid(fit2, n = 20)
  expect_equal(c(min(g$eruptions), min(g$waiting)), c(1.5, 40))
  fit3 <- kde_gpu(quakes[1:200, c("lat", "long", "depth")], bw = c(2, 2, 60), lower = c(-Inf, -Inf, 40),
                  kernel = "epanechnikov", backend = "cpu")
  m <- kde_grid(fit3, n = 400, margin = "depth", lims = c(0, 800))
  expect_true(all(m$density[m$depth < 40] == 0))
  m <- kde_grid(fit3, n = 1000, margin = "depth", lims = c(40, 800))
  trapezoid <- (sum(m$density) - (m$density[1] + m$density[1000]) / 2) * diff(m$depth[1:2])
  expect_equal(trapezoid, 1, tolerance = 1e-4)
  file <- tempfile(fileext = ".png")
  grDevices::png(file)
  on.exit(unlink(file))
  expect_silent(plot(fit, prob = 0.5))
  expect_silent(plot(fit2))
  grDevices::dev.off()
})

test_that("bw_mlcv() with bounds maximises the reflection estimate's leave-one-out likelihood", {
  set.seed(31)
  x <- rexp(150)
  # plain R: log f_{-i}(x_i) = log(sum_{j != i} phi_h(x_i - x_j) + phi_h(x_i + x_j)) - log(n - 1)
  loo_loglik <- function(h) {
    K <- outer(x, x, function(a, b) dnorm(a - b, sd = h) + dnorm(a + b, sd = h))
    diag(K) <- 0
    sum(log(rowSums(K) / (length(x) - 1)))
  }
  ref <- optimize(loo_loglik, c(0.02, 2), maximum = TRUE, tol = 1e-10)
  ours <- bw_mlcv(x, lower = 0, backend = "cpu")
  expect_equal(as.numeric(ours), ref$maximum, tolerance = 1e-5)
  expect_equal(attr(ours, "criterion"), ref$objective, tolerance = 1e-10)
  # the unbounded selector differs: the data pile up against 0
  expect_gt(abs(as.numeric(bw_mlcv(x, backend = "cpu")) / ref$maximum - 1), 0.05)
  # kde_gpu(bw = "mlcv") with bounds uses it, and its logLik is the criterion
  fit <- kde_gpu(x, bw = "mlcv", lower = 0, backend = "cpu")
  expect_equal(fit$bw, as.numeric(ours))
  expect_equal(as.numeric(logLik(fit)), attr(ours, "criterion"), tolerance = 1e-10)
  # 2-D, full H, a box on one column: the criterion at the optimum is the
  # fit's leave-one-out log-likelihood, and the search beats its start
  x2 <- cbind(pmin(rexp(120), 3.9), rnorm(120))
  H <- bw_mlcv(x2, shape = "full", lower = c(0, -Inf), upper = c(4, Inf), backend = "cpu")
  fit2 <- kde_gpu(x2, H = attr(H, "H"), lower = c(0, -Inf), upper = c(4, Inf), backend = "cpu")
  expect_equal(attr(H, "criterion"),
               sum(predict(fit2, log = TRUE, leave_one_out = TRUE)), tolerance = 1e-10)
  expect_gte(attr(H, "criterion"), max(attr(H, "trace")$value) - 1e-9)
})
