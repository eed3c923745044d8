# The global stage of a scalar search (H = c^2 shape) for the kernels whose
# criteria are not smooth in c. A compact kernel's criterion has a kink
# (epanechnikov, triangular, optcosine, biweight's second derivative) or
# a step (rectangular) wherever c crosses a pair's distance, and the
# 25-point grid plus stats::optimize() between two grid points stopped at
# a neighbouring local optimum: on 60 points, 0.005 below the best
# epanechnikov log-likelihood on a fine grid, and 1.2 below for the
# rectangular kernel, whose criterion is a sawtooth.

# Kernels whose leave-one-out likelihood is a step function of c: constant
# inside the support, so only which pairs are in reach counts.
step_criterion_kernels <- "rectangular"

# The largest sample whose pairwise distances the exact step search lists
# (n^2 doubles); beyond it the fine grid alone searches.
step_search_max_n <- 2000L

# Returns the factor c of the best bandwidth found: a finer grid (`fine`
# points between the neighbours of each of the three best grid points),
# then for a step criterion the exact maximum over every pair's distance in
# the search range, and otherwise stats::optimize() between the best fine
# point's neighbours. `objective(c^2 * shape, tolerance)` is minimised.
scalar_global_search <- function(objective, shape, factors, grid_values, x, weights, kernel,
                                 criterion, bounded, tol, grid_tolerance, fine = 8L) {
  grid <- length(factors)
  candidates <- factors
  values <- grid_values
  for (best in utils::head(order(grid_values), 3L)) {
    ends <- log(factors[c(max(1L, best - 1L), min(grid, best + 1L))])
    between <- exp(seq(ends[1L], ends[2L], length.out = fine + 2L))
    between <- setdiff(between, candidates)
    candidates <- c(candidates, between)
    values <- c(values, vapply(between, function(f) objective(f^2 * shape, grid_tolerance), 0))
  }
  ordering <- order(candidates)
  candidates <- candidates[ordering]
  values <- values[ordering]
  best <- which.min(values)
  if (kernel %in% step_criterion_kernels && criterion == "mlcv" && !bounded &&
      nrow(x) <= step_search_max_n) {
    step <- step_criterion_maximum(x, weights, shape, kernel, range(factors))
    if (!is.null(step) && objective(step^2 * shape, grid_tolerance) <= values[best]) {
      return(step)
    }
    return(candidates[best])
  }
  lower <- candidates[max(1L, best - 1L)]
  upper <- candidates[min(length(candidates), best + 1L)]
  opt <- stats::optimize(function(log_f) objective(exp(2 * log_f) * shape),
                         log(c(lower, upper)), tol = tol)
  if (opt$objective <= objective(candidates[best]^2 * shape)) exp(opt$minimum) else candidates[best]
}

# The factor c in `limits` that maximises the leave-one-out log-likelihood
# of a step kernel at H = c^2 shape, exactly: with S_i(c) the weight of
# the points within reach of x_i (whitened distance below a * c, a the
# support's radius), the criterion is sum_i n w_i log S_i(c) - n d log c
# plus a constant, falling between the pairs' distances and jumping up at
# each; its maximum is just above one of them (or at the lower limit).
# Every ordered pair is an event raising S_i; the per-point running sums
# and one cumulative sum over the events sorted by distance give the
# criterion at all of them. NULL where no c in `limits` reaches a finite
# criterion.
step_criterion_maximum <- function(x, weights, shape, kernel, limits) {
  n <- nrow(x)
  d <- ncol(x)
  z <- x %*% backsolve(chol(shape), diag(d))
  radius <- kernel_constants(kernel, d)$scale
  pairs <- which(lower.tri(matrix(0, n, n)), arr.ind = TRUE)
  reach <- as.vector(stats::dist(z)) / radius # in dist()'s (column-major) order
  i <- c(pairs[, 1L], pairs[, 2L])
  j <- c(pairs[, 2L], pairs[, 1L])
  at <- c(reach, reach)
  keep <- weights[i] > 0 & weights[j] > 0
  i <- i[keep]
  j <- j[keep]
  at <- at[keep]
  # each point's own events in order of distance: its running sum S_i
  own <- order(i, at)
  i <- i[own]
  j <- j[own]
  at <- at[own]
  running <- stats::ave(weights[j], i, FUN = cumsum)
  first <- !duplicated(i)
  previous <- ifelse(first, NA_real_, c(NA_real_, running[-length(running)]))
  gain <- n * weights[i] * (log(running) - ifelse(first, 0, log(previous)))
  # all events by distance: the criterion just above each
  global <- order(at)
  at <- at[global]
  total <- cumsum(gain[global])
  empty <- sum(weights > 0) - cumsum(first[global])
  last <- c(at[-1L] != at[-length(at)], TRUE) # the last of equal distances
  valid <- last & empty == 0L & at < limits[[2L]]
  if (!any(valid)) return(NULL)
  above <- at[valid] * (1 + 1e-9)
  value <- total[valid] - n * d * log(above)
  inside <- above >= limits[[1L]]
  # the lower limit itself, with the pairs already within reach there
  below <- which(!inside)
  value_at_lower <- if (length(below) > 0L) {
    total[valid][max(below)] - n * d * log(limits[[1L]])
  } else -Inf
  if (!any(inside)) return(if (is.finite(value_at_lower)) limits[[1L]] else NULL)
  best <- which.max(ifelse(inside, value, -Inf))
  if (value_at_lower >= value[best]) limits[[1L]] else above[best]
}
