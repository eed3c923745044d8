# The backend a fit uses, the GPUs it may use, and its copy on them.

backend_state <- new.env(parent = emptyenv())
backend_state$fallback_told <- FALSE

cuda_info <- function() .Call(C_kdegpu_cuda_info)

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
  if (valid && !is.na(rounding) && !is.na(tolerance)) {
    valid <- identical(cache$expanded, rounding <= tolerance)
  }
  if (!valid) {
    # NA: any form serves (the CDF, which reads only the model's devices)
    if (is.na(tolerance)) tolerance <- resolve_tolerance(NULL, object)
    if (!is.null(cache$handle)) .Call(C_kdegpu_cuda_model_release, cache$handle)
    cache$handle <- NULL # a failed creation leaves none behind
    cache$handle <- .Call(
      C_kdegpu_cuda_model_create, training_queries(object), object$tile_weights,
      object$tile_scale, object$tile_size,
      kernel_index(object$kernel),
      if (object$precision == "single") 1L else 0L, config$devices, config$budget,
      tolerance, object$discrete$penalty,
      # the raw points, their order and whitening: for what a double fit's
      # whitening of data far from their centre lost (src/cuda/model.cu)
      object$x, object$order, object$center, object$transform, cpu_threads()
    )
    cache$config <- config
    cache$expanded <- isTRUE(attr(cache$handle, "rounding") <= tolerance)
  }
  cache$handle
}

# A CPU fit's model (src/cpu_model.c): its training set checked, its log
# weights and its tiles' boxes made once, not per evaluation; again after
# saveRDS()/readRDS() (the external pointer comes back NULL), and for a fit
# made from another's parts that shares its environment (an adaptive fit
# from its pilot, a margin): the model remembers what it was made from, and
# identical() on the same objects costs nothing.
cpu_model <- function(object) {
  cache <- object$device
  made_from <- list(object$z, object$tile_weights, object$tile_scale, object$tile_size,
                    object$kernel, object$discrete)
  if (is.null(cache$cpu_handle) || !.Call(C_kdegpu_cpu_model_valid, cache$cpu_handle) ||
      !identical(cache$cpu_made_from, made_from)) {
    cache$cpu_handle <- NULL # a failed creation leaves none behind
    # the raw points, their order and whitening: for the offset mode of
    # data far from their centre (src/cpu_offsets.c)
    cache$cpu_handle <- .Call(C_kdegpu_cpu_model_create, training_queries(object),
                              object$tile_weights, object$tile_scale,
                              kernel_index(object$kernel), object$tile_size,
                              object$discrete$penalty, object$x, object$order,
                              object$center, object$transform, cpu_threads())
    cache$cpu_made_from <- made_from
  }
  cache$cpu_handle
}

# Frees a fit's device copy now rather than when the fit is collected: for
# the many short-lived fits of a bandwidth search.
release_device_copy <- function(object) {
  if (!is.null(object$device$handle)) .Call(C_kdegpu_cuda_model_release, object$device$handle)
  invisible()
}
