#' Options that kdegpu reads
#'
#' kdegpu reads these [options()] when it runs (not when it is loaded), so a
#' change takes effect at the next call. None is needed: the defaults use
#' every CPU core, every GPU, half of each GPU's free memory, and the
#' default tolerance of the precision. A malformed value is an error that
#' names the option.
#'
#' \describe{
#'   \item{`kdegpu.threads`}{CPU threads of the CPU backend and of the
#'     host-side work of every backend (whitening, ordering, checks): one
#'     positive whole number, or `NULL` (default) for all the cores OpenMP
#'     allows (the smallest of the processors, `OMP_THREAD_LIMIT` and
#'     `OMP_NUM_THREADS`); a larger number is capped at that. A small job
#'     uses fewer (one thread per 1e7 pairs times coordinates, about 10 ms
#'     of work), since on a busy machine extra threads slow it down. In a process
#'     forked by [parallel::mclapply()] or [parallel::makeForkCluster()]
#'     kdegpu uses one thread whatever this says. [kdegpu_info()] shows the
#'     number in use.}
#'   \item{`kdegpu.gpu_memory`}{The GPU memory, in bytes per device, that
#'     one evaluation or one batch of draws may use: one positive number,
#'     or `NULL` (default) for half of the device's free memory when the
#'     fit's GPU copy is made. The training points stay on the GPU when they
#'     take at most half the budget and stream from the host otherwise; the
#'     queries run in batches that fit. A smaller budget runs in more
#'     batches and gives the same results; a budget too small for one batch
#'     is an error that says so. Changing it rebuilds a fit's GPU copy at
#'     its next use.}
#'   \item{`kdegpu.devices`}{The GPUs to use, numbered from 0 as in CUDA
#'     (`CUDA_VISIBLE_DEVICES` applies first): an integer vector, or `NULL`
#'     (default) for every usable GPU. With several, each holds a copy of
#'     the fit and the GPUs claim batches of the queries as they free up
#'     (so that uneven work per query after pruning keeps them all busy);
#'     fewer than 16384 queries per GPU split the training set instead.
#'     The batches and the order of every sum are those of one GPU, so on
#'     identical GPUs the results equal one GPU's to the bit (where the
#'     queries are split). Changing it rebuilds a fit's GPU copy
#'     at its next use; [sample()][sample.kde_gpu], derivatives and
#'     [kde_modes()] run on the first listed. A device listed twice holds
#'     two copies and runs the several-device code on one GPU (for
#'     testing; each copy takes its own memory budget).}
#'   \item{`kdegpu.tolerance`}{The relative error allowed in each density
#'     when the `tolerance` argument of [predict()][predict.kde_gpu],
#'     [logLik()][logLik.kde_gpu], [bw_lscv()] or [bw_mlcv()] is not given:
#'     a number in `[0, 1)`, `0` for the full sum, or `NULL` (default) for
#'     [default_tolerance], `c(double = 1e-14, single = 1e-7)` by the
#'     precision the backend computes in (the CPU always computes in double).
#'     Every density returned is within this relative error of the exact sum
#'     and never above it (see `tolerance` in [predict.kde_gpu()]). With a
#'     `cluster`, the value in the calling process applies on the workers.}
#'   \item{`kdegpu.spatial`}{`TRUE` (default) or `FALSE`. Read when a fit is
#'     made: `TRUE` puts the training points in a k-d order of tiles of 256
#'     nearby points, which lets evaluations skip the tiles that provably
#'     cannot matter; `FALSE` keeps the data's order and every evaluation
#'     visits every tile (the baseline of `bench/prune.R`). Only speed
#'     changes, not results beyond the tolerance.}
#'   \item{`kdegpu.progress`}{`TRUE` or `FALSE`; default [interactive()].
#'     Shows a progress bar on standard error, `kdegpu: [=====    ]  40%,
#'     about 12 s left`, for each evaluation (a [predict()][predict.kde_gpu]
#'     call, each step of a bandwidth search) and each [sample()][sample.kde_gpu]
#'     call that draws on the GPU, when it runs longer than `kdegpu.progress_delay` seconds; the bar is
#'     updated between chunks of work and blanked when the evaluation ends.
#'     Results are the same with or without it. Workers of a cluster use
#'     their own options (non-interactive: no bar).}
#'   \item{`kdegpu.progress_delay`}{Seconds an evaluation runs before its
#'     progress bar appears: one non-negative number, default 2.}
#' }
#'
#' Ctrl-C needs no option: it is checked between the same chunks of work
#' (on the CPU every 0.1 s of wall time; on
#' the GPU between batches), stops the evaluation, frees its host and GPU
#' memory and signals R's `interrupt` condition (see [kde_gpu()],
#' "Interrupts and forked processes").
#'
#' At installation, the environment variables `KDEGPU_CUDA_HOME` (where CUDA
#' is), `KDEGPU_WITHOUT_CUDA=1` (build the CPU backend only) and `CUDA_ARCH`
#' (the GPU architectures to compile for, e.g. `"90"`) steer `configure`.
#'
#' @name kdegpu-options
#' @aliases kdegpu.options kdegpu.threads kdegpu.gpu_memory kdegpu.devices
#'   kdegpu.tolerance kdegpu.spatial kdegpu.progress kdegpu.progress_delay
#' @seealso [kdegpu_info()] for the threads and GPUs in use,
#'   [default_tolerance], [kde_gpu()].
#' @examples
#' op <- options(kdegpu.threads = 1, kdegpu.tolerance = 0)
#' fit <- kde_gpu(faithful, backend = "cpu")
#' head(predict(fit))   # the full sum, on one thread
#' kdegpu_info()$threads
#' options(op)
NULL

# Readers of the options above; each names the option in its error.

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
