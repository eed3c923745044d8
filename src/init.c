/* Registration of every .Call entry point, and nothing else. R calls them
 * as .Call(C_kde_<name>, ...) (useDynLib(.fixes = "C_")). */
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

#include "api.h"

#define CALLDEF(name, n) {"kde_" #name, (DL_FUNC) &kdegpu_##name, n}

static const R_CallMethodDef call_methods[] = {
  CALLDEF(log_density_cpu, 10),
  CALLDEF(cpu_info, 0),
  CALLDEF(kernel_constants, 2),
  CALLDEF(lse_rows, 1),
  CALLDEF(first_nonfinite, 1),
  CALLDEF(whiten, 4),
  CALLDEF(cuda_info, 0),
  CALLDEF(cuda_device_count, 0),
  CALLDEF(cuda_model_create, 6),
  CALLDEF(cuda_model_valid, 1),
  CALLDEF(cuda_model_release, 1),
  CALLDEF(log_density_cuda, 7),
  CALLDEF(sample_cuda, 9),
  {NULL, NULL, 0}
};

void R_init_kdegpu(DllInfo *dll)
{
  R_registerRoutines(dll, NULL, call_methods, NULL, NULL);
  R_useDynamicSymbols(dll, FALSE);
  R_forceSymbols(dll, TRUE);
}
