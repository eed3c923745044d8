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

/* The variant of a fit that the FMA kernels take (their template argument
 * A): kFitFixed, a fixed bandwidth, with the Gaussian at d >= 3 in the
 * expanded form (aux = log2 w - |x|^2 / 2 in storage, a pair's level aux +
 * q.x); kFitAdaptive, a row of per-point 1 / lambda^2 after aux and the
 * difference form; kFitPlain, a fixed bandwidth with the difference form
 * for every kernel, for a fit whose points span too many bandwidths for the
 * expanded form's rounding within the tolerance (model.cu, expanded_rounding). */
enum { kFitFixed = 0, kFitAdaptive = 1, kFitPlain = 2, kFitTight = 3 };
/* kFitTight is not a fit's but a tile's variant: a warp's share of a tight
 * tile of an anchored difference-form fit (tight_tile.cuh),
 * in the expanded form relative to the tile's anchor, aux = log2 w - wref -
 * |x|^2 / 2 rewritten in shared memory. */

/* Rows of a storage tile after aux: the adaptive fit's scales. */
__host__ __device__ constexpr int scale_rows(int A) { return A == kFitAdaptive ? 1 : 0; }

/* Whether a kernel of variant A at dimension d takes the expanded form. */
__host__ __device__ constexpr bool expanded_form(int kernel, int d, int A)
{
  return kernel == KDE_GAUSSIAN && ((d >= 3 && A == kFitFixed) || A == kFitTight);
}

/* Whether the FMA kernels hold the queries times 1/sqrt(2) (kernel_small.cuh):
 * the Gaussian's difference form in a fixed-bandwidth fit, whose pair value
 * log2 w - s2 / 2 is then aux - sum_k u_k^2 with u_k = q_k / sqrt2 - x_k /
 * sqrt2 formed by one FMA, without the multiply by -1/2 (one instruction a
 * pair fewer: +4-12% single, d = 1..3). An adaptive fit scales s2 per point
 * and keeps -s2 / 2. */
__host__ __device__ constexpr bool halved_difference(int kernel, int d, int A)
{
  return kernel == KDE_GAUSSIAN && !expanded_form(kernel, d, A) && A != kFitAdaptive;
}

/* 1/sqrt(2) rounded to T. In float its square is 1/2 (1 - 3.4e-8), so a
 * halved-difference exponent is off by 3.4e-8 of itself, below the
 * rounding of the coordinates that form it (6e-8 of each). */
template <typename T> __host__ __device__ constexpr T inv_sqrt2()
{
  return (T) 0.70710678118654752440;
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_KERNEL_FACTS_CUH */
