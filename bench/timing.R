# Shared by the benchmark scripts (source("bench/timing.R") from the
# repository root): median seconds per call of f() after a warm-up. Short
# calls are repeated inside each timing so that it spans at least 0.2 s,
# since system.time() resolves 1 ms.
median_seconds <- function(f, reps = 5L) {
  first <- system.time(f())[["elapsed"]] # warm-up
  inner <- if (first < 0.05) ceiling(0.2 / max(first, 1e-3)) else 1L
  median(vapply(seq_len(reps), function(i) {
    system.time(for (k in seq_len(inner)) f())[["elapsed"]] / inner
  }, 0))
}
