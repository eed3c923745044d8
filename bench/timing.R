# Shared by the benchmark scripts (source("bench/timing.R") from the
# repository root): median seconds per call of f(). One untimed warm-up call
# (first-call costs such as a fit's device copy are not what is measured);
# short calls are repeated inside each timing so that it spans at least
# 0.2 s, since system.time() resolves 1 ms.
median_seconds <- function(f, reps = 5L) {
  f()
  once <- system.time(f())[["elapsed"]]
  inner <- if (once < 0.05) ceiling(0.2 / max(once, 1e-3)) else 1L
  median(vapply(seq_len(reps), function(i) {
    system.time(for (k in seq_len(inner)) f())[["elapsed"]] / inner
  }, 0))
}

# The git commit the benchmark measures, recorded in every stored CSV:
# $KDEGPU_COMMIT when set (the GPU machine gets a copy of the tree without
# .git, so the command that runs there passes it), else `git rev-parse`,
# with "+dirty" when the tree has uncommitted changes to tracked files.
bench_commit <- function() {
  given <- Sys.getenv("KDEGPU_COMMIT")
  if (nzchar(given)) return(given)
  git <- function(...) {
    suppressWarnings(tryCatch(system2("git", c(...), stdout = TRUE, stderr = FALSE),
                              error = function(e) character()))
  }
  head <- git("rev-parse", "--short=12", "HEAD")
  if (length(head) != 1L) return("unknown")
  dirty <- git("status", "--porcelain", "--untracked-files=no")
  if (length(dirty) > 0L) paste0(head, "+dirty") else head
}

# The SM clock a GPU benchmark ran at, so that its ratios to the
# hardware's limits are stated at the clock actually run: from
# source("bench/timing.R") on, nvidia-smi samples GPU 0's SM clock and
# utilisation every 200 ms into a file until busy_sm_clock() or R's exit
# stops it; busy_sm_clock() gives the median clock over the samples with
# the GPU at least half busy (NA without nvidia-smi, or where the GPU was
# never busy).
clock_log <- local({
  smi <- Sys.which("nvidia-smi")
  if (!nzchar(smi)) return(NULL)
  path <- tempfile("sm-clock-", fileext = ".csv")
  command <- sprintf(
    "%s --id=0 --query-gpu=clocks.sm,utilization.gpu --format=csv,noheader,nounits -lms 200 > %s 2> /dev/null & echo $!",
    shQuote(smi), shQuote(path))
  pid <- suppressWarnings(tryCatch(system2("sh", c("-c", shQuote(command)), stdout = TRUE),
                                   error = function(e) character()))
  if (length(pid) != 1L || is.na(suppressWarnings(as.integer(pid)))) return(NULL)
  # stopped when R exits too: scripts that never write through
  # write_bench_csv() would leave it sampling
  sampler <- new.env()
  sampler$pid <- as.integer(pid)
  reg.finalizer(sampler, function(e) tools::pskill(e$pid), onexit = TRUE)
  list(path = path, pid = sampler$pid, sampler = sampler)
})
busy_sm_clock <- function() {
  if (is.null(clock_log)) return(NA_real_)
  tools::pskill(clock_log$pid)
  samples <- tryCatch(utils::read.csv(clock_log$path, header = FALSE),
                      error = function(e) NULL)
  if (is.null(samples) || ncol(samples) < 2L) return(NA_real_)
  clock <- suppressWarnings(as.numeric(samples[[1L]]))
  busy <- clock[suppressWarnings(as.numeric(samples[[2L]])) >= 50 & !is.na(clock)]
  if (length(busy) == 0L) NA_real_ else stats::median(busy)
}

# Writes a benchmark's results to `out_csv` with what every stored result
# names besides its device: the SM clock where a GPU ran (busy_sm_clock),
# the date, the commit, R's and kdegpu's versions.
write_bench_csv <- function(results, out_csv) {
  if (!is.null(clock_log)) results$sm_clock_mhz <- busy_sm_clock()
  results$date <- format(Sys.Date())
  results$commit <- bench_commit()
  results$r_version <- as.character(getRversion())
  results$kdegpu_version <- as.character(utils::packageVersion("kdegpu"))
  dir.create(dirname(out_csv), showWarnings = FALSE, recursive = TRUE)
  utils::write.csv(results, out_csv, row.names = FALSE)
}

# The derivatives benchmark (bench/derivatives.R: the gradient, Hessian,
# score and mean shift next to the density's time, and SD-KDE), run at the
# end of bench/gpu.R and bench/cpu.R in its own R process, its CSV (`name`)
# beside theirs (`out_csv`'s folder). KDEGPU_BENCH_DERIVATIVES=0 skips it
# (three minutes on a GPU); KDEGPU_BENCH_PARTS picks its parts.
run_derivatives_bench <- function(out_csv, name) {
  if (identical(Sys.getenv("KDEGPU_BENCH_DERIVATIVES"), "0")) return(invisible())
  cat("\nDerivatives (bench/derivatives.R):\n")
  status <- system2(file.path(R.home("bin"), "Rscript"),
                    c("bench/derivatives.R", file.path(dirname(out_csv), name)))
  if (!identical(status, 0L)) warning("bench/derivatives.R exited with status ", status)
  invisible()
}

# The shapes benchmark (bench/shapes.R: few, sparse, clustered and GPS-like
# queries, the default against the full sum), run at the end of bench/gpu.R
# and bench/cpu.R in its own R process, then set beside the stored rows of
# inst/benchmarks/shapes.csv for the same backend: a row whose time over the
# full sum's, or whose share of pairs, grew by a fifth is marked. Its CSV
# goes to `name` beside `out_csv`. KDEGPU_BENCH_SHAPES=0 skips it;
# KDEGPU_SHAPES picks its rows (bench/shapes.R).
run_shapes_bench <- function(out_csv, name, backend) {
  if (identical(Sys.getenv("KDEGPU_BENCH_SHAPES"), "0")) return(invisible())
  cat("\nShapes (bench/shapes.R):\n")
  csv <- file.path(dirname(out_csv), name)
  status <- system2(file.path(R.home("bin"), "Rscript"), c("bench/shapes.R", csv, backend))
  if (!identical(status, 0L) || !file.exists(csv)) {
    warning("bench/shapes.R exited with status ", status)
    return(invisible())
  }
  stored_csv <- "inst/benchmarks/shapes.csv"
  if (!file.exists(stored_csv)) return(invisible())
  key <- c("case", "backend", "d", "n", "m", "precision")
  both <- merge(utils::read.csv(csv), utils::read.csv(stored_csv), by = key,
                suffixes = c("", "_stored"))
  if (nrow(both) == 0L) return(invisible())
  worse <- both$ratio > 1.2 * both$ratio_stored + 0.02 |
    both$pairs_share > 1.2 * both$pairs_share_stored + 1e-3
  both$mark <- ifelse(!is.na(worse) & worse, "REGRESSION", "")
  cat("\nAgainst the stored rows (commit", both$commit_stored[1], "):\n")
  print(both[, c(key, "ratio", "ratio_stored", "pairs_share", "pairs_share_stored", "mark")],
        row.names = FALSE, digits = 3)
  invisible(both)
}
