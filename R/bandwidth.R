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
  if (is.null(bw)) bw <- if (d == 1L) "nrd0" else "scott"
  if (is.character(bw)) return(bandwidth_rule(x, weights, bw))
  if (!is.numeric(bw) || is.complex(bw)) {
    stop_arg("bw", "must be a positive number, a vector of ", d,
             " positive numbers, or a rule name (", paste(bandwidth_rules, collapse = ", "), ").")
  }
  if (anyNA(bw) || any(!is.finite(bw)) || any(bw <= 0)) {
    stop_arg("bw", "must be positive and finite.")
  }
  bw <- as.vector(bw) # drops the attributes of a bw_lscv() result
  # H holds bw^2: past ~1e154 it overflows, below ~1e-154 it underflows
  squares <- as.double(bw)^2
  if (any(!is.finite(squares) | squares < .Machine$double.xmin)) {
    stop_arg("bw", sprintf(paste0(
      "= %s squared (the kernel variance H = bw^2) %s double precision; rescale ",
      "`x` and `bw` together (the estimate scales with them)."),
      format(bw[!is.finite(squares) | squares < .Machine$double.xmin][1L], digits = 3L),
      if (any(!is.finite(squares))) "overflows" else "underflows"))
  }
  if (length(bw) == 1L) {
    return(list(H = diag(bw^2, d), type = "scalar", method = "given"))
  }
  if (length(bw) != d) {
    stop_arg("bw", sprintf("must have length 1 or %d (one per column), not %d.", d, length(bw)))
  }
  list(H = diag(as.double(bw)^2, d), type = "diagonal", method = "given")
}

bandwidth_from_H <- function(H, d) {
  if (!is.numeric(H) || is.complex(H)) stop_arg("H", "must be a numeric matrix.")
  if (is.null(dim(H)) && length(H) == 1L && d == 1L) H <- matrix(H, 1L, 1L)
  if (!is.matrix(H) || !identical(dim(H), c(d, d))) {
    stop_arg("H", sprintf("must be a %d x %d matrix (the kernel covariance).", d, d))
  }
  H <- matrix(as.double(H), d, d) # drops classes and attributes
  if (any(!is.finite(H))) stop_arg("H", "must contain only finite values.")
  if (!isSymmetric(unname(H), tol = 1e-10 * max(1, max(abs(H))))) {
    stop_arg("H", "must be symmetric.")
  }
  H <- (H + t(H)) / 2
  if (is.null(chol_or_null(H))) {
    stop_arg("H", "must be positive definite (it is singular or indefinite).")
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
                           rule, paste0("\"", c(bandwidth_rules, cv_rules, "SJ", "sj-dpi",
                                                  plugin_rules), "\"", collapse = ", ")))
  }
  rule <- bandwidth_rules[[hit]]
  if (nrow(x) < 2L) {
    stop_arg("bw", sprintf("rule \"%s\" needs at least 2 points; give a number instead.", rule))
  }
  per_column <- function(f) vapply(seq_len(d), function(k) f(x[, k], weights), 0)
  H <- switch(rule,
    nrd0 = diag(per_column(weighted_bw_nrd0)^2, d),
    nrd = diag(per_column(weighted_bw_nrd)^2, d),
    scott = , silverman = {
      # Weighted covariance; with equal weights exactly cov(x) and n.
      S <- weighted_cov(x, weights)
      n_eff <- 1 / sum(weights^2)
      factor <- if (rule == "scott") 1 else (4 / (d + 2))^(2 / (d + 4))
      factor * n_eff^(-2 / (d + 4)) * S
    }
  )
  if (is.null(chol_or_null(H))) {
    cause <- singular_spread_cause(x, weights)
    stop_arg("bw", sprintf("rule \"%s\" gave a singular bandwidth: `%s` %s Give `bw` or `H` yourself.",
                           rule, cause$arg, cause$text))
  }
  type <- if (d == 1L) "scalar" else if (rule %in% c("nrd0", "nrd")) "diagonal" else "full"
  list(H = H, type = type, method = rule)
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
