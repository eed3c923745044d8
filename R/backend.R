# Backend choice, options, device information, and the one function that
# runs an evaluation on whichever backend a fit uses.

backend_state <- new.env(parent = emptyenv())
backend_state$fallback_told <- FALSE

cpu_threads <- function() {
  threads <- getOption("kdegpu.threads")
  if (is.null(threads)) return(0L) # all the cores OpenMP allows
  # whole and within integer range: as.integer() would truncate 1.5 and
  # turn Inf or 1e10 into NA
  if (!is.numeric(threads) || length(threads) != 1L || is.na(threads) || threads < 1 ||
      threads > .Machine$integer.max || threads != round(threads)) {
    stop("`options(kdegpu.threads)` must be one positive whole number (at most ",
         .Machine$integer.max, "; more than the cores uses the cores) or NULL, not ",
         format(threads)[1L], ".", call. = FALSE)
  }
  as.integer(threads)
}


gpu_memory_budget <- function() {
  budget <- getOption("kdegpu.gpu_memory")
  if (is.null(budget)) return(0) # the backend's default: a fraction of free memory
  if (!is.numeric(budget) || length(budget) != 1L || is.na(budget) || budget <= 0) {
    stop("`options(kdegpu.gpu_memory)` must be one positive number of bytes or NULL.", call. = FALSE)
  }
  as.double(budget)
}

gpu_devices <- function(available) {
  devices <- getOption("kdegpu.devices")
  if (is.null(devices)) return(seq_len(available) - 1L)
  if (!is.numeric(devices) || anyNA(devices) || any(devices < 0) || any(devices >= available)) {
    stop(sprintf("`options(kdegpu.devices)` must list device numbers in 0..%d.",
                 available - 1L), call. = FALSE)
  }
  # a device listed twice runs two replicas (the several-device code on one GPU)
  as.integer(devices)
}

cuda_info <- function() .Call(C_kdegpu_cuda_info)

#' What this installation of kdegpu can do
#'
#' Reports the backends that were built, the GPUs the CUDA backend can use
#' (with their names and memory) and the OpenMP threads of the CPU backend.
#'
#' The capability table says, for every operation and backend, the
#' precisions it computes in, the kernels and dimensions it serves, whether
#' it serves adaptive and bounded fits, and what runs instead where it does
#' not; kdegpu decides where each operation runs from this table.
#'
#' @return A list of class `"kdegpu_info"` with elements `backends`
#'   (the usable backends), `cuda_compiled` (was the CUDA backend built?),
#'   `cuda_message` (why no GPU is usable, if none is), `gpus` (a data frame
#'   with one row per usable GPU: `device`, `name`, `memory_gb`, `free_gb`,
#'   `compute_capability`, `multiprocessors`), `openmp` (was the CPU backend
#'   built with OpenMP?) and `threads` (threads the CPU backend will use;
#'   set with `options(kdegpu.threads = n)`) and `capabilities` (the
#'   table above, a data frame: `operation`, `backend`, `precision`,
#'   `kernels`, `max_dim` (`NA`: any), `adaptive`, `bounded`, `gpus` (every
#'   device in `options(kdegpu.devices)`, or the first), `otherwise`).
#' @examples
#' kdegpu_info()
#' @export
kdegpu_info <- function() {
  cuda <- cuda_info()
  cpu <- .Call(C_kdegpu_cpu_info, cpu_threads())
  gpus <- data.frame(
    device = seq_along(cuda$name) - 1L,
    name = cuda$name,
    memory_gb = cuda$total_memory / 2^30,
    free_gb = cuda$free_memory / 2^30,
    compute_capability = cuda$compute_capability,
    multiprocessors = cuda$multiprocessors,
    stringsAsFactors = FALSE
  )
  structure(list(
    backends = c("cpu", if (nrow(gpus) > 0L) "cuda"),
    cuda_compiled = cuda$compiled,
    cuda_message = cuda$message,
    gpus = gpus,
    openmp = cpu$openmp,
    threads = cpu$threads,
    capabilities = capability_table()
  ), class = "kdegpu_info")
}

#' @export
print.kdegpu_info <- function(x, ...) {
  check_dots_empty("print()", "x", list(), ...)
  cat("kdegpu backends:", paste(x$backends, collapse = ", "), "\n")
  cat(sprintf("  CPU: %s, %d thread%s\n",
              if (x$openmp) "OpenMP" else "no OpenMP (single thread)",
              x$threads, if (x$threads == 1L) "" else "s"))
  if (nrow(x$gpus) > 0L) {
    for (i in seq_len(nrow(x$gpus))) {
      g <- x$gpus[i, ]
      cat(sprintf("  GPU %d: %s (compute %s, %d SMs), %.1f GiB, %.1f GiB free\n",
                  g$device, g$name, g$compute_capability, g$multiprocessors,
                  g$memory_gb, g$free_gb))
    }
  } else {
    cat(sprintf("  CUDA: %s\n", if (nzchar(x$cuda_message)) x$cuda_message else "no usable GPU"))
  }
  if (!is.null(x$capabilities)) {
    cat("\nWhat runs where (max_dim NA: any dimension):\n")
    print(x$capabilities, row.names = FALSE, right = FALSE)
  }
  invisible(x)
}

# The backend a new fit uses.
choose_backend <- function(backend) {
  if (backend == "cpu") return("cpu")
  cuda <- cuda_info()
  usable <- length(cuda$name) > 0L
  if (backend == "cuda") {
    if (!usable) {
      stop("`backend = \"cuda\"` needs a usable GPU: ", cuda$message, call. = FALSE)
    }
    return("cuda")
  }
  if (usable) return("cuda")
  if (!backend_state$fallback_told) {
    backend_state$fallback_told <- TRUE
    message("kdegpu: no usable GPU (", cuda$message, "); using the CPU backend.")
  }
  "cpu"
}

# The device that single-GPU work (moment sums, the CDF) runs on: the
# first of gpu_devices().
first_gpu <- function() gpu_devices(gpus_for_cuda_fit())[[1L]]

# The number of usable GPUs, or an error saying why a CUDA fit cannot run.
gpus_for_cuda_fit <- function() {
  available <- .Call(C_kdegpu_cuda_device_count)
  if (available == 0L) {
    stop("This fit uses the CUDA backend but no GPU is usable here: ",
         cuda_info()$message, ". Refit with `backend = \"cpu\"`.", call. = FALSE)
  }
  available
}

# The device-resident copy of a CUDA fit, created on first use, again after
# saveRDS()/readRDS() (where the external pointer comes back NULL), again
# when options(kdegpu.gpu_memory) or options(kdegpu.devices) change, so that
# the options always govern the next evaluation, and again when a call's
# `tolerance` asks for another form of the Gaussian: the faster expanded
# form (tensor cores) serves only while its predicted rounding of a density
# is within the tolerance, so that the default gives the precision's own
# accuracy and a looser tolerance (say 1e-4) opts into the faster form.
cuda_model <- function(object, tolerance = resolve_tolerance(NULL, object)) {
  cache <- object$device
  available <- gpus_for_cuda_fit()
  config <- list(budget = gpu_memory_budget(), devices = gpu_devices(available))
  valid <- !is.null(cache$handle) && .Call(C_kdegpu_cuda_model_valid, cache$handle) &&
    identical(cache$config, config)
  # the form the model has, and the one this tolerance asks for
  rounding <- if (valid) attr(cache$handle, "rounding") else NA_real_
  if (valid && !is.na(rounding)) {
    valid <- identical(cache$expanded, rounding <= tolerance)
  }
  if (!valid) {
    if (!is.null(cache$handle)) .Call(C_kdegpu_cuda_model_release, cache$handle)
    cache$handle <- NULL # a failed creation leaves none behind
    cache$handle <- .Call(
      C_kdegpu_cuda_model_create, object$z, object$tile_weights, object$tile_scale,
      object$tile_size,
      kernel_index(object$kernel),
      if (object$precision == "single") 1L else 0L, config$devices, config$budget,
      tolerance, cpu_threads()
    )
    cache$config <- config
    cache$expanded <- isTRUE(attr(cache$handle, "rounding") <= tolerance)
  }
  cache$handle
}

# Frees a fit's device copy now rather than when the fit is collected: for
# the many short-lived fits of a bandwidth search.
release_device_copy <- function(object) {
  if (!is.null(object$device$handle)) .Call(C_kdegpu_cuda_model_release, object$device$handle)
  invisible()
}

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
  z <- whiten(list(center = colSums(x * weights), transform = whitening(H, kernel)$transform), x)
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
    .Call(C_kdegpu_log_density_cpu, object$z, object$tile_weights, object$tile_scale,
          object$tile_size, query, center, transform, kernel_index(object$kernel), object$log_const,
          leave_one_out, tolerance, cpu_threads(), progress_delay())
  }
  record_pairs_share(object, attr(out, "pairs_share"))
  attr(out, "pairs_share") <- NULL
  out
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
# whitened points in their place, in the fit's spatial order (a bounded
# fit's images of its points), point i still leaving out its own term.
log_density_at_training_points <- function(object, leave_one_out, tolerance = NULL,
                                           queries = object$z) {
  in_spatial_order <- evaluate_log_density(object, queries, leave_one_out = leave_one_out,
                                           whitened = TRUE, tolerance = tolerance)
  out <- numeric(length(in_spatial_order))
  out[object$order] <- in_spatial_order
  out
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

check_tolerance <- function(tolerance, arg = "tolerance") {
  if (!is.numeric(tolerance) || length(tolerance) != 1L || is.na(tolerance) ||
      tolerance < 0 || tolerance >= 1) {
    stop_arg(arg, "must be one number in [0, 1): the relative error allowed ",
             "(0: the full sum).")
  }
  as.double(tolerance)
}

# The progress bar of evaluations and GPU draws, as the seconds after which
# it appears (-1: never): options(kdegpu.progress = TRUE / FALSE), by
# default in interactive sessions, and kdegpu.progress_delay (2 s).
progress_delay <- function() {
  show <- getOption("kdegpu.progress", interactive())
  if (!is.logical(show) || length(show) != 1L || is.na(show)) {
    stop("`options(kdegpu.progress)` must be TRUE or FALSE.", call. = FALSE)
  }
  delay <- getOption("kdegpu.progress_delay", 2)
  if (!is.numeric(delay) || length(delay) != 1L || is.na(delay) || delay < 0 ||
      !is.finite(delay)) {
    stop("`options(kdegpu.progress_delay)` must be one non-negative number of seconds.",
         call. = FALSE)
  }
  if (show) as.double(delay) else -1
}

whiten <- function(object, x) {
  .Call(C_kdegpu_whiten, x, as.double(object$center), object$transform, cpu_threads())
}
