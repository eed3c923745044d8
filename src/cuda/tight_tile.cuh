/*
 * tight_tile.cuh: the tight tiles of the FMA kernel (kernel_small.cuh, d =
 * 2 and 3): a warp's quarter of an anchored tile that lies close to its anchor,
 * in the expanded form relative to it, summed with no running max.
 */
#ifndef KDEGPU_CUDA_TIGHT_TILE_CUH
#define KDEGPU_CUDA_TIGHT_TILE_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kdegpu/kernels.h"
#include "accumulate.cuh"
#include "kernel_facts.cuh"
#include "kernels.cuh"
#include "numeric.cuh"
#include "small_values.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* The warp's largest v in one instruction where the GPU has redux.sync
 * (compute capability 8.0 on), on the float's bits as signed ints: they
 * order as the floats for v >= 0 (NONNEGATIVE: a NaN then above +inf,
 * where fmax would drop it); otherwise the negatives' magnitude bits are
 * flipped first. Five shuffles before. */
template <bool NONNEGATIVE = false> __device__ __forceinline__ float warp_max(float v)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
  int bits = __float_as_int(v);
  if (!NONNEGATIVE) bits = bits >= 0 ? bits : bits ^ 0x7fffffff;
  bits = __reduce_max_sync(0xffffffffu, bits);
  return __int_as_float(NONNEGATIVE || bits >= 0 ? bits : bits ^ 0x7fffffff);
#else
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2)
    v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
#endif
}

/*
 * A tight tile (d = 2, 3): where a warp's quarter of an anchored difference-form tile
 * lies within sqrt(radius2) of its anchor (the points are stored relative
 * to it) and the warp's queries near enough, the quarter takes the
 * expanded form relative to the anchor: a pair's log2 term is aux' + q.x
 * - h with aux' = (log2 w - wref) - |x|^2 / 2, h = |q|^2 / 2 (q relative
 * to the anchor too) and wref the quarter's largest log2 w. Each term is
 * relative to the pair's and the quarter's size, not to where the data sit
 * (tuning.cuh, kTightRadius2). Since aux' <= 0 and |q.x| <= |q| r, the
 * terms 2^(aux' + q.x) lie below 2^(|q| r): bounded (kTightLevel), they
 * are summed in the quarter's frame with no running max, d FMAs, the exp2
 * and an add a pair, and the quarter's sum joins the query's running sum
 * once (tight_tile). A wide quarter (kTightWideLevel: farther queries, the
 * quarter's weights close) has its sum's exponent split off before it is
 * scaled (wide_scaled).
 *
 * warp_tight_quarter decides (warp-uniform: the quarter's radius and the
 * queries' distance, of the groups in `need`), sets h, and for a tight
 * quarter rewrites its aux row in shared memory in place (only this warp
 * reads its quarter); wref and whether the quarter is wide are returned.
 * Null points (aux -inf) have no say in the radius or the weights' spread
 * and stay -inf. */
template <typename T, int D, int Q>
__device__ __forceinline__ bool warp_tight_quarter(T *__restrict__ tile, T radius2,
                                                   const T (&q)[Q][D], unsigned need,
                                                   T (&h)[Q], T &wref, bool &wide)
{
  constexpr int ROWS = D + 1;
  const int lane = threadIdx.x % 32;
  T *quarter = tile + (threadIdx.x / 32) * kSmallPointsPerWarp * ROWS + lane;
  T r2[2], aux[2];
#pragma unroll
  for (int half = 0; half < 2; half++) {
    const T *x = quarter + half * ROWS * kTileWidth;
    aux[half] = x[D * kTileWidth];
    T sum = 0;
#pragma unroll
    for (int k = 0; k < D; k++) sum = fma(x[k * kTileWidth], x[k * kTileWidth], sum);
    r2[half] = aux[half] == -INFINITY ? (T) 0 : sum;
  }
  T most = fmax(r2[0], r2[1]), far = 0;
  wref = fmax(aux[0], aux[1]);
#pragma unroll
  for (int i = 0; i < Q; i++) {
    T norm2 = 0;
#pragma unroll
    for (int k = 0; k < D; k++) norm2 = fma(q[i][k], q[i][k], norm2);
    h[i] = (T) 0.5 * norm2;
    if (need >> i & 1u) far = fmax(far, norm2);
  }
  most = warp_max<true>(most); /* sums of squares */
  far = warp_max<true>(far);
  wref = warp_max(wref);
  /* |q.x| <= |q| r <= kTightLevel (the product's rounding is far below
   * its margin); and |q|^2 <= 2^30, so that h and the level m rises to
   * (tight_tile) round by at most 32 in log2 and the quarter's share stays
   * within 2^-64 .. 2^65 of it (farther, near-duplicate points' shares
   * could round to 0 or inf there) */
  wide = false;
  if (!(most <= radius2) || !(far * most <= (T) (kTightLevel * kTightLevel)) ||
      !(far <= (T) 0x1p30) || wref == -INFINITY) {
    /* rare: far queries, then perhaps a wide quarter (d = 3: at d = 2 few
     * quarters are, and the path cost the full sums 0.3%) */
    if constexpr (D != 3) {
      return false;
    } else {
      if (!(most <= radius2) || !(far * most <= (T) (kTightWideLevel * kTightWideLevel)) ||
          !(far <= (T) 0x1p30) || wref == -INFINITY)
        return false;
      T low = fmin(aux[0] == -INFINITY ? (T) INFINITY : aux[0],
                   aux[1] == -INFINITY ? (T) INFINITY : aux[1]);
      low = -warp_max(-low);
      if (!(wref - low <= (T) kTightWideSpread)) return false;
      wide = true;
    }
  }
#pragma unroll
  for (int half = 0; half < 2; half++)
    quarter[half * ROWS * kTileWidth + D * kTileWidth] = (aux[half] - wref) - (T) 0.5 * r2[half];
  __syncwarp();
  return true;
}

/* A tight quarter's sums in its own frame: t[i] = the sum over the warp's
 * quarter of 2^(aux' + q_i.x), below 2^(kTightLevel + 6) (64 points;
 * a wide quarter's below 2^(kTightWideLevel + 6)), with
 * no running max: a group's values and exp2s in one block as in
 * small_tile's fused steps, but with no lazy-max check and no max to
 * subtract. Only the queries of the groups in `need` (one at a time where
 * not all, as in masked_tile); the others' t stay 0. */
template <typename T, int D, bool CHECK, int Q>
__device__ __forceinline__ void tight_sums(const T *__restrict__ tile, const T (&q)[Q][D],
                                           const int (&own)[Q], unsigned need, T (&t)[Q])
{
  constexpr int U = real_traits<T>::group;
  constexpr int POLY = std::is_same<T, float>::value ? kPolyExps : 0;
  const int j0 = (threadIdx.x / 32) * kSmallPointsPerWarp;
#pragma unroll
  for (int i = 0; i < Q; i++) t[i] = 0;
  if (need == kAllGroups) {
    /* the group's place in the tile as a pointer stepped from group to
     * group, each 32-point block's groups in an inner loop (its storage
     * rows): from the point index, (j0 + g) / 32 and % 32 were a chain
     * of six instructions before each group's first loads (ncu, d = 2:
     * 5% of the kernel's stall samples; harness ceiling, one H200: d = 2
     * 3.40 -> 3.47e12 pairs/s); own relative to it */
    constexpr int ROWS = D + 1;
    static_assert(kSmallPointsPerWarp % kTileWidth == 0 && kTileWidth % U == 0,
                  "a warp's quarter is whole 32-point blocks of whole groups");
    const T none[Q] = {};
#pragma unroll 1
    for (int block = 0; block < kSmallPointsPerWarp / kTileWidth; block++) {
      const T *at = tile + (j0 / kTileWidth + block) * ROWS * kTileWidth;
#pragma unroll(D == 3 ? 2 : 1)
      for (int g = 0; g < kTileWidth; g += U, at += U) {
        int own_g[Q];
#pragma unroll
        for (int i = 0; i < Q; i++) own_g[i] = own[i] - (j0 + block * kTileWidth + g);
        T value[Q][U], gsum[Q];
        fused_group<KDE_GAUSSIAN, T, D, kFitTight, CHECK, false, true, POLY>(
            at, 0, q, own_g, discrete_codes<T, Q, 0>{}, none, none, value, gsum);
#pragma unroll
        for (int i = 0; i < Q; i++) t[i] += gsum[i];
      }
    }
    return;
  }
#pragma unroll 1
  for (int g = 0; g < kSmallPointsPerWarp; g += U) {
#pragma unroll
    for (int i = 0; i < Q; i++) {
      if (!(need >> i & 1u)) continue;
      T qi[1][D], value[1][U], e[U];
      const T none[1] = {};
      const int own_i[1] = {own[i]};
#pragma unroll
      for (int k = 0; k < D; k++) qi[0][k] = q[i][k];
      small_group_values<KDE_GAUSSIAN, T, D, kFitTight, CHECK, false>(
          tile, j0 + g, qi, own_i, discrete_codes<T, 1, 0>{}, none, value);
#pragma unroll
      for (int p = 0; p < U; p++) e[p] = fast_exp2(value[0][p]);
      t[i] += tree_sum(e);
    }
  }
}

/* wref - m - h, the log2 scale of a tight quarter's sum, with one rounding
 * that matters: wref - m exactly as s + e (TwoSum), then (s - h) + e,
 * whose s - h is exact (Sterbenz) where the scale is small against h, as
 * it is for the queries whose sums the quarter moves. ((wref - m) - h
 * rounded near |h| for far queries, wref - (m + h) near |wref| for near
 * ones: emulate density's far queries at d = 2 1.8x, its leaving one out
 * at d = 3 2x the difference form's largest error.) */
template <typename T> __device__ __forceinline__ T tight_level(T wref, T m, T h)
{
  const T s = wref - m;
  const T b = s - wref;
  const T e = (wref - (s - b)) + (-m - b);
  return (s - h) + e;
}

/* t 2^level for a tight quarter's sum t > 0 (normal): t's exponent moved
 * into the level first, so that where t is large (a wide quarter's, up to
 * 2^106) 2^level cannot flush to 0 while the product matters, nor, where t
 * is small, overflow. */
__device__ __forceinline__ float wide_scaled(float t, float level)
{
  const int bits = __float_as_int(t);
  const float mantissa = __int_as_float((bits & 0x007fffff) | 0x3f800000);
  return mantissa * fast_exp2(level + (float) ((bits >> 23) - 127));
}

/* A tight quarter's pairs (q relative to the tile's anchor, unscaled; h
 * and wref from warp_tight_quarter) into ts, relative to the running max
 * m like the other tiles' sums: the quarter's sum times 2^(wref - m - h)
 * (tight_level), the one rounding that depends on m, as the difference
 * form's aux - m. Where that passes kLazyLimit (or m is still the lowest
 * float), m rises to the quarter's own level, (wref - h) + the sum's
 * exponent, and s is rescaled (tight_raise): rare, so one branch for the
 * thread's queries, selects otherwise; a wide quarter's shares are scaled
 * there too (wide_scaled), so that the common path stays as short. The
 * caller adds ts to s. */
template <typename T, int Q>
__device__ __forceinline__ void tight_raise(const T (&t)[Q], const T (&h)[Q], T wref, bool wide,
                                            T (&m)[Q], compensated_sum<T> (&s)[Q], T (&ts)[Q],
                                            T (&add)[Q])
{
#pragma unroll
  for (int i = 0; i < Q; i++) {
    if (wide) add[i] = t[i] > (T) 0 ? wide_scaled(t[i], tight_level(wref, m[i], h[i])) : (T) 0;
    if (add[i] <= (T) kLazyLimit) continue;
    const T m_new = (wref - h[i]) + (T) ilogb(t[i]);
    const T f = fast_exp2(m[i] - m_new); /* 0 from lowest() */
    s[i] *= f;
    ts[i] *= f;
    const T level = tight_level(wref, m_new, h[i]);
    add[i] = wide ? wide_scaled(t[i], level) : t[i] * fast_exp2(level);
    m[i] = m_new;
  }
}

template <typename T, int D, bool CHECK, int Q>
__device__ __forceinline__ void tight_tile(const T *__restrict__ tile, const T (&q)[Q][D],
                                           const T (&h)[Q], T (&m)[Q],
                                           compensated_sum<T> (&s)[Q], T (&ts)[Q],
                                           const int (&own)[Q], T wref, unsigned need,
                                           bool wide)
{
  T t[Q], add[Q];
  tight_sums<T, D, CHECK>(tile, q, own, need, t);
  bool raise = wide;
#pragma unroll
  for (int i = 0; i < Q; i++) {
    /* t = 0: not needed, or every term 0 (and 0 times 2^+inf, from m still
     * the lowest float, would be NaN) */
    const T scaled = t[i] * fast_exp2(tight_level(wref, m[i], h[i]));
    add[i] = t[i] > (T) 0 ? scaled : (T) 0;
    raise |= !(add[i] <= (T) kLazyLimit);
  }
  if (__builtin_expect(raise, 0)) tight_raise(t, h, wref, wide, m, s, ts, add);
#pragma unroll
  for (int i = 0; i < Q; i++) ts[i] += add[i];
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_TIGHT_TILE_CUH */
