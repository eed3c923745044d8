/*
 * The cumulative distribution function of a kernel estimate on the CPU:
 * exact sums over the training points, OpenMP over queries, double
 * throughout (see cdf.h). Each term is a probability between two kernel
 * tails (kde_cdf_between in kernels.h), so small CDF values keep their
 * relative accuracy; the total is clamped to [0, 1] against rounding.
 */
#include "cdf.h"
#include "slices.h"
#include "threads.h"

/* The CDF at query x (its coordinates `stride` apart). */
static double cdf_at(const kde_cdf_problem *p, const double *x, int64_t stride,
                     double scale)
{
  const double fixed = kde_cdf_without_sum(p, x, stride);
  if (fixed >= 0) return fixed;
  double total = 0;
  for (int64_t j = 0; j < p->n_train; j++) total += kde_cdf_term(p, x, stride, j, scale);
  return kde_cdf_clamp(total);
}

int kde_cdf_problem_valid(const kde_cdf_problem *p, int64_t n_query,
                          kde_status *status)
{
  kde_status_clear(status);
  if (p->kernel < 0 || p->kernel >= KDE_N_KERNELS || p->n_train < 1 ||
      p->dim < 1 || n_query < 0 ||
      (p->dim > 1 && p->kernel != KDE_GAUSSIAN)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the CDF");
    return 0;
  }
  return 1;
}

void kde_cpu_cdf(const kde_cdf_problem *p, const double *query,
                 int64_t n_query, int threads, kde_interrupt_probe interrupted,
                 double *out, kde_status *status)
{
  if (!kde_cdf_problem_valid(p, n_query, status)) return;
  const int64_t n_images = kde_cdf_image_total(p);
  const double terms = (double) p->n_train * (double) n_images;
  const int n_threads = kde_thread_count_for(threads, terms * (double) n_query);
  const double scale = kde_scale(p->kernel, 1);
  kde_slice slice = {0, n_query, 0};

  while (kde_slice_next(&slice)) {
#pragma omp parallel num_threads(n_threads)
    {
      int64_t first, last;
      while (kde_slice_claim(&slice, 1, &first, &last))
        out[first] = cdf_at(p, query + first, n_query, scale);
    }
    if (slice.next < n_query && interrupted != NULL && interrupted(kde_slice_done(&slice))) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      break;
    }
  }
}
