/*
 * kdegpu/radius.h: the radius law of each kernel's standard draws, written
 * once for both samplers: the CPU's (src/api_sample.c, R's generator) and
 * the GPU's (src/cuda/sample.cu, Philox).
 *
 * A standard draw of a radially symmetric kernel (identity covariance,
 * before the kernel's radius scale a) is a direction g / |g|, g being d
 * standard normals, times a radius s of density proportional to
 * s^(d-1) k(s):
 *
 *   exponential   k(s) = e^-s          s ~ Gamma(d)
 *   rectangular   k(s) = 1             s^2 ~ Beta(d / 2, 1)
 *   epanechnikov  k(s) = 1 - s^2       s^2 ~ Beta(d / 2, 2)
 *   biweight      k(s) = (1 - s^2)^2   s^2 ~ Beta(d / 2, 3)
 *   triangular    k(s) = 1 - s         s ~ Beta(d, 2)
 *   optcosine     from Beta(d, 2), accepted with cos(pi s / 2) / ((pi / 2) (1 - s))
 *   cosine        from Beta(d, 3), accepted with that ratio squared
 *
 * (cos(pi s / 2) <= (pi / 2) (1 - s) on [0, 1], so the ratios are at most
 * 1.) Beta(a, b) = G_a / (G_a + G_b) with independent gammas, and
 * G_{d/2} = |g|^2 / 2 independently of the direction g / |g|, so only
 * gammas of whole shape are drawn: sums of exponentials.
 *
 * The includer defines KDE_RADIUS_FN (the functions' qualifiers, e.g.
 * `static inline` or `__device__ inline`) and the type kde_radius_rng,
 * and declares, before including this file,
 *   double kde_radius_uniform(kde_radius_rng *rng);      uniform on (0, 1)
 *   double kde_radius_exponential(kde_radius_rng *rng);  Exp(1)
 */
#ifndef KDEGPU_RADIUS_H
#define KDEGPU_RADIUS_H

#include "kernels.h"

/* G_shape for a whole shape. */
KDE_RADIUS_FN double kde_radius_gamma(kde_radius_rng *rng, int shape)
{
  double sum = 0;
  for (int i = 0; i < shape; i++) sum += kde_radius_exponential(rng);
  return sum;
}

/* Beta(a, b) from G_a (given) and a fresh G_b. */
KDE_RADIUS_FN double kde_radius_beta(kde_radius_rng *rng, double gamma_a, int b)
{
  const double gamma_b = kde_radius_gamma(rng, b);
  return gamma_a / (gamma_a + gamma_b);
}

/* The radius s of a standard draw of `kernel` in d dimensions, given |g|^2
 * of the d normals that give its direction; 0 for the Gaussian, whose
 * standard draw is g itself. */
KDE_RADIUS_FN double kde_kernel_radius(int kernel, int d, double norm2, kde_radius_rng *rng)
{
  const double half_pi = 1.57079632679489661923;
  switch (kernel) {
  case KDE_EXPONENTIAL: return kde_radius_gamma(rng, d);
  case KDE_RECTANGULAR: return sqrt(kde_radius_beta(rng, 0.5 * norm2, 1));
  case KDE_EPANECHNIKOV: return sqrt(kde_radius_beta(rng, 0.5 * norm2, 2));
  case KDE_BIWEIGHT: return sqrt(kde_radius_beta(rng, 0.5 * norm2, 3));
  case KDE_TRIANGULAR: return kde_radius_beta(rng, kde_radius_gamma(rng, d), 2);
  case KDE_OPTCOSINE:
    for (;;) {
      const double s = kde_radius_beta(rng, kde_radius_gamma(rng, d), 2);
      if (kde_radius_uniform(rng) < cos(half_pi * s) / (half_pi * (1 - s))) return s;
    }
  case KDE_COSINE:
    for (;;) {
      const double s = kde_radius_beta(rng, kde_radius_gamma(rng, d), 3);
      const double ratio = cos(half_pi * s) / (half_pi * (1 - s));
      if (kde_radius_uniform(rng) < ratio * ratio) return s;
    }
  default: return 0;
  }
}

#endif /* KDEGPU_RADIUS_H */
