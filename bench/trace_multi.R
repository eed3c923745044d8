# Where the time of a pruned evaluation goes on one GPU and on all of them
# (n = m = 1e7, or TRACE_N, d = 3, single; normal and clustered data): predict(), the
# internal evaluation, the argument checks, and the phases the CUDA code
# writes to $KDEGPU_TRACE.   KDEGPU_TRACE=/tmp/trace.txt Rscript bench/trace_multi.R
suppressPackageStartupMessages(library(kdegpu))
source("bench/timing.R")
all_gpus <- seq_len(nrow(kdegpu_info()$gpus)) - 1L
trace <- Sys.getenv("KDEGPU_TRACE")
for (kind in c("normal", "clustered")) {
  set.seed(1)
  n <- as.numeric(Sys.getenv("TRACE_N", "1e7"))
  x <- if (kind == "normal") matrix(rnorm(3 * n), n, 3) else {
    centers <- matrix(runif(60, -50, 50), 20, 3)
    centers[sample.int(20, n, replace = TRUE), ] + matrix(rnorm(3 * n), n, 3)
  }
  for (devices in list(0L, all_gpus)) {
    options(kdegpu.devices = devices)
    fit <- kde_gpu(x, backend = "cuda", precision = "single")
    invisible(predict(fit, x, log = TRUE))
    cat(sprintf("\n== %s, %d GPU(s)\n", kind, length(devices)))
    seen <- if (file.exists(trace)) length(readLines(trace)) else 0L
    t_pred <- system.time(predict(fit, x, log = TRUE))[["elapsed"]]
    t_eval <- system.time(kdegpu:::evaluate_log_density(fit, x))[["elapsed"]]
    t_check <- system.time(kdegpu:::match_columns(kdegpu:::as_point_matrix(x, "newdata", 3L), fit$x))[["elapsed"]]
    cat(sprintf("predict %.3f s, evaluate_log_density %.3f s, argument checks %.3f s\n", t_pred, t_eval, t_check))
    cat(utils::tail(readLines(trace), -seen), sep = "\n")
    rm(fit); invisible(gc())
  }
}
