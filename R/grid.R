#' Evaluate a kernel density estimate on a regular grid
#'
#' `kde_grid()` evaluates a [kde_gpu()] fit exactly at every point of a
#' regular grid in up to three dimensions and returns a long data frame,
#' one row per grid point, ready for `ggplot2` or [stats::reshape()].
#' `as.data.frame()` of a fit does the same.
#'
#' With `margin`, the grid covers those columns only and the values are
#' the fit's marginal density there (the other columns integrated out),
#' also exactly: the margin of a kernel density estimate is the estimate of
#' those columns with the margin of the kernel. For the Gaussian kernel
#' that is the Gaussian with the matching block of `H`, evaluated by the
#' backends; for the others the margin of the radially symmetric
#' d-dimensional kernel is a different function (the 2-D margin of a 3-D
#' rectangular kernel is not flat), which kdegpu tabulates once per
#' session by numerical integration (relative error about 1e-9) and sums
#' over the training points in R, in chunks of bounded memory: for the
#' compact kernels only the pairs within the kernel's reach (tiles of grid
#' points against the training points near them), for the exponential all
#' pairs, which costs time proportional to the grid points times the
#' training points.
#'
#' @param fit,x A [kde_gpu()] fit.
#' @param n Grid points per axis: one number for every axis, or one per
#'   axis. By default 512 in 1-D (as [stats::density()]), 151 per axis in
#'   2-D (as `ks`) and 51 in 3-D.
#' @param lims The grid's limits: `c(from, to)` in 1-D, `c(x_from, x_to,
#'   y_from, y_to)` in 2-D (as `MASS::kde2d()`), and so on; by default
#'   `cut` bandwidths (kernel standard deviations) beyond the data's range
#'   on each axis, but not beyond the bounds of a bounded fit.
#' @param cut Bandwidths beyond the data for the default limits, as in
#'   [stats::density()].
#' @param margin `NULL` (all columns; the fit must have at most 3), or the
#'   names or numbers of 1 to 3 columns whose marginal density to evaluate.
#' @param row.names,optional As in [base::as.data.frame()]: `row.names`, if
#'   given, names the rows; `optional` is not used.
#' @param ... Not used: an argument given here is an error that names it.
#' @return A data frame with one column per grid axis, named as the fit's
#'   columns (`x` for an unnamed 1-D fit, `x1`, `x2`, ... otherwise), and
#'   `density`; the first axis varies fastest, as in [expand.grid()], so
#'   `matrix(g$density, n[1])` is the 2-D grid as [image()] and
#'   [contour()] take it.
#' @seealso [contour_levels()] for the levels of highest-density regions,
#'   [plot.kde_gpu()].
#' @examples
#' fit <- kde_gpu(faithful, backend = "cpu")
#' g <- kde_grid(fit, n = 60)
#' head(g)
#' # the grid as a matrix, with contours at probability levels
#' z <- matrix(g$density, 60)
#' contour(unique(g$eruptions), unique(g$waiting), z,
#'         levels = contour_levels(fit), labels = c("25%", "50%", "75%"))
#'
#' # the marginal density of one column of a 3-D fit
#' fit3 <- kde_gpu(quakes[, c("lat", "long", "depth")], kernel = "epanechnikov",
#'                 backend = "cpu")
#' head(kde_grid(fit3, n = 100, margin = "depth"))
#' @export
kde_grid <- function(fit, n = NULL, lims = NULL, cut = 3, margin = NULL) {
  check_fit(fit, "fit")
  grid <- evaluate_grid(fit, n, lims, cut, margin)
  long_grid(grid)
}

#' @rdname kde_grid
#' @export
as.data.frame.kde_gpu <- function(x, row.names = NULL, optional = FALSE, n = NULL,
                                  lims = NULL, cut = 3, margin = NULL, ...) {
  check_dots_empty("as.data.frame()", c("x", "row.names", "optional", "n", "lims", "cut",
                                        "margin"), list(), ...)
  check_fit(x, "x")
  out <- long_grid(evaluate_grid(x, n, lims, cut, margin, fit_arg = "x"))
  if (!is.null(row.names)) {
    if (length(row.names) != nrow(out)) {
      stop_arg("row.names", sprintf("must have one name per grid point (%d), not %d.",
                                    nrow(out), length(row.names)))
    }
    row.names(out) <- row.names
  }
  out
}

# The names of a fit's columns for labels and grids: the data's, else "x"
# in 1-D and "x1", "x2", ... in d > 1.
column_labels <- function(fit) {
  labels <- colnames(fit$x)
  if (is.null(labels)) labels <- if (fit$d == 1L) "x" else paste0("x", seq_len(fit$d))
  labels[!nzchar(labels)] <- paste0("x", which(!nzchar(labels)))
  labels
}

# Column numbers from `margin` (names or numbers), NULL meaning all.
resolve_margin <- function(fit, margin, max_columns = 3L, arg = "fit") {
  if (is.null(margin)) {
    if (fit$d > max_columns) {
      stop_arg(arg, sprintf(paste0(
        "has %d dimensions; grids have at most %d: choose up to %d columns with ",
        "`margin` (e.g. margin = c(1, 2)) for their marginal density."),
        fit$d, max_columns, max_columns))
    }
    return(seq_len(fit$d))
  }
  labels <- column_labels(fit)
  columns <- if (is.character(margin) && !anyNA(margin)) {
    match(margin, labels)
  } else if (is.numeric(margin) && !anyNA(margin) && all(margin == round(margin))) {
    ifelse(margin >= 1 & margin <= fit$d, as.integer(margin), NA_integer_)
  } else {
    stop_arg("margin", "must be the names or numbers of the fit's columns.")
  }
  if (anyNA(columns)) {
    stop_arg("margin", sprintf("names columns the fit does not have: %s (it has %s).",
                               paste(margin[is.na(columns)], collapse = ", "),
                               paste(labels, collapse = ", ")))
  }
  if (length(columns) < 1L || length(columns) > max_columns || anyDuplicated(columns)) {
    stop_arg("margin", sprintf("must name 1 to %d different columns.", max_columns))
  }
  columns
}

# The grid's axes: per column, `n` points from the limits.
grid_axes <- function(fit, columns, n, lims, cut) {
  k <- length(columns)
  if (is.null(n)) n <- c(512L, 151L, 51L)[min(k, 3L)]
  if (!is.numeric(n) || !length(n) %in% c(1L, k) || anyNA(n) || any(!is.finite(n)) ||
      any(n < 2) || any(n != round(n))) {
    stop_arg("n", sprintf("must be whole numbers of at least 2: one, or one per axis (%d).", k))
  }
  n <- rep_len(as.integer(n), k)
  if (!is.numeric(cut) || length(cut) != 1L || is.na(cut) || !is.finite(cut) || cut < 0) {
    stop_arg("cut", "must be one non-negative number (bandwidths beyond the data).")
  }
  if (is.null(lims)) {
    # each point's own bandwidths (lambda_j times H's for an adaptive fit)
    reach <- outer(if (is.null(fit$adaptive)) rep(1, fit$n) else fit$adaptive$lambda,
                   cut * sqrt(diag(fit$H))[columns])
    lower <- apply(fit$x[, columns, drop = FALSE] - reach, 2L, min)
    upper <- apply(fit$x[, columns, drop = FALSE] + reach, 2L, max)
    # within the bounds of a bounded fit (where its density is not 0)
    lower <- pmax(lower, bound_or(fit$lower, -Inf)[columns])
    upper <- pmin(upper, bound_or(fit$upper, Inf)[columns])
  } else {
    if (!is.numeric(lims) || length(lims) != 2L * k || anyNA(lims) || any(!is.finite(lims))) {
      stop_arg("lims", sprintf(paste0(
        "must be %d finite numbers: from and to for each axis, c(from1, to1, ...)."), 2L * k))
    }
    lower <- lims[c(TRUE, FALSE)]
    upper <- lims[c(FALSE, TRUE)]
    if (any(lower >= upper)) stop_arg("lims", "must give each axis a `from` below its `to`.")
  }
  axes <- lapply(seq_len(k), function(i) seq(lower[i], upper[i], length.out = n[i]))
  names(axes) <- column_labels(fit)[columns]
  axes
}

# The density (marginal where `margin` leaves columns out) on the grid:
# list(axes = named list of axis vectors, density = array, columns).
evaluate_grid <- function(fit, n, lims, cut, margin, fit_arg = "fit") {
  columns <- resolve_margin(fit, margin, arg = fit_arg)
  axes <- grid_axes(fit, columns, n, lims, cut)
  points <- as.matrix(expand.grid(axes, KEEP.OUT.ATTRS = FALSE))
  density <- margin_density(fit, columns, points)
  list(axes = axes, density = array(density, lengths(axes)), columns = columns)
}

# One row per grid point, first axis fastest. A column of the data called
# "density" becomes "density.1", so that `density` is always the values.
long_grid <- function(grid) {
  out <- expand.grid(grid$axes, KEEP.OUT.ATTRS = FALSE)
  names(out) <- make.unique(c("density", names(grid$axes)))[-1L]
  out$density <- as.vector(grid$density)
  out
}
