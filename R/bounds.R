# Bounded support: the reflection estimator, as the unbounded estimate
# folded into the box [lower, upper]. Folding maps a point outside the box
# back by reflecting it across the bound it crossed (repeatedly, where a
# coordinate has two bounds), so the folded density at x in the box is
#   f_b(x) = sum_g f(g^{-1} x),   g^{-1} x = s_g * x + t_g per coordinate,
# over the images g of the box: per coordinate the identity and the
# reflections across the bounds (one bound: x -> 2 L - x; two bounds: the
# group they generate, translations by 2k(U - L) and reflections, those
# whose image of the box the kernel can reach from inside it), and in d
# dimensions every combination of the coordinates' images. It integrates
# to 1 over the box and is 0 outside. Evaluating f at the images of the
# queries keeps the training set and the fused kernels of both backends
# as they are: an evaluation costs one pass per image, memory stays that
# of the data. With a diagonal H (a kernel symmetric in each coordinate)
# f(g^{-1} x) = sum_j w_j K(x - g x_j), the classical reflection estimator
# with the data mirrored; with a full H the mirrored points carry the
# mirrored kernel, which is what keeps the total mass 1 and what sample()'s
# "draw, then fold" draws from.

# Images of one coordinate in which the kernel's mass can reach the box
# from a point inside it farther than `reach` are dropped: exactly nothing
# for a compact kernel (reach = its support), and for the Gaussian and the
# exponential kernel terms below ~1e-17 of the point's own term (reach =
# width + 9 sd, or + 29 sd: exp(-9^2 / 2) and exp(-29 sqrt(2)), the latter
# exact in 1-D). One-bound coordinates always keep both images (exact).
fold_reach_sds <- c(gaussian = 9, exponential = 29)

# More images than this make an evaluation that many passes over the data.
max_fold_images <- 4096L

# A bound: NULL (none), one number for every coordinate, or one per
# coordinate; -Inf / Inf for none.
check_bound <- function(value, arg, d, none) {
  if (is.null(value)) return(rep(none, d))
  if (!is.numeric(value) || is.complex(value) || !length(value) %in% c(1L, d) ||
      anyNA(value)) {
    stop_arg(arg, sprintf(paste0(
      "must be one number, or one per column (%d), with %s for none; no NA."), d,
      if (none < 0) "-Inf" else "Inf"))
  }
  if (any(value == -none)) {
    stop_arg(arg, sprintf("cannot be %s.", if (none < 0) "Inf" else "-Inf"))
  }
  rep_len(as.double(value), d)
}

# list(lower, upper) checked against each other and against the data x.
resolve_bounds <- function(lower, upper, x) {
  d <- ncol(x)
  lower <- check_bound(lower, "lower", d, -Inf)
  upper <- check_bound(upper, "upper", d, Inf)
  bad <- which(lower >= upper)
  if (length(bad) > 0L) {
    stop_arg("lower", sprintf("must be below `upper` in every column (column %d: %g >= %g).",
                              bad[1L], lower[bad[1L]], upper[bad[1L]]))
  }
  labels <- if (is.null(colnames(x))) as.character(seq_len(d)) else colnames(x)
  # x is finite (as_point_matrix): only finite bounds need a pass over it
  for (c in which(is.finite(lower) | is.finite(upper))) {
    below <- x[, c] < lower[c]
    above <- x[, c] > upper[c]
    if (any(below)) {
      stop_arg("x", sprintf("has values below `lower` in column %s (%g < %g): data must lie within the bounds.",
                            labels[c], min(x[below, c]), lower[c]))
    }
    if (any(above)) {
      stop_arg("x", sprintf("has values above `upper` in column %s (%g > %g): data must lie within the bounds.",
                            labels[c], max(x[above, c]), upper[c]))
    }
  }
  list(lower = lower, upper = upper)
}

# A fit's bounds (`lower` or `upper`), `none` for a fit made before they
# existed.
bound_or <- function(bound, none) if (is.null(bound)) none else bound

is_bounded <- function(object) {
  !is.null(object$lower) && (any(is.finite(object$lower)) || any(is.finite(object$upper)))
}

# The images of one coordinate: data.frame(sign, shift) with g^{-1} x =
# sign * x + shift, the identity first.
coordinate_images <- function(lower, upper, reach) {
  if (!is.finite(lower) && !is.finite(upper)) return(data.frame(sign = 1, shift = 0))
  if (!is.finite(upper)) return(data.frame(sign = c(1, -1), shift = c(0, 2 * lower)))
  if (!is.finite(lower)) return(data.frame(sign = c(1, -1), shift = c(0, 2 * upper)))
  width <- upper - lower
  k_max <- ceiling(reach / (2 * width)) + 1
  k <- seq(-k_max, k_max)
  # the gap between the box and its image under each map
  translations <- data.frame(sign = 1, shift = 2 * k * width,
                             gap = pmax(0, (2 * abs(k) - 1) * width))
  reflections <- data.frame(sign = -1, shift = 2 * lower + 2 * k * width,
                            gap = ifelse(k >= 1, (2 * k - 2) * width, -2 * k * width))
  images <- rbind(translations, reflections)
  images <- images[images$gap < reach | (images$sign == 1 & images$shift == 0), ]
  images <- images[order(images$gap, -images$sign), c("sign", "shift")]
  rownames(images) <- NULL
  images
}

# Per coordinate, how far outside the box an image can still matter.
fold_reach <- function(kernel, H, lower, upper) {
  sds <- sqrt(diag(H))
  if (is_compact_kernel(kernel)) {
    return(kernel_constants(kernel, nrow(H))$scale * sds)
  }
  (upper - lower) + fold_reach_sds[[kernel]] * sds
}

# A fit's images: list(per_coordinate = list of data frames, sign, shift:
# one row per image of the box, one column per coordinate).
fold_images <- function(kernel, H, lower, upper, widest = 1, too_many = "error") {
  reach <- fold_reach(kernel, widest^2 * H, lower, upper)
  per_coordinate <- lapply(seq_along(lower), function(c) {
    coordinate_images(lower[c], upper[c], reach[c])
  })
  counts <- vapply(per_coordinate, nrow, 0L)
  if (prod(counts) > max_fold_images) {
    if (too_many == "null") return(NULL)
    stop_arg("lower", sprintf(paste0(
      "and `upper` need %s reflected images of the data (at most %d): ",
      "bounds on fewer columns, bounds farther apart than the bandwidth, ",
      "or a smaller bandwidth%s."), format(prod(counts)), max_fold_images,
      if (widest > 1) sprintf(paste0(
        " (the adaptive fit's widest kernel is %.3g times H's: a smaller `alpha` ",
        "narrows it)"), widest) else ""))
  }
  combine_images(per_coordinate)
}

combine_images <- function(per_coordinate) {
  index <- as.matrix(expand.grid(lapply(per_coordinate, function(im) seq_len(nrow(im)))))
  sign <- vapply(seq_along(per_coordinate), function(c) per_coordinate[[c]]$sign[index[, c]],
                 numeric(nrow(index)))
  shift <- vapply(seq_along(per_coordinate), function(c) per_coordinate[[c]]$shift[index[, c]],
                  numeric(nrow(index)))
  list(per_coordinate = per_coordinate,
       sign = matrix(sign, nrow(index)), shift = matrix(shift, nrow(index)))
}

# The images' list restricted to some coordinates (for margins).
margin_images <- function(images, columns) combine_images(images$per_coordinate[columns])

# Whether each row of `query` lies in the closed box.
in_box <- function(query, lower, upper) {
  inside <- rep(TRUE, nrow(query))
  for (c in seq_len(ncol(query))) {
    inside <- inside & query[, c] >= lower[c] & query[, c] <= upper[c]
  }
  inside
}

# The rows of `query` mapped by image g: s * x + t per coordinate.
image_points <- function(query, images, g) {
  reflect_points(query, images$sign[g, ], images$shift[g, ])
}

# The rows of `query` mapped by x -> sign * x + shift, per coordinate.
reflect_points <- function(query, sign, shift) {
  query * rep(sign, each = nrow(query)) + rep(shift, each = nrow(query))
}

# log of the folded density at the rows of `query`, from `evaluate`, the
# unbounded log-density of the same rows' images: log sum_g f(g^{-1} x)
# inside the box, -Inf outside.
folded_log_density <- function(query, images, lower, upper, evaluate) {
  out <- rep(-Inf, nrow(query))
  inside <- in_box(query, lower, upper)
  if (!any(inside)) return(out)
  q <- query[inside, , drop = FALSE]
  parts <- lapply(seq_len(nrow(images$sign)), function(g) evaluate(image_points(q, images, g)))
  out[inside] <- if (length(parts) == 1L) parts[[1L]] else merge_log_sums(parts)
  out
}

# A bounded fit at its own points, log sum_g sum_j w_j K(g^{-1} x_i - x_j),
# in the data's order. Leaving one out leaves out the point and all its
# images (j != i in every image's sum).
bounded_training_log_density <- function(object, leave_one_out, tolerance) {
  images <- object$images
  parts <- lapply(seq_len(nrow(images$sign)), function(g) {
    training_image_log_density(object, images$sign[g, ], images$shift[g, ], leave_one_out,
                               tolerance)
  })
  if (length(parts) == 1L) parts[[1L]] else merge_log_sums(parts)
}

# The leave-one-out sums of a bounded fit, log sum_g sum_{j != i} w_j
# K(g^{-1} x_i - x_j) in the data's order: here, or over a cluster's
# workers (`data`: the training points as they hold them), per image each
# worker leaving its own points out of its shard's sum.
bounded_leave_one_out_sum <- function(object, tolerance, engine = NULL, data = NULL) {
  if (is.null(engine)) return(bounded_training_log_density(object, TRUE, tolerance))
  images <- object$images
  merge_log_sums(lapply(seq_len(nrow(images$sign)), function(g) {
    cluster_log_sum(engine, data, image_points(object$x, images, g), object$H, object$kernel,
                    object$precision, worker_backend(object), "training",
                    leave_one_out = TRUE, tolerance = tolerance,
                    image = list(sign = images$sign[g, ], shift = images$shift[g, ]))
  }))
}

# log sum_j w_j K(g^{-1} x_i - x_j) at every training point i for one image
# g^{-1} x = sign * x + shift, in the data's order; with leave_one_out the
# sum skips j == i. The queries are the training points' images in the
# fit's spatial order, so the backends exclude j == i by position, exactly,
# as they do unbounded (a cluster worker calls this on its shard).
training_image_log_density <- function(object, sign, shift, leave_one_out, tolerance) {
  if (all(sign == 1) && all(shift == 0)) {
    return(log_density_at_training_points(object, leave_one_out, tolerance))
  }
  in_order <- object$x[object$order, , drop = FALSE]
  images <- reflect_points(in_order, sign, shift)
  # the backend whitens them itself, to twice double's precision where the
  # fit's data lie far from their centre (src/cpu_offsets.c,
  # src/cuda/model.cu)
  log_density_at_training_points(object, leave_one_out, tolerance, images, whitened = FALSE)
}

# Folds points into the box: reflect across the bound crossed, repeatedly
# (a coordinate with two bounds folds modulo twice its width), so draws
# from the unbounded estimate become draws from the folded one.
fold_points <- function(points, lower, upper) {
  for (c in seq_len(ncol(points))) {
    v <- points[, c]
    L <- lower[c]
    U <- upper[c]
    if (is.finite(L) && is.finite(U)) {
      width <- U - L
      t <- (v - L) %% (2 * width)
      v <- L + ifelse(t > width, 2 * width - t, t)
    } else if (is.finite(L)) {
      v <- ifelse(v < L, 2 * L - v, v)
    } else if (is.finite(U)) {
      v <- ifelse(v > U, 2 * U - v, v)
    }
    points[, c] <- pmin(pmax(v, L), U) # against rounding at the bounds
  }
  points
}

# "lower 0, upper 1" per column, for print(); NULL when unbounded.
bounds_label <- function(object) {
  if (!is_bounded(object)) return(NULL)
  labels <- column_labels(object)
  parts <- vapply(seq_len(object$d), function(c) {
    sprintf("[%s, %s]", format(object$lower[c]), format(object$upper[c]))
  }, "")
  if (object$d == 1L) parts else paste(labels, parts, collapse = ", ")
}
