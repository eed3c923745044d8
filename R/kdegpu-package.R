#' kdegpu: exact kernel density estimation on GPUs and CPUs
#'
#' Exact kernel density estimates for large data: a fused evaluation
#' streams training points in tiles and keeps a running log-sum-exp per
#' query, so memory grows with n + m, never n x m. Start with [kde_gpu()].
#'
#' @section Options:
#' The options kdegpu reads (`kdegpu.threads`, `kdegpu.gpu_memory`,
#' `kdegpu.devices`, `kdegpu.tolerance`, `kdegpu.spatial`,
#' `kdegpu.progress`, `kdegpu.progress_delay`), with their defaults, are
#' listed in [kdegpu-options].
#' @keywords internal
#' @useDynLib kdegpu, .registration = TRUE, .fixes = "C_"
#' @importFrom stats predict
#' @importFrom graphics plot
"_PACKAGE"
