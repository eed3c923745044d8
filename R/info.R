# What this installation can do (kdegpu_info()) and what each operation
# runs on, written once: capability_table() is what kdegpu_info() shows and
# what the dispatch below reads. The GPU's
# dimension limits come from the C code (kdegpu_limits), not copies of them.

backend_limits <- function() {
  if (is.null(backend_state$limits)) backend_state$limits <- .Call(C_kdegpu_limits)
  backend_state$limits
}

# Below this many draws, sampling in R costs less than the GPU's set-up.
gpu_sample_min_size <- 10000L

# One row per operation and backend: the precisions it computes in, the
# kernels and dimensions it serves, whether it serves adaptive and bounded
# fits, which of the GPUs in options(kdegpu.devices) it uses, and what runs
# instead where it does not (`otherwise`). `max_dim` NA: any dimension.
capability_table <- function() {
  # built once per session: the dispatch reads it on every call, and a
  # data frame's rbind() costs milliseconds
  if (is.null(backend_state$capabilities)) backend_state$capabilities <- build_capability_table()
  backend_state$capabilities
}

build_capability_table <- function() {
  limits <- backend_limits()
  row <- function(operation, backend, precision, kernels, max_dim = NA_integer_,
                  adaptive = TRUE, bounded = TRUE, otherwise = "",
                  gpus = if (backend == "cuda") "all" else "") {
    data.frame(operation = operation, backend = backend, precision = precision,
               kernels = kernels, max_dim = as.integer(max_dim), adaptive = adaptive,
               bounded = bounded, gpus = gpus, otherwise = otherwise,
               stringsAsFactors = FALSE)
  }
  cdf_kernels <- "all (1-D); gaussian, diagonal H (d > 1)"
  rbind(
    row("density", "cuda", "double, single", "all"),
    row("density", "cpu", "double", "all"),
    row("leave-one-out (logLik, cross-validation)", "cuda", "double, single", "all"),
    row("leave-one-out (logLik, cross-validation)", "cpu", "double", "all"),
    row("tile skipping", "cuda", "double, single", "all",
        max_dim = limits[["cuda_plan_max_dim"]],
        otherwise = "every tile (the full sum)"),
    row("tile skipping", "cpu", "double", "all"),
    row("gradient, hessian, modes", "cuda", "double, single", "all but rectangular",
        max_dim = limits[["cuda_derivative_max_dim"]], adaptive = FALSE,
        otherwise = "cpu"),
    row("gradient, hessian, modes", "cpu", "double", "all but rectangular",
        max_dim = limits[["derivative_result_max_dim"]], otherwise = "an error"),
    row("cdf, quantile", "cuda", "double", cdf_kernels,
        otherwise = "an error (no closed form)"),
    row("cdf, quantile", "cpu", "double", cdf_kernels, otherwise = "an error (no closed form)"),
    row("conditional cdf, quantile (given)", "cuda", "double", "gaussian", bounded = FALSE),
    row("conditional cdf, quantile (given)", "cpu", "double", "gaussian", bounded = FALSE),
    row("moment sums (plug-in bandwidths, kde_test)", "cuda", "double", "gaussian"),
    row("moment sums (plug-in bandwidths, kde_test)", "cpu", "double", "gaussian"),
    row("sample", "cuda", "double", "all", max_dim = limits[["cuda_sample_max_dim"]],
        otherwise = sprintf("cpu (also below %d draws)", gpu_sample_min_size)),
    row("sample", "cpu", "double", "all"),
    row("mixed data: discrete columns fused into the pairs", "cuda", "double, single",
        "gaussian", max_dim = limits[["cuda_discrete_max"]], adaptive = FALSE, bounded = FALSE,
        otherwise = sprintf(paste("more than %d numeric or discrete columns: each level an",
                                  "embedded Gaussian"), limits[["cuda_discrete_max"]])),
    row("mixed data: discrete columns fused into the pairs", "cpu", "double", "gaussian",
        adaptive = FALSE, bounded = FALSE)
  )
}

# The row of `operation` on `backend`, as a list (from an index of the
# table's rows, made once: the dispatch asks on every call).
capability <- function(operation, backend) {
  if (is.null(backend_state$capability_rows)) {
    table <- capability_table()
    rows <- lapply(seq_len(nrow(table)), function(i) as.list(table[i, , drop = FALSE]))
    names(rows) <- paste(table$operation, table$backend, sep = "|")
    backend_state$capability_rows <- rows
  }
  backend_state$capability_rows[[paste(operation, backend, sep = "|")]]
}

# Whether a CUDA fit's `operation` runs on its GPU (else: the row's
# `otherwise`), by the table's dimension and adaptive columns.
gpu_serves <- function(operation, object) {
  if (object$backend != "cuda") return(FALSE)
  row <- capability(operation, "cuda")
  (is.na(row$max_dim) || object$d <= row$max_dim) && (row$adaptive || is.null(object$adaptive))
}

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
#'   `kernels`, `max_dim` (`NA`: any), `adaptive`, `bounded`, `gpus`
#'   (`"all"`: every device in `options(kdegpu.devices)`), `otherwise`).
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
