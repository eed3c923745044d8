# Mixed data: a data frame whose numeric columns take the Gaussian kernel
# with covariance H and whose factor and ordered columns take discrete
# kernels, each with its own lambda (np's generalised product kernel).
#
# Every discrete kernel here is, up to its value at a match, a Gaussian in
# an embedding of the levels: an unordered column's c levels as the
# vertices of a regular simplex (every two at squared distance 1), an
# ordered column's as thermometer codes (t_k = [rank > k], so that
# |t(r) - t(s)|^2 = |r - s|). A factor rho^D2 per squared distance D2 is
# exp(-D2 / (2 s^2)) with s^2 = -1 / (2 log rho). So the product kernel is
# the Gaussian estimate of the embedded points with the block-diagonal
# covariance diag(H, s_1^2 I, ...), times a constant: every engine (both
# backends, several GPUs, clusters, leave-one-out, tile skipping) computes
# it exactly, as one sum over the points, never a loop over the
# combinations of levels. The cost: a column of c levels adds c - 1
# coordinates to each pair's distance (Wang-van Ryzin's 2 (c - 1)).

# The discrete kernels, np's definitions (np.kernels), for a column of c
# levels, lambda and the distance |r - s| between level ranks:
#   aitchisonaitken  1 - lambda at a match, lambda / (c - 1) otherwise
#   liracine         1 at a match, lambda otherwise (unordered), or
#                    lambda^|r - s| (ordered); neither sums to 1
#   wangvanryzin     1 - lambda at a match, (1 - lambda) / 2 lambda^|r - s|
#   racineliyan      lambda^|r - s| / sum_z lambda^|r_i - z|: Li-Racine's
#                    ordered kernel normalised over the levels, per point
factor_kernels <- c("aitchisonaitken", "liracine")
ordered_kernels <- c("racineliyan", "liracine", "wangvanryzin")

# The squared distance standing for an exact zero: a factor of exp(-1e4),
# 0 in either precision (lambda = 0: only matching levels count).
mixed_exact_d2 <- 1e4

# The data frame's columns: which are numeric (continuous), unordered
# factors and ordered factors, and the levels of each categorical one.
mixed_columns <- function(x, arg = "x") {
  if (is.null(names(x)) || any(!nzchar(names(x))) || anyDuplicated(names(x))) {
    stop_arg(arg, "needs distinct names for its columns (mixed data are matched by name).")
  }
  kind <- vapply(x, function(column) {
    if (is.ordered(column)) "ordered" else if (is.factor(column)) "factor"
    else if (is.numeric(column) && !is.complex(column)) "numeric" else "other"
  }, "")
  other <- names(x)[kind == "other"]
  if (length(other) > 0L) {
    stop_arg(arg, sprintf(paste0("has columns that are neither numeric nor factors: %s ",
                                 "(%s); convert them with factor() or as.numeric()."),
                          paste(other, collapse = ", "),
                          paste(vapply(x[other], function(v) class(v)[1L], ""), collapse = ", ")))
  }
  for (name in names(x)) {
    if (anyNA(x[[name]])) stop_arg(arg, sprintf("has missing values in column %s.", name))
    if (kind[[name]] == "numeric" && !all(is.finite(x[[name]]))) {
      stop_arg(arg, sprintf("has infinite values in column %s.", name))
    }
    if (kind[[name]] != "numeric" && nlevels(x[[name]]) < 2L) {
      stop_arg(arg, sprintf(paste0("column %s is a factor with %d level: a discrete kernel ",
                                   "needs at least 2 (drop the column, it is constant)."),
                            name, nlevels(x[[name]])))
    }
  }
  list(names = names(x), kind = unname(kind), numeric = names(x)[kind == "numeric"],
       categorical = names(x)[kind != "numeric"],
       levels = lapply(x[kind != "numeric"], levels))
}

# The kind ("factor" or "ordered") of each categorical column, in order.
categorical_kinds <- function(columns) columns$kind[columns$kind != "numeric"]

# A data frame holds mixed data when one of its columns is a factor.
is_mixed_data <- function(x) is.data.frame(x) && any(vapply(x, is.factor, NA))

# The kernel of each categorical column, by its kind.
mixed_kernel_names <- function(columns, factor_kernel, ordered_kernel) {
  kind <- categorical_kinds(columns)
  stats::setNames(ifelse(kind == "ordered", ordered_kernel, factor_kernel), columns$categorical)
}

# The largest lambda of a kernel on c levels (uniform weights at its top
# for Aitchison-Aitken; Wang-van Ryzin's 1 - lambda must stay positive).
lambda_max <- function(kernel, levels) {
  switch(kernel, aitchisonaitken = (levels - 1) / levels, wangvanryzin = 1 - 1e-9, 1)
}

# `lambda` as one number per categorical column (names matched), checked.
check_lambda <- function(lambda, kernels, n_levels) {
  k <- length(kernels)
  if (!is.numeric(lambda) || is.complex(lambda) || anyNA(lambda) ||
      !(length(lambda) %in% c(1L, k))) {
    stop_arg("lambda", sprintf(paste0("must be one number, or one per factor column (%d: %s), ",
                                      "each in [0, its kernel's largest]."),
                               k, paste(names(kernels), collapse = ", ")))
  }
  if (length(lambda) == 1L) {
    lambda <- rep(lambda, k)
  } else if (!is.null(names(lambda))) {
    if (!setequal(names(lambda), names(kernels))) {
      stop_arg("lambda", sprintf("names columns %s but the factor columns are %s.",
                                 paste(names(lambda), collapse = ", "),
                                 paste(names(kernels), collapse = ", ")))
    }
    lambda <- lambda[names(kernels)]
  }
  names(lambda) <- names(kernels)
  top <- mapply(lambda_max, kernels, n_levels)
  bad <- lambda < 0 | lambda > top
  if (any(bad)) {
    i <- which(bad)[1L]
    stop_arg("lambda", sprintf(paste0("for column %s (%s kernel, %d levels) must be in [0, %s], ",
                                      "not %s."),
                               names(kernels)[i], kernels[[i]], n_levels[[i]],
                               format(signif(top[[i]], 4L)), format(lambda[[i]])))
  }
  stats::setNames(as.double(lambda), names(kernels))
}

# The embedding of a column's levels: c x e coordinates.
simplex_coordinates <- function(levels) {
  helmert <- stats::contr.helmert(levels)
  # orthonormal columns orthogonal to 1: the unit vectors' differences
  # keep their length sqrt(2), scaled to 1
  sweep(helmert, 2L, sqrt(colSums(helmert^2)), "/") / sqrt(2)
}
thermometer_coordinates <- function(levels) {
  outer(seq_len(levels), seq_len(levels - 1L), ">") * 1
}

# The Gaussian variance that makes a factor rho per unit of squared
# distance: NULL for rho = 1 (the block contributes nothing and is left out).
embedding_variance <- function(rho) {
  if (rho >= 1) return(NULL)
  if (rho <= 0) return(1 / (2 * mixed_exact_d2))
  -1 / (2 * log(rho))
}

# One categorical column's part of the product kernel: its embedding
# blocks (coordinates and variance), the log of its value at a match,
# (Racine-Li-Yan) each level's log normaliser, and the kernel relative to a
# match as the fused sums take it (src/kde_backend.h): log k(r, s) /
# k(r, r) = mismatch + per_level |r - s| for r != s, and its smallest
# value over the levels, worst.
discrete_kernel_part <- function(kernel, levels, lambda) {
  blocks <- list()
  add <- function(coords, rho) {
    variance <- embedding_variance(rho)
    if (!is.null(variance)) blocks[[length(blocks) + 1L]] <<- list(coords = coords, variance = variance)
  }
  log_match <- 0
  log_norm <- rep(0, levels)
  mismatch <- 0
  per_level <- 0
  switch(kernel,
    aitchisonaitken = {
      rho <- lambda / ((levels - 1) * (1 - lambda))
      add(simplex_coordinates(levels), rho)
      log_match <- log1p(-lambda)
      mismatch <- log(rho)
    },
    liracine_factor = {
      add(simplex_coordinates(levels), lambda)
      mismatch <- log(lambda)
    },
    liracine = {
      add(thermometer_coordinates(levels), lambda)
      per_level <- log(lambda)
    },
    wangvanryzin = {
      add(thermometer_coordinates(levels), lambda)
      add(simplex_coordinates(levels), 1 / 2)
      log_match <- log1p(-lambda)
      mismatch <- log(1 / 2)
      per_level <- log(lambda)
    },
    racineliyan = {
      add(thermometer_coordinates(levels), lambda)
      distance <- abs(outer(seq_len(levels), seq_len(levels), "-"))
      log_norm <- log(rowSums(lambda^distance))
      per_level <- log(lambda)
    })
  # a level of distance 0 never pays per_level: no -Inf * 0
  worst <- mismatch + if (per_level == 0) 0 else per_level * (levels - 1)
  list(blocks = blocks, log_match = log_match, log_norm = log_norm,
       penalty = c(mismatch = mismatch, per_level = per_level, worst = worst))
}

# The kernel's matrix of values k(s, r) over levels s (rows) and r: for
# the sampler and the tests' reference.
discrete_kernel_matrix <- function(kernel, levels, lambda) {
  distance <- abs(outer(seq_len(levels), seq_len(levels), "-"))
  switch(kernel,
    aitchisonaitken = ifelse(distance == 0, 1 - lambda, lambda / (levels - 1)),
    liracine_factor = ifelse(distance == 0, 1, lambda),
    liracine = lambda^distance,
    wangvanryzin = ifelse(distance == 0, 1 - lambda, (1 - lambda) / 2 * lambda^distance),
    racineliyan = sweep(lambda^distance, 2L, colSums(lambda^distance), "/"))
}

# Each categorical column's discrete_kernel_matrix() at the fit's lambdas.
discrete_kernel_matrices <- function(columns, kernels, lambda) {
  kind <- categorical_kinds(columns)
  lapply(seq_along(kernels), function(k) {
    discrete_kernel_matrix(part_kernel(kernels[[k]], kind[[k]]), length(columns$levels[[k]]),
                           lambda[[k]])
  })
}

# The kernel name the parts above use: Li-Racine's unordered kernel is
# not its ordered one.
part_kernel <- function(kernel, kind) {
  if (kernel == "liracine" && kind == "factor") "liracine_factor" else kernel
}

# The numeric matrix and the level ranks of a data frame of the fit's
# columns (already checked).
mixed_parts <- function(x, columns) {
  list(x = as.matrix(x[columns$numeric]) * 1,
       codes = matrix(vapply(columns$categorical, function(name) as.integer(x[[name]]),
                             integer(nrow(x))), nrow = nrow(x)))
}

# The embedding of a design: the Gaussian's covariance and coordinates,
# and the constants that turn its sums into the product kernel's.
mixed_design <- function(columns, kernels, lambda, H) {
  d_c <- length(columns$numeric)
  kind <- categorical_kinds(columns)
  parts <- lapply(seq_along(kernels), function(k) {
    discrete_kernel_part(part_kernel(kernels[[k]], kind[[k]]),
                         length(columns$levels[[k]]), lambda[[k]])
  })
  variances <- c(if (d_c > 0L) list(H))
  for (part in parts) for (block in part$blocks) {
    variances[[length(variances) + 1L]] <- diag(block$variance, ncol(block$coords))
  }
  list(parts = parts, H = block_diagonal(variances), H_numeric = H, d_c = d_c,
       log_match = sum(vapply(parts, `[[`, 0, "log_match")),
       penalty = matrix(t(vapply(parts, `[[`, numeric(3L), "penalty")), ncol = 3L))
}

block_diagonal <- function(blocks) {
  size <- vapply(blocks, ncol, 1L)
  out <- matrix(0, sum(size), sum(size))
  at <- 0L
  for (k in seq_along(blocks)) {
    idx <- at + seq_len(size[[k]])
    out[idx, idx] <- blocks[[k]]
    at <- at + size[[k]]
  }
  out
}

# The embedded points of numeric columns x and level ranks codes.
mixed_embed <- function(design, x, codes) {
  pieces <- if (design$d_c > 0L) list(x)
  for (k in seq_along(design$parts)) for (block in design$parts[[k]]$blocks) {
    pieces[[length(pieces) + 1L]] <- block$coords[codes[, k], , drop = FALSE]
  }
  out <- do.call(cbind, pieces)
  if (is.null(out)) out <- matrix(0, nrow(codes), 0L)
  dimnames(out) <- NULL
  out
}

# log of each point's normaliser (Racine-Li-Yan), the sum over columns.
mixed_log_norm <- function(design, codes) {
  out <- numeric(nrow(codes))
  for (k in seq_along(design$parts)) out <- out + design$parts[[k]]$log_norm[codes[, k]]
  out
}
