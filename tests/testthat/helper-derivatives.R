# Plain-R references and comparisons of the derivative tests
# (test-derivatives.R, test-modes.R, test-debias.R).

# The Gaussian estimate straight from its formula, v = q - x_j:
#   f(q)    = sum_j w_j phi_H(v)
#   grad f  = sum_j w_j phi_H(v) (-H^-1 v)
#   Hess f  = sum_j w_j phi_H(v) (H^-1 v v' H^-1 - H^-1)
# and of log f: score = grad f / f, Hess log f = Hess f / f - score score'.
# No whitening, no log scale: for queries within a few tens of bandwidths.
dd_gauss_ref <- function(x, q, H, w = NULL) {
  x <- ref_as_matrix(x)
  d <- ncol(x)
  q <- ref_as_matrix(q, d)
  H <- as.matrix(H)
  w <- if (is.null(w)) rep(1, nrow(x)) else w
  w <- w / sum(w)
  Hi <- solve(H)
  const <- (2 * pi)^(-d / 2) / sqrt(det(H))
  m <- nrow(q)
  f <- numeric(m)
  grad <- matrix(0, m, d)
  hess <- array(0, c(m, d, d))
  for (i in seq_len(m)) {
    U <- -sweep(x, 2, q[i, ])            # rows v_j' = (q - x_j)'
    HU <- U %*% Hi                       # rows (H^-1 v_j)'
    wphi <- w * const * exp(-rowSums(U * HU) / 2)
    f[i] <- sum(wphi)
    grad[i, ] <- -colSums(wphi * HU)
    hess[i, , ] <- crossprod(HU * wphi, HU) - f[i] * Hi
  }
  score <- grad / f
  hess_log <- hess / f
  for (i in seq_len(m)) hess_log[i, , ] <- hess_log[i, , ] - tcrossprod(score[i, ])
  list(f = f, grad = grad, hess = hess, score = score, hess_log = hess_log)
}

# The largest error of any point, relative to the size of that point's
# expected vector or matrix (its largest entry, or `floor[i]` where that is
# larger): rows of m x k matrices, or the [i, , ] of m x d x d arrays.
dd_err <- function(actual, expected, floor = 0) {
  m <- dim(expected)[1L]
  a <- matrix(actual, m)
  e <- matrix(expected, m)
  scale <- pmax(apply(abs(e), 1L, max), floor)
  max(apply(abs(a - e), 1L, max) / scale)
}

dd_expect_close <- function(actual, expected, tol, label, floor = 0) {
  expect_equal(dim(actual), dim(expected), label = paste("dim of", label))
  expect_true(all(is.finite(actual)), label = paste("finite", label))
  err <- dd_err(actual, expected, floor)
  if (nzchar(Sys.getenv("KDEGPU_TEST_VERBOSE"))) {
    message(sprintf("%-55s %.2e", label, err))
  }
  expect_lte(err, tol, label = paste("relative error of", label))
  invisible(err)
}

# Central differences of a function of the rows of q (m x d) with steps
# `steps` per coordinate: for `fun` giving an m-vector, an m x d matrix
# (the gradient); for `fun` giving an m x d matrix, an m x d x d array
# whose [i, , k] is the derivative of row i along coordinate k.
dd_central <- function(fun, q, steps) {
  m <- nrow(q)
  d <- ncol(q)
  parts <- lapply(seq_len(d), function(k) {
    e <- matrix(0, m, d)
    e[, k] <- steps[k]
    (fun(q + e) - fun(q - e)) / (2 * steps[k])
  })
  if (is.null(dim(parts[[1L]]))) return(matrix(unlist(parts), m, d))
  array(unlist(parts), c(m, d, d))
}


# Queries at which every term of the estimate is smooth: within about a
# bandwidth of random training points, and (kernels without a cusp) some
# training points themselves; kept where the whitened distance s = |v|/a
# to every training point is more than `margin` from 1 (a compact kernel's
# edge, where the density has a kink) and, for the kernels with a cusp,
# from 0; and where the density is positive.
dd_smooth_queries <- function(x, H, kernel, m, seed, margin = 0.005) {
  set.seed(seed)
  n <- nrow(x)
  d <- ncol(x)
  R <- chol(H)
  a <- ref_constants(kernel, d)$a
  near <- x[sample.int(n, m, replace = TRUE), , drop = FALSE] +
    0.7 * matrix(rnorm(m * d), m, d) %*% R
  cand <- if (kernel %in% dd_cusp) near else rbind(near, x[sample.int(n, 4L), , drop = FALSE])
  Rinv <- backsolve(R, diag(d))
  zx <- t(x %*% Rinv)
  zq <- cand %*% Rinv
  keep <- apply(zq, 1L, function(z) {
    s <- sqrt(colSums((zx - z)^2)) / a
    (!(kernel %in% ref_compact) || (all(abs(s - 1) > margin) && any(s < 1))) &&
      (!(kernel %in% dd_cusp) || all(s > margin))
  })
  cand[keep, , drop = FALSE]
}

# An exact stationary point near p by Newton's method on predict()'s
# gradient and Hessian.
dd_newton <- function(fit, p) {
  p <- matrix(p, 1L)
  for (i in 1:50) {
    step <- solve(predict(fit, p, type = "hessian")[1L, , ],
                  predict(fit, p, type = "gradient")[1L, ])
    p <- p - step
    if (sqrt(sum(step^2)) < 1e-12 * sqrt(max(diag(fit$H)))) break
  }
  drop(p)
}

# A CUDA fit's derivatives against the CPU backend's for the same data: the
# gradient, the Hessian and those of log f through predict(), and the raw
# sums (derivative_sums()) through what does not depend on their scale M:
# log_scale + log s0 (log f less its constant), and k1sum, first and second
# over s0. Errors are relative to each point's largest entry, or to the
# natural size of its entries where that is larger (f / bw, f / bw^2, 1 /
# bw, 1 / bw^2: where the terms cancel, as near an inflection point, the
# rounding is that of the terms). Points where the estimate is 0 (beyond a
# compact kernel's reach) must agree on that.
dd_expect_backends <- function(gpu, cpu, q, tol, label) {
  f <- predict(cpu, q, tolerance = 0)
  bw <- sqrt(min(eigen(cpu$H, symmetric = TRUE, only.values = TRUE)$values))
  for (type in c("gradient", "hessian")) {
    for (log in c(FALSE, TRUE)) {
      a <- predict(gpu, q, type = type, log = log)
      e <- predict(cpu, q, type = type, log = log)
      lab <- paste(label, type, if (log) "of log f")
      nan <- apply(matrix(is.nan(e), nrow(q)), 1L, any)
      expect_identical(apply(matrix(is.nan(a), nrow(q)), 1L, any), nan,
                       label = paste("where", lab, "is NaN"))
      if (all(nan)) next
      keep <- which(!nan)
      sub <- function(v) if (type == "gradient") v[keep, , drop = FALSE] else v[keep, , , drop = FALSE]
      # 1e-300: rows exactly 0 on both (no training point within reach)
      floor <- pmax(if (log) rep(1, length(keep)) else f[keep], 1e-300) /
        bw^(if (type == "gradient") 1 else 2)
      dd_expect_close(sub(a), sub(e), tol, lab, floor = floor)
    }
  }
  zq <- kdegpu:::whiten(cpu, q)
  sa <- kdegpu:::derivative_sums(gpu, zq, second = TRUE)
  se <- kdegpu:::derivative_sums(cpu, zq, second = TRUE)
  live <- se$s0 > 0
  expect_identical(sa$s0 > 0, live, label = paste(label, "sums: which points the kernels reach"))
  if (!any(live)) return(invisible())
  level_a <- (sa$log_scale + log(sa$s0))[live]
  level_e <- (se$log_scale + log(se$s0))[live]
  expect_lte(max(abs(level_a - level_e) / pmax(1, abs(level_e))), tol,
             label = paste(label, "sums: log_scale + log s0"))
  ratios <- function(s) cbind(s$k1sum, s$first, matrix(s$second, length(s$s0)))[live, , drop = FALSE] /
    s$s0[live]
  # floor: a point on a lone training point of a cusp kernel has only its
  # own term, which adds nothing to these
  dd_expect_close(ratios(sa), ratios(se), tol, paste(label, "sums: k1sum, first, second over s0"),
                  floor = 1e-300)
}

# n standard normal points in d dimensions, the first third moved 6 along
# the first axis: two clusters, so that a fit's tiles can be skipped.
dd_two_clusters <- function(n, d) {
  x <- matrix(rnorm(n * d), n, d)
  x[seq_len(n / 3), 1L] <- x[seq_len(n / 3), 1L] + 6
  x
}

# Queries whose pairs are all clear of a compact kernel's edge (|t - 1| at
# least `margin`), where float's rounding could move a term across the
# support (k1, k2 jump there): rows of q in the fit's coordinates.
dd_clear_of_edges <- function(fit, q, margin = 1e-3) {
  if (!fit$kernel %in% ref_compact) return(q)
  zq <- kdegpu:::whiten(fit, q)
  keep <- apply(zq, 1L, function(z) all(abs(colSums((t(fit$z) - z)^2) - 1) > margin))
  q[keep, , drop = FALSE]
}
