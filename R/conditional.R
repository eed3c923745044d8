# Conditional densities, predict(fit, newdata, given = ): f(y | x) =
# f(x, y) / f_X(x) for the columns x named by `given` and the others y. The
# margin f_X of a Gaussian estimate (fixed or adaptive bandwidths) is
# exactly the Gaussian estimate of those columns with the matching block of
# H (margin_fit()), evaluated by the same engines; the other kernels'
# margins have no closed form, and a reflected (bounded) fit's margin is
# not a reflected fit, so both are refused.

# The columns of the fit that `given` names (names or indices), as indices.
given_columns <- function(object, given) {
  d <- object$d
  names_x <- colnames(object$x)
  if (is.character(given) && !anyNA(given)) {
    index <- match(given, names_x)
    if (anyNA(index)) {
      stop_arg("given", sprintf("names columns the fit does not have: %s (it has %s).",
                                paste(given[is.na(index)], collapse = ", "),
                                if (is.null(names_x)) "no column names; give indices"
                                else paste(names_x, collapse = ", ")))
    }
  } else if (is.numeric(given) && !anyNA(given) && all(given == round(given))) {
    index <- as.integer(given)
    if (any(index < 1L | index > d)) {
      stop_arg("given", sprintf("must be column numbers in 1..%d, not %s.", d,
                                paste(given, collapse = ", ")))
    }
  } else {
    stop_arg("given", "must name the conditioning columns, by name or by number.")
  }
  if (anyDuplicated(index)) stop_arg("given", "names a column twice.")
  if (length(index) >= d) {
    stop_arg("given", sprintf(paste0("must leave at least one column to be the response; ",
                                     "it names all %d."), d))
  }
  index
}

# Why a fit's conditional density cannot be computed exactly, or NULL.
conditional_refusal <- function(object) {
  if (object$kernel != "gaussian") {
    return(sprintf(paste0("needs a Gaussian fit: the margin of the %s kernel has no closed ",
                          "form, so f(x) (and f(y | x)) would not be exact. Refit with ",
                          "kernel = \"gaussian\"."), object$kernel))
  }
  if (is_bounded(object)) {
    return(paste0("does not apply to a bounded fit: the margin of a reflected estimate is ",
                  "not a reflected estimate. Refit without `lower`/`upper`."))
  }
  NULL
}

# log f(y | x) (or f(y | x)) at the rows of `newdata` (or at the training
# points, leaving each one out of both sums with `leave_one_out`).
predict_conditional <- function(object, newdata, given, log, leave_one_out, cluster, split,
                                tolerance, type) {
  if (type != "density") {
    stop_arg("given", sprintf("applies to type = \"density\", not \"%s\".", type))
  }
  why <- conditional_refusal(object)
  if (!is.null(why)) stop_arg("given", why)
  columns <- given_columns(object, given)
  margin <- cached_margin_fit(object, columns)
  split <- split[[1L]] # predict() matches it
  if (missing(newdata) || is.null(newdata)) {
    joint <- predict(object, log = TRUE, leave_one_out = leave_one_out, cluster = cluster,
                     split = split, tolerance = tolerance)
    of_x <- predict(margin, log = TRUE, leave_one_out = leave_one_out, cluster = cluster,
                    split = split, tolerance = tolerance)
  } else {
    if (leave_one_out) {
      stop_arg("leave_one_out", "applies to the training points only; drop `newdata`.")
    }
    query <- match_columns(as_point_matrix(newdata, "newdata", object$d), object$x)
    joint <- predict(object, query, log = TRUE, cluster = cluster, split = split,
                     tolerance = tolerance)
    of_x <- predict(margin, query[, columns, drop = FALSE], log = TRUE, cluster = cluster,
                    split = split, tolerance = tolerance)
    names(joint) <- query_names(newdata, object$d)
  }
  # where f_X(x) is 0 (underflow far from every x_i) f(y | x) is undefined
  out <- ifelse(of_x > -Inf, joint - of_x, NaN)
  names(out) <- names(joint)
  if (log) out else exp(out)
}

# The margin fits of the last few (fit, columns) asked for: made once, so
# that repeated calls do not sort the data and build a device model again
# (a fit's id names its data; check_fit() has refused an edited fit).
margin_fits <- new.env(parent = emptyenv())

cached_margin_fit <- function(object, columns) {
  if (!is.character(object$id)) return(margin_fit(object, columns))
  key <- paste(object$id, paste(columns, collapse = ","))
  fits <- margin_fits$fits
  if (!is.null(fits[[key]])) return(fits[[key]])
  margin <- margin_fit(object, columns)
  fits <- c(fits[names(fits) != key], stats::setNames(list(margin), key))
  margin_fits$fits <- utils::tail(fits, 4L)
  margin
}
