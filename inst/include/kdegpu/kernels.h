/*
 * kdegpu/kernels.h: the kernel math, written once for both backends.
 *
 * Valid C99 and CUDA C++. Under nvcc every function is __host__ __device__,
 * so the CPU backend (src/kde_cpu.c), the CUDA kernels (src/cuda/) and
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

/* Under C++ (nvcc) the kernel facts below are also constant expressions,
 * so that CUDA templates can take them as arguments. */
#ifdef __cplusplus
#define KDE_CONSTEXPR constexpr
#else
#define KDE_CONSTEXPR
#endif

/* Compact kernels (support s < 1, 0 <= k <= 1) are summed on the linear
 * scale: with weights summing to 1 the sum cannot overflow, and it needs no
 * exp per pair. The two unbounded kernels are summed as log-sum-exp of
 * log w + log k, which stays finite far from the data. */
KDE_HD KDE_CONSTEXPR int kde_kernel_is_compact(int kernel)
{
  return kernel != KDE_GAUSSIAN && kernel != KDE_EXPONENTIAL;
}

/* The factor by which the CUDA backend multiplies whitened coordinates so
 * that one exp2 per pair remains (it keeps exponents in log2 units): with
 * z' = c z, log2 k = -|z'|^2 / 2 for the Gaussian (c = sqrt(log2 e)) and
 * -|z'| for the exponential kernel (c = log2 e). Compact kernels are summed
 * on the linear scale and keep their coordinates (c = 1). */
KDE_HD KDE_CONSTEXPR double kde_log2_coordinate_scale(int kernel)
{
  return kernel == KDE_GAUSSIAN ? 1.2011224087864498 /* sqrt(log2(e)) */
         : kernel == KDE_EXPONENTIAL ? 1.4426950408889634 /* log2(e) */
         : 1.0;
}

/* The profiles, written once for double (suffix none) and float (suffix
 * _f, the CUDA single-precision path):
 *   kde_profile(kernel, s2):     k(s) as a function of s^2, 0 outside the
 *                                support;
 *   kde_log_profile(kernel, s2): log k(s), the exponent that log-sum-exp
 *                                adds for the unbounded kernels. */
/* The cosine profiles near the support's edge: (1 + cos(pi s))/2 cancels
 * to 1.1e-16 absolute (4e-9 relative at 1 - s = 1e-4), and even the
 * half-angle form cos^2(pi s / 2) keeps pi's rounding as an absolute error.
 * Both equal powers of sin(pi (1 - s) / 2), with 1 - s = (1 - s^2)/(1 + s),
 * whose 1 - s^2 is exact near the edge: full relative accuracy there. */
#define KDE_DEFINE_PROFILES(TYPE, SUFFIX, EXP, SQRT, SIN, LOG)               \
  KDE_HD TYPE kde_profile##SUFFIX(int kernel, TYPE s2)                      \
  {                                                                         \
    const TYPE one = 1, half = (TYPE) 0.5, pi = (TYPE) M_PI;                \
    const int inside = s2 < one;                                            \
    TYPE edge;                                                              \
    switch (kernel) {                                                       \
    case KDE_GAUSSIAN:     return EXP(-half * s2);                          \
    case KDE_EXPONENTIAL:  return EXP(-SQRT(s2));                           \
    case KDE_EPANECHNIKOV: return inside ? one - s2 : 0;                    \
    case KDE_RECTANGULAR:  return inside ? one : 0;                         \
    case KDE_TRIANGULAR:   return inside ? one - SQRT(s2) : 0;              \
    case KDE_BIWEIGHT:     return inside ? (one - s2) * (one - s2) : 0;     \
    case KDE_COSINE:                                                        \
      if (!inside) return 0;                                                \
      edge = SIN(half * pi * ((one - s2) / (one + SQRT(s2))));              \
      return edge * edge;                                                   \
    case KDE_OPTCOSINE:                                                     \
      return inside ? SIN(half * pi * ((one - s2) / (one + SQRT(s2)))) : 0; \
    default:               return 0;                                        \
    }                                                                       \
  }                                                                         \
                                                                            \
  KDE_HD TYPE kde_log_profile##SUFFIX(int kernel, TYPE s2)                  \
  {                                                                         \
    switch (kernel) {                                                       \
    case KDE_GAUSSIAN:    return -(TYPE) 0.5 * s2;                          \
    case KDE_EXPONENTIAL: return -SQRT(s2);                                 \
    default:              return LOG(kde_profile##SUFFIX(kernel, s2));      \
    }                                                                       \
  }

KDE_DEFINE_PROFILES(double, , exp, sqrt, sin, log)
KDE_DEFINE_PROFILES(float, _f, expf, sqrtf, sinf, logf)

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

/* ---- Integrated profiles: the 1-D kernels' CDFs ------------------------ *
 * For type = "cdf" and quantiles (src/cdf.c). The 1-D kernel with variance
 * 1 (bw is the kernel's sd) has density g(u) = C k(|u| / a), a =
 * kde_scale(kernel, 1); with v = u / a its CDF is
 *   gaussian      pnorm(u) = erfc(-u / sqrt 2) / 2
 *   exponential   exp(u sqrt 2) / 2                     (u <= 0)
 *   rectangular   (1 + v) / 2
 *   triangular    (1 + v)^2 / 2                         (v <= 0)
 *   epanechnikov  (2 + 3v - v^3) / 4    = (1 + v)^2 (2 - v) / 4
 *   biweight      1/2 + 15/16 (v - 2v^3/3 + v^5/5) = (1 + v)^3 (8 - 9v + 3v^2) / 16
 *   cosine        (1 + v + sin(pi v) / pi) / 2 = (e - sin(pi e) / pi) / 2, e = 1 + v
 *   optcosine     (1 + sin(pi v / 2)) / 2     = sin^2(pi e / 4)
 * (density.R's kernels integrated); `scale` is a, which the caller computes
 * once (kde_scale integrates the cosine kernels numerically). Each is evaluated only in its lower
 * half, u <= 0, in the factored forms on the right, which keep full
 * relative accuracy deep in the tail where the expanded forms cancel; the
 * upper half is 1 - lower(-u) by symmetry, and differences of the CDF are
 * taken between the two lower tails that need no cancellation. */
KDE_HD double kde_cdf_lower(int kernel, double u, double scale)
{
  if (!(u < 0)) u = 0;
  if (kernel == KDE_GAUSSIAN) return 0.5 * erfc(-u * 0.70710678118654752440);
  if (kernel == KDE_EXPONENTIAL) return 0.5 * exp(u * 1.41421356237309504880);
  const double v = u / scale;
  if (v <= -1) return 0;
  const double e = 1 + v; /* in (0, 1] */
  switch (kernel) {
  case KDE_RECTANGULAR:  return 0.5 * e;
  case KDE_TRIANGULAR:   return 0.5 * e * e;
  case KDE_EPANECHNIKOV: return 0.25 * e * e * (2 - v);
  case KDE_BIWEIGHT:     return e * e * e * (8 - 9 * v + 3 * v * v) / 16;
  case KDE_COSINE: {
    /* (x - sin x) / (2 pi), x = pi e: its series below x = 0.5, where the
     * difference loses digits */
    const double x = M_PI * e;
    if (x < 0.5) {
      const double x2 = x * x;
      return x * x2 / 6 *
             (1 - x2 / 20 * (1 - x2 / 42 * (1 - x2 / 72 * (1 - x2 / 110)))) /
             (2 * M_PI);
    }
    return (x - sin(x)) / (2 * M_PI);
  }
  case KDE_OPTCOSINE: {
    const double s = sin(0.25 * M_PI * e);
    return s * s;
  }
  default: return 0;
  }
}

/* P(a < U <= b) for U from the standardised 1-D kernel (either bound may
 * be infinite; 0 unless a < b), from the tails, so that it keeps its
 * relative accuracy however small it is. */
KDE_HD double kde_cdf_between(int kernel, double a, double b, double scale)
{
  if (!(b > a)) return 0;
  if (a >= 0) return kde_cdf_lower(kernel, -a, scale) - kde_cdf_lower(kernel, -b, scale);
  if (b <= 0) return kde_cdf_lower(kernel, b, scale) - kde_cdf_lower(kernel, a, scale);
  return 1 - kde_cdf_lower(kernel, a, scale) - kde_cdf_lower(kernel, -b, scale);
}

/* ---- Profile derivatives: gradients, Hessians, mean shift -------------- *
 * The derivatives of the profile as a function of t = s^2 (s = |z| / a),
 * k1 = dk/dt and k2 = d^2k/dt^2, for t inside the support (0 outside),
 * for type = "gradient" / "hessian" and the mean-shift step (derivatives.c,
 * R/derivatives.R). With k as a function of s, k1 = k_s / (2s) and
 * k2 = (k_ss - k_s / s) / (4 s^2); the cosine kernels' forms are
 * 0/0 at s = 0, so near 0 they use series in x = pi s (cosine) or
 * x = pi s / 2 (optcosine) of
 *   (sin x / x - cos x) / x^2 = sum_n (-1)^n 2(n+1) x^(2n) / (2n+3)!.
 * The triangular and exponential kernels have a cusp at s = 0: k1 and k2
 * are infinite there (the density has no derivative at a training point).
 * The rectangular kernel is flat inside its support: k1 = k2 = 0 (it has
 * no useful derivative; R refuses it). */
/* Written once for double (suffix none: the CPU, the CUDA double path) and
 * float (suffix _f: the CUDA single-precision path). */
#define KDE_DEFINE_DERIVATIVES(TYPE, SUFFIX, EXP, SQRT, SIN, COS)           \
  KDE_HD TYPE kde_sinc_minus_cos_over_x2##SUFFIX(TYPE x)                    \
  {                                                                         \
    const TYPE x2 = x * x, one = 1;                                         \
    if (x2 < (TYPE) 0.25) /* |x| < 0.5: the next term is below 1e-11 */     \
      return one / 3 - x2 * (one / 30 - x2 * (one / 840 - x2 * (one / 45360 \
             - x2 / 3991680)));                                             \
    return (SIN(x) / x - COS(x)) / x2;                                      \
  }                                                                         \
                                                                            \
  KDE_HD TYPE kde_sinc##SUFFIX(TYPE x)                                      \
  {                                                                         \
    const TYPE x2 = x * x, one = 1;                                         \
    if (x2 < (TYPE) 1e-4) return one - x2 / 6 * (one - x2 / 20);            \
    return SIN(x) / x;                                                      \
  }                                                                         \
                                                                            \
  KDE_HD TYPE kde_profile_d1##SUFFIX(int kernel, TYPE t)                    \
  {                                                                         \
    const TYPE pi = (TYPE) M_PI, half = (TYPE) 0.5, one = 1;                \
    const TYPE s = SQRT(t);                                                 \
    if (kernel != KDE_GAUSSIAN && kernel != KDE_EXPONENTIAL && !(t < one))  \
      return 0;                                                             \
    switch (kernel) {                                                       \
    case KDE_GAUSSIAN:     return -half * EXP(-half * t);                   \
    case KDE_EXPONENTIAL:  return -EXP(-s) / (2 * s);                       \
    case KDE_EPANECHNIKOV: return -one;                                     \
    case KDE_TRIANGULAR:   return -one / (2 * s);                           \
    case KDE_BIWEIGHT:     return -2 * (one - t);                           \
    case KDE_COSINE:       return -pi * pi / 4 * kde_sinc##SUFFIX(pi * s);  \
    case KDE_OPTCOSINE:                                                     \
      return -pi * pi / 8 * kde_sinc##SUFFIX(half * pi * s);                \
    default:               return 0; /* rectangular */                      \
    }                                                                       \
  }                                                                         \
                                                                            \
  KDE_HD TYPE kde_profile_d2##SUFFIX(int kernel, TYPE t)                    \
  {                                                                         \
    const TYPE pi = (TYPE) M_PI, half = (TYPE) 0.5, one = 1;                \
    const TYPE s = SQRT(t);                                                 \
    if (kernel != KDE_GAUSSIAN && kernel != KDE_EXPONENTIAL && !(t < one))  \
      return 0;                                                             \
    switch (kernel) {                                                       \
    case KDE_GAUSSIAN:     return (TYPE) 0.25 * EXP(-half * t);             \
    case KDE_EXPONENTIAL:  return EXP(-s) * (s + one) / (4 * s * t);        \
    case KDE_EPANECHNIKOV: return 0;                                        \
    case KDE_TRIANGULAR:   return one / (4 * s * t);                        \
    case KDE_BIWEIGHT:     return 2;                                        \
    case KDE_COSINE:                                                        \
      return pi * pi * pi * pi / 8 * kde_sinc_minus_cos_over_x2##SUFFIX(pi * s); \
    case KDE_OPTCOSINE:                                                     \
      return pi * pi * pi * pi / 64 *                                       \
             kde_sinc_minus_cos_over_x2##SUFFIX(half * pi * s);             \
    default:               return 0;                                        \
    }                                                                       \
  }                                                                         \
                                                                            \
  /* k1 / k and k2 / k inside the support (k > 0), in closed form for the   \
   * two unbounded kernels, whose k underflows far out while the ratio      \
   * stays finite; t > 0. */                                                \
  KDE_HD TYPE kde_profile_ratio1##SUFFIX(int kernel, TYPE t)                \
  {                                                                         \
    if (kernel == KDE_GAUSSIAN) return -(TYPE) 0.5;                         \
    if (kernel == KDE_EXPONENTIAL) return -(TYPE) 0.5 / SQRT(t);            \
    return kde_profile_d1##SUFFIX(kernel, t) / kde_profile##SUFFIX(kernel, t); \
  }                                                                         \
                                                                            \
  KDE_HD TYPE kde_profile_ratio2##SUFFIX(int kernel, TYPE t)                \
  {                                                                         \
    if (kernel == KDE_GAUSSIAN) return (TYPE) 0.25;                         \
    if (kernel == KDE_EXPONENTIAL) {                                        \
      const TYPE s = SQRT(t);                                               \
      return (s + 1) / (4 * s * t);                                         \
    }                                                                       \
    return kde_profile_d2##SUFFIX(kernel, t) / kde_profile##SUFFIX(kernel, t); \
  }

KDE_DEFINE_DERIVATIVES(double, , exp, sqrt, sin, cos)
KDE_DEFINE_DERIVATIVES(float, _f, expf, sqrtf, sinf, cosf)

/* ---- Online log-sum-exp ------------------------------------------------ *
 * The state represents exp(max) * sum. The empty state is (-inf, 0); every
 * operation checks sum == 0 before subtracting maxima, so (-inf) - (-inf)
 * never occurs (compact kernels give -inf terms outside their support).
 * The one merge serves terms, tiles, split training sets, batches and GPUs,
 * in natural-log units (suffix none: the CPU backend and the glue) and in
 * log2 units (the CUDA backend keeps its exponents so, one exp2 per pair:
 * suffix _2 in double, _f2 in float; log2 of the result times log(2) is
 * the natural log).
 */
#define KDE_DEFINE_LSE(TYPE, SUFFIX, EXP)                                   \
  typedef struct { TYPE max; TYPE sum; } kde_lse##SUFFIX;                   \
                                                                            \
  KDE_HD kde_lse##SUFFIX kde_lse_make##SUFFIX(TYPE max, TYPE sum)           \
  {                                                                         \
    kde_lse##SUFFIX s;                                                      \
    s.max = max;                                                            \
    s.sum = sum;                                                            \
    return s;                                                               \
  }                                                                         \
                                                                            \
  KDE_HD kde_lse##SUFFIX kde_lse_empty##SUFFIX(void)                        \
  {                                                                         \
    return kde_lse_make##SUFFIX(-(TYPE) INFINITY, 0);                       \
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
  }

KDE_DEFINE_LSE(double, , exp)
KDE_DEFINE_LSE(double, _2, exp2)
KDE_DEFINE_LSE(float, _f2, exp2f)

/* Add one term exp(log_term); log_term = -inf adds nothing. */
KDE_HD kde_lse kde_lse_add(kde_lse s, double log_term)
{
  if (!(log_term > -INFINITY)) return s;
  return kde_lse_merge(s, kde_lse_make(log_term, 1));
}

/* log of the represented value; -inf for the empty state. */
KDE_HD double kde_lse_log(kde_lse s)
{
  return s.sum > 0 ? s.max + log(s.sum) : -INFINITY;
}

/* log2 of the represented value of a base-2 state. */
KDE_HD double kde_lse_log_2(kde_lse_2 s)
{
  return s.sum > 0 ? s.max + log2(s.sum) : -INFINITY;
}

#endif /* KDEGPU_KERNELS_H */
