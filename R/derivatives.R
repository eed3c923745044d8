# Derivatives of the estimate: gradients, Hessians and the score
# (predict(type = "gradient" / "hessian")), and the mean-shift step behind
# kde_modes() and kde_gpu(debias = TRUE). A CUDA fit's sums come from the
# fused derivative kernels (src/cuda/derivatives.cu; every kernel, the fit's
# precision); a CPU fit's from the moment-sum engine for the Gaussian
# (moments.R) and from src/derivatives.c for the others. All give, per
# query, in whitened units (z = (x - center) A, v = z_j - z_q, t = |v|^2,
# k1 = dk/dt, k2 = d^2k/dt^2):
#   log_scale M, s0 = sum w k e^-M, k1sum = sum w k1 e^-M,
#   first = sum w k1 v e^-M (m x d), second = sum w k2 v v' e^-M (m x d x d).

# Every kernel's profile has a usable derivative but the rectangular's,
# flat inside its support (its density's derivative is 0 or a jump).
check_differentiable <- function(object, what) {
  if (object$kernel == "rectangular") {
    stop_arg("type", sprintf(paste0(
      "= \"%s\" needs a kernel with a derivative; the %s kernel is flat inside its ",
      "support. Refit with another kernel (e.g. \"epanechnikov\" or \"gaussian\")."),
      what, object$kernel))
  }
  if (is_bounded(object)) {
    stop_arg("type", sprintf("= \"%s\" is not available for a fit with `lower`/`upper` bounds yet.",
                             what))
  }
  if (!is.null(object$adaptive)) {
    stop_arg("type", sprintf("= \"%s\" is not available for an adaptive fit yet.", what))
  }
}

# Dimensions the GPU's derivative sums serve (kDerivMaxDim in
# src/cuda/derivatives.cuh); beyond, a CUDA fit's sums run on the CPU.
cuda_derivative_max_dim <- 128L

derivative_sums <- function(object, zq, second = FALSE, tolerance = NULL) {
  # every caller refuses adaptive fits first (check_differentiable, kde_modes):
  # their kernels differ per point, which none of the engines below knows
  stopifnot(is.null(object$adaptive))
  d <- object$d
  m <- nrow(zq)
  if (object$backend == "cuda" && d <= cuda_derivative_max_dim) {
    res <- .Call(C_kdegpu_derivative_sums_cuda, cuda_model(object),
                 kernel_index(object$kernel), object$z, log(object$tile_weights), zq, second,
                 resolve_tolerance(tolerance, object), cpu_threads(), progress_delay())
    names(res) <- c("log_scale", "s0", "k1sum", "first", "second")
    if (second) dim(res$second) <- c(m, d, d)
    return(res)
  }
  if (object$kernel == "gaussian") {
    # k = e^(-t/2): k1 = -k / 2, k2 = k / 4 (kernels.h)
    degree <- if (second) 2L else 1L
    moments <- gaussian_moments(object$z, object$tile_weights, zq, degree, "all",
                                "cpu")
    index <- moment_index(d, degree)
    total <- rowSums(index)
    column_of <- function(a) which(total == sum(a) & colSums(t(index) == a) == d)
    s0 <- moments$sums[, 1L]
    first <- -0.5 * moments$sums[, vapply(seq_len(d), function(c) column_of(diag(d)[c, ]), 0L),
                                 drop = FALSE]
    out <- list(log_scale = moments$log_scale, s0 = s0, k1sum = -0.5 * s0, first = first)
    if (second) {
      pairs <- expand.grid(c = seq_len(d), e = seq_len(d))
      columns <- mapply(function(c, e) column_of(diag(d)[c, ] + diag(d)[e, ]), pairs$c, pairs$e)
      out$second <- array(0.25 * moments$sums[, columns], c(m, d, d))
    }
    return(out)
  }
  log_weights <- log(object$tile_weights)
  res <- .Call(C_kdegpu_derivative_sums_cpu, kernel_index(object$kernel), object$z,
               log_weights, zq, second, cpu_threads(), progress_delay())
  names(res) <- c("log_scale", "s0", "k1sum", "first", "second")
  if (second) dim(res$second) <- c(m, d, d)
  res
}

# predict(type = "gradient" / "hessian") at the rows of `query` (the fit's
# coordinates). grad f = -2 C e^M first A'; Hess f = C e^M A (4 second +
# 2 k1sum I) A'; with log = TRUE the same divided by f = C e^M s0 (no
# overflow: M cancels), less score score' for the Hessian of log f.
evaluate_derivative <- function(object, query, type, log, tolerance = NULL) {
  check_differentiable(object, type)
  A <- object$transform
  d <- object$d
  m <- nrow(query)
  sums <- derivative_sums(object, whiten(object, query), second = type == "hessian",
                          tolerance = tolerance)
  scale <- if (log) 1 / sums$s0 else exp(object$log_const + sums$log_scale)
  scale[!is.finite(sums$log_scale)] <- if (log) NaN else 0
  gradient <- -2 * (sums$first * scale) %*% t(A)
  dimnames(gradient) <- list(NULL, colnames(object$x))
  if (type == "gradient") return(gradient)
  # B_i = 4 second_i + 2 k1sum_i I, then A B_i A' for every i at once:
  # entry (p, q) is sum_{c,e} A[p, c] B_i[c, e] A[q, e], i.e. the flattened
  # B times t(kronecker(A, A)).
  B <- 4 * matrix(sums$second, m)
  diagonal <- seq(1L, d * d, by = d + 1L)
  B[, diagonal] <- B[, diagonal] + 2 * sums$k1sum
  hessian <- (B * scale) %*% t(kronecker(A, A))
  if (log) {
    for (p in seq_len(d)) {
      for (q in seq_len(d)) {
        k <- p + (q - 1L) * d
        hessian[, k] <- hessian[, k] - gradient[, p] * gradient[, q]
      }
    }
  }
  array(hessian, c(m, d, d), list(NULL, colnames(object$x), colnames(object$x)))
}
