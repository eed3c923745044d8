/*
 * moments.h: Gaussian moment sums, the one pair-sum engine behind the
 * plug-in bandwidths (psi functionals of density derivatives) and, for
 * other callers, kernel gradients (degree 1), Hessians (degree 2), the
 * score grad log f = S_1 / S_0 and mean-shift.
 *
 * Given queries q_i and training points x_j, both already whitened by the
 * caller so that the kernel is exp(-|u|^2 / 2) with u = x_j - q_i, weights
 * w_j >= 0 and a degree p in 0..KDE_MOMENT_MAX_DEGREE, it computes per query
 *
 *   M_i      = max_j (log w_j - |u_ij|^2 / 2)              (log scale)
 *   S_{i,a}  = sum_j w_j exp(-|u_ij|^2 / 2 - M_i) u_ij^a    (moment sums)
 *
 * for every multi-index a with |a| <= p, u^a = prod_k u_k^{a_k}. The
 * queries are any point set (not only the training points). M_i is kept as
 * an online maximum, as the density kernels' log-sum-exp, so S_{i,0} >= 1
 * whenever some w_j > 0 and the ratios S_{i,a} / S_{i,0} stay finite
 * however far q_i lies from the data; the unnormalised sums are
 * exp(M_i) S_{i,a}. When every term is excluded or has weight 0, M_i is
 * -inf and every S_{i,a} is 0.
 *
 * Order of the multi-indices (kde_moment_index): by total degree 0..p, and
 * within a degree in decreasing lexicographic order of (a_1, ..., a_d):
 * d = 2, p = 2 gives (0,0), (1,0), (0,1), (2,0), (1,1), (0,2).
 *
 * Which pairs (`pairs`): KDE_PAIRS_ALL, every j for every query;
 * KDE_PAIRS_LEAVE_ONE_OUT, the queries are the training points in the same
 * order and the term j == i is excluded exactly (also for duplicated
 * points); KDE_PAIRS_ABOVE, the queries are the training points and only
 * j > i is summed: half of a pair sum over all i != j whose summand is
 * symmetric (the even derivatives of psi functionals), at half the cost.
 *
 * Accumulation is in double. The CPU computes exp in double (vector_math.h);
 * the CUDA backend computes the distances and the exponent in double and
 * 2^f for the fractional part f of the exponent in single precision, about
 * 2e-7 relative error per term (see moments.cu).
 *
 * Matrices are column-major (R's layout); counts are 64-bit.
 */
#ifndef KDEGPU_MOMENTS_H
#define KDEGPU_MOMENTS_H

#include <stdint.h>

#include "kde_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KDE_MOMENT_MAX_DEGREE 6

enum { KDE_PAIRS_ALL = 0, KDE_PAIRS_LEAVE_ONE_OUT = 1, KDE_PAIRS_ABOVE = 2 };

typedef struct {
  int64_t n_train;           /* >= 1 */
  int64_t n_query;           /* >= 0 */
  int64_t dim;               /* >= 1 */
  const double *train;       /* n_train x dim, whitened */
  const double *log_weight;  /* n_train: log w_j, -inf where w_j = 0 */
  const double *query;       /* n_query x dim, whitened */
  int degree;                /* p, 0..KDE_MOMENT_MAX_DEGREE */
  int pairs;                 /* KDE_PAIRS_*: which j each query i sums over */
  /* The CPU's offset mode (kde_backend.h's kde_cpu_tiles; NULL: none, and
   * always NULL for the CUDA engine): what the points' and the queries'
   * whitened coordinates lost to rounding (n_train x dim, n_query x dim),
   * added to each difference. */
  const float *train_residual;
  const double *query_residual;
} kde_moment_problem;

/* The number of multi-indices a in `dim` dimensions with |a| <= degree:
 * choose(dim + degree, dim); -1 when it or `dim` exceeds `limit`, or when
 * dim or degree is out of range. Costs at most `degree` steps. */
int64_t kde_moment_count(int64_t dim, int degree, int64_t limit);

/* Writes the multi-indices in the documented order: exponents[m + c * count]
 * is a_{c+1} of multi-index m (count x dim, column-major), and, for m >= 1,
 * parent[m] (the index of a - e_k) and variable[m] (k, 0-based), where k is
 * the first coordinate with a_k > 0; parent and variable may be NULL. */
void kde_moment_index(int64_t dim, int degree, int64_t count, int *exponents,
                      int64_t *parent, int *variable);

/* CPU: writes log_scale[n_query] and sums[n_query x count] (column-major:
 * S_{i,m} at sums[i + m * n_query]), OpenMP over queries on `threads`
 * threads (kde_thread_count). Polls `interrupted` between chunks. */
void kde_cpu_moments(const kde_moment_problem *problem, int threads,
                     kde_interrupt_probe interrupted, double *log_scale,
                     double *sums, kde_status *status);

/* CUDA (moments.cu; kde_cuda_stub.c without nvcc): the same results on
 * `devices` (n_devices of them, each taking a share of the queries; the
 * same bits however many), using at most `memory_budget` bytes of each
 * (<= 0: the default fraction of free memory). */
void kde_cuda_moments(const kde_moment_problem *problem, const int *devices,
                      int n_devices, double memory_budget, kde_interrupt_probe interrupted,
                      double *log_scale, double *sums, kde_status *status);

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_MOMENTS_H */
