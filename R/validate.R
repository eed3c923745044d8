# Input checks shared by the fit, predict() and sample(). Each error names
# the argument the user passed.

stop_arg <- function(arg, ...) {
  stop(sprintf("`%s` %s", arg, paste0(...)), call. = FALSE)
}

# A numeric vector, matrix or data frame of numeric columns as a finite
# double matrix. `columns`, if given, is the number of columns required.
as_point_matrix <- function(x, arg, columns = NULL, allow_infinite = FALSE) {
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
  if (!is_intact_matrix(x)) {
    stop_arg(arg, sprintf(paste0(
      "is damaged: its dim attribute says %s x %s but it holds %.0f values ",
      "(a corrupted file?)."), dim(x)[1L], dim(x)[2L], as.double(length(x))))
  }
  if (!is.double(x)) storage.mode(x) <- "double"
  if (nrow(x) == 0L) stop_arg(arg, "has no rows: at least one point is needed.")
  if (ncol(x) == 0L) stop_arg(arg, "has no columns.")
  if (!is.null(columns) && ncol(x) != columns) {
    stop_arg(arg, sprintf("must have %d column%s, like the training data, not %d.",
                          columns, if (columns == 1L) "" else "s", ncol(x)))
  }
  if (allow_infinite) {
    if (anyNA(x)) stop_arg(arg, "must not contain NA or NaN.")
    return(x)
  }
  first_bad <- .Call(C_kdegpu_first_nonfinite, x, cpu_threads())
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
  top <- max(weights)
  if (!(top > 0)) stop_arg("weights", "must have at least one positive value.")
  # relative to the largest first, so that the total cannot overflow
  weights <- as.double(weights) / top
  weights / sum(weights)
}

check_count <- function(x, arg) {
  if (!is.numeric(x) || length(x) != 1L || is.na(x) || x < 0 || !is.finite(x) ||
      x != round(x)) {
    stop_arg(arg, "must be one non-negative whole number.")
  }
  # the rows of an R matrix, and what the C code counts in an int
  if (x > .Machine$integer.max) {
    stop_arg(arg, sprintf("must be at most %d, not %s.", .Machine$integer.max,
                          format(x, scientific = TRUE)))
  }
  as.integer(x)
}

# One finite number (or NULL where `null_ok`), at least `min`.
check_number <- function(x, arg, min = -Inf, null_ok = FALSE) {
  if (null_ok && is.null(x)) return(x)
  if (!is.numeric(x) || length(x) != 1L || !is.finite(x) || x < min) {
    stop_arg(arg, "must be one finite number",
             if (min > -Inf) sprintf(" of at least %s", format(min)), ", not ",
             paste(format(x), collapse = " "), ".")
  }
  as.double(x)
}

# A plot label: a character string, an expression (plotmath) or NULL.
check_label <- function(x, arg) {
  if (!is.null(x) && !is.character(x) && !is.expression(x) && !is.call(x) && !is.name(x)) {
    stop_arg(arg, "must be a character string or an expression, not ", class(x)[1L], ".")
  }
  x
}

check_flag <- function(x, arg) {
  if (!is.logical(x) || length(x) != 1L || is.na(x)) stop_arg(arg, "must be TRUE or FALSE.")
  x
}

# Whether a matrix holds as many values as its dim attribute says (a damaged
# object, as readRDS() of a corrupted file gives, can claim more), and, if
# given, has that shape.
is_intact_matrix <- function(x, nrow = NULL, ncol = NULL) {
  dims <- dim(x)
  length(dims) == 2L && !anyNA(dims) && all(dims >= 0L) &&
    as.double(dims[1L]) * dims[2L] == length(x) &&
    (is.null(nrow) || dims[1L] == nrow) && (is.null(ncol) || dims[2L] == ncol)
}

# A kde_gpu() fit whose parts agree with each other and with the fit as it
# was made (check_unedited()). Methods check it first, so that a damaged or
# hand-edited object stops with an error that says so instead of giving a
# wrong answer.
check_fit <- function(object, arg = "object") {
  parts <- c("x", "weights", "n", "d", "H", "kernel", "backend", "precision",
             "center", "transform", "log_const", "z", "order", "tile_size",
             "tile_weights")
  intact <- inherits(object, "kde_gpu") && is.list(object) && all(parts %in% names(object))
  if (intact) {
    n <- object$n
    d <- object$d
    intact <- is.numeric(n) && length(n) == 1L && !is.na(n) && n >= 1 &&
      is.numeric(d) && length(d) == 1L && !is.na(d) && d >= 1 &&
      is.double(object$x) && is_intact_matrix(object$x, n, d) &&
      is.double(object$z) && is_intact_matrix(object$z, n, d) &&
      is.double(object$H) && is_intact_matrix(object$H, d, d) &&
      is.double(object$transform) && is_intact_matrix(object$transform, d, d) &&
      is.double(object$weights) && length(object$weights) == n &&
      is.double(object$tile_weights) && length(object$tile_weights) == n &&
      is.numeric(object$order) && length(object$order) == n &&
      is.integer(object$tile_size) && length(object$tile_size) == 1L &&
      is.double(object$center) && length(object$center) == d &&
      is.double(object$log_const) && length(object$log_const) == 1L &&
      is.character(object$kernel) && length(object$kernel) == 1L &&
      object$kernel %in% kernel_names &&
      (identical(object$backend, "cpu") || identical(object$backend, "cuda")) &&
      intact_bounds(object) && intact_adaptive(object)
  }
  if (!isTRUE(intact)) {
    stop_arg(arg, "is not an intact kde_gpu() fit (damaged, or edited by hand?); ",
             "fit it again with kde_gpu().")
  }
  check_unedited(object, arg)
}

# An adaptive fit's local factors (fixed fits have none): n positive
# numbers, in the spatial order too (tile_scale).
intact_adaptive <- function(object) {
  if (is.null(object$adaptive) && is.null(object$tile_scale)) return(TRUE)
  lambda <- object$adaptive$lambda
  n <- object$n
  is.list(object$adaptive) && is.double(lambda) && length(lambda) == n &&
    all(is.finite(lambda) & lambda > 0) && is.double(object$tile_scale) &&
    length(object$tile_scale) == n && isTRUE(all(object$tile_scale == lambda[object$order]))
}

# A fit's bounds, where it has them (fits made before they existed have
# none): d numbers each, lower below upper, with the images of the box.
intact_bounds <- function(object) {
  if (is.null(object$lower) && is.null(object$upper) && is.null(object$images)) return(TRUE)
  d <- object$d
  ok <- is.double(object$lower) && length(object$lower) == d && !anyNA(object$lower) &&
    is.double(object$upper) && length(object$upper) == d && !anyNA(object$upper) &&
    all(object$lower < object$upper)
  if (!isTRUE(ok)) return(FALSE)
  if (!any(is.finite(c(object$lower, object$upper)))) return(is.null(object$images))
  images <- object$images
  is.list(images) && is.double(images$sign) && is_intact_matrix(images$sign, NULL, d) &&
    is.double(images$shift) && is_intact_matrix(images$shift, nrow(images$sign), d) &&
    nrow(images$sign) >= 1L && all(images$sign[1L, ] == 1) && all(images$shift[1L, ] == 0) &&
    is.list(images$per_coordinate) && length(images$per_coordinate) == d
}

# Stops when `...` of a method received arguments it does not use: a
# misspelled argument (`lgo = TRUE`) or one of another package's methods
# (`x =` for ks's predict) would otherwise vanish and the call answer a
# different question. `fun` names the method for the message, `formals`
# are its real arguments (for "did you mean"), `hints` maps an argument
# name to a sentence that explains what to use instead. Reads the names of
# `...` without evaluating the arguments.
check_dots_empty <- function(fun, formals = character(), hints = list(), ...) {
  n <- ...length()
  if (n == 0L) return(invisible())
  given <- ...names()
  if (is.null(given)) given <- rep("", n)
  given[is.na(given)] <- ""
  named <- given[nzchar(given)]
  unnamed <- sum(!nzchar(given))
  pieces <- character()
  if (length(named) > 0L) {
    pieces <- c(pieces, sprintf("unknown argument%s %s", if (length(named) > 1L) "s" else "",
                                paste0("`", named, "`", collapse = ", ")))
  }
  if (unnamed > 0L) {
    pieces <- c(pieces, sprintf("%d unnamed argument%s too many", unnamed,
                                if (unnamed > 1L) "s" else ""))
  }
  advice <- character()
  for (name in named) {
    if (!is.null(hints[[name]])) {
      advice <- c(advice, hints[[name]])
      next
    }
    if (length(formals) > 0L) {
      distance <- utils::adist(name, formals)[1L, ]
      if (min(distance) <= 2L) {
        advice <- c(advice, sprintf("Did you mean `%s`?", formals[which.min(distance)]))
      }
    }
  }
  stop(sprintf("%s got %s.%s", fun, paste(pieces, collapse = " and "),
               if (length(advice) > 0L) paste0(" ", paste(advice, collapse = " ")) else ""),
       call. = FALSE)
}

# Arguments renamed keep working for one release: the value given under
# the old name, with a warning that names the new one. The other names in
# `...` go to check_dots_empty(). `renamed`: c(old = "new"); `given`: the
# new names the caller received explicitly (both spellings is an error).
# Returns the values under their new names.
renamed_arguments <- function(fun, renamed, formals, given = character(), ...) {
  dots <- list(...)
  names <- names(dots)
  if (is.null(names)) names <- rep("", length(dots))
  old <- names %in% names(renamed)
  out <- list()
  for (i in which(old)) {
    new <- renamed[[names[i]]]
    if (new %in% given) {
      stop_arg(new, sprintf("is given twice, also under its old name `%s`: keep `%s`.",
                            names[i], new))
    }
    warning(sprintf("%s: `%s` is deprecated; use `%s` (the old name goes in the next release).",
                    fun, names[i], new), call. = FALSE)
    out[[new]] <- dots[[i]]
  }
  do.call(check_dots_empty, c(list(fun, formals), dots[!old]))
  out
}

# base R's from 4.4.0 on
`%||%` <- function(x, y) if (is.null(x)) y else x

check_tolerance <- function(tolerance, arg = "tolerance") {
  if (!is.numeric(tolerance) || length(tolerance) != 1L || is.na(tolerance) ||
      tolerance < 0 || tolerance >= 1) {
    stop_arg(arg, "must be one number in [0, 1): the relative error allowed ",
             "(0: the full sum).")
  }
  as.double(tolerance)
}
