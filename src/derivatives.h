/* Kernel-derivative sums for every kernel on the CPU (derivatives.c): the
 * gradient, Hessian and mean-shift step of a kernel estimate. The CUDA
 * backend computes the same (kde_cuda_derivative_sums, kde_cuda.h); a CPU
 * fit's Gaussian sums come from the moment engine (moments.h). */
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
} kde_derivative_problem;

/* second may be NULL (gradients and mean shift need only the rest). */
void kde_cpu_derivative_sums(const kde_derivative_problem *problem, int threads,
                             kde_interrupt_probe interrupted, double *log_scale,
                             double *s0, double *k1sum, double *first,
                             double *second, kde_status *status);

#ifdef __cplusplus
}
#endif

#endif
