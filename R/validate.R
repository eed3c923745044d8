# Input checks shared by the fit, predict() and sample(). Each error names
# the argument the user passed.

stop_arg <- function(arg, ...) {
  stop(sprintf("`%s` %s", arg, paste0(...)), call. = FALSE)
}

# A numeric vector, matrix or data frame of numeric columns as a finite
# double matrix. `columns`, if given, is the number of columns required.
as_point_matrix <- function(x, arg, columns = NULL) {
  if (is.data.frame(x)) {
    numeric_cols <- vapply(x, function(col) is.numeric(col) && !is.complex(col), NA)
    if (!all(numeric_cols)) {
      stop_arg(arg, "must have only numeric columns; not numeric: ",
               paste(names(x)[!numeric_cols], collapse = ", "), ".")
    }
    x <- as.matrix(x)
  }
  if (is.complex(x) || !(is.numeric(x) || is.logical(x)) || is.factor(x)) {
    stop_arg(arg, "must be numeric (a vector, matrix or data frame), not ",
             class(x)[1L], ".")
  }
  if (is.logical(x) && length(x) > 0L) {
    stop_arg(arg, "must be numeric, not logical.")
  }
  if (is.null(dim(x))) {
    x <- if (!is.null(columns) && columns > 1L && length(x) == columns) {
      matrix(x, nrow = 1L)
    } else {
      matrix(x, ncol = 1L)
    }
  }
  if (length(dim(x)) != 2L) stop_arg(arg, "must be a vector or a matrix.")
  if (!is.double(x)) storage.mode(x) <- "double"
  if (nrow(x) == 0L) stop_arg(arg, "has no rows: at least one point is needed.")
  if (ncol(x) == 0L) stop_arg(arg, "has no columns.")
  if (!is.null(columns) && ncol(x) != columns) {
    stop_arg(arg, sprintf("must have %d column%s, like the training data, not %d.",
                          columns, if (columns == 1L) "" else "s", ncol(x)))
  }
  first_bad <- .Call(C_kde_first_nonfinite, x)
  if (first_bad > 0) {
    row <- (first_bad - 1) %% nrow(x) + 1
    col <- (first_bad - 1) %/% nrow(x) + 1
    stop_arg(arg, sprintf("must contain only finite values; row %d, column %d is %s.",
                          row, col, format(x[row, col])))
  }
  x
}

# Weights normalised to sum 1.
normalise_weights <- function(weights, n) {
  if (is.null(weights)) return(rep(1 / n, n))
  if (!is.numeric(weights) || is.complex(weights)) stop_arg("weights", "must be numeric.")
  if (length(weights) != n) {
    stop_arg("weights", sprintf("must have one value per point (%d), not %d.", n, length(weights)))
  }
  if (anyNA(weights) || any(!is.finite(weights))) stop_arg("weights", "must be finite and not NA.")
  if (any(weights < 0)) stop_arg("weights", "must be non-negative.")
  total <- sum(weights)
  if (!(total > 0)) stop_arg("weights", "must have at least one positive value.")
  as.double(weights) / total
}

check_count <- function(x, arg) {
  if (!is.numeric(x) || length(x) != 1L || is.na(x) || x < 0 || !is.finite(x) ||
      x != round(x)) {
    stop_arg(arg, "must be one non-negative whole number.")
  }
  as.integer(x)
}

check_flag <- function(x, arg) {
  if (!is.logical(x) || length(x) != 1L || is.na(x)) stop_arg(arg, "must be TRUE or FALSE.")
  x
}
