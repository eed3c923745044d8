/*
 * kernel_facts.cuh: what the CUDA backend needs to know of a kernel beyond
 * kernels.h's profiles: whether its terms are summed as logs (log-sum-exp)
 * or as they are (compact kernels). (The scale of its coordinates is
 * kernels.h's kde_log2_coordinate_scale.)
 */
#ifndef KDEGPU_CUDA_KERNEL_FACTS_CUH
#define KDEGPU_CUDA_KERNEL_FACTS_CUH

#include <math.h>

#include "kdegpu/kernels.h"
#include "numeric.cuh"

namespace kdegpu {

/* Whether a kernel's terms are summed as logs (log-sum-exp: the kernels of
 * unbounded support), not as they are (compact kernels): kernels.h's
 * kde_kernel_is_compact(), negated, as a constant expression for template
 * arguments. */
__host__ __device__ constexpr bool kernel_sums_logs(int kernel)
{
  return !kde_kernel_is_compact(kernel);
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_KERNEL_FACTS_CUH */
