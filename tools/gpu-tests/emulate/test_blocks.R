# The CUDA blocks of tests/testthat/test-derivatives.R without a GPU: every
# derivative sum of a "cuda" fit comes from tools/gpu-tests/emulate/sums.cpp (the
# real device code of the derivative sums, run on the host: storage, order,
# plan, kernels, shards, splits, merge), the rest of the package from its
# CPU build. Prints each failed expectation with its numbers.
#
#   R_LIBS=/tmp/lib-gpuderiv-cpu Rscript tools/gpu-tests/emulate/test_blocks.R [pattern]
#
# A fit asked for with backend = "cuda" is the CPU fit marked "cuda" with
# the asked precision; its densities come from the CPU (the GPU's density
# is not emulated), its derivative sums from the emulator, as
# derivatives.cu would compute them: the storage (plain, or the copy packed
# for the tensor-core layouts: the single-precision Gaussian at d = 3 and d
# >= 16), pruning at d <= 8 on a spatially ordered fit, one split per
# shard (H100 sizes give one at these n), and under a small
# options(kdegpu.gpu_memory) shards of 5 units and 2 splits.
suppressPackageStartupMessages({
  library(kdegpu)
  library(testthat)
})
args <- commandArgs(trailingOnly = TRUE)
pattern <- if (length(args)) args[[1L]] else "^CUDA:"
here <- "tools/gpu-tests/emulate"
build <- file.path(here, "build", "sums")
status <- system2("bash", c(file.path(here, "run.sh"), "sums", "--build-only"))
if (status != 0L || !file.exists(build)) stop("building the emulator failed")

kernel_code <- function(kernel) {
  match(kernel, c("gaussian", "epanechnikov", "rectangular", "triangular", "biweight",
                  "cosine", "optcosine", "exponential")) - 1L
}

emulated_sums <- function(object, zq, second = FALSE, tolerance = NULL) {
  d <- object$d
  m <- nrow(zq)
  single <- object$precision == "single"
  gaussian <- object$kernel == "gaussian"
  tc_layout <- single && gaussian && (d == 3L || d >= 16L)
  expanded <- if (tc_layout) gaussian && !second else gaussian && d >= 3L
  compact <- !object$kernel %in% c("gaussian", "exponential")
  tol <- kdegpu:::resolve_tolerance(tolerance, object)
  prune <- object$tile_size > 0L && d <= 8L && (compact || tol > 0)
  small <- !is.null(getOption("kdegpu.gpu_memory")) && getOption("kdegpu.gpu_memory") < 1e6
  inp <- tempfile()
  out <- tempfile()
  on.exit(unlink(c(inp, out)))
  con <- file(inp, "wb")
  writeBin(as.double(c(kernel_code(object$kernel), d, object$n, m, single, second, expanded,
                       prune, tol, if (small) 2 else 1, if (small) 5 else 0)), con)
  writeBin(as.double(object$z), con)
  writeBin(as.double(log(object$tile_weights)), con)
  writeBin(as.double(zq), con)
  close(con)
  if (system2(build, c(inp, out)) != 0L) stop("the emulator failed")
  con <- file(out, "rb")
  on.exit(close(con), add = TRUE, after = FALSE)
  res <- list(log_scale = readBin(con, "double", m), s0 = readBin(con, "double", m),
              k1sum = readBin(con, "double", m),
              first = matrix(readBin(con, "double", m * d), m, d),
              second = if (second) array(readBin(con, "double", m * d * d), c(m, d, d)))
  res
}

original_sums <- kdegpu:::derivative_sums
original_density <- kdegpu:::evaluate_log_density
patched_sums <- function(object, zq, second = FALSE, tolerance = NULL) {
  if (identical(object$backend, "cuda")) return(emulated_sums(object, zq, second, tolerance))
  original_sums(object, zq, second, tolerance)
}
patched_density <- function(object, ...) {
  if (identical(object$backend, "cuda")) object$backend <- "cpu"
  original_density(object, ...)
}
environment(patched_sums) <- asNamespace("kdegpu")
environment(patched_density) <- asNamespace("kdegpu")
assignInNamespace("derivative_sums", patched_sums, "kdegpu")
assignInNamespace("evaluate_log_density", patched_density, "kdegpu")

# kde_gpu(backend = "cuda"): the CPU fit marked as a CUDA fit; with debias,
# the score of the marked fit (emulated), as kde_gpu() computes it
emulated_kde_gpu <- function(x, ..., debias = FALSE, backend = "cpu", precision = "double") {
  if (backend != "cuda") return(kdegpu::kde_gpu(x, ..., debias = debias, backend = backend))
  mark <- function(fit) {
    fit$backend <- "cuda"
    fit$precision <- precision
    fit
  }
  fit <- mark(kdegpu::kde_gpu(x, ..., backend = "cpu"))
  if (!debias) return(fit)
  x <- as.matrix(x)
  score <- kdegpu:::evaluate_derivative(fit, x, "gradient", log = TRUE)
  mark(kdegpu::kde_gpu(x + (score %*% fit$H) / 2, ..., backend = "cpu"))
}

env <- new.env(parent = globalenv())
for (f in c("helper-reference.R", "helper-backends.R", "helper-derivatives.R")) {
  sys.source(file.path("tests/testthat", f), envir = env)
}
env$skip_without_gpu <- function() invisible()
env$kde_gpu <- emulated_kde_gpu
exprs <- parse("tests/testthat/test-derivatives.R", keep.source = FALSE)
is_test <- vapply(exprs, function(e) is.call(e) && identical(e[[1L]], as.name("test_that")), NA)
for (e in exprs[!is_test]) eval(e, env)
tests <- exprs[is_test]
desc <- vapply(tests, function(e) as.character(e[[2L]]), "")
chosen <- grepl(pattern, desc)
cat(sprintf("%d test blocks match '%s'\n", sum(chosen), pattern))
failed <- 0L
for (i in which(chosen)) {
  t0 <- Sys.time()
  reporter <- testthat::ListReporter$new()
  testthat::with_reporter(reporter, {
    eval(call("test_that", desc[[i]], tests[[i]][[3L]]), new.env(parent = env))
  })
  res <- reporter
  results <- as.data.frame(res$get_results())
  bad <- results$failed + results$error
  cat(sprintf("%-95s %s (%d expectations, %.0f s)\n", substr(desc[[i]], 1, 95),
              if (sum(bad) > 0) "FAILED" else "ok", sum(results$nb),
              as.numeric(Sys.time() - t0, units = "secs")))
  for (r in res$get_results()) {
    for (x in r$results) {
      if (inherits(x, c("expectation_failure", "expectation_error"))) {
        failed <- failed + 1L
        cat("   ", gsub("\n", "\n    ", conditionMessage(x)), "\n")
      }
    }
  }
}
cat(sprintf("emulated CUDA test blocks: %d failed expectations\n", failed))
