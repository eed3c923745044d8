/* Registration of every .Call entry point, and nothing else but the fork
 * handler's installation. Each is registered under its C function's name,
 * and R calls .Call(C_<name>, ...) (useDynLib(.fixes = "C_")). */
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

#include "api.h"
#include "threads.h"

/* Through void (*)(void), the one function type that casts to any other
 * without -Wcast-function-type complaining. */
#define CALLDEF(name, n) {#name, (DL_FUNC) (void (*)(void)) &name, n}

static const R_CallMethodDef call_methods[] = {
  CALLDEF(kdegpu_log_density_cpu, 13),
  CALLDEF(kdegpu_cpu_model_create, 11),
  CALLDEF(kdegpu_cpu_model_valid, 1),
  CALLDEF(kdegpu_log_density_cpu_model, 9),
  CALLDEF(kdegpu_cdf, 12),
  CALLDEF(kdegpu_conditional_cdf, 11),
  CALLDEF(kdegpu_spatial_order, 2),
  CALLDEF(kdegpu_unit_spread, 4),
  CALLDEF(kdegpu_whiten_sort, 5),
  CALLDEF(kdegpu_weight_facts, 2),
  CALLDEF(kdegpu_weighted_centre, 3),
  CALLDEF(kdegpu_column_magnitudes, 2),
  CALLDEF(kdegpu_cpu_info, 1),
  CALLDEF(kdegpu_limits, 0),
  CALLDEF(kdegpu_threads_for_work, 2),
  CALLDEF(kdegpu_kernel_constants, 2),
  CALLDEF(kdegpu_kernel_profile, 2),
  CALLDEF(kdegpu_lse_rows, 1),
  CALLDEF(kdegpu_first_nonfinite, 2),
  CALLDEF(kdegpu_exp, 2),
  CALLDEF(kdegpu_whiten, 4),
  CALLDEF(kdegpu_whiten_exact, 4),
  CALLDEF(kdegpu_weighted_cov, 3),
  CALLDEF(kdegpu_weighted_spread, 2),
  CALLDEF(kdegpu_cuda_info, 0),
  CALLDEF(kdegpu_cuda_device_count, 0),
  CALLDEF(kdegpu_cuda_model_create, 15),
  CALLDEF(kdegpu_cuda_model_valid, 1),
  CALLDEF(kdegpu_cuda_model_release, 1),
  CALLDEF(kdegpu_log_density_cuda, 9),
  CALLDEF(kdegpu_standard_draws, 4),
  CALLDEF(kdegpu_sample_cuda, 10),
  CALLDEF(kdegpu_moments_cpu, 7),
  CALLDEF(kdegpu_moments_cuda, 9),
  CALLDEF(kdegpu_moment_index, 2),
  CALLDEF(kdegpu_derivative_sums_cpu, 11),
  CALLDEF(kdegpu_derivative_sums_cuda, 11),
  {NULL, NULL, 0}
};

void R_init_kdegpu(DllInfo *dll)
{
  R_registerRoutines(dll, NULL, call_methods, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  R_forceSymbols(dll, TRUE);
  kde_threads_install_fork_handler();
}
