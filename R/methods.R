bandwidth_label <- function(object, digits = 4L) {
  # a selector's name without its shape (the label shows the shape)
  base <- sub("-(scalar|diagonal|full)$", "", object$bandwidth_method)
  method <- switch(base,
    given = "given", nrd0 = "rule nrd0", nrd = "rule nrd",
    scott = "Scott's rule", silverman = "Silverman's rule",
    lscv = "least-squares cross-validation", mlcv = "likelihood cross-validation",
    scv = "smoothed cross-validation", plugin = "plug-in",
    SJ = , sj = , `sj-ste` = "Sheather-Jones", `sj-dpi` = "Sheather-Jones direct plug-in",
    object$bandwidth_method)
  # A fit made before `adjust` existed has none.
  if (!is.null(object$adjust) && object$adjust != 1) {
    method <- sprintf("%s, adjust = %s", method, format(signif(object$adjust, digits)))
  }
  if (object$bandwidth_type == "full") return(sprintf("full H (%s)", method))
  bw <- signif(object$bw, digits)
  if (object$bandwidth_type == "scalar") bw <- bw[[1L]]
  sprintf("bw = %s (%s)", paste(format(bw), collapse = ", "), method)
}

backend_label <- function(object) {
  if (object$backend == "cuda") {
    # once the fit is on the GPU: how its pairs are computed (the Gaussian
    # leaves the tensor cores for the exact difference form where the
    # expanded form would round too much: ?kde_gpu, precision)
    handle <- object$device$handle
    path <- if (!is.null(handle)) attr(handle, "path")
    sprintf("cuda, %s precision%s", object$precision,
            if (is.null(path)) "" else paste0(" (", path, ")"))
  } else {
    info <- .Call(C_kdegpu_cpu_info, cpu_threads())
    threads <- info$threads
    sprintf("cpu (%s, %d thread%s), double precision",
            if (info$openmp) "OpenMP" else "no OpenMP", threads,
            if (threads == 1L) "" else "s")
  }
}

#' Print and summarise a kernel density estimate
#'
#' `print()` shows the data, kernel, bandwidth (for an adaptive fit also
#' its `alpha` and the range of its local factors) and backend of a
#' [kde_gpu()] fit, and, once it has been evaluated, the share of the
#' query x training pairs that its last evaluation computed: below 100% when
#' the spatial tiles let it skip pairs that provably cannot matter (see
#' `tolerance` in [predict()][predict.kde_gpu]); `summary()` adds the
#' bandwidth matrix, the effective sample size, a summary of the local
#' factors of an adaptive fit (`lambda`) and of the data, and keeps that
#' share as `pairs_share`. [plot()][plot.kde_gpu] draws it.
#'
#' @param x,object A [kde_gpu()] fit (or its summary, for `print`).
#' @param digits Significant digits of the bandwidths `print()` shows.
#' @param ... Not used: an argument given here is an error that names it.
#' @return `print()` returns `x` invisibly; `summary()` an object of class
#'   `"summary.kde_gpu"`.
#' @examples
#' fit <- kde_gpu(faithful, backend = "cpu")
#' fit
#' summary(fit)
#' # after an evaluation, the share of pairs it computed
#' invisible(predict(fit, faithful[1:10, ]))
#' fit
#' @name kde_gpu-methods
NULL

#' @rdname kde_gpu-methods
#' @export
print.kde_gpu <- function(x, digits = 4L, ...) {
  check_dots_empty("print()", c("x", "digits"), list(), ...)
  check_fit(x, "x")
  digits <- check_number(digits, "digits", min = 1)
  cat("Kernel density estimate (kdegpu)\n")
  cat("  call:      ", paste(deparse(x$call), collapse = "\n"), "\n", sep = "")
  cat(sprintf("  data:      %s (%s point%s in %d dimension%s%s)\n", x$data.name,
              format_count(x$n), if (x$n == 1L) "" else "s", x$d, if (x$d == 1L) "" else "s",
              if (is_weighted(x$weights)) ", weighted" else ""))
  cat("  kernel:    ", x$kernel, if (isTRUE(x$debias)) " (score-debiased points, SD-KDE)", "\n",
      sep = "")
  cat("  bandwidth: ", bandwidth_label(x, digits), "\n", sep = "")
  if (!is.null(x$adaptive)) cat("  adaptive:  ", adaptive_label(x, digits), "\n", sep = "")
  bounds <- bounds_label(x)
  if (!is.null(bounds)) {
    cat(sprintf("  support:   %s (reflection, %d image%s)\n", bounds, nrow(x$images$sign),
                if (nrow(x$images$sign) == 1L) "" else "s"))
  }
  cat("  backend:   ", backend_label(x), "\n", sep = "")
  share <- pairs_share(x)
  if (!is.na(share))
    cat(sprintf("  last evaluation: %.3g%% of the query x training pairs computed\n",
                100 * share))
  invisible(x)
}

# A count as "1000000000" (sprintf's %d refuses doubles past 2^31 - 1, and a
# fit may hold more points than that).
format_count <- function(n) format(n, scientific = FALSE, trim = TRUE)

# Whether the weights differ: min and max, one pass each without copies
# (unique() hashed all n of them: 10 s at 1e8 on every print).
is_weighted <- function(weights) length(weights) > 1L && min(weights) != max(weights)

# An adaptive fit's line: its alpha and the range of its local factors
# (each point's bandwidth is lambda_j times the one above).
adaptive_label <- function(object, digits = 4L) {
  lambda <- range(object$adaptive$lambda[object$weights > 0])
  sprintf("sample-point (Abramson), alpha = %s, local factors %s to %s",
          format(signif(object$adaptive$alpha, digits)), format(signif(lambda[1L], 3L)),
          format(signif(lambda[2L], 3L)))
}

# The share of the query x training pairs that the fit's last evaluation in
# this session computed (record_pairs_share() keeps it); NA before any.
pairs_share <- function(object) {
  share <- if (is.character(object$id)) evaluation_record$shares[object$id]
  if (length(share) != 1L || is.na(share)) NA_real_ else unname(share)
}

#' @rdname kde_gpu-methods
#' @export
summary.kde_gpu <- function(object, ...) {
  check_dots_empty("summary()", "object", list(), ...)
  check_fit(object)
  structure(list(
    fit = object,
    H = object$H,
    n_effective = 1 / sum(object$weights^2),
    data = summary(object$x),
    lambda = if (!is.null(object$adaptive)) summary(object$adaptive$lambda),
    pairs_share = pairs_share(object)
  ), class = "summary.kde_gpu")
}

#' @rdname kde_gpu-methods
#' @export
print.summary.kde_gpu <- function(x, ...) {
  check_dots_empty("print()", "x", list(), ...)
  print(x$fit)
  cat(sprintf("  effective sample size: %.1f\n", x$n_effective))
  cat("\nBandwidth matrix H (kernel covariance):\n")
  print(signif(x$H, 4))
  if (!is.null(x$lambda)) {
    cat("\nLocal bandwidth factors lambda (point j's bandwidth matrix is lambda_j^2 H):\n")
    print(x$lambda)
  }
  cat("\nData:\n")
  print(x$data)
  invisible(x)
}

#' Leave-one-out log-likelihood of a kernel density estimate
#'
#' The log-likelihood of the training data under the leave-one-out
#' estimate, \eqn{\sum_i \log \hat f_{-i}(x_i)}, where \eqn{\hat f_{-i}}
#' omits point i and renormalises the other weights; the criterion that
#' likelihood cross-validation maximises. Each self term is excluded inside
#' the kernel sum, exactly, also for duplicated points. With weights,
#' point i counts \eqn{n w_i} times (weights normalised to sum 1).
#'
#' @param object A [kde_gpu()] fit with at least two points of positive weight.
#' @param cluster As in [predict()][predict.kde_gpu]: `NULL`, a `parallel`
#'   cluster or `"future"`; the training points are sharded across workers.
#' @param tolerance The relative error allowed in each leave-one-out
#'   density, as in [predict()][predict.kde_gpu].
#' @param ... Not used: an argument given here is an error that names it.
#' @return An object of class `"logLik"` with attributes `df` (the number of
#'   free bandwidth parameters: 1 for a scalar, d for a diagonal, d(d+1)/2
#'   for a full H) and `nobs`.
#' @examples
#' fit <- kde_gpu(faithful$eruptions, backend = "cpu")
#' logLik(fit)
#' logLik(kde_gpu(faithful$eruptions, bw = 0.2, backend = "cpu"))
#' @importFrom stats logLik
#' @export
logLik.kde_gpu <- function(object, cluster = NULL, tolerance = getOption("kdegpu.tolerance"),
                           ...) {
  check_dots_empty("logLik()", c("object", "cluster", "tolerance"), list(), ...)
  # the default is the option: a bad value there names the option
  if (!is.null(tolerance)) {
    tolerance <- check_tolerance(tolerance, if (missing(tolerance)) "options(kdegpu.tolerance)"
                                            else "tolerance")
  }
  check_fit(object)
  if (sum(object$weights > 0) < 2L) {
    stop("logLik() needs at least two points of positive weight.", call. = FALSE)
  }
  loo <- leave_one_out_log_density(object, cluster_engine(cluster), tolerance)
  loo_log_lik(loo, object$weights, bandwidth_parameters(object$bandwidth_type, object$d))
}

# sum_i n w_i log f_{-i}(x_i) as a "logLik" with `df` free parameters.
loo_log_lik <- function(loo, weights, df) {
  w <- weights * length(weights)
  structure(sum(ifelse(w > 0, w * loo, 0)), df = df, nobs = length(weights), class = "logLik")
}

# The free parameters of a bandwidth matrix of this shape in d dimensions.
bandwidth_parameters <- function(type, d) {
  switch(type, scalar = 1L, diagonal = d, full = d * (d + 1L) / 2L)
}

#' Convert a 1-D kernel density estimate to a density object
#'
#' Evaluates a 1-D [kde_gpu()] fit exactly on a regular grid and returns a
#' [stats::density()] object, which base R's `print()`, `plot()` and
#' `lines()` accept.
#'
#' @param x A 1-D [kde_gpu()] fit.
#' @param n Number of grid points.
#' @param lims The grid's limits, `c(from, to)` (as for [kde_grid()]); by
#'   default `cut` bandwidths beyond the data, but not beyond the bounds of
#'   a bounded fit. One end may be `NA` to keep its default.
#' @param cut Bandwidths beyond the data, as in [stats::density()].
#' @param ... `from` and `to`, the old spelling of `lims` (deprecated: they
#'   work, with a warning, until the next release); anything else is an
#'   error.
#' @return An object of class `"density"`.
#' @examples
#' dens <- as.density(kde_gpu(faithful$eruptions, backend = "cpu"))
#' dens
#' plot(dens)
#' @export
as.density <- function(x, ...) UseMethod("as.density")

# as.density()'s `from` and `to` (in `...`), renamed `lims`: c(from, to)
# (NA for one not given) with a warning, or NULL when neither is given.
old_grid_ends <- function(lims, ...) {
  dots <- list(...)
  names <- names(dots)
  if (is.null(names)) names <- rep("", length(dots))
  old <- names %in% c("from", "to")
  do.call(check_dots_empty, c(list("as.density()", c("x", "n", "lims", "cut")), dots[!old]))
  if (!any(old)) return(NULL)
  warning("as.density(): `from` and `to` are deprecated; use `lims = c(from, to)` ",
          "(the old names go in the next release).", call. = FALSE)
  if (!is.null(lims)) stop_arg("lims", "is given together with its old spelling `from`/`to`.")
  c(check_number(dots$from, "from", null_ok = TRUE) %||% NA,
    check_number(dots$to, "to", null_ok = TRUE) %||% NA)
}

#' @rdname as.density
#' @export
as.density.kde_gpu <- function(x, n = 512L, lims = NULL, cut = 3, ...) {
  ends <- old_grid_ends(lims, ...)
  if (!is.null(ends)) lims <- ends
  check_fit(x, "x")
  if (x$d != 1L) {
    stop_arg("x", sprintf("must be a 1-D fit for as.density(), not %d-D.", x$d))
  }
  n <- check_count(n, "n")
  if (n < 1L) stop_arg("n", "must be at least 1: the number of grid points.")
  if (!is.null(lims) && (!is.numeric(lims) || length(lims) != 2L || any(is.infinite(lims)) ||
                         isTRUE(lims[[1L]] > lims[[2L]]))) {
    stop_arg("lims", "must be c(from, to): two finite numbers, from <= to (NA keeps a default).")
  }
  from <- if (!is.null(lims) && !is.na(lims[[1L]])) lims[[1L]]
  to <- if (!is.null(lims) && !is.na(lims[[2L]])) lims[[2L]]
  cut <- check_number(cut, "cut", min = 0)
  bw <- sqrt(x$H[1L, 1L])
  # by default within the bounds of a bounded fit
  # an adaptive fit's point j reaches lambda_j bandwidths
  reach <- cut * bw * if (is.null(x$adaptive)) 1 else x$adaptive$lambda
  if (is.null(from)) from <- max(min(x$x - reach), bound_or(x$lower, -Inf))
  if (is.null(to)) to <- min(max(x$x + reach), bound_or(x$upper, Inf))
  grid <- seq(from, to, length.out = n)
  structure(list(
    x = grid, y = predict(x, grid), bw = bw, n = x$n,
    old.coords = FALSE,
    call = x$call, data.name = x$data.name, has.na = FALSE
  ), class = "density")
}
