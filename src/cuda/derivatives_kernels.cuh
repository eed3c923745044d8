/*
 * derivatives_kernels.cuh: the kernels of the derivative sums (design:
 * derivatives.cuh) and their selector, included only by the two .cu files
 * that instantiate them, one per precision.
 */
#ifndef KDEGPU_CUDA_DERIVATIVES_KERNELS_CUH
#define KDEGPU_CUDA_DERIVATIVES_KERNELS_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "kdegpu/kernels.h"
#include "accumulate.cuh"
#include "derivatives.cuh"
#include "kernel_facts.cuh"
#include "kernels.cuh"
#include "layout.cuh"
#include "numeric.cuh"
#include "tile_copy.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* ---- kernels.h's derivatives, picked by type -------------------------- */

template <int K> __device__ __forceinline__ float profile_d1(float t)
{
  return kde_profile_d1_f(K, t);
}
template <int K> __device__ __forceinline__ double profile_d1(double t)
{
  return kde_profile_d1(K, t);
}
template <int K> __device__ __forceinline__ float profile_d2(float t)
{
  return kde_profile_d2_f(K, t);
}
template <int K> __device__ __forceinline__ double profile_d2(double t)
{
  return kde_profile_d2(K, t);
}
template <int K> __device__ __forceinline__ float profile_ratio1(float t)
{
  return kde_profile_ratio1_f(K, t);
}
template <int K> __device__ __forceinline__ double profile_ratio1(double t)
{
  return kde_profile_ratio1(K, t);
}
template <int K> __device__ __forceinline__ float profile_ratio2(float t)
{
  return kde_profile_ratio2_f(K, t);
}
template <int K> __device__ __forceinline__ double profile_ratio2(double t)
{
  return kde_profile_ratio2(K, t);
}

/* ---- one pair's coefficients ------------------------------------------ *
 * With term = w k e^-M (e for the unbounded kernels, the linear w k for
 * compact ones), a pair adds term to s0 and a1 = w k1 e^-M to k1sum, a1 v
 * to first, a2 v v' (a2 = w k2 e^-M) to second. For the Gaussian a1 and a2
 * are -term / 2 and term / 4: the kernel sums term v and term v v' and the
 * end applies the constants. At t = 0 (a query on a training point) v = 0
 * adds nothing to first and second, and a1 counts only where finite (not
 * at the cusps of the triangular and exponential kernels), as on the CPU.
 * t is in storage units, t / scale^2 the kernel's. */
template <int K, typename T>
__device__ __forceinline__ void pair_coefficients(T t, T term, T aux, bool second, T &a1,
                                                  T &a2)
{
  constexpr double inv2 = 1.0 / (kde_log2_coordinate_scale(K) * kde_log2_coordinate_scale(K));
  const T tk = t * (T) inv2;
  if (K == KDE_GAUSSIAN) {
    a1 = term;
    a2 = term;
  } else if (K == KDE_EXPONENTIAL) {
    a1 = t > 0 ? term * profile_ratio1<K>(tk) : (T) 0;
    a2 = second && t > 0 ? term * profile_ratio2<K>(tk) : (T) 0;
  } else {
    a1 = aux * profile_d1<K>(tk);
    if (!(t > 0) && !isfinite(a1)) a1 = 0;
    a2 = second && t > 0 ? aux * profile_d2<K>(tk) : (T) 0;
  }
}

/* The value a pair adds to the running maximum: log2 (w k) for the
 * unbounded kernels (storage coordinates are pre-scaled so that
 * log_profile is log2 k), w k for compact ones. */
template <int K, typename T> __device__ __forceinline__ T pair_level(T t, T aux)
{
  return kernel_sums_logs(K) ? aux + log_profile<K>(t) : aux * profile<K>(t);
}

/* ---- the register-resident state -------------------------------------- */

template <typename T, int D, bool SECOND> struct deriv_state {
  static constexpr int P = SECOND ? D * (D + 1) / 2 : 1;
  T s0, k1, f[D], S[P];
  __device__ __forceinline__ void zero()
  {
    s0 = k1 = 0;
#pragma unroll
    for (int c = 0; c < D; c++) f[c] = 0;
#pragma unroll
    for (int c = 0; c < P; c++) S[c] = 0;
  }
  __device__ __forceinline__ void scale(T x)
  {
    s0 *= x;
    k1 *= x;
#pragma unroll
    for (int c = 0; c < D; c++) f[c] *= x;
    if (SECOND) {
#pragma unroll
      for (int c = 0; c < P; c++) S[c] *= x;
    }
  }
  __device__ __forceinline__ void add(const deriv_state &o)
  {
    s0 += o.s0;
    k1 += o.k1;
#pragma unroll
    for (int c = 0; c < D; c++) f[c] += o.f[c];
    if (SECOND) {
#pragma unroll
      for (int c = 0; c < P; c++) S[c] += o.S[c];
    }
  }
  /* with_s0 false: the caller adds the group's terms to s0 at once */
  __device__ __forceinline__ void add_pair(const T (&v)[D], T term, T a1, T a2, bool gaussian,
                                           bool with_s0 = true)
  {
    if (with_s0) s0 += term;
    if (!gaussian) k1 += a1;
#pragma unroll
    for (int c = 0; c < D; c++) f[c] = fma(a1, v[c], f[c]);
    if (SECOND) {
#pragma unroll
      for (int b = 0; b < D; b++) {
        const T ab = a2 * v[b];
#pragma unroll
        for (int c = 0; c <= b; c++) S[b * (b + 1) / 2 + c] = fma(ab, v[c], S[b * (b + 1) / 2 + c]);
      }
    }
  }
};

/* ---- shared chunks ------------------------------------------------------ */

/* Points [0, count) of storage tiles at src (count a multiple of 32) into
 * point records of R values: coordinate k at k, aux at `aux_at`, stored
 * relative to their run's anchor (hi, lo; `anchor` the chunk's first run's,
 * which starts the chunk; NULL: none) and restored here (the sums
 * below take coordinates as they are, within an ulp of T of them). Then,
 * for the Gaussian, aux becomes what the kernel wants: log2 w, or log2 w -
 * |x|^2 / 2 (the expanded form), from what the storage holds (`expanded`). */
template <typename T>
__device__ __forceinline__ void load_chunk(T *rec, int R, int aux_at, const T *__restrict__ src,
                                           int count, int dim, int expanded, int want_expanded,
                                           const T *__restrict__ anchor)
{
  const int per_tile = (dim + 1) * kTileWidth;
  __syncthreads(); /* the previous chunk has been read */
  for (int i = threadIdx.x; i < count * (dim + 1); i += kThreads) {
    const int tile = i / per_tile, r = i - tile * per_tile;
    const int k = r / kTileWidth, p = tile * kTileWidth + (r - k * kTileWidth);
    const T *c = anchor == nullptr ? nullptr : anchor + p / kAnchorPoints * (2 * dim);
    rec[p * R + (k < dim ? k : aux_at)] =
        k < dim && c != nullptr ? (src[i] + c[dim + k]) + c[k] : src[i];
  }
  __syncthreads();
  if (expanded != want_expanded) { /* uniform: the whole launch takes it or not */
    const T half = expanded ? (T) 0.5 : (T) -0.5;
    for (int p = threadIdx.x; p < count; p += kThreads) {
      T norm2 = 0;
      for (int k = 0; k < dim; k++) norm2 = fma(rec[p * R + k], rec[p * R + k], norm2);
      rec[p * R + aux_at] += half * norm2; /* -inf (no weight) stays */
    }
    __syncthreads();
  }
}

/* Coordinate c of the query's row in storage coordinates, hi + lo, as the
 * packers make the points' (layout.cuh's storage_coordinate), with its lo
 * part where the model reads them (query_lo not NULL). */
__device__ __forceinline__ void storage_query(const double *query, const double *query_lo,
                                              int64_t ldz, int64_t row, const double *center,
                                              int c, double scale, double &hi, double &lo)
{
  storage_coordinate(query[c * ldz + row], query_lo != NULL ? query_lo[c * ldz + row] : 0.0,
                     center[c], scale, hi, lo);
}
__device__ __forceinline__ double storage_query(const double *query, const double *query_lo,
                                                int64_t ldz, int64_t row, const double *center,
                                                int c, double scale)
{
  double hi, lo;
  storage_query(query, query_lo, ldz, row, center, c, scale, hi, lo);
  return hi;
}

/* The end of a block for one field value: what it writes, relative to 2^M
 * (the constants of the Gaussian and the storage scale applied). */
template <int K> __host__ __device__ constexpr double field_factor(int order)
{
  /* order 1: first (a1 v, v in storage units), 2: second */
  return (K == KDE_GAUSSIAN ? (order == 1 ? -0.5 : 0.25) : 1.0) /
         (order == 1 ? kde_log2_coordinate_scale(K)
                     : kde_log2_coordinate_scale(K) * kde_log2_coordinate_scale(K));
}

/* ---- the register-resident kernel: d = D (1..4) or d <= D (8, 16, 32) ---
 * The Gaussian's gradient takes the expanded form of the density kernels:
 * a pair's level is aux' + q.x with aux' = log2 w - |x|^2 / 2 (so M runs
 * |q|^2 / 2 above the true maximum) and first sums term x, less q s0 at
 * the end: d FMAs fewer per pair for the distance and d subtractions fewer
 * for v, for the rounding of |x|^2 against q.x (the density's, in single
 * precision). Hessians keep the difference form, which v v' needs, and so
 * does the gradient of a fit whose density takes it (PLAIN: model.cu's
 * expanded_rounding beyond the model's tolerance). */

template <int K, typename T, int D, bool SECOND, bool PLAIN = false>
__global__ void __launch_bounds__(kThreads) kde_deriv_kernel(const deriv_args<T> a)
{
  constexpr int R = deriv_record<T>(D);
  constexpr int CH = deriv_chunk(D);
  constexpr bool LSE = kernel_sums_logs(K);
  constexpr bool EXPANDED = K == KDE_GAUSSIAN && !SECOND && !PLAIN;
  /* points per group (one lazy-max check, one loop step): 8 for the
   * expanded gradient in single precision (1.75x the density's time at
   * n = m = 1e6, d = 3, against 2.0x with 4; the Hessian and the
   * exponential kernel measured 5-10 % slower with 8), fewer where
   * registers are short */
  constexpr bool F = sizeof(T) == sizeof(float);
  constexpr int U = D <= 4 ? (F && EXPANDED ? 8 : 4) : F ? 2 : 1;
  /* a chunk's sums, then the total: float only (double has the digits) */
  constexpr bool TWO_LEVEL = sizeof(T) == sizeof(float);
  constexpr double scale = kde_log2_coordinate_scale(K);
  extern __shared__ float4 deriv_smem[];
  T *rec = reinterpret_cast<T *>(deriv_smem);

  const int64_t row = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  const bool active = row < a.n_query;
  /* q: the query as the pairs use it. In the difference form on an
   * anchored model, per run of kAnchorPoints q - anchor, formed again from
   * the query (in L1) and rounded to T as the packer rounded x - anchor
   * (pack.cu), so
   * that a query on a training point is exactly on it (the cusps' t = 0);
   * the expanded form takes the coordinates restored (load_chunk). */
  T q[D];
#pragma unroll
  for (int c = 0; c < D; c++)
    q[c] = active && c < a.dim ? (T) storage_query(a.query, a.query_lo, a.ldz, row, a.center, c, scale)
                               : (T) 0;
  /* coordinates past dim (a bucket wider than d) stay 0 in every record */
  for (int i = threadIdx.x; i < CH * R; i += kThreads) rec[i] = 0;
  /* an anchored model's difference form (d <= 4): the query's storage
   * coordinates to twice double's precision, formed once (forming them
   * per run of kAnchorPoints took a single gradient 9-20% longer) */
  constexpr int QD = !EXPANDED && D <= kSmallMaxDim ? D : 1;
  double q_hi[QD], q_lo[QD];
#pragma unroll
  for (int c = 0; c < QD; c++) {
    q_hi[c] = q_lo[c] = 0.0;
    if (QD == D && a.anchor != nullptr && active && c < a.dim)
      storage_query(a.query, a.query_lo, a.ldz, row, a.center, c, scale, q_hi[c], q_lo[c]);
  }

  deriv_state<T, D, SECOND> chunk, total;
  deriv_state<T, D, SECOND> &part = TWO_LEVEL ? chunk : total;
  chunk.zero();
  total.zero();
  T M = LSE ? real_traits<T>::lowest() : (T) 0; /* finite: no (-inf) - (-inf) */

  const int64_t p0 = (int64_t) blockIdx.y * a.split_points;
  const int64_t count = a.n_points - p0 < a.split_points ? a.n_points - p0 : a.split_points;
  const visit_units visits = block_visits(a, p0, count / kUnit);
  for (int64_t t = 0; t < visits.count; t++) {
    const T *unit = a.train + (p0 + visits.unit(t) * kUnit) * (a.dim + 1);
    /* the unit's first anchor (runs of kAnchorPoints) */
    const T *anchor = a.anchor == nullptr
                          ? nullptr
                          : a.anchor + (visits.base + visits.unit(t)) * (kUnit / kAnchorPoints) *
                                           (2 * a.dim);
    for (int c0 = 0; c0 < kUnit; c0 += CH) {
      load_chunk(rec, R, D, unit + c0 * (a.dim + 1), CH, a.dim, a.expanded, EXPANDED,
                 EXPANDED && anchor != nullptr ? anchor + c0 / kAnchorPoints * (2 * a.dim)
                                               : nullptr);
#pragma unroll 1
      for (int j = 0; j < CH; j += U) {
        if (!EXPANDED && anchor != nullptr && (c0 + j) % kAnchorPoints == 0) {
          const T *run = anchor + (c0 + j) / kAnchorPoints * (2 * a.dim);
#pragma unroll
          for (int c = 0; c < D; c++) {
            double hi = 0.0, lo = 0.0;
            if (QD == D) {
              hi = q_hi[c < QD ? c : 0];
              lo = q_lo[c < QD ? c : 0];
            } else if (active && c < a.dim) {
              storage_query(a.query, a.query_lo, a.ldz, row, a.center, c, scale, hi, lo);
            }
            q[c] = active && c < a.dim ? (T) relative_to_anchor(hi, lo, anchor_value(run, a.dim, c))
                                       : (T) 0;
          }
        }
        T v[U][D], tt[U], level[U], aux[U];
#pragma unroll
        for (int p = 0; p < U; p++) {
          T x[R];
          load_vec<T, R>(rec + (j + p) * R, x);
          tt[p] = 0;
          aux[p] = x[D];
          if (EXPANDED) { /* v holds x; tt is unused */
            level[p] = aux[p];
#pragma unroll
            for (int c = 0; c < D; c++) {
              v[p][c] = x[c];
              level[p] = fma(q[c], x[c], level[p]);
            }
          } else {
#pragma unroll
            for (int c = 0; c < D; c++) {
              v[p][c] = x[c] - q[c];
              tt[p] = fma(v[p][c], v[p][c], tt[p]);
            }
            level[p] = pair_level<K>(tt[p], aux[p]);
          }
        }
        /* LSE: the lazy maximum of accumulate.cuh. The terms against the
         * running M; only when their sum passes kLazyLimit (or is inf: M
         * starts at lowest()) does M become the group's maximum (plus
         * kLazyHeadroom), the sums
         * so far rescaled and the terms taken again. Rare after the first
         * group, it saves the maximum of every group. */
        T terms[U];
        if (LSE) {
#pragma unroll
          for (int p = 0; p < U; p++) terms[p] = fast_exp2(level[p] - M);
          T g = terms[0];
#pragma unroll
          for (int p = 1; p < U; p++) g += terms[p];
          if (__builtin_expect(!(g <= (T) kLazyLimit), 0)) {
            T top = level[0];
#pragma unroll
            for (int p = 1; p < U; p++) top = fmax(top, level[p]);
            top += (T) kLazyHeadroom; /* as group_fix_one (accumulate.cuh) */
            const T f = fast_exp2(M - top);
            if (TWO_LEVEL) chunk.scale(f);
            total.scale(f);
            M = top;
#pragma unroll
            for (int p = 0; p < U; p++) terms[p] = fast_exp2(level[p] - M);
            g = terms[0];
#pragma unroll
            for (int p = 1; p < U; p++) g += terms[p];
          }
          part.s0 += g; /* the group's sum is s0's share: no per-term add */
        }
#pragma unroll
        for (int p = 0; p < U; p++) {
          T term, a1, a2;
          if (LSE) {
            term = terms[p];
          } else {
            term = level[p];
            M = fmax(M, term);
          }
          pair_coefficients<K>(tt[p], term, aux[p], SECOND, a1, a2);
          part.add_pair(v[p], term, a1, a2, K == KDE_GAUSSIAN, !LSE);
        }
      }
      if (TWO_LEVEL) {
        total.add(chunk);
        chunk.zero();
      }
    }
  }

  /* the end: relative to 2^M; compact kernels' linear sums divided by M */
  T top = M, mul = 1;
  if (EXPANDED) { /* back to the difference form: M and first */
    T half_q2 = 0;
#pragma unroll
    for (int c = 0; c < D; c++) {
      total.f[c] = fma(-q[c], total.s0, total.f[c]);
      half_q2 = fma((T) 0.5 * q[c], q[c], half_q2);
    }
    top = M - half_q2;
  }
  if (LSE) {
    if (!(total.s0 > 0)) top = -INFINITY;
  } else {
    top = M > 0 ? log2(M) : (T) -INFINITY;
    mul = M > 0 ? (T) 1 / M : (T) 0;
  }
  if (!active) return;
  T *out = a.part + (int64_t) blockIdx.y * a.fields * a.ldq + row;
  out[kFieldMax * a.ldq] = top;
  out[kFieldS0 * a.ldq] = total.s0 * mul;
  out[kFieldK1 * a.ldq] = (K == KDE_GAUSSIAN ? (T) -0.5 * total.s0 : total.k1) * mul;
  const T f1 = (T) field_factor<K>(1) * mul, f2 = (T) field_factor<K>(2) * mul;
#pragma unroll
  for (int c = 0; c < D; c++)
    if (c < a.dim) out[(kFieldFirst + c) * a.ldq] = total.f[c] * f1;
  if (SECOND) {
#pragma unroll
    for (int b = 0; b < D; b++)
#pragma unroll
      for (int c = 0; c <= b; c++)
        if (b < a.dim)
          out[(kFieldFirst + a.dim + b * (b + 1) / 2 + c) * a.ldq] =
              total.S[b * (b + 1) / 2 + c] * f2;
  }
}

/* ---- the generic kernel: any d up to kDerivMaxDim ---------------------- *
 * The queries in shared memory ([dim][kThreads]), the chunk one storage
 * tile, first and second summed in place in the block's partial fields
 * (each thread its own column of a.part: coalesced, mostly in L1). For
 * Hessians beyond kDerivMaxSecondDim and gradients beyond
 * kDerivMaxFirstDim: correct, not fast. */
template <int K, typename T, bool SECOND>
__global__ void __launch_bounds__(kThreads) kde_deriv_generic_kernel(const deriv_args<T> a)
{
  constexpr bool LSE = kernel_sums_logs(K);
  constexpr double scale = kde_log2_coordinate_scale(K);
  constexpr int CH = deriv_chunk(0);
  extern __shared__ float4 deriv_smem[];
  const int dim = a.dim, R = deriv_record<T>(dim);
  T *rec = reinterpret_cast<T *>(deriv_smem);
  T *sq = rec + CH * R;

  const int64_t row = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  const bool active = row < a.n_query;
  /* rows past the batch (< ldq) sum into their own unused columns */
  T *out = a.part + (int64_t) blockIdx.y * a.fields * a.ldq + row;
  T *first = out + kFieldFirst * a.ldq, *second = first + dim * a.ldq;
  const int n_sums = a.fields - kFieldFirst;
  for (int c = 0; c < dim; c++)
    sq[c * kThreads + threadIdx.x] =
        active ? (T) storage_query(a.query, a.query_lo, a.ldz, row, a.center, c, scale) : (T) 0;
  for (int f = 0; f < n_sums; f++) first[f * a.ldq] = 0;
  const T *q = sq + threadIdx.x;

  T s0 = 0, k1 = 0, M = LSE ? real_traits<T>::lowest() : (T) 0;
  const int64_t p0 = (int64_t) blockIdx.y * a.split_points;
  const int64_t count = a.n_points - p0 < a.split_points ? a.n_points - p0 : a.split_points;
  const visit_units visits = block_visits(a, p0, count / kUnit);
  for (int64_t t = 0; t < visits.count; t++) {
    const T *unit = a.train + (p0 + visits.unit(t) * kUnit) * (dim + 1);
    /* the unit's first anchor (runs of kAnchorPoints: CH divides one) */
    static_assert(kAnchorPoints % CH == 0, "a chunk within one anchor's run");
    const T *anchor = a.anchor == nullptr
                          ? nullptr
                          : a.anchor + (visits.base + visits.unit(t)) * (kUnit / kAnchorPoints) *
                                           (2 * dim);
    for (int c0 = 0; c0 < kUnit; c0 += CH) {
      load_chunk(rec, R, dim, unit + c0 * (dim + 1), CH, dim, a.expanded, 0,
                 anchor == nullptr ? nullptr : anchor + c0 / kAnchorPoints * (2 * dim));
#pragma unroll 1
      for (int j = 0; j < CH; j++) {
        const T *x = rec + j * R;
        T tt = 0;
        for (int c = 0; c < dim; c++) {
          const T v = x[c] - q[c * kThreads];
          tt = fma(v, v, tt);
        }
        const T level = pair_level<K>(tt, x[dim]);
        T term, a1, a2;
        if (LSE) {
          if (level > M) {
            const T f = fast_exp2(M - level);
            s0 *= f;
            k1 *= f;
            for (int i = 0; i < n_sums; i++) first[i * a.ldq] *= f;
            M = level;
          }
          term = fast_exp2(level - M);
        } else {
          term = level;
          M = fmax(M, term);
        }
        pair_coefficients<K>(tt, term, x[dim], SECOND, a1, a2);
        s0 += term;
        if (K != KDE_GAUSSIAN) k1 += a1;
        if (a1 != 0 || a2 != 0) {
          for (int c = 0; c < dim; c++) first[c * a.ldq] += a1 * (x[c] - q[c * kThreads]);
          if (SECOND)
            for (int b = 0; b < dim; b++) {
              const T ab = a2 * (x[b] - q[b * kThreads]);
              for (int c = 0; c <= b; c++)
                second[(b * (b + 1) / 2 + c) * a.ldq] += ab * (x[c] - q[c * kThreads]);
            }
        }
      }
    }
  }

  T top = M, mul = 1;
  if (LSE) {
    if (!(s0 > 0)) top = -INFINITY;
  } else {
    top = M > 0 ? log2(M) : (T) -INFINITY;
    mul = M > 0 ? (T) 1 / M : (T) 0;
  }
  out[kFieldMax * a.ldq] = top;
  out[kFieldS0 * a.ldq] = s0 * mul;
  out[kFieldK1 * a.ldq] = (K == KDE_GAUSSIAN ? (T) -0.5 * s0 : k1) * mul;
  const T f1 = (T) field_factor<K>(1) * mul, f2 = (T) field_factor<K>(2) * mul;
  for (int c = 0; c < dim; c++) first[c * a.ldq] *= f1;
  if (SECOND)
    for (int i = 0; i < dim * (dim + 1) / 2; i++) second[i * a.ldq] *= f2;
}

/* The gradient's kernel for a size bucket (0: the generic kernel, which
 * takes the difference form either way). */
template <int K, typename T, bool PLAIN> deriv_kernel_fn<T> gradient_kernel_for(int bucket)
{
  switch (bucket) {
  case 1: return kde_deriv_kernel<K, T, 1, false, PLAIN>;
  case 2: return kde_deriv_kernel<K, T, 2, false, PLAIN>;
  case 3: return kde_deriv_kernel<K, T, 3, false, PLAIN>;
  case 4: return kde_deriv_kernel<K, T, 4, false, PLAIN>;
  case 8: return kde_deriv_kernel<K, T, 8, false, PLAIN>;
  case 16: return kde_deriv_kernel<K, T, 16, false, PLAIN>;
  case 32: return kde_deriv_kernel<K, T, 32, false, PLAIN>;
  default: return kde_deriv_generic_kernel<K, T, false>;
  }
}

/* The selector (derivatives.cuh); each precision's .cu instantiates it. */
template <typename T>
deriv_kernel_fn<T> select_deriv_kernel(int kernel, int dim, bool second, bool plain,
                                       size_t *smem)
{
  if (kernel == KDE_RECTANGULAR || dim < 1 || dim > kDerivMaxDim) return nullptr;
  int bucket = dim <= 4 ? dim : dim <= 8 ? 8 : dim <= 16 ? 16 : 32;
  if (dim > (second ? kDerivMaxSecondDim : kDerivMaxFirstDim)) bucket = 0;
  *smem = bucket == 0
              ? ((size_t) deriv_chunk(0) * deriv_record<T>(dim) + (size_t) kThreads * dim) * sizeof(T)
              : (size_t) deriv_chunk(bucket) * deriv_record<T>(bucket) * sizeof(T);
  return dispatch_kernel(kernel, [bucket, second, plain](auto k) -> deriv_kernel_fn<T> {
    constexpr int K = decltype(k)::value;
    if (K == KDE_RECTANGULAR) return nullptr;
    if (second) {
      switch (bucket) {
      case 1: return kde_deriv_kernel<K, T, 1, true>;
      case 2: return kde_deriv_kernel<K, T, 2, true>;
      case 3: return kde_deriv_kernel<K, T, 3, true>;
      case 4: return kde_deriv_kernel<K, T, 4, true>;
      case 8: return kde_deriv_kernel<K, T, 8, true>;
      default: return kde_deriv_generic_kernel<K, T, true>;
      }
    }
    /* only the Gaussian's gradient has an expanded form to leave */
    if constexpr (K == KDE_GAUSSIAN)
      if (plain) return gradient_kernel_for<K, T, true>(bucket);
    return gradient_kernel_for<K, T, false>(bucket);
  });
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_DERIVATIVES_KERNELS_CUH */
