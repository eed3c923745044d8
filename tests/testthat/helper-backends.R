# The backends that the evaluation suite (test-evaluation.R) runs each of
# its reference checks on: the CPU always; the CUDA backend in double and in
# single precision where a GPU is usable. `tol` is the relative tolerance on
# log densities that fits the precision (see expect_log_density_equal()):
# double precision agrees with the plain-R reference to about 1e-12, single
# precision to about 1e-5.
eval_backends <- function() {
  out <- list(list(backend = "cpu", precision = "double", tol = 1e-12))
  if (has_gpu()) {
    out <- c(out, list(list(backend = "cuda", precision = "double", tol = 1e-12),
                       list(backend = "cuda", precision = "single", tol = 1e-5)))
  }
  lapply(out, function(be) c(be, name = paste(be$backend, be$precision)))
}

# kde_gpu() on the backend `be` (one of eval_backends()).
kde_on <- function(be, x, ...) {
  kde_gpu(x, ..., backend = be$backend, precision = be$precision)
}

# A label for expectations: the backend, then the case.
be_label <- function(be, ...) paste(be$name, ...)

skip_without_gpu <- function() {
  skip_if_not(has_gpu(), "no usable GPU")
}

# options(kdegpu.devices) for the several-device code: every GPU, or with
# one GPU two replicas on it (which run the same code).
several_gpus <- function() {
  n_gpus <- nrow(kdegpu_info()$gpus)
  if (n_gpus >= 2) seq_len(n_gpus) - 1L else c(0L, 0L)
}

# The whole suite under a small GPU memory budget or on several replicas
# (tools/gpu-session.sh's step "constrained"): KDEGPU_TEST_GPU_MEMORY (bytes)
# and KDEGPU_TEST_DEVICES (e.g. "0,0") set the options for every test; a
# test that sets them itself overrides them.
local({
  budget <- Sys.getenv("KDEGPU_TEST_GPU_MEMORY")
  if (nzchar(budget)) options(kdegpu.gpu_memory = as.numeric(budget))
  devices <- Sys.getenv("KDEGPU_TEST_DEVICES")
  if (nzchar(devices)) options(kdegpu.devices = as.integer(strsplit(devices, ",")[[1L]]))
  if (nzchar(budget) || nzchar(devices)) {
    message(sprintf("kdegpu tests under kdegpu.gpu_memory = %s, kdegpu.devices = %s",
                    format(getOption("kdegpu.gpu_memory")),
                    paste(getOption("kdegpu.devices"), collapse = ",")))
  }
})

# The GPU sums an evaluation of fewer than 1e9 pairs without a plan, which
# then costs more than it saves (src/cuda/tuning.cuh, kPlanMinPairs). The
# suite's fits are small and its pruning tests are about the plan, so it
# plans every evaluation (test-shapes.R checks the default).
Sys.setenv(KDEGPU_PLAN_MIN_PAIRS = "0")
