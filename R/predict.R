#' Evaluate a kernel density estimate
#'
#' Exact densities or log-densities of a [kde_gpu()] fit at new points.
#'
#' @param object A [kde_gpu()] fit.
#' @param newdata Points at which to evaluate: a matrix or data frame with
#'   one point per row and the fit's columns (matched by name when both
#'   have names), or a numeric vector (points in 1-D, or one point when the
#'   fit has d > 1 and the vector has length d). Without it, the training
#'   points.
#' @param type What to compute: `"density"` (the default) or `"cdf"`, the
#'   estimate's cumulative distribution function \eqn{\hat F(x) = \int_{-\infty}^x
#'   \hat f}, in closed form: in 1-D for every kernel, in d > 1 for the
#'   Gaussian kernel with a diagonal H (\eqn{P(X_1 \le x_1, \dots, X_d \le
#'   x_d)}). Exact sums in double precision (for a CUDA fit on its first
#'   GPU, in either `precision`; `tolerance` does not apply); values in \eqn{[0, 1]},
#'   non-decreasing, each kernel term taken from its smaller tail so that
#'   small probabilities keep their relative accuracy (an adaptive fit's
#'   point j with its own sd, \eqn{\lambda_j} times the bandwidth). For a bounded fit
#'   it is the CDF of the folded density: 0 below `lower`, 1 from `upper`
#'   on. `newdata` may hold `-Inf` and `Inf` here.
#'
#'   `"gradient"`: the gradient of the density, an m x d matrix (one row
#'   per point); `"hessian"`: its Hessian, an m x d x d array (`[i, , ]` is
#'   the d x d matrix of point i). With `log = TRUE`, those of \eqn{\log
#'   \hat f}: the score \eqn{\nabla \log \hat f} and its Hessian, computed
#'   as kernel-weighted means (never as \eqn{\nabla \hat f / \hat f}), so
#'   they stay finite and accurate far into a Gaussian tail where \eqn{\hat
#'   f} underflows; `NaN` where the estimate is 0 (outside a compact
#'   kernel's reach). Every kernel but the rectangular (flat inside its
#'   support), on the fit's backend: the CPU's sums are exact in double
#'   precision; a GPU fit's are fused sums in the fit's precision (single:
#'   about 1e-5 relative to a point's largest entry; double: about 1e-12),
#'   within `tolerance` as below.
#'   Kernels with a kink give the derivative almost everywhere: at the edge
#'   of a compact support the terms of points exactly at distance 1 count
#'   as outside, and the triangular and exponential kernels (a cusp at 0)
#'   have an infinite Hessian at a training point. A bounded fit's are
#'   those of its reflection estimate inside the box (the images' derivatives,
#'   reflected) and 0 outside (`NaN` for the log-density's). An adaptive
#'   fit's come from the CPU's sums, whatever its backend.
#' @param log If `TRUE`, log-densities: accurate and finite far into a
#'   Gaussian tail, where the density underflows to 0. With `type =
#'   "gradient"` or `"hessian"`, derivatives of the log-density.
#' @param leave_one_out If `TRUE` (only without `newdata`), each training
#'   point's density under the estimate built from all the *other* points
#'   (weights renormalised): an outlier score, and the terms of
#'   [logLik()][logLik.kde_gpu]. The self term is excluded exactly inside
#'   the kernel sum, also for duplicated points. An adaptive fit keeps the
#'   full fit's local factors (its pilot is not refitted without the point).
#' @param cluster Where to evaluate: `NULL` (here), a cluster from
#'   [parallel::makeCluster()], or `"future"` for the current
#'   [future::plan()] (multisession, cluster, or a batch scheduler through
#'   future.batchtools). Each worker evaluates with its own backend (its GPUs,
#'   or its CPU cores) and needs kdegpu installed. A `parallel` worker
#'   receives the training data once per fit and keeps it.
#' @param split With a cluster: `"queries"` gives every worker all training
#'   points and a chunk of the queries; `"training"` gives each worker a shard
#'   of the training points (for training sets too large for one node) and
#'   merges the shards' log-sum-exp states. Leave-one-out always shards the
#'   training points. Results equal the single-process ones to rounding.
#' @param tolerance The relative error allowed in each density (a number in
#'   `[0, 1)`; `NULL`, the default when `options(kdegpu.tolerance)` is unset,
#'   means [default_tolerance] for the precision the backend computes in:
#'   1e-14 in double, 1e-7 in single). Evaluation skips the training points
#'   that provably cannot matter: a tile of 256 nearby training points whose
#'   kernel values are 0 at a block of nearby queries (compact kernels; no
#'   approximation at all), and, for the Gaussian and exponential kernels,
#'   tiles whose proven upper bounds add up to at most `tolerance` times a
#'   proven lower bound of every query's sum. So every returned density
#'   \eqn{\hat f'} satisfies \eqn{(1 - tolerance) \hat f \le \hat f' \le
#'   \hat f} for the exact sum \eqn{\hat f} (before rounding), whatever the
#'   data; `tolerance = 0` computes the full sum. In 1 to 5 dimensions most
#'   pairs are far apart in bandwidth units, which is where the speed comes
#'   from; in many dimensions little can be skipped and nothing is lost.
#'   The GPU sums small evaluations whole, where planning what to skip
#'   would cost more than it saves: up to 128 queries against fewer than
#'   3e6 training points in single precision (1e6 in double), and more
#'   queries below 2e9 query-point pairs (1e9 in double). Fits of data in
#'   clusters far apart, or spanning many bandwidths (maps, GPS), are
#'   planned from half those pairs (a quarter for more queries in double),
#'   where groups of the fit's tiles estimate that a query needs at most
#'   10% of them.
#'   On the GPU the same tolerance chooses the Gaussian's form: the faster
#'   expanded form (tensor cores) only where its predicted rounding is
#'   within it (see Backends and precision in [kde_gpu()]), so `tolerance =
#'   1e-4` is how to opt into the faster form, and the default keeps the
#'   exact difference form.
#'   For `type = "gradient"` and `"hessian"` on the GPU the same proof,
#'   with each tile's bound multiplied by what bounds its derivative terms
#'   (its distance to the queries), keeps each of the sums behind them
#'   within `tolerance` times the density's (in whitened units); the CPU
#'   computes them in full. That accuracy is absolute in this sense: a
#'   gradient is within about `tolerance` times the density over the
#'   bandwidth of the full sum's, not within `tolerance` of the gradient
#'   itself, which near a mode, saddle or other stationary point is far
#'   smaller than the density (the score, `log = TRUE`, is within about
#'   `tolerance` per bandwidth there). [kde_modes()] chooses its own
#'   tolerance from its `tol` for that reason.
#'   How much was skipped shows in the fit's [print()][kde_gpu-methods]:
#'   the share of the query x training pairs that the last evaluation of
#'   the fit in this R session computed (1 when nothing was skipped; the CUDA
#'   backend counts whole tiles of 256 points; evaluations on cluster
#'   workers leave it unchanged).
#' @param given `NULL`, or the columns (names or numbers) to condition on:
#'   the conditional density \eqn{\hat f(y \mid x) = \hat f(x, y) / \hat
#'   f_X(x)} of the other columns y given these x, at the rows of `newdata`
#'   (or at the training points; with `leave_one_out = TRUE` each point is
#'   left out of both sums, the leave-one-out conditional likelihood of
#'   `np::npcdensbw`'s `cv.ml`). The margin \eqn{\hat f_X} of a Gaussian
#'   fit is exact: the Gaussian estimate of those columns with the matching
#'   block of H (and an adaptive fit's own factors), computed by the same
#'   engines; other kernels and bounded fits are refused, their margins
#'   having no closed form. Each of the two sums keeps its `tolerance`, so
#'   the ratio is within about twice it. With `type = "cdf"` and one
#'   response column y, the conditional CDF \eqn{\hat F(y \mid x)}{F(y | x)}
#'   (`np::npcdist()`), exact: given x, each point's kernel is normal in y
#'   (mean \eqn{y_j + H_{yx} H_{xx}^{-1} (x - x_j)}, variance \eqn{H_{yy} -
#'   H_{yx} H_{xx}^{-1} H_{xy}}), so it is a weighted sum of normal CDFs,
#'   summed exactly in double on the fit's backend (every GPU in
#'   `kdegpu.devices` for a CUDA fit); an adaptive fit's point j has its
#'   own factor. `-Inf`/`Inf` in the response give 0 and 1. Its quantiles:
#'   [quantile()][quantile.kde_gpu] with `given`.
#' @param ... Not used: an argument given here is an error that names it
#'   (`x = ` gets a pointer to `newdata`, the name `ks::kde` users know).
#' @return For `"density"` and `"cdf"`, a numeric vector with one value per point, named by the row
#'   names of `newdata` (a data frame's, as [stats::predict.lm()] does, or a
#'   matrix's) or the names of a named vector; at the training points, by
#'   the row names of the data, if it had any. For `"gradient"`, a matrix
#'   and for `"hessian"` an array, as described under `type`, with the
#'   same row names.
#' @examples
#' fit <- kde_gpu(quakes[, c("lat", "long", "depth")], backend = "cpu")
#' head(predict(fit, log = TRUE))
#' # outlier scores: the least typical quakes have the lowest values
#' head(order(predict(fit, log = TRUE, leave_one_out = TRUE)))
#' \donttest{
#' # on two local worker processes, each with its own backend
#' cl <- parallel::makePSOCKcluster(2)
#' head(predict(fit, log = TRUE, cluster = cl))
#' parallel::stopCluster(cl)
#' }
#' predict(fit, c(-20, 180, 300))
#'
#' # the score (gradient of the log-density) and the Hessian at two points
#' fit2 <- kde_gpu(faithful, backend = "cpu")
#' predict(fit2, faithful[1:2, ], type = "gradient", log = TRUE)
#' predict(fit2, faithful[1, ], type = "hessian")[1, , ]
#'
#' # the CDF of a 1-D fit, and a bounded one
#' fit1 <- kde_gpu(faithful$eruptions, backend = "cpu")
#' predict(fit1, c(2, 3, 4), type = "cdf")
#' predict(kde_gpu(rivers, lower = 0, backend = "cpu"), c(0, 500, 1000), type = "cdf")
#'
#' # the conditional density of the waiting time given the eruption's length
#' predict(fit2, data.frame(eruptions = c(2, 4.5), waiting = c(55, 80)), given = "eruptions")
#' @export
predict.kde_gpu <- function(object, newdata, log = FALSE, leave_one_out = FALSE,
                            cluster = NULL, split = c("queries", "training"),
                            tolerance = getOption("kdegpu.tolerance"),
                            type = c("density", "cdf", "gradient", "hessian"),
                            given = NULL, ...) {
  check_dots_empty("predict()", c("object", "newdata", "log", "leave_one_out", "cluster",
                                  "split", "tolerance", "type", "given"), predict_hints, ...)
  check_fit(object)
  type <- match_choice(type, predict_types, "type")
  check_flag(log, "log")
  check_flag(leave_one_out, "leave_one_out")
  # the default is the option: a bad value there names the option
  if (!is.null(tolerance)) {
    tolerance <- check_tolerance(tolerance, if (missing(tolerance)) "options(kdegpu.tolerance)"
                                            else "tolerance")
  }
  if (!is.null(given)) {
    return(predict_conditional(object, if (!missing(newdata)) newdata, given, log,
                               leave_one_out, cluster, split, tolerance, type))
  }
  engine <- cluster_engine(cluster)
  split <- match_choice(split, c("queries", "training"), "split")
  at_training_points <- missing(newdata) || is.null(newdata)
  if (type %in% c("gradient", "hessian")) {
    if (leave_one_out) stop_arg("leave_one_out", sprintf("applies to type = \"density\", not \"%s\".", type))
    if (!is.null(engine)) stop_arg("cluster", sprintf("applies to type = \"density\", not \"%s\".", type))
    query <- if (at_training_points) object$x else
      match_columns(as_point_matrix(newdata, "newdata", object$d), object$x)
    out <- evaluate_derivative(object, query, type, log, tolerance)
    rownames(out) <- if (at_training_points) rownames(object$x) else query_names(newdata, object$d)
    return(out)
  }
  if (type != "density") {
    for (arg in c("log", "leave_one_out")) {
      if (isTRUE(get(arg))) stop_arg(arg, sprintf("applies to type = \"density\", not \"%s\".", type))
    }
    if (!is.null(engine)) stop_arg("cluster", sprintf("applies to type = \"density\", not \"%s\".", type))
  }
  if (type == "cdf") {
    query <- if (at_training_points) object$x else
      match_columns(as_point_matrix(newdata, "newdata", object$d, allow_infinite = TRUE), object$x)
    out <- evaluate_cdf(object, query)
    names(out) <- if (at_training_points) rownames(object$x) else query_names(newdata, object$d)
    return(out)
  }
  if (leave_one_out) {
    if (!at_training_points) {
      stop_arg("leave_one_out", "applies to the training points only; drop `newdata`.")
    }
    log_density <- leave_one_out_log_density(object, engine, tolerance)
    names(log_density) <- rownames(object$x)
    return(if (log) log_density else exp_on_cores(log_density))
  }
  query <- if (at_training_points) {
    object$x
  } else {
    match_columns(as_point_matrix(newdata, "newdata", object$d), object$x)
  }
  point_names <- if (at_training_points) rownames(object$x) else query_names(newdata, object$d)
  evaluate <- if (is.null(engine)) {
    function(q) evaluate_log_density(object, q, tolerance = tolerance)
  } else {
    function(q) cluster_log_sum(engine, fit_cluster_data(object), q, object$H, object$kernel,
                                object$precision, worker_backend(object), split,
                                tolerance = tolerance)
  }
  log_density <- if (is_bounded(object)) {
    folded_log_density(query, object$images, object$lower, object$upper, evaluate)
  } else {
    evaluate(query)
  }
  names(log_density) <- point_names
  if (log) log_density else exp_on_cores(log_density)
}

predict_hints <- list(
  x = paste("The points to evaluate at go in `newdata`: predict(fit, newdata = x)",
            "(ks's predict.kde calls them `x`).")
)

# What predict() can compute, the default first.
predict_types <- c("density", "cdf", "gradient", "hessian")

# The names of the points in `newdata`: a data frame's row names (as
# predict.lm() gives them), a matrix's row names, or a vector's names when
# its elements are points (1-D).
query_names <- function(newdata, d) {
  if (is.data.frame(newdata)) return(row.names(newdata))
  if (is.matrix(newdata)) return(rownames(newdata))
  if (d == 1L) names(newdata) else NULL
}

# Workers pick their own backend ("auto": their GPUs if usable, else their
# CPU cores) unless the fit was made with an explicit backend.
worker_backend <- function(object) {
  requested <- object$requested_backend
  if (is.null(requested)) "auto" else requested
}

# Reorders the columns of `query` by name when both it and the training
# data name all their columns; `arg` names the user's argument.
match_columns <- function(query, train, arg = "newdata") {
  q_names <- colnames(query)
  t_names <- colnames(train)
  if (is.null(q_names) || is.null(t_names) || identical(q_names, t_names)) return(query)
  if (!setequal(q_names, t_names)) {
    stop_arg(arg, "has columns ", paste(q_names, collapse = ", "),
             " but the fit has ", paste(t_names, collapse = ", "), ".")
  }
  query[, t_names, drop = FALSE]
}

# log f_{-i}(x_i): the estimate without point i, its weight renormalised.
# -Inf for a point whose weight is all the weight there is.
leave_one_out_log_density <- function(object, engine = NULL, tolerance = NULL) {
  log_sum <- if (is_bounded(object)) {
    bounded_leave_one_out_sum(object, tolerance, engine,
                              if (!is.null(engine)) fit_cluster_data(object))
  } else if (is.null(engine)) {
    log_density_at_training_points(object, leave_one_out = TRUE, tolerance = tolerance)
  } else {
    cluster_log_sum(engine, fit_cluster_data(object), object$x, object$H, object$kernel,
                    object$precision, worker_backend(object), "training", leave_one_out = TRUE,
                    tolerance = tolerance)
  }
  renormalise_leave_one_out(log_sum, object$weights)
}

# From log sum_{j != i} w_j K to log f_{-i}: divide by the other points'
# weight, 1 - w_i; -Inf for a point whose weight is all there is.
renormalise_leave_one_out <- function(log_sum, weights) {
  ifelse(weights < 1, log_sum - log1p(-pmin(weights, 1)), -Inf)
}
