/*
 * kernels.cuh: what the host code and the kernels share: the kernels'
 * argument structs and pointer types, and the selector that each kernel
 * family's translation unit exports. Below, the CUDA backend as a whole.
 *
 * The CUDA backend (its C interface: ../kde_cuda.h). What one evaluation
 * computes, per query q_i (see kde_backend.h):
 *   out_i = log_const + log sum_j w_j k(|q_i - x_j|^2).
 *
 * Where things are (src/cuda/)
 * ----------------------------
 * Four kernel families, in seven translation units; each exports a selector
 * (declared here) that hands out its instantiation for a runtime (kernel,
 * d), and evaluate_step.cu's select_kernel() is the one place that picks:
 *   kernel_small.cu     kde_small_kernel: FMA, d = 1..4, any kernel, float
 *                       or double; queries in registers (the template in
 *                       kernel_small.cuh)
 *   kernel_wide.cu      kde_wide_kernel: FMA, d >= 5, any kernel, float or
 *                       double; 4-query x 8-point register blocks
 *                       (kernel_wide.cuh)
 *   kernel_adaptive.cu  the two FMA families for adaptive (sample-point)
 *                       fits: a per-point 1 / lambda^2 row in the tiles
 *   kernel_plain.cu     the two FMA families for the Gaussian at d >= 3 in
 *                       the difference form (a fit the expanded form would
 *                       round too much for: model.cu)
 *   kernel_discrete.cu  the small FMA kernel for mixed data: the Gaussian
 *                       in the difference form times discrete factors
 *   kernel_tc_small.cu  kde_tc_small_kernel: tensor cores (bfloat16), the
 *                       single-precision Gaussian at d = 3
 *   kernel_tc_wide.cu   kde_tc_wide_kernel: tensor cores (3xFP16), the
 *                       single-precision Gaussian at d >= 16
 * Their device helpers, header-inline (no relocatable device code):
 *   tuning.cuh          the tuning constants, each with its reason
 *   numeric.cuh         bit casts, fp16/bfloat16 splits, exp2s, tree sums
 *   kernel_facts.cuh    whether a kernel sums logs; its coordinate scale
 *   layout.cuh          how points and queries are stored on the device
 *   tile_copy.cuh       cp.async tile copies, vector loads
 *   accumulate.cuh      lazy-max sums, the per-block partial states
 * The rest:
 *   pack.cu             the query packing kernel; the host training packers
 *   merge.cu            merging the splits' partial states; finishing
 *   model.cu, .cuh      the model: devices, replicas, buffers, lifetime
 *   evaluate.cu         an evaluation: the multi-GPU loop, the host merge
 *   evaluate_step.cu    one device's share (evaluate_job.cuh): kernel
 *                       choice, launch shape, batches and shards, its steps
 *   order.cu, plan.cu,  a pruned evaluation's queries in a spatial (Hilbert)
 *   plan.cuh            order and each batch's plan (prune.c's decision,
 *                       made on the device): the visit lists below
 *   plan_gate.cu        whether a plan can pay (the pairs, the fit's
 *                       groups, the query blocks' boxes)
 *   sample.cu           draws from the estimate (its own kernel)
 *   kde_cuda_common.h   the memory budget; error reporting (KDE_CUDA_TRY)
 *   tuning_hooks.h      what the harness (tools/gpu-tests/harness) sets and reads
 *
 * Adaptive fits (per-point scales lambda_j, kde_backend.h's inv_scale2):
 * the storage tiles get a row of 1 / lambda_j^2 after aux (the model's
 * `adaptive`), the FMA kernels multiply each pair's s^2 by it in the
 * difference form, and the tensor-core layouts are not used.
 *
 * Design
 * ------
 * * Training points stream through shared memory in tiles, and each query
 *   carries an online log-sum-exp state (max, sum): nothing of size n_query
 *   x n_train is ever stored. The families differ in how a tile's pairs are
 *   computed. FMA kernels: every thread keeps 4 queries in registers (d <=
 *   4) or a 4 x 8 block of query-point products (d >= 5), so one
 *   shared-memory load serves many pairs. Tensor-core kernels: mma.sync
 *   computes the products of a warp's 32 queries with each point.
 * * Exponents are kept in log2 units: coordinates are scaled once on upload so
 *   that one exp2 per pair remains (MUFU.EX2 in single precision), and
 *   log(2) converts back on the host.
 * * Gaussian, d >= 3: |q - x|^2 = |q|^2 + |x|^2 - 2 q.x, so a pair costs d
 *   FMAs. Both sets are centred on the training mean first, which keeps the
 *   magnitudes, and so the cancellation, small; a fit whose points lie too
 *   many bandwidths from that mean for the precision and the tolerance
 *   (model.cu, expanded_rounding) takes the difference form instead. Every other
 *   kernel, and the Gaussian for d <= 2, uses the difference form.
 * * The difference form at d <= 4 (model.cuh's `anchored`): points are
 *   stored relative to the anchor of their run of kAnchorPoints (a warp's
 *   quarter of a unit) and queries as hi + lo parts; per run a query
 *   becomes (hi - anchor hi) + (lo - anchor lo), so each rounding is
 *   relative to a distance from the run, not to the data's extent
 *   (pack.cu).
 * * The running max is lazy: each term is added as exp2(value - max) and a
 *   group of 8 (4 in double) training points is checked once per query; only
 *   when the group's sum passes 2^32 (a term far above the reference, or the
 *   first group) is the max raised to the group's maximum plus 16 and the group
 *   summed again. No per-pair branch, no per-pair max. For d <= 4 the check
 *   of a group is resolved after the next group's FMAs are issued
 *   (software pipelining by one group); in the single-precision difference
 *   form at d <= 2 the group's exp2s are issued between those FMAs, so that
 *   neither pipe waits for the other (kernel_small.cuh, interleaved_exps).
 * * Double precision uses its own branch-free exp2 (fast_exp2(double)).
 * * Gaussian in single precision with d >= 16: the dot products q.x run on
 *   the tensor cores as 3xFP16 (each operand split into an fp16 "big" and
 *   "small" part, three mma.sync per product), which keeps about 22 bits of
 *   each operand, then the same exp2 epilogue. At d = 3 one bfloat16 MMA
 *   gives a pair's whole exponent (kde_tc_small_kernel). Devices before
 *   sm_80 take the FMA kernels, and so, at d >= 16, do training points
 *   beyond fp16's range and blocks beyond the device's shared memory.
 * * Few queries and many training points: the training range is split across
 *   blockIdx.y; every block writes a partial (max, sum) per query and a second
 *   kernel merges them with kde_lse_merge_2 (kernels.h). The same merge
 *   combines training shards (a model whose training set does not fit the
 *   memory budget streams it from a host copy), query batches and devices.
 * * Queries travel as R holds them (double, column-major) and a packing
 *   kernel whitens, centres, scales and lays them out on the device, so the
 *   host does no per-query work; the next batch's upload overlaps the
 *   current batch's kernels. Scratch buffers stay allocated between calls
 *   when small (a short evaluation allocates nothing).
 * * Memory: queries are processed in batches sized from the per-device budget.
 * * Several devices: each holds a replica; queries are split across devices,
 *   or, when there are few queries, the training range is, and the host merges
 *   the per-device states. Each device has a host thread that enqueues its
 *   steps (a query batch against one training shard) and waits for them;
 *   R's thread polls for an interrupt meanwhile.
 * * Errors: every runtime call and launch goes through KDE_CUDA_TRY, which
 *   records the call, the error and file:line into kde_status and jumps to the
 *   function's single cleanup label. Nothing prints, exits or throws.
 */

#ifndef KDEGPU_CUDA_KERNELS_CUH
#define KDEGPU_CUDA_KERNELS_CUH

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#include <type_traits>

#include "kdegpu/kernels.h"
#include "numeric.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* The arguments of a main kernel launch: a query batch against a range of
 * the training set (the same struct for all four families). */
template <typename T>
struct kde_args {
  const T *train;        /* tiled layout, first point of this range */
  int64_t n_points;      /* points in the range, a multiple of kUnit */
  int64_t split_points;  /* points per blockIdx.y, a multiple of kUnit */
  const T *query;        /* packed: column-major, ldq rows (zero padded), or
                            a tensor-core layout */
  int64_t ldq;           /* a multiple of kBlockQueries */
  int64_t n_query;       /* valid rows */
  T *part_max;           /* [gridDim.y][ldq] */
  T *part_sum;
  int dim;
  int chunk_dims;        /* wide kernel: dimensions per shared chunk */
  int n_chunks;
  int leave_one_out;
  int64_t query_base;    /* global index of query row 0 (leave one out) */
  int64_t train_base;    /* global index of training point 0 */
  int64_t tile_elems;    /* values per 32-point storage tile */
  int k16;               /* wide tensor-core kernel: dimensions / 16, rounded up */
  /* Pruning (small-d kernels): the training units (global indices,
   * ascending) that query block blockIdx.x visits are
   * visit[visit_offset[bx] .. visit_offset[bx + 1]); NULL: every unit. */
  const int32_t *visit;
  const int64_t *visit_offset;
  /* The groups of 32 of the block's queries (bit g: rows 32 g ..) that the
   * small-d kernel evaluates each listed unit for; NULL: all of them. */
  const uint8_t *visit_groups;
  /* An anchored model (model.cuh): the anchor (hi, lo) of every run of
   * kAnchorPoints points, by global position / kAnchorPoints; the queries'
   * lo parts are rows dim .. 2 dim - 1 of `query`.
   * NULL: coordinates as they are. */
  const T *anchor;
  /* An anchored difference-form fit: a warp's quarter of a tile whose points
   * lie within this squared radius of its anchor takes the expanded form
   * (tight_tile.cuh); 0: none does. */
  float tight_radius2;
  /* Mixed data (kernel_discrete.cu; 0 columns otherwise): the queries'
   * codes are rows code_row .. code_row + n_discrete - 1 of `query`, the
   * points' the rows after aux in the tiles; a pair whose codes in column k
   * differ by delta != 0 adds mismatch[k] + per_level[k] |delta| (log2). */
  int n_discrete;
  int64_t code_row;
  T mismatch[kMaxDiscrete], per_level[kMaxDiscrete];
};

template <typename T> using kde_kernel_fn = void (*)(kde_args<T>);

/* The query packing kernel's arguments: a batch of raw queries (double,
 * column-major [dim][ldr], as R holds them) becomes the main kernels'
 * layout, whitened on the way when `transform` is given. */
template <typename T>
struct kde_pack_args {
  const double *raw;
  int64_t ldr;
  int64_t rows;             /* valid rows; rows up to ldq are zero padding */
  int64_t ldq;
  int dim;
  int k16;                  /* wide tensor-core layout: dimensions / 16, rounded up */
  const double *center;     /* whitening: z = (raw - center) transform */
  const double *transform;  /* dim x dim, column-major; NULL: raw is z */
  const double *raw_lo;     /* NULL, or z's lo parts (ld ldr): no transform */
  const double *model_center;
  double scale;             /* packed value = (z - model_center) scale */
  T *dst;
  int anchored;             /* also the lo parts, in rows dim .. 2 dim - 1 */
  int n_discrete;           /* mixed data: raw rows dim .. dim + n_discrete - 1
                               are codes, copied to rows code_row .. */
  int64_t code_row;
  double *offset;           /* [rows]: |packed row|^2 / 2 (expanded form) */
};

template <typename T> using kde_pack_fn = void (*)(kde_pack_args<T>);
/* The parameters of kde_merge_kernel and kde_finish_kernel (merge.cu). */
template <typename T>
using kde_merge_fn = void (*)(const T *, const T *, int64_t, int, int64_t, double *,
                              double *, int, int);
using kde_finish_fn = void (*)(const double *, const double *, double *, int64_t, double,
                               int);

/* The end of an evaluation on the device, as the host does it when devices
 * split the training set: out = log_const + log(2) (log2 sum - |q|^2 / 2).
 * The kernel writes over `offset`. */
__host__ __device__ inline double finish_log_density(kde_lse_2 state, double offset,
                                                     int expanded, double log_const)
{
  double log2_sum = kde_lse_log_2(state);
  if (expanded) log2_sum -= offset; /* -inf stays -inf */
  return log_const + kLn2 * log2_sum;
}

/* Shared memory of kde_tc_wide_kernel: the block's query fragments and two
 * storage tiles. */
inline size_t tc_wide_smem_bytes(int64_t k16)
{
  return (size_t) (kWarps * 2 * k16 * 256 + 2 * (k16 * 512 + kTileWidth)) * sizeof(float);
}

/* f(std::integral_constant<int, kernel>()): a runtime kernel code as the
 * compile-time constant that the kernel templates take. */
template <typename F> auto dispatch_kernel(int kernel, F &&f)
{
  switch (kernel) {
  case KDE_EPANECHNIKOV: return f(std::integral_constant<int, KDE_EPANECHNIKOV>());
  case KDE_RECTANGULAR:  return f(std::integral_constant<int, KDE_RECTANGULAR>());
  case KDE_TRIANGULAR:   return f(std::integral_constant<int, KDE_TRIANGULAR>());
  case KDE_BIWEIGHT:     return f(std::integral_constant<int, KDE_BIWEIGHT>());
  case KDE_COSINE:       return f(std::integral_constant<int, KDE_COSINE>());
  case KDE_OPTCOSINE:    return f(std::integral_constant<int, KDE_OPTCOSINE>());
  case KDE_EXPONENTIAL:  return f(std::integral_constant<int, KDE_EXPONENTIAL>());
  default:               return f(std::integral_constant<int, KDE_GAUSSIAN>());
  }
}

/* The selectors: each kernel family's translation unit instantiates its
 * kernels and hands out the one for a runtime (kernel, d), so that no other
 * file instantiates a kernel template. */
/* kde_small_kernel (kernel_small.cu) for d = dim in 1..4; NULL otherwise. */
template <typename T> kde_kernel_fn<T> select_small_kernel(int kernel, int dim);
/* kde_wide_kernel (kernel_wide.cu), any d. */
template <typename T> kde_kernel_fn<T> select_wide_kernel(int kernel);
/* The same two for adaptive models (kernel_adaptive.cu). */
template <typename T> kde_kernel_fn<T> select_small_adaptive_kernel(int kernel, int dim);
template <typename T> kde_kernel_fn<T> select_wide_adaptive_kernel(int kernel);
/* The Gaussian in the difference form at d >= 3 (kernel_plain.cu). */
template <typename T> kde_kernel_fn<T> select_plain_gaussian_kernel(int dim);
/* The Gaussian with discrete columns (kernel_discrete.cu), d = dim in
 * 1..4 and 1..kMaxDiscrete of them; NULL otherwise. */
template <typename T> kde_kernel_fn<T> select_discrete_kernel(int dim, int n_discrete);
/* kde_tc_small_kernel (kernel_tc_small.cu): the Gaussian at d = kTcSmallDim. */
kde_kernel_fn<float> select_tc_small_kernel();
/* kde_tc_wide_kernel (kernel_tc_wide.cu): the Gaussian at d >= kTcWideMinDim. */
kde_kernel_fn<float> select_tc_wide_kernel();
/* kde_pack_kernel (pack.cu) for a storage layout (enum kde_layout). */
template <typename T> kde_pack_fn<T> select_pack_kernel(int layout);
/* kde_merge_kernel and kde_finish_kernel (merge.cu). */
template <typename T> kde_merge_fn<T> select_merge_kernel();
kde_finish_fn select_finish_kernel();

} // namespace kdegpu

#endif /* KDEGPU_CUDA_KERNELS_CUH */
