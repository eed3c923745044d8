/*
 * layout.cuh: how training points and queries are stored on the device:
 * the storage layouts and, for the tensor-core kernels, where each value
 * goes and the fp16 range. What the packers (pack.cu) write and the
 * kernels read.
 */
#ifndef KDEGPU_CUDA_LAYOUT_CUH
#define KDEGPU_CUDA_LAYOUT_CUH

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>

namespace kdegpu {

/* How the training points are stored on the device, and which kernel reads
 * them. The tensor-core layouts serve the single-precision Gaussian. */
enum kde_layout {
  KDE_LAYOUT_PLAIN,   /* 32-point tiles of (d + 1) rows: small, wide kernels */
  KDE_LAYOUT_TC_WIDE, /* kde_tc_wide_kernel, d >= kTcWideMinDim */
  KDE_LAYOUT_TC_SMALL /* kde_tc_small_kernel, d = kTcSmallDim */
};

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

/* An anchored model's anchors (model.cuh's `anchored`): per run of
 * kAnchorPoints points, dim values of T (hi) then dim more (lo), hi + lo
 * the centre of the run's box in storage coordinates. Coordinate k of the
 * anchor in double, as the packer subtracts it from a point and the
 * derivative sums from a query (so that a query on a training point lands
 * exactly on it). */
template <typename T>
__host__ __device__ inline double anchor_value(const T *anchor, int64_t dim, int64_t k)
{
  return (double) anchor[k] + (double) anchor[dim + k];
}

/* Error-free transformations (Knuth's two-sum, the FMA's two-product):
 * s + e == a + b and p + e == a * b exactly, in double. The packers form
 * storage coordinates to twice double's precision with them. The device
 * takes the rounded operations as intrinsics, which the compiler never
 * contracts into an FMA with a neighbour (a product contracted into the
 * next sum gave the device other bits than the host: a query on a training
 * point then missed it by 1e-17, and the exponential kernel's cusp saw a
 * direction). */
__host__ __device__ inline double add_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
__host__ __device__ inline double mul_rn(double a, double b)
{
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
__host__ __device__ inline void two_sum(double a, double b, double &s, double &e)
{
  s = add_rn(a, b);
  const double v = add_rn(s, -a);
  e = add_rn(add_rn(a, -add_rn(s, -v)), add_rn(b, -v));
}
__host__ __device__ inline void two_product(double a, double b, double &p, double &e)
{
  p = mul_rn(a, b);
  e = fma(a, b, -p);
}

/* Coordinate c of (raw row - center) transform (dim x dim, column-major)
 * to twice double's precision, hi + lo: the terms as the CPU's
 * kde_whiten_row_exact sums them (whiten.c), before its renormalisation. */
__host__ __device__ inline void whiten_exact(const double *raw, int64_t ldr, int64_t row,
                                             int dim, const double *center,
                                             const double *transform, int c, double &hi,
                                             double &lo)
{
  hi = lo = 0.0;
  for (int k = 0; k < dim; k++) {
    const double t = transform[(int64_t) c * dim + k];
    double xk, xk_lo, p, p_lo, sum, sum_lo;
    two_sum(raw[(int64_t) k * ldr + row], -center[k], xk, xk_lo);
    two_product(xk, t, p, p_lo);
    two_sum(hi, p, sum, sum_lo);
    hi = sum;
    lo = add_rn(lo, add_rn(sum_lo, fma(xk_lo, t, p_lo)));
  }
}

/* What a whitened coordinate z lost to rounding, given its exact value hi
 * + lo, rounded to float as kde_whiten_residual and a fit's residuals are
 * (so that a query on a training point lands on it); one that would
 * overflow a float stays. */
__host__ __device__ inline double whitening_residual(double hi, double lo, double z)
{
  const double lost = add_rn(add_rn(hi, -z), lo);
  return fabs(lost) < 0x1p127 ? (double) (float) lost : lost;
}

/* A whitened coordinate z = z_hi + z_lo in storage coordinates, (z -
 * centre) * scale, as hi + lo to twice double's precision: what the packers
 * store and the derivative sums use, so that an offset from an anchor,
 * relative_to_anchor(), keeps double's precision relative to the offset
 * (data 4,000 bandwidths from the centre lost eps x 4,000 bandwidths to a
 * rounded product: 1e-13 of a density in double). */
__host__ __device__ inline void storage_coordinate(double z_hi, double z_lo, double centre,
                                                   double scale, double &hi, double &lo)
{
  double s, e, p, pe;
  two_sum(z_hi, -centre, s, e);
  two_product(s, scale, p, pe);
  two_sum(p, fma(add_rn(e, z_lo), scale, pe), hi, lo);
}

/* hi + lo - anchor, rounded once from double (in T) after an exact-ish
 * subtraction: hi - anchor is exact where they are within a factor of 2,
 * else rounded relative to the offset. */
__host__ __device__ inline double relative_to_anchor(double hi, double lo, double anchor)
{
  return add_rn(add_rn(hi, -anchor), lo);
}

} // namespace kdegpu

#endif /* KDEGPU_CUDA_LAYOUT_CUH */
