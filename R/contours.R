#' Density levels of highest-density regions
#'
#' The density levels \eqn{c} such that the region \eqn{\{x : \hat f(x)
#' \ge c\}} holds a share `prob` of the estimate's probability: the
#' contours to draw for "the 25%, 50% and 75% highest-density regions".
#'
#' The level for `prob` is estimated as [ks::contourLevels()] does: the
#' estimate is evaluated exactly at the training points, and \eqn{c} is the
#' quantile at `1 - prob` of those densities, weighted by the fit's
#' `weights` (a point whose density is at least \eqn{c} lies in the region,
#' and the points are a sample from the estimate's law up to the kernel
#' noise). The quantile interpolates linearly between the sorted values
#' as [stats::quantile()]'s default (type 7) does, which it equals for
#' equal weights; points of weight 0 do not count. So
#' `contour_levels(fit, prob)` equals
#' `ks::contourLevels(ks::kde(x, H = fit$H), cont = 100 * prob, approx = FALSE)`
#' for an unweighted Gaussian fit. `ks`'s `cont` is a percentage of
#' probability inside the region, like `100 * prob` here; its `prob` is
#' the complement, `1 - prob`.
#'
#' @param fit A [kde_gpu()] fit.
#' @param prob Shares of probability inside the regions, in `[0, 1]`.
#' @return A numeric vector of density levels, one per `prob`, named like
#'   `"25%"`; a larger `prob` gives a lower level.
#' @seealso [plot.kde_gpu()], which draws these contours, and [kde_grid()].
#' @examples
#' fit <- kde_gpu(faithful, backend = "cpu")
#' levels <- contour_levels(fit, c(0.5, 0.9))
#' levels
#' # about half of the data lies where the density is at least levels["50%"]
#' mean(predict(fit) >= levels["50%"])
#' @export
contour_levels <- function(fit, prob = c(0.25, 0.5, 0.75)) {
  check_fit(fit, "fit")
  prob <- check_probabilities(prob, "prob")
  levels <- weighted_quantile(predict(fit), fit$weights, 1 - prob)
  names(levels) <- probability_labels(prob)
  levels
}

# Shares of probability: a non-empty numeric vector in [0, 1].
check_probabilities <- function(prob, arg) {
  if (!is.numeric(prob) || is.complex(prob) || length(prob) == 0L || anyNA(prob) ||
      any(prob < 0 | prob > 1)) {
    stop_arg(arg, "must be shares of probability: numbers in [0, 1], e.g. c(0.25, 0.5, 0.75).")
  }
  as.double(prob)
}

# "25%", "50%", "90.5%".
probability_labels <- function(prob) {
  paste0(vapply(100 * prob, function(p) format(signif(p, 4L)), ""), "%")
}

# Quantiles of `values` weighted by `weights` (non-negative, some positive)
# at `probs`. The i-th smallest value sits at C_{i-1} / (1 - w_i), C the
# cumulative weight, and the values are interpolated linearly: for equal
# weights the positions are (i - 1) / (n - 1), exactly quantile()'s type 7;
# the rule treats the smallest and largest values alike (reversing the
# data reverses the positions), and a value of nearly no weight at either
# end sits next to its neighbour instead of stretching the scale to itself.
weighted_quantile <- function(values, weights, probs) {
  keep <- weights > 0
  values <- values[keep]
  weights <- weights[keep] / sum(weights[keep])
  n <- length(values)
  if (n == 1L) return(rep(values, length(probs)))
  order_values <- order(values)
  values <- values[order_values]
  weights <- weights[order_values]
  # 1 - w_i as the weight before plus the weight after (no cancellation
  # where w_i is nearly 1)
  before <- cumsum(weights) - weights
  after <- rev(cumsum(rev(weights))) - weights
  positions <- cummax(before / (before + after)) # sorted despite rounding
  # Linear interpolation between neighbours, as quantile() computes it.
  upper <- pmin(findInterval(probs, positions, rightmost.closed = TRUE) + 1L, n)
  lower <- pmax(upper - 1L, 1L)
  gap <- positions[upper] - positions[lower]
  share <- ifelse(gap > 0, (probs - positions[lower]) / gap, 0)
  share <- pmin(pmax(share, 0), 1)
  values[lower] + share * (values[upper] - values[lower])
}
