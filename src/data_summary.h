/* One-pass summaries of the points and weights a fit starts from
 * (data_summary.c): on every allowed core, with sums in blocks of rows
 * fixed by n alone, so that results do not depend on the thread count. */
#ifndef KDEGPU_DATA_SUMMARY_H
#define KDEGPU_DATA_SUMMARY_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Rows per block of a deterministic blocked sum over n rows: at most
 * KDE_SUM_MAX_BLOCKS blocks, at least 8192 rows each. */
#define KDE_SUM_MAX_BLOCKS 256
int64_t kde_sum_block_rows(int64_t n);

/* What the bandwidth rules ask of a weight vector w (finite, >= 0). */
typedef struct {
  double total;       /* sum w_i */
  double sum_squares; /* sum w_i^2 */
  double smallest;    /* the smallest positive w_i (Inf: none) */
  double largest;     /* the largest w_i */
  int64_t which_largest; /* its first row, from 0 */
  int64_t positive;   /* how many w_i > 0 */
} kde_weight_facts;

void kde_weight_facts_of(const double *w, int64_t n, int threads, kde_weight_facts *facts);

/* centre[k] = sum_i w_i x_ik for the column-major n x d matrix x. */
void kde_weighted_centre(const double *x, int64_t n, int64_t d, const double *w, int threads,
                         double *centre);

/* magnitude[k] = max_i |x_ik| (x finite). */
void kde_column_magnitudes(const double *x, int64_t n, int64_t d, int threads,
                           double *magnitude);

/* mean[k] = sum_i x_ik / n. */
void kde_column_means(const double *x, int64_t n, int64_t d, int threads, double *mean);

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_DATA_SUMMARY_H */
