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

# Writes a benchmark's results to `out_csv` with what every stored result
# names besides its device: the date, the commit, R's and kdegpu's versions.
write_bench_csv <- function(results, out_csv) {
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
