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
 *   the tensor cores as 3xTF32 (each operand split into a TF32 "big" and
 *   "small" part, three mma.sync per product), which keeps about 22 bits of
 *   each operand, then the same exp2 epilogue.
 * * Few queries and many training points: the training range is split across
 *   blockIdx.y; every block writes a partial (max, sum) per query and a second
 *   kernel merges them with kde_lse_merge_2 (kernels.h). The same merge
 *   combines training shards (a model whose training set does not fit the
 *   memory budget streams it from a host copy), query batches and devices.
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

#include <float.h>
#include <stdarg.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <thread>
#include <type_traits>
#include <vector>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"

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
/* Tensor-core (3xTF32) path: single-precision Gaussian with d >= this. */
constexpr int64_t kTf32MinDim = 16;
/* Its shared memory (block's query fragments + two tiles) must fit this. */
constexpr size_t kTf32SmemCap = 160 * 1024;
/* Wide kernel shared memory cap: leaves room for 2+ blocks per SM. */
constexpr size_t kWideSmemCap = 100 * 1024;
/* Below this many queries per device, split the training set, not the
 * queries, across devices. */
constexpr int64_t kMinQueriesPerDevice = 16384;
/* Default budget: this fraction of the free memory when the model is made. */
constexpr double kDefaultBudgetFraction = 0.5;
/* Largest query batch (rows), which bounds the pinned staging buffers. */
constexpr int64_t kMaxBatchRows = (int64_t) 1 << 22;
/* Pairs per step (one batch against one shard) in single precision, a few
 * seconds at most, so that the interrupt probe runs that often; double
 * precision runs about ten times fewer. */
constexpr double kMaxPairsPerStep = 4e12;

constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.69314718055994530942;

} // namespace

/* ------------------------------------------------------------------------ */
/* Status and the error macro                                                */
/* ------------------------------------------------------------------------ */

static void kde_status_clear(kde_status *status)
{
  if (status == NULL) return;
  status->code = KDE_OK;
  status->message[0] = '\0';
}

static void kde_status_set(kde_status *status, int code, const char *fmt, ...)
  __attribute__((format(printf, 3, 4)));

static void kde_status_set(kde_status *status, int code, const char *fmt, ...)
{
  va_list ap;
  if (status == NULL || status->code != KDE_OK) return; /* first error wins */
  status->code = code;
  va_start(ap, fmt);
  vsnprintf(status->message, sizeof status->message, fmt, ap);
  va_end(ap);
}

static const char *kde_basename(const char *path)
{
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

static void kde_cuda_record(kde_status *status, cudaError_t err,
                            const char *call, const char *file, int line)
{
  int alloc = err == cudaErrorMemoryAllocation;
  (void) cudaGetLastError(); /* clear a non-sticky error for the next call */
  kde_status_set(status, alloc ? KDE_ERR_ALLOC : KDE_ERR_CUDA,
                 "CUDA call `%s` failed (%s:%d): %s: %s%s", call,
                 kde_basename(file), line, cudaGetErrorName(err),
                 cudaGetErrorString(err),
                 alloc ? ". The GPU ran out of memory: lower the memory budget"
                         " with options(kdegpu.gpu_memory = ...) or use"
                         " precision = 'single'"
                       : "");
}

/* Every runtime call goes through this; on failure it records and jumps to
 * the enclosing function's `cleanup:` label. */
#define KDE_CUDA_TRY(call)                                                   \
  do {                                                                       \
    cudaError_t kde_err_ = (call);                                           \
    if (kde_err_ != cudaSuccess) {                                           \
      kde_cuda_record(status, kde_err_, #call, __FILE__, __LINE__);          \
      goto cleanup;                                                          \
    }                                                                        \
  } while (0)

/* After each kernel launch (launch errors are reported by cudaGetLastError;
 * errors while running surface at the next synchronising call). */
#define KDE_CUDA_LAUNCHED(what)                                              \
  do {                                                                       \
    cudaError_t kde_err_ = cudaGetLastError();                               \
    if (kde_err_ != cudaSuccess) {                                           \
      kde_cuda_record(status, kde_err_, "launch of the " what, __FILE__,     \
                      __LINE__);                                             \
      goto cleanup;                                                          \
    }                                                                        \
  } while (0)

#define KDE_HOST_ALLOC(ptr, count, what)                                     \
  do {                                                                       \
    size_t kde_n_ = (size_t) (count);                                        \
    (ptr) = (decltype(ptr)) calloc(kde_n_ > 0 ? kde_n_ : 1, sizeof *(ptr));  \
    if ((ptr) == NULL) {                                                     \
      kde_status_set(status, KDE_ERR_ALLOC,                                  \
                     "out of host memory allocating %.0f bytes for %s",      \
                     (double) kde_n_ * sizeof *(ptr), what);                 \
      goto cleanup;                                                          \
    }                                                                        \
  } while (0)

/* ------------------------------------------------------------------------ */
/* Device code                                                               */
/* ------------------------------------------------------------------------ */

namespace {

template <typename T>
struct kde_args {
  const T *train;        /* tiled layout, first point of this range */
  int64_t n_points;      /* points in the range, a multiple of kUnit */
  int64_t split_points;  /* points per blockIdx.y, a multiple of kUnit */
  const T *query;        /* column-major, ldq rows (zero padded) */
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
  int k8;                /* tensor-core kernel: dimensions / 8, rounded up */
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
 * - m[i]); returns whether some query's group sum passed kLazyLimit.
 * group_fix: for those queries only, m[i] becomes the group's maximum, the
 * earlier sums s and ts are rescaled, and g[i] is summed again. */
template <typename T, int Q, int U>
__device__ __forceinline__ bool group_exps(const T (&value)[Q][U], const T (&m)[Q],
                                           T (&g)[Q])
{
  bool far = false;
#pragma unroll
  for (int i = 0; i < Q; i++) {
    T e[U];
#pragma unroll
    for (int p = 0; p < U; p++) e[p] = fast_exp2(value[i][p] - m[i]);
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
template <bool LSE, typename T, int Q, int U>
__device__ __forceinline__ void accumulate_group(T (&value)[Q][U], T (&m)[Q],
                                                 T (&s)[Q], T (&ts)[Q])
{
  if (!LSE) {
#pragma unroll
    for (int i = 0; i < Q; i++) ts[i] += tree_sum(value[i]);
    return;
  }
  T g[Q];
  if (__builtin_expect(group_exps(value, m, g), 0)) {
#pragma unroll
    for (int i = 0; i < Q; i++)
      if (!(g[i] <= (T) kLazyLimit)) group_fix_one(value[i], m[i], s[i], ts[i], g[i]);
  }
#pragma unroll
  for (int i = 0; i < Q; i++) ts[i] += g[i];
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
  bool far = group_exps(value, m, gsum);
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
    if (g < kSmallPointsPerWarp) far = group_exps(value, m, gsum);
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

  const int64_t p0 = (int64_t) blockIdx.y * a.split_points;
  int64_t p1 = p0 + a.split_points;
  if (p1 > a.n_points) p1 = a.n_points;
  const int64_t n_tiles = (p1 - p0) / kUnit;
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

  const int64_t p0 = (int64_t) blockIdx.y * a.split_points;
  int64_t p1 = p0 + a.split_points;
  if (p1 > a.n_points) p1 = a.n_points;
  const int64_t n_tiles = (p1 - p0) / kTileWidth;
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
 * Tensor-core path: single-precision Gaussian, d >= kTf32MinDim.
 *
 * value = aux + q.x with q.x = sum over 8-dimension steps of
 * mma.sync.m16n8k8 (TF32 in, FP32 accumulate). Each operand is stored split
 * as big = tf32(v) and small = tf32(v - big) (done once on the host), and
 * q.x ~ q_small x_big + q_big x_small + q_big x_big: about 22 bits of each
 * operand, the 3xTF32 scheme. The accumulators start at aux, so the bias is
 * free. Each warp owns 32 queries (two m16 tiles) and takes every 32-point
 * tile (four n8 tiles): per 8 dimensions, 8 16-byte shared loads feed 24 mma.
 *
 * Storage tile (32 points): [k8][n8 tile 0..3][lane][b0 big, b1 big,
 * b0 small, b1 small] (the B fragment of each lane), then aux[32].
 * Queries: [m16 tile][k8][big | small][lane][a0..a3] (A fragments).
 * Fragment layouts: PTX ISA, "Matrix fragments for mma.m16n8k8" (.tf32).
 */
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4],
                                         uint32_t b0, uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
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

__global__ void __launch_bounds__(kThreads) kde_tf32_kernel(const kde_args<float> a)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  constexpr int MI = 2, NJ = 4, R = 2 * MI; /* R query rows per thread */
  extern __shared__ float4 smem_f4[];
  float *smem = reinterpret_cast<float *>(smem_f4);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int k8 = a.k8;
  const int64_t tile_elems = a.tile_elems;
  const int q_elems = kWarps * MI * k8 * 256;
  float *sa = smem;
  float *sx = smem + q_elems;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries;

  /* thread row r = 2 i + h: query q0 + 32 warp + 16 i + g + 8 h */
  int64_t qg[R];
#pragma unroll
  for (int r = 0; r < R; r++)
    qg[r] = a.query_base + q0 + 32 * warp + 16 * (r / 2) + g + 8 * (r % 2);
  float m[R], s[R], ts[R];
#pragma unroll
  for (int r = 0; r < R; r++) {
    m[r] = -FLT_MAX;
    s[r] = 0;
    ts[r] = 0;
  }

  const int64_t p0 = (int64_t) blockIdx.y * a.split_points;
  int64_t p1 = p0 + a.split_points;
  if (p1 > a.n_points) p1 = a.n_points;
  const int64_t n_tiles = (p1 - p0) / kTileWidth;
  const float *src = a.train + (p0 / kTileWidth) * tile_elems;

  block_copy_async(sa, a.query + (q0 / 16) * k8 * 256, (size_t) q_elems * sizeof(float));
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
    const float *aux = xs + (size_t) k8 * 512;

    float acc[MI][NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++) {
      const float c0 = aux[8 * j + 2 * t], c1 = aux[8 * j + 2 * t + 1];
#pragma unroll
      for (int i = 0; i < MI; i++) {
        acc[i][j][0] = c0;
        acc[i][j][1] = c1;
        acc[i][j][2] = c0;
        acc[i][j][3] = c1;
      }
    }
#pragma unroll 2
    for (int kk = 0; kk < k8; kk++) {
      uint32_t b[NJ][4], abig[MI][4], asmall[MI][4];
#pragma unroll
      for (int j = 0; j < NJ; j++) load_u4(xs + ((kk * NJ + j) * 32 + lane) * 4, b[j]);
#pragma unroll
      for (int i = 0; i < MI; i++) {
        const float *fa = sa + ((size_t) ((warp * MI + i) * k8 + kk) * 2) * 128;
        load_u4(fa + lane * 4, abig[i]);
        load_u4(fa + 128 + lane * 4, asmall[i]);
      }
      /* small products first: they are the smaller terms of the sum */
#pragma unroll
      for (int i = 0; i < MI; i++)
#pragma unroll
        for (int j = 0; j < NJ; j++) {
          mma_tf32(acc[i][j], asmall[i], b[j][0], b[j][1]);
          mma_tf32(acc[i][j], abig[i], b[j][2], b[j][3]);
          mma_tf32(acc[i][j], abig[i], b[j][0], b[j][1]);
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
          if (check && first + 8 * j + 2 * t + e == qg[r]) v = -INFINITY;
          value[r][2 * j + e] = v;
        }
    accumulate_group<true>(value, m, s, ts);
    if ((tile & 15) == 15) {
#pragma unroll
      for (int r = 0; r < R; r++) {
        s[r] += ts[r];
        ts[r] = 0;
      }
    }
    __syncthreads(); /* the next prefetch overwrites this buffer */
  }

  /* a query row is spread over the 4 lanes t = 0..3 of a quad */
#pragma unroll
  for (int r = 0; r < R; r++) {
    kde_lse_f2 st = kde_lse_make_f2(m[r], s[r] + ts[r]);
#pragma unroll
    for (int offset = 1; offset < 4; offset *= 2) {
      const float om = __shfl_xor_sync(0xffffffffu, st.max, offset);
      const float os = __shfl_xor_sync(0xffffffffu, st.sum, offset);
      st = kde_lse_merge_f2(st, kde_lse_make_f2(om, os));
    }
    if (st.sum == 0) st.max = -INFINITY;
    const int64_t row = q0 + 32 * warp + 16 * (r / 2) + g + 8 * (r % 2);
    if (t == 0 && row < a.n_query) {
      const int64_t at = (int64_t) blockIdx.y * a.ldq + row;
      a.part_max[at] = st.max;
      a.part_sum[at] = st.sum;
    }
  }
#else
  __trap();
#endif
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

/* ------------------------------------------------------------------------ */
/* The one dispatch point: runtime (kernel, d) -> template instantiation     */
/* ------------------------------------------------------------------------ */

template <typename T> using kde_kernel_fn = void (*)(kde_args<T>);

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

template <typename T> kde_kernel_fn<T> select_kernel(int kernel, int dim, int tf32)
{
  if constexpr (std::is_same<T, float>::value)
    if (tf32) return kde_tf32_kernel; /* model->tf32: Gaussian, d >= 16 */
  return dispatch_kernel(kernel, [dim](auto k) {
    return select_for_dim<decltype(k)::value, T>(dim);
  });
}

} // namespace

/* ------------------------------------------------------------------------ */
/* Host side: the model                                                      */
/* ------------------------------------------------------------------------ */

typedef struct {
  int device;
  int multiprocessors;
  size_t smem_optin;      /* max dynamic shared memory per block */
  double budget;          /* bytes this model and its evaluations may use */
  void *train;            /* resident replica (NULL when streaming) */
  cudaStream_t stream;
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
  int tf32;             /* tensor-core layout and kernel (see kde_tf32_kernel) */
  int k8;               /* tf32: ceil(dim / 8) */
  int64_t tile_elems;   /* values per 32-point storage tile */
  int64_t query_elems;  /* values per query row on the device */
  int resident;         /* whole training set on every device */
  void *host_train;     /* packed copy, kept when streaming */
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
int kde_cuda_bench_no_tf32 = 0; /* models made while set use FMA kernels */
}
#endif

static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Shared memory of kde_tf32_kernel: the block's query fragments and two
 * storage tiles. */
static size_t tf32_smem_bytes(int64_t k8)
{
  return (size_t) (kWarps * 2 * k8 * 256 + 2 * (k8 * 512 + kTileWidth)) * sizeof(float);
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

/* Round to TF32 (10 explicit mantissa bits), to nearest even. */
static float tf32_round(float v)
{
  uint32_t u;
  memcpy(&u, &v, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) /* leave inf and NaN alone */
    u = (u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u;
  memcpy(&v, &u, sizeof v);
  return v;
}

/* Where value (point or query row r, dimension k) goes in the tensor-core
 * layouts: the B fragment of a storage tile (b0: k = t, b1: k = t + 4, for
 * column g, lane = 4 g + t) and the A fragment of a query m16 tile (a0: (g,
 * t), a1: (g + 8, t), a2: (g, t + 4), a3: (g + 8, t + 4)). See
 * kde_tf32_kernel; the small part sits 2 floats (B) or 128 floats (A) after
 * the big part. */
static int64_t tf32_train_slot(int64_t point_in_tile, int64_t k)
{
  const int64_t j = point_in_tile / 8, g = point_in_tile % 8;
  const int64_t kk = k / 8, t = k % 4, h = (k % 8) / 4;
  return ((kk * 4 + j) * 32 + 4 * g + t) * 4 + h;
}
static int64_t tf32_query_slot(int64_t row_in_tile, int64_t k)
{
  const int64_t g = row_in_tile % 8, hr = row_in_tile / 8;
  const int64_t kk = k / 8, t = k % 4, hc = (k % 8) / 4;
  return kk * 256 + (4 * g + t) * 4 + hr + 2 * hc;
}

/* Tensor-core storage tiles: big and small parts of the coordinates in B
 * fragment order, then aux = log2 w - |x|^2 / 2 of the float coordinates.
 * Padding (dimensions up to 8 k8, null points) is zero, aux -inf. Reads the
 * column-major input one column at a time. */
static int pack_train_tf32(const kde_training_set *train,
                           const kde_cuda_model *model, float *dst)
{
  const int64_t n = train->n_train, d = model->dim;
  const int64_t n_tiles = model->n_points / kTileWidth;
  double *norm2 = (double *) calloc((size_t) n, sizeof(double));
  if (norm2 == NULL) return -1;
  memset(dst, 0, (size_t) n_tiles * model->tile_elems * sizeof(float));
  for (int64_t k = 0; k < d; k++) {
    const double *col = train->train + k * n;
    const double c = model->center[k], sc = model->scale;
    for (int64_t j = 0; j < n; j++) {
      const float v = (float) ((col[j] - c) * sc);
      const float big = tf32_round(v);
      float *at = dst + (j / kTileWidth) * model->tile_elems +
                  tf32_train_slot(j % kTileWidth, k);
      at[0] = big;
      at[2] = tf32_round(v - big);
      norm2[j] += (double) v * v;
    }
  }
  for (int64_t j = 0; j < model->n_points; j++) {
    float *aux = dst + (j / kTileWidth) * model->tile_elems + (int64_t) model->k8 * 512;
    aux[j % kTileWidth] =
        j < n ? (float) (train->log_weight[j] * kLog2e - 0.5 * norm2[j]) : -INFINITY;
  }
  free(norm2);
  return 0;
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
    const double *col = train->train + k * n;
    const double c = model->center[k], sc = model->scale;
    for (int64_t j = 0; j < model->n_points; j++) {
      T *at = dst + (j / kTileWidth) * rows * kTileWidth + k * kTileWidth +
              j % kTileWidth;
      *at = j < n ? (T) ((col[j] - c) * sc) : (T) 0;
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

extern "C" void kde_cuda_model_free(kde_cuda_model *model)
{
  int prev = -1;
  if (model == NULL) return;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (model->rep != NULL) {
    for (int r = 0; r < model->n_devices; r++) {
      kde_replica *rep = &model->rep[r];
      if (rep->train == NULL && rep->stream == NULL) continue;
      if (cudaSetDevice(rep->device) != cudaSuccess) continue;
      if (rep->stream != NULL) {
        (void) cudaStreamSynchronize(rep->stream);
        (void) cudaStreamDestroy(rep->stream);
      }
      if (rep->train != NULL) (void) cudaFree(rep->train);
    }
  }
  (void) cudaGetLastError();
  free(model->rep);
  free(model->host_train);
  free(model->center);
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
  int count = 0, prev = -1, ok = 0, tf32_ok = 1;
  size_t train_bytes = 0, unit_bytes = 0;
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
  tf32_ok = 1;
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
    if (value < 8) tf32_ok = 0; /* mma.sync tf32 needs sm_80 */
    KDE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    rep->budget = memory_budget > 0 ? memory_budget
                                    : kDefaultBudgetFraction * (double) free_b;
    KDE_CUDA_TRY(cudaStreamCreateWithFlags(&rep->stream, cudaStreamNonBlocking));
    if (min_budget < 0 || rep->budget < min_budget) min_budget = rep->budget;
    if (tf32_smem_bytes(ceil_div(model->dim, 8)) > rep->smem_optin) tf32_ok = 0;
  }

  /* Storage layout: the tensor-core one for the single-precision Gaussian at
   * d >= kTf32MinDim, else 32-point tiles of (d + 1) rows. */
  model->tf32 = precision == KDE_PRECISION_SINGLE &&
                train->kernel == KDE_GAUSSIAN && model->dim >= kTf32MinDim &&
                tf32_ok && tf32_smem_bytes(ceil_div(model->dim, 8)) <= kTf32SmemCap;
#ifdef KDE_CUDA_BENCH
  if (kde_cuda_bench_no_tf32) model->tf32 = 0;
#endif
  if (model->tf32) {
    model->k8 = (int) ceil_div(model->dim, 8);
    model->tile_elems = (int64_t) model->k8 * 512 + kTileWidth;
    model->query_elems = (int64_t) model->k8 * 16;
  } else {
    model->tile_elems = (model->dim + 1) * kTileWidth;
    model->query_elems = model->dim;
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
  if (model->tf32) {
    if (pack_train_tf32(train, model, (float *) model->host_train) != 0) {
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

/* One device's share of an evaluation and its scratch memory. */
typedef struct {
  kde_replica *rep;
  int64_t q_lo, q_hi;       /* queries of this device */
  int64_t u_lo, u_hi;       /* training units of this device */
  int64_t shard_units;      /* units per step */
  int64_t ldq_max;          /* rows of the query buffer */
  int split_cap;            /* rows of the partial buffers / ldq_max */
  double *state_max;        /* host, [q_hi - q_lo], this device's states */
  double *state_sum;
  /* kernel choice */
  void *fn;
  size_t smem;
  int chunk_dims, n_chunks;
  int concurrency;          /* resident blocks over all SMs */
  /* scratch */
  void *d_query, *d_part_max, *d_part_sum, *d_shard;
  double *d_acc;            /* [2][ldq_max] */
  void *h_query;            /* pinned */
  double *h_acc;            /* pinned [2][ldq_max] */
  cudaEvent_t ev_start, ev_stop;
  /* cursor */
  int64_t q_next;           /* first query of the current batch */
  int64_t n_batch;          /* rows in the current batch */
  int64_t ldq;
  int64_t shard;            /* next shard within the current batch */
  int batch_done;           /* acc of the batch was copied back this step */
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

/* Runs body(lo, hi) over [0, rows) on the CPU threads kdegpu may use: the
 * packing of a large query batch (a float conversion, or the TF32 split)
 * otherwise takes a large part of an evaluation at high d. Rows are
 * independent, so the result does not depend on the thread count. Thread
 * creation failing (std::system_error) falls back to the calling thread;
 * nothing is thrown across the C interface. */
template <typename Body>
static void parallel_rows(int64_t rows, const Body &body)
{
  const int64_t min_rows_per_thread = 16384;
  int64_t threads = kde_cpu_thread_limit(0);
  if (threads > rows / min_rows_per_thread) threads = rows / min_rows_per_thread;
  if (threads <= 1) {
    body((int64_t) 0, rows);
    return;
  }
  std::vector<std::thread> pool;
  int64_t started_up_to = 0;
  try {
    pool.reserve((size_t) threads - 1);
    for (int64_t t = 1; t < threads; t++) {
      const int64_t lo = rows * t / threads, hi = rows * (t + 1) / threads;
      pool.emplace_back([&body, lo, hi] { body(lo, hi); });
      started_up_to = t;
    }
  } catch (...) {
  }
  /* The calling thread does chunk 0 and every chunk no thread took. */
  body((int64_t) 0, rows / threads);
  for (int64_t t = started_up_to + 1; t < threads; t++)
    body(rows * t / threads, rows * (t + 1) / threads);
  for (std::thread &worker : pool) worker.join();
}

template <typename T>
static void pack_queries(const kde_cuda_model *model, const kde_query_set *query,
                         int64_t first, int64_t rows, int64_t ldq, T *dst,
                         double *query_offset)
{
  const int64_t d = model->dim, nq = query->n_query;
  parallel_rows(rows, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; i++) query_offset[first + i] = 0;
    for (int64_t k = 0; k < d; k++) {
      const double *col = query->query + k * nq + first;
      const double c = model->center[k], sc = model->scale;
      T *out = dst + k * ldq;
      for (int64_t i = lo; i < hi; i++) {
        const T v = (T) ((col[i] - c) * sc);
        out[i] = v;
        query_offset[first + i] += 0.5 * (double) v * (double) v;
      }
    }
  });
  for (int64_t k = 0; k < d; k++)
    for (int64_t i = rows; i < ldq; i++) dst[k * ldq + i] = 0;
}

/* Tensor-core query layout: [m16 tile][k8][big | small][lane][a0..a3],
 * zero padded; reads the column-major queries one column at a time. */
static void pack_queries_tf32(const kde_cuda_model *model,
                              const kde_query_set *query, int64_t first,
                              int64_t rows, int64_t ldq, float *dst,
                              double *query_offset)
{
  const int64_t d = model->dim, nq = query->n_query;
  memset(dst, 0, (size_t) ldq * model->query_elems * sizeof(float));
  /* Chunks of whole 16-row tiles, so no two threads write one tile. */
  const int64_t tiles = (rows + 15) / 16;
  parallel_rows(tiles, [&](int64_t tile_lo, int64_t tile_hi) {
    const int64_t lo = tile_lo * 16, hi = tile_hi * 16 < rows ? tile_hi * 16 : rows;
    for (int64_t i = lo; i < hi; i++) query_offset[first + i] = 0;
    for (int64_t k = 0; k < d; k++) {
      const double *col = query->query + k * nq + first;
      const double c = model->center[k], sc = model->scale;
      for (int64_t i = lo; i < hi; i++) {
        const float v = (float) ((col[i] - c) * sc);
        const float big = tf32_round(v);
        float *at = dst + (i / 16) * model->k8 * 256 + tf32_query_slot(i % 16, k);
        at[0] = big;
        at[128] = tf32_round(v - big);
        query_offset[first + i] += 0.5 * (double) v * (double) v;
      }
    }
  });
}

/* Enqueue one step of `job` (one query batch against one training shard)
 * on its device. Returns 0, or -1 with the status set. */
template <typename T>
static int enqueue_step(const kde_cuda_model *model, const kde_query_set *query,
                        kde_device_job *job, double *query_offset,
                        kde_status *status)
{
  kde_args<T> args;
  int64_t shard_first, shard_units, blocks_q;
  int splits, lanes_log2;
  const T *train;
  dim3 grid;

  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  if (job->shard == 0) { /* a new query batch */
    job->n_batch = job->q_hi - job->q_next;
    if (job->n_batch > job->ldq_max) job->n_batch = job->ldq_max;
    job->ldq = ceil_div(job->n_batch, kBlockQueries) * kBlockQueries;
    if (model->tf32)
      pack_queries_tf32(model, query, job->q_next, job->n_batch, job->ldq,
                        (float *) job->h_query, query_offset);
    else
      pack_queries<T>(model, query, job->q_next, job->n_batch, job->ldq,
                      (T *) job->h_query, query_offset);
    KDE_CUDA_TRY(cudaMemcpyAsync(job->d_query, job->h_query,
                                 (size_t) job->ldq * model->query_elems * sizeof(T),
                                 cudaMemcpyHostToDevice, job->rep->stream));
  }
  shard_first = job->u_lo + job->shard * job->shard_units;
  shard_units = job->shard_units;
  if (shard_units > job->u_hi - shard_first) shard_units = job->u_hi - shard_first;
  if (model->resident) {
    train = (const T *) job->rep->train +
            shard_first * (kUnit / kTileWidth) * model->tile_elems;
  } else {
    KDE_CUDA_TRY(cudaMemcpyAsync(
        job->d_shard,
        (const T *) model->host_train +
            shard_first * (kUnit / kTileWidth) * model->tile_elems,
        (size_t) shard_units * kUnit * point_bytes(model),
        cudaMemcpyHostToDevice, job->rep->stream));
    train = (const T *) job->d_shard;
  }

  blocks_q = job->ldq / kBlockQueries;
  splits = choose_splits(job, blocks_q, shard_units);
  args.train = train;
  args.n_points = shard_units * kUnit;
  args.split_points = ceil_div(shard_units, splits) * kUnit;
  args.query = (const T *) job->d_query;
  args.ldq = job->ldq;
  args.n_query = job->n_batch;
  args.part_max = (T *) job->d_part_max;
  args.part_sum = (T *) job->d_part_sum;
  args.dim = (int) model->dim;
  args.chunk_dims = job->chunk_dims;
  args.n_chunks = job->n_chunks;
  args.leave_one_out = query->leave_one_out;
  args.query_base = job->q_next;
  args.train_base = shard_first * kUnit;
  args.tile_elems = model->tile_elems;
  args.k8 = model->k8;
  grid = dim3((unsigned) blocks_q, (unsigned) splits, 1);

  if (job->timed) KDE_CUDA_TRY(cudaEventRecord(job->ev_start, job->rep->stream));
  ((kde_kernel_fn<T>) job->fn)<<<grid, kThreads, job->smem, job->rep->stream>>>(args);
  KDE_CUDA_LAUNCHED("main kernel");
  lanes_log2 = 0;
  while ((1 << lanes_log2) < splits && lanes_log2 < 5) lanes_log2++;
  kde_merge_kernel<T><<<(unsigned) ceil_div(job->n_batch << lanes_log2, 256), 256,
                        0, job->rep->stream>>>(
      (const T *) job->d_part_max, (const T *) job->d_part_sum, job->ldq,
      splits, job->n_batch, job->d_acc, job->d_acc + job->ldq_max,
      job->shard == 0, lanes_log2);
  KDE_CUDA_LAUNCHED("merge kernel");
  if (job->timed) KDE_CUDA_TRY(cudaEventRecord(job->ev_stop, job->rep->stream));
#ifdef KDE_CUDA_BENCH
  kde_cuda_bench_launches++;
  if (splits > kde_cuda_bench_max_splits) kde_cuda_bench_max_splits = splits;
#endif

  job->shard++;
  job->batch_done = 0;
  if (shard_first + shard_units >= job->u_hi) { /* last shard: copy back */
    KDE_CUDA_TRY(cudaMemcpyAsync(job->h_acc, job->d_acc,
                                 (size_t) job->n_batch * sizeof(double),
                                 cudaMemcpyDeviceToHost, job->rep->stream));
    KDE_CUDA_TRY(cudaMemcpyAsync(job->h_acc + job->ldq_max,
                                 job->d_acc + job->ldq_max,
                                 (size_t) job->n_batch * sizeof(double),
                                 cudaMemcpyDeviceToHost, job->rep->stream));
    job->batch_done = 1;
  }
  return 0;
cleanup:
  return -1;
}

/* Kernel choice, launch shape and scratch sizes for one device. */
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
  kde_kernel_fn<T> fn = select_kernel<T>(model->kernel, (int) d, model->tf32);

  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  if (model->tf32) {
    job->chunk_dims = (int) d;
    job->n_chunks = 1;
    job->smem = tf32_smem_bytes(model->k8);
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
  /* Half of the rest for query rows (coordinates, staging-free accumulator),
   * half for the partial states of the splits. */
  per_query = (double) model->query_elems * tsz + 2 * sizeof(double);
  job->ldq_max = (int64_t) (0.5 * avail / per_query) / kBlockQueries * kBlockQueries;
  {
    int64_t need = ceil_div(n_job, kBlockQueries) * kBlockQueries;
    if (job->ldq_max > need) job->ldq_max = need;
    if (job->ldq_max > kMaxBatchRows) job->ldq_max = kMaxBatchRows;
    /* bounded work per step, but never below a few full waves of blocks */
    double pairs = tsz == sizeof(float) ? kMaxPairsPerStep : 0.1 * kMaxPairsPerStep;
    int64_t rows = (int64_t) (pairs / ((double) job->shard_units * kUnit));
    int64_t floor_rows = (int64_t) 4 * job->concurrency * kBlockQueries;
    if (rows < floor_rows) rows = floor_rows;
    rows = rows / kBlockQueries * kBlockQueries;
    if (job->ldq_max > rows) job->ldq_max = rows;
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
  int split_training, prev = -1, active, n_states_per_query;
  size_t tsz = sizeof(T);

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
  KDE_HOST_ALLOC(state_max, (size_t) nq * n_states_per_query, "partial results");
  KDE_HOST_ALLOC(state_sum, (size_t) nq * n_states_per_query, "partial results");
  KDE_HOST_ALLOC(query_offset, nq, "query norms");

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
    } else {
      job->q_lo = nq * r / n_dev;
      job->q_hi = nq * (r + 1) / n_dev;
      job->u_lo = 0;
      job->u_hi = n_units;
      job->state_max = state_max + job->q_lo;
      job->state_sum = state_sum + job->q_lo;
    }
    job->q_next = job->q_lo;
    /* an empty share: nothing to do, states stay empty */
    for (int64_t i = 0; i < job->q_hi - job->q_lo; i++) {
      job->state_max[i] = -INFINITY;
      job->state_sum[i] = 0;
    }
    if (job->q_hi <= job->q_lo || job->u_hi <= job->u_lo) {
      job->q_next = job->q_hi;
      continue;
    }
    if (prepare_job<T>(model, job, status) != 0) goto cleanup;
    KDE_CUDA_TRY(cudaMalloc(&job->d_query, (size_t) job->ldq_max * model->query_elems * tsz));
    KDE_CUDA_TRY(cudaMalloc(&job->d_part_max, (size_t) job->split_cap * job->ldq_max * tsz));
    KDE_CUDA_TRY(cudaMalloc(&job->d_part_sum, (size_t) job->split_cap * job->ldq_max * tsz));
    KDE_CUDA_TRY(cudaMalloc((void **) &job->d_acc, 2 * (size_t) job->ldq_max * sizeof(double)));
    if (!model->resident)
      KDE_CUDA_TRY(cudaMalloc(&job->d_shard, (size_t) job->shard_units * kUnit * point_bytes(model)));
    KDE_CUDA_TRY(cudaMallocHost(&job->h_query, (size_t) job->ldq_max * model->query_elems * tsz));
    KDE_CUDA_TRY(cudaMallocHost((void **) &job->h_acc, 2 * (size_t) job->ldq_max * sizeof(double)));
#ifdef KDE_CUDA_BENCH
    job->timed = 1;
    KDE_CUDA_TRY(cudaEventCreate(&job->ev_start));
    KDE_CUDA_TRY(cudaEventCreate(&job->ev_stop));
#endif
  }

  /* Round-robin: one step on every device that has work, then wait for all;
   * the interrupt probe runs here, between steps, on this thread. */
  for (;;) {
    active = 0;
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      if (job->q_next >= job->q_hi) continue;
      if (enqueue_step<T>(model, query, job, query_offset, status) != 0)
        goto cleanup;
      active++;
    }
    if (active == 0) break;
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
      if (job->batch_done) {
        const int64_t at = job->q_next - job->q_lo;
        memcpy(job->state_max + at, job->h_acc, job->n_batch * sizeof(double));
        memcpy(job->state_sum + at, job->h_acc + job->ldq_max,
               job->n_batch * sizeof(double));
        job->q_next += job->n_batch;
        job->shard = 0;
        job->batch_done = 0;
#ifdef KDE_CUDA_BENCH
        kde_cuda_bench_batches++;
#endif
      }
    }
    if (interrupted != NULL && interrupted()) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
  }

  /* Merge the devices' states (split training) and finish on the host. */
  for (int64_t i = 0; i < nq; i++) {
    kde_lse_2 st = kde_lse_make_2(state_max[i], state_sum[i]);
    double log2_sum;
    for (int r = 1; r < n_states_per_query; r++)
      st = kde_lse_merge_2(st, kde_lse_make_2(state_max[(size_t) r * nq + i],
                                              state_sum[(size_t) r * nq + i]));
    log2_sum = kde_lse_log_2(st);
    if (model->expanded) log2_sum -= query_offset[i]; /* -inf stays -inf */
    out[i] = query->log_const + kLn2 * log2_sum;
  }

cleanup:
  if (jobs != NULL) {
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      if (job->rep == NULL || cudaSetDevice(job->rep->device) != cudaSuccess)
        continue;
      /* on an error path work may still be queued on buffers freed below */
      (void) cudaStreamSynchronize(job->rep->stream);
      if (job->d_query) (void) cudaFree(job->d_query);
      if (job->d_part_max) (void) cudaFree(job->d_part_max);
      if (job->d_part_sum) (void) cudaFree(job->d_part_sum);
      if (job->d_acc) (void) cudaFree(job->d_acc);
      if (job->d_shard) (void) cudaFree(job->d_shard);
      if (job->h_query) (void) cudaFreeHost(job->h_query);
      if (job->h_acc) (void) cudaFreeHost(job->h_acc);
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
