# Conditional densities, predict(fit, newdata, given = ): f(y | x) =
# f(x, y) / f_X(x) for the columns x named by `given` and the others y. The
# margin f_X of a Gaussian estimate (fixed or adaptive bandwidths) is
# exactly the Gaussian estimate of those columns with the matching block of
# H (margin_fit()), evaluated by the same engines; the other kernels'
# margins have no closed form, and a reflected (bounded) fit's margin is
# not a reflected fit, so both are refused.

# The columns of the fit that `given` names (names or indices), as indices.
given_columns <- function(object, given) given_index(given, colnames(object$x), object$d)

# The columns among d (named names_x, or NULL) that `given` names.
given_index <- function(given, names_x, d) {
  if (is.character(given) && !anyNA(given)) {
    index <- match(given, names_x)
    if (anyNA(index)) {
      stop_arg("given", sprintf("names columns the data do not have: %s (they have %s).",
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
  if (!(type %in% c("density", "cdf"))) {
    stop_arg("given", sprintf("applies to type = \"density\" or \"cdf\", not \"%s\".", type))
  }
  why <- conditional_refusal(object)
  if (!is.null(why)) stop_arg("given", why)
  columns <- given_columns(object, given)
  if (type == "cdf") {
    for (arg in c("log", "leave_one_out")) {
      if (isTRUE(get(arg))) stop_arg(arg, "applies to type = \"density\", not \"cdf\".")
    }
    if (!is.null(cluster)) stop_arg("cluster", "applies to type = \"density\", not \"cdf\".")
    at_training_points <- missing(newdata) || is.null(newdata)
    query <- if (at_training_points) object$x else
      match_columns(as_point_matrix(newdata, "newdata", object$d, allow_infinite = TRUE),
                    object$x)
    out <- predict_conditional_cdf(object, query, columns)
    names(out) <- if (at_training_points) rownames(object$x) else query_names(newdata, object$d)
    return(out)
  }
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
  if (log) out else exp_on_cores(out)
}

# The margin fits of the last two (fit, columns) asked for: made once, so
# that repeated calls do not sort the data and build a device model again
# (a fit's id names its data; check_fit() has refused an edited fit).
margin_fits <- new.env(parent = emptyenv())

cached_margin_fit <- function(object, columns) {
  margin_fit <- if (inherits(object, "kde_mixed")) mixed_margin_fit else margin_fit
  if (!is.character(object$id)) return(margin_fit(object, columns))
  key <- paste(object$id, paste(columns, collapse = ","))
  fits <- margin_fits$fits
  if (!is.null(fits[[key]])) return(fits[[key]])
  margin <- margin_fit(object, columns)
  fits <- c(fits[names(fits) != key], stats::setNames(list(margin), key))
  margin_fits$fits <- utils::tail(fits, 2L)
  margin
}

# bw_mlcv(given = ): the conditioning columns as indices, after refusing
# what the conditional likelihood cannot be computed exactly for.
conditional_selection <- function(x, given, kernel, bounds, engine) {
  if (kernel != "gaussian") {
    stop_arg("given", sprintf(paste0("needs kernel = \"gaussian\": the margin of the %s ",
                                     "kernel has no closed form."), kernel))
  }
  if (!is.null(bounds)) {
    stop_arg("given", "does not apply with `lower` or `upper` (a reflected estimate's margin).")
  }
  if (!is.null(engine)) stop_arg("cluster", "does not serve a conditional selection (`given`).")
  given_index(given, colnames(x), ncol(x))
}

# Ties make the conditional likelihood unbounded in the response's columns
# only: in a conditioning column the joint's and the margin's terms grow
# alike as its bandwidth shrinks.
conditional_tie_directions <- function(x, weights, type, given) {
  response <- setdiff(seq_len(ncol(x)), given)
  lapply(unbounded_tie_directions(x[, response, drop = FALSE], weights, "mlcv", type),
         function(direction) {
           direction$columns <- response[direction$columns]
           direction
         })
}

# The margin's leave-one-out log-densities at the conditioning columns of
# the training points, with H's block, renormalised as the joint's are.
conditioning_loo <- function(x, weights, H, given, kernel, backend, precision, tolerance) {
  margin <- new_kde_gpu(x[, given, drop = FALSE], weights,
                        list(H = H[given, given, drop = FALSE], type = "full", method = "given"),
                        kernel, backend, precision, NULL, "x", tolerance = tolerance)
  on.exit(release_device_copy(margin))
  renormalise_leave_one_out(log_density_at_training_points(margin, TRUE, tolerance), weights)
}
