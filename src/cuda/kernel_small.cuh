/*
 * kernel_small.cuh: the FMA kernel for d = 1..4 (kde_small_kernel, every
 * kernel, both precisions): queries in registers, 256-point shared tiles,
 * the lazy max software-pipelined by one group. A template only:
 * kernel_small.cu instantiates the fixed-bandwidth kernels (select_small_kernel),
 * kernel_adaptive.cu the adaptive ones (A = kFitAdaptive: a row of
 * per-point scales after aux, kUnit more values per shared tile),
 * kernel_plain.cu the Gaussian's difference form (A = kFitPlain). A group's
 * values: small_values.cuh; the tight tiles (d = 3): tight_tile.cuh.
 */
#ifndef KDEGPU_CUDA_KERNEL_SMALL_CUH
#define KDEGPU_CUDA_KERNEL_SMALL_CUH

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
#include "tight_tile.cuh"
#include "tile_copy.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* Whether small_tile interleaves a group's exps with the next group's
 * values (small_step): the single-precision difference form at d <= 2 (4
 * FMAs a pair or fewer), where the exp unit is the limit and exps issued in
 * a burst stalled on it while the FMAs waited (ncu, d = 2: 60% of the exp
 * unit's rate, a sixth of the warps' time stalled on its queue). Harness
 * ceiling, one H200: d = 1 3.14 -> 3.41e12 pairs/s, d = 2 2.50 -> 2.71e12.
 * At d = 3 (6 FMAs a pair) the instruction issue is the limit and the
 * second group's registers spilled: 7.7% slower; so did tiles
 * that hold a query's own point, adaptive fits (their per-point scales)
 * and mixed data (their codes). */
template <int K, typename T, int D, int A, bool CHECK, int C>
__host__ __device__ constexpr bool interleaved_exps()
{
  return sizeof(T) == sizeof(float) && !CHECK && !expanded_form(K, D, A) && D <= 2 &&
         A != kFitAdaptive && C == 0;
}

/* The lazy-max fix of one query whose group sum passed kLazyLimit: its
 * values of group j again, absolute (one query: few registers), summed
 * against a raised max (group_fix_one). */
template <int K, typename T, int D, int A, int U, typename S>
__device__ __forceinline__ void fix_query_group(const T *__restrict__ tile, int j,
                                                const T (&q)[D], T &m, S &s, T &ts, T &gsum)
{
  T qi[1][D];
  T again[1][U], none[1] = {};
  const int no_own[1] = {-1};
#pragma unroll
  for (int k = 0; k < D; k++) qi[0][k] = q[k];
  small_group_values<K, T, D, A, false, false>(tile, j, qi, no_own, discrete_codes<T, 1, 0>{},
                                               none, again);
  group_fix_one(again[0], m, s, ts, gsum);
}

/* Whether small_tile takes fused steps: in UNIFORM tiles, the
 * single-precision halved difference form at d <= 3 with one aux per warp
 * quarter (an unweighted fit); at d = 1 and 3 also
 * where the quarter's aux differ (weighted fits; absolute values, m
 * subtracted before the exp2s). Harness ceiling, one H200: weighted d = 3
 * 2.10 -> 2.26e12 pairs/s, unweighted d = 1 3.55 -> 3.61e12 and d = 3
 * 2.386 -> 2.370e12 (the same kernel, its other path); at d = 2 weighted
 * 2.62 -> 2.77e12 but unweighted 3.08 -> 2.98e12, so d = 2 keeps the
 * interleaved steps there. No own point, no discrete columns. Each
 * step makes a group's values, their exp2s and the group's lazy-max check
 * in one block, so that every MUFU depends on its column's FMAs and the
 * exp2s spread among them. The software pipeline of interleaved_exps
 * (exp2s of group g - U between group g's values) and the d = 3 loop
 * (a group's exp2s after its values) left ptxas free to issue a step's
 * 30 MUFUs within 130 (d = 2) or 92 (d = 3) instructions, and so to
 * fill the MIO queue; and a tile's last group's exp2s ran alone (ncu, n =
 * 2e6, one H200: MIO throttle and wait stalls at the MUFUs, 54% of the
 * idle issue slots at d = 2 and 65% at d = 3). */
template <int K, typename T, int D, int A, bool CHECK, bool UNIFORM, int C>
__host__ __device__ constexpr bool fused_steps()
{
  return kernel_sums_logs(K) && (UNIFORM || D != 2) && !CHECK && sizeof(T) == sizeof(float) &&
         halved_difference(K, D, A) && D <= 3 && A != kFitAdaptive &&
         C == 0;
}

/* Step g of small_tile: the exps of group g - U (in last) column by column
 * between the columns of group g's values (into next), so that the MUFU's
 * and the FMAs' instructions interleave; then group g - U's lazy-max check
 * and its sums into ts. */
template <int K, typename T, int D, int A, bool CHECK, bool UNIFORM, int POLY, int Q, int U,
          int C>
__device__ __forceinline__ void small_step(const T *__restrict__ tile, int j0, int g,
                                           const T (&q)[Q][D], const int (&own)[Q],
                                           const discrete_codes<T, Q, C> &dc, T aux_u,
                                           T (&base)[Q], T (&m)[Q], compensated_sum<T> (&s)[Q],
                                           T (&ts)[Q], const T (&last)[Q][U], T (&next)[Q][U])
{
  static_assert(!CHECK && C == 0, "interleaved_exps: no own point, no discrete columns");
  column_sums<T, Q, U> sums;
  T gsum[Q];
  const auto exps = [&](int p) {
    T e[Q];
    column_exps<POLY, UNIFORM>(last, m, p, e);
    sums.push(p, e);
  };
  if (g < kSmallPointsPerWarp) {
    small_group_values<K, T, D, A, CHECK, UNIFORM>(tile, j0 + g, q, own, dc, base, next,
                                                   exps);
  } else {
#pragma unroll
    for (int p = 0; p < U; p++) exps(p);
  }
  if (__builtin_expect(sums.sums(gsum), 0)) { /* resolve group g - U */
#pragma unroll
    for (int i = 0; i < Q; i++) {
      if (gsum[i] <= (T) kLazyLimit) continue;
      fix_query_group<K, T, D, A, U>(tile, j0 + g - U, q[i], m[i], s[i], ts[i], gsum[i]);
    }
    if (UNIFORM) { /* group g's values were relative to the old max */
      relative_base(aux_u, m, base);
      if (g < kSmallPointsPerWarp)
        small_group_values<K, T, D, A, CHECK, UNIFORM>(tile, j0 + g, q, own, dc, base,
                                                       next);
    }
  }
#pragma unroll
  for (int i = 0; i < Q; i++) ts[i] += gsum[i];
}

/* One shared tile (kUnit points) for the small-d kernel: this warp's quarter,
 * in groups of U points. CHECK: the tile may hold a query's own point, the
 * own[i]-th (-1: none).
 *
 * LSE kernels are software-pipelined by one group: group k - 1's lazy-max
 * check is resolved only after group k's values (in the rare case by
 * recomputing group k - 1's values from shared memory, absolute, and group
 * k's again against the new maximum). Where interleaved_exps holds, group
 * k - 1's exp2s are issued column by column between group k's values
 * (small_step); elsewhere a group's exp2s follow its values. In the
 * difference form the values come relative to the running max where the
 * warp's quarter of the tile shares one aux, aux_u (UNIFORM,
 * small_group_values). */
template <int K, typename T, int D, int A, bool CHECK, bool UNIFORM, int Q, int C>
__device__ __forceinline__ void small_tile(const T *__restrict__ tile,
                                           const T (&q)[Q][D], T (&m)[Q],
                                           compensated_sum<T> (&s)[Q], T (&ts)[Q],
                                           const int (&own)[Q],
                                           const discrete_codes<T, Q, C> &dc, T aux_u)
{
  constexpr int U = real_traits<T>::group;
  constexpr bool LSE = kernel_sums_logs(K);
  constexpr int POLY = K == KDE_GAUSSIAN && std::is_same<T, float>::value ? kPolyExps : 0;
  const int j0 = (threadIdx.x / 32) * kSmallPointsPerWarp;
  T value[Q][U], base[Q] = {};
  if (!LSE) {
#pragma unroll 2
    for (int g = 0; g < kSmallPointsPerWarp; g += U) {
      small_group_values<K, T, D, A, CHECK, false>(tile, j0 + g, q, own, dc, base, value);
#pragma unroll
      for (int i = 0; i < Q; i++) ts[i] += tree_sum(value[i]);
    }
    return;
  }
  if constexpr (fused_steps<K, T, D, A, CHECK, UNIFORM, C>()) {
    if (UNIFORM) relative_base(aux_u, m, base);
#pragma unroll 1
    for (int g = 0; g < kSmallPointsPerWarp; g += U) {
      T gsum[Q];
      if (__builtin_expect((fused_group<K, T, D, A, CHECK, UNIFORM, UNIFORM, POLY>(
                               tile, j0 + g, q, own, dc, base, m, value, gsum)),
                           0)) {
#pragma unroll
        for (int i = 0; i < Q; i++) {
          if (gsum[i] <= (T) kLazyLimit) continue;
          /* loaded again: an opaque pointer keeps the compiler from
           * reusing the step's loads, whose registers (3 rows of 8 points
           * at d = 3) would otherwise live through the step and spill */
          const T *again_tile = tile;
          asm volatile("" : "+l"(again_tile));
          fix_query_group<K, T, D, A, U>(again_tile, j0 + g, q[i], m[i], s[i], ts[i], gsum[i]);
        }
        if (UNIFORM) relative_base(aux_u, m, base);
      }
#pragma unroll
      for (int i = 0; i < Q; i++) ts[i] += gsum[i];
    }
    return;
  }
  if constexpr (interleaved_exps<K, T, D, A, CHECK, C>()) {
    T other[Q][U];
    if (UNIFORM) relative_base(aux_u, m, base);
    small_group_values<K, T, D, A, CHECK, UNIFORM>(tile, j0, q, own, dc, base, value);
#pragma unroll 1
    for (int g = U; g <= kSmallPointsPerWarp; g += 2 * U) {
      small_step<K, T, D, A, CHECK, UNIFORM, POLY>(tile, j0, g, q, own, dc, aux_u, base, m, s, ts,
                                                   value, other);
      small_step<K, T, D, A, CHECK, UNIFORM, POLY>(tile, j0, g + U, q, own, dc, aux_u, base, m, s,
                                                   ts, other, value);
    }
    return;
  }
  if (UNIFORM) relative_base(aux_u, m, base);
  T gsum[Q];
  small_group_values<K, T, D, A, CHECK, UNIFORM>(tile, j0, q, own, dc, base, value);
  bool far = group_exps<POLY, UNIFORM>(value, m, gsum);
#pragma unroll 1
  for (int g = U; g <= kSmallPointsPerWarp; g += U) {
    if (g < kSmallPointsPerWarp)
      small_group_values<K, T, D, A, CHECK, UNIFORM>(tile, j0 + g, q, own, dc, base, value);
    if (__builtin_expect(far, 0)) { /* resolve group g - U */
      T again[Q][U];
      small_group_values<K, T, D, A, CHECK, false>(tile, j0 + g - U, q, own, dc, base, again);
#pragma unroll
      for (int i = 0; i < Q; i++)
        if (!(gsum[i] <= (T) kLazyLimit))
          group_fix_one(again[i], m[i], s[i], ts[i], gsum[i]);
      if (UNIFORM) { /* group g's values were relative to the old max */
        relative_base(aux_u, m, base);
        if (g < kSmallPointsPerWarp)
          small_group_values<K, T, D, A, CHECK, UNIFORM>(tile, j0 + g, q, own, dc, base, value);
      }
    }
#pragma unroll
    for (int i = 0; i < Q; i++) ts[i] += gsum[i];
    if (g < kSmallPointsPerWarp) far = group_exps<POLY, UNIFORM>(value, m, gsum);
  }
}

/* A tile that only some of the block's groups of 32 queries need (`need`,
 * bit i: the thread's query i, the plan's visit_groups): each group's
 * points in turn for those queries only, one query's values, exps and
 * lazy-max check at a time (no pipelining), so that few registers come on
 * top of the four queries' states (a pass of small_tile per query, or the
 * whole tile's code with a branch per query, spilled). */
template <int K, typename T, int D, int A, bool CHECK, int Q, int C>
__device__ __forceinline__ void masked_tile(const T *__restrict__ tile, const T (&q)[Q][D],
                                            T (&m)[Q], compensated_sum<T> (&s)[Q], T (&ts)[Q],
                                            const int (&own)[Q],
                                            const discrete_codes<T, Q, C> &dc, unsigned need)
{
  constexpr int U = real_traits<T>::group;
  constexpr bool LSE = kernel_sums_logs(K);
  const int j0 = (threadIdx.x / 32) * kSmallPointsPerWarp;
#pragma unroll 1
  for (int g = 0; g < kSmallPointsPerWarp; g += U) {
#pragma unroll
    for (int i = 0; i < Q; i++) {
      if (need >> i & 1u) {
        T qi[1][D], value[1][U], none[1] = {};
        const int own_i[1] = {own[i]};
        discrete_codes<T, 1, C> dc_i;
#pragma unroll
        for (int k = 0; k < D; k++) qi[0][k] = q[i][k];
        if constexpr (C > 0) {
#pragma unroll
          for (int k = 0; k < C; k++) {
            dc_i.code[0][k] = dc.code[i][k];
            dc_i.mismatch[k] = dc.mismatch[k];
            dc_i.per_level[k] = dc.per_level[k];
          }
        }
        small_group_values<K, T, D, A, CHECK, false>(tile, j0 + g, qi, own_i, dc_i, none, value);
        if constexpr (LSE) {
          T e[U];
#pragma unroll
          for (int p = 0; p < U; p++) e[p] = fast_exp2(value[0][p] - m[i]);
          T sum = tree_sum(e);
          if (__builtin_expect(!(sum <= (T) kLazyLimit), 0))
            group_fix_one(value[0], m[i], s[i], ts[i], sum);
          ts[i] += sum;
        } else {
          ts[i] += tree_sum(value[0]);
        }
      }
    }
  }
}

/* The aux shared by every point of this warp's quarter of the tile, if one
 * is (an unweighted fit's full units): then the values take one add per
 * pair fewer (UNIFORM). */
template <typename T, int ROWS, int D>
__device__ __forceinline__ bool warp_uniform_aux(const T *__restrict__ tile, T &aux_u)
{
  const int lane = threadIdx.x % 32;
  const T *aux = tile + (threadIdx.x / 32) * kSmallPointsPerWarp * ROWS + D * kTileWidth;
  static_assert(kSmallPointsPerWarp == 2 * kTileWidth, "a warp's quarter is two 32-point tiles");
  const T a0 = aux[lane], a1 = aux[ROWS * kTileWidth + lane];
  aux_u = __shfl_sync(0xffffffffu, a0, 0);
  return __all_sync(0xffffffffu, a0 == aux_u && a1 == aux_u);
}

/* visits.unit(t), or `loaded` where the kernel loaded it once (ONCE) */
template <bool ONCE>
__device__ __forceinline__ int64_t unit_at(const visit_units &visits, int64_t t, int64_t loaded)
{
  if constexpr (ONCE) return loaded;
  else return visits.unit(t);
}

/*
 * d = D in 1..4. Block (bx, by): queries [128 bx, 128 bx + 128) against the
 * by-th split of the training range. Queries live in registers (4 per
 * thread, rows lane + 32 i); each warp takes a quarter of every tile.
 * Tiles are double-buffered with cp.async. A: the fit's variant
 * (kernel_facts.cuh); an adaptive fit's tiles have (D + 2) rows per point.
 * C: mixed data's discrete columns (kernel_discrete.cu), C code rows after
 * aux in the tiles.
 */
template <int K, typename T, int D, int A, int C = 0>
__global__ void __launch_bounds__(kThreads, real_traits<T>::min_blocks)
    kde_small_kernel(const kde_args<T> a)
{
  constexpr int Q = kQueriesPerThread;
  constexpr bool LSE = kernel_sums_logs(K);
  constexpr int tile_elems = kUnit * (D + 1 + scale_rows(A) + C);
  extern __shared__ float4 smem_f4[];
  T *smem = reinterpret_cast<T *>(smem_f4);

  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t q0 = (int64_t) blockIdx.x * kBlockQueries;

  /* q: the queries as the pairs use them; in the difference form, per tile,
   * relative to the anchor of the warp's quarter (kAnchorPoints): (hi -
   * anchor hi) + (lo - anchor lo),
   * hi and lo read again from the block's rows (in L1: registers are short),
   * which for a model without anchors is hi; times 1/sqrt(2) for the
   * halved difference (kernel_facts.cuh) */
  constexpr bool EXPANDED = expanded_form(K, D, A);
  constexpr T q_scale = halved_difference(K, D, A) ? inv_sqrt2<T>() : (T) 1;
  /* tight tiles (tight_tile): the single Gaussian's fixed-bandwidth
   * difference form at d = 2 and 3 (at d = 1, tuning.cuh's kTightLevel; at
   * d = 4 the path spilled registers for 3% more pairs/s) */
  constexpr bool TIGHT_PATH = LSE && halved_difference(K, D, A) && C == 0 && (D == 2 || D == 3) &&
                              std::is_same<T, float>::value;
  T q[Q][D];
  int slot[Q];
#pragma unroll
  for (int i = 0; i < Q; i++) {
    slot[i] = lane + 32 * i;
#pragma unroll
    for (int k = 0; k < D; k++) q[i][k] = a.query[q0 + slot[i] + k * a.ldq] * q_scale;
  }
  /* Per-tile work of the kernels that take fused steps (fused_steps: the
   * single-precision difference form at d <= 3, default fits), cut where
   * the machine code showed it (issue 32): the anchored queries' hi and lo
   * rows from shared memory, the thread's own copy (qrows: each thread
   * reads only what it wrote, so no barrier; 2 D Q floats a thread), not
   * from global memory with 64-bit addresses; the own-point bookkeeping
   * only where a tile may hold a query's own point. The values and sums
   * are the same. */
  constexpr bool TILE_CUTS = fused_steps<K, T, D, A, false, true, C>() && !EXPANDED;
  constexpr int QROWS = TILE_CUTS ? 2 * D * Q : 0;
  /* a thread's Q values of a row side by side: one vector load a row */
  alignas(16) __shared__ T qrows[QROWS > 0 ? QROWS * kThreads : 1];
  if constexpr (TILE_CUTS) {
    if (a.anchor != nullptr) {
#pragma unroll
      for (int i = 0; i < Q; i++)
#pragma unroll
        for (int r = 0; r < 2 * D; r++)
          qrows[(r * kThreads + threadIdx.x) * Q + i] = a.query[q0 + slot[i] + r * a.ldq];
    }
  }
  /* and, on the tight path, each warp's anchor (hi, lo) copied with its
   * quarter of the tile, so that no global load's latency stands between
   * the tiles (harness ceiling, one H200: d = 3 2.83 -> 2.88e12 pairs/s;
   * d = 1, which waits for the copy with nothing to overlap it, 3.61 ->
   * 3.55e12, so not there) */
  constexpr bool ANCHOR_COPY = TIGHT_PATH;
  __shared__ T anchor_rows[ANCHOR_COPY ? 2 * kWarps * 2 * D : 1];
  /* global indices of the thread's first and last queries (leave one out) */
  const int64_t qg_lo = a.query_base + q0 + slot[0], qg_hi = a.query_base + q0 + slot[Q - 1];
  discrete_codes<T, Q, C> dc;
  if constexpr (C > 0) {
#pragma unroll
    for (int k = 0; k < C; k++) {
      dc.mismatch[k] = a.mismatch[k];
      dc.per_level[k] = a.per_level[k];
#pragma unroll
      for (int i = 0; i < Q; i++) dc.code[i][k] = a.query[q0 + slot[i] + (a.code_row + k) * a.ldq];
    }
  }

  T m[Q];
  compensated_sum<T> s[Q];
#pragma unroll
  for (int i = 0; i < Q; i++) m[i] = LSE ? real_traits<T>::lowest() : (T) 0;

  int64_t split_count;
  const int64_t p0 = block_split(a, split_count);
  const visit_units visits = block_visits(a, p0, split_count / kUnit);
  const int64_t n_tiles = visits.count;
  const T *src = a.train + p0 * (D + 1 + scale_rows(A) + C);

  /* tiles double-buffered, each warp copying and waiting for its own
   * quarter (the tile is stored in kTileWidth-point column blocks, so a
   * quarter is consecutive values): every warp reads only its quarter
   * (small_tile, masked_tile, tight_tile), so the warps meet their own
   * lanes (__syncwarp), never the block (harness ceiling, one H200, n = m
   * = 1e6, single unless said: d = 1 3.51 -> 3.55e12 pairs/s, d = 2 3.05
   * -> 3.07e12, weighted d = 2 2.57 -> 2.62e12, double d = 1 / 2 / 3 7.37
   * / 6.63 / 6.17 -> 7.48 / 6.74 / 6.24e11; d = 3 since the tight tiles'
   * own-frame sums, whose warps finish a tile at different times: 2.545 ->
   * 2.591e12, weighted 2.438 -> 2.488e12, ncu had 6% of its warps'
   * samples at the block's barrier) */
  constexpr int quarter_elems = tile_elems / kWarps;
  static_assert(quarter_elems * kWarps == tile_elems, "a warp's quarter of the tile");
  /* on the tight path each lane's copy addresses, the quarter's and the
   * anchor's, are formed once (tile_copy.cuh's copiers; harness ceiling,
   * one H200: d = 2 3.473 -> 3.519e12 pairs/s, d = 3 2.916 -> 2.945e12;
   * d = 1, whose fused steps lost 0.5%, not). Lanes past the anchor's 2 D
   * values hold addresses past it that they never copy from: clamping them
   * (to an offset of 0) cost d = 2 0.9% (3.519 -> 3.488e12, same run). */
  static_assert(!TIGHT_PATH || TILE_CUTS, "the tight path takes the loop's unit_t");
  const warp_share_copier<quarter_elems, T> tile_copier(smem, src);
  const lane_copier4 anchor_copier(
      anchor_rows + warp * (2 * D) + lane,
      a.anchor != nullptr
          ? a.anchor + (visits.base * (kUnit / kAnchorPoints) + warp) * (2 * D) + lane
          : nullptr);
  const auto copy = [&](int buffer, int64_t unit) {
    constexpr int64_t tile_bytes = tile_elems * (int64_t) sizeof(T);
    if constexpr (TIGHT_PATH)
      tile_copier.copy(buffer * (int) tile_bytes, unit * tile_bytes);
    else
      warp_share_copy_async<quarter_elems>(smem + buffer * tile_elems, src + unit * tile_elems);
    if constexpr (ANCHOR_COPY) {
      if (a.anchor != nullptr && lane < 2 * D)
        anchor_copier.copy(buffer * kWarps * 2 * D * (int) sizeof(T),
                           unit * (kUnit / kAnchorPoints) * 2 * D * (int64_t) sizeof(T));
    }
  };
  /* the tight path loads a tile's unit once, with its copy (if constexpr
   * here and below: the other kernels' code stays as it was) */
  int64_t unit_next = 0;
  if (n_tiles > 0) {
    if constexpr (TIGHT_PATH) unit_next = visits.unit(0);
    copy(0, TIGHT_PATH ? unit_next : visits.unit(0));
  }
  async_commit();
  for (int64_t t = 0; t < n_tiles; t++) {
    int64_t unit_t = 0;
    if constexpr (TIGHT_PATH) {
      unit_t = unit_next;
      if (t + 1 < n_tiles) {
        unit_next = visits.unit(t + 1);
        copy((t + 1) & 1, unit_next);
      }
    } else if (t + 1 < n_tiles) {
      copy((t + 1) & 1, visits.unit(t + 1));
    }
    async_commit(); /* possibly empty: keeps the group count uniform */
    /* the tile's unit: loaded once where TILE_CUTS (the tight path's came
     * with its copy, above) */
    if constexpr (TILE_CUTS && !TIGHT_PATH) unit_t = visits.unit(t);
    if constexpr (ANCHOR_COPY) {
      async_wait_all_but_newest();
      __syncwarp(); /* the lanes' copies, seen by all */
    }
    if (!EXPANDED && a.anchor != nullptr) { /* this warp's quarter's anchor */
      /* hi - anchor hi is exact for a query near the run (Sterbenz); the
       * scaled query then takes one rounding (hi + lo, then the scale,
       * took two: 1.4x the error of a GPS-like set's densities). The
       * tight path scales below, where a quarter is not tight. */
      if constexpr (TILE_CUTS) {
        const T *c = ANCHOR_COPY ? anchor_rows + ((t & 1) * kWarps + warp) * (2 * D)
                                 : a.anchor + ((visits.base + unit_t) * (kUnit / kAnchorPoints) +
                                               warp) * (2 * D);
#pragma unroll
        for (int k = 0; k < D; k++) {
          T hi[Q], lo[Q];
          load_vec<T, Q>(qrows + (k * kThreads + threadIdx.x) * Q, hi);
          load_vec<T, Q>(qrows + ((D + k) * kThreads + threadIdx.x) * Q, lo);
#pragma unroll
          for (int i = 0; i < Q; i++) {
            const T dh = hi[i] - c[k], dl = lo[i] - c[D + k];
            q[i][k] = TIGHT_PATH ? dh + dl : fma(dh, q_scale, dl * q_scale);
          }
        }
      } else {
        const T *c = a.anchor + ((visits.base + visits.unit(t)) * (kUnit / kAnchorPoints) + warp) *
                                    (2 * D);
#pragma unroll
        for (int i = 0; i < Q; i++)
#pragma unroll
          for (int k = 0; k < D; k++) {
            const T hi = a.query[q0 + slot[i] + k * a.ldq] - c[k];
            const T lo = a.query[q0 + slot[i] + (D + k) * a.ldq] - c[D + k];
            q[i][k] = TIGHT_PATH ? hi + lo : fma(hi, q_scale, lo * q_scale);
          }
      }
    }
    if constexpr (!ANCHOR_COPY) {
      async_wait_all_but_newest();
      __syncwarp(); /* the lanes' copies, seen by all */
    }
    T *tile = smem + (t & 1) * tile_elems;
    /* global index of the tile's point 0 (leave one out) */
    const int64_t tile_first = a.train_base + p0 + unit_at<TILE_CUTS>(visits, t, unit_t) * kUnit;
    const int64_t warp_first = tile_first + warp * kSmallPointsPerWarp;
    T ts[Q];
#pragma unroll
    for (int i = 0; i < Q; i++) ts[i] = 0;
    bool check;
    int own[Q]; /* where each query's own point is in the tile, or -1 */
    if constexpr (TILE_CUTS) {
      /* the same test as below, as qg_lo's offset from the warp's first
       * point (qg_hi = qg_lo + 32 (Q - 1)); own is read only where check
       * (the CHECK paths), and then qg_lo - tile_first is in
       * [-32 (Q - 1), kUnit): 32-bit offsets do */
      check = false;
#pragma unroll
      for (int i = 0; i < Q; i++) own[i] = -1;
      if (a.leave_one_out) {
        const int64_t at = qg_lo - tile_first;
        const int64_t aw = at - warp * kSmallPointsPerWarp;
        check = aw < kSmallPointsPerWarp && aw >= -32 * (Q - 1);
        if (check) {
          const int at0 = (int) at;
#pragma unroll
          for (int i = 0; i < Q; i++)
            own[i] = (unsigned) (at0 + 32 * i) < (unsigned) kUnit ? at0 + 32 * i : -1;
        }
      }
    } else {
      check = a.leave_one_out && qg_lo < warp_first + kSmallPointsPerWarp &&
              warp_first <= qg_hi;
#pragma unroll
      for (int i = 0; i < Q; i++) {
        const int64_t at = qg_lo + 32 * i - tile_first;
        own[i] = at >= 0 && at < kUnit ? (int) at : -1;
      }
    }
    /* the uniform path for the fixed-bandwidth fits without discrete
     * columns only: each path is as many kernels again to compile */
    constexpr bool UNIFORM_PATH = LSE && !EXPANDED && A != kFitAdaptive && C == 0;
    /* the groups of queries that need the tile (block-uniform) */
    const unsigned need = a.visit_groups != nullptr ? a.visit_groups[visits.first + t] : kAllGroups;
    bool tight = false;
    if constexpr (TIGHT_PATH) {
      if (a.anchor != nullptr) {
        T wref, h[Q];
        bool wide = false;
        tight = a.tight_radius2 > 0 &&
                warp_tight_quarter<T, D>(tile, a.tight_radius2, q, need, h, wref, wide);
        if (tight) {
          if (check) tight_tile<T, D, true>(tile, q, h, m, s, ts, own, wref, need, wide);
          else tight_tile<T, D, false>(tile, q, h, m, s, ts, own, wref, need, wide);
        } else {
#pragma unroll
          for (int i = 0; i < Q; i++)
#pragma unroll
            for (int k = 0; k < D; k++) q[i][k] *= q_scale;
        }
      }
    }
    if (!tight && need != kAllGroups) {
      if (check) masked_tile<K, T, D, A, true>(tile, q, m, s, ts, own, dc, need);
      else masked_tile<K, T, D, A, false>(tile, q, m, s, ts, own, dc, need);
    } else if (!tight) {
      T aux_u = 0;
      bool uniform = false;
      if constexpr (UNIFORM_PATH) {
        uniform = warp_uniform_aux<T, D + 1 + scale_rows(A) + C, D>(tile, aux_u);
        if (uniform) {
          if (check) small_tile<K, T, D, A, true, true>(tile, q, m, s, ts, own, dc, aux_u);
          else small_tile<K, T, D, A, false, true>(tile, q, m, s, ts, own, dc, aux_u);
        }
      }
      if (!uniform) {
        if (check) small_tile<K, T, D, A, true, false>(tile, q, m, s, ts, own, dc, aux_u);
        else small_tile<K, T, D, A, false, false>(tile, q, m, s, ts, own, dc, aux_u);
      }
    }
#pragma unroll
    for (int i = 0; i < Q; i++) s[i] += ts[i];
    /* the next prefetch overwrites this buffer */
    __syncwarp();
  }
  write_partials<T, Q>(a, smem, m, s, slot);
}

/* kde_small_kernel<K, T, dim, A> for a runtime (kernel, dim); NULL for a
 * dim outside 1..4. */
template <typename T, int A> kde_kernel_fn<T> small_kernel_for(int kernel, int dim)
{
  return dispatch_kernel(kernel, [dim](auto k) -> kde_kernel_fn<T> {
    constexpr int K = decltype(k)::value;
    switch (dim) {
    case 1: return kde_small_kernel<K, T, 1, A>;
    case 2: return kde_small_kernel<K, T, 2, A>;
    case 3: return kde_small_kernel<K, T, 3, A>;
    case 4: return kde_small_kernel<K, T, 4, A>;
    default: return nullptr;
    }
  });
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_KERNEL_SMALL_CUH */
