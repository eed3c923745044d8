/*
 * numeric.cuh: the number helpers of the kernels and packers: float, fp16
 * and bfloat16 bits and operand splits (the same bits on the host and the
 * device), the exp2s of the hot loop, tree sums, and kernels.h's profiles
 * and log-sum-exp states picked by type.
 */
#ifndef KDEGPU_CUDA_NUMERIC_CUH
#define KDEGPU_CUDA_NUMERIC_CUH

#include <cuda_runtime.h>
#include <cuda_fp16.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kdegpu/kernels.h"

namespace kdegpu {

constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.69314718055994530942;

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
 * 2^f by its degree-11 minimax polynomial for relative error (3e-18 with
 * exact coefficients, 3e-17 as doubles), 2^n added to p's exponent field.
 * At most 0.95 ulp from exp2 (2e8 arguments against long double; Taylor's
 * degree 13 gave 0.86). The range checks read x's high word on the integer
 * pipe, so that the FP64 pipe, the double kernels' limit, issues only the
 * 15 adds and FMAs: x >= 1024 (and +inf) is taken as 1023, which still
 * trips the lazy-max check; x below about -1020 (and -inf) gives 0 (as ftz
 * in single: such terms are below 2^-1020 of the running max). */
__device__ __forceinline__ double fast_exp2(double x)
{
  const int hi = __double2hiint(x);
  const bool big = hi >= 0x40900000;               /* x >= 1024 */
  const bool tiny = (unsigned) hi > 0xC08FE000u;   /* x < -1020 (about) */
  const double xc = big ? 1023.0 : x;
  const double shifter = 6755399441055744.0;
  const double t = xc + shifter;
  const int n = __double2loint(t);
  const double f = xc - (t - shifter);
  double p = 0x1.e79bb90d68fa4p-32;
  p = fma(p, f, 0x1.e61b5374e2831p-28);
  p = fma(p, f, 0x1.b5267ce416d96p-24);
  p = fma(p, f, 0x1.62bfc79b39429p-20);
  p = fma(p, f, 0x1.ffcbfba97c3e2p-17);
  p = fma(p, f, 0x1.4309130ed98edp-13);
  p = fma(p, f, 0x1.5d87fe78cd6e8p-10);
  p = fma(p, f, 0x1.3b2ab6fba0116p-7);
  p = fma(p, f, 0x1.c6b08d7049fe8p-5);
  p = fma(p, f, 0x1.ebfbdff82c5a4p-3);
  p = fma(p, f, 0x1.62e42fefa39efp-1);
  p = fma(p, f, 1.0);
  const double r = __hiloint2double(__double2hiint(p) + (int) ((unsigned) n << 20),
                                    __double2loint(p));
  return tiny ? 0.0 : r;
}

/* exp2 on the FMA pipe (Cody-Waite: 2^n 2^f, |f| <= 1/2, 2^f by its
 * degree-6 minimax polynomial for relative error, 2e-9, with p(0) = 1), for
 * a share of the terms while the MUFU is saturated. At most 0.95 ulp from
 * exp2 over every float argument in [-125, 126] whose exp2 is normal
 * (checked exhaustively: the harness's exp2 check; Taylor's degree 6 gave
 * 2.7 ulp). Arguments are clamped to [-125, 126]: above, a result of 2^126
 * still trips the lazy-max check; below, 0 as with ftz.
 * poly_exp2_in_range: the same without the clamps, for xc in [-125, 126]
 * (wrong outside). */
__device__ __forceinline__ float poly_exp2_in_range(float xc)
{
  const float shifter = 12582912.0f; /* 1.5 x 2^23: adding rounds to an integer */
  const float t = xc + shifter;
  const float f = xc - (t - shifter);
  float p = 1.5353362890196235e-4f;
  p = fmaf(p, f, 1.3398875094744961e-3f);
  p = fmaf(p, f, 9.6184373595470437e-3f);
  p = fmaf(p, f, 5.5503324695085253e-2f);
  p = fmaf(p, f, 2.4022647913573195e-1f);
  p = fmaf(p, f, 6.9314720285574971e-1f);
  p = fmaf(p, f, 1.0f);
  return __int_as_float(__float_as_int(p) + (int) ((unsigned) __float_as_int(t) << 23));
}
__device__ __forceinline__ float poly_exp2(float x)
{
  const float r = poly_exp2_in_range(fminf(fmaxf(x, -125.0f), 126.0f));
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

} // namespace kdegpu

#endif /* KDEGPU_CUDA_NUMERIC_CUH */
