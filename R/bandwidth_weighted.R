# The rules of thumb stats::bw.nrd0() and stats::bw.nrd() with weights:
# the same formulas with the weighted standard deviation (as cov.wt()
# computes it), weighted quartiles (weighted_quantile(), quantile()'s type
# 7 for equal weights) and the effective sample size 1 / sum(w^2) in place
# of n, as the "scott" and "silverman" rules use. With equal weights they
# are exactly bw.nrd0() and bw.nrd(); points of weight 0 do not count.

weighted_spread <- function(x, weights) {
  keep <- significant_weights(weights)
  x <- x[keep]
  weights <- weights[keep] / sum(weights[keep])
  n <- 1 / sum(weights^2)
  # No spread, decided exactly (one point, or all values identical), not
  # by the rounding noise of a weighted mean of identical values.
  if (all(x == x[1L])) return(list(x = x, sd = 0, iqr = 0, n = n))
  # On the data scaled by a power of 2 (exact), so that the squares neither
  # overflow at 1e300 nor underflow at 1e-300; centred on a data value, so
  # that the centre is exact where the values agree.
  scale <- 2^floor(log2(max(abs(x))))
  u <- x / scale
  centre <- u[1L] + sum(weights * (u - u[1L]))
  sd <- scale * sqrt(sum(weights * (u - centre)^2) / unbiased_divisor(weights))
  quartiles <- scale * weighted_quantile(u, weights, c(0.25, 0.75))
  list(x = x, sd = sd, iqr = quartiles[2L] - quartiles[1L], n = n)
}

# cov.wt()'s divisor 1 - sum(w^2) (w summing to 1) as sum_i w_i (1 - w_i),
# with 1 - w_i of the largest weight summed from the others: accurate where
# one weight is nearly all the weight (1 - sum(w^2) cancels there).
unbiased_divisor <- function(weights, facts = weight_facts(weights)) {
  top <- facts[["which_largest"]]
  # no weight near 1: 1 - sum(w^2) >= 1/2 cancels nothing
  if (facts[["largest"]] <= 0.5) return(facts[["total"]] - facts[["sum_squares"]])
  rest <- 1 - weights
  rest[top] <- sum(weights[-top])
  sum(weights * rest)
}

# The weights' total, sum of squares, smallest positive value (Inf: none),
# largest value and its first index, and how many are positive: one pass
# on every allowed core (src/data_summary.c), where R's steps each made a
# pass and a temporary of n values (3 s of a fit of 1e8 points).
weight_facts <- function(weights) .Call(C_kdegpu_weight_facts, as.double(weights), cpu_threads())

# The weights with those that are negligible (significant_weights()) set
# to 0, summing to 1, and their facts: list(weights, facts). The usual case
# (none negligible, the total 1 already) makes no copy.
rule_weights <- function(weights) {
  facts <- weight_facts(weights)
  if (!(facts[["smallest"]] > facts[["total"]] * .Machine$double.eps / 2)) {
    weights[!significant_weights(weights)] <- 0
    facts <- weight_facts(weights)
  }
  normalised_weights(weights, facts)
}

# list(weights, facts) with the weights divided by their total unless it is
# 1 to rounding (normalise_weights() gave them so: dividing again would
# move each by an ulp and cost a pass and a copy).
normalised_weights <- function(weights, facts = weight_facts(weights)) {
  if (abs(facts[["total"]] - 1) > 1e-12) {
    weights <- weights / facts[["total"]]
    facts <- weight_facts(weights)
  }
  list(weights = weights, facts = facts)
}

# The points whose weight counts in a rule: positive, and not among those
# whose weights all together are below rounding of the total weight (a
# weight of 1e-300 beside 1 is 0 as far as a double can tell, and must not
# move the quartiles or the centre as if it were a point's share).
significant_weights <- function(weights) {
  positive <- weights > 0
  # none is negligible unless the smallest is (the usual case, without a
  # sort, and without a copy where every weight is positive)
  smallest <- if (all(positive)) min(weights) else min(weights[positive])
  if (smallest > sum(weights) * .Machine$double.eps / 2) return(positive)
  sorted <- sort(weights[positive])
  below <- !duplicated(sorted, fromLast = TRUE) &
    cumsum(sorted) <= sum(sorted) * .Machine$double.eps / 2
  if (!any(below)) return(positive)
  weights > max(sorted[below])
}

weighted_bw_nrd0 <- function(x, weights) {
  spread <- weighted_spread(x, weights)
  lo <- min(spread$sd, spread$iqr / 1.34)
  # bw.nrd0()'s fallbacks for data with no spread in the middle half.
  if (!lo) lo <- if (spread$sd) spread$sd else if (spread$x[1L]) abs(spread$x[1L]) else 1
  0.9 * lo * spread$n^(-0.2)
}

weighted_bw_nrd <- function(x, weights) {
  spread <- weighted_spread(x, weights)
  1.06 * min(spread$sd, spread$iqr / 1.34) * spread$n^(-1 / 5)
}

# stats::cov.wt(x, wt = weights)$cov (the unbiased weighted covariance;
# any positive total weight), in C with OpenMP: R's arithmetic on the n x d
# matrix took 4 s of a fit of 1e7 points on 2 cores. Each column is first
# shifted by a value of positive weight (so a constant column is exactly 0,
# not a mean's rounding) and divided by a power of 2 near its magnitude
# (exact; the products neither overflow at 1e300 nor underflow at 1e-300),
# and the result scaled back.
weighted_cov <- function(x, weights, facts = weight_facts(weights)) {
  normal <- normalised_weights(weights, facts)
  # on the data scaled by a power of 2 per column and centred on a point of
  # positive weight, in C (src/covariance.c)
  S <- .Call(C_kdegpu_weighted_cov, x, normal$weights, cpu_threads()) /
    unbiased_divisor(normal$weights, normal$facts)
  if (!is.null(colnames(x))) dimnames(S) <- list(colnames(x), colnames(x))
  S
}

# Stops unless at least 2 points carry weight, blaming what the user gave:
# `x` with fewer than 2 rows, else `weights` that leave fewer than 2
# positive. `fun` names the selector.
check_two_points <- function(weights, fun) {
  positive <- sum(weights > 0)
  if (length(weights) < 2L) {
    stop_arg("x", sprintf("has %d point; %s needs at least 2 to select a bandwidth.",
                          length(weights), fun))
  }
  if (positive < 2L) {
    stop_arg("weights", sprintf(paste0("leave %d point of positive weight; %s needs at ",
                                       "least 2 to select a bandwidth."), positive, fun))
  }
  invisible()
}

# Why the weighted covariance of x is singular or not finite, as
# list(arg, text) for stop_arg(): too few points of positive weight for
# the columns, a scale whose squares leave double precision (|x| ~ 1e300
# overflows, a spread ~ 1e-300 underflows), constant columns, or collinear
# ones. Blames `weights` where the points they drop make the difference.
singular_spread_cause <- function(x, weights) {
  keep <- weights > 0
  arg <- if (all(keep)) "x" else "weights"
  among <- if (all(keep)) "" else " among the points of positive weight"
  x <- x[keep, , drop = FALSE]
  d <- ncol(x)
  if (nrow(x) <= d) {
    text <- sprintf("%s %d point%s in %d column%s: a covariance needs at least %d.",
                    if (arg == "x") "has" else "leave", nrow(x),
                    if (nrow(x) == 1L) "" else "s", d, if (d == 1L) "" else "s", d + 1L)
    return(list(arg = arg, text = text))
  }
  scale <- spread_scale_cause(x, rep(1, nrow(x)))
  if (!is.null(scale)) return(scale)
  spread <- column_spreads(x)
  if (any(spread == 0)) {
    return(list(arg = arg, text = sprintf("%s constant column%s%s: %s.",
      if (arg == "x") "has" else "leave", if (sum(spread == 0) > 1L) "s" else "", among,
      paste(names(spread)[spread == 0], collapse = ", "))))
  }
  list(arg = arg, text = sprintf(paste0("%s collinear columns%s (one is a linear ",
                                        "combination of the others): no covariance."),
                                 if (arg == "x") "has" else "leave", among))
}

column_spreads <- function(x) {
  spread <- apply(x, 2L, function(v) max(v) - min(v))
  names(spread) <- if (is.null(colnames(x))) seq_len(ncol(x)) else colnames(x)
  spread
}

# NULL, or list(arg = "x", text) when a column of the points of positive
# weight spans so much (|x| ~ 1e300) that its square overflows, or so
# little (~ 1e-300) that it underflows: no variance can be computed.
spread_scale_cause <- function(x, weights) {
  spread <- column_spreads(x[weights > 0, , drop = FALSE])
  # squares (the covariance) of spreads beyond these leave double precision
  too_big <- !is.finite(spread) | spread > sqrt(.Machine$double.xmax) / 1e4
  too_small <- spread > 0 & spread < sqrt(.Machine$double.xmin) * 1e4
  rescale <- "; rescale `x` (the bandwidth scales with it)."
  if (any(too_big)) {
    return(list(arg = "x", text = sprintf(paste0(
      "spans %s in column %s: its square overflows double precision, so no ",
      "covariance or bandwidth can be computed%s"),
      format(spread[[which(too_big)[1L]]], digits = 3L), names(spread)[which(too_big)[1L]],
      rescale)))
  }
  if (any(too_small)) {
    return(list(arg = "x", text = sprintf(paste0(
      "spans only %s in column %s: its square underflows double precision, so no ",
      "covariance or bandwidth can be computed%s"),
      format(spread[[which(too_small)[1L]]], digits = 3L), names(spread)[which(too_small)[1L]],
      rescale)))
  }
  NULL
}

stop_singular_spread <- function(x, weights) {
  cause <- singular_spread_cause(x, weights)
  stop_arg(cause$arg, cause$text)
}
