/* The conditional CDF of a Gaussian estimate (conditional_cdf.c). */
#ifndef KDEGPU_CONDITIONAL_CDF_H
#define KDEGPU_CONDITIONAL_CDF_H

#include <math.h>
#include <stdint.h>

#include "kde_backend.h"
#include <kdegpu/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * F(y | x) of a Gaussian estimate with covariance H for one response
 * column y given the columns x: each point's kernel, given x, is normal in
 * y with mean y_j + B (x - x_j), B = H_yx H_xx^-1, and variance sigma^2 =
 * H_yy - B H_xy, so
 *   F(y | x) = sum_j a_j Phi((v - u_j) / lambda_j) / sum_j a_j,
 *   a_j = w_j lambda_j^-dim exp(-|z - z_j|^2 / (2 lambda_j^2)),
 * with z = L^-1 x (H_xx = L L'), v = (y - B x) / sigma, u_j = (y_j - B x_j)
 * / sigma, and lambda_j an adaptive fit's factor (1 otherwise). Both sums
 * are kept as log-sum-exp states, so the ratio stays defined where every
 * a_j underflows. Matrices are column-major.
 */
typedef struct {
  int64_t n_train, dim;
  const double *train;      /* n_train x dim: z_j */
  const double *response;   /* n_train: u_j */
  const double *log_weight; /* n_train: log w_j - dim log lambda_j (-inf: none) */
  const double *scale;      /* NULL, or n_train lambda_j */
} kde_conditional_cdf_problem;

/* F(y | x) at m queries, z (m x dim) and v (m), into out; with `density`
 * (or NULL) also the conditional density of v, sum_j a_j phi((v - u_j) /
 * lambda_j) / lambda_j / sum_j a_j (f(y | x) times sigma). NaN where no
 * point's a_j is positive. */
void kde_cpu_conditional_cdf(const kde_conditional_cdf_problem *problem, const double *z,
                             const double *v, int64_t m, int threads,
                             kde_interrupt_probe interrupted, double *out, double *density,
                             kde_status *status);

/* The same on the GPUs `devices` (cuda/conditional_cdf.cu; kde_cuda_stub.c
 * without nvcc): contiguous shares of the queries, batches within each
 * device's memory budget. */
void kde_cuda_conditional_cdf(const kde_conditional_cdf_problem *problem, const double *z,
                              const double *v, int64_t m, const int *devices, int n_devices,
                              double memory_budget, kde_interrupt_probe interrupted,
                              double *out, double *density, kde_status *status);

#ifdef __cplusplus
}
#endif

/* log Phi(t), accurate in both tails: erfc while Phi(t) is a normal
 * double, below that the asymptotic series of Mills' ratio (its terms past
 * t^-14 are below 3e-16 at t = -30). */
KDE_HD double kde_log_normal_cdf(double t)
{
  if (t > 0) return log1p(-0.5 * erfc(t * 0.70710678118654752440));
  if (t > -30) return log(0.5 * erfc(-t * 0.70710678118654752440));
  const double r = 1 / (t * t);
  const double series =
      1 - r * (1 - 3 * r * (1 - 5 * r * (1 - 7 * r * (1 - 9 * r * (1 - 11 * r * (1 - 13 * r))))));
  return -0.5 / r - log(-t) - 0.91893853320467274178 + log(series);
}

#endif
