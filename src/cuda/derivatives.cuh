/*
 * derivatives.cuh: the fused kernel-derivative sums on the device (the
 * contract: ../derivatives.h): the kernels' arguments, the fields they
 * write and their selector. The kernels: derivatives_kernels.cuh
 * (instantiated by derivatives_single.cu and derivatives_double.cu); the
 * host side: derivatives.cu.
 *
 * One thread per query, 128 queries a block (a pruning plan's query block),
 * the training points streamed through shared memory in chunks read from
 * the fit's storage tiles (layout.cuh's KDE_LAYOUT_PLAIN: 32-point tiles of
 * dim coordinates and aux) and stored point-major, so that one point is a
 * few 16-byte broadcast loads. Per pair: v = x - q, t = |v|^2 in the
 * storage coordinates (centred on the model's mean, times its coordinate
 * scale), then
 *   Gaussian, exponential: the term's log2 aux + log2 k(t) against the
 *     query's running maximum M (exact: raised when a group of points holds
 *     a larger one, everything so far rescaled), one exp2;
 *   compact kernels: on the linear scale (aux = w), M the largest w k.
 * The sums are two-level (a chunk's, then the total) so that float's
 * rounding grows with chunks, not points. Each block writes, per query,
 * the fields below relative to 2^M for its split of the training range;
 * derivatives.cu merges splits and shards in double. d = 1..4 have their
 * own instantiations, larger d the next of 8, 16, 32 (gradients) or 8
 * (Hessians), accumulators in registers; beyond, a generic kernel sums
 * into global memory.
 */
#ifndef KDEGPU_CUDA_DERIVATIVES_CUH
#define KDEGPU_CUDA_DERIVATIVES_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kde_limits.h"
#include "model.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* The fields of a query's state, in this order: log2 of the scale M, s0,
 * k1sum, first (dim), then second's upper triangle (entry (c, b), c <= b,
 * at b (b + 1) / 2 + c), all but M relative to 2^M. */
constexpr int kFieldMax = 0, kFieldS0 = 1, kFieldK1 = 2, kFieldFirst = 3;
__host__ __device__ inline int deriv_fields(int dim, bool second)
{
  return 3 + dim + (second ? dim * (dim + 1) / 2 : 0);
}

template <typename T>
struct deriv_args {
  const T *train;             /* storage tiles, the shard's first point */
  int64_t n_points;           /* points of the shard, a multiple of kUnit */
  int64_t split_points;       /* points per blockIdx.y, a multiple of kUnit */
  int64_t train_base;         /* global index of the shard's first point */
  const double *query;        /* whitened rows, column-major (ld ldz) */
  const double *query_lo;     /* NULL, or their lo parts (model.cuh's residual) */
  int64_t ldz;
  int64_t n_query;
  const double *center;       /* dim: the model's centre, on the device */
  int dim;
  int expanded;               /* aux holds log2 w - |x|^2 / 2: add it back */
  const T *anchor;            /* by global run of kAnchorPoints: points are stored relative to
                                 these (model.cuh); NULL: as they are */
  T *part;                    /* [gridDim.y][fields][ldq] */
  int64_t ldq;                /* a multiple of kThreads */
  int fields;
  /* Pruning: query block bx visits units visit[visit_offset[bx] ..
   * visit_offset[bx + 1]) (global, ascending); NULL: every unit. */
  const int32_t *visit;
  const int64_t *visit_offset;
};

template <typename T> using deriv_kernel_fn = void (*)(deriv_args<T>);

/* Values per point record in shared memory: coordinates, aux, padding to
 * whole 16-byte loads. */
template <typename T> __host__ __device__ constexpr int deriv_record(int dim)
{
  return (dim + 1 + 16 / (int) sizeof(T) - 1) / (16 / (int) sizeof(T)) * (16 / (int) sizeof(T));
}
/* Points per shared chunk: a unit for small d, fewer for wide records. */
__host__ __device__ constexpr int deriv_chunk(int max_dim)
{
  return max_dim == 0 ? kTileWidth : max_dim <= 16 ? kUnit : 2 * kTileWidth;
}
/* The register-resident instantiations serve d <= this for gradients and
 * d <= kDerivMaxSecondDim with Hessians; beyond, the generic kernel. */
constexpr int kDerivMaxFirstDim = 32;
constexpr int kDerivMaxSecondDim = 8;
/* The generic kernel keeps the queries in shared memory: d up to this. */
constexpr int kDerivMaxDim = KDE_CUDA_DERIVATIVE_MAX_DIM;

/* The instantiation of (kernel, dim, second) in precision T and its
 * dynamic shared memory (derivatives_kernels.cuh, instantiated by
 * derivatives_single.cu and derivatives_double.cu); NULL for the
 * rectangular kernel (no derivative) or dim > kDerivMaxDim. `plain`: the
 * Gaussian's gradient in the difference form, not the expanded one. */
template <typename T>
deriv_kernel_fn<T> select_deriv_kernel(int kernel, int dim, bool second, bool plain,
                                       size_t *smem);

/* acc = merge(acc (unless first), every split's partial state), field by
 * field, in double: M the largest of their maxima, each sum rescaled to it. */
template <typename T>
__global__ void kde_deriv_merge_kernel(const T *__restrict__ part, int splits, int fields,
                                       int64_t ldq, int64_t rows, double *acc, int64_t lda,
                                       int first)
{
  const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  const double old = first ? -INFINITY : acc[i];
  double top = old;
  for (int s = 0; s < splits; s++)
    top = fmax(top, (double) part[(int64_t) s * fields * ldq + i]);
  acc[i] = top;
  for (int f = 1; f < fields; f++) {
    double sum = 0;
    if (top > -INFINITY) {
      if (old > -INFINITY) sum = acc[f * lda + i] * exp2(old - top);
      for (int s = 0; s < splits; s++) {
        const T *p = part + (int64_t) s * fields * ldq + i;
        const double m = (double) p[0];
        if (m > -INFINITY) sum += (double) p[(int64_t) f * ldq] * exp2(m - top);
      }
    }
    acc[f * lda + i] = sum;
  }
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_DERIVATIVES_CUH */

