# Plain-R reference implementations, independent of the package's C/CUDA
# code and of inst/include/kdegpu/kernels.h: every constant is derived
# numerically here with integrate(), and test-reference.R checks the result
# against closed forms and stats::density()'s kernel formulas.

ref_kernels <- c("gaussian", "epanechnikov", "rectangular", "triangular",
                 "biweight", "cosine", "optcosine", "exponential")
ref_compact <- setdiff(ref_kernels, c("gaussian", "exponential"))

# 1-D profile k(s), s >= 0; compact kernels live on s < 1 (strictly).
ref_profile <- function(kernel) {
  inside <- function(s, v) ifelse(s < 1, v, 0)
  switch(kernel,
    gaussian     = function(s) exp(-s^2 / 2),
    exponential  = function(s) exp(-s),
    epanechnikov = function(s) inside(s, 1 - s^2),
    rectangular  = function(s) inside(s, rep(1, length(s))),
    triangular   = function(s) inside(s, 1 - s),
    biweight     = function(s) inside(s, (1 - s^2)^2),
    # (1 + cos(pi s)) / 2 = cos(pi s / 2)^2 = sin(pi (1 - s) / 2)^2: the
    # sine of 1 - s keeps its digits near the edge, where 1 + cos cancels
    cosine       = function(s) inside(s, sin(pi * (1 - s) / 2)^2),
    optcosine    = function(s) inside(s, sin(pi * (1 - s) / 2)),
    stop("unknown kernel ", kernel)
  )
}

# log k(s), written so that it stays finite for the unbounded kernels far out.
ref_log_profile <- function(kernel, s) {
  switch(kernel,
    gaussian    = -s^2 / 2,
    exponential = -s,
    suppressWarnings(log(ref_profile(kernel)(s)))
  )
}

ref_upper <- function(kernel) if (kernel %in% ref_compact) 1 else Inf

# r^p k(r / a) for a profile k, through logs where r^p overflows a double
# (r > 184 at p = 136, where k has underflowed and the product is tiny).
ref_power_profile <- function(kernel, r, p, a = 1) {
  v <- r^p * ref_profile(kernel)(r / a)
  big <- !is.finite(v)
  if (any(big)) v[big] <- exp(p * log(r[big]) + ref_log_profile(kernel, r[big] / a))
  v
}

# M_p = int_0^inf s^p k(s) ds, numerically.
ref_moment <- function(kernel, p) {
  integrate(function(s) ref_power_profile(kernel, s, p), 0, ref_upper(kernel),
            rel.tol = 1e-13, abs.tol = 0, subdivisions = 1000L)$value
}

ref_log_sphere_area <- function(d) log(2) + (d / 2) * log(pi) - lgamma(d / 2)

# Radius scale a (kernel covariance = identity in d dimensions) and the log
# normalising constant of g(z) = C k(|z| / a), both computed numerically.
# The constant is computed by integrating the scaled profile r^(d-1) k(r/a)
# directly (not through M_{d-1}), so it is an independent route.
.ref_cache <- new.env(parent = emptyenv())
ref_constants <- function(kernel, d) {
  key <- paste(kernel, d)
  if (!is.null(.ref_cache[[key]])) return(.ref_cache[[key]])
  a <- sqrt(d * ref_moment(kernel, d - 1) / ref_moment(kernel, d + 1))
  radial <- integrate(function(r) ref_power_profile(kernel, r, d - 1, a), 0,
                      a * ref_upper(kernel), rel.tol = 1e-13, abs.tol = 0,
                      subdivisions = 1000L)$value
  out <- list(a = a, log_c = -ref_log_sphere_area(d) - log(radial))
  .ref_cache[[key]] <- out
  out
}

ref_as_matrix <- function(x, d = NULL) {
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!is.matrix(x)) {
    x <- if (!is.null(d) && d > 1) matrix(x, ncol = d) else matrix(x, ncol = 1)
  }
  storage.mode(x) <- "double"
  x
}

# Numerically careful log(sum(exp(v))): -Inf when every term is -Inf.
ref_log_sum_exp <- function(v) {
  m <- max(v)
  if (m == -Inf) return(-Inf)
  m + log(sum(exp(v - m)))
}

# log f(q) = log sum_j w_j K_H(q - x_j), w normalised to sum 1.
# Whitening: H = R'R (chol), z = (q - x) R^{-1}; log K_H(z) = log C
# + log k(|z| / a) - log det(H) / 2.
ref_log_density <- function(x, q, H, kernel, weights = NULL) {
  x <- ref_as_matrix(x)
  d <- ncol(x)
  q <- ref_as_matrix(q, d)
  stopifnot(ncol(q) == d)
  H <- as.matrix(H)
  stopifnot(all(dim(H) == d))
  w <- if (is.null(weights)) rep(1, nrow(x)) else weights
  w <- w / sum(w)
  logw <- log(w)
  R <- chol(H)
  Rinv <- backsolve(R, diag(d))
  xw <- t(x %*% Rinv)              # d x n
  qw <- q %*% Rinv                 # m x d
  cst <- ref_constants(kernel, d)
  log_const <- cst$log_c - sum(log(diag(R)))
  if (nrow(q) <= nrow(x)) {
    # One query at a time, vectorised over the training points.
    out <- numeric(nrow(q))
    for (i in seq_len(nrow(q))) {
      s <- sqrt(colSums((xw - qw[i, ])^2)) / cst$a
      out[i] <- ref_log_sum_exp(logw + ref_log_profile(kernel, s))
    }
  } else {
    # One training point at a time, vectorised over the queries, with a
    # running (max, sum) pair per query.
    qt <- t(qw)
    mx <- rep(-Inf, nrow(q))
    sm <- numeric(nrow(q))
    for (j in seq_len(nrow(x))) {
      s <- sqrt(colSums((qt - xw[, j])^2)) / cst$a
      term <- logw[j] + ref_log_profile(kernel, s)
      up <- term > mx
      sm <- ifelse(up, sm * exp(mx - term) + 1,
                   sm + exp(ifelse(term == -Inf, -Inf, term - mx)))
      mx <- ifelse(up, term, mx)
    }
    out <- ifelse(sm > 0, mx + log(sm), -Inf)
  }
  out + log_const
}

ref_density <- function(...) exp(ref_log_density(...))

# log f at the rows of q with per-point factors lambda; leave_out[i]: the
# training point that query i leaves out (its weight then renormalised).
ref_adaptive_log_density <- function(x, q, H, kernel, weights, lambda, leave_out = NULL) {
  x <- ref_as_matrix(x)
  d <- ncol(x)
  q <- ref_as_matrix(q, d)
  w <- weights / sum(weights)
  R <- chol(H)
  R_inverse <- backsolve(R, diag(d))
  xw <- t(x %*% R_inverse)
  qw <- q %*% R_inverse
  cst <- ref_constants(kernel, d)
  out <- vapply(seq_len(nrow(q)), function(i) {
    s <- sqrt(colSums((xw - qw[i, ])^2)) / (cst$a * lambda)
    terms <- log(w) - d * log(lambda) + ref_log_profile(kernel, s)
    if (is.null(leave_out)) return(ref_log_sum_exp(terms))
    j <- leave_out[i]
    if (w[j] >= 1) return(-Inf)
    ref_log_sum_exp(terms[-j]) - log1p(-w[j])
  }, 0)
  out + cst$log_c - sum(log(diag(R)))
}

# Leave-one-out log densities, straight from the definition: at each x_i,
# the estimate from the other points with their weights renormalised,
# log( sum_{j != i} w_j K(x_i - x_j) / sum_{j != i} w_j ).
ref_loo_log_density <- function(x, H, kernel, weights = NULL) {
  x <- ref_as_matrix(x)
  n <- nrow(x)
  w <- if (is.null(weights)) rep(1, n) else weights
  vapply(seq_len(n), function(i) {
    ref_log_density(x[-i, , drop = FALSE], x[i, , drop = FALSE], H, kernel,
                    w[-i])
  }, numeric(1))
}

# Leave-one-out log-likelihood: sum_i n w_i loo_i with w normalised to sum
# 1 (points of weight 0 add nothing), which for equal weights is
# sum_i log( (1/(n-1)) sum_{j != i} K ).
ref_loo_loglik <- function(x, H, kernel, weights = NULL, terms = NULL) {
  x <- ref_as_matrix(x)
  n <- nrow(x)
  w <- if (is.null(weights)) rep(1, n) else weights
  w <- w / sum(w)
  if (is.null(terms)) terms <- ref_loo_log_density(x, H, kernel, weights)
  sum(ifelse(w > 0, n * w * terms, 0))
}

# The kernel formulas of R's stats/R/density.R (bw = kernel sd), plus the
# Laplace density with sd bw for "exponential".
ref_density_kernel_1d <- function(kernel, x, bw) {
  switch(kernel,
    gaussian = dnorm(x, sd = bw),
    rectangular = { a <- bw * sqrt(3); ifelse(abs(x) < a, 0.5 / a, 0) },
    triangular = { a <- bw * sqrt(6); ax <- abs(x)
                   ifelse(ax < a, (1 - ax / a) / a, 0) },
    epanechnikov = { a <- bw * sqrt(5); ax <- abs(x)
                     ifelse(ax < a, 3 / 4 * (1 - (ax / a)^2) / a, 0) },
    biweight = { a <- bw * sqrt(7); ax <- abs(x)
                 ifelse(ax < a, 15 / 16 * (1 - (ax / a)^2)^2 / a, 0) },
    cosine = { a <- bw / sqrt(1 / 3 - 2 / pi^2)
               ifelse(abs(x) < a, (1 + cos(pi * x / a)) / (2 * a), 0) },
    optcosine = { a <- bw / sqrt(1 - 8 / pi^2)
                  ifelse(abs(x) < a, pi / 4 * cos(pi * x / (2 * a)) / a, 0) },
    exponential = { b <- bw / sqrt(2); exp(-abs(x) / b) / (2 * b) },
    stop("unknown kernel ", kernel)
  )
}

# CDF of s = |z| / a for z drawn from the standardised d-dimensional kernel
# (density of s proportional to s^(d-1) k(s)), tabulated by the trapezoid
# rule on a fine grid and interpolated linearly.
ref_radial_cdf <- function(kernel, d) {
  upper <- if (kernel %in% ref_compact) 1 else 60
  s <- seq(0, upper, length.out = 200001)
  f <- s^(d - 1) * ref_profile(kernel)(s)
  if (kernel %in% ref_compact) f[length(f)] <- 0
  cum <- c(0, cumsum((f[-1] + f[-length(f)]) / 2 * diff(s)))
  cum <- cum / cum[length(cum)]
  approxfun(s, cum, yleft = 0, yright = 1)
}

# ---- Test data -------------------------------------------------------------

# n x d data with correlated, differently scaled columns and a shifted mean.
ref_data <- function(n, d, seed) {
  set.seed(seed)
  A <- matrix(rnorm(d * d, sd = 0.4), d, d) + diag(seq(1, 2, length.out = d))
  x <- matrix(rnorm(n * d), n, d) %*% A
  sweep(x, 2, seq_len(d) - 2, "+")
}

# n standard normal points in d dimensions offset by 1e4: with a bandwidth
# 5x below Scott's rule, the GPU's single precision far below the data's
# spread (test-cuda.R, test-derivatives.R).
ref_offset_normal <- function(n, d, seed) {
  set.seed(seed)
  matrix(rnorm(n * d), n) + 1e4
}

# A full, non-diagonal, moderately conditioned SPD bandwidth matrix.
ref_full_H <- function(d, scale, seed) {
  set.seed(seed)
  B <- matrix(rnorm(d * d), d, d)
  S <- crossprod(B) + diag(d)
  S <- S / mean(diag(S))
  scale^2 * S
}

# Queries: fresh points from the data's law, some training points exactly,
# and points far outside the data (far enough that every compact kernel is
# zero there and the gaussian density underflows a double).
ref_queries <- function(x, m, seed) {
  set.seed(seed)
  d <- ncol(x)
  n <- nrow(x)
  mu <- colMeans(x)
  sdv <- apply(x, 2, sd)
  near <- sweep(matrix(rnorm(m * d), m, d) * rep(sdv, each = m), 2, mu, "+")
  exact <- x[sample.int(n, min(5, n)), , drop = FALSE]
  dir <- matrix(rnorm(4 * d), 4, d)
  far <- sweep(dir / sqrt(rowSums(dir^2)) * c(40, 80, 400, 3000) *
                 max(sdv), 2, mu, "+")
  rbind(near, exact, far)
}

# ---- Comparison ------------------------------------------------------------

# Log densities agree: the same -Inf pattern, no NaN, and on finite values
# |a - e| <= tol * max(1, |e|), i.e. a relative error of tol on the density
# where |log f| <= 1 and a relative error of tol on log f elsewhere.
expect_log_density_equal <- function(actual, expected, tol = 1e-10,
                                     label = "") {
  expect_type(actual, "double")
  expect_length(actual, length(expected))
  expect_false(anyNA(actual), label = paste("NA/NaN in", label))
  expect_false(any(actual == Inf), label = paste("+Inf in", label))
  expect_identical(actual == -Inf, expected == -Inf,
                   label = paste("-Inf pattern of", label))
  ok <- is.finite(expected) & is.finite(actual)
  err <- if (any(ok)) {
    max(abs(actual[ok] - expected[ok]) / pmax(1, abs(expected[ok])))
  } else 0
  expect_lte(err, tol, label = paste("max relative log-density error", label))
  invisible(err)
}

# Densities agree: exact zeros where the reference is zero, relative error
# tol elsewhere.
expect_density_equal <- function(actual, expected, tol = 1e-10, label = "") {
  expect_type(actual, "double")
  expect_length(actual, length(expected))
  expect_false(anyNA(actual), label = paste("NA/NaN in", label))
  expect_identical(actual == 0, expected == 0,
                   label = paste("zero pattern of", label))
  ok <- expected > 0
  err <- if (any(ok)) max(abs(actual[ok] / expected[ok] - 1)) else 0
  expect_lte(err, tol, label = paste("max relative density error", label))
  invisible(err)
}

# Evaluates `code` with options set, restoring them afterwards (base R only).
with_kde_options <- function(opts, code) {
  old <- options(opts)
  on.exit(options(old), add = TRUE)
  force(code)
}

has_gpu <- function() {
  info <- kdegpu::kdegpu_info()
  isTRUE(info$cuda_compiled) && is.data.frame(info$gpus) && nrow(info$gpus) > 0
}

# The backends to run a statistical check on: the CPU, and the GPU where
# one is usable (draws of 1e4 or more then come from the GPU's generator).
test_backends <- function() c("cpu", if (has_gpu()) "cuda")

# The kernels with a derivative (every one but the flat rectangular), and
# those with a cusp at 0 (no derivative at a training point).
dd_kernels <- setdiff(ref_kernels, "rectangular")
dd_cusp <- c("triangular", "exponential")

# log (1/n) sum_j phi_bw(q - x_j), scalar bandwidth, differences first
# (exact to rounding relative to each pair's distance, whatever the data's
# extent).
exact_gaussian_log_density <- function(x, q, bw) {
  x <- as.matrix(x)
  q <- matrix(q, ncol = ncol(x))
  d <- ncol(x)
  vapply(seq_len(nrow(q)), function(i) {
    r2 <- rowSums(sweep(x, 2, q[i, ])^2) / bw^2
    ref_log_sum_exp(-r2 / 2) - log(nrow(x)) - d / 2 * log(2 * pi) - d * log(bw)
  }, 0)
}
