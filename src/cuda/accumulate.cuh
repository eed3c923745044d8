/*
 * accumulate.cuh: how the kernels sum: lazy-max accumulation of a group of
 * terms in registers (an online log-sum-exp), the block's share of the
 * training range, the value of a pair, and the end of a block, which writes
 * one partial (max, sum) per query (FMA and tensor-core kernels).
 */
#ifndef KDEGPU_CUDA_ACCUMULATE_CUH
#define KDEGPU_CUDA_ACCUMULATE_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "kernels.cuh"
#include "numeric.cuh"
#include "tuning.cuh"

namespace kdegpu {

/*
 * The FMA kernels' running sum of a thread's tile sums. One tile sum per
 * query is added per tile, so a split of n points adds n / kUnit of them
 * (4e5 at n = 1e8), and a plain float sum of that many similar terms drifts:
 * 6.6e-5 relative at n = 1e8, d = 3, measured against double. So float sums
 * carry Kahan's compensation (three adds per tile, next to 256 pairs' exps;
 * no cost measured). Double sums add plainly: the same count drifts by about
 * 1e-11 at most, and the carry's registers would cost the double kernels a
 * block per SM. The tensor-core kernels keep plain float sums (the carry
 * cost them 3-5%) and add to them only every kTcSumPoints points, whose drift
 * stays below their expanded form's rounding. Rescaling (a new running max)
 * scales the carry with the sum. Sums stay far below overflow (LSE terms
 * are at most kLazyLimit times the count; weights sum to 1).
 */
template <typename T> struct compensated_sum {
  static constexpr bool kCompensate = sizeof(T) == sizeof(float);
  T sum = 0, carry = 0; /* carry stays 0 (and unallocated) for double */
  __device__ __forceinline__ void operator+=(T x)
  {
    if (!kCompensate) {
      sum += x;
      return;
    }
    const T y = x - carry;
    const T t = sum + y;
    carry = (t - sum) - y;
    sum = t;
  }
  __device__ __forceinline__ void operator*=(T f)
  {
    sum *= f;
    if (kCompensate) carry *= f;
  }
  __device__ __forceinline__ T value() const { return kCompensate ? sum - carry : sum; }
};

/* The second level of the two-level sums: a run of tiles' sums ts into the
 * running sums s, and ts back to 0. */
template <typename S, typename T, int Q>
__device__ __forceinline__ void flush_tile_sums(S (&s)[Q], T (&ts)[Q])
{
#pragma unroll
  for (int i = 0; i < Q; i++) {
    s[i] += ts[i];
    ts[i] = 0;
  }
}

/* Lazy-max pieces, for LSE kernels. column_exps: e[i] = exp2(value[i][p] -
 * m[i]) (exp2(value[i][p]) for RELATIVE values, which are value - m
 * already) for one column p of a thread's Q x U terms, the last POLY of them
 * by poly_exp2. group_exps: g[i] = sum_p of a whole group's; returns whether
 * some query's group sum passed kLazyLimit. group_fix_one: for those queries
 * only, m[i] becomes the group's maximum, the earlier sums s and ts are
 * rescaled, and g[i] is summed again. */
template <int POLY, bool RELATIVE = false, typename T, int Q, int U>
__device__ __forceinline__ void column_exps(const T (&value)[Q][U], const T (&m)[Q], int p,
                                            T (&e)[Q])
{
#pragma unroll
  for (int i = 0; i < Q; i++) {
    const T x = RELATIVE ? value[i][p] : value[i][p] - m[i];
    e[i] = i * U + p >= Q * U - POLY ? poly_exp2(x) : fast_exp2(x);
  }
}

/* A group's sums built as its columns come (small_tile's interleaved
 * steps): column p's terms are pushed when made, and adjacent runs of equal
 * length are added at once, ((e0 + e1) + (e2 + e3)) + ..., so that a
 * query holds log2(U) + 1 partial sums, not U terms. */
template <typename T, int Q, int U> struct column_sums {
  static constexpr int kLevels = U <= 1 ? 1 : U <= 2 ? 2 : U <= 4 ? 3 : U <= 8 ? 4 : 5;
  static_assert(U <= 16 && (U & (U - 1)) == 0, "a group is a power of two up to 16");
  T level[Q][kLevels];
  /* column p's terms e[i] (p known at compile time once unrolled) */
  __device__ __forceinline__ void push(int p, const T (&e)[Q])
  {
#pragma unroll
    for (int i = 0; i < Q; i++) {
      T v = e[i];
      int l = 0;
#pragma unroll
      for (int b = 1; b < U; b *= 2) {
        if (((p + 1) & b) != 0) break;
        v = level[i][l] + v;
        l++;
      }
#pragma unroll
      for (int k = 0; k < kLevels; k++)
        if (k == l) level[i][k] = v;
    }
  }
  /* after the last column: g[i], and whether one passed kLazyLimit */
  __device__ __forceinline__ bool sums(T (&g)[Q]) const
  {
    bool far = false;
#pragma unroll
    for (int i = 0; i < Q; i++) {
      g[i] = level[i][kLevels - 1];
      far |= !(g[i] <= (T) kLazyLimit);
    }
    return far;
  }
};

template <int POLY, bool RELATIVE = false, typename T, int Q, int U>
__device__ __forceinline__ bool group_exps(const T (&value)[Q][U], const T (&m)[Q],
                                           T (&g)[Q])
{
  T e[Q][U];
#pragma unroll
  for (int p = 0; p < U; p++) {
    T column[Q];
    column_exps<POLY, RELATIVE>(value, m, p, column);
#pragma unroll
    for (int i = 0; i < Q; i++) e[i][p] = column[i];
  }
  bool far = false;
#pragma unroll
  for (int i = 0; i < Q; i++) {
    g[i] = tree_sum(e[i]);
    far |= !(g[i] <= (T) kLazyLimit);
  }
  return far;
}

template <typename T, typename S, int U>
__device__ __forceinline__ void group_fix_one(const T (&value)[U], T &m, S &s, T &ts,
                                              T &g)
{
  T group_max = value[0];
#pragma unroll
  for (int p = 1; p < U; p++) group_max = fmax(group_max, value[p]);
  const T m_new = group_max + (T) kLazyHeadroom; /* (tuning.cuh) */
  const T f = fast_exp2(m - m_new);                /* 0 from lowest() */
  s *= f;
  ts *= f;
  m = m_new;
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
 * then, and only then, m becomes the group's maximum plus kLazyHeadroom
 * (tuning.cuh: what the exponents round by), the earlier sums are
 * rescaled by exp2(old m - new m), and the group is summed again. This
 * happens for the first group of a split and for rare large jumps, so the
 * branch is almost never taken and costs one compare per query per group.
 *
 * m starts at lowest() (finite), not -inf, so value - m is never
 * (-inf) - (-inf): zero-weight and padding points (value -inf) add 0.
 */
template <bool LSE, int POLY = 0, typename T, typename S, int Q, int U>
__device__ __forceinline__ void accumulate_group(T (&value)[Q][U], T (&m)[Q], S (&s)[Q],
                                                 T (&ts)[Q])
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

/* The units of kUnit points that this block visits in its split (which
 * starts at point p0 and holds `units` units): all of them, or, with a
 * pruning plan (a.visit), an even share of those of its query block's list
 * that fall in the launch (a list gathers near the queries: shared out by
 * unit ranges, a few splits would visit all of it while the others wait).
 * unit(t) is the t-th, as an index from the split's start (negative where
 * the unit lies before it). */
struct visit_units {
  const int32_t *list; /* NULL: every unit */
  int64_t first;       /* position in list of the split's first visit */
  int64_t count;       /* units to visit */
  int64_t base;        /* global unit index of the split's start */
  __device__ __forceinline__ int64_t unit(int64_t t) const
  {
    return list == nullptr ? t : (int64_t) list[first + t] - base;
  }
};

/* First position in list[lo, hi) whose value is >= key (lists ascend). */
__device__ __forceinline__ int64_t lower_bound_unit(const int32_t *list, int64_t lo,
                                                    int64_t hi, int64_t key)
{
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if ((int64_t) list[mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/* The units this block visits in its split of `units` units from p0: all,
 * or its share of the plan's list. For the density's arguments (kde_args)
 * and the derivative sums' (deriv_args): both name n_points, train_base,
 * visit and visit_offset alike. */
template <typename Args>
__device__ __forceinline__ visit_units block_visits(const Args &a, int64_t p0, int64_t units)
{
  visit_units v;
  v.base = (a.train_base + p0) / kUnit;
  if (a.visit == nullptr) {
    v.list = nullptr;
    v.first = 0;
    v.count = units;
    return v;
  }
  const int64_t launch_first = a.train_base / kUnit;
  const int64_t lo = a.visit_offset[blockIdx.x], hi = a.visit_offset[blockIdx.x + 1];
  const int64_t from = lower_bound_unit(a.visit, lo, hi, launch_first);
  const int64_t length =
      lower_bound_unit(a.visit, from, hi, launch_first + a.n_points / kUnit) - from;
  v.list = a.visit;
  v.first = from + length * blockIdx.y / gridDim.y;
  v.count = from + length * (blockIdx.y + 1) / gridDim.y - v.first;
  return v;
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
                                               const compensated_sum<T> (&s)[Q],
                                               const int (&slot)[Q])
{
  const int warp = threadIdx.x / 32;
  T *sm = smem;
  T *ss = smem + kWarps * kBlockQueries;
  __syncthreads(); /* everyone is done with the tiles this aliases */
#pragma unroll
  for (int i = 0; i < Q; i++) {
    sm[warp * kBlockQueries + slot[i]] = m[i];
    ss[warp * kBlockQueries + slot[i]] = s[i].value();
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

} // namespace kdegpu

#endif /* KDEGPU_CUDA_ACCUMULATE_CUH */
