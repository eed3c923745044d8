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
#' @param log If `TRUE`, log-densities: accurate and finite far into a
#'   Gaussian tail, where the density underflows to 0.
#' @param leave_one_out If `TRUE` (only without `newdata`), each training
#'   point's density under the estimate built from all the *other* points
#'   (weights renormalised): an outlier score, and the terms of
#'   [logLik()][logLik.kde_gpu]. The self term is excluded exactly inside
#'   the kernel sum, also for duplicated points.
#' @param ... Not used.
#' @return A numeric vector with one value per point.
#' @examples
#' fit <- kde_gpu(quakes[, c("lat", "long", "depth")], backend = "cpu")
#' head(predict(fit, log = TRUE))
#' # outlier scores: the least typical quakes have the lowest values
#' head(order(predict(fit, log = TRUE, leave_one_out = TRUE)))
#' predict(fit, c(-20, 180, 300))
#' @export
predict.kde_gpu <- function(object, newdata, log = FALSE, leave_one_out = FALSE, ...) {
  check_flag(log, "log")
  check_flag(leave_one_out, "leave_one_out")
  at_training_points <- missing(newdata) || is.null(newdata)
  if (leave_one_out) {
    if (!at_training_points) {
      stop_arg("leave_one_out", "applies to the training points only; drop `newdata`.")
    }
    log_density <- leave_one_out_log_density(object)
    return(if (log) log_density else exp(log_density))
  }
  query <- if (at_training_points) {
    object$x
  } else {
    match_columns(as_point_matrix(newdata, "newdata", object$d), object$x)
  }
  log_density <- evaluate_log_density(object, whiten(object, query))
  if (log) log_density else exp(log_density)
}

# Reorders the columns of `query` by name when both it and the training
# data name all their columns.
match_columns <- function(query, train) {
  q_names <- colnames(query)
  t_names <- colnames(train)
  if (is.null(q_names) || is.null(t_names) || identical(q_names, t_names)) return(query)
  if (!setequal(q_names, t_names)) {
    stop_arg("newdata", "has columns ", paste(q_names, collapse = ", "),
             " but the fit has ", paste(t_names, collapse = ", "), ".")
  }
  query[, t_names, drop = FALSE]
}

# log f_{-i}(x_i): the estimate without point i, its weight renormalised.
# -Inf for a point whose weight is all the weight there is.
leave_one_out_log_density <- function(object) {
  log_sum <- evaluate_log_density(object, object$z, leave_one_out = TRUE)
  w <- object$weights
  ifelse(w < 1, log_sum - log1p(-pmin(w, 1)), -Inf)
}
