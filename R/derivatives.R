# Derivatives of the estimate: gradients, Hessians and the score
# (predict(type = "gradient" / "hessian")), and the mean-shift step behind
# kde_modes() and kde_gpu(debias = TRUE). A CUDA fit's sums come from the
# fused derivative kernels (src/cuda/derivatives.cu; every kernel, the fit's
# precision); a CPU fit's from src/derivatives.c (the Gaussian's through the
# moment-sum engine, src/moments.c). All give, per
# query, in whitened units (z = (x - center) A, v = z_j - z_q, t = |v|^2,
# k1 = dk/dt, k2 = d^2k/dt^2):
#   log_scale M, s0 = sum w k e^-M, k1sum = sum w k1 e^-M,
#   first = sum w k1 v e^-M (m x d), second = sum w k2 v v' e^-M (m x d^2:
#   row i is query i's d x d matrix, column-major).

# Every kernel's profile has a usable derivative but the rectangular's,
# flat inside its support (its density's derivative is 0 or a jump).
check_differentiable <- function(object, what) {
  if (object$kernel == "rectangular") {
    stop_arg("type", sprintf(paste0(
      "= \"%s\" needs a kernel with a derivative; the %s kernel is flat inside its ",
      "support. Refit with another kernel (e.g. \"epanechnikov\" or \"gaussian\")."),
      what, object$kernel))
  }
  limit <- capability("gradient, hessian, modes", "cpu")$max_dim
  if (object$d > limit) {
    stop_arg("type", sprintf(paste0(
      "= \"%s\" serves fits of up to %d dimensions (the derivatives are assembled ",
      "per query in fixed-size buffers); this fit has %d."), what, limit, object$d))
  }
}

# log_weights: log(object$tile_weights), for callers that sum many times.
# finish: NULL (the sums), or list(log_const, transform, log, columns): the
# estimate's gradient, log-density and Hessian, finished in the same trip
# down to C (kdegpu_derivative_sums_*). zq: the whitened queries, or
# whiten_for_sums()'s list, whose residual fits of data far from their
# centre add to each difference (src/cpu_offsets.c, src/cuda/model.cu).
derivative_sums <- function(object, zq, second = FALSE, tolerance = NULL,
                            log_weights = log(object$tile_weights), finish = NULL) {
  residual <- NULL
  if (is.list(zq)) {
    residual <- zq$residual
    zq <- zq$z
  }
  # Where the GPU does not serve the fit (capability_table(): beyond its
  # dimensions, or an adaptive fit, whose kernels differ per point and
  # whose scales only src/derivatives.c takes), its sums run on the CPU.
  res <- if (gpu_serves("gradient, hessian, modes", object)) {
    tolerance <- resolve_tolerance(tolerance, object)
    .Call(C_kdegpu_derivative_sums_cuda, cuda_model(object, tolerance),
          kernel_index(object$kernel), object$z, log_weights, zq, residual, second, tolerance,
          finish, cpu_threads(), progress_delay())
  } else {
    scale <- if (!is.null(object$adaptive)) object$tile_scale
    model <- if (object$backend == "cpu") cpu_model(object)
    .Call(C_kdegpu_derivative_sums_cpu, kernel_index(object$kernel), object$z, log_weights,
          scale, zq, second, finish, model, residual, cpu_threads(), progress_delay())
  }
  names(res) <- if (is.null(finish)) c("log_scale", "s0", "k1sum", "first", "second")
                else c("gradient", "log_density", "hessian")
  res
}

# predict(type = "gradient" / "hessian") at the rows of `query` (the fit's
# coordinates): the gradient (m x d) or the Hessian (m x d x d) of the
# density, or with log = TRUE of its log.
evaluate_derivative <- function(object, query, type, log, tolerance = NULL) {
  check_differentiable(object, type)
  second <- type == "hessian"
  parts <- if (is_bounded(object)) {
    bounded_derivative(object, query, second, log, tolerance)
  } else {
    unbounded_derivative(object, query, second, log, tolerance)
  }
  if (second) parts$hessian else parts$gradient
}

# The unbounded estimate's gradient (and with `second` its Hessian) at the
# rows of `query`, with its log-density there. grad f = -2 C e^M first A';
# Hess f = C e^M A (4 second + 2 k1sum I) A'; with log = TRUE the same
# divided by f = C e^M s0 (no overflow: M cancels), less score score' for
# the Hessian of log f.
unbounded_derivative <- function(object, query, second, log, tolerance) {
  # finished in C: at m = 1e6 R's m x d^2 temporaries cost more than the
  # GPU's sums
  finish <- list(object$log_const, object$transform, log, colnames(object$x))
  res <- derivative_sums(object, whiten_for_sums(object, query), second = second,
                         tolerance = tolerance, finish = finish)
  if (second) res else res[1:2]
}

# Row i of the result: the d x d entries of gradient[i, ] gradient[i, ]',
# flattened as a column-major matrix (m x d^2).
outer_rows <- function(gradient) {
  d <- ncol(gradient)
  gradient[, rep(seq_len(d), times = d), drop = FALSE] *
    gradient[, rep(seq_len(d), each = d), drop = FALSE]
}

# A bounded (reflection) fit is f(x) = sum_g f0(s_g x + t_g) inside its box
# (f0 the unbounded estimate, image g a reflection: s_g = +-1 per
# coordinate) and 0 outside, so grad f = sum_g s_g grad f0(image g) and
# Hess f = sum_g (s_g s_g') Hess f0(image g). With log = TRUE, the images'
# scores are averaged with weights f0(image g) / f, from log-densities (the
# score stays finite where f0 underflows): score = sum_g w_g s_g score0_g,
# Hess log f = sum_g w_g (s_g s_g') (Hess log f0 + score0 score0')_g -
# score score'. Outside the box the density is 0: its derivatives are 0,
# those of its log NaN.
bounded_derivative <- function(object, query, second, log, tolerance) {
  d <- object$d
  m <- nrow(query)
  columns <- colnames(object$x)
  gradient <- matrix(if (log) NaN else 0, m, d, dimnames = list(NULL, columns))
  hessian <- if (second) array(if (log) NaN else 0, c(m, d, d), list(NULL, columns, columns))
  inside <- in_box(query, object$lower, object$upper)
  if (!any(inside)) return(list(gradient = gradient, hessian = hessian))
  q <- query[inside, , drop = FALSE]
  nq <- nrow(q)
  images <- object$images
  parts <- lapply(seq_len(nrow(images$sign)), function(g) {
    unbounded_derivative(object, image_points(q, images, g), second, log, tolerance)
  })
  if (log) {
    log_f0 <- lapply(parts, `[[`, "log_density")
    log_f <- if (length(parts) == 1L) log_f0[[1L]] else merge_log_sums(log_f0)
  }
  grad_in <- matrix(0, nq, d)
  hess_in <- matrix(0, nq, d * d)
  for (g in seq_along(parts)) {
    sign <- images$sign[g, ]
    part <- parts[[g]]
    grad_g <- part$gradient * rep(sign, each = nq)
    if (second) {
      hess_g <- matrix(part$hessian, nq)
      if (log) hess_g <- hess_g + outer_rows(part$gradient)
      hess_g <- hess_g * rep(as.vector(outer(sign, sign)), each = nq)
    }
    if (log) {
      weight <- exp(log_f0[[g]] - log_f)
      # an image where f0 is 0 adds nothing (its score is NaN there)
      none <- !(weight > 0)
      grad_g <- grad_g * weight
      grad_g[none, ] <- 0
      if (second) {
        hess_g <- hess_g * weight
        hess_g[none, ] <- 0
      }
    }
    grad_in <- grad_in + grad_g
    if (second) hess_in <- hess_in + hess_g
  }
  if (log) {
    zero <- !is.finite(log_f) # outside every kernel: no score
    grad_in[zero, ] <- NaN
    if (second) {
      hess_in <- hess_in - outer_rows(grad_in)
      hess_in[zero, ] <- NaN
    }
  }
  gradient[inside, ] <- grad_in
  if (second) hessian[inside, , ] <- array(hess_in, c(nq, d, d))
  list(gradient = gradient, hessian = hessian)
}
