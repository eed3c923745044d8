/*
 * The conditional CDF F(y | x) of a Gaussian estimate on the CPU
 * (conditional_cdf.h): exact sums over the training points in double,
 * OpenMP over queries, both the numerator and the margin in one pass.
 */
#include "conditional_cdf.h"
#include "slices.h"
#include "threads.h"

/* F(y | x) at one query; with `density`, also f(v | x) in v's units. */
static double conditional_cdf_at(const kde_conditional_cdf_problem *p, const double *z,
                                 int64_t stride, double v, double *density)
{
  kde_lse margin = kde_lse_empty(), below = kde_lse_empty(), at = kde_lse_empty();
  for (int64_t j = 0; j < p->n_train; j++) {
    const double lambda = p->scale != NULL ? p->scale[j] : 1;
    double d2 = 0;
    for (int64_t c = 0; c < p->dim; c++) {
      const double diff = z[c * stride] - p->train[j + c * p->n_train];
      d2 += diff * diff;
    }
    const double log_a = p->log_weight[j] - 0.5 * d2 / (lambda * lambda);
    const double t = (v - p->response[j]) / lambda;
    margin = kde_lse_add(margin, log_a);
    below = kde_lse_add(below, log_a + kde_log_normal_cdf(t));
    if (density != NULL) at = kde_lse_add(at, log_a - 0.5 * t * t - log(lambda));
  }
  const double log_margin = kde_lse_log(margin);
  if (!(log_margin > -INFINITY)) { /* no point carries weight here */
    if (density != NULL) *density = NAN;
    return NAN;
  }
  if (density != NULL)
    *density = exp(kde_lse_log(at) - log_margin - 0.91893853320467274178);
  const double f = exp(kde_lse_log(below) - log_margin);
  return f > 1 ? 1 : f;
}

void kde_cpu_conditional_cdf(const kde_conditional_cdf_problem *p, const double *z,
                             const double *v, int64_t m, int threads,
                             kde_interrupt_probe interrupted, double *out, double *density,
                             kde_status *status)
{
  kde_status_clear(status);
  if (p->n_train < 1 || p->dim < 1 || m < 0) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the conditional CDF");
    return;
  }
  const double work = (double) m * (double) p->n_train * (double) (p->dim + 8);
  const int n_threads = kde_thread_count_for(threads, work);
  kde_slice slice = {0, m, 0};
  while (kde_slice_next(&slice)) {
#pragma omp parallel num_threads(n_threads)
    {
      int64_t first, last;
      while (kde_slice_claim(&slice, 1, &first, &last))
        out[first] = conditional_cdf_at(p, z + first, m, v[first],
                                        density != NULL ? density + first : NULL);
    }
    if (slice.next < m && interrupted != NULL && interrupted(kde_slice_done(&slice))) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      break;
    }
  }
}
