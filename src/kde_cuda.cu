/*
 * kde_cuda.cu: the CUDA backend (interface in kde_cuda.h).
 *
 * What one evaluation computes, per query q_i (see kde_backend.h):
 *   out_i = log_const + log sum_j w_j k(|q_i - x_j|^2).
 *
 * Design
 * ------
 * * One fused kernel family. Training points stream through shared memory in
 *   tiles; every thread keeps 4 queries in registers (or, for d >= 5, a 4 x 8
 *   block of query-train dot products), so one shared-memory load serves many
 *   pairs. Each query carries an online log-sum-exp state (max, sum); nothing
 *   of size n_query x n_train is ever stored.
 * * Exponents are kept in log2 units: coordinates are scaled once on upload so
 *   that one exp2 per pair remains (MUFU.EX2 in single precision), and
 *   log(2) converts back on the host.
 * * Gaussian, d >= 3: |q - x|^2 = |q|^2 + |x|^2 - 2 q.x, so a pair costs d
 *   FMAs. Both sets are centred on the training mean first, which keeps the
 *   magnitudes, and so the cancellation, small. Every other kernel, and the
 *   Gaussian for d <= 2, uses the difference form.
 * * The running max is lazy: each term is added as exp2(value - max) and a
 *   group of 8 (4 in double) training points is checked once per query; only
 *   when the group's sum passes 2^60 (a term far above the reference, or the
 *   first group) is the max raised to the group's maximum and the group
 *   summed again. No per-pair branch, no per-pair max. For d <= 4 the check
 *   of a group is resolved after the next group's FMAs are issued, so the
 *   exp2s drain while the FMA pipe works (software pipelining by one group).
 * * Double precision uses its own branch-free exp2 (fast_exp2(double)).
 * * Gaussian in single precision with d >= 16: the dot products q.x run on
 *   the tensor cores as 3xFP16 (each operand split into an fp16 "big" and
 *   "small" part, three mma.sync per product), which keeps about 22 bits of
 *   each operand, then the same exp2 epilogue. At d = 3 one bfloat16 MMA
 *   gives a pair's whole exponent (kde_tc_small_kernel).
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
 *   the per-device states. One host thread drives all devices: it enqueues one
 *   step (a query batch against one training shard) on each device, then
 *   waits for each, then polls for an interrupt.
 * * Errors: every runtime call and launch goes through KDE_CUDA_TRY, which
 *   records the call, the error and file:line into kde_status and jumps to the
 *   function's single cleanup label. Nothing prints, exits or throws.
 */
#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <type_traits>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "kde_cuda_common.h"

/* ------------------------------------------------------------------------ */
/* Tuning constants                                                          */
/* ------------------------------------------------------------------------ */

namespace {

/* 4 warps: enough to share one tile load, small enough that several blocks
 * fit an SM and hide each other's tile loads and barriers. */
constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
/* Queries per thread (register blocking) and per block (32 lanes x 4). Each
 * block's 4 warps take the same 128 queries and a quarter of each tile, so a
 * block serves as few as 128 queries at full width (the few-queries shape). */
constexpr int kQueriesPerThread = 4;
constexpr int kBlockQueries = 32 * kQueriesPerThread;
/* Storage tile: 32 points stored dimension-major, (d + 1) rows of 32 values,
 * the last row being the per-point constant ("aux"). Four consecutive points
 * of one row are one 16-byte load. */
constexpr int kTileWidth = 32;
/* Unit of padding, splitting and sharding: the training set is padded with
 * null points (weight 0) to a multiple of kUnit, and every split, shard and
 * device range is whole units. Also the small-d shared tile. */
constexpr int kUnit = 256;
constexpr int kSmallPointsPerWarp = kUnit / kWarps;
/* Wide kernel (d >= 5): each thread computes a 4-query x 8-point block. */
constexpr int kWidePoints = 8;
/* A split gets at least this many units, so that its first groups (which set
 * the running max) and the partial write stay a small part of its work. */
constexpr int64_t kMinUnitsPerSplit = 8;
/* A group whose sum (relative to the running max) passes this is summed
 * again against its own maximum: terms up to about 2^57 above the reference
 * are summed as they are (float holds sums up to 2^128). */
constexpr double kLazyLimit = 1152921504606846976.0; /* 2^60 */
/* Tensor-core paths for the single-precision Gaussian: kde_tc_wide_kernel
 * at d >= kTcWideMinDim, kde_tc_small_kernel at d = kTcSmallDim. (At d = 1, 2 the
 * FMA kernel's difference form is 100x more accurate than any expanded
 * form: |q - x|^2 without the cancellation of |q|^2 + |x|^2 - 2 q.x.) */
constexpr int64_t kTcWideMinDim = 16;
constexpr int64_t kTcSmallDim = 3;
/* Wide kernel shared memory cap: leaves room for 2+ blocks per SM. */
constexpr size_t kWideSmemCap = 100 * 1024;
/* Below this many queries per device, split the training set, not the
 * queries, across devices. */
constexpr int64_t kMinQueriesPerDevice = 16384;
/* Largest query batch (rows). */
constexpr int64_t kMaxBatchRows = (int64_t) 1 << 22;
/* Work per step (one batch against one shard), in pairs x the cost per pair
 * of pair_cost(): about a second on an H100 whatever the path, so
 * that the interrupt probe and the progress bar run that often. */
constexpr double kMaxWorkPerStep = 2e13;
/* Scratch buffers up to this size stay allocated between evaluations (no
 * allocation, nor the synchronisation of cudaFree, in a short call); larger
 * ones are freed at the end of the evaluation that needed them. */
constexpr size_t kKeepScratchBytes = (size_t) 256 << 20;
/* Threads per block of the query packing kernel. */
constexpr int kPackThreads = 128;

/* Single-precision Gaussian: of the 32 exp2s a thread computes per group,
 * this many run as a polynomial on the FMA pipe (poly_exp2) rather than on
 * the MUFU, which is the busier pipe. Measured on an H100 at d = 3:
 * 0: 2.71e12, 2: 2.79e12, 4: 2.83e12, 8: 2.54e12 evaluations/s. */
constexpr int kPolyExps = 4;
/* The same for the d = 3 tensor-core kernel. Its FP32 pipe has room, but
 * more polynomials did not pay (harness tcacc, H100, 5e4 x 1e6): 0: 3.06e12
 * to 3.11e12, 2: 3.11e12, 4: 3.10e12, 8: 2.76e12, 12: 2.49e12. */
constexpr int kTcPolyExps = 4;

constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.69314718055994530942;

} // namespace

/* ------------------------------------------------------------------------ */
/* Device code                                                               */
/* ------------------------------------------------------------------------ */

namespace {

/* A float's bits and back, on the host and the device alike: the operand
 * splits below must give the same bits on both (training points are split
 * on the host, queries on the device). */
__host__ __device__ inline uint32_t float_bits(float v)
{
#ifdef __CUDA_ARCH__
  return __float_as_uint(v);
#else
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  return u;
#endif
}
__host__ __device__ inline float bits_float(uint32_t u)
{
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float v;
  memcpy(&v, &u, sizeof v);
  return v;
#endif
}

/* A float as fp16 bits, to nearest even, and back (|v| < 65520; subnormal
 * results are kept, not flushed). Through __half_raw: __half_as_ushort has
 * no host version before CUDA 12.2. */
__host__ __device__ inline uint32_t f16_bits(float v)
{
  const __half_raw raw = __float2half_rn(v);
  return raw.x;
}
__host__ __device__ inline float f16_value(uint32_t bits)
{
  __half_raw raw;
  raw.x = (unsigned short) bits;
  return __half2float(__half(raw));
}

/* v ~ big + small as fp16 bits: 11 + 11 significant bits (v - big is
 * exact in float). fp16 is subnormal below 2^-14, so for |v| below about
 * 2^-3 small keeps an absolute 2^-25 rather than 11 bits: plenty where
 * |q.x| is what matters. */
__host__ __device__ inline void f16_split2(float v, uint32_t &big, uint32_t &small)
{
  big = f16_bits(v);
  small = f16_bits(v - f16_value(big));
}

/* Round to bfloat16 (8 significant bits), to nearest even, as its 16 bits. */
__host__ __device__ inline uint32_t bf16_bits(float v)
{
  const uint32_t u = float_bits(v);
  if ((u & 0x7f800000u) == 0x7f800000u) return u >> 16; /* inf (no NaN here) */
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
__host__ __device__ inline float bf16_value(uint32_t bits) { return bits_float(bits << 16); }

/* v = p[0] + p[1] + p[2] exactly, as bfloat16 bits (8 + 8 + 8 bits of a
 * float's 24); an infinity stays in p[0]. */
__host__ __device__ inline void bf16_split3(float v, uint32_t (&p)[3])
{
  p[0] = bf16_bits(v);
  const bool finite = fabsf(v) <= FLT_MAX;
  const float r = finite ? v - bf16_value(p[0]) : 0.0f;
  p[1] = bf16_bits(r);
  p[2] = bf16_bits(finite ? r - bf16_value(p[1]) : 0.0f);
}

/* Where value (point or query row r, dimension k) goes in the wide
 * tensor-core layouts, as a 32-bit word holding two fp16 values (dimension
 * k is its k % 2 half, low half first): the B fragment of a storage tile
 * (b0: k = 2 t, 2 t + 1, b1: k = 2 t + 8, 2 t + 9, for column g, lane 4 g +
 * t) and the A fragment of a query m16 tile (a0: row g, k = 2 t, 2 t + 1;
 * a1: row g + 8; a2: row g, k = 2 t + 8, 2 t + 9; a3: row g + 8, the same
 * k), per 16 dimensions. See kde_tc_wide_kernel; the small part sits 2
 * words (B) or 128 words (A) after the big part. */
__host__ __device__ inline int64_t tc_wide_train_word(int64_t point_in_tile, int64_t k)
{
  const int64_t j = point_in_tile / 8, g = point_in_tile % 8;
  const int64_t kk = k / 16, t = (k % 8) / 2, h = (k % 16) / 8;
  return ((kk * 4 + j) * 32 + 4 * g + t) * 4 + h;
}
__host__ __device__ inline int64_t tc_wide_query_word(int64_t row_in_tile, int64_t k)
{
  const int64_t g = row_in_tile % 8, hr = row_in_tile / 8;
  const int64_t kk = k / 16, t = (k % 8) / 2, hk = (k % 16) / 8;
  return kk * 256 + (4 * g + t) * 4 + hr + 2 * hk;
}
/* A query batch in the wide tensor-core layout: ldq / 16 m16 tiles of k16 x
 * 256 words, then ldq row scales (see kde_pack_kernel). */
__host__ __device__ inline int64_t tc_wide_scale_offset(int64_t ldq, int k16)
{
  return ldq / 16 * k16 * 256;
}
/* Values (in a query row, after its scale, or of any training point) stay
 * below 2^kF16LimitLog2, so that fp16 holds their big parts. */
constexpr int kF16LimitLog2 = 15;
constexpr float kF16Limit = (float) (1 << kF16LimitLog2);

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
};

/* kde_kernel_is_compact() as a constant expression, for template arguments;
 * kde_cuda_model_create() checks that the two agree for every kernel. */
__host__ __device__ constexpr bool kernel_sums_logs(int kernel)
{
  return kernel == KDE_GAUSSIAN || kernel == KDE_EXPONENTIAL;
}

template <typename T> struct real_traits;
/* group: training points per lazy-max check. min_blocks: blocks per SM the
 * register allocation must allow: 4 x 4 warps in float; double needs more
 * registers per thread (its exp2 is a 14-term polynomial) and has the ILP
 * to run at 2 x 4 warps (16 independent exp2 chains per warp and group). */
template <> struct real_traits<float> {
  static constexpr int group = 8;
  static constexpr int min_blocks = 4;
  static __device__ __forceinline__ float lowest() { return -FLT_MAX; }
};
template <> struct real_traits<double> {
  static constexpr int group = 4;
  static constexpr int min_blocks = 2;
  static __device__ __forceinline__ double lowest() { return -DBL_MAX; }
};

/* exp2 for the hot loop. Single precision: MUFU.EX2 (2 ulp; results below
 * 2^-126, i.e. terms below 2^-126 of the running max, flush to zero). */
__device__ __forceinline__ float fast_exp2(float x)
{
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

/* Double precision, without the library's branches for extreme arguments:
 * 2^x = 2^n 2^f with n = rint(x) (the 1.5 * 2^52 shifter) and |f| <= 1/2,
 * 2^f = exp(f log 2) by its Taylor series to degree 13 (truncation below
 * 4e-18), 2^n built in the exponent field. At most 2 ulp from exp2 (tested
 * on 2e7 arguments). x < -1022 gives 0 (as ftz in single: such terms are
 * below 2^-1022 of the running max), x > 1023 gives 2^1023, which is all
 * the lazy-max check needs to see. */
__device__ __forceinline__ double fast_exp2(double x)
{
  const double xc = fmin(fmax(x, -1022.0), 1023.0);
  const double shifter = 6755399441055744.0;
  const double t = xc + shifter;
  const int n = __double2loint(t);
  const double f = xc - (t - shifter);
  double p = 0x1.816193166d0f9p-40; /* (log 2)^k / k!, k = 13 .. 0 */
  p = fma(p, f, 0x1.c3bd650fc2986p-36);
  p = fma(p, f, 0x1.e8cac7351bb25p-32);
  p = fma(p, f, 0x1.e4cf5158b8ecap-28);
  p = fma(p, f, 0x1.b5253d395e7c4p-24);
  p = fma(p, f, 0x1.62c0223a5c824p-20);
  p = fma(p, f, 0x1.ffcbfc588b0c7p-17);
  p = fma(p, f, 0x1.430912f86c787p-13);
  p = fma(p, f, 0x1.5d87fe78a6731p-10);
  p = fma(p, f, 0x1.3b2ab6fba4e77p-7);
  p = fma(p, f, 0x1.c6b08d704a0c0p-5);
  p = fma(p, f, 0x1.ebfbdff82c58fp-3);
  p = fma(p, f, 0x1.62e42fefa39efp-1);
  p = fma(p, f, 1.0);
  const double r = p * __hiloint2double((n + 1023) << 20, 0);
  return x < -1022.0 ? 0.0 : r;
}

/* exp2 on the FMA pipe (Cody-Waite: 2^n 2^f, |f| <= 1/2, Taylor to degree
 * 6, relative error ~2e-7, like MUFU.EX2's 2 ulp), for a share of the terms
 * while the MUFU is saturated. Arguments are clamped to [-125, 126]: above,
 * a result of 2^126 still trips the lazy-max check; below, 0 as with ftz. */
__device__ __forceinline__ float poly_exp2(float x)
{
  const float xc = fminf(fmaxf(x, -125.0f), 126.0f);
  const float shifter = 12582912.0f; /* 1.5 x 2^23: adding rounds to an integer */
  const float t = xc + shifter;
  const float f = xc - (t - shifter);
  float p = 1.5403530393381608e-4f;
  p = fmaf(p, f, 1.3333558146428443e-3f);
  p = fmaf(p, f, 9.6181291076284772e-3f);
  p = fmaf(p, f, 5.5504108664821580e-2f);
  p = fmaf(p, f, 2.4022650695910071e-1f);
  p = fmaf(p, f, 6.9314718055994531e-1f);
  p = fmaf(p, f, 1.0f);
  const float r = __int_as_float(__float_as_int(p) + (int) ((unsigned) __float_as_int(t) << 23));
  return x < -125.0f ? 0.0f : r;
}
/* Double precision never takes the polynomial share (POLY is 0 there, and
 * its fast_exp2 is a polynomial already); this overload only lets the
 * templates compile. */
__device__ __forceinline__ double poly_exp2(double x) { return fast_exp2(x); }

/* Sum of U terms as a balanced tree: fewer dependent adds in a row. */
template <typename T, int U>
__device__ __forceinline__ T tree_sum(T (&v)[U])
{
#pragma unroll
  for (int width = U / 2; width > 0; width /= 2)
#pragma unroll
    for (int p = 0; p < width; p++) v[p] += v[p + width];
  return v[0];
}

/* The profile functions of kernels.h, picked by type. K is a compile-time
 * constant, so their switch folds away. */
template <int K> __device__ __forceinline__ float log_profile(float s2)
{
  return kde_log_profile_f(K, s2);
}
template <int K> __device__ __forceinline__ double log_profile(double s2)
{
  return kde_log_profile(K, s2);
}
template <int K> __device__ __forceinline__ float profile(float s2)
{
  return kde_profile_f(K, s2);
}
template <int K> __device__ __forceinline__ double profile(double s2)
{
  return kde_profile(K, s2);
}

__device__ __forceinline__ kde_lse_f2 lse_make(float m, float s)
{
  return kde_lse_make_f2(m, s);
}
__device__ __forceinline__ kde_lse_2 lse_make(double m, double s)
{
  return kde_lse_make_2(m, s);
}
__device__ __forceinline__ kde_lse_f2 lse_merge(kde_lse_f2 a, kde_lse_f2 b)
{
  return kde_lse_merge_f2(a, b);
}
__device__ __forceinline__ kde_lse_2 lse_merge(kde_lse_2 a, kde_lse_2 b)
{
  return kde_lse_merge_2(a, b);
}

/* N consecutive values from shared memory, 16 bytes at a time. */
template <typename T, int N>
__device__ __forceinline__ void load_vec(const T *p, T (&v)[N])
{
  static_assert((N * sizeof(T)) % 16 == 0, "whole 16-byte loads");
#pragma unroll
  for (int c = 0; c < N * (int) sizeof(T) / 16; c++) {
    const float4 w = reinterpret_cast<const float4 *>(p)[c];
    const T *wt = reinterpret_cast<const T *>(&w);
#pragma unroll
    for (int e = 0; e < 16 / (int) sizeof(T); e++)
      v[c * (16 / sizeof(T)) + e] = wt[e];
  }
}

/* Asynchronous global -> shared copies (cp.async, sm_80+), with a plain copy
 * for older devices. */
__device__ __forceinline__ void copy16_async(void *smem, const void *gmem)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned s = (unsigned) __cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s),
               "l"(gmem));
#else
  *reinterpret_cast<float4 *>(smem) = *reinterpret_cast<const float4 *>(gmem);
#endif
}
__device__ __forceinline__ void async_commit()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
/* Wait until at most one committed group (the newest) is still in flight. */
__device__ __forceinline__ void async_wait_all_but_newest()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group 1;\n" ::);
#endif
}

/* The block copies `bytes` (a multiple of 16) from global to shared. */
__device__ __forceinline__ void block_copy_async(void *smem, const void *gmem,
                                                 size_t bytes)
{
  char *s = static_cast<char *>(smem);
  const char *g = static_cast<const char *>(gmem);
  for (size_t o = 16 * (size_t) threadIdx.x; o < bytes; o += 16 * kThreads)
    copy16_async(s + o, g + o);
}

/*
 * One group of U training points against the thread's Q queries, all in
 * registers: value[i][p] is log2 of the term (LSE kernels) or the term itself
 * (compact kernels). The sums are two-level: the group into ts (the tile's
 * sum), ts into s by the caller.
 *
 * LSE kernels: every term is added as exp2(value - m), m the running max. If
 * the group's sum passes kLazyLimit (or is inf), some term lies far above m:
 * then, and only then, m becomes the group's maximum, the earlier sums are
 * rescaled by exp2(old m - new m), and the group is summed again. This
 * happens for the first group of a split and for rare large jumps, so the
 * branch is almost never taken and costs one compare per query per group.
 *
 * m starts at lowest() (finite), not -inf, so value - m is never
 * (-inf) - (-inf): zero-weight and padding points (value -inf) add 0.
 */
/* Lazy-max pieces, for LSE kernels. group_exps: g[i] = sum_p exp2(value[i][p]
 * - m[i]), the last POLY of each thread's Q x U terms by poly_exp2; returns
 * whether some query's group sum passed kLazyLimit. group_fix: for those
 * queries only, m[i] becomes the group's maximum, the earlier sums s and ts
 * are rescaled, and g[i] is summed again. */
template <int POLY, typename T, int Q, int U>
__device__ __forceinline__ bool group_exps(const T (&value)[Q][U], const T (&m)[Q],
                                           T (&g)[Q])
{
  bool far = false;
#pragma unroll
  for (int i = 0; i < Q; i++) {
    T e[U];
#pragma unroll
    for (int p = 0; p < U; p++)
      e[p] = i * U + p >= Q * U - POLY ? poly_exp2(value[i][p] - m[i])
                                       : fast_exp2(value[i][p] - m[i]);
    g[i] = tree_sum(e);
    far |= !(g[i] <= (T) kLazyLimit);
  }
  return far;
}

template <typename T, int U>
__device__ __forceinline__ void group_fix_one(const T (&value)[U], T &m, T &s,
                                              T &ts, T &g)
{
  T group_max = value[0];
#pragma unroll
  for (int p = 1; p < U; p++) group_max = fmax(group_max, value[p]);
  const T f = fast_exp2(m - group_max); /* 0 from lowest() */
  s *= f;
  ts *= f;
  m = group_max;
  T e[U];
#pragma unroll
  for (int p = 0; p < U; p++) e[p] = fast_exp2(value[p] - m);
  g = tree_sum(e);
}

/*
 * One group of U training points against the thread's Q queries, all in
 * registers: value[i][p] is log2 of the term (LSE kernels) or the term itself
 * (compact kernels). The sums are two-level: the group into ts (the tile's
 * sum), ts into s by the caller.
 *
 * LSE kernels: every term is added as exp2(value - m), m the running max. If
 * the group's sum passes kLazyLimit (or is inf), some term lies far above m:
 * then, and only then, m becomes the group's maximum, the earlier sums are
 * rescaled by exp2(old m - new m), and the group is summed again. This
 * happens for the first group of a split and for rare large jumps, so the
 * branch is almost never taken and costs one compare per query per group.
 *
 * m starts at lowest() (finite), not -inf, so value - m is never
 * (-inf) - (-inf): zero-weight and padding points (value -inf) add 0.
 */
template <bool LSE, int POLY = 0, typename T, int Q, int U>
__device__ __forceinline__ void accumulate_group(T (&value)[Q][U], T (&m)[Q],
                                                 T (&s)[Q], T (&ts)[Q])
{
  if (!LSE) {
#pragma unroll
    for (int i = 0; i < Q; i++) ts[i] += tree_sum(value[i]);
    return;
  }
  T g[Q];
  if (__builtin_expect(group_exps<POLY>(value, m, g), 0)) {
#pragma unroll
    for (int i = 0; i < Q; i++)
      if (!(g[i] <= (T) kLazyLimit)) group_fix_one(value[i], m[i], s[i], ts[i], g[i]);
  }
#pragma unroll
  for (int i = 0; i < Q; i++) ts[i] += g[i];
}

/* The training points of this block: the blockIdx.y-th split of the
 * launch's range, [first, first + count), count a multiple of kUnit. */
template <typename T>
__device__ __forceinline__ int64_t block_split(const kde_args<T> &a, int64_t &count)
{
  const int64_t first = (int64_t) blockIdx.y * a.split_points;
  count = a.n_points - first < a.split_points ? a.n_points - first : a.split_points;
  return first;
}

/* The value of one pair for the difference form, from s^2 and aux. */
template <int K, bool LSE, typename T>
__device__ __forceinline__ T pair_value(T s2, T aux)
{
  /* LSE: aux = log2 w, coordinates pre-scaled so that log_profile(s2) is
   * already log2 k. Compact: aux = w, coordinates unscaled. */
  return LSE ? aux + log_profile<K>(s2) : aux * profile<K>(s2);
}

template <bool LSE, typename T> __device__ __forceinline__ T excluded_value()
{
  return LSE ? (T) -INFINITY : (T) 0;
}

/* Per-block end: merge the 4 warps' states per query in shared memory and
 * write one partial (max, sum) per query for this split. slot[i] is the
 * block-local query index of the thread's i-th query. */
template <typename T, int Q>
__device__ __forceinline__ void write_partials(const kde_args<T> &a, T *smem,
                                               const T (&m)[Q],
                                               const T (&s)[Q],
                                               const int (&slot)[Q])
{
  const int warp = threadIdx.x / 32;
  T *sm = smem;
  T *ss = smem + kWarps * kBlockQueries;
  __syncthreads(); /* everyone is done with the tiles this aliases */
#pragma unroll
  for (int i = 0; i < Q; i++) {
    sm[warp * kBlockQueries + slot[i]] = m[i];
    ss[warp * kBlockQueries + slot[i]] = s[i];
  }
  __syncthreads();
  if (threadIdx.x < kBlockQueries) {
    const int r = threadIdx.x;
    const int64_t row = (int64_t) blockIdx.x * kBlockQueries + r;
    auto st = lse_make(sm[r], ss[r]);
#pragma unroll
    for (int w = 1; w < kWarps; w++)
      st = lse_merge(st, lse_make(sm[w * kBlockQueries + r],
                                  ss[w * kBlockQueries + r]));
    if (st.sum == 0) st.max = (T) -INFINITY; /* canonical empty state */
    if (row < a.n_query) {
      const int64_t at = (int64_t) blockIdx.y * a.ldq + row;
      a.part_max[at] = st.max;
      a.part_sum[at] = st.sum;
    }
  }
}

/* The values of one group of U points (starting at point j of the tile)
 * against the thread's queries; CHECK: exclude a query's own point. */
template <int K, typename T, int D, bool CHECK, int Q, int U>
__device__ __forceinline__ void small_group_values(const T *__restrict__ tile,
                                                   int j, const T (&q)[Q][D],
                                                   int64_t first,
                                                   const int64_t (&qg)[Q],
                                                   T (&value)[Q][U])
{
  constexpr bool LSE = kernel_sums_logs(K);
  /* Gaussian, d >= 3: aux = log2 w - |x|^2 / 2 and the query holds q, so
   * aux + q.x = log2 w + log2 k + |q|^2 / 2; the host subtracts |q|^2 / 2.
   * (log2 k = -s2 / 2 for the pre-scaled coordinates, kde_log_profile.) */
  constexpr bool EXPANDED = K == KDE_GAUSSIAN && D >= 3;
  const T *base = tile + (j / kTileWidth) * (D + 1) * kTileWidth + (j % kTileWidth);
  T x[D + 1][U];
#pragma unroll
  for (int k = 0; k <= D; k++) load_vec<T, U>(base + k * kTileWidth, x[k]);
#pragma unroll
  for (int p = 0; p < U; p++) {
#pragma unroll
    for (int i = 0; i < Q; i++) {
      T v;
      if (EXPANDED) {
        v = x[D][p];
#pragma unroll
        for (int k = 0; k < D; k++) v = fma(q[i][k], x[k][p], v);
      } else {
        T s2 = 0;
#pragma unroll
        for (int k = 0; k < D; k++) {
          const T diff = q[i][k] - x[k][p];
          s2 = fma(diff, diff, s2);
        }
        v = pair_value<K, LSE>(s2, x[D][p]);
      }
      if (CHECK && first + j + p == qg[i]) v = excluded_value<LSE, T>();
      value[i][p] = v;
    }
  }
}

/* One shared tile (kUnit points) for the small-d kernel: this warp's quarter,
 * in groups of U points. CHECK: the tile may hold a query's own point.
 *
 * LSE kernels are software-pipelined by one group: the values (FMAs) of
 * group k are computed while the exp2s of group k - 1 drain from the MUFU
 * pipe, and only then is group k - 1's lazy-max check resolved (in the rare
 * case by recomputing its values from shared memory). */
template <int K, typename T, int D, bool CHECK, int Q>
__device__ __forceinline__ void small_tile(const T *__restrict__ tile,
                                           const T (&q)[Q][D], T (&m)[Q],
                                           T (&s)[Q], T (&ts)[Q],
                                           int64_t first,
                                           const int64_t (&qg)[Q])
{
  constexpr int U = real_traits<T>::group;
  constexpr bool LSE = kernel_sums_logs(K);
  constexpr int POLY = K == KDE_GAUSSIAN && std::is_same<T, float>::value ? kPolyExps : 0;
  const int j0 = (threadIdx.x / 32) * kSmallPointsPerWarp;
  T value[Q][U];
  if (!LSE) {
#pragma unroll 2
    for (int g = 0; g < kSmallPointsPerWarp; g += U) {
      small_group_values<K, T, D, CHECK>(tile, j0 + g, q, first, qg, value);
#pragma unroll
      for (int i = 0; i < Q; i++) ts[i] += tree_sum(value[i]);
    }
    return;
  }
  T gsum[Q];
  small_group_values<K, T, D, CHECK>(tile, j0, q, first, qg, value);
  bool far = group_exps<POLY>(value, m, gsum);
#pragma unroll 1
  for (int g = U; g <= kSmallPointsPerWarp; g += U) {
    if (g < kSmallPointsPerWarp)
      small_group_values<K, T, D, CHECK>(tile, j0 + g, q, first, qg, value);
    if (__builtin_expect(far, 0)) { /* resolve group g - U */
      T again[Q][U];
      small_group_values<K, T, D, CHECK>(tile, j0 + g - U, q, first, qg, again);
#pragma unroll
      for (int i = 0; i < Q; i++)
        if (!(gsum[i] <= (T) kLazyLimit))
          group_fix_one(again[i], m[i], s[i], ts[i], gsum[i]);
    }
#pragma unroll
    for (int i = 0; i < Q; i++) ts[i] += gsum[i];
    if (g < kSmallPointsPerWarp) far = group_exps<POLY>(value, m, gsum);
  }
}

/*
 * d = D in 1..4. Block (bx, by): queries [128 bx, 128 bx + 128) against the
 * by-th split of the training range. Queries live in registers (4 per
 * thread, rows lane + 32 i); each warp takes a quarter of every tile.
 * Tiles are double-buffered with cp.async.
 */
template <int K, typename T, int D>
__global__ void __launch_bounds__(kThreads, real_traits<T>::min_blocks)
    kde_small_kernel(const kde_args<T> a)
{
  constexpr int Q = kQueriesPerThread;
  constexpr bool LSE = kernel_sums_logs(K);
  constexpr int tile_elems = kUnit * (D + 1);
  extern __shared__ float4 smem_f4[];
  T *smem = reinterpret_cast<T *>(smem_f4);

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries;

  T q[Q][D];
  int slot[Q];
  int64_t qg[Q];
#pragma unroll
  for (int i = 0; i < Q; i++) {
    slot[i] = lane + 32 * i;
    qg[i] = a.query_base + q0 + slot[i];
#pragma unroll
    for (int k = 0; k < D; k++) q[i][k] = a.query[q0 + slot[i] + k * a.ldq];
  }
  const int64_t qg_lo = qg[0], qg_hi = qg[Q - 1];

  T m[Q], s[Q];
#pragma unroll
  for (int i = 0; i < Q; i++) {
    m[i] = LSE ? real_traits<T>::lowest() : (T) 0;
    s[i] = 0;
  }

  int64_t split_count;
  const int64_t p0 = block_split(a, split_count);
  const int64_t n_tiles = split_count / kUnit;
  const T *src = a.train + p0 * (D + 1);

  block_copy_async(smem, src, tile_elems * sizeof(T));
  async_commit();
  for (int64_t t = 0; t < n_tiles; t++) {
    if (t + 1 < n_tiles)
      block_copy_async(smem + ((t + 1) & 1) * tile_elems,
                       src + (t + 1) * tile_elems, tile_elems * sizeof(T));
    async_commit(); /* possibly empty: keeps the group count uniform */
    async_wait_all_but_newest();
    __syncthreads();
    const T *tile = smem + (t & 1) * tile_elems;
    /* global index of the tile's point 0 (leave one out) */
    const int64_t tile_first = a.train_base + p0 + t * kUnit;
    const int64_t warp_first = tile_first + warp * kSmallPointsPerWarp;
    T ts[Q];
#pragma unroll
    for (int i = 0; i < Q; i++) ts[i] = 0;
    const bool check = a.leave_one_out && qg_lo < warp_first + kSmallPointsPerWarp &&
                       warp_first <= qg_hi;
    if (check)
      small_tile<K, T, D, true>(tile, q, m, s, ts, tile_first, qg);
    else
      small_tile<K, T, D, false>(tile, q, m, s, ts, tile_first, qg);
#pragma unroll
    for (int i = 0; i < Q; i++) s[i] += ts[i];
    __syncthreads(); /* the next prefetch overwrites this buffer */
  }
  write_partials<T, Q>(a, smem, m, s, slot);
}

/*
 * d >= 5 (any d). Each thread computes a 4-query x 8-point block of s^2 (or
 * of q.x for the Gaussian) as a dot product over the dimensions, reading 4
 * query values and 8 point values from shared memory per dimension (three
 * 16-byte loads for 32 FMAs). Queries of the block stay in shared memory,
 * dimension-major [dim][128]; each step brings one 32-point storage tile
 * (or, when d is too large for shared memory, one chunk of dimensions of it,
 * with the queries' chunk reloaded alongside).
 */
template <int K, typename T>
__global__ void __launch_bounds__(kThreads, real_traits<T>::min_blocks)
    kde_wide_kernel(const kde_args<T> a)
{
  constexpr int Q = kQueriesPerThread;
  constexpr int P = kWidePoints;
  constexpr bool LSE = kernel_sums_logs(K);
  constexpr bool EXPANDED = K == KDE_GAUSSIAN;
  extern __shared__ float4 smem_f4[];
  T *smem = reinterpret_cast<T *>(smem_f4);

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries;
  const int d = a.dim;
  const int dc = a.chunk_dims;
  const int n_chunks = a.n_chunks;
  T *sq = smem;                               /* [dc][kBlockQueries] */
  T *sx = smem + (size_t) dc * kBlockQueries; /* 2 x [(dc + 1)][32] */
  const int sx_elems = (dc + 1) * kTileWidth;

  int slot[Q];
  int64_t qg[Q];
#pragma unroll
  for (int i = 0; i < Q; i++) {
    slot[i] = lane * Q + i;
    qg[i] = a.query_base + q0 + slot[i];
  }

  T m[Q], s[Q], ts[Q];
#pragma unroll
  for (int i = 0; i < Q; i++) {
    m[i] = LSE ? real_traits<T>::lowest() : (T) 0;
    s[i] = 0;
    ts[i] = 0;
  }

  int64_t split_count;
  const int64_t p0 = block_split(a, split_count);
  const int64_t n_tiles = split_count / kTileWidth;
  const int64_t n_steps = n_tiles * n_chunks;
  const T *src = a.train + p0 * (d + 1);
  const size_t tile_stride = (size_t) (d + 1) * kTileWidth;

  /* Rows of query chunk c: dims [c dc, c dc + len). */
  auto load_query_chunk = [&](int c) {
    const int len = min(dc, d - c * dc);
    const int per_row = kBlockQueries * (int) sizeof(T) / 16;
    for (int o = threadIdx.x; o < len * per_row; o += kThreads) {
      const int k = o / per_row, part = o % per_row;
      copy16_async(reinterpret_cast<char *>(sq + (size_t) k * kBlockQueries) +
                       16 * part,
                   reinterpret_cast<const char *>(
                       a.query + q0 + (int64_t) (c * dc + k) * a.ldq) +
                       16 * part);
    }
  };
  /* Rows of training step `step`: chunk rows, plus the aux row with the
   * last chunk (contiguous in the storage tile). */
  auto load_train_step = [&](int64_t step, T *dst) {
    const int64_t tile = step / n_chunks;
    const int c = (int) (step % n_chunks);
    const int len = min(dc, d - c * dc);
    const int rows = len + (c == n_chunks - 1);
    block_copy_async(dst, src + tile * tile_stride + (size_t) c * dc * kTileWidth,
                     (size_t) rows * kTileWidth * sizeof(T));
  };

  if (n_chunks == 1) load_query_chunk(0);
  if (n_steps > 0) load_train_step(0, sx);
  async_commit();

  T acc[Q][P];
  int c = 0;
  int64_t tile = 0;
  for (int64_t step = 0; step < n_steps; step++) {
    if (n_chunks > 1) {
      load_query_chunk(c); /* the last step's end barrier freed sq */
      async_commit();
    }
    if (step + 1 < n_steps)
      load_train_step(step + 1, sx + ((step + 1) & 1) * sx_elems);
    async_commit();
    async_wait_all_but_newest();
    __syncthreads();

    const T *xs = sx + (step & 1) * sx_elems;
    const int len = min(dc, d - c * dc);
    if (c == 0) {
#pragma unroll
      for (int i = 0; i < Q; i++)
#pragma unroll
        for (int p = 0; p < P; p++) acc[i][p] = 0;
    }
#pragma unroll 4
    for (int k = 0; k < len; k++) {
      T qv[Q], xv[P];
      load_vec<T, Q>(sq + k * kBlockQueries + lane * Q, qv);
      load_vec<T, P>(xs + k * kTileWidth + warp * P, xv);
#pragma unroll
      for (int i = 0; i < Q; i++)
#pragma unroll
        for (int p = 0; p < P; p++) {
          if (EXPANDED) {
            acc[i][p] = fma(qv[i], xv[p], acc[i][p]);
          } else {
            const T diff = qv[i] - xv[p];
            acc[i][p] = fma(diff, diff, acc[i][p]);
          }
        }
    }

    if (c == n_chunks - 1) {
      T aux[P];
      load_vec<T, P>(xs + len * kTileWidth + warp * P, aux);
      const int64_t first = a.train_base + p0 + tile * kTileWidth + warp * P;
      const bool check = a.leave_one_out && qg[0] < first + P &&
                         first <= qg[Q - 1];
#pragma unroll
      for (int i = 0; i < Q; i++)
#pragma unroll
        for (int p = 0; p < P; p++) {
          T v = EXPANDED ? acc[i][p] + aux[p]
                         : pair_value<K, LSE>(acc[i][p], aux[p]);
          if (check && first + p == qg[i]) v = excluded_value<LSE, T>();
          acc[i][p] = v;
        }
      accumulate_group<LSE>(acc, m, s, ts);
      /* Two-level sum: 16 tiles into ts, then into s. */
      if ((tile & 15) == 15) {
#pragma unroll
        for (int i = 0; i < Q; i++) {
          s[i] += ts[i];
          ts[i] = 0;
        }
      }
      tile++;
      c = 0;
    } else {
      c++;
    }
    __syncthreads(); /* sq and this sx buffer are overwritten next */
  }
#pragma unroll
  for (int i = 0; i < Q; i++) s[i] += ts[i];
  write_partials<T, Q>(a, smem, m, s, slot);
}

/*
 * Wide tensor-core path: single-precision Gaussian, d >= kTcWideMinDim.
 *
 * value = aux + q.x with q.x = sum over 16-dimension steps of
 * mma.sync.m16n8k16 (fp16 in, FP32 accumulate). Each operand is stored split
 * as big = fp16(v) and small = fp16(v - big) (f16_split2; training points on
 * the host, queries by the packing kernel), and q.x ~ q_small x_big + q_big
 * x_small + q_big x_big: about 22 bits of each operand, as 3xTF32 keeps, at
 * half the MMAs (an fp16 k16 step costs what a TF32 k8 step does) and half
 * the shared memory. The accumulators start at aux, so the bias is free.
 *
 * fp16 holds magnitudes below 65504: training points must lie within
 * kF16Limit (else the model takes the FMA kernel), and a query row beyond it
 * is stored scaled by a power of two, 1 / row_scale, exact; a warp with such
 * a row starts its accumulators at 0 and takes value = acc row_scale + aux.
 *
 * Each warp owns 32 queries (two m16 tiles) and takes every 32-point tile
 * (four n8 tiles): per 16 dimensions, 8 16-byte shared loads feed 24 MMAs.
 * Storage tile (32 points): [k16][n8 tile 0..3][lane][b0 big, b1 big,
 * b0 small, b1 small] (the B fragment of each lane), then aux[32] (float).
 * Queries: [m16 tile][k16][big | small][lane][a0..a3] (A fragments), then
 * the row scales. Fragment layouts: PTX ISA, "Matrix fragments for
 * mma.m16n8k16 with floating point type".
 */
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4],
                                        uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ void load_u4(const float *p, uint32_t (&v)[4])
{
  const uint4 w = *reinterpret_cast<const uint4 *>(p);
  v[0] = w.x;
  v[1] = w.y;
  v[2] = w.z;
  v[3] = w.w;
}

/* End of the tensor-core kernels: a warp's 32 query rows (from row q0 of
 * the batch; thread row r = 2 i + h is q0 + 16 i + g + 8 h) are each spread
 * over the 4 lanes of a quad; merge them and write this split's partials. */
__device__ __forceinline__ void write_quad_partials(const kde_args<float> &a, int64_t q0,
                                                    const float (&m)[4],
                                                    const float (&s)[4])
{
  const int g = (threadIdx.x % 32) / 4, t = threadIdx.x % 4;
#pragma unroll
  for (int r = 0; r < 4; r++) {
    kde_lse_f2 st = kde_lse_make_f2(m[r], s[r]);
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) {
      const float om = __shfl_xor_sync(0xffffffffu, st.max, offset);
      const float os = __shfl_xor_sync(0xffffffffu, st.sum, offset);
      st = kde_lse_merge_f2(st, kde_lse_make_f2(om, os));
    }
    if (st.sum == 0) st.max = -INFINITY;
    const int64_t row = q0 + 16 * (r / 2) + g + 8 * (r % 2);
    if (t == 0 && row < a.n_query) {
      const int64_t at = (int64_t) blockIdx.y * a.ldq + row;
      a.part_max[at] = st.max;
      a.part_sum[at] = st.sum;
    }
  }
}

__global__ void __launch_bounds__(kThreads) kde_tc_wide_kernel(const kde_args<float> a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int MI = 2, NJ = 4, R = 2 * MI; /* R query rows per thread */
  extern __shared__ float4 smem_f4[];
  float *smem = reinterpret_cast<float *>(smem_f4);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int k16 = a.k16;
  const int64_t tile_elems = a.tile_elems;
  const int q_elems = kWarps * MI * k16 * 256;
  float *sa = smem;
  float *sx = smem + q_elems;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries;

  /* thread row r = 2 i + h: query q0 + 32 warp + 16 i + g + 8 h */
  int64_t qg[R];
  float row_scale[R];
  bool scaled = false;
#pragma unroll
  for (int r = 0; r < R; r++) {
    const int64_t row = q0 + 32 * warp + 16 * (r / 2) + g + 8 * (r % 2);
    qg[r] = a.query_base + row;
    row_scale[r] = a.query[tc_wide_scale_offset(a.ldq, k16) + row];
    scaled = scaled || row_scale[r] != 1.0f;
  }
  /* warp-uniform, so that the common case keeps aux as the MMAs' input */
  scaled = __any_sync(0xffffffffu, scaled);
  float m[R], s[R], ts[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    m[r] = -FLT_MAX;
    s[r] = 0;
    ts[r] = 0;
  }

  int64_t split_count;
  const int64_t p0 = block_split(a, split_count);
  const int64_t n_tiles = split_count / kTileWidth;
  const float *src = a.train + (p0 / kTileWidth) * tile_elems;

  block_copy_async(sa, a.query + (q0 / 16) * k16 * 256, (size_t) q_elems * sizeof(float));
  block_copy_async(sx, src, (size_t) tile_elems * sizeof(float));
  async_commit();
  for (int64_t tile = 0; tile < n_tiles; tile++) {
    if (tile + 1 < n_tiles)
      block_copy_async(sx + ((tile + 1) & 1) * tile_elems, src + (tile + 1) * tile_elems,
                       (size_t) tile_elems * sizeof(float));
    async_commit();
    async_wait_all_but_newest();
    __syncthreads();
    const float *xs = sx + (tile & 1) * tile_elems;
    const float *aux = xs + (size_t) k16 * 512;

    float acc[MI][NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      const float c0 = scaled ? 0.0f : aux[8 * j + 2 * t];
      const float c1 = scaled ? 0.0f : aux[8 * j + 2 * t + 1];
#pragma unroll
      for (int i = 0; i < MI; i++) {
        acc[i][j][0] = c0;
        acc[i][j][1] = c1;
        acc[i][j][2] = c0;
        acc[i][j][3] = c1;
      }
    }
#pragma unroll 2
    for (int kk = 0; kk < k16; kk++) {
      uint32_t b[NJ][4], abig[MI][4], asmall[MI][4];
#pragma unroll
      for (int j = 0; j < NJ; j++) load_u4(xs + ((kk * NJ + j) * 32 + lane) * 4, b[j]);
#pragma unroll
      for (int i = 0; i < MI; i++) {
        const float *fa = sa + ((size_t) ((warp * MI + i) * k16 + kk) * 2) * 128;
        load_u4(fa + lane * 4, abig[i]);
        load_u4(fa + 128 + lane * 4, asmall[i]);
      }
      /* small products first: they are the smaller terms of the sum */
#pragma unroll
      for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++) {
          mma_f16(acc[i][j], asmall[i], b[j][0], b[j][1]);
          mma_f16(acc[i][j], abig[i], b[j][2], b[j][3]);
          mma_f16(acc[i][j], abig[i], b[j][0], b[j][1]);
        }
    }

    /* row r = 2 i + h holds columns 8 j + 2 t + e in acc[i][j][2 h + e] */
    float value[R][2 * NJ];
    const int64_t first = a.train_base + p0 + tile * kTileWidth;
    const bool check = a.leave_one_out && qg[0] - 32 < first + kTileWidth &&
                       first <= qg[R - 1] + 32;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
      for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float v = acc[r / 2][j][2 * (r % 2) + e];
          if (scaled) v = fmaf(v, row_scale[r], aux[8 * j + 2 * t + e]);
          if (check && first + 8 * j + 2 * t + e == qg[r]) v = -INFINITY;
          value[r][2 * j + e] = v;
        }
    accumulate_group<true, kPolyExps>(value, m, s, ts);
    if ((tile & 15) == 15) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        s[r] += ts[r];
        ts[r] = 0;
      }
    }
    __syncthreads(); /* the next prefetch overwrites this buffer */
  }

#pragma unroll
  for (int r = 0; r < R; r++) s[r] += ts[r];
  write_quad_partials(a, q0 + 32 * warp, m, s);
#else
  __trap();
#endif
}

/*
 * Tensor-core path for small d: single-precision Gaussian, d = 3 (the
 * template serves d <= 3; see kTcSmallDim).
 *
 * One MMA product gives a pair's whole exponent, running max included:
 * value - m = q.x + aux - m, with -m entering as the accumulator input. Per
 * pair, what is left for the FP32 pipes is the exp2 and one add (the FMA
 * kernel spends d FMAs and a subtraction more).
 *
 * Precision: a float v is split into three bfloat16 pieces, v = v0 + v1 +
 * v2 exactly (8 + 8 + 8 bits), and q_c x_c keeps the six piece products
 * down to 2^-16 relative (q0 x0, q0 x1, q1 x0, q0 x2, q1 x1, q2 x0; what is
 * dropped is about 2^-24 of q_c x_c, one float rounding); aux keeps its
 * three pieces, a float's 24 bits. So the products are as exact as the FMA
 * kernel's, which matters: the expanded form's terms reach |x|^2 / 2 ~ 1e3
 * in bandwidth units at n = 1e6, where 2^-22 of them is 2e-4 in log2 k.
 * 3xTF32 (q0 x0 + q0 x1 + q1 x0 with 11-bit pieces) was 4x less accurate
 * than the FMA kernel at n = 1e6; six TF32 terms were as accurate but need
 * three k8 steps, slower than the FMA kernel. bfloat16 m16n8k16 takes 16
 * entries per step at the cost of a TF32 k8 step.
 *
 * The k entries (2 k16 steps): lane t of a quad holds k = 16 s + 2 t + e and
 * 16 s + 2 t + 8 + e (e = 0, 1), which we number j = 4 s + e and 4 s + 2 +
 * e. For t < d, entry j < 6 of lane t is term j of coordinate t: query piece
 * tc_query_piece(j) times point piece tc_point_piece(j); lane 3 carries aux,
 * its pieces at j = 0, 1, 2 times a query entry of 1. Everything else is 0
 * (and -inf, aux0 of a null point, meets a 1). Storage is the B fragments
 * as they are: per n8 tile and lane (g, t), point g's 8 entries of lane t as
 * 4 packed pairs, one 16-byte shared load.
 *
 * Each warp owns 32 queries (two m16 tiles) and takes every point of the
 * block's 256-point shared tile, in groups of kTcGroupTiles n8 tiles: per
 * group a thread has 4 query rows x 8 points, the same 32 terms per lazy-max
 * check as the FMA kernel. The lazy max is as in small_tile, with each
 * thread keeping its own running max per row (its 2 of the 8 columns of
 * every n8 tile); a quad's 4 states are merged at the end.
 */
constexpr int kTcSteps = 2;
constexpr int kTcGroupTiles = 4;
/* Storage words per point: 4 lanes x 4 packed pairs. */
constexpr int kTcPointWords = 16;
__host__ __device__ constexpr int tc_query_piece(int j)
{
  return j == 2 || j == 4 ? 1 : j == 5 ? 2 : 0;
}
__host__ __device__ constexpr int tc_point_piece(int j)
{
  return j == 1 || j == 4 ? 1 : j == 3 ? 2 : 0;
}

/* Entry j of lane t, as bfloat16 bits: the query side, from a row's
 * pieces piece[p][c], or the point side, from the pieces of coordinate t
 * (or of aux, t = 3). */
template <int D>
__device__ __forceinline__ uint32_t tc_query_entry(const uint32_t (&piece)[3][D], int t,
                                                   int j)
{
  uint32_t v = t == 3 && j < 3 ? 0x3f80u : 0u; /* 1.0: aux's pieces */
#pragma unroll
  for (int c = 0; c < D; c++)
    if (t == c && j < 6) v = piece[tc_query_piece(j)][c];
  return v;
}
__host__ __device__ inline uint32_t tc_point_entry(const uint32_t (&piece)[3], int t, int j)
{
  if (t == 3) return j < 3 ? piece[j] : 0u;
  return j < 6 ? piece[tc_point_piece(j)] : 0u;
}

/* d = a b + c for bfloat16 m16n8k16, c given as (row g, row g + 8) values,
 * or accumulating into d. */
__device__ __forceinline__ void mma_bf16_rows(float (&d)[4], const uint32_t (&a)[4],
                                              uint32_t b0, uint32_t b1, float c_lo,
                                              float c_hi)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%10,%11,%11};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(c_lo),
        "f"(c_hi));
#endif
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

/* The values (exponents minus the row's max; the max is -neg_m) of one group
 * of kTcGroupTiles n8 tiles, from n8 tile j0 of the shared tile, for the
 * thread's 4 rows (r = 2 i + h: m16 tile i, row g + 8 h). value[r][2 jj + e]
 * is point 8 (j0 + jj) + 2 t + e. CHECK: exclude a query's own point. */
template <int D, bool CHECK>
__device__ __forceinline__ void tc_small_values(
    const float *__restrict__ tile, int j0, const uint32_t (&a)[2][kTcSteps][4],
    const float (&neg_m)[4], int64_t first, const int64_t (&qg)[4],
    float (&value)[4][2 * kTcGroupTiles])
{
  constexpr int KS = kTcSteps;
  const int lane = threadIdx.x % 32, t = lane % 4;
#pragma unroll
  for (int jj = 0; jj < kTcGroupTiles; jj++) {
    /* this lane's B fragments: step s takes b[2 s] and b[2 s + 1] */
    const uint4 w = *reinterpret_cast<const uint4 *>(tile + ((j0 + jj) * 32 + lane) * 4);
    const uint32_t b[2 * KS] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 2; i++) {
      float d[4];
      mma_bf16_rows(d, a[i][0], b[0], b[1], neg_m[2 * i], neg_m[2 * i + 1]);
#pragma unroll
      for (int s = 1; s < KS; s++) mma_bf16(d, a[i][s], b[2 * s], b[2 * s + 1]);
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
          float v = d[2 * h + e];
          if (CHECK && first + 8 * (j0 + jj) + 2 * t + e == qg[2 * i + h]) v = -INFINITY;
          value[2 * i + h][2 * jj + e] = v;
        }
    }
  }
}

/* One 256-point shared tile, software-pipelined by one group as small_tile:
 * the MMAs of group k are issued while the exp2s of group k - 1 drain. When
 * a group's check fails, its values are computed again with the max left
 * out (absolute exponents) to set the new max, and the next group, already
 * computed against the old max, is computed again. */
template <int D, bool CHECK>
__device__ __forceinline__ void tc_small_tile(const float *__restrict__ tile,
                                              const uint32_t (&a)[2][kTcSteps][4],
                                              float (&neg_m)[4], float (&s)[4],
                                              float (&ts)[4], int64_t first,
                                              const int64_t (&qg)[4])
{
  constexpr int R = 4, G = kTcGroupTiles, N8 = kUnit / 8;
  /* the values are relative to the max already: group_exps subtracts 0 */
  const float zero[R] = {0.0f, 0.0f, 0.0f, 0.0f};
  float value[R][2 * G], gsum[R];
  tc_small_values<D, CHECK>(tile, 0, a, neg_m, first, qg, value);
  /* warp-uniform: the branch below issues MMAs, which need the whole warp */
  bool far = __any_sync(0xffffffffu, group_exps<kTcPolyExps>(value, zero, gsum));
#pragma unroll 1
  for (int j = G; j <= N8; j += G) {
    if (j < N8) tc_small_values<D, CHECK>(tile, j, a, neg_m, first, qg, value);
    if (__builtin_expect(far, 0)) { /* resolve group j - G */
      float again[R][2 * G];
      tc_small_values<D, CHECK>(tile, j - G, a, zero, first, qg, again);
#pragma unroll
      for (int r = 0; r < R; r++)
        if (!(gsum[r] <= (float) kLazyLimit)) {
          float m = -neg_m[r];
          group_fix_one(again[r], m, s[r], ts[r], gsum[r]);
          neg_m[r] = -m;
        }
      if (j < N8) tc_small_values<D, CHECK>(tile, j, a, neg_m, first, qg, value);
    }
#pragma unroll
    for (int r = 0; r < R; r++) ts[r] += gsum[r];
    if (j < N8) far = __any_sync(0xffffffffu, group_exps<kTcPolyExps>(value, zero, gsum));
  }
}

/* Block (bx, by): queries [128 bx, 128 bx + 128), warp w the 32 from
 * 32 w, against the by-th split of the training range; 256-point tiles
 * double-buffered with cp.async. */
template <int D>
__global__ void __launch_bounds__(kThreads, real_traits<float>::min_blocks)
    kde_tc_small_kernel(const kde_args<float> a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int KS = kTcSteps, R = 4;
  constexpr int tile_elems = kUnit * kTcPointWords;
  extern __shared__ float4 smem_f4[];
  float *smem = reinterpret_cast<float *>(smem_f4);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries + 32 * warp;

  /* A fragments of step s: register x holds row g + 8 (x % 2) at j = 4 s +
   * 2 (x / 2) and the next j (low half first); row r = 2 i + h is query
   * q0 + 16 i + g + 8 h */
  uint32_t afrag[2][KS][4];
  int64_t qg[R];
  float neg_m[R], s[R];
#pragma unroll
  for (int i = 0; i < 2; i++) {
    uint32_t piece[2][3][D];
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int64_t row = q0 + 16 * i + g + 8 * h;
      qg[2 * i + h] = a.query_base + row;
#pragma unroll
      for (int c = 0; c < D; c++) {
        uint32_t p[3];
        bf16_split3(a.query[row + c * a.ldq], p);
#pragma unroll
        for (int u = 0; u < 3; u++) piece[h][u][c] = p[u];
      }
    }
#pragma unroll
    for (int st = 0; st < KS; st++)
#pragma unroll
      for (int x = 0; x < 4; x++)
      {
        const int j = 4 * st + 2 * (x / 2);
        afrag[i][st][x] = tc_query_entry<D>(piece[x % 2], t, j) |
                          tc_query_entry<D>(piece[x % 2], t, j + 1) << 16;
      }
  }
#pragma unroll
  for (int r = 0; r < R; r++) {
    neg_m[r] = FLT_MAX; /* m = lowest(): the first group sets it */
    s[r] = 0;
  }

  int64_t split_count;
  const int64_t p0 = block_split(a, split_count);
  const int64_t n_tiles = split_count / kUnit;
  const float *src = a.train + p0 * kTcPointWords;

  block_copy_async(smem, src, tile_elems * sizeof(float));
  async_commit();
  for (int64_t tile = 0; tile < n_tiles; tile++) {
    if (tile + 1 < n_tiles)
      block_copy_async(smem + ((tile + 1) & 1) * tile_elems, src + (tile + 1) * tile_elems,
                       tile_elems * sizeof(float));
    async_commit();
    async_wait_all_but_newest();
    __syncthreads();
    const float *xs = smem + (tile & 1) * tile_elems;
    const int64_t first = a.train_base + p0 + tile * kUnit;
    float ts[R] = {0.0f, 0.0f, 0.0f, 0.0f};
    /* warp-uniform, for the MMAs: the warp's 32 queries against the tile */
    const bool check = a.leave_one_out && a.query_base + q0 < first + kUnit &&
                       first <= a.query_base + q0 + 31;
    if (check)
      tc_small_tile<D, true>(xs, afrag, neg_m, s, ts, first, qg);
    else
      tc_small_tile<D, false>(xs, afrag, neg_m, s, ts, first, qg);
#pragma unroll
    for (int r = 0; r < R; r++) s[r] += ts[r];
    __syncthreads(); /* the next prefetch overwrites this buffer */
  }
  float m[R];
#pragma unroll
  for (int r = 0; r < R; r++) m[r] = -neg_m[r];
  write_quad_partials(a, q0, m, s);
#else
  __trap();
#endif
}

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
  const double *model_center;
  double scale;             /* packed value = (z - model_center) scale */
  T *dst;
  double *offset;           /* [rows]: |packed row|^2 / 2 (expanded form) */
};

/* Columns c0 .. c0 + 7 of a packed row (zero past dim and for padding
 * rows). Whitening is done in double, as kde_whiten() does on the CPU, and
 * the coordinates are then centred and scaled as the training points were. */
constexpr int kPackColumns = 8;
template <typename T>
__device__ __forceinline__ void pack_columns(const kde_pack_args<T> &a, int64_t row,
                                             int c0, T (&v)[kPackColumns])
{
  constexpr int C = kPackColumns;
  double z[C];
#pragma unroll
  for (int u = 0; u < C; u++) z[u] = 0;
  if (c0 >= a.dim) {
    /* padding dimensions of the tensor-core layout: zeros */
  } else if (row < a.rows && a.transform != NULL) {
    for (int k = 0; k < a.dim; k++) {
      const double xk = a.raw[k * a.ldr + row] - a.center[k];
      const double *t = a.transform + k;
#pragma unroll
      for (int u = 0; u < C; u++)
        if (c0 + u < a.dim) z[u] = fma(xk, t[(int64_t) (c0 + u) * a.dim], z[u]);
    }
  } else if (row < a.rows) {
#pragma unroll
    for (int u = 0; u < C; u++)
      if (c0 + u < a.dim) z[u] = a.raw[(int64_t) (c0 + u) * a.ldr + row];
  }
#pragma unroll
  for (int u = 0; u < C; u++)
    v[u] = row < a.rows && c0 + u < a.dim
               ? (T) ((z[u] - a.model_center[c0 + u]) * a.scale) : (T) 0;
}

/* Packs a row, 8 columns at a time in registers, its values multiplied by
 * shrink in the wide tensor-core layout (TC_WIDE). Returns |row|^2 of the
 * unshrunk values; most: their largest magnitude. */
template <typename T, bool TC_WIDE>
__device__ __forceinline__ double pack_row(const kde_pack_args<T> &a, int64_t row,
                                           float shrink, float &most)
{
  constexpr int C = kPackColumns;
  const int out_dims = TC_WIDE ? 16 * a.k16 : a.dim;
  double norm2 = 0;
  most = 0.0f;
  for (int c0 = 0; c0 < out_dims; c0 += C) {
    T v[C];
    pack_columns(a, row, c0, v);
#pragma unroll
    for (int u = 0; u < C; u++) {
      norm2 += (double) v[u] * (double) v[u];
      most = fmaxf(most, fabsf((float) v[u]));
    }
    if (TC_WIDE) {
      uint32_t *tile = reinterpret_cast<uint32_t *>(a.dst) + (row / 16) * a.k16 * 256;
#pragma unroll
      for (int u = 0; u < C; u += 2) {
        uint32_t big[2], small[2];
        f16_split2((float) v[u] * shrink, big[0], small[0]);
        f16_split2((float) v[u + 1] * shrink, big[1], small[1]);
        uint32_t *at = tile + tc_wide_query_word(row % 16, c0 + u);
        at[0] = big[0] | big[1] << 16;
        at[128] = small[0] | small[1] << 16;
      }
    } else {
#pragma unroll
      for (int u = 0; u < C; u++)
        if (c0 + u < out_dims) a.dst[(int64_t) (c0 + u) * a.ldq + row] = v[u];
    }
  }
  return norm2;
}

/* One thread per row. In the wide tensor-core layout a row beyond
 * kF16Limit (rare: thousands of bandwidths out) is packed again, scaled
 * down by a power of two, and its scale goes after the fragments. */
template <typename T, bool TC_WIDE>
__global__ void kde_pack_kernel(const kde_pack_args<T> a)
{
  const int64_t row = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= a.ldq) return;
  float most;
  const double norm2 = pack_row<T, TC_WIDE>(a, row, 1.0f, most);
  if (TC_WIDE) {
    float row_scale = 1.0f;
    if (!(most < kF16Limit)) {
      int e = 0;
      (void) frexpf(most, &e); /* most < 2^e */
      row_scale = ldexpf(1.0f, e - kF16LimitLog2);
      (void) pack_row<T, TC_WIDE>(a, row, 1.0f / row_scale, most);
    }
    reinterpret_cast<float *>(a.dst)[tc_wide_scale_offset(a.ldq, a.k16) + row] = row_scale;
  }
  if (row < a.rows) a.offset[row] = 0.5 * norm2;
}

/*
 * acc[i] = merge(acc[i] (or empty when first), the partials of every split).
 * 2^lanes_log2 consecutive threads share a query: each merges a strided
 * subset of the splits, then they combine by shuffles (few queries with
 * thousands of splits would otherwise be one long serial chain each).
 */
template <typename T>
__global__ void kde_merge_kernel(const T *__restrict__ part_max,
                                 const T *__restrict__ part_sum, int64_t ldq,
                                 int n_splits, int64_t n_query, double *acc_max,
                                 double *acc_sum, int first, int lanes_log2)
{
  const int lanes = 1 << lanes_log2;
  const int64_t gid = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t i = gid >> lanes_log2;
  const int sub = (int) (gid & (lanes - 1));
  const bool valid = i < n_query;
  kde_lse_2 st = kde_lse_empty_2();
  if (valid) {
    /* 8 loads in flight per thread before the (serial) merges */
    for (int sp0 = sub; sp0 < n_splits; sp0 += 8 * lanes) {
      T pm[8], ps[8];
#pragma unroll
      for (int u = 0; u < 8; u++) {
        const int sp = sp0 + u * lanes;
        pm[u] = sp < n_splits ? part_max[sp * ldq + i] : (T) -INFINITY;
        ps[u] = sp < n_splits ? part_sum[sp * ldq + i] : (T) 0;
      }
#pragma unroll
      for (int u = 0; u < 8; u++)
        st = kde_lse_merge_2(st, kde_lse_make_2((double) pm[u], (double) ps[u]));
    }
  }
  for (int offset = lanes / 2; offset > 0; offset /= 2) {
    const double other_max = __shfl_xor_sync(0xffffffffu, st.max, offset);
    const double other_sum = __shfl_xor_sync(0xffffffffu, st.sum, offset);
    st = kde_lse_merge_2(st, kde_lse_make_2(other_max, other_sum));
  }
  if (valid && sub == 0) {
    if (!first) st = kde_lse_merge_2(kde_lse_make_2(acc_max[i], acc_sum[i]), st);
    acc_max[i] = st.max;
    acc_sum[i] = st.sum;
  }
}

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

__global__ void kde_finish_kernel(const double *__restrict__ acc_max,
                                  const double *__restrict__ acc_sum, double *offset,
                                  int64_t n, double log_const, int expanded)
{
  const int64_t i = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  offset[i] = finish_log_density(kde_lse_make_2(acc_max[i], acc_sum[i]), offset[i],
                                 expanded, log_const);
}

/* ------------------------------------------------------------------------ */
/* The one dispatch point: runtime (kernel, d) -> template instantiation     */
/* ------------------------------------------------------------------------ */

template <typename T> using kde_kernel_fn = void (*)(kde_args<T>);

/* How the training points are stored on the device, and which kernel reads
 * them. The tensor-core layouts serve the single-precision Gaussian. */
enum kde_layout {
  KDE_LAYOUT_PLAIN,   /* 32-point tiles of (d + 1) rows: small, wide kernels */
  KDE_LAYOUT_TC_WIDE, /* kde_tc_wide_kernel, d >= kTcWideMinDim */
  KDE_LAYOUT_TC_SMALL /* kde_tc_small_kernel, d = kTcSmallDim */
};

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

template <int K, typename T> kde_kernel_fn<T> select_for_dim(int dim)
{
  switch (dim) {
  case 1: return kde_small_kernel<K, T, 1>;
  case 2: return kde_small_kernel<K, T, 2>;
  case 3: return kde_small_kernel<K, T, 3>;
  case 4: return kde_small_kernel<K, T, 4>;
  default: return kde_wide_kernel<K, T>;
  }
}

template <typename T> kde_kernel_fn<T> select_kernel(int kernel, int dim, int layout)
{
  if constexpr (std::is_same<T, float>::value) {
    if (layout == KDE_LAYOUT_TC_WIDE) return kde_tc_wide_kernel;
    if (layout == KDE_LAYOUT_TC_SMALL) return kde_tc_small_kernel<kTcSmallDim>;
  }
  return dispatch_kernel(kernel, [dim](auto k) {
    return select_for_dim<decltype(k)::value, T>(dim);
  });
}

} // namespace

/* ------------------------------------------------------------------------ */
/* Host side: the model                                                      */
/* ------------------------------------------------------------------------ */

/* A device allocation that evaluations reuse while it is large enough. */
typedef struct {
  void *ptr;
  size_t bytes;
} kde_buffer;

typedef struct {
  int device;
  int multiprocessors;
  size_t smem_optin;      /* max dynamic shared memory per block */
  double budget;          /* bytes this model and its evaluations may use */
  void *train;            /* resident replica (NULL when streaming) */
  cudaStream_t stream;    /* packing and kernels */
  cudaStream_t upload;    /* raw query uploads, ahead of the kernels */
  cudaEvent_t raw_ready;  /* upload -> stream: the raw batch has arrived */
  cudaEvent_t raw_free;   /* stream -> upload: the raw batch is packed */
  double *model_center;   /* dim: the model's centre, on this device */
  double *whitening;      /* dim + dim x dim: center, transform (lazily) */
  int whitening_serial;   /* model->whitening_serial uploaded here */
  /* Scratch of evaluations: raw query batch, packed queries, partial
   * states of the splits, accumulated states (max, sum, |q|^2 / 2), and a
   * training shard when streaming. */
  kde_buffer raw, query, part, acc, shard;
} kde_replica;

struct kde_cuda_model {
  int kernel;
  int precision;
  int64_t n_train;
  int64_t dim;
  int64_t n_points;     /* n_train padded to a multiple of kUnit */
  size_t elem;          /* sizeof(T) */
  double *center;       /* dim: training mean, subtracted from both sets */
  double scale;         /* then coordinates are multiplied by this */
  int expanded;         /* Gaussian, d >= 3: aux = log2 w - |x|^2 / 2 */
  int layout;           /* enum kde_layout */
  int k16;              /* KDE_LAYOUT_TC_WIDE: ceil(dim / 16) */
  int64_t tile_elems;   /* values per 32-point storage tile */
  int64_t query_elems;  /* values per query row on the device */
  int resident;         /* whole training set on every device */
  void *host_train;     /* packed copy, kept when streaming */
  double *whitening;    /* host copy of the last queries' whitening */
  int whitening_serial; /* bumped when it changes; 0: none yet */
  int n_devices;
  kde_replica *rep;
};

#ifdef KDE_CUDA_BENCH
/* Harness-only counters of the last evaluation (not part of the API). */
extern "C" {
double kde_cuda_bench_kernel_ms = 0; /* event time of main + merge kernels */
int64_t kde_cuda_bench_steps = 0;
int64_t kde_cuda_bench_batches = 0;
int64_t kde_cuda_bench_launches = 0;
int kde_cuda_bench_max_splits = 0;
int kde_cuda_bench_mode = 0; /* 0: queries split over devices, 1: training */
int kde_cuda_bench_no_mma = 0; /* models made while set use FMA kernels */
}
#endif

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Shared memory of kde_tc_wide_kernel: the block's query fragments and two
 * storage tiles. */
static size_t tc_wide_smem_bytes(int64_t k16)
{
  return (size_t) (kWarps * 2 * k16 * 256 + 2 * (k16 * 512 + kTileWidth)) * sizeof(float);
}

static int kernel_is_lse(int kernel) { return !kde_kernel_is_compact(kernel); }

/* Scale applied to centred coordinates (see kernels.h for the profiles). */
static double coordinate_scale(int kernel)
{
  switch (kernel) {
  /* log_profile(s2') = -s2'/2 = log2 k(s2) = -log2(e) s2 / 2 */
  case KDE_GAUSSIAN: return sqrt(kLog2e);
  /* log_profile(s2') = -sqrt(s2') = log2 k(s2) = -log2(e) sqrt(s2) */
  case KDE_EXPONENTIAL: return kLog2e;
  default: return 1.0; /* compact kernels: the linear profile, unscaled */
  }
}

/* Device bytes per training point (a 32-point storage tile / 32). */
static size_t point_bytes(const kde_cuda_model *model)
{
  return (size_t) model->tile_elems * model->elem / kTileWidth;
}

/* Coordinate k of training point j as every layout stores it: centred on
 * the training mean and scaled (the packing kernel does the same to the
 * queries). */
static double train_coordinate(const kde_training_set *train,
                               const kde_cuda_model *model, int64_t j, int64_t k)
{
  return (train->train[k * train->n_train + j] - model->center[k]) * model->scale;
}

/* aux of the tensor-core layouts: log2 w - |x|^2 / 2, with norm2 = |x|^2 of
 * the stored float coordinates; -inf for a padding point. */
static float expanded_aux(const kde_training_set *train, int64_t j, double norm2)
{
  return j < train->n_train ? (float) (train->log_weight[j] * kLog2e - 0.5 * norm2)
                            : -INFINITY;
}

/* Whether every training coordinate lies within kF16Limit, as the wide
 * tensor-core layout needs (queries are scaled per row; points are not). */
static int train_fits_f16(const kde_training_set *train, const kde_cuda_model *model)
{
  for (int64_t k = 0; k < model->dim; k++)
    for (int64_t j = 0; j < train->n_train; j++)
      if (!(fabsf((float) train_coordinate(train, model, j, k)) < kF16Limit)) return 0;
  return 1;
}

/* Wide tensor-core storage tiles: big and small fp16 parts of the
 * coordinates in B fragment order, then aux = log2 w - |x|^2 / 2 of the
 * float coordinates. Padding (dimensions up to 16 k16, null points) is
 * zero, aux -inf. Reads the column-major input one column at a time. */
static int pack_train_tc_wide(const kde_training_set *train,
                              const kde_cuda_model *model, uint32_t *dst)
{
  const int64_t n = train->n_train, d = model->dim;
  const int64_t n_tiles = model->n_points / kTileWidth;
  double *norm2 = (double *) calloc((size_t) n, sizeof(double));
  if (norm2 == NULL) return -1;
  memset(dst, 0, (size_t) n_tiles * model->tile_elems * sizeof(uint32_t));
  for (int64_t k = 0; k < d; k++) {
    for (int64_t j = 0; j < n; j++) {
      const float v = (float) train_coordinate(train, model, j, k);
      uint32_t big, small;
      f16_split2(v, big, small);
      uint32_t *at = dst + (j / kTileWidth) * model->tile_elems +
                     tc_wide_train_word(j % kTileWidth, k);
      at[0] |= big << (16 * (k % 2));
      at[2] |= small << (16 * (k % 2));
      norm2[j] += (double) v * v;
    }
  }
  for (int64_t j = 0; j < model->n_points; j++) {
    uint32_t *aux = dst + (j / kTileWidth) * model->tile_elems + (int64_t) model->k16 * 512;
    aux[j % kTileWidth] = float_bits(expanded_aux(train, j, j < n ? norm2[j] : 0.0));
  }
  free(norm2);
  return 0;
}

/* Small-d tensor-core storage (see kde_tc_small_kernel): per n8 tile and
 * lane (g, t), point g's 8 bfloat16 entries of lane t, packed in pairs (low
 * half first). aux = log2 w - |x|^2 / 2 of the float coordinates; a null
 * or zero-weight point has aux pieces (-inf, 0, 0), so its pairs are -inf. */
static void pack_train_tc_small(const kde_training_set *train,
                                const kde_cuda_model *model, uint32_t *dst)
{
  const int64_t n = train->n_train, d = model->dim;
  memset(dst, 0, (size_t) model->n_points * kTcPointWords * sizeof(uint32_t));
  for (int64_t j = 0; j < model->n_points; j++) {
    uint32_t piece[4][3] = {{0}}; /* coordinates 0..d-1, aux in 3 */
    double norm2 = 0;
    for (int64_t k = 0; k < d && j < n; k++) {
      const float v = (float) train_coordinate(train, model, j, k);
      bf16_split3(v, piece[k]);
      norm2 += (double) v * v;
    }
    bf16_split3(expanded_aux(train, j, norm2), piece[3]);
    /* point j: n8 tile j / 8, column g = j % 8, lanes 4 g + t */
    uint32_t *lanes = dst + (j / 8) * 8 * kTcPointWords + (j % 8) * kTcPointWords;
    for (int t = 0; t < 4; t++) {
      if (t < 3 && t >= d) continue;
      for (int r = 0; r < 4; r++)
        lanes[4 * t + r] = tc_point_entry(piece[t], t, 2 * r) |
                           tc_point_entry(piece[t], t, 2 * r + 1) << 16;
    }
  }
}

/* Pack the training set: storage tiles of 32 points, dimension-major, then
 * the aux row; null points (coordinates 0, weight 0) pad to n_points. */
template <typename T>
static void pack_train(const kde_training_set *train, const kde_cuda_model *model,
                       T *dst)
{
  const int64_t n = train->n_train, d = model->dim, rows = d + 1;
  const int lse = kernel_is_lse(model->kernel);
  for (int64_t k = 0; k < d; k++) {
    for (int64_t j = 0; j < model->n_points; j++) {
      T *at = dst + (j / kTileWidth) * rows * kTileWidth + k * kTileWidth +
              j % kTileWidth;
      *at = j < n ? (T) train_coordinate(train, model, j, k) : (T) 0;
    }
  }
  for (int64_t j = 0; j < model->n_points; j++) {
    T *tile = dst + (j / kTileWidth) * rows * kTileWidth + j % kTileWidth;
    double aux;
    if (j >= n) {
      aux = lse ? -INFINITY : 0.0;
    } else if (!lse) {
      aux = train->weight[j];
    } else {
      aux = train->log_weight[j] * kLog2e;
      if (model->expanded) {
        double norm2 = 0;
        for (int64_t k = 0; k < d; k++) {
          const double v = (double) tile[k * kTileWidth];
          norm2 += v * v;
        }
        aux -= 0.5 * norm2; /* -inf stays -inf */
      }
    }
    tile[d * kTileWidth] = (T) aux;
  }
}

extern "C" int kde_cuda_compiled(void) { return 1; }

extern "C" int kde_cuda_device_count(kde_status *status)
{
  int count = 0;
  cudaError_t err;
  kde_status_clear(status);
  err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void) cudaGetLastError();
    kde_status_set(status, KDE_ERR_UNAVAILABLE,
                   "no usable CUDA device: cudaGetDeviceCount failed with %s"
                   " (%s); check that an NVIDIA GPU and its driver are"
                   " installed and visible (CUDA_VISIBLE_DEVICES)",
                   cudaGetErrorName(err), cudaGetErrorString(err));
    return 0;
  }
  if (count <= 0) {
    kde_status_set(status, KDE_ERR_UNAVAILABLE,
                   "no usable CUDA device: the driver reports 0 devices");
    return 0;
  }
  return count;
}

extern "C" void kde_cuda_get_device_info(int device, kde_cuda_device_info *info,
                                         kde_status *status)
{
  cudaDeviceProp prop;
  size_t free_b = 0, total_b = 0;
  int count, prev = -1;
  kde_status_clear(status);
  if (info == NULL) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "`info` must not be NULL");
    return;
  }
  memset(info, 0, sizeof *info);
  count = kde_cuda_device_count(status);
  if (count == 0) return;
  if (device < 0 || device >= count) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "`device` must be in 0..%d, not %d", count - 1, device);
    return;
  }
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  KDE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  KDE_CUDA_TRY(cudaSetDevice(device));
  KDE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  snprintf(info->name, sizeof info->name, "%s", prop.name);
  info->total_memory = (double) total_b;
  info->free_memory = (double) free_b;
  info->compute_major = prop.major;
  info->compute_minor = prop.minor;
  info->multiprocessors = prop.multiProcessorCount;
cleanup:
  if (prev >= 0) (void) cudaSetDevice(prev);
}

static void buffer_release(kde_buffer *buffer)
{
  if (buffer->ptr != NULL) (void) cudaFree(buffer->ptr);
  buffer->ptr = NULL;
  buffer->bytes = 0;
}

/* Makes `buffer` (on the current device) hold at least `bytes`. */
static int buffer_reserve(kde_buffer *buffer, size_t bytes, kde_status *status)
{
  if (buffer->ptr != NULL && buffer->bytes >= bytes) return 0;
  buffer_release(buffer);
  KDE_CUDA_TRY(cudaMalloc(&buffer->ptr, bytes > 0 ? bytes : 1));
  buffer->bytes = bytes;
  return 0;
cleanup:
  return -1;
}

/* The evaluation scratch of a replica (its device is current). */
static size_t scratch_bytes(const kde_replica *rep)
{
  return rep->raw.bytes + rep->query.bytes + rep->part.bytes + rep->acc.bytes +
         rep->shard.bytes;
}
static void scratch_release(kde_replica *rep)
{
  buffer_release(&rep->raw);
  buffer_release(&rep->query);
  buffer_release(&rep->part);
  buffer_release(&rep->acc);
  buffer_release(&rep->shard);
}

extern "C" void kde_cuda_model_free(kde_cuda_model *model)
{
  int prev = -1;
  if (model == NULL) return;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (model->rep != NULL) {
    for (int r = 0; r < model->n_devices; r++) {
      kde_replica *rep = &model->rep[r];
      if (rep->stream == NULL) continue; /* never set up: nothing on it */
      if (cudaSetDevice(rep->device) != cudaSuccess) continue;
      (void) cudaStreamSynchronize(rep->stream);
      if (rep->upload != NULL) {
        (void) cudaStreamSynchronize(rep->upload);
        (void) cudaStreamDestroy(rep->upload);
      }
      (void) cudaStreamDestroy(rep->stream);
      if (rep->raw_ready != NULL) (void) cudaEventDestroy(rep->raw_ready);
      if (rep->raw_free != NULL) (void) cudaEventDestroy(rep->raw_free);
      if (rep->train != NULL) (void) cudaFree(rep->train);
      if (rep->model_center != NULL) (void) cudaFree(rep->model_center);
      if (rep->whitening != NULL) (void) cudaFree(rep->whitening);
      scratch_release(rep);
    }
  }
  (void) cudaGetLastError();
  free(model->rep);
  free(model->host_train);
  free(model->center);
  free(model->whitening);
  free(model);
  if (prev >= 0) (void) cudaSetDevice(prev);
}

extern "C" kde_cuda_model *kde_cuda_model_create(const kde_training_set *train,
                                                 int precision,
                                                 const int *devices,
                                                 int n_devices,
                                                 double memory_budget,
                                                 kde_status *status)
{
  kde_cuda_model *model = NULL;
  int count = 0, prev = -1, ok = 0, mma_ok = 1, gaussian_single;
  size_t train_bytes = 0, unit_bytes = 0, min_smem_optin = 0;
  double min_budget = 0;

  kde_status_clear(status);
  if (train == NULL || train->train == NULL || train->weight == NULL ||
      train->log_weight == NULL || train->n_train < 1 || train->dim < 1) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "the training set must have n_train >= 1, dim >= 1 and"
                   " non-NULL coordinates and weights");
    return NULL;
  }
  if (train->kernel < 0 || train->kernel >= KDE_N_KERNELS) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "unknown kernel code %d",
                   train->kernel);
    return NULL;
  }
  if (kernel_sums_logs(train->kernel) == (bool) kde_kernel_is_compact(train->kernel)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: kernel %d is not known to the CUDA backend"
                   " (kernel_sums_logs disagrees with kde_kernel_is_compact)",
                   train->kernel);
    return NULL;
  }
  if (precision != KDE_PRECISION_DOUBLE && precision != KDE_PRECISION_SINGLE) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "unknown precision code %d",
                   precision);
    return NULL;
  }
  if (train->dim > (1 << 20)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "dim = %lld is beyond the CUDA backend's limit of 2^20",
                   (long long) train->dim);
    return NULL;
  }
  if (devices == NULL || n_devices < 1) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "at least one device is needed");
    return NULL;
  }
  count = kde_cuda_device_count(status);
  if (count == 0) return NULL;
  for (int r = 0; r < n_devices; r++) {
    if (devices[r] < 0 || devices[r] >= count) {
      kde_status_set(status, KDE_ERR_ARGUMENT,
                     "device %d does not exist: this machine has %d CUDA"
                     " device%s (0..%d)",
                     devices[r], count, count == 1 ? "" : "s", count - 1);
      return NULL;
    }
  }

  KDE_CUDA_TRY(cudaGetDevice(&prev));
  KDE_HOST_ALLOC(model, 1, "the model");
  model->kernel = train->kernel;
  model->precision = precision;
  model->n_train = train->n_train;
  model->dim = train->dim;
  model->n_points = (train->n_train + kUnit - 1) / kUnit * kUnit;
  model->elem = precision == KDE_PRECISION_SINGLE ? sizeof(float) : sizeof(double);
  model->scale = coordinate_scale(train->kernel);
  model->expanded = train->kernel == KDE_GAUSSIAN && train->dim >= 3;
  model->n_devices = n_devices;
  KDE_HOST_ALLOC(model->rep, n_devices, "the device list");
  KDE_HOST_ALLOC(model->center, model->dim, "the training mean");

  for (int64_t k = 0; k < model->dim; k++) {
    const double *col = train->train + k * train->n_train;
    double sum = 0;
    for (int64_t j = 0; j < train->n_train; j++) sum += col[j];
    model->center[k] = sum / (double) train->n_train;
  }

  min_budget = -1;
  mma_ok = 1;
  for (int r = 0; r < n_devices; r++) {
    kde_replica *rep = &model->rep[r];
    size_t free_b = 0, total_b = 0;
    int value = 0;
    rep->device = devices[r];
    KDE_CUDA_TRY(cudaSetDevice(rep->device));
    KDE_CUDA_TRY(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount,
                                        rep->device));
    rep->multiprocessors = value;
    KDE_CUDA_TRY(cudaDeviceGetAttribute(
        &value, cudaDevAttrMaxSharedMemoryPerBlockOptin, rep->device));
    rep->smem_optin = (size_t) value;
    KDE_CUDA_TRY(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor,
                                        rep->device));
    if (value < 8) mma_ok = 0; /* mma.sync m16n8k16 (f16, bf16) needs sm_80 */
    KDE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    rep->budget = budget_bytes(memory_budget, free_b);
    KDE_CUDA_TRY(cudaStreamCreateWithFlags(&rep->stream, cudaStreamNonBlocking));
    KDE_CUDA_TRY(cudaStreamCreateWithFlags(&rep->upload, cudaStreamNonBlocking));
    KDE_CUDA_TRY(cudaEventCreateWithFlags(&rep->raw_ready, cudaEventDisableTiming));
    KDE_CUDA_TRY(cudaEventCreateWithFlags(&rep->raw_free, cudaEventDisableTiming));
    KDE_CUDA_TRY(cudaMalloc((void **) &rep->model_center, model->dim * sizeof(double)));
    KDE_CUDA_TRY(cudaMemcpy(rep->model_center, model->center, model->dim * sizeof(double),
                            cudaMemcpyHostToDevice));
    if (min_budget < 0 || rep->budget < min_budget) min_budget = rep->budget;
    if (r == 0 || rep->smem_optin < min_smem_optin) min_smem_optin = rep->smem_optin;
  }

  /* Storage layout: a tensor-core one for the single-precision Gaussian at
   * d = kTcSmallDim and d >= kTcWideMinDim (training points within fp16's
   * range, and the block's shared memory within the device's: d <= 288 on
   * an H100, where even at one block per SM it is 2.8x the FMA kernel at d =
   * 208), else 32-point tiles of (d + 1) rows. */
  gaussian_single = precision == KDE_PRECISION_SINGLE && train->kernel == KDE_GAUSSIAN;
#ifdef KDE_CUDA_BENCH
  if (kde_cuda_bench_no_mma) mma_ok = 0;
#endif
  model->layout = KDE_LAYOUT_PLAIN;
  if (gaussian_single && mma_ok && model->dim == kTcSmallDim)
    model->layout = KDE_LAYOUT_TC_SMALL;
  if (gaussian_single && mma_ok && model->dim >= kTcWideMinDim &&
      tc_wide_smem_bytes(ceil_div(model->dim, 16)) <= min_smem_optin &&
      train_fits_f16(train, model))
    model->layout = KDE_LAYOUT_TC_WIDE;
  model->query_elems = model->dim;
  if (model->layout == KDE_LAYOUT_TC_WIDE) {
    model->k16 = (int) ceil_div(model->dim, 16);
    model->tile_elems = (int64_t) model->k16 * 512 + kTileWidth;
    model->query_elems = (int64_t) model->k16 * 16 + 1; /* + the row scale */
  } else if (model->layout == KDE_LAYOUT_TC_SMALL) {
    model->tile_elems = (int64_t) kTileWidth * kTcPointWords;
  } else {
    model->tile_elems = (model->dim + 1) * kTileWidth;
  }

  unit_bytes = kUnit * point_bytes(model);
  train_bytes = (size_t) model->n_points * point_bytes(model);
  {
    size_t n_elems = (size_t) (model->n_points / kTileWidth) * model->tile_elems;
    model->host_train = malloc(n_elems * model->elem);
    if (model->host_train == NULL) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "out of host memory allocating %.0f bytes for the"
                     " training set", (double) n_elems * model->elem);
      goto cleanup;
    }
  }
  if (model->layout == KDE_LAYOUT_TC_SMALL) {
    pack_train_tc_small(train, model, (uint32_t *) model->host_train);
  } else if (model->layout == KDE_LAYOUT_TC_WIDE) {
    if (pack_train_tc_wide(train, model, (uint32_t *) model->host_train) != 0) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "out of host memory packing the training set");
      goto cleanup;
    }
  } else if (precision == KDE_PRECISION_SINGLE)
    pack_train<float>(train, model, (float *) model->host_train);
  else
    pack_train<double>(train, model, (double *) model->host_train);

  /* Resident when the training set takes at most half the budget; otherwise
   * stream shards of at most half the budget from the host copy. */
  model->resident = (double) train_bytes <= 0.5 * min_budget;
  if (!model->resident && 0.5 * min_budget < (double) unit_bytes) {
    kde_status_set(status, KDE_ERR_ALLOC,
                   "the GPU memory budget (%.0f bytes) is too small: streaming"
                   " the training set needs more than %.0f bytes per device;"
                   " raise options(kdegpu.gpu_memory = ...)",
                   min_budget, 2.0 * unit_bytes);
    goto cleanup;
  }
  if (model->resident) {
    for (int r = 0; r < n_devices; r++) {
      kde_replica *rep = &model->rep[r];
      KDE_CUDA_TRY(cudaSetDevice(rep->device));
      KDE_CUDA_TRY(cudaMalloc(&rep->train, train_bytes));
      KDE_CUDA_TRY(cudaMemcpy(rep->train, model->host_train, train_bytes,
                              cudaMemcpyHostToDevice));
    }
    free(model->host_train);
    model->host_train = NULL;
  }
  ok = 1;

cleanup:
  if (prev >= 0) (void) cudaSetDevice(prev);
  if (!ok) {
    kde_cuda_model_free(model);
    return NULL;
  }
  return model;
}

/* ------------------------------------------------------------------------ */
/* Host side: one evaluation                                                 */
/* ------------------------------------------------------------------------ */

/* One device's share of an evaluation. */
typedef struct {
  kde_replica *rep;
  int64_t q_lo, q_hi;       /* queries of this device */
  int64_t u_lo, u_hi;       /* training units of this device */
  int64_t shard_units;      /* units per step */
  int64_t ldq_max;          /* rows of a query batch */
  int split_cap;            /* partial states per row of a batch */
  double *state_max;        /* host, [q_hi - q_lo], this device's states */
  double *state_sum;        /* (when the host merges devices' states) */
  double *out;              /* or host results of q_lo.. (finished here) */
  /* kernel choice */
  void *fn;
  size_t smem;
  int chunk_dims, n_chunks;
  int concurrency;          /* resident blocks over all SMs */
  cudaEvent_t ev_start, ev_stop;
  /* cursor */
  int64_t q_next;           /* first query of the current batch */
  int64_t n_batch;          /* rows in the current batch */
  int64_t ldq;
  int64_t shard;            /* next shard within the current batch */
  int64_t step_units;       /* training units of the step in flight */
  int64_t raw_first;        /* the batch uploaded to rep->raw, if raw_rows */
  int64_t raw_rows;
  int batch_started;        /* this step packed a new batch */
  int batch_done;           /* this step finished the batch */
  int timed;
} kde_device_job;

/* Splits of the training range for one launch (grid.y). With 8 or more
 * waves of query blocks, none (the last wave costs at most 1/8). Otherwise
 * enough blocks for at least 4 waves (few queries, many training points),
 * each split at least kMinUnitsPerSplit units; among the candidates the
 * first whose last wave is nearly full (wave efficiency >= 96%), or else the
 * most efficient. */
static int choose_splits(const kde_device_job *job, int64_t blocks_q,
                         int64_t units)
{
  const int64_t conc = job->concurrency > 0 ? job->concurrency : 1;
  int64_t s_max = units / kMinUnitsPerSplit, s_lo, best = 1;
  double best_eff = -1;
  if (s_max > job->split_cap) s_max = job->split_cap;
  if (s_max > 65535) s_max = 65535;
  if (s_max < 1) s_max = 1;
  if (blocks_q >= 8 * conc) return 1;
  s_lo = ceil_div(4 * conc, blocks_q);
  if (s_lo > s_max) s_lo = s_max;
  for (int64_t s = s_lo; s <= s_max && s < s_lo + 64; s++) {
    /* the split count after rounding the split length to whole units */
    const int64_t actual = ceil_div(units, ceil_div(units, s));
    const int64_t blocks = blocks_q * actual;
    const double eff = (double) blocks / (double) (ceil_div(blocks, conc) * conc);
    if (eff > best_eff + 1e-9) {
      best_eff = eff;
      best = actual;
    }
    if (eff >= 0.96) break;
  }
  return (int) best;
}

/* Relative cost of a pair on the path a model takes (FMAs for the distance
 * or dot product, plus the exp), for the size of a step: double precision
 * runs about 5x slower, the wide tensor-core kernel about 4x faster. */
static double pair_cost(const kde_cuda_model *model)
{
  double cost = (double) model->dim + 4;
  if (model->precision == KDE_PRECISION_DOUBLE) cost *= 5;
  if (model->layout == KDE_LAYOUT_TC_WIDE) cost *= 0.25;
  return cost;
}

static int64_t batch_rows(const kde_device_job *job, int64_t first)
{
  return job->q_hi - first < job->ldq_max ? job->q_hi - first : job->ldq_max;
}

/* Starts the upload of raw query rows [first, first + rows) to rep->raw on
 * the upload stream, once the previous batch there has been packed. The
 * source is R's (pageable) memory: the call returns when the copy has left
 * it, while the device may still be running the previous batch. */
static int upload_raw(const kde_cuda_model *model, const kde_query_set *query,
                      kde_device_job *job, int64_t first, int64_t rows,
                      kde_status *status)
{
  kde_replica *rep = job->rep;
  KDE_CUDA_TRY(cudaStreamWaitEvent(rep->upload, rep->raw_free, 0));
  KDE_CUDA_TRY(cudaMemcpy2DAsync(rep->raw.ptr, (size_t) job->ldq_max * sizeof(double),
                                 query->query + first,
                                 (size_t) query->n_query * sizeof(double),
                                 (size_t) rows * sizeof(double), (size_t) model->dim,
                                 cudaMemcpyHostToDevice, rep->upload));
  KDE_CUDA_TRY(cudaEventRecord(rep->raw_ready, rep->upload));
  job->raw_first = first;
  job->raw_rows = rows;
  return 0;
cleanup:
  return -1;
}

/* Packs the current batch (uploaded to rep->raw) into rep->query, and its
 * |q|^2 / 2 into the third row of rep->acc. */
template <typename T>
static int pack_batch(const kde_cuda_model *model, const kde_query_set *query,
                      kde_device_job *job, kde_status *status)
{
  kde_replica *rep = job->rep;
  kde_pack_args<T> args;
  const unsigned blocks = (unsigned) ceil_div(job->ldq, kPackThreads);
  args.raw = (const double *) rep->raw.ptr;
  args.ldr = job->ldq_max;
  args.rows = job->n_batch;
  args.ldq = job->ldq;
  args.dim = (int) model->dim;
  args.k16 = model->k16;
  args.center = query->transform != NULL ? rep->whitening : NULL;
  args.transform = query->transform != NULL ? rep->whitening + model->dim : NULL;
  args.model_center = rep->model_center;
  args.scale = model->scale;
  args.dst = (T *) rep->query.ptr;
  args.offset = (double *) rep->acc.ptr + 2 * job->ldq_max;
  KDE_CUDA_TRY(cudaStreamWaitEvent(rep->stream, rep->raw_ready, 0));
  if constexpr (std::is_same<T, float>::value) {
    if (model->layout == KDE_LAYOUT_TC_WIDE)
      kde_pack_kernel<T, true><<<blocks, kPackThreads, 0, rep->stream>>>(args);
    else
      kde_pack_kernel<T, false><<<blocks, kPackThreads, 0, rep->stream>>>(args);
  } else {
    kde_pack_kernel<T, false><<<blocks, kPackThreads, 0, rep->stream>>>(args);
  }
  KDE_CUDA_LAUNCHED("query packing kernel");
  KDE_CUDA_TRY(cudaEventRecord(rep->raw_free, rep->stream));
  job->raw_rows = 0; /* consumed */
  return 0;
cleanup:
  return -1;
}

/* Enqueue one step of `job` (one query batch against one training shard)
 * on its device. Returns 0, or -1 with the status set. */
template <typename T>
static int enqueue_step(const kde_cuda_model *model, const kde_query_set *query,
                        kde_device_job *job, kde_status *status)
{
  kde_replica *rep = job->rep;
  kde_args<T> args;
  int64_t shard_first, shard_units, blocks_q;
  int splits, lanes_log2;
  const T *train;
  double *acc = (double *) rep->acc.ptr;
  dim3 grid;

  KDE_CUDA_TRY(cudaSetDevice(rep->device));
  job->batch_started = job->shard == 0;
  if (job->batch_started) {
    job->n_batch = batch_rows(job, job->q_next);
    job->ldq = ceil_div(job->n_batch, kBlockQueries) * kBlockQueries;
    if (job->raw_rows != job->n_batch || job->raw_first != job->q_next)
      if (upload_raw(model, query, job, job->q_next, job->n_batch, status) != 0)
        goto cleanup;
    if (pack_batch<T>(model, query, job, status) != 0) goto cleanup;
  }
  shard_first = job->u_lo + job->shard * job->shard_units;
  shard_units = job->shard_units;
  if (shard_units > job->u_hi - shard_first) shard_units = job->u_hi - shard_first;
  job->step_units = shard_units;
  if (model->resident) {
    train = (const T *) rep->train +
            shard_first * (kUnit / kTileWidth) * model->tile_elems;
  } else {
    KDE_CUDA_TRY(cudaMemcpyAsync(
        rep->shard.ptr,
        (const T *) model->host_train +
            shard_first * (kUnit / kTileWidth) * model->tile_elems,
        (size_t) shard_units * kUnit * point_bytes(model),
        cudaMemcpyHostToDevice, rep->stream));
    train = (const T *) rep->shard.ptr;
  }

  blocks_q = job->ldq / kBlockQueries;
  splits = choose_splits(job, blocks_q, shard_units);
  args.train = train;
  args.n_points = shard_units * kUnit;
  args.split_points = ceil_div(shard_units, splits) * kUnit;
  args.query = (const T *) rep->query.ptr;
  args.ldq = job->ldq;
  args.n_query = job->n_batch;
  args.part_max = (T *) rep->part.ptr;
  args.part_sum = (T *) rep->part.ptr + (size_t) job->split_cap * job->ldq_max;
  args.dim = (int) model->dim;
  args.chunk_dims = job->chunk_dims;
  args.n_chunks = job->n_chunks;
  args.leave_one_out = query->leave_one_out;
  args.query_base = job->q_next;
  args.train_base = shard_first * kUnit;
  args.tile_elems = model->tile_elems;
  args.k16 = model->k16;
  grid = dim3((unsigned) blocks_q, (unsigned) splits, 1);

  if (job->timed) KDE_CUDA_TRY(cudaEventRecord(job->ev_start, rep->stream));
  ((kde_kernel_fn<T>) job->fn)<<<grid, kThreads, job->smem, rep->stream>>>(args);
  KDE_CUDA_LAUNCHED("main kernel");
  lanes_log2 = 0;
  while ((1 << lanes_log2) < splits && lanes_log2 < 5) lanes_log2++;
  kde_merge_kernel<T><<<(unsigned) ceil_div(job->n_batch << lanes_log2, 256), 256,
                        0, rep->stream>>>(
      args.part_max, args.part_sum, job->ldq, splits, job->n_batch, acc,
      acc + job->ldq_max, job->shard == 0, lanes_log2);
  KDE_CUDA_LAUNCHED("merge kernel");
  job->batch_done = shard_first + shard_units >= job->u_hi;
  if (job->batch_done && job->out != NULL) {
    kde_finish_kernel<<<(unsigned) ceil_div(job->n_batch, 256), 256, 0, rep->stream>>>(
        acc, acc + job->ldq_max, acc + 2 * job->ldq_max, job->n_batch, query->log_const,
        model->expanded);
    KDE_CUDA_LAUNCHED("finishing kernel");
  }
  if (job->timed) KDE_CUDA_TRY(cudaEventRecord(job->ev_stop, rep->stream));
#ifdef KDE_CUDA_BENCH
  kde_cuda_bench_launches++;
  if (splits > kde_cuda_bench_max_splits) kde_cuda_bench_max_splits = splits;
#endif

  job->shard++;
  return 0;
cleanup:
  return -1;
}

/* After the step: the next batch's raw rows travel while this one runs. */
static int prefetch_next_batch(const kde_cuda_model *model,
                               const kde_query_set *query, kde_device_job *job,
                               kde_status *status)
{
  const int64_t next = job->q_next + job->n_batch;
  if (!job->batch_started || next >= job->q_hi) return 0;
  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  return upload_raw(model, query, job, next, batch_rows(job, next), status);
cleanup:
  return -1;
}

/* Once the step has finished: a finished batch's results, or its states and
 * |q|^2 / 2 for the host to merge, go straight into the host arrays. */
static int collect_batch(kde_device_job *job, double *query_offset,
                         kde_status *status)
{
  const double *acc = (const double *) job->rep->acc.ptr;
  const int64_t at = job->q_next - job->q_lo;
  const size_t bytes = (size_t) job->n_batch * sizeof(double);
  if (!job->batch_done) return 0;
  if (job->out != NULL) {
    KDE_CUDA_TRY(cudaMemcpy(job->out + at, acc + 2 * job->ldq_max, bytes,
                            cudaMemcpyDeviceToHost));
    goto next_batch;
  }
  KDE_CUDA_TRY(cudaMemcpy(job->state_max + at, acc, bytes, cudaMemcpyDeviceToHost));
  KDE_CUDA_TRY(cudaMemcpy(job->state_sum + at, acc + job->ldq_max, bytes,
                          cudaMemcpyDeviceToHost));
  KDE_CUDA_TRY(cudaMemcpy(query_offset + job->q_next, acc + 2 * job->ldq_max, bytes,
                          cudaMemcpyDeviceToHost));
next_batch:
  job->q_next += job->n_batch;
  job->shard = 0;
  job->batch_done = 0;
#ifdef KDE_CUDA_BENCH
  kde_cuda_bench_batches++;
#endif
  return 0;
cleanup:
  return -1;
}

/* Kernel choice, launch shape and batch sizes for one device. */
template <typename T>
static int prepare_job(const kde_cuda_model *model, kde_device_job *job,
                       kde_status *status)
{
  const int64_t d = model->dim;
  const size_t tsz = sizeof(T);
  const size_t merge_smem = 2 * (size_t) kWarps * kBlockQueries * tsz;
  const int64_t n_job = job->q_hi - job->q_lo;
  const int64_t units = job->u_hi - job->u_lo;
  double avail, per_query;
  int blocks_per_sm = 0;
  kde_kernel_fn<T> fn = select_kernel<T>(model->kernel, (int) d, model->layout);

  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  if (model->layout == KDE_LAYOUT_TC_WIDE) {
    job->chunk_dims = (int) d;
    job->n_chunks = 1;
    job->smem = tc_wide_smem_bytes(model->k16);
  } else if (model->layout == KDE_LAYOUT_TC_SMALL) {
    job->chunk_dims = (int) d;
    job->n_chunks = 1;
    job->smem = 2 * (size_t) kUnit * point_bytes(model);
  } else if (d <= 4) {
    job->chunk_dims = (int) d;
    job->n_chunks = 1;
    job->smem = 2 * (size_t) kUnit * (d + 1) * tsz;
  } else {
    size_t cap = job->rep->smem_optin < kWideSmemCap ? job->rep->smem_optin
                                                      : kWideSmemCap;
    /* sq: dc x 128, sx: 2 x (dc + 1) x 32 values */
    int64_t dc_max = ((int64_t) (cap / tsz) - 2 * kTileWidth) /
                     (kBlockQueries + 2 * kTileWidth);
    if (dc_max < 1) dc_max = 1;
    job->n_chunks = (int) ceil_div(d, dc_max);
    job->chunk_dims = (int) ceil_div(d, job->n_chunks);
    job->smem = ((size_t) job->chunk_dims * kBlockQueries +
                 2 * (size_t) (job->chunk_dims + 1) * kTileWidth) * tsz;
  }
  if (job->smem < merge_smem) job->smem = merge_smem;
  job->fn = (void *) fn;
  if (job->smem > 48 * 1024)
    KDE_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int) job->smem));
  KDE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks_per_sm, fn, kThreads, job->smem));
  if (blocks_per_sm < 1) blocks_per_sm = 1;
  job->concurrency = blocks_per_sm * job->rep->multiprocessors;

  /* Memory: the resident replica, or one shard, then query batches. */
  avail = job->rep->budget;
  if (model->resident) {
    avail -= (double) model->n_points * point_bytes(model);
    job->shard_units = units > 0 ? units : 1;
  } else {
    int64_t fit = (int64_t) (0.5 * job->rep->budget / (kUnit * point_bytes(model)));
    job->shard_units = units < fit ? units : fit;
    if (job->shard_units < 1) job->shard_units = 1;
    avail -= (double) job->shard_units * kUnit * point_bytes(model);
  }
  /* Half of the rest for query rows (raw and packed coordinates, the
   * accumulated states), half for the partial states of the splits. */
  per_query = (double) model->query_elems * tsz + (double) (d + 3) * sizeof(double);
  job->ldq_max = (int64_t) (0.5 * avail / per_query) / kBlockQueries * kBlockQueries;
  {
    const int64_t need = ceil_div(n_job, kBlockQueries) * kBlockQueries;
    if (job->ldq_max > need) job->ldq_max = need;
    if (job->ldq_max > kMaxBatchRows) job->ldq_max = kMaxBatchRows;
    /* bounded work per step, but never below a few full waves of blocks */
    int64_t rows = (int64_t) (kMaxWorkPerStep / pair_cost(model) /
                              ((double) job->shard_units * kUnit));
    int64_t floor_rows = (int64_t) 4 * job->concurrency * kBlockQueries;
    if (rows < floor_rows) rows = floor_rows;
    rows = rows / kBlockQueries * kBlockQueries;
    if (job->ldq_max > rows) job->ldq_max = rows;
    /* batches of equal size rather than a short last one */
    if (job->ldq_max >= kBlockQueries) {
      const int64_t n_batches = ceil_div(need, job->ldq_max);
      job->ldq_max = ceil_div(ceil_div(need, n_batches), kBlockQueries) * kBlockQueries;
    }
  }
  if (job->ldq_max < kBlockQueries) {
    kde_status_set(status, KDE_ERR_ALLOC,
                   "the GPU memory budget (%.0f bytes on device %d) leaves no"
                   " room for a batch of %d queries; raise"
                   " options(kdegpu.gpu_memory = ...) or use precision ="
                   " 'single'", job->rep->budget, job->rep->device,
                   kBlockQueries);
    goto cleanup;
  }
  {
    double cap = 0.5 * avail / ((double) job->ldq_max * 2 * tsz);
    int64_t most = units / kMinUnitsPerSplit; /* choose_splits never exceeds */
    /* nor does it ask for more than a few waves of blocks in all */
    const int64_t wave_rows = (int64_t) 16 * job->concurrency * kBlockQueries;
    if (most > wave_rows / job->ldq_max) most = wave_rows / job->ldq_max;
    if (most < 1) most = 1;
    if (most > 65535) most = 65535;
    job->split_cap = cap > (double) most ? (int) most : (int) cap;
    if (job->split_cap < 1) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "the GPU memory budget (%.0f bytes on device %d) is too"
                     " small for this evaluation; raise"
                     " options(kdegpu.gpu_memory = ...)",
                     job->rep->budget, job->rep->device);
      goto cleanup;
    }
  }
  return 0;
cleanup:
  return -1;
}

/* The device buffers of a job (its device is current). */
template <typename T>
static int reserve_scratch(const kde_cuda_model *model, kde_device_job *job,
                           kde_status *status)
{
  kde_replica *rep = job->rep;
  const size_t rows = (size_t) job->ldq_max;
  if (buffer_reserve(&rep->raw, rows * model->dim * sizeof(double), status) != 0 ||
      buffer_reserve(&rep->query, rows * model->query_elems * sizeof(T), status) != 0 ||
      buffer_reserve(&rep->part, 2 * (size_t) job->split_cap * rows * sizeof(T),
                     status) != 0 ||
      buffer_reserve(&rep->acc, 3 * rows * sizeof(double), status) != 0)
    return -1;
  if (!model->resident &&
      buffer_reserve(&rep->shard, (size_t) job->shard_units * kUnit * point_bytes(model),
                     status) != 0)
    return -1;
  return 0;
}

/* The queries' whitening on a replica's device, uploaded when it differs
 * from what is there (a fit keeps one, so usually once per model). */
static int sync_whitening(kde_cuda_model *model, const kde_query_set *query,
                          kde_replica *rep, kde_status *status)
{
  const int64_t d = model->dim;
  const size_t bytes = (size_t) (d + d * d) * sizeof(double);
  if (query->transform == NULL) return 0;
  if (model->whitening == NULL) {
    model->whitening = (double *) malloc(bytes);
    if (model->whitening == NULL) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "out of host memory allocating %.0f bytes for the whitening",
                     (double) bytes);
      return -1;
    }
  }
  if (model->whitening_serial == 0 ||
      memcmp(model->whitening, query->center, d * sizeof(double)) != 0 ||
      memcmp(model->whitening + d, query->transform, d * d * sizeof(double)) != 0) {
    memcpy(model->whitening, query->center, d * sizeof(double));
    memcpy(model->whitening + d, query->transform, d * d * sizeof(double));
    model->whitening_serial++;
  }
  if (rep->whitening_serial == model->whitening_serial) return 0;
  KDE_CUDA_TRY(cudaSetDevice(rep->device));
  if (rep->whitening == NULL) KDE_CUDA_TRY(cudaMalloc((void **) &rep->whitening, bytes));
  KDE_CUDA_TRY(cudaMemcpy(rep->whitening, model->whitening, bytes, cudaMemcpyHostToDevice));
  rep->whitening_serial = model->whitening_serial;
  return 0;
cleanup:
  return -1;
}

template <typename T>
static void log_density_impl(kde_cuda_model *model, const kde_query_set *query,
                             kde_interrupt_probe interrupted, double *out,
                             kde_status *status)
{
  const int64_t nq = query->n_query;
  const int n_dev = model->n_devices;
  const int64_t n_units = model->n_points / kUnit;
  kde_device_job *jobs = NULL;
  double *state_max = NULL, *state_sum = NULL, *query_offset = NULL;
  double total_pairs = 0, done_pairs = 0;
  int split_training, prev = -1, active, n_states_per_query, failed = 1;

  KDE_CUDA_TRY(cudaGetDevice(&prev));
  /* Few queries for several devices: split the training set instead. */
  split_training = n_dev > 1 && nq < (int64_t) n_dev * kMinQueriesPerDevice;
  n_states_per_query = split_training ? n_dev : 1;
#ifdef KDE_CUDA_BENCH
  kde_cuda_bench_kernel_ms = 0;
  kde_cuda_bench_steps = 0;
  kde_cuda_bench_batches = 0;
  kde_cuda_bench_launches = 0;
  kde_cuda_bench_max_splits = 0;
  kde_cuda_bench_mode = split_training;
#endif

  KDE_HOST_ALLOC(jobs, n_dev, "the device jobs");
  if (split_training) {
    KDE_HOST_ALLOC(state_max, (size_t) nq * n_states_per_query, "partial results");
    KDE_HOST_ALLOC(state_sum, (size_t) nq * n_states_per_query, "partial results");
    KDE_HOST_ALLOC(query_offset, nq, "query norms");
  }

  for (int r = 0; r < n_dev; r++) {
    kde_device_job *job = &jobs[r];
    job->rep = &model->rep[r];
    if (split_training) {
      job->q_lo = 0;
      job->q_hi = nq;
      job->u_lo = n_units * r / n_dev;
      job->u_hi = n_units * (r + 1) / n_dev;
      job->state_max = state_max + (size_t) r * nq;
      job->state_sum = state_sum + (size_t) r * nq;
      /* an empty share: nothing to do, states stay empty */
      for (int64_t i = 0; i < nq; i++) {
        job->state_max[i] = -INFINITY;
        job->state_sum[i] = 0;
      }
    } else {
      job->q_lo = nq * r / n_dev;
      job->q_hi = nq * (r + 1) / n_dev;
      job->u_lo = 0;
      job->u_hi = n_units;
      job->out = out + job->q_lo; /* each device finishes its own queries */
    }
    job->q_next = job->q_lo;
    if (job->q_hi <= job->q_lo || job->u_hi <= job->u_lo) {
      job->q_next = job->q_hi;
      continue;
    }
    total_pairs += (double) (job->q_hi - job->q_lo) * (double) (job->u_hi - job->u_lo);
    if (prepare_job<T>(model, job, status) != 0) goto cleanup;
    if (reserve_scratch<T>(model, job, status) != 0) goto cleanup;
    if (sync_whitening(model, query, job->rep, status) != 0) goto cleanup;
#ifdef KDE_CUDA_BENCH
    job->timed = 1;
    KDE_CUDA_TRY(cudaEventCreate(&job->ev_start));
    KDE_CUDA_TRY(cudaEventCreate(&job->ev_stop));
#endif
  }

  /* Round-robin: one step on every device that has work, the next batches'
   * uploads while those run, then wait for all; the interrupt probe runs
   * here, between steps, on this thread. */
  for (;;) {
    active = 0;
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      if (job->q_next >= job->q_hi) continue;
      if (enqueue_step<T>(model, query, job, status) != 0) goto cleanup;
      active++;
    }
    if (active == 0) break;
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      if (job->q_next >= job->q_hi) continue;
      if (prefetch_next_batch(model, query, job, status) != 0) goto cleanup;
    }
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      if (job->q_next >= job->q_hi) continue;
      KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
      KDE_CUDA_TRY(cudaStreamSynchronize(job->rep->stream));
#ifdef KDE_CUDA_BENCH
      {
        float ms = 0;
        KDE_CUDA_TRY(cudaEventElapsedTime(&ms, job->ev_start, job->ev_stop));
        kde_cuda_bench_kernel_ms += ms;
        kde_cuda_bench_steps++;
      }
#endif
      done_pairs += (double) job->n_batch * (double) job->step_units;
      if (collect_batch(job, query_offset, status) != 0) goto cleanup;
    }
    if (interrupted != NULL && interrupted(done_pairs / total_pairs)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
  }

  /* Split training: merge the devices' states and finish on the host. */
  for (int64_t i = 0; split_training && i < nq; i++) {
    kde_lse_2 st = kde_lse_make_2(state_max[i], state_sum[i]);
    for (int r = 1; r < n_states_per_query; r++)
      st = kde_lse_merge_2(st, kde_lse_make_2(state_max[(size_t) r * nq + i],
                                              state_sum[(size_t) r * nq + i]));
    out[i] = finish_log_density(st, query_offset[i], model->expanded, query->log_const);
  }
  failed = 0;

cleanup:
  if (jobs != NULL) {
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      kde_replica *rep = job->rep;
      if (rep == NULL || cudaSetDevice(rep->device) != cudaSuccess) continue;
      /* on an error path work may still be queued on buffers freed below */
      (void) cudaStreamSynchronize(rep->upload);
      (void) cudaStreamSynchronize(rep->stream);
      if (failed || scratch_bytes(rep) > kKeepScratchBytes) scratch_release(rep);
      if (job->ev_start) (void) cudaEventDestroy(job->ev_start);
      if (job->ev_stop) (void) cudaEventDestroy(job->ev_stop);
    }
    (void) cudaGetLastError();
  }
  free(jobs);
  free(state_max);
  free(state_sum);
  free(query_offset);
  if (prev >= 0) (void) cudaSetDevice(prev);
}

extern "C" void kde_cuda_log_density(kde_cuda_model *model,
                                     const kde_query_set *query,
                                     kde_interrupt_probe interrupted,
                                     double *out, kde_status *status)
{
  kde_status_clear(status);
  if (model == NULL || query == NULL || out == NULL ||
      (query->n_query > 0 && query->query == NULL) || query->n_query < 0) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "kde_cuda_log_density needs a model, a query set and an"
                   " output buffer");
    return;
  }
  if ((query->center == NULL) != (query->transform == NULL)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "the queries' whitening needs both a center and a"
                   " transform, or neither");
    return;
  }
  if (query->leave_one_out && query->n_query != model->n_train) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "leave-one-out needs the training points as queries:"
                   " n_query = %lld but n_train = %lld",
                   (long long) query->n_query, (long long) model->n_train);
    return;
  }
  if (query->n_query == 0) return;
  if (model->precision == KDE_PRECISION_SINGLE)
    log_density_impl<float>(model, query, interrupted, out, status);
  else
    log_density_impl<double>(model, query, interrupted, out, status);
}
