#' Density levels of highest-density regions
#'
#' The density levels \eqn{c} whose regions \eqn{\{x : \hat f(x) \ge c\}}
#' are the contours to draw for "the 25%, 50% and 75% highest-density
#' regions". Two definitions are offered, named for what they hold:
#'
#' * `coverage = "estimate"` (the default): the estimate's own
#'   highest-density regions. The region for `prob` holds the share `prob`
#'   of the estimate's probability, \eqn{\int_{\hat f \ge c} \hat f =
#'   \code{prob}}. The level is the quantile at `1 - prob` of \eqn{\hat f}
#'   at `draws` points drawn from the fit ([sample()][sample.kde_gpu]),
#'   evaluated exactly (Hyndman's estimator applied to the estimate itself).
#'   The region's mass then has a Monte Carlo standard error of
#'   \eqn{\sqrt{\code{prob}(1 - \code{prob}) / \code{draws}}}
#'   (0.0035 at most with the default draws), returned as the attribute
#'   `"se"`. The draws use a fixed seed (`seed`) and leave the session's
#'   random numbers as they were, so the levels of a fit are the same at
#'   every call.
#' * `coverage = "data"`: the share `prob` of the *data* lies in the region,
#'   as [ks::contourLevels()] computes it: the estimate is evaluated exactly
#'   at the training points, and \eqn{c} is the quantile at `1 - prob` of
#'   those densities, weighted by the fit's `weights`. These regions hold
#'   less of the estimate's own mass than `prob`, since the kernel spreads
#'   the mass beyond the data (on `faithful` in 2-D, about a third of it
#'   for the "50%" region). The quantile
#'   interpolates linearly between the sorted values as [stats::quantile()]'s
#'   default (type 7) does, which it equals for equal weights; points of
#'   weight 0 do not count. So `contour_levels(fit, prob, coverage = "data")`
#'   equals
#'   `ks::contourLevels(ks::kde(x, H = fit$H), cont = 100 * prob, approx = FALSE)`
#'   for an unweighted Gaussian fit. `ks`'s `cont` is a percentage of
#'   probability inside the region, like `100 * prob` here; its `prob` is
#'   the complement, `1 - prob`.
#'
#' Up to kdegpu 0.1.0 the levels were always the data's (`"data"`); the
#' default is now `"estimate"`, which [plot()][plot.kde_gpu] and `autoplot()`
#' draw too. Give `coverage = "data"` for the former levels, as `ks` draws
#' them.
#'
#' @param fit A [kde_gpu()] fit.
#' @param prob Shares of probability inside the regions, in `[0, 1]`.
#' @param coverage What the share `prob` is of: `"estimate"`, the
#'   estimate's probability, or `"data"`, the (weighted) training points.
#' @param draws `coverage = "estimate"`: the number of points drawn from the
#'   fit; the cost is that of evaluating the estimate at them.
#' @param seed `coverage = "estimate"`: the seed of the draws.
#' @return A numeric vector of density levels, one per `prob`, named like
#'   `"25%"`; a larger `prob` gives a lower level. For `"estimate"`, the
#'   attribute `"se"` holds the Monte Carlo standard errors of the regions'
#'   masses.
#' @seealso [plot.kde_gpu()], which draws these contours, and [kde_grid()].
#' @examples
#' fit <- kde_gpu(faithful, backend = "cpu")
#' levels <- contour_levels(fit, c(0.5, 0.9))
#' levels
#' # the regions hold 50% and 90% of the estimate's mass; of the data, more
#' mean(predict(fit) >= levels["50%"])
#' # ks's levels: half of the data lies where the density is at least this
#' contour_levels(fit, c(0.5, 0.9), coverage = "data")
#' @export
contour_levels <- function(fit, prob = c(0.25, 0.5, 0.75), coverage = c("estimate", "data"),
                           draws = hdr_draws, seed = 1L) {
  check_fit(fit, "fit")
  prob <- check_probabilities(prob, "prob")
  coverage <- match_choice(coverage, c("estimate", "data"), "coverage")
  levels <- if (coverage == "data") {
    weighted_quantile(predict(fit), fit$weights, 1 - prob)
  } else {
    draws <- check_count(draws, "draws")
    if (draws < 2L) stop_arg("draws", "must be at least 2.")
    at <- draws_from_fit(fit, draws, seed)
    estimate_levels(predict(fit, at), prob)
  }
  names(levels) <- probability_labels(prob)
  if (coverage == "estimate") attr(levels, "se") <- sqrt(prob * (1 - prob) / draws)
  levels
}

# Draws for the estimate's regions: a standard error of at most 0.0035 in
# a region's mass, at the cost of evaluating the estimate there (the data's
# levels evaluate it at the n training points).
hdr_draws <- 20000L

# Levels whose regions hold the share `prob` of the draws `f_at_draws` (the
# estimate at points drawn from it): the same quantile, equal weights.
estimate_levels <- function(f_at_draws, prob) {
  weighted_quantile(f_at_draws, rep(1, length(f_at_draws)), 1 - prob)
}

# `draws` points from the fit, under `seed`, leaving the session's random
# number stream as it was (plots must not move it).
draws_from_fit <- function(fit, draws, seed) {
  if (!is.numeric(seed) || length(seed) != 1L || !is.finite(seed)) {
    stop_arg("seed", "must be one number.")
  }
  with_seed(seed, sample(fit, draws))
}

# expr evaluated under set.seed(seed), the session's random number stream
# left as it was.
with_seed <- function(seed, expr) {
  global <- globalenv()
  had_seed <- exists(".Random.seed", envir = global, inherits = FALSE)
  old <- if (had_seed) get(".Random.seed", envir = global, inherits = FALSE)
  on.exit(if (had_seed) {
    assign(".Random.seed", old, envir = global)
  } else if (exists(".Random.seed", envir = global, inherits = FALSE)) {
    rm(".Random.seed", envir = global)
  })
  set.seed(seed)
  expr
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
