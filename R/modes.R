#' Modes and modal clusters by mean shift
#'
#' Moves every start point uphill on the estimate by mean shift until it
#' stops at a local maximum (a mode), then merges the end points that lie
#' within `merge_tol` of each other: the distinct modes, their densities,
#' and each start point's mode (its modal cluster), as [ks::kms()] gives
#' them. Each step is exact: the kernel-weighted mean of the training
#' points with weights from the kernel's derivative (for the Gaussian,
#' the Gaussian itself), computed on the fit's backend (on the GPU in the
#' fit's precision, skipping only training points that provably move a
#' step by less than 1e-3 of `tol`; an adaptive fit's on the CPU, in double
#' precision). Only the points still moving are recomputed. A bounded
#' fit's ascent climbs its reflection estimate and stays in the box (a mode
#' may lie on a bound).
#'
#' @param fit A [kde_gpu()] fit with the gaussian, epanechnikov, biweight,
#'   cosine or optcosine kernel (the others' mean-shift weights are
#'   unbounded or zero).
#' @param start Where to start: a matrix or data frame of points with the
#'   fit's columns, or `NULL` (the default) for the training points.
#' @param step_tol An ascent ends when its step is shorter than this (Euclidean,
#'   in the data's units) and so is the distance still to go, estimated from
#'   how fast the steps shrink (mean shift converges linearly near a mode,
#'   slowly where the bandwidth is narrow against the data: stopping at the
#'   first short step leaves ascents short of their mode, and one mode then
#'   counts as several). `NULL`: 0.001 times the smallest interquartile
#'   range of the data's columns, as ks::kms.
#' @param merge_tol End points closer than this belong to one mode.
#'   `NULL`: 0.01 times the largest interquartile range, as ks::kms.
#' @param max_iter The most steps per point (400, as ks::kms).
#' @param min_size Modal clusters of at most this many start points are
#'   merged, smallest first, into the cluster of the nearest other mode,
#'   whose mode stays (ks::kms's `min.clust.size`, with its default: 1% of
#'   the start points, rounded). `0` keeps every mode.
#' @param ... Not used: an argument given here is an error that names it.
#' @return An object of class `"kde_modes"`: a list with `modes` (one row
#'   per mode, ordered by decreasing density), `density` (the estimate at
#'   each mode), `label` (each start point's mode, an index into the rows
#'   of `modes`), `end_points` (where each ascent stopped), `iterations`
#'   and `converged` (per start point; a point that did not converge in
#'   `max_iter` steps, or started where the estimate is 0, is labelled by
#'   where it stopped, and `converged` says so).
#' @seealso [predict.kde_gpu()] with `type = "gradient"`.
#' @examples
#' fit <- kde_gpu(faithful, backend = "cpu")
#' m <- kde_modes(fit)
#' m
#' plot(faithful, col = m$label)
#' points(m$modes, pch = 4, cex = 2, lwd = 3)
#' @export
kde_modes <- function(fit, start = NULL, step_tol = NULL, merge_tol = NULL, max_iter = 400L,
                      min_size = NULL, ...) {
  old <- renamed_arguments("kde_modes()", c(tol = "step_tol"),
                           c("fit", "start", "step_tol", "merge_tol", "max_iter", "min_size"),
                           names(match.call()), ...)
  step_tol <- old$step_tol %||% step_tol
  check_fit(fit, "fit")
  if (!fit$kernel %in% c("gaussian", "epanechnikov", "biweight", "cosine", "optcosine")) {
    stop_arg("fit", sprintf(paste0(
      "has the %s kernel; mean shift needs the gaussian, epanechnikov, biweight, cosine ",
      "or optcosine kernel."), fit$kernel))
  }
  x <- if (is.null(start)) fit$x else
    match_columns(as_point_matrix(start, "start", fit$d), fit$x, "start")
  if (is_bounded(fit) && !all(in_box(x, fit$lower, fit$upper))) {
    stop_arg("start", "has points outside the fit's `lower`/`upper` bounds, where the ",
             "estimate is 0.")
  }
  spread <- apply(fit$x, 2L, stats::IQR)
  if (all(spread == 0)) spread <- apply(fit$x, 2L, function(v) diff(range(v)))
  spread <- spread[spread > 0]
  if (!length(spread)) spread <- 1 # every point the same
  tol <- positive_number_or_default(step_tol, "step_tol", 1e-3 * min(spread))
  merge_tol <- positive_number_or_default(merge_tol, "merge_tol", 1e-2 * max(spread))
  max_iter <- check_count(max_iter, "max_iter")
  min_size <- if (is.null(min_size)) as.integer(round(0.01 * nrow(x))) else
    check_count(min_size, "min_size")

  # steps in whitened units, z = (x - center) A, mapped back by A^-1
  A_inverse <- solve(fit$transform)
  # The sums' tolerance. The GPU prunes the Gaussian's sums to within
  # tolerance x s0 (whitened units; compact kernels only lose exact zeros),
  # which moves a whitened step first / k1sum (k1sum = -s0 / 2) by at most
  # about 2 tolerance (1 + |step| / 2), so a step in the data's units by
  # 2 tolerance ||A^-1|| near a mode: a bound absolute in the step, which
  # near a mode is small. Kept below 1e-3 of `tol`, so that pruning never
  # decides where an ascent stops (the precision's default is smaller
  # still, unless options(kdegpu.tolerance) raised it).
  step_tolerance <- min(resolve_tolerance(NULL, fit),
                        1e-3 * tol / (4 * norm(A_inverse, "2")))
  n <- nrow(x)
  iterations <- integer(n)
  converged <- logical(n)
  active <- seq_len(n)
  previous_length <- rep(Inf, n)
  # the weights' logs once for every step (at n = 1e6 each log() pass cost
  # milliseconds of every step's few on the GPU)
  log_weights <- log(fit$tile_weights)
  for (iteration in seq_len(max_iter)) {
    if (!length(active)) break
    step <- mean_shift_step(fit, x[active, , drop = FALSE], step_tolerance, A_inverse,
                            log_weights)
    stuck <- !is.finite(rowSums(step)) # no training point within reach
    step[stuck, ] <- 0
    if (is_bounded(fit)) { # folded back into the box: the move is what counts
      moved <- fold_points(x[active, , drop = FALSE] + step, fit$lower, fit$upper)
      step <- moved - x[active, , drop = FALSE]
    }
    x[active, ] <- x[active, , drop = FALSE] + step
    iterations[active] <- iteration
    step_length <- sqrt(rowSums(step^2))
    # (a step of 1e-3 tol ends it too: below that, rounding, not the
    # ascent, may make one step longer than the last)
    done <- step_length < tol & !stuck &
      (distance_left(step_length, previous_length[active]) < tol | step_length < 1e-3 * tol)
    previous_length[active] <- step_length
    converged[active[done]] <- TRUE
    active <- active[!done & !stuck]
  }
  merged <- merge_small_clusters(merge_end_points(x, predict(fit, x), merge_tol), x, min_size)
  modes <- x[merged$representative, , drop = FALSE]
  rownames(modes) <- NULL
  structure(list(
    modes = modes,
    density = merged$density,
    label = merged$label,
    end_points = x,
    iterations = iterations,
    converged = converged,
    tol = tol,
    merge_tol = merge_tol,
    min_size = min_size
  ), class = "kde_modes")
}

# One mean-shift step from each row of `x` (data units): the weighted mean
# of the training points less the point, weights from the kernel's
# derivative, mapped back from whitened units: (first / k1sum) A^-1, which
# is grad f H / (-2 C e^M k1sum) (grad f = -2 C e^M first A', H = (A A')^-1).
# A bounded fit's is the same for its reflection estimate, whose gradient
# is the images' gradients reflected: sum_g e^M_g (first_g A' S_g) H /
# sum_g e^M_g k1sum_g, each image's sums at the point's image in their own
# scale e^M_g (S_g reflects the data's coordinates, so it goes between A'
# and H: with a full H it does not commute with them). The caller folds a
# step that leaves the box back into it. `log_weights` is
# log(fit$tile_weights), which kde_modes() takes once per call.
mean_shift_step <- function(fit, x, tolerance, A_inverse, log_weights) {
  if (!is_bounded(fit)) {
    sums <- derivative_sums(fit, whiten_for_sums(fit, x), tolerance = tolerance,
                            log_weights = log_weights)
    return((sums$first / sums$k1sum) %*% A_inverse)
  }
  images <- fit$images
  parts <- lapply(seq_len(nrow(images$sign)), function(g) {
    sums <- derivative_sums(fit, whiten_for_sums(fit, image_points(x, images, g)),
                            tolerance = tolerance, log_weights = log_weights)
    first <- (sums$first %*% t(fit$transform)) * rep(images$sign[g, ], each = nrow(x))
    list(log_scale = sums$log_scale, first = first, k1sum = sums$k1sum)
  })
  top <- do.call(pmax, lapply(parts, `[[`, "log_scale"))
  numerator <- 0
  denominator <- 0
  for (part in parts) {
    # an image with no training point in reach adds nothing
    scale <- ifelse(is.finite(part$log_scale), exp(part$log_scale - top), 0)
    first <- part$first
    first[scale == 0, ] <- 0
    numerator <- numerator + first * scale
    denominator <- denominator + ifelse(scale == 0, 0, part$k1sum * scale)
  }
  (numerator / denominator) %*% fit$H
}

# How far an ascent still has to go, from its last two step lengths. Near a
# mode mean shift converges linearly: each step is about `rate` times the
# one before, so the steps left add up to step x rate / (1 - rate). With
# many points and a narrow bandwidth the rate comes close to 1 (0.97 at
# n = 1e5), and stopping each point at its first step below `tol` (ks::kms
# stops every point once the longest step is below it) leaves ascents 10-20
# tol short of their mode, up to merge_tol apart: one mode then counts as
# two. A step that did not shrink
# has everything left to go (Inf); the first step has no rate (0).
distance_left <- function(step_length, previous_length) {
  rate <- ifelse(is.finite(previous_length) & previous_length > 0,
                 step_length / previous_length, 0)
  ifelse(rate < 1, step_length * rate / (1 - rate), Inf)
}

# End points that ascended to the same mode lie within the ascent's
# tolerance of each other: first grouped by cells of side merge_tol (cheap
# at n = 1e6), then the cells' highest points merged greedily from the
# highest down, each joining the first mode within `merge_tol` or starting
# a new one. Modes come out by decreasing density.
merge_end_points <- function(x, density, merge_tol) {
  keys <- do.call(paste, as.data.frame(round(x / merge_tol)))
  cell <- match(keys, unique(keys))
  by_height <- order(density, decreasing = TRUE)
  cell_top <- by_height[!duplicated(cell[by_height])] # highest point per cell
  cell_label <- integer(max(cell))
  representative <- integer(0)
  for (i in cell_top) {
    if (length(representative)) {
      gap <- sqrt(colSums((t(x[representative, , drop = FALSE]) - x[i, ])^2))
      nearest <- which.min(gap)
      if (gap[[nearest]] < merge_tol) {
        cell_label[[cell[[i]]]] <- nearest
        next
      }
    }
    representative <- c(representative, i)
    cell_label[[cell[[i]]]] <- length(representative)
  }
  list(representative = representative, density = unname(density[representative]),
       label = cell_label[cell])
}

# ks::kms's merging by size (ms.merge.num): while a cluster has at most
# `min_size` points and more than one is left, the smallest joins the
# cluster of the mode nearest to its own; labels are then renumbered in the
# order of the modes that stay (still by decreasing density).
merge_small_clusters <- function(merged, x, min_size) {
  modes <- x[merged$representative, , drop = FALSE]
  label <- merged$label
  alive <- seq_len(nrow(modes))
  repeat {
    sizes <- tabulate(label, nbins = nrow(modes))[alive]
    if (length(alive) < 2L || min(sizes) > min_size) break
    small <- alive[[which.min(sizes)]]
    others <- setdiff(alive, small)
    gap <- colSums((t(modes[others, , drop = FALSE]) - modes[small, ])^2)
    label[label == small] <- others[[which.min(gap)]]
    alive <- others
  }
  list(representative = merged$representative[alive], density = merged$density[alive],
       label = match(label, alive))
}

positive_number_or_default <- function(value, arg, default) {
  if (is.null(value)) return(default)
  if (!is.numeric(value) || length(value) != 1L || !is.finite(value) || value <= 0) {
    stop_arg(arg, "must be one positive number (or NULL for the default).")
  }
  as.double(value)
}

#' @export
print.kde_modes <- function(x, ...) {
  sizes <- tabulate(x$label, nbins = nrow(x$modes))
  cat(sprintf("%d mode%s of a kernel density estimate (mean shift from %d points",
              nrow(x$modes), if (nrow(x$modes) == 1L) "" else "s", length(x$label)))
  if (!all(x$converged)) cat(sprintf("; %d did not converge", sum(!x$converged)))
  cat("):\n")
  modes <- x$modes
  if (is.null(colnames(modes))) {
    colnames(modes) <- if (ncol(modes) == 1L) "x" else paste0("x", seq_len(ncol(modes)))
  }
  # rows numbered as the modes are in `label`, not by the training points' names
  table <- data.frame(modes, density = unname(x$density), points = sizes,
                      check.names = FALSE, row.names = NULL)
  print(table, digits = 4)
  invisible(x)
}
