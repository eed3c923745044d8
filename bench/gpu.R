# GPU benchmark, run on a machine with an NVIDIA GPU after R CMD INSTALL .:
#
#   Rscript bench/gpu.R [output.csv]      (default inst/benchmarks/gpu.csv)
#
# Kernel evaluations per second (n x m / time, median of several runs after
# a warm-up) measured through predict(): Gaussian d = 1, 3, 16, 64 at
# n = m = 1e4, 1e5, 1e6 in both precisions, every kernel at d = 3, the
# few-queries shape (100 x 1e7), two GPUs against one when there are two,
# and PyTorch (torch.cdist + logsumexp, chunked) on the same problems in the
# same run, as the ratio kdegpu / PyTorch. The CSV records the device, date
# and versions for the vignettes. Then bench/derivatives.R (derivatives.csv
# beside it; KDEGPU_BENCH_DERIVATIVES=0 skips it) and bench/shapes.R
# (shapes-gpu.csv beside it, the rows that regressed against
# inst/benchmarks/shapes.csv marked; KDEGPU_BENCH_SHAPES=0 skips it).
suppressPackageStartupMessages(library(kdegpu))
args <- commandArgs(trailingOnly = TRUE)
out_csv <- if (length(args)) args[[1L]] else "inst/benchmarks/gpu.csv"
quick <- nzchar(Sys.getenv("KDEGPU_BENCH_QUICK"))

info <- kdegpu_info()
if (nrow(info$gpus) == 0L) stop("bench/gpu.R needs a GPU: ", info$cuda_message)
device <- info$gpus$name[[1L]]
torch_ok <- nzchar(Sys.which("python3")) &&
  system2("python3", c("-c", shQuote("import torch; assert torch.cuda.is_available()")),
          stdout = FALSE, stderr = FALSE) == 0L

source("bench/timing.R")
reps_for <- function(pairs) if (pairs >= 1e12) 3L else if (pairs >= 1e10) 5L else 9L

rows <- list()
record <- function(case, kernel, d, n, m, precision, devices, seconds, torch_s = NA) {
  rows[[length(rows) + 1L]] <<- data.frame(
    case = case, kernel = kernel, d = d, n = n, m = m, precision = precision,
    devices = devices, seconds = seconds, evals_per_s = n * m / seconds,
    torch_seconds = torch_s, ratio_vs_torch = torch_s / seconds)
  r <- rows[[length(rows)]]
  cat(sprintf("%-12s %-12s d=%-3d n=%-8.0e m=%-8.0e %-6s gpus=%d  %9.4f s  %.3e eval/s%s\n",
              case, kernel, d, n, m, precision, devices, seconds, r$evals_per_s,
              if (is.na(torch_s)) "" else sprintf("  torch %.4f s (x%.1f)", torch_s, torch_s / seconds)))
}

run_kdegpu <- function(n, m, d, kernel = "gaussian", precision = "single") {
  set.seed(1)
  x <- matrix(rnorm(n * d), n, d)
  q <- if (m == n) x else matrix(rnorm(m * d), m, d)
  fit <- kde_gpu(x, bw = 0.3, kernel = kernel, backend = "cuda", precision = precision)
  t <- median_seconds(function() predict(fit, q, log = TRUE), reps_for(n * m))
  rm(fit); invisible(gc())
  t
}

run_torch <- function(n, m, d, precision) {
  if (!torch_ok) return(NA_real_)
  out <- tryCatch(system2("python3", c("bench/torch_kde.py", n, m, d, precision, 3),
                          stdout = TRUE, stderr = FALSE), error = function(e) character())
  if (!length(out)) return(NA_real_)
  as.numeric(strsplit(out[[length(out)]], " ")[[1L]][[1L]])
}

# KDEGPU_BENCH_CASES picks sections, e.g. "multi_gpu" on a two-GPU machine.
cases <- strsplit(Sys.getenv("KDEGPU_BENCH_CASES", "gaussian,kernels,few_queries,multi_gpu"),
                  ",")[[1L]]
sizes <- if (quick) c(1e4, 1e5) else c(1e4, 1e5, 1e6)
for (precision in if ("gaussian" %in% cases) c("single", "double")) {
  for (d in c(1L, 3L, 16L, 64L)) {
    for (n in sizes) {
      # Double precision at d >= 16 and n = 1e6 takes minutes: use 1e5
      # queries there (the rate per evaluation is what is reported).
      m <- if (precision == "double" && n >= 1e6 && d >= 16L) 1e5 else n
      t <- run_kdegpu(n, m, d, precision = precision)
      # PyTorch in double at 1e6 x 1e6 takes minutes of device time; skipped.
      torch_t <- if (d == 3L && (precision == "single" || n < 1e6)) {
        run_torch(n, m, d, precision)
      } else NA_real_
      record("gaussian", "gaussian", d, n, m, precision, 1L, t, torch_t)
    }
  }
}
big <- if (quick) 1e5 else 1e6
for (kernel in if ("kernels" %in% cases) c("epanechnikov", "rectangular", "triangular", "biweight", "cosine",
                 "optcosine", "exponential")) {
  record("kernels", kernel, 3L, big, big, "single", 1L, run_kdegpu(big, big, 3L, kernel))
}
few_n <- if (quick) 1e6 else 1e7
# The few-queries shape against the large one, measured back to back (the
# target is a ratio of the two: the same clocks and temperature for both).
if ("few_queries" %in% cases) {
  large <- run_kdegpu(big, big, 3L)
  few <- run_kdegpu(few_n, 100, 3L)
  record("few_queries", "gaussian", 3L, big, big, "single", 1L, large)
  record("few_queries", "gaussian", 3L, few_n, 100, "single", 1L, few)
  cat(sprintf("few queries: %.0f %% of the large shape's rate\n",
              100 * (few_n * 100 / few) / (big * big / large)))
}
if (nrow(info$gpus) >= 2L && "multi_gpu" %in% cases) {
  for (devices in list(0L, seq_len(nrow(info$gpus)) - 1L)) {
    options(kdegpu.devices = devices)
    record("multi_gpu", "gaussian", 3L, big, big, "single", length(devices),
           run_kdegpu(big, big, 3L))
  }
  options(kdegpu.devices = NULL)
}

results <- do.call(rbind, rows)
results$device <- device
write_bench_csv(results, out_csv)
cat(sprintf("\nDevice: %s; wrote %s\n", device, out_csv))
run_derivatives_bench(out_csv, "derivatives.csv")
run_shapes_bench(out_csv, "shapes-gpu.csv", "cuda")
