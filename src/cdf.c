/*
 * The cumulative distribution function of a kernel estimate on the CPU:
 * exact sums over the training points, OpenMP over queries, double
 * throughout (see cdf.h). Each term is a probability between two kernel
 * tails (kde_cdf_between in kernels.h), so small CDF values keep their
 * relative accuracy; the total is clamped to [0, 1] against rounding.
 */
#include <math.h>
#include <stdlib.h>

#include "cdf.h"
#include "threads.h"
#include <kdegpu/kernels.h>

#ifdef _OPENMP
#include <omp.h>
#endif

/* Kernel terms between two interrupt polls: about 0.1 s on one core. */
#define TERMS_PER_POLL 2.0e7

/* The CDF at one query; `interval` is scratch for 2 * sum(image_count). */
static double cdf_at(const kde_cdf_problem *p, const double *x, double scale,
                     double *interval)
{
  const int64_t n = p->n_train, d = p->dim;
  /* Per coordinate: whole (x at or above the upper bound: the factor is 1),
   * or the images of [lower, x] that the kernel's mass must fall in. */
  int64_t offset = 0;
  int all_whole = 1;
  for (int64_t c = 0; c < d; c++) {
    const int64_t count = p->image_count[c];
    if (x[c] < p->lower[c]) return 0;
    if (x[c] < p->upper[c]) {
      all_whole = 0;
      for (int64_t g = 0; g < count; g++) {
        const double s = p->image_sign[offset + g], t = p->image_shift[offset + g];
        /* s * (-inf) + t is the right infinity for an open lower end */
        const double from = s * p->lower[c] + t, to = s * x[c] + t;
        interval[2 * (offset + g)] = from < to ? from : to;
        interval[2 * (offset + g) + 1] = from < to ? to : from;
      }
    }
    offset += count;
  }
  if (all_whole) return 1;
  double total = 0;
  for (int64_t j = 0; j < n; j++) {
    if (!(p->weight[j] > 0)) continue;
    double product = p->weight[j];
    offset = 0;
    for (int64_t c = 0; c < d && product > 0; c++) {
      const int64_t count = p->image_count[c];
      if (x[c] < p->upper[c]) {
        const double centre = p->train[j + c * n];
        const double h = p->scale != NULL ? p->bandwidth[c] * p->scale[j] : p->bandwidth[c];
        double factor = 0;
        for (int64_t g = 0; g < count; g++) {
          const double *ends = interval + 2 * (offset + g);
          factor += kde_cdf_between(p->kernel, (ends[0] - centre) / h,
                                    (ends[1] - centre) / h, scale);
        }
        product *= factor;
      }
      offset += count;
    }
    total += product;
  }
  return total < 0 ? 0 : total > 1 ? 1 : total;
}

void kde_cpu_cdf(const kde_cdf_problem *p, const double *query,
                 int64_t n_query, int threads, kde_interrupt_probe interrupted,
                 double *out, kde_status *status)
{
  kde_status_clear(status);
  if (p->kernel < 0 || p->kernel >= KDE_N_KERNELS || p->n_train < 1 ||
      p->dim < 1 || n_query < 0 ||
      (p->dim > 1 && p->kernel != KDE_GAUSSIAN)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the CDF");
    return;
  }
  int64_t n_images = 0;
  for (int64_t c = 0; c < p->dim; c++) n_images += p->image_count[c];
  const int n_threads = kde_thread_count(threads);
  const double scale = kde_scale(p->kernel, 1);
  double *scratch = malloc((size_t) (2 * n_images * n_threads + p->dim * n_threads) *
                           sizeof *scratch);
  if (scratch == NULL) {
    kde_status_set(status, KDE_ERR_ALLOC, "could not allocate memory for the CDF");
    return;
  }
  double terms = (double) p->n_train * (double) n_images;
  int64_t chunk = (int64_t) (TERMS_PER_POLL * n_threads / terms) + 1;

  for (int64_t begin = 0; begin < n_query; begin += chunk) {
    const int64_t end = begin + chunk < n_query ? begin + chunk : n_query;
#pragma omp parallel for num_threads(n_threads) schedule(dynamic, 8)
    for (int64_t i = begin; i < end; i++) {
#ifdef _OPENMP
      const int thread = omp_get_thread_num();
#else
      const int thread = 0;
#endif
      double *interval = scratch + thread * (2 * n_images + p->dim);
      double *x = interval + 2 * n_images;
      for (int64_t c = 0; c < p->dim; c++) x[c] = query[i + c * n_query];
      out[i] = cdf_at(p, x, scale, interval);
    }
    if (end < n_query && interrupted != NULL &&
        interrupted((double) end / (double) n_query)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      break;
    }
  }
  free(scratch);
}
