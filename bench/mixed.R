# Mixed data (2 numeric columns, a 2-level factor and a 3-level ordered
# factor): cross-validated bandwidths (H and both lambdas, np's cv.ml) and
# one evaluation, on the GPU when one is usable, else the CPU.
#
#   Rscript bench/mixed.R [output.csv] [sizes]   (default inst/benchmarks/mixed.csv; sizes
#                                                 "1e4,1e5,1e6" on a GPU, "2000" on a CPU)
#
# Each row: kde_gpu(df) with its default bw = "mlcv" (a full H and the
# lambdas jointly), its criterion evaluations at n and on the subsamples
# that choose its start (above 2e4 points), and
# predict() at 1e4 new points, in single and double precision.
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args) >= 1L) args[[1L]] else "inst/benchmarks/mixed.csv"
info <- kdegpu_info()
gpu <- nrow(info$gpus) > 0L
sizes <- if (length(args) >= 2L) as.numeric(strsplit(args[[2L]], ",")[[1L]]) else
  if (gpu) c(1e4, 1e5, 1e6) else 2000
source("bench/timing.R")
device <- if (gpu) info$gpus$name[[1L]] else
  sprintf("CPU, %d threads", getOption("kdegpu.threads", parallel::detectCores()))

mixed_data <- function(n, seed) {
  set.seed(seed)
  group <- sample(2L, n, TRUE)
  level <- pmin(3L, 1L + rpois(n, 0.6 + 0.5 * group))
  a <- rnorm(n, mean = group)
  data.frame(a = a, b = 0.5 * a + rnorm(n, sd = 0.7) + 0.3 * level,
             group = factor(c("u", "v")[group], levels = c("u", "v")),
             level = factor(level, levels = 1:3, ordered = TRUE))
}
rows <- list()
for (n in sizes) {
  x <- mixed_data(n, 1)
  q <- mixed_data(1e4, 2)
  for (precision in if (gpu) c("single", "double") else "double") {
    seconds <- system.time(fit <- kde_gpu(x, backend = if (gpu) "cuda" else "cpu",
                                          precision = precision))[["elapsed"]]
    evaluations <- fit$selection$evaluations
    pilot_evaluations <- fit$selection$pilot_evaluations
    predict_s <- median_seconds(function() predict(fit, q), 3L)
    r <- data.frame(n = n, precision = precision, select_seconds = seconds,
                    evaluations = evaluations, pilot_evaluations = pilot_evaluations,
                    predict_1e4_seconds = predict_s, lambda_group = fit$lambda[["group"]],
                    lambda_level = fit$lambda[["level"]], sd_a = sqrt(fit$H[1, 1]),
                    sd_b = sqrt(fit$H[2, 2]), log_likelihood = fit$selection$criterion)
    cat(sprintf("n=%-7.0e %-6s cv.ml %8.2f s (%d evaluations at n, %d on subsamples)  predict 1e4 %.4f s  lambda %.3f %.3f  sd %.4f %.4f\n",
                n, precision, seconds, evaluations, pilot_evaluations, predict_s,
                r$lambda_group, r$lambda_level, r$sd_a, r$sd_b))
    rows[[length(rows) + 1L]] <- r
    rm(fit); invisible(gc())
  }
}
results <- do.call(rbind, rows)
results$device <- device
write_bench_csv(results, out_csv)
