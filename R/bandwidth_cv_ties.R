# Exact ties make the cross-validation criteria unbounded. A pair tied in
# a column puts K_H(0) -> Inf into both its points' leave-one-out sums as
# that column's bandwidth shrinks, so:
# * LSCV = int f^2 - 2 sum_i w_i f_{-i}(x_i) falls to -Inf once the tied
#   pairs outweigh the self terms of int f^2 (see lscv_tie_coefficient());
#   on rounded data (faithful's waiting, in whole minutes) this holds, but
#   only below the spacing of the distinct values, under a local minimum
#   that is the answer; on MASS::geyser's duration (53 points at exactly 4)
#   the fall starts well above it and the search follows it to H -> 0.
# * the leave-one-out likelihood rises to +Inf only when every point has a
#   twin: an untied point's log f_{-i} falls like -1/h^2 (or is -Inf for a
#   compact kernel), faster than a tied one's rises like log(1/h).
# The selectors find these directions first, and stop with an error when
# the search ends in one (below the data's spacing, or at the lower end of
# the scalar grid); a local optimum above the spacing is returned as is.

# The directions the search of `type` can shrink alone: each column for a
# diagonal or full H, all of them together for a scalar bandwidth. Returns
# those whose ties make `criterion` unbounded, each a list of its columns,
# the number of tied (ordered) pairs and the spacing of each column's
# distinct values.
unbounded_tie_directions <- function(x, weights, criterion, type) {
  keep <- weights > 0
  x <- x[keep, , drop = FALSE]
  w <- weights[keep] / sum(weights[keep])
  d <- ncol(x)
  sets <- if (type == "scalar" || d == 1L) list(seq_len(d)) else as.list(seq_len(d))
  found <- list()
  for (columns in sets) {
    group <- tie_groups(x[, columns, drop = FALSE])
    size <- tabulate(group)
    if (all(size == 1L)) next
    unbounded <- if (criterion == "mlcv") all(size[group] >= 2L) else {
      lscv_tie_coefficient(group, w, d) < 0
    }
    if (!unbounded) next
    found[[length(found) + 1L]] <- list(
      columns = columns, pairs = sum(as.double(size) * (size - 1)),
      spacing = vapply(columns, function(k) value_spacing(x[, k]), 0))
  }
  found
}

# Ids of the rows of `x` with equal values, compared exactly.
tie_groups <- function(x) {
  group <- match(x[, 1L], unique(x[, 1L]))
  for (k in seq_len(ncol(x))[-1L]) {
    key <- paste(group, match(x[, k], unique(x[, k])))
    group <- match(key, unique(key))
  }
  group
}

# The smallest gap between distinct values (Inf for a constant column).
value_spacing <- function(v) {
  gaps <- diff(sort(unique(v)))
  if (length(gaps) == 0L) Inf else min(gaps)
}

# LSCV / K_H(0) in the limit where the tied columns' bandwidths go to 0 and
# the others' to infinity (the most negative limit: a pair's terms scale
# with exp(-q/4) and exp(-q/2) of its distance q in the other columns,
# whose ratio is smallest at q = 0): int f^2 keeps the self terms and the
# tied pairs at 2^(-d/2) K_H(0), the leave-one-out sums the tied pairs.
# Negative: the criterion has no lower bound.
lscv_tie_coefficient <- function(group, w, d) {
  total <- rowsum(w, group)[, 1L]
  squares <- rowsum(w^2, group)[, 1L]
  pairs <- sum(total^2 - squares) # sum over tied i != j of w_i w_j
  loo <- sum(w / (1 - w) * (total[group] - w))
  2^(-d / 2) * (sum(w^2) + pairs) - 2 * loo
}

# Stops when the selected H has gone down one of the `directions`: its
# spread along the tied columns (the conditional standard deviation
# 1 / sqrt((H^-1)_kk)) below both their spacing and the grid's lower end
# (`floor`, the reference's spread times range[1]: coarsely rounded data
# can have a good bandwidth below their spacing), or, for a scalar search,
# at the grid's lower end (widening `range` would only follow the fall).
check_tie_collapse <- function(H, directions, criterion, at_lower_end, floor, column_names) {
  if (length(directions) == 0L) return(invisible())
  # each column's spread given the others (1 / sqrt of H^-1's diagonal); a
  # search that collapsed leaves H nearly singular, which is what is asked
  # here: no condition-number test, and 0 where H is exactly singular
  spread <- tryCatch(1 / sqrt(diag(solve(H, tol = 0))), error = function(e) rep(0, nrow(H)))
  for (direction in directions) {
    k <- direction$columns
    if (!(at_lower_end || all(spread[k] < pmin(direction$spacing, floor[k])))) next
    stop(tie_message(direction, criterion, spread, column_names, nrow(H)), call. = FALSE)
  }
  invisible()
}

tie_message <- function(direction, criterion, spread, column_names, d) {
  k <- direction$columns
  where <- if (d == 1L) "`x` has tied values" else if (length(k) > 1L) {
    "`x` has tied rows"
  } else {
    sprintf("column %s of `x` has tied values",
            if (is.null(column_names)) k else sprintf("\"%s\"", column_names[k]))
  }
  what <- if (criterion == "lscv") {
    paste0("LSCV has no minimum: ", where, " (%s tied pairs), so the criterion falls ",
           "without bound as the bandwidth there shrinks to 0")
  } else {
    paste0("MLCV has no maximum: ", where, " (%s tied pairs) and every point has a twin, so the ",
           "leave-one-out likelihood grows without bound as the bandwidth there shrinks to 0")
  }
  what <- sprintf(what, format(direction$pairs, big.mark = ","))
  alternative <- if (criterion == "lscv") {
    "MLCV (bw_mlcv(), or bw = \"mlcv\" in kde_gpu()), a plug-in (bw_plugin(), bw = \"nrd0\")"
  } else {
    "a plug-in (bw_plugin(), bw = \"nrd0\")"
  }
  sprintf(paste0("%s; the search ended at a bandwidth of %s there, against a spacing of %s ",
                 "between its distinct values. Use %s, or jitter() the tied values."),
          what, format(signif(min(spread[k]), 3L)),
          format(signif(min(direction$spacing), 3L)), alternative)
}
