# Marginal densities of a fit: the density of a few of its columns, the
# others integrated out, exactly. The margin of a kernel density estimate
# is the kernel density estimate of those columns with the margin of the
# kernel: for a radially symmetric kernel with covariance H, the margin on
# columns S is again radially symmetric, with covariance H[S, S], but its
# profile is the d-dimensional profile integrated over the d - k other
# directions. For the Gaussian that is the Gaussian again; for every other
# kernel it is a different function (the 2-D margin of a 3-D rectangular
# kernel is not flat), tabulated here once per (kernel, d, k).

# The profile k(s) of each kernel at radii s, from kernels.h.
kernel_profile <- function(kernel) {
  index <- kernel_index(kernel)
  function(s) as.vector(.Call(C_kdegpu_kernel_profile, index, as.double(s)))
}

is_compact_kernel <- function(kernel) {
  attr(.Call(C_kdegpu_kernel_profile, kernel_index(kernel), numeric()), "compact")
}

log_sphere_area <- function(m) log(2) + (m / 2) * log(pi) - lgamma(m / 2)

# Tabulated margins, one per "kernel d k", built when first needed.
margin_profiles <- new.env(parent = emptyenv())

# The density of the k-dimensional margin of the standardised d-dimensional
# kernel (covariance I), as a function of the radius r: with g(z) = C k(|z|/a),
#   m(r) = S_{d-k-1} C a^(d-k) int_0^inf v^(d-k-1) k(sqrt((r/a)^2 + v^2)) dv.
# Tabulated on 1025 nodes and interpolated by a cubic spline: in t with
# s = r/a = 1 - (1 - t)^2 for compact kernels (the margin vanishes like a
# power of 1 - s at the edge, which is smooth in t), and on the log scale in
# t with s = s_max t^2 for the others (their margins decay over hundreds of
# orders of magnitude). Returns function(r) giving m(r).
margin_profile <- function(kernel, d, k) {
  key <- paste(kernel, d, k)
  if (!is.null(margin_profiles[[key]])) return(margin_profiles[[key]])
  constants <- kernel_constants(kernel, d)
  a <- constants$scale
  profile <- kernel_profile(kernel)
  m <- d - k
  log_factor <- log_sphere_area(m) + constants$log_norm_const + m * log(a)
  compact <- is_compact_kernel(kernel)
  # Beyond s_max the unbounded kernels' margins underflow a double.
  s_max <- if (compact) 1 else if (kernel == "gaussian") 40 else 750
  t <- seq(0, 1, length.out = 1025L)
  s <- if (compact) 1 - (1 - t)^2 else s_max * t^2
  integral <- vapply(s, function(s0) {
    upper <- if (compact) sqrt(max(0, 1 - s0^2)) else Inf
    if (upper == 0) return(0)
    # exp(s0) keeps the exponential's integrand of order 1 far out.
    scaled <- function(v) {
      v^(m - 1) * if (kernel == "exponential") exp(s0 - sqrt(s0^2 + v^2)) else
        if (kernel == "gaussian") exp(-v^2 / 2) else profile(sqrt(s0^2 + v^2))
    }
    # A roundoff report means the attainable precision was reached.
    stats::integrate(scaled, 0, upper, rel.tol = 1e-11, abs.tol = 0,
                     subdivisions = 1000L, stop.on.error = FALSE)$value
  }, 0)
  log_value <- log_factor + log(integral) + switch(kernel,
    exponential = -s, gaussian = -s^2 / 2, 0)
  fun <- if (compact) {
    spline <- stats::splinefun(t, exp(log_value), method = "fmm")
    function(r) {
      s <- r / a
      out <- numeric(length(s))
      inside <- s < 1
      out[inside] <- pmax(spline(1 - sqrt(1 - s[inside])), 0)
      out
    }
  } else {
    spline <- stats::splinefun(t, log_value, method = "fmm")
    function(r) {
      s <- r / a
      out <- numeric(length(s))
      inside <- s < s_max
      out[inside] <- exp(spline(sqrt(s[inside] / s_max)))
      out
    }
  }
  margin_profiles[[key]] <- fun
  fun
}

# Densities of the margin of `fit` on columns `columns` (indices) at the
# rows of `points` (a matrix with one column per margin column).
margin_density <- function(fit, columns, points) {
  # The margin of a folded estimate is the folded margin: the folds are
  # per coordinate, and those of the other columns integrate out.
  if (is_bounded(fit)) {
    unbounded <- fit
    unbounded$images <- NULL
    unbounded$lower <- unbounded$upper <- NULL
    log_margin <- folded_log_density(
      points, margin_images(fit$images, columns), fit$lower[columns], fit$upper[columns],
      function(q) log(margin_density(unbounded, columns, q)))
    return(exp(log_margin))
  }
  k <- length(columns)
  # (evaluated directly: `fit` may be the unbounded copy made above, which
  # check_fit() would rightly refuse as an edited fit)
  if (k == fit$d) return(exp(evaluate_log_density(fit, unname(points))))
  if (fit$kernel == "gaussian") return(predict(margin_fit(fit, columns), unname(points)))
  H <- fit$H[columns, columns, drop = FALSE]
  R <- chol(H)
  R_inverse <- backsolve(R, diag(k))
  profile <- margin_profile(fit$kernel, fit$d, k)
  keep <- fit$weights > 0
  train <- fit$x[keep, columns, drop = FALSE] %*% R_inverse
  weights <- fit$weights[keep]
  # an adaptive fit's margin: point j's margin kernel has radius lambda_j
  # (covariance lambda_j^2 H[S, S]) and weight w_j lambda_j^-k
  scale <- fit$adaptive$lambda[keep]
  if (!is.null(scale)) weights <- weights * scale^-k
  query <- points %*% R_inverse
  total <- if (is_compact_kernel(fit$kernel)) {
    compact_margin_sum(query, train, weights, profile,
                       kernel_constants(fit$kernel, fit$d)$scale, scale)
  } else {
    margin_sum(query, train, weights, profile, scale)
  }
  total / prod(diag(R))
}

# sum_j w_j m(|q_i - x_j| / scale_j) for every query row (scale NULL: 1),
# in chunks of training points that keep the work matrix near 2^20 values.
margin_sum <- function(query, train, weights, profile, scale = NULL) {
  chunk <- max(1L, floor(2^20 / max(1L, nrow(query))))
  total <- numeric(nrow(query))
  for (start in seq(1L, nrow(train), by = chunk)) {
    rows <- start:min(nrow(train), start + chunk - 1L)
    squared <- matrix(0, nrow(query), length(rows))
    for (axis in seq_len(ncol(query))) {
      squared <- squared + outer(query[, axis], train[rows, axis], "-")^2
    }
    if (!is.null(scale)) squared <- squared / rep(scale[rows]^2, each = nrow(query))
    total <- total + drop(matrix(profile(sqrt(squared)), nrow(query)) %*% weights[rows])
  }
  total
}

# The same sum for a compact margin (m = 0 beyond radius `reach`): the
# queries are cut into tiles of about 128 neighbours, and each tile sums
# only the training points inside its bounding box widened by `reach`
# (found among the points sorted along the first axis), so the work
# follows the pairs that can matter, not all of them.
compact_margin_sum <- function(query, train, weights, profile, reach, scale = NULL) {
  if (!is.null(scale)) reach <- reach * max(scale)
  k <- ncol(query)
  tiles_per_axis <- max(1L, ceiling((nrow(query) / 128)^(1 / k)))
  tile <- rep(0L, nrow(query))
  for (axis in seq_len(k)) {
    edges <- stats::quantile(query[, axis], seq(0, 1, length.out = tiles_per_axis + 1L),
                             names = FALSE)
    tile <- tile * tiles_per_axis + findInterval(query[, axis], unique(edges),
                                                 rightmost.closed = TRUE, all.inside = TRUE)
  }
  by_first <- order(train[, 1L])
  train <- train[by_first, , drop = FALSE]
  weights <- weights[by_first]
  scale <- scale[by_first]
  total <- numeric(nrow(query))
  for (members in split(seq_len(nrow(query)), tile)) {
    lower <- apply(query[members, , drop = FALSE], 2L, min) - reach
    upper <- apply(query[members, , drop = FALSE], 2L, max) + reach
    slice <- seq.int(findInterval(lower[1L], train[, 1L]) + 1L,
                     length.out = max(0L, findInterval(upper[1L], train[, 1L]) -
                                        findInterval(lower[1L], train[, 1L])))
    if (k > 1L && length(slice) > 0L) {
      inside <- rep(TRUE, length(slice))
      for (axis in 2:k) {
        inside <- inside & train[slice, axis] > lower[axis] & train[slice, axis] < upper[axis]
      }
      slice <- slice[inside]
    }
    if (length(slice) == 0L) next
    total[members] <- margin_sum(query[members, , drop = FALSE], train[slice, , drop = FALSE],
                                 weights[slice], profile, scale[slice])
  }
  total
}

# A Gaussian fit's margin is the Gaussian fit of those columns with the
# matching block of H, evaluated by the backends.
margin_fit <- function(fit, columns) {
  x <- fit$x[, columns, drop = FALSE]
  new_kde_gpu(x, fit$weights,
              list(H = fit$H[columns, columns, drop = FALSE], type = "full", method = "given"),
              fit$kernel, fit$backend, fit$precision, fit$call, fit$data.name,
              lambda = fit$adaptive$lambda)
}
