# The methods of a mixed-data fit (kde_gpu() on a data frame with factor
# columns; mixed.R, mixed_fit.R). See ?kde_gpu-mixed.

#' Kernel density estimates of mixed data
#'
#' [kde_gpu()] on a data frame with `factor` or `ordered` columns fits the
#' generalised product kernel estimate of `np::npudens()`: the Gaussian
#' kernel with covariance `H` on the numeric columns times, for each factor
#' column, a discrete kernel with its own smoothing parameter `lambda`,
#' \deqn{\hat f(x, c) = \sum_i w_i\, \phi_H(x - x_i) \prod_k L_k(c_k, c_{ik};
#' \lambda_k).}{f(x, c) = sum_i w_i phi_H(x - x_i) prod_k L_k(c_k, c_ik; lambda_k).}
#' Unordered factors take `factor_kernel`: `"aitchisonaitken"` (the
#' default: \eqn{1 - \lambda} at a match, \eqn{\lambda / (c - 1)} otherwise,
#' \eqn{\lambda \in [0, (c - 1)/c]}, c the number of the factor's levels)
#' or `"liracine"` (1 at a match, \eqn{\lambda} otherwise). Ordered factors
#' take `ordered_kernel`: `"racineliyan"` (the default:
#' \eqn{\lambda^{|r - s|}} over the distance between the levels' ranks,
#' normalised to sum to 1 over the levels, Racine, Li and Yan 2020),
#' `"liracine"` (\eqn{\lambda^{|r - s|}}, np's default, which does not sum
#' to 1, so neither does the estimate) or `"wangvanryzin"` (\eqn{1 -
#' \lambda} at a match, \eqn{(1 - \lambda)/2\, \lambda^{|r - s|}}
#' otherwise). \eqn{\lambda = 0} counts matching levels only.
#' A factor's levels are its declared `levels()`, used or not.
#'
#' The estimate is computed exactly, by the same fused engines as a numeric
#' fit (both backends, several GPUs, leave-one-out, `tolerance`), never by a
#' loop over combinations of levels: each pair's Gaussian term on the
#' numeric columns is multiplied, inside the kernels, by one factor per
#' discrete column (its kernel relative to a match), so the numeric
#' columns' tiles skip as any fit's (the skipping's lower bound taken with
#' each factor's smallest value, so a `lambda` of 0 skips nothing) and a
#' factor costs one term per pair whatever its number of levels. The GPU's
#' kernels take up to 4 numeric and 4 discrete columns; beyond that, and on
#' cluster workers, each discrete kernel is summed as a Gaussian in an
#' embedding of the levels (the corners of a regular simplex for an
#' unordered factor, thermometer codes for an ordered one), which costs c -
#' 1 coordinates per pair for c levels (Wang-van Ryzin 2(c - 1)).
#'
#' Bandwidths: by default everything, H (full, or `bw = "mlcv-diagonal"`,
#' `"mlcv-scalar"`) and each lambda, maximises the leave-one-out
#' likelihood \eqn{\sum_i \log \hat f_{-i}(x_i, c_i)} jointly, np's
#' `cv.ml` (`npudensbw()`'s default), by [stats::nlm()] from Scott's
#' rule and lambdas at which a mismatch weighs a fifth of a match, its
#' sums in double precision whatever `precision` says (the fit itself then
#' computes in `precision`). Above 20,000 points of positive weight the
#' search starts instead from its own answer on a tenth of the points
#' (drawn without moving the session's random numbers; recursively), moved
#' by the bandwidths' rate \eqn{n^{-2/(d+4)}} (d numeric columns) and
#' shaped by that answer's Hessian, so that few criterion evaluations are
#' made on all n points; the answer is still a local optimum of the
#' criterion on all of them. `fit$selection` counts both kinds of
#' evaluation (`evaluations`, `pilot_evaluations`). Give
#' `bw` (a number, one per numeric column, or a rule) or `H` for the
#' numeric columns, or `lambda`, to fix them; what is not given is still
#' chosen by `"mlcv"`. `bw = "lscv"` (`"lscv-diagonal"`, `"lscv-scalar"`)
#' minimises least-squares cross-validation instead (np's `cv.ls`): the
#' integral of the squared estimate is exact, one Gaussian pair sum per
#' combination of the factors' levels (the product of their numbers of
#' levels), plus the leave-one-out sum. `fit$selection` records the search. For a
#' conditional density, [bw_mlcv()] with `given` chooses H and the lambdas
#' by the leave-one-out likelihood of the other columns given those
#' (`np::npcdensbw()`'s `cv.ml`); `kde_gpu(x, bw = b)` then fits with both.
#'
#' Methods: [predict()][predict.kde_mixed] (densities and log-densities
#' at a data frame of the fit's columns, leave-one-out, conditional
#' densities with `given`), [logLik()][logLik.kde_mixed],
#' [sample()][sample.kde_mixed], `print()` and `summary()`. The Gaussian
#' kernel only; `lower`, `upper`, `debias` and `adaptive` do not apply.
#'
#' @references Aitchison, J. and Aitken, C. G. G. (1976). Multivariate
#'   binary discrimination by the kernel method. *Biometrika* 63, 413-420.
#'
#'   Li, Q. and Racine, J. S. (2007). *Nonparametric Econometrics: Theory
#'   and Practice*. Princeton University Press.
#'
#'   Racine, J. S., Li, Q. and Yan, K. X. (2020). Kernel smoothed
#'   probability mass functions for ordered datatypes. *Journal of
#'   Nonparametric Statistics* 32(3), 563-586.
#' @examples
#' cars <- data.frame(mpg = mtcars$mpg, wt = mtcars$wt,
#'                    cyl = factor(mtcars$cyl), gear = ordered(mtcars$gear))
#' fit <- kde_gpu(cars, backend = "cpu")
#' fit
#' predict(fit, cars[1:3, ])
#' # the density of mpg and wt given the number of cylinders
#' predict(fit, cars[1:3, ], given = c("cyl", "gear"))
#' @name kde_gpu-mixed
NULL

#' @rdname kde_gpu-mixed
#' @param object,x A mixed-data fit.
#' @param newdata A data frame with the fit's columns (by name): numbers
#'   where the fit's are numeric, and factors with the fit's levels (or
#'   character values among them) where it has factors.
#' @param log,leave_one_out,cluster,tolerance As for [predict.kde_gpu()].
#' @param given `NULL`, or the columns to condition on (names or numbers):
#'   \eqn{\hat f(y \mid x) = \hat f(x, y) / \hat f_X(x)}{f(y | x) = f(x, y) /
#'   f_X(x)} with the margin \eqn{\hat f_X} the product kernel estimate of
#'   those columns (as np's `npcdens()` defines it), exact.
#' @param type `"density"`, the only type for mixed data.
#' @param ... Not used: an argument given here is an error that names it.
#' @export
predict.kde_mixed <- function(object, newdata, log = FALSE, leave_one_out = FALSE,
                              cluster = NULL, tolerance = getOption("kdegpu.tolerance"),
                              type = "density", given = NULL, ...) {
  check_dots_empty("predict()", c("object", "newdata", "log", "leave_one_out", "cluster",
                                  "tolerance", "type", "given"), predict_hints, ...)
  check_mixed(object)
  if (!identical(type, "density")) {
    stop_arg("type", "must be \"density\" for mixed data (factor columns).")
  }
  check_flag(log, "log")
  check_flag(leave_one_out, "leave_one_out")
  if (!is.null(tolerance)) {
    tolerance <- check_tolerance(tolerance, if (missing(tolerance)) "options(kdegpu.tolerance)"
                                            else "tolerance")
  }
  at_training_points <- missing(newdata) || is.null(newdata)
  if (!at_training_points && leave_one_out) {
    stop_arg("leave_one_out", "applies to the training points only; drop `newdata`.")
  }
  parts <- if (!at_training_points) mixed_query(object, newdata)
  out <- if (is.null(given)) {
    mixed_log_density(object, parts, leave_one_out, cluster, tolerance)
  } else {
    columns <- given_index(given, object$columns$names, object$d)
    margin <- cached_margin_fit(object, columns)
    joint <- mixed_log_density(object, parts, leave_one_out, cluster, tolerance)
    of_x <- mixed_log_density(margin, if (!is.null(parts)) mixed_subset(object, parts, columns),
                              leave_one_out, cluster, tolerance)
    ifelse(of_x > -Inf, joint - of_x, NaN)
  }
  names(out) <- if (at_training_points) object$row_names else
    if (is.data.frame(newdata)) row.names(newdata)
  if (log) out else exp_on_cores(out)
}

# log f at the parts of a query (NULL: the training points).
mixed_log_density <- function(object, parts, leave_one_out, cluster, tolerance) {
  engine <- cluster_engine(cluster)
  if (leave_one_out) return(mixed_leave_one_out(object, engine, tolerance))
  sums <- mixed_sums(object, engine)
  inner <- sums$inner
  if (is.null(parts)) parts <- list(x = object$x, codes = object$codes)
  if (!is.null(inner$discrete)) { # the numbers, then the codes
    x <- numeric_or_zero_column(parts$x, nrow(parts$codes))
    return(evaluate_log_density(inner, cbind(x, parts$codes * 1), tolerance = tolerance) +
             sums$offset)
  }
  design <- mixed_design(object$columns, object$kernels, object$lambda, object$H)
  query <- numeric_or_zero_column(mixed_embed(design, parts$x, parts$codes), nrow(parts$codes))
  unname(predict(inner, query, log = TRUE, cluster = cluster, tolerance = tolerance)) +
    sums$offset
}

# The query's numeric matrix and level ranks, checked against the fit.
mixed_query <- function(object, newdata, arg = "newdata") {
  columns <- object$columns
  if (!is.data.frame(newdata)) {
    if (!is.list(newdata)) {
      stop_arg(arg, sprintf("must be a data frame with the fit's columns (%s).",
                            paste(columns$names, collapse = ", ")))
    }
    newdata <- as.data.frame(newdata, stringsAsFactors = FALSE)
  }
  absent <- setdiff(columns$names, names(newdata))
  if (length(absent) > 0L) {
    stop_arg(arg, sprintf("lacks the fit's columns %s.", paste(absent, collapse = ", ")))
  }
  for (name in columns$numeric) {
    v <- newdata[[name]]
    if (is.factor(v) || !is.numeric(v) || is.complex(v)) {
      stop_arg(arg, sprintf("column %s is %s, but the fit's %s is numeric.", name,
                            if (is.factor(v)) "a factor" else class(v)[1L], name))
    }
    if (!all(is.finite(v))) stop_arg(arg, sprintf("column %s has NA or infinite values.", name))
  }
  codes <- matrix(0L, nrow(newdata), length(columns$categorical))
  for (k in seq_along(columns$categorical)) {
    name <- columns$categorical[[k]]
    fitted <- columns$levels[[k]]
    v <- newdata[[name]]
    if (is.factor(v) && !identical(levels(v), fitted)) {
      stop_arg(arg, sprintf(paste0("column %s has levels %s, but the fit's has %s; make them ",
                                   "the same (factor(x, levels = ...))."), name,
                            paste(levels(v), collapse = ", "), paste(fitted, collapse = ", ")))
    }
    if (!is.factor(v) && !is.character(v)) {
      stop_arg(arg, sprintf(paste0("column %s is %s, but the fit's %s is a factor with levels ",
                                   "%s."), name, class(v)[1L], name,
                            paste(fitted, collapse = ", ")))
    }
    codes[, k] <- match(as.character(v), fitted)
    unseen <- unique(as.character(v)[is.na(codes[, k])])
    if (length(unseen) > 0L) {
      stop_arg(arg, sprintf("column %s has values the fit's levels lack: %s (levels: %s).",
                            name, paste(utils::head(unseen, 5L), collapse = ", "),
                            paste(fitted, collapse = ", ")))
    }
  }
  list(x = as.matrix(newdata[columns$numeric]) * 1, codes = codes)
}

# The parts of a query restricted to the columns `index` (of the fit's).
mixed_subset <- function(object, parts, index) {
  names <- object$columns$names[index]
  list(x = parts$x[, intersect(object$columns$numeric, names), drop = FALSE],
       codes = parts$codes[, object$columns$categorical %in% names, drop = FALSE])
}

# The product kernel estimate of the columns `index`: the margin of the
# Gaussian part (H's block) and the same discrete kernels.
mixed_margin_fit <- function(object, index) {
  names <- object$columns$names[index]
  numeric <- intersect(object$columns$numeric, names)
  keep <- object$columns$categorical %in% names
  columns <- object$columns
  columns$names <- columns$names[index]
  columns$kind <- columns$kind[index]
  columns$numeric <- object$columns$numeric[object$columns$numeric %in% names]
  columns$categorical <- columns$categorical[keep]
  columns$levels <- columns$levels[keep]
  parts <- list(x = object$x[, columns$numeric, drop = FALSE],
                codes = object$codes[, keep, drop = FALSE])
  bandwidth <- if (length(numeric) > 0L) {
    list(H = object$H[columns$numeric, columns$numeric, drop = FALSE], type = "full")
  }
  new_kde_mixed(parts, columns, object$kernels[keep], object$lambda[keep], bandwidth,
                object$weights, object$backend, object$precision, object$call,
                object$data.name)
}

#' @rdname kde_gpu-mixed
#' @export
logLik.kde_mixed <- function(object, cluster = NULL, tolerance = getOption("kdegpu.tolerance"),
                             ...) {
  check_dots_empty("logLik()", c("object", "cluster", "tolerance"), list(), ...)
  if (!is.null(tolerance)) {
    tolerance <- check_tolerance(tolerance, if (missing(tolerance)) "options(kdegpu.tolerance)"
                                            else "tolerance")
  }
  check_mixed(object)
  if (sum(object$weights > 0) < 2L) {
    stop("logLik() needs at least two points of positive weight.", call. = FALSE)
  }
  loo <- mixed_leave_one_out(object, cluster_engine(cluster), tolerance)
  d_c <- ncol(object$x)
  loo_log_lik(loo, object$weights, length(object$lambda) +
                if (d_c == 0L) 0L else bandwidth_parameters(object$bandwidth_type, d_c))
}

#' @rdname kde_gpu-mixed
#' @param size How many points to draw.
#' @param replace,prob As for [sample()]: draws are independent (`replace`
#'   must be `TRUE`) and come from the fit's weights (`prob` is refused).
#' @return `sample()`: a data frame of draws with the fit's columns, each
#'   factor with the fit's levels: a point picked by weight (times each
#'   kernel's total over the levels, for the kernels that do not sum to 1),
#'   its numeric part plus Gaussian noise of covariance H, and each factor's
#'   level drawn from its kernel around the point's level.
#' @export
sample.kde_mixed <- function(x, size, replace = TRUE, prob = NULL, ...) {
  check_dots_empty("sample()", c("x", "size"), list(), ...)
  check_mixed(x, "x")
  if (!isTRUE(replace)) {
    stop_arg("replace", "must be TRUE for draws from a density estimate (they are independent).")
  }
  if (!is.null(prob)) stop_arg("prob", "does not apply to draws from a fit: give `weights` to kde_gpu().")
  if (missing(size)) stop_arg("size", "is missing: how many points to draw?")
  size <- check_count(size, "size")
  columns <- x$columns
  matrices <- discrete_kernel_matrices(columns, x$kernels, x$lambda)
  categorical_kind <- categorical_kinds(columns)
  # each point's mass: its weight times its kernels' totals over the levels
  log_mass <- log(x$weights)
  for (k in seq_along(matrices)) log_mass <- log_mass + log(colSums(matrices[[k]]))[x$codes[, k]]
  picked <- sample.int(x$n, size, replace = TRUE, prob = exp(log_mass - max(log_mass)))
  out <- vector("list", length(columns$names))
  names(out) <- columns$names
  if (ncol(x$x) > 0L) {
    numeric <- x$x[picked, , drop = FALSE] +
      matrix(stats::rnorm(size * ncol(x$x)), size) %*% chol(x$H)
    for (name in columns$numeric) out[[name]] <- numeric[, name]
  }
  for (k in seq_along(matrices)) {
    name <- columns$categorical[[k]]
    from <- x$codes[picked, k]
    drawn <- integer(size)
    for (r in unique(from)) {
      at <- which(from == r)
      drawn[at] <- sample.int(nrow(matrices[[k]]), length(at), replace = TRUE,
                              prob = matrices[[k]][, r])
    }
    out[[name]] <- factor(columns$levels[[k]][drawn], levels = columns$levels[[k]],
                          ordered = categorical_kind[[k]] == "ordered")
  }
  as.data.frame(out, stringsAsFactors = FALSE, optional = TRUE)
}

#' @rdname kde_gpu-mixed
#' @param digits Significant digits of the bandwidths.
#' @export
print.kde_mixed <- function(x, digits = 4L, ...) {
  check_dots_empty("print()", c("x", "digits"), list(), ...)
  check_mixed(x, "x")
  digits <- check_number(digits, "digits", min = 1)
  cat("Kernel density estimate of mixed data (kdegpu)\n")
  cat("  call:      ", paste(deparse(x$call), collapse = "\n"), "\n", sep = "")
  cat(sprintf("  data:      %s (%s point%s; %d numeric, %d factor column%s%s)\n", x$data.name,
              format_count(x$n), if (x$n == 1L) "" else "s", ncol(x$x), length(x$lambda),
              if (length(x$lambda) == 1L) "" else "s",
              if (is_weighted(x$weights)) ", weighted" else ""))
  if (ncol(x$x) > 0L) {
    cat("  numeric:   gaussian, ", mixed_bandwidth_label(x, digits), "\n", sep = "")
  }
  for (k in seq_along(x$lambda)) {
    cat(sprintf("  %-10s %s, %d levels, lambda = %s\n", paste0(names(x$lambda)[k], ":"),
                x$kernels[[k]], length(x$columns$levels[[k]]),
                format(signif(x$lambda[[k]], digits))))
  }
  if (!is.null(x$selection)) {
    pilot <- x$selection$pilot_evaluations
    cat(sprintf("  selected:  %s (%s %s, %d evaluations%s%s)\n",
                if (x$selection$method == "lscv") "least-squares cross-validation"
                else "maximum-likelihood cross-validation",
                if (x$selection$method == "lscv") "LSCV" else "log-likelihood",
                format(signif(x$selection$criterion, 7L)), x$selection$evaluations,
                if (isTRUE(pilot > 0L)) sprintf(" + %d on subsamples", pilot) else "",
                if (isTRUE(x$selection$converged)) "" else "; not converged"))
  }
  cat("  backend:   ", backend_label(x$inner), "\n", sep = "")
  invisible(x)
}

mixed_bandwidth_label <- function(object, digits) {
  H <- object$H
  if (identical(object$bandwidth_type, "full") && ncol(H) > 1L) {
    return(sprintf("full H (sd %s; see summary())",
                   paste(format(signif(sqrt(diag(H)), digits)), collapse = ", ")))
  }
  sprintf("bw %s", paste(format(signif(sqrt(diag(H)), digits)), collapse = ", "))
}

#' @rdname kde_gpu-mixed
#' @export
summary.kde_mixed <- function(object, ...) {
  check_dots_empty("summary()", "object", list(), ...)
  check_mixed(object)
  structure(list(fit = object, H = object$H, lambda = object$lambda,
                 n_effective = 1 / sum(object$weights^2),
                 levels = lapply(seq_along(object$lambda), function(k) {
                   table(factor(object$columns$levels[[k]][object$codes[, k]],
                                levels = object$columns$levels[[k]]))
                 })), class = "summary.kde_mixed")
}

#' @rdname kde_gpu-mixed
#' @export
print.summary.kde_mixed <- function(x, ...) {
  check_dots_empty("print()", "x", list(), ...)
  print(x$fit)
  cat(sprintf("  effective sample size: %.1f\n", x$n_effective))
  if (!is.null(x$H)) {
    cat("\nBandwidth matrix H of the numeric columns (kernel covariance):\n")
    print(signif(x$H, 4))
  }
  for (k in seq_along(x$lambda)) {
    cat(sprintf("\nLevels of %s:\n", names(x$lambda)[k]))
    print(x$levels[[k]])
  }
  invisible(x)
}

#' @rdname kde_gpu-mixed
#' @param column The numeric column to draw (name or number among the
#'   fit's columns; the first numeric one by default).
#' @param by The factor column whose levels give one curve each (the first
#'   factor by default): \eqn{\hat f(y \mid \mathrm{level})}{f(y | level)},
#'   the estimate of `column` and `by` given `by`, exact.
#' @param n Points on each curve.
#' @param main,xlab,ylab Titles, as for [plot()].
#' @details `plot()` draws the density of one numeric column at each level
#'   of one factor, with a legend of the levels.
#' @export
plot.kde_mixed <- function(x, column = NULL, by = NULL, n = 256L, main = NULL, xlab = NULL,
                           ylab = "Density", ...) {
  check_dots_empty("plot()", c("x", "column", "by", "n", "main", "xlab", "ylab"), list(), ...)
  check_mixed(x, "x")
  columns <- x$columns
  if (length(columns$numeric) == 0L) stop_arg("x", "has no numeric column to draw.")
  pick <- function(value, among, arg, what) {
    if (is.null(value)) return(among[[1L]])
    name <- columns$names[given_index(value, columns$names, Inf)]
    if (length(name) != 1L || !(name %in% among)) {
      stop_arg(arg, sprintf("must name one %s column of the fit (%s).", what,
                            paste(among, collapse = ", ")))
    }
    name
  }
  column <- pick(column, columns$numeric, "column", "numeric")
  by <- pick(by, columns$categorical, "by", "factor")
  n <- check_grid_size(n)
  check_label(main, "main")
  check_label(xlab, "xlab")
  check_label(ylab, "ylab")
  sd <- sqrt(x$H[column, column])
  grid <- seq(min(x$x[, column]) - 3 * sd, max(x$x[, column]) + 3 * sd, length.out = n)
  levels <- columns$levels[[match(by, columns$categorical)]]
  index <- match(c(column, by), columns$names)
  margin <- cached_margin_fit(x, index)
  curves <- vapply(levels, function(level) {
    q <- data.frame(grid, factor(level, levels = levels))
    names(q) <- c(column, by)
    predict(margin, q, given = by)
  }, numeric(n))
  colours <- grDevices::hcl.colors(length(levels), "Dark 3")
  graphics::matplot(grid, curves, type = "l", lty = 1, col = colours,
                    main = if (is.null(main)) sprintf("kde_gpu(%s): %s given %s", x$data.name,
                                                      column, by) else main,
                    xlab = if (is.null(xlab)) column else xlab, ylab = ylab)
  graphics::legend("topright", legend = levels, col = colours, lty = 1, title = by, bty = "n")
  invisible(x)
}
