# Bandwidths. R's convention throughout: `bw` is the standard deviation of
# the kernel (as in stats::density), `H` its covariance matrix (as in
# ks::kde), for every kernel.

bandwidth_rules <- c("nrd0", "nrd", "scott", "silverman")

# list(H, type = "scalar" | "diagonal" | "full", method = description).
resolve_bandwidth <- function(x, weights, bw = NULL, H = NULL) {
  d <- ncol(x)
  if (!is.null(bw) && !is.null(H)) {
    stop("Give either `bw` or `H`, not both.", call. = FALSE)
  }
  if (!is.null(H)) return(bandwidth_from_H(H, d))
  if (inherits(bw, "kdegpu_bandwidth")) return(bandwidth_from_selection(bw, d, "bw"))
  if (is.null(bw)) bw <- if (d == 1L) "nrd0" else "scott"
  if (is.character(bw)) return(bandwidth_rule(x, weights, bw))
  if (!is.numeric(bw) || is.complex(bw)) {
    stop_arg("bw", "must be a positive number, a vector of ", d,
             " positive numbers, or a rule name (", paste(bandwidth_rules, collapse = ", "), ").")
  }
  bw <- as.vector(bw)
  if (length(bw) != 1L && length(bw) != d) {
    check_standard_deviations(bw, "bw")
    stop_arg("bw", sprintf("must have length 1 or %d (one per column), not %d.", d, length(bw)))
  }
  bandwidth_from_sd(bw, d, "bw", if (length(bw) == 1L) "scalar" else "diagonal", "given")
}

# Kernel standard deviations that kdegpu can compute with: positive,
# finite, and within the scale of bandwidth_limits.
check_standard_deviations <- function(bw, arg) {
  if (anyNA(bw) || any(!is.finite(bw)) || any(bw <= 0)) {
    stop_arg(arg, "must be positive and finite.")
  }
  check_bandwidth_scale(as.double(bw)^2, arg, bw)
}

# Standard deviations (one, or one per column) as list(H, type, method):
# a number or vector given as `bw`, or a selection of that shape.
bandwidth_from_sd <- function(bw, d, arg, type, method) {
  check_standard_deviations(bw, arg)
  list(H = diag(as.double(bw)^2, d), type = type, method = method)
}

# kde_gpu(bw = "<selector>"): the selector (parse_selector()'s list) run on
# the fit's data, kernel, backend and bounds; `name`: the user's spelling.
bandwidth_by_selector <- function(x, weights, selector, kernel, backend, precision, bounds,
                                  name) {
  d <- ncol(x)
  shape <- if (d == 1L) "scalar" else selector$shape
  base <- selector$base
  if (base %in% c("sj-ste", "sj-dpi")) {
    if (d != 1L) {
      stop_arg("bw", sprintf(paste0("\"%s\" is a 1-D rule and the data have %d columns; ",
                                    "use bw = \"plugin\" (see bw_plugin())."), name, d))
    }
    bw <- sj_bandwidth(x[, 1L], weights, sub("^sj-", "", base), backend)
    return(list(H = matrix(bw^2, 1L, 1L), type = "scalar",
                method = if (base == "sj-ste") "SJ" else "sj-dpi"))
  }
  if (base == "scv" && d < 2L) {
    stop_arg("bw", sprintf("\"%s\" needs at least 2 columns; in 1-D use bw = \"SJ\" or \"lscv\".",
                           name))
  }
  if (base %in% c("plugin", "scv")) check_two_points(weights, sprintf("bw = \"%s\"", name))
  H <- switch(base,
    plugin = plugin_bandwidth(x, weights, shape, backend),
    scv = scv_bandwidth(x, weights, shape, backend),
    lscv = attr(bw_lscv(x, shape, weights, kernel = kernel, backend = backend,
                        precision = precision), "H"),
    mlcv = attr(bw_mlcv(x, shape, weights, kernel = kernel, backend = backend,
                        precision = precision, lower = bounds$lower, upper = bounds$upper), "H"))
  list(H = unname(H), type = shape, method = selector_name(base, shape, d))
}

# `arg`: the user's name for the matrix (H, or H1, H2 of kde_test()).
bandwidth_from_H <- function(H, d, arg = "H") {
  if (inherits(H, "kdegpu_bandwidth")) return(bandwidth_from_selection(H, d, arg))
  if (!is.numeric(H) || is.complex(H)) stop_arg(arg, "must be a numeric matrix.")
  if (is.null(dim(H)) && length(H) == 1L && d == 1L) H <- matrix(H, 1L, 1L)
  if (!is.matrix(H) || !identical(dim(H), c(d, d))) {
    stop_arg(arg, sprintf("must be a %d x %d matrix (the kernel covariance).", d, d))
  }
  H <- matrix(as.double(H), d, d) # drops classes and attributes
  if (any(!is.finite(H))) stop_arg(arg, "must contain only finite values.")
  if (!isSymmetric(unname(H), tol = 1e-10 * max(1, max(abs(H))))) {
    stop_arg(arg, "must be symmetric.")
  }
  H <- (H + t(H)) / 2
  # (a 0 on the diagonal is left to the scale check: an H that underflowed)
  if (any(diag(H) < 0)) {
    stop_arg(arg, "must be positive definite (its diagonal holds a negative variance).")
  }
  check_bandwidth_scale(diag(H), arg, sqrt(abs(diag(H))))
  if (is.null(chol_or_null(H))) {
    stop_arg(arg, "must be positive definite (it is singular or indefinite).")
  }
  diagonal <- all(H[row(H) != col(H)] == 0)
  type <- if (!diagonal) "full" else if (length(unique(diag(H))) == 1L) "scalar" else "diagonal"
  list(H = H, type = type, method = "given")
}

chol_or_null <- function(H) {
  R <- tryCatch(chol(H), error = function(e) NULL)
  if (is.null(R) || any(diag(R) <= sqrt(.Machine$double.eps) * sqrt(max(diag(H))))) {
    return(NULL)
  }
  R
}

bandwidth_rule <- function(x, weights, rule) {
  d <- ncol(x)
  if (length(rule) != 1L || is.na(rule)) stop_arg("bw", "must be one rule name.")
  hit <- pmatch(tolower(rule), bandwidth_rules)
  if (is.na(hit)) {
    stop_arg("bw", sprintf("names an unknown rule \"%s\"; use one of %s, or a number.",
                           rule, paste0("\"", bandwidth_names(), "\"", collapse = ", ")))
  }
  rule <- bandwidth_rules[[hit]]
  if (nrow(x) < 2L) {
    stop_arg("bw", sprintf("rule \"%s\" needs at least 2 points; give a number instead.", rule))
  }
  # Negligible weights count as 0, for every rule alike.
  ruled <- rule_weights(weights)
  weights <- ruled$weights
  check_spread(x, weights, rule)
  per_column <- function(f) vapply(seq_len(d), function(k) f(x[, k], weights), 0)
  H <- switch(rule,
    nrd0 = diag(per_column(weighted_bw_nrd0)^2, d),
    nrd = diag(per_column(weighted_bw_nrd)^2, d),
    scott = , silverman = {
      # Weighted covariance; with equal weights cov(x) and n, to rounding.
      S <- weighted_cov(x, weights, ruled$facts)
      n_eff <- 1 / ruled$facts[["sum_squares"]]
      factor <- if (rule == "scott") 1 else (4 / (d + 2))^(2 / (d + 4))
      factor * n_eff^(-2 / (d + 4)) * S
    }
  )
  check_bandwidth_scale(diag(H), "x", column_magnitudes(x), rule)
  if (is.null(chol_or_null(H))) {
    cause <- singular_spread_cause(x, weights)
    stop_arg("bw", sprintf("rule \"%s\" gave a singular bandwidth: `%s` %s Give `bw` or `H` yourself.",
                           rule, cause$arg, cause$text))
  }
  type <- if (d == 1L) "scalar" else if (rule %in% c("nrd0", "nrd")) "diagonal" else "full"
  list(H = H, type = type, method = rule)
}

# Data with no spread, decided exactly: every value of positive weight
# equal (one point of positive weight, or a constant column). In 1-D rule
# "nrd0" takes bw.nrd0()'s fallback (weighted_bw_nrd0()); the other rules
# (bw.nrd() gives 0 there, which density() refuses) and every rule in d > 1
# have no scale to take, and say so. One pass in C (src/covariance.c),
# which for data with a spread ends within a few rows.
check_spread <- function(x, weights, rule) {
  if (ncol(x) == 1L && rule == "nrd0") return(invisible())
  spread <- .Call(C_kdegpu_weighted_spread, x, as.double(weights))
  if (spread$positive == 1) {
    stop_arg("x", sprintf(paste0(
      "has one point of positive weight (row %.0f; the other weights are 0 or below ",
      "rounding of the total), so rule \"%s\" has no spread to scale ",
      "the bandwidth by; give `bw` or `H`%s."), spread$first, rule,
      if (ncol(x) == 1L) " (or `bw = \"nrd0\"`, whose fallback, as bw.nrd0()'s, handles it)" else ""))
  }
  if (any(spread$constant)) {
    k <- which(spread$constant)[1L]
    column <- if (ncol(x) == 1L) "" else if (!is.null(colnames(x))) {
      sprintf("column %d (`%s`) ", k, colnames(x)[k])
    } else {
      sprintf("column %d ", k)
    }
    stop_arg("x", sprintf(paste0(
      "%shas no spread: all its values of positive weight are %s, so rule \"%s\" ",
      "cannot scale the bandwidth by it; give `bw` or `H`%s."),
      column, format(x[spread$first, k]), rule,
      if (ncol(x) == 1L) " (or `bw = \"nrd0\"`, whose fallback, as bw.nrd0()'s, handles it)" else
        ", or drop the column"))
  }
  invisible()
}

# The bandwidths kdegpu computes with: kernel sds (square roots of H's
# diagonal) from 2^-500 to 2^500, about 3e-151 to 3e150, so that H, its
# inverse and its Cholesky factor are normal doubles (a bandwidth of 1e300
# has bw^2 = Inf; one of 1e-170, bw^2 = 0). Beyond, kdegpu stops and says
# to rescale rather than compute with an H that overflowed.
bandwidth_limits <- 2^c(-500, 500)

# Stops when kernel variances `variance` (H's diagonal) are outside those
# limits. `arg`: what set them ("bw", "H", "adjust", or "x" for a rule or
# selector, `rule` naming it, or for the data's own spread without one);
# `magnitude`: the size behind them (the bandwidths, or the data's largest
# values), for the advice to rescale.
check_bandwidth_scale <- function(variance, arg, magnitude, rule = NULL) {
  inside <- is.finite(variance) & variance >= bandwidth_limits[1L]^2 &
    variance <= bandwidth_limits[2L]^2
  if (all(inside)) return(invisible())
  k <- which(!inside)[1L]
  large <- !(variance[k] <= bandwidth_limits[2L]^2)
  scale <- 10^round(log10(max(magnitude[k], .Machine$double.xmin)))
  what <- if (large) "overflows" else "underflows"
  beyond <- sprintf("%s double precision", what)
  # a bandwidth matrix by another name (kde_test()'s H1, H2) reads as H
  problem <- switch(if (grepl("^H[0-9]*$", arg)) "H" else arg,
    bw = sprintf("= %s is outside the scale kdegpu computes at: its square, the kernel variance, %s",
                 format(magnitude[k], digits = 3), beyond),
    H = sprintf(paste("is outside the scale kdegpu computes at: its diagonal entry %s is beyond",
                      "what a kernel variance can be in double precision"),
                format(variance[k], digits = 3)),
    adjust = sprintf(paste("takes the bandwidth outside the scale kdegpu computes at: the",
                           "adjusted kernel variance %s"), beyond),
    x = sprintf("is on a scale kdegpu cannot compute at (values up to about %s): %s %s",
                format(scale, digits = 3),
                if (is.null(rule)) "its spread gives a variance that" else
                  sprintf("rule \"%s\" gives a kernel variance that", rule), beyond)
  )
  stop_arg(arg, problem, sprintf(paste0(
    ". Bandwidths from 3e-151 to 3e150 work: rescale the data and any bandwidth together ",
    "(e.g. x / %s) and fit again; that fit's density at q / s, divided by s^d, is the ",
    "density at q here."), format(scale, digits = 3)))
}

# Data whose spread a bandwidth cannot match: a column whose weighted sd is
# outside the bandwidth limits (its variance overflowed, as at 1e300, or
# underflowed, as at 1e-300) leaves every rule and selector a kernel
# variance beyond double's range, so say so before they run (their own
# messages would blame the data's shape). Constant columns pass: the rules
# say what they do with them.
check_data_scale <- function(x, weights) {
  variance <- diag(weighted_cov(x, weights))
  rows <- which(weights > 0)
  constant <- vapply(seq_len(ncol(x)), function(k) all(x[rows, k] == x[rows[1L], k]), NA)
  check_bandwidth_scale(ifelse(constant, 1, variance), "x", column_magnitudes(x))
}

# The largest absolute value of each column.
column_magnitudes <- function(x) {
  if (!is.double(x)) storage.mode(x) <- "double"
  .Call(C_kdegpu_column_magnitudes, x, cpu_threads())
}

# Whitening: with H = R'R (R = chol(H), upper triangular), z = u R^{-1} / a
# has identity covariance scaled by the kernel's radius a, so a pair costs
# one squared distance. Done once per fit, never per pair.
whitening <- function(H, kernel) {
  R <- chol(H)
  d <- ncol(H)
  constants <- kernel_constants(kernel, d)
  list(
    R = R,
    transform = backsolve(R, diag(d)) / constants$scale,
    log_const = constants$log_norm_const - sum(log(diag(R))),
    scale = constants$scale
  )
}
