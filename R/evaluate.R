# The one function that runs an evaluation on whichever backend a fit
# uses, the spatial order it relies on, and the tolerance it runs at.

# Whether a fit's points get a spatial order: not with options(kdegpu.spatial
# = FALSE) (every evaluation visits every tile: the baseline that
# bench/prune.R measures against), and not where its backend does not skip
# tiles (capability_table(): a CUDA fit beyond the dimensions the GPU plans),
# where the order would buy nothing and cost a second of the fit at
# n = 1e6, d = 16.
spatial_order_wanted <- function(backend = "cpu", d = 1L) {
  if (isFALSE(getOption("kdegpu.spatial", TRUE))) return(FALSE)
  limit <- capability("tile skipping", backend)$max_dim
  is.na(limit) || d <= limit
}

# The spatial order of x's rows whitened by bandwidth H (as new_kde_gpu()
# computes it), for fits at bandwidths of H's shape to share; NULL where
# fits are not spatially ordered.
spatial_order_for <- function(x, weights, H, kernel, backend) {
  if (!spatial_order_wanted(backend, ncol(x))) return(NULL)
  z <- whiten(list(center = weighted_centre(x, weights), transform = whitening(H, kernel)$transform), x)
  .Call(C_kdegpu_spatial_order, z, cpu_threads())
}

# Points per spatial tile of a fit's training points (KDE_TILE_POINTS in
# src/kde_backend.h): the order that kdegpu_spatial_order() gives.
spatial_tile_size <- 256L

# log f at the rows of `query`, in the fit's coordinates; the backend
# whitens them (on the GPU for the CUDA backend), unless `whitened` says
# they are already. With leave_one_out = TRUE the queries are the fit's
# training points in its spatial order (object$z) and each excludes its own
# term: the result is log sum_{j != i} w_j K(x_i - x_j), in that order (see
# log_density_at_training_points() for the user's order). Within relative
# `tolerance` of the full sum (see predict()).
evaluate_log_density <- function(object, query, leave_one_out = FALSE,
                                 whitened = leave_one_out, tolerance = NULL) {
  center <- if (whitened) NULL else as.double(object$center)
  transform <- if (whitened) NULL else object$transform
  tolerance <- resolve_tolerance(tolerance, object)
  out <- if (object$backend == "cuda") {
    .Call(C_kdegpu_log_density_cuda, cuda_model(object, tolerance), query, center, transform,
          object$log_const, leave_one_out, tolerance, cpu_threads(), progress_delay())
  } else {
    .Call(C_kdegpu_log_density_cpu_model, cpu_model(object), query, center, transform,
          object$log_const, leave_one_out, tolerance, cpu_threads(), progress_delay())
  }
  record_pairs_share(object, attr(out, "pairs_share"))
  attr(out, "pairs_share") <- NULL
  out
}

# Densities from log-densities: exp() on the allowed cores (R's runs on
# one: 0.1-0.2 s for 1e7 values, a tenth of the pruned GPU evaluation that
# made them), the same values and names.
exp_on_cores <- function(log_density) {
  if (!is.double(log_density)) return(exp(log_density))
  .Call(C_kdegpu_exp, log_density, cpu_threads())
}

# The share of the query x training pairs each fit's last evaluation
# computed (below 1 where the spatial tiles let it skip some), by the
# fit's id, for print() and summary(): kept here rather than in the fit,
# so that evaluating a fit leaves the object the user holds as it was.
# The most recent 256 fits.
evaluation_record <- new.env(parent = emptyenv())

record_pairs_share <- function(object, share) {
  if (is.null(share) || !is.character(object$id)) return(invisible())
  shares <- evaluation_record$shares
  shares <- c(shares[names(shares) != object$id], stats::setNames(share, object$id))
  evaluation_record$shares <- utils::tail(shares, 256L)
  invisible()
}

# log f (or, leaving one out, log f_{-i} before renormalising) at every
# training point, in the order of the user's data; `queries` may put other
# points in their place, in the fit's spatial order (a bounded fit's images
# of its points; whitened, or raw with whitened = FALSE), point i still
# leaving out its own term.
log_density_at_training_points <- function(object, leave_one_out, tolerance = NULL,
                                           queries = training_queries(object),
                                           whitened = TRUE) {
  in_spatial_order <- evaluate_log_density(object, queries, leave_one_out = leave_one_out,
                                           whitened = whitened, tolerance = tolerance)
  out <- numeric(length(in_spatial_order))
  out[object$order] <- in_spatial_order
  out
}

# The training points as queries, in the spatial order: the whitened
# points and, for a mixed-data fit, their discrete codes (new_kde_gpu()).
training_queries <- function(object) {
  if (is.null(object$discrete)) object$z else cbind(object$z, object$discrete$codes)
}

# The relative tolerance of an evaluation: the user's (checked where the
# user gave it), else options(kdegpu.tolerance), else the default of the
# precision the backend computes in (the CPU always computes in double).
resolve_tolerance <- function(tolerance, object) {
  if (!is.null(tolerance)) return(tolerance)
  tolerance <- getOption("kdegpu.tolerance")
  if (is.null(tolerance)) {
    single <- object$backend == "cuda" && object$precision == "single"
    return(if (single) default_tolerance[["single"]] else default_tolerance[["double"]])
  }
  # the user wrote the option, not an argument: name the option
  check_tolerance(tolerance, "options(kdegpu.tolerance)")
}

#' @rdname predict.kde_gpu
#' @format `default_tolerance`: the tolerance used when neither the
#'   `tolerance` argument nor `options(kdegpu.tolerance)` gives one, by the
#'   precision the backend computes in.
#' @export
default_tolerance <- c(double = 1e-14, single = 1e-7)

# sum_i w_i x_i, the centre a fit whitens about: in C on every allowed core
# (src/data_summary.c; no n x d copy of x, as colSums(x * weights) made).
weighted_centre <- function(x, weights) {
  centre <- .Call(C_kdegpu_weighted_centre, x, as.double(weights), cpu_threads())
  names(centre) <- colnames(x)
  centre
}

whiten <- function(object, x) {
  .Call(C_kdegpu_whiten, x, as.double(object$center), object$transform, cpu_threads())
}

# The same for the derivative sums: list(z, residual), z whiten()'s and
# residual what its rounding lost, which fits of data far from their centre
# add to each difference (src/cpu_offsets.c, src/cuda/model.cu; NULL beyond
# 8 dimensions).
whiten_for_sums <- function(object, x) {
  .Call(C_kdegpu_whiten_exact, x, as.double(object$center), object$transform, cpu_threads())
}
