/*
 * kernel_facts.cuh: what the CUDA backend needs to know of a kernel beyond
 * kernels.h's profiles: whether its terms are summed as logs (log-sum-exp)
 * or as they are (compact kernels), and the scale of its coordinates.
 */
#ifndef KDEGPU_CUDA_KERNEL_FACTS_CUH
#define KDEGPU_CUDA_KERNEL_FACTS_CUH

#include <math.h>

#include "kdegpu/kernels.h"
#include "numeric.cuh"

namespace kdegpu {

/* Whether a kernel's terms are summed as logs (log-sum-exp: the kernels of
 * unbounded support), not as they are (compact kernels): the negation of
 * kde_kernel_is_compact(), as a constant expression for template arguments
 * and the one place the backend asks; kde_cuda_model_create() checks that
 * the two agree for every kernel. */
__host__ __device__ constexpr bool kernel_sums_logs(int kernel)
{
  return kernel == KDE_GAUSSIAN || kernel == KDE_EXPONENTIAL;
}

/* Scale applied to centred coordinates (see kernels.h for the profiles). */
inline double coordinate_scale(int kernel)
{
  switch (kernel) {
  /* log_profile(s2') = -s2'/2 = log2 k(s2) = -log2(e) s2 / 2 */
  case KDE_GAUSSIAN: return sqrt(kLog2e);
  /* log_profile(s2') = -sqrt(s2') = log2 k(s2) = -log2(e) sqrt(s2) */
  case KDE_EXPONENTIAL: return kLog2e;
  default: return 1.0; /* compact kernels: the linear profile, unscaled */
  }
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_KERNEL_FACTS_CUH */
