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
unbiased_divisor <- function(weights) {
  rest <- 1 - weights
  top <- which.max(weights)
  rest[top] <- sum(weights[-top])
  sum(weights * rest)
}

# The points whose weight counts in a rule: positive, and not among those
# whose weights all together are below rounding of the total weight (a
# weight of 1e-300 beside 1 is 0 as far as a double can tell, and must not
# move the quartiles or the centre as if it were a point's share).
significant_weights <- function(weights) {
  positive <- weights > 0
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
# any positive total weight), with the centring in C (kdegpu_whiten with a
# diagonal transform): cov.wt's sweep() took most of a fit's second at
# n = 1e6, d = 16. Each column is first shifted by a value of positive
# weight (so a constant column is exactly 0, not a mean's rounding) and
# divided by a power of 2 near its magnitude (exact; the products neither
# overflow at 1e300 nor underflow at 1e-300), and the result scaled back.
weighted_cov <- function(x, weights) {
  d <- ncol(x)
  weights <- weights / sum(weights)
  reference <- x[which.max(weights > 0), ]
  magnitude <- column_magnitudes(x)
  scale <- ifelse(magnitude > 0, 2^floor(log2(magnitude)), 1)
  u <- whiten(list(center = reference, transform = diag(1 / scale, d)), x)
  centred <- whiten(list(center = colSums(u * weights), transform = diag(d)), u)
  S <- crossprod(centred * sqrt(weights)) / unbiased_divisor(weights)
  S <- S * outer(scale, scale)
  if (!is.null(colnames(x))) dimnames(S) <- list(colnames(x), colnames(x))
  S
}
