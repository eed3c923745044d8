#' kdegpu: exact kernel density estimation on GPUs and CPUs
#'
#' Exact kernel density estimates for large data: a fused evaluation
#' streams training points in tiles and keeps a running log-sum-exp per
#' query, so memory grows with n + m, never n x m. Start with [kde_gpu()].
#'
#' @section Options:
#' - `kdegpu.threads`: CPU threads (default: all cores OpenMP allows).
#' - `kdegpu.gpu_memory`: bytes of GPU memory an evaluation may use per
#'   device (default: a safe fraction of free memory); larger problems run
#'   in batches with the same results.
#' - `kdegpu.devices`: the GPUs to use, numbered from 0 as in CUDA
#'   (default: all).
#' - `kdegpu.progress`: show a progress bar (on standard error) for
#'   evaluations and GPU draws that run longer than
#'   `kdegpu.progress_delay` seconds (default 2); default: `interactive()`.
#'   Ctrl-C stops an evaluation between chunks of work, with or without the
#'   bar, and frees what it allocated.
#' @keywords internal
#' @useDynLib kdegpu, .registration = TRUE, .fixes = "C_"
#' @importFrom stats predict
#' @importFrom graphics plot
"_PACKAGE"
