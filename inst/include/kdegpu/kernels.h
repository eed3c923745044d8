/*
 * kdegpu/kernels.h: the kernel math, written once for both backends.
 *
 * Valid C99 and CUDA C++. Under nvcc every function is __host__ __device__,
 * so the CPU backend (src/kde_cpu.c), the CUDA kernels (src/kde_cuda.cu) and
 * the host code that computes normalising constants share one definition.
 *
 * Conventions
 * -----------
 * Every kernel is radially symmetric with a 1-D profile k(s), s = |z| / a,
 * where z are whitened coordinates (covariance of the kernel = identity) and
 * a = kde_scale(kernel, d) is the radius scale that makes that covariance the
 * identity in d dimensions. The backends receive data already whitened and
 * divided by a, so the only per-pair quantity is s^2 = |z_q - z_x|^2 / a^2.
 *
 * In 1-D these are exactly the kernels of stats::density() (bw = kernel sd):
 *   gaussian      k(s) = exp(-s^2 / 2)                       a = 1
 *   epanechnikov  k(s) = 1 - s^2,            s < 1           a = sqrt(5)
 *   rectangular   k(s) = 1,                  s < 1           a = sqrt(3)
 *   triangular    k(s) = 1 - s,              s < 1           a = sqrt(6)
 *   biweight      k(s) = (1 - s^2)^2,        s < 1           a = sqrt(7)
 *   cosine        k(s) = (1 + cos(pi s))/2,  s < 1           a = 1/sqrt(1/3 - 2/pi^2)
 *   optcosine     k(s) = cos(pi s / 2),      s < 1           a = 1/sqrt(1 - 8/pi^2)
 *   exponential   k(s) = exp(-s)  (Laplace)                  a = 1/sqrt(2)
 * In d dimensions, with M_p = int_0^inf s^p k(s) ds and S_{d-1} the area of
 * the unit sphere, the standardised density g(z) = C k(|z| / a) has
 *   a^2   = d M_{d-1} / M_{d+1}                  (so that E|z|^2 = d)
 *   log C = -d log a - log S_{d-1} - log M_{d-1} (so that g integrates to 1).
 */
#ifndef KDEGPU_KERNELS_H
#define KDEGPU_KERNELS_H

#include <math.h>

#ifdef __CUDACC__
#define KDE_HD __host__ __device__ __forceinline__
#elif defined(__GNUC__) || defined(__clang__)
/* Forced, so that a constant kernel folds each switch below away and the
 * CPU loops that call these functions vectorise. */
#define KDE_HD static inline __attribute__((always_inline))
#else
#define KDE_HD static inline
#endif

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* The order is part of the .Call interface: R/kernels.R lists the same names. */
typedef enum {
  KDE_GAUSSIAN = 0,
  KDE_EPANECHNIKOV = 1,
  KDE_RECTANGULAR = 2,
  KDE_TRIANGULAR = 3,
  KDE_BIWEIGHT = 4,
  KDE_COSINE = 5,
  KDE_OPTCOSINE = 6,
  KDE_EXPONENTIAL = 7,
  KDE_N_KERNELS = 8
} kde_kernel;

/* Compact kernels (support s < 1, 0 <= k <= 1) are summed on the linear
 * scale: with weights summing to 1 the sum cannot overflow, and it needs no
 * exp per pair. The two unbounded kernels are summed as log-sum-exp of
 * log w + log k, which stays finite far from the data. */
KDE_HD int kde_kernel_is_compact(int kernel)
{
  return kernel != KDE_GAUSSIAN && kernel != KDE_EXPONENTIAL;
}

/* k(s) as a function of s^2 (0 outside the support). */
KDE_HD double kde_profile(int kernel, double s2)
{
  double s;
  switch (kernel) {
  case KDE_GAUSSIAN:     return exp(-0.5 * s2);
  case KDE_EXPONENTIAL:  return exp(-sqrt(s2));
  case KDE_EPANECHNIKOV: return s2 < 1.0 ? 1.0 - s2 : 0.0;
  case KDE_RECTANGULAR:  return s2 < 1.0 ? 1.0 : 0.0;
  case KDE_TRIANGULAR:   return s2 < 1.0 ? 1.0 - sqrt(s2) : 0.0;
  case KDE_BIWEIGHT:     s = 1.0 - s2; return s2 < 1.0 ? s * s : 0.0;
  case KDE_COSINE:       return s2 < 1.0 ? 0.5 * (1.0 + cos(M_PI * sqrt(s2))) : 0.0;
  case KDE_OPTCOSINE:    return s2 < 1.0 ? cos(0.5 * M_PI * sqrt(s2)) : 0.0;
  default:               return 0.0;
  }
}

/* log k(s) for the unbounded kernels, the exponent that log-sum-exp adds. */
KDE_HD double kde_log_profile(int kernel, double s2)
{
  switch (kernel) {
  case KDE_GAUSSIAN:    return -0.5 * s2;
  case KDE_EXPONENTIAL: return -sqrt(s2);
  default:              return log(kde_profile(kernel, s2));
  }
}

/* Single-precision twins for the CUDA float path, same formulas. */
KDE_HD float kde_profile_f(int kernel, float s2)
{
  float s;
  switch (kernel) {
  case KDE_GAUSSIAN:     return expf(-0.5f * s2);
  case KDE_EXPONENTIAL:  return expf(-sqrtf(s2));
  case KDE_EPANECHNIKOV: return s2 < 1.0f ? 1.0f - s2 : 0.0f;
  case KDE_RECTANGULAR:  return s2 < 1.0f ? 1.0f : 0.0f;
  case KDE_TRIANGULAR:   return s2 < 1.0f ? 1.0f - sqrtf(s2) : 0.0f;
  case KDE_BIWEIGHT:     s = 1.0f - s2; return s2 < 1.0f ? s * s : 0.0f;
  case KDE_COSINE:       return s2 < 1.0f ? 0.5f * (1.0f + cosf((float) M_PI * sqrtf(s2))) : 0.0f;
  case KDE_OPTCOSINE:    return s2 < 1.0f ? cosf(0.5f * (float) M_PI * sqrtf(s2)) : 0.0f;
  default:               return 0.0f;
  }
}

KDE_HD float kde_log_profile_f(int kernel, float s2)
{
  switch (kernel) {
  case KDE_GAUSSIAN:    return -0.5f * s2;
  case KDE_EXPONENTIAL: return -sqrtf(s2);
  default:              return logf(kde_profile_f(kernel, s2));
  }
}

/* ---- Normalising constants (host side, once per fit) ------------------- */

/* int_0^1 s^p f(s) ds by 8-point Gauss-Legendre on 64 panels: exact to
 * rounding for the smooth cosine profiles, whose moments have no short
 * closed form and whose integration-by-parts recurrence is unstable in p. */
KDE_HD double kde_gauss_legendre_moment(int kernel, int p)
{
  const double node[4] = {0.1834346424956498, 0.5255324099163290,
                          0.7966664774136267, 0.9602898564975363};
  const double weight[4] = {0.3626837833783620, 0.3137066458778873,
                            0.2223810344533745, 0.1012285362903763};
  const int panels = 64;
  const double h = 1.0 / panels;
  double total = 0.0;
  for (int i = 0; i < panels; i++) {
    double mid = (i + 0.5) * h;
    for (int k = 0; k < 4; k++) {
      for (int sign = -1; sign <= 1; sign += 2) {
        double s = mid + sign * 0.5 * h * node[k];
        total += 0.5 * h * weight[k] * pow(s, p) * kde_profile(kernel, s * s);
      }
    }
  }
  return total;
}

/* log M_p = log int_0^inf s^p k(s) ds, p >= 0. */
KDE_HD double kde_log_profile_moment(int kernel, int p)
{
  double q = (double) p;
  switch (kernel) {
  case KDE_GAUSSIAN:     /* 2^((p-1)/2) Gamma((p+1)/2) */
    return 0.5 * (q - 1.0) * log(2.0) + lgamma(0.5 * (q + 1.0));
  case KDE_EXPONENTIAL:  /* Gamma(p+1) */
    return lgamma(q + 1.0);
  case KDE_EPANECHNIKOV: /* 1/(p+1) - 1/(p+3) */
    return log(2.0) - log(q + 1.0) - log(q + 3.0);
  case KDE_RECTANGULAR:  /* 1/(p+1) */
    return -log(q + 1.0);
  case KDE_TRIANGULAR:   /* 1/(p+1) - 1/(p+2) */
    return -log(q + 1.0) - log(q + 2.0);
  case KDE_BIWEIGHT:     /* 1/(p+1) - 2/(p+3) + 1/(p+5) = 8/((p+1)(p+3)(p+5)) */
    return log(8.0) - log(q + 1.0) - log(q + 3.0) - log(q + 5.0);
  default:
    return log(kde_gauss_legendre_moment(kernel, p));
  }
}

/* Radius scale a with E|z|^2 = d for the standardised kernel. */
KDE_HD double kde_scale(int kernel, int d)
{
  return exp(0.5 * (log((double) d) + kde_log_profile_moment(kernel, d - 1)
                    - kde_log_profile_moment(kernel, d + 1)));
}

/* log C: g(z) = C k(|z|/a) integrates to 1 over R^d. */
KDE_HD double kde_log_norm_const(int kernel, int d)
{
  double half_d = 0.5 * d;
  double log_sphere_area = log(2.0) + half_d * log(M_PI) - lgamma(half_d);
  return -d * log(kde_scale(kernel, d)) - log_sphere_area
         - kde_log_profile_moment(kernel, d - 1);
}

/* ---- Online log-sum-exp ------------------------------------------------ *
 * The state represents exp(max) * sum. The empty state is (-inf, 0); every
 * operation checks sum == 0 before subtracting maxima, so (-inf) - (-inf)
 * never occurs (compact kernels give -inf terms outside their support).
 * The same merge serves terms, tiles, split training sets, batches and GPUs.
 */
#define KDE_DEFINE_LSE(TYPE, SUFFIX, EXP, LOG)                              \
  typedef struct { TYPE max; TYPE sum; } kde_lse##SUFFIX;                   \
                                                                            \
  KDE_HD kde_lse##SUFFIX kde_lse_empty##SUFFIX(void)                        \
  {                                                                         \
    kde_lse##SUFFIX s;                                                      \
    s.max = -(TYPE) INFINITY;                                               \
    s.sum = 0;                                                              \
    return s;                                                               \
  }                                                                         \
                                                                            \
  KDE_HD kde_lse##SUFFIX kde_lse_make##SUFFIX(TYPE max, TYPE sum)           \
  {                                                                         \
    kde_lse##SUFFIX s;                                                      \
    s.max = max;                                                            \
    s.sum = sum;                                                            \
    return s;                                                               \
  }                                                                         \
                                                                            \
  KDE_HD kde_lse##SUFFIX kde_lse_merge##SUFFIX(kde_lse##SUFFIX a,           \
                                               kde_lse##SUFFIX b)           \
  {                                                                         \
    if (b.sum == 0) return a;                                               \
    if (a.sum == 0) return b;                                               \
    if (a.max >= b.max) {                                                   \
      a.sum += b.sum * EXP(b.max - a.max);                                  \
      return a;                                                             \
    }                                                                       \
    b.sum += a.sum * EXP(a.max - b.max);                                    \
    return b;                                                               \
  }                                                                         \
                                                                            \
  /* Add one term exp(log_term); log_term = -inf adds nothing. */           \
  KDE_HD kde_lse##SUFFIX kde_lse_add##SUFFIX(kde_lse##SUFFIX s,             \
                                             TYPE log_term)                 \
  {                                                                         \
    if (!(log_term > -(TYPE) INFINITY)) return s;                           \
    return kde_lse_merge##SUFFIX(s, kde_lse_make##SUFFIX(log_term, 1));     \
  }                                                                         \
                                                                            \
  KDE_HD TYPE kde_lse_log##SUFFIX(kde_lse##SUFFIX s)                        \
  {                                                                         \
    return s.sum > 0 ? s.max + LOG(s.sum) : -(TYPE) INFINITY;               \
  }

KDE_DEFINE_LSE(double, , exp, log)
KDE_DEFINE_LSE(float, _f, expf, logf)

/* Base-2 twins: the same state with max and sum meaning exp2(max) * sum.
 * The CUDA backend keeps its exponents in log2 units (coordinates scaled so
 * that one exp2 per pair remains); log2 of the result times log(2) is the
 * natural log. Same merge, so the same -inf guards. */
KDE_DEFINE_LSE(double, _2, exp2, log2)
KDE_DEFINE_LSE(float, _f2, exp2f, log2f)

#endif /* KDEGPU_KERNELS_H */
