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
