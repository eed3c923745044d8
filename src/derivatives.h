/* Kernel-derivative sums for every kernel on the CPU (derivatives.c): the
 * gradient, Hessian and mean-shift step of a kernel estimate. The CUDA
 * backend computes the same (kde_cuda_derivative_sums, kde_cuda.h). */
#ifndef KDEGPU_DERIVATIVES_H
#define KDEGPU_DERIVATIVES_H

#include <stdint.h>

#include "kde_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * With training points x_j and queries q_i whitened and divided by the
 * kernel's radius scale (so that a pair's kernel value is k(t), t =
 * |v|^2, v = x_j - q_i; kernels.h), k1 = dk/dt and k2 = d^2k/dt^2, per query
 *
 *   M_i        = max_j (log w_j + log k(t_ij))            (log scale)
 *   s0[i]      = sum_j w_j k(t_ij) e^-M_i
 *   k1sum[i]   = sum_j w_j k1(t_ij) e^-M_i
 *   first[i,c] = sum_j w_j k1(t_ij) v_c e^-M_i             (m x d)
 *   second[i,c,e] = sum_j w_j k2(t_ij) v_c v_e e^-M_i      (m x d x d,
 *                                                   only when `second`)
 *
 * so that, with the transform A (z = x A) and the estimate's constant C,
 * grad f = -2 C e^M first A', Hessian f = C e^M A (4 second + 2 k1sum I) A',
 * and the mean-shift step in whitened units is first / k1sum. The shared
 * scale e^-M keeps ratios finite far from the data. A term at t = 0 (a
 * query on a training point) adds nothing to `first` and `second` (v = 0)
 * and adds its k1 to `k1sum` where that is finite: not for the kernels
 * with a cusp, whose k1 is infinite there. Terms with k = 0 (outside a
 * compact support) add nothing.
 */
typedef struct {
  int kernel;                /* kde_kernel */
  int64_t n_train, n_query, dim;
  const double *train;       /* n_train x dim */
  const double *log_weight;  /* n_train */
  const double *query;       /* n_query x dim */
  /* NULL, or an adaptive fit's 1 / lambda_j^2: point j's kernel has radius
   * lambda_j (its log_weight includes -dim log lambda_j), so its terms are
   * k(t s_j), k1(t s_j) s_j and k2(t s_j) s_j^2 with s_j = inv_scale2[j]
   * (the derivatives of k(|v|^2 s_j) with respect to the query) */
  const double *inv_scale2;
  /* The CPU's offset mode (kde_moment_problem's; NULL: none, and always
   * NULL for the CUDA backend): the rounding the points' and the queries'
   * whitened coordinates lost, added to each difference. */
  const float *train_residual;
  const double *query_residual;
} kde_derivative_problem;

/* second may be NULL (gradients and mean shift need only the rest). */
void kde_cpu_derivative_sums(const kde_derivative_problem *problem, int threads,
                             kde_interrupt_probe interrupted, double *log_scale,
                             double *s0, double *k1sum, double *first,
                             double *second, kde_status *status);

/* The estimate's derivatives from the sums above, for m queries of
 * dimension d (d <= KDE_DERIVATIVE_RESULT_MAX_DIM): with A the whitening
 * transform (d x d, column-major), log_const the estimate's log C and scale
 * C e^M (1 / s0 when `score`: the derivatives of log f),
 *   gradient = -2 scale A first_i                      (m x d)
 *   hessian  = scale A (4 second_i + 2 k1sum_i I) A'   (m x d x d, when
 *              second is not NULL; less gradient gradient' when `score`)
 *   log_density = log_const + M + log s0.
 * A query with M = -inf (outside every kernel) gets 0 (NaN when `score`). */
#define KDE_DERIVATIVE_RESULT_MAX_DIM 128
void kde_derivative_results(int64_t m, int64_t d, const double *log_scale, const double *s0,
                            const double *k1sum, const double *first, const double *second,
                            double log_const, const double *transform, int score, int threads,
                            double *gradient, double *log_density, double *hessian);

#ifdef __cplusplus
}
#endif

#endif
