/* The kernel estimate's cumulative distribution function (cdf.c). */
#ifndef KDEGPU_CDF_H
#define KDEGPU_CDF_H

#include <stdint.h>

#include "kde_backend.h"
#include <kdegpu/kernels.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * F(x) = sum_j w_j prod_c F_jc(x_c): a product kernel, so the 1-D kernel
 * (any kernel, dim = 1) or the Gaussian with a diagonal H (any dim), with
 * sd bandwidth[c] in coordinate c. A bounded coordinate (lower[c] or
 * upper[c] finite) is folded into [lower, upper]: its density there is
 * sum_g f(s_g x + t_g) over the images g (see R/bounds.R), so
 *   F_jc(x) = sum_g P(x_jc + bandwidth[c] U in g^{-1}[lower, x]),
 * 0 below lower and 1 from upper on. Matrices are column-major.
 */
typedef struct {
  int kernel;                 /* kde_kernel */
  int64_t n_train, dim;
  const double *train;        /* n_train x dim, the data's own coordinates */
  const double *weight;       /* n_train, >= 0, sum 1 */
  const double *bandwidth;    /* dim kernel sds */
  const double *scale;        /* NULL, or n_train factors lambda_j of an
                                 adaptive fit: point j's sds are
                                 lambda_j bandwidth[c] */
  const double *lower, *upper;/* dim bounds, -inf / inf where none */
  const int64_t *image_count; /* dim: images of each coordinate (>= 1) */
  const double *image_sign;   /* sum(image_count): +1 or -1, coordinate by */
  const double *image_shift;  /*   coordinate: g^{-1} x = sign x + shift */
} kde_cdf_problem;

/* Clears `status`; 0 (and an error in it) for a problem the engines cannot
 * sum: R checks the user's arguments before. */
int kde_cdf_problem_valid(const kde_cdf_problem *problem, int64_t n_query,
                          kde_status *status);

void kde_cpu_cdf(const kde_cdf_problem *problem, const double *query,
                 int64_t n_query, int threads, kde_interrupt_probe interrupted,
                 double *out, kde_status *status);

/* CUDA (cuda/cdf.cu; kde_cuda_stub.c without nvcc): the same sums on the
 * devices of `model` (the fit's, made from the same training points),
 * within each device's memory budget; the same bits on any of them. */
struct kde_cuda_model;
void kde_cuda_cdf(struct kde_cuda_model *model, const kde_cdf_problem *problem,
                  const double *query, int64_t n_query, kde_interrupt_probe interrupted,
                  double *out, kde_status *status);

#ifdef __cplusplus
}
#endif

/* Images over all coordinates (each query's terms per training point). */
static inline int64_t kde_cdf_image_total(const kde_cdf_problem *p)
{
  int64_t total = 0;
  for (int64_t c = 0; c < p->dim; c++) total += p->image_count[c];
  return total;
}

/* The two backends' arithmetic, shared: a query x (coordinate c at
 * x[c * stride]) either needs no sum (below a lower bound: 0; at or above
 * every upper bound: 1) or is the sum over j of kde_cdf_term(). */
KDE_HD double kde_cdf_without_sum(const kde_cdf_problem *p, const double *x,
                                  int64_t stride)
{
  int all_whole = 1;
  for (int64_t c = 0; c < p->dim; c++) {
    if (x[c * stride] < p->lower[c]) return 0;
    if (x[c * stride] < p->upper[c]) all_whole = 0;
  }
  return all_whole ? 1 : -1;
}

/* w_j prod_c F_jc(x_c) (see kde_cdf_problem): per coordinate below its
 * upper bound, the kernel's mass in each image of [lower, x_c];
 * `scale` = kde_scale(kernel, 1). */
KDE_HD double kde_cdf_term(const kde_cdf_problem *p, const double *x, int64_t stride,
                           int64_t j, double scale)
{
  double product = p->weight[j];
  if (!(product > 0)) return 0;
  int64_t offset = 0;
  for (int64_t c = 0; c < p->dim && product > 0; c++) {
    const int64_t count = p->image_count[c];
    const double xc = x[c * stride];
    if (xc < p->upper[c]) {
      const double centre = p->train[j + c * p->n_train];
      const double h = p->scale != NULL ? p->bandwidth[c] * p->scale[j] : p->bandwidth[c];
      double factor = 0;
      for (int64_t g = 0; g < count; g++) {
        const double s = p->image_sign[offset + g], t = p->image_shift[offset + g];
        /* s * (-inf) + t is the right infinity for an open lower end */
        const double from = s * p->lower[c] + t, to = s * xc + t;
        const double lo = from < to ? from : to, hi = from < to ? to : from;
        factor += kde_cdf_between(p->kernel, (lo - centre) / h, (hi - centre) / h, scale);
      }
      product *= factor;
    }
    offset += count;
  }
  return product;
}

/* The sum of the terms, kept in [0, 1] against rounding. */
KDE_HD double kde_cdf_clamp(double total)
{
  return total < 0 ? 0 : total > 1 ? 1 : total;
}

#endif
