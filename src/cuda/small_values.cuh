/*
 * small_values.cuh: a group's pair values in the FMA kernel for d = 1..4
 * (kernel_small.cuh): every kernel's log2 term or term of a thread's
 * queries against a group of a shared tile's points, in each storage form.
 */
#ifndef KDEGPU_CUDA_SMALL_VALUES_CUH
#define KDEGPU_CUDA_SMALL_VALUES_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

#include <type_traits>

#include "kdegpu/kernels.h"
#include "accumulate.cuh"
#include "kernel_facts.cuh"
#include "kernels.cuh"
#include "numeric.cuh"
#include "tile_copy.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* Mixed data: a thread's queries' codes and the columns' log2 factors
 * (kde_args); nothing for C = 0. */
template <typename T, int Q, int C> struct discrete_codes {
  T code[Q][C];
  T mismatch[C], per_level[C];
};
template <typename T, int Q> struct discrete_codes<T, Q, 0> {};

/* A group's values: value[i][p] for query i and the group's point p, log2
 * of the term (LSE kernels) or the term (compact kernels); before_column(p),
 * if given, runs before column p's values (small_tile: the last group's
 * exps, so that the MUFU's and the FMAs' instructions interleave). UNIFORM (LSE
 * kernels in the difference form, a warp share whose points all have the
 * same aux, as in an unweighted fit): relative to the running max, from
 * rel_base[i] = aux - m[i], one add per pair fewer than aux + log k and its
 * difference from m. Otherwise absolute, and rel_base is not read. (Relative
 * values with aux read per pair measured 6% slower than absolute ones: the
 * subtraction of m then leaves the MUFU's block for the FMAs'.) */
template <int K, typename T, int D, int A, bool CHECK, bool UNIFORM, int Q, int U, int C,
          typename Column = void (*)(int)>
__device__ __forceinline__ void small_group_values(const T *__restrict__ tile,
                                                   int j, const T (&q)[Q][D],
                                                   const int (&own)[Q],
                                                   const discrete_codes<T, Q, C> &dc,
                                                   const T (&rel_base)[Q],
                                                   T (&value)[Q][U],
                                                   Column &&before_column = nullptr)
{
  constexpr bool LSE = kernel_sums_logs(K);
  /* Gaussian, d >= 3: aux = log2 w - |x|^2 / 2 and the query holds q, so
   * aux + q.x = log2 w + log2 k + |q|^2 / 2; the host subtracts |q|^2 / 2
   * (a tight tile's, kFitTight, relative to the anchor: tight_tile does).
   * (log2 k = -s2 / 2 for the pre-scaled coordinates, kde_log_profile.)
   * Adaptive (A = kFitAdaptive): the difference form, s2 times the point's
   * 1 / lambda^2 from the row after aux. kFitPlain: the difference form.
   * The Gaussian's difference form at a fixed bandwidth is halved
   * (halved_difference: q holds q / sqrt2). */
  constexpr bool EXPANDED = expanded_form(K, D, A);
  constexpr int CODES = D + 1 + scale_rows(A); /* the tile's first code row */
  constexpr int ROWS = CODES + C;
  /* j >= 0: unsigned, so that / and % are a shift and a mask */
  const unsigned uj = (unsigned) j;
  const T *base = tile + (uj / kTileWidth) * ROWS * kTileWidth + (uj % kTileWidth);
  /* with a hook, the columns are loaded as they are needed (a 16-byte load's
   * worth at a time), so that fewer registers hold them */
  constexpr bool HOOK = !std::is_pointer<std::remove_reference_t<Column>>::value;
  constexpr int V = HOOK && 16 / (int) sizeof(T) < U ? 16 / (int) sizeof(T) : U;
  T x[ROWS][V];
#pragma unroll
  for (int p = 0; p < U; p++) {
    if (p % V == 0) {
#pragma unroll
      for (int k = 0; k < ROWS; k++) load_vec<T, V>(base + k * kTileWidth + p, x[k]);
    }
    if constexpr (HOOK) before_column(p);
#pragma unroll
    for (int i = 0; i < Q; i++) {
      T v;
      if (EXPANDED) { /* never UNIFORM */
        v = x[D][p % V];
#pragma unroll
        for (int k = 0; k < D; k++) v = fma(q[i][k], x[k][p % V], v);
      } else {
        if constexpr (halved_difference(K, D, A)) { /* q holds q / sqrt2 */
          v = UNIFORM ? rel_base[i] : x[D][p % V];
#pragma unroll
          for (int k = 0; k < D; k++) {
            const T u = fma(x[k][p % V], -inv_sqrt2<T>(), q[i][k]);
            v = fma(-u, u, v);
          }
        } else {
          T s2 = 0;
#pragma unroll
          for (int k = 0; k < D; k++) {
            const T diff = q[i][k] - x[k][p % V];
            s2 = fma(diff, diff, s2);
          }
          if (A == kFitAdaptive) s2 *= x[D + 1][p % V];
          v = pair_value<K, LSE>(s2, UNIFORM ? rel_base[i] : x[D][p % V]);
        }
        if constexpr (C > 0) {
#pragma unroll
          for (int k = 0; k < C; k++) {
            const T delta = fabs(dc.code[i][k] - x[CODES + k][p % V]);
            /* a select, not a product: per_level * 0 is NaN at -inf */
            v += delta == (T) 0 ? (T) 0 : fma(dc.per_level[k], delta, dc.mismatch[k]);
          }
        }
      }
      if (CHECK && j + p == own[i]) v = excluded_value<LSE, T>();
      value[i][p] = v;
    }
  }
}

/* A group's values and their exp2s in one block (small_tile's fused steps,
 * tight_sums): column p - 1's exp2s before column p's values, so that every
 * MUFU depends on its column's FMAs; gsum[i] = the group's sum of query
 * i's terms, and whether one passed kLazyLimit. RELATIVE: the values are
 * the exponents already (m is not read). */
template <int K, typename T, int D, int A, bool CHECK, bool UNIFORM, bool RELATIVE, int POLY,
          int Q, int U, int C>
__device__ __forceinline__ bool fused_group(const T *__restrict__ tile, int j,
                                            const T (&q)[Q][D], const int (&own)[Q],
                                            const discrete_codes<T, Q, C> &dc,
                                            const T (&rel_base)[Q], const T (&m)[Q],
                                            T (&value)[Q][U], T (&gsum)[Q])
{
  column_sums<T, Q, U> sums;
  const auto exps = [&](int p) {
    if (p == 0) return;
    T e[Q];
    column_exps<POLY, RELATIVE>(value, m, p - 1, e);
    sums.push(p - 1, e);
  };
  small_group_values<K, T, D, A, CHECK, UNIFORM>(tile, j, q, own, dc, rel_base, value, exps);
  exps(U); /* the last column's after the values */
  return sums.sums(gsum);
}

/* UNIFORM values' base: the warp share's one aux less each running max. */
template <typename T, int Q>
__device__ __forceinline__ void relative_base(T aux_u, const T (&m)[Q], T (&base)[Q])
{
#pragma unroll
  for (int i = 0; i < Q; i++) base[i] = aux_u - m[i];
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_SMALL_VALUES_CUH */
