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
#' @param ... Not used.
#' @return A numeric vector with one value per point.
#' @examples
#' fit <- kde_gpu(quakes[, c("lat", "long", "depth")], backend = "cpu")
#' head(predict(fit, log = TRUE))
#' predict(fit, c(-20, 180, 300))
#' @export
predict.kde_gpu <- function(object, newdata, log = FALSE, ...) {
  if (!is.logical(log) || length(log) != 1L || is.na(log)) {
    stop_arg("log", "must be TRUE or FALSE.")
  }
  query <- if (missing(newdata) || is.null(newdata)) {
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
