/*
 * moments.c: Gaussian moment sums on the CPU (the contract: moments.h), and
 * the order of the multi-indices that both backends and R share.
 *
 * Each query streams the training points in chunks that stay in L1: the
 * chunk's offsets u, exponents and maximum first, one rescale of the
 * query's sums when the maximum grows (the online normalisation of the
 * density kernels' log-sum-exp), then the moments degree by degree, each
 * monomial term the term of its parent times one coordinate, so a pair
 * costs one multiply-add per multi-index. OpenMP over queries.
 */
/* As in kde_cpu.c: lets GCC vectorise the selects below (no value changes). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math", "no-math-errno")
#endif

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "moments.h"
#include "slices.h"
#include "threads.h"
#include "vector_math.h"

/* Doubles of per-chunk scratch (u, terms, monomial terms) that stay in L1
 * and L2 together: the chunk length is this over the multi-index count. */
#define SCRATCH_DOUBLES 16384
#define CHUNK_MIN 8
#define CHUNK_MAX 256

/* choose(n, k) as a double (exact below 2^53, more than any count here),
 * or +inf once it passes `cap`. The loop runs min(k, n - k) times, so a
 * huge n with a small k (many dimensions at a low degree) costs nothing. */
static double binomial_capped(int64_t n, int64_t k, double cap)
{
  double c = 1;
  if (k < 0 || k > n) return 0;
  if (n - k < k) k = n - k;
  for (int64_t i = 1; i <= k; i++) {
    c = c * (double) (n - k + i) / (double) i;
    if (c > cap) return INFINITY;
  }
  return floor(c + 0.5);
}

static double binomial(int64_t n, int64_t k) { return binomial_capped(n, k, INFINITY); }

int64_t kde_moment_count(int64_t dim, int degree, int64_t limit)
{
  if (dim < 1 || degree < 0 || degree > KDE_MOMENT_MAX_DEGREE || dim > limit) return -1;
  double c = binomial_capped(dim + degree, degree, (double) limit);
  return c > (double) limit ? -1 : (int64_t) c;
}

/* The position of composition a (dim parts summing to k) in decreasing
 * lexicographic order: the compositions whose first part is larger come
 * first, then recursively on the remaining parts. */
static int64_t composition_rank(const int *a, int64_t dim, int k)
{
  int64_t rank = 0;
  for (int64_t c = 0; c + 1 < dim; c++) {
    for (int t = a[c] + 1; t <= k; t++) rank += (int64_t) binomial(k - t + dim - c - 2, dim - c - 2);
    k -= a[c];
  }
  return rank;
}

void kde_moment_index(int64_t dim, int degree, int64_t count, int *exponents,
                      int64_t *parent, int *variable)
{
  int *a = (int *) calloc((size_t) dim, sizeof(int));
  int64_t m = 0, layer_start = 0, previous_start = 0;
  if (a == NULL) return;
  for (int k = 0; k <= degree && m < count; k++) {
    memset(a, 0, (size_t) dim * sizeof(int));
    a[0] = k;
    for (;;) {
      for (int64_t c = 0; c < dim; c++) exponents[m + c * count] = a[c];
      if (k > 0 && (parent != NULL || variable != NULL)) {
        int64_t first = 0;
        while (a[first] == 0) first++;
        a[first]--;
        if (parent != NULL) parent[m] = previous_start + composition_rank(a, dim, k - 1);
        if (variable != NULL) variable[m] = (int) first;
        a[first]++;
      }
      m++;
      /* next composition: the last part before the final one that is > 0
       * gives one to its right neighbour, which takes all that follows */
      int64_t j = dim - 2;
      while (j >= 0 && a[j] == 0) j--;
      if (j < 0) break;
      int rest = a[dim - 1];
      for (int64_t c = j + 1; c < dim; c++) a[c] = 0;
      a[j]--;
      a[j + 1] = rest + 1;
    }
    previous_start = layer_start;
    layer_start = m;
  }
  if (parent != NULL) parent[0] = -1;
  if (variable != NULL) variable[0] = -1;
  free(a);
}

/* One query against the training points from `start` on. `self` is the
 * query's own row when leaving one out, -1 otherwise. */
KDE_MULTIVERSION
static void query_moments(const kde_moment_problem *pr, int64_t count,
                          const int64_t *parent, const int *variable,
                          int64_t chunk, const double *q, const double *q_lost,
                          int64_t start, int64_t self, double *scratch, double *log_scale,
                          double *acc)
{
  const int64_t n = pr->n_train, dim = pr->dim;
  double *term = scratch;                /* chunk: exponents, then terms */
  double *u = term + chunk;              /* dim x chunk */
  double *mono = u + dim * chunk;        /* count x chunk: w e^{..} u^a */
  double scale = -INFINITY;
  for (int64_t m = 0; m < count; m++) acc[m] = 0;

  for (int64_t begin = start; begin < n; begin += chunk) {
    const int64_t len = n - begin < chunk ? n - begin : chunk;
    const double *lw = pr->log_weight + begin;
#pragma omp simd
    for (int64_t j = 0; j < len; j++) term[j] = 0;
    for (int64_t k = 0; k < dim; k++) {
      const double *xk = pr->train + k * n + begin;
      double *uk = u + k * chunk;
      const double qk = q[k];
      if (pr->train_residual != NULL) { /* the offset mode */
        const float *lost = pr->train_residual + k * n + begin;
        const double qk_lost = q_lost[k];
#pragma omp simd
        for (int64_t j = 0; j < len; j++) {
          uk[j] = (xk[j] - qk) + ((double) lost[j] - qk_lost);
          term[j] += uk[j] * uk[j];
        }
        continue;
      }
#pragma omp simd
      for (int64_t j = 0; j < len; j++) {
        uk[j] = xk[j] - qk;
        term[j] += uk[j] * uk[j];
      }
    }
    double chunk_max = -INFINITY;
#pragma omp simd reduction(max : chunk_max)
    for (int64_t j = 0; j < len; j++) {
      double e = lw[j] - 0.5 * term[j];
      e = (begin + j == self) ? -INFINITY : e;
      term[j] = e;
      chunk_max = e > chunk_max ? e : chunk_max;
    }
    if (chunk_max == -INFINITY) continue;
    if (chunk_max > scale) {
      /* rescale what was summed so far to the new maximum */
      const double factor = scale == -INFINITY ? 0.0 : exp(scale - chunk_max);
      for (int64_t m = 0; m < count; m++) acc[m] *= factor;
      scale = chunk_max;
    }
    double s0 = 0;
#pragma omp simd reduction(+ : s0)
    for (int64_t j = 0; j < len; j++) {
      double t = exp_nonpositive(term[j] - scale);
      mono[j] = t;
      s0 += t;
    }
    acc[0] += s0;
    for (int64_t m = 1; m < count; m++) {
      const double *from = mono + parent[m] * chunk;
      const double *uk = u + (int64_t) variable[m] * chunk;
      double *to = mono + m * chunk;
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t j = 0; j < len; j++) {
        to[j] = from[j] * uk[j];
        s += to[j];
      }
      acc[m] += s;
    }
  }
  *log_scale = scale;
}

void kde_cpu_moments(const kde_moment_problem *pr, int threads,
                     kde_interrupt_probe interrupted, double *log_scale,
                     double *sums, kde_status *status)
{
  kde_status_clear(status);
  if (pr->n_train < 1 || pr->dim < 1 || pr->n_query < 0 || pr->degree < 0 ||
      pr->degree > KDE_MOMENT_MAX_DEGREE ||
      pr->pairs < KDE_PAIRS_ALL || pr->pairs > KDE_PAIRS_ABOVE ||
      (pr->pairs != KDE_PAIRS_ALL && pr->n_query != pr->n_train)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the CPU moment sums");
    return;
  }
  if (pr->n_query == 0) return;
  const int64_t count = kde_moment_count(pr->dim, pr->degree, INT32_MAX);
  const int64_t m_query = pr->n_query, dim = pr->dim;
  const double work = (double) pr->n_train * (double) (count + dim);
  const int n_threads = kde_thread_count_for(threads, work * (double) m_query);
  int64_t chunk = SCRATCH_DOUBLES / (count + dim + 1);
  if (chunk < CHUNK_MIN) chunk = CHUNK_MIN;
  if (chunk > CHUNK_MAX) chunk = CHUNK_MAX;
  chunk -= chunk % 8;
  const int64_t per_thread = chunk * (1 + dim + count) + count + 2 * dim;
  int *exponents = NULL;
  int64_t *parent = NULL;
  int *variable = NULL;
  double *scratch = NULL;
  if (count < 0) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "too many multi-indices");
    return;
  }
  exponents = (int *) malloc((size_t) (count * dim) * sizeof(int));
  parent = (int64_t *) malloc((size_t) count * sizeof(int64_t));
  variable = (int *) malloc((size_t) count * sizeof(int));
  scratch = (double *) malloc((size_t) (per_thread * n_threads) * sizeof(double));
  if (exponents == NULL || parent == NULL || variable == NULL || scratch == NULL) {
    kde_status_set(status, KDE_ERR_ALLOC,
                   "could not allocate CPU memory for the moment sums");
    goto cleanup;
  }
  kde_moment_index(dim, pr->degree, count, exponents, parent, variable);

  kde_slice slice = {0, m_query, 0};
  while (kde_slice_next(&slice)) {
#pragma omp parallel num_threads(n_threads)
    {
      const int thread = kde_thread_index();
      double *mine = scratch + thread * per_thread;
      double *acc = mine + chunk * (1 + dim + count);
      double *q = acc + count, *q_lost = q + dim;
      int64_t i, last;
      while (kde_slice_claim(&slice, 1, &i, &last)) {
        for (int64_t k = 0; k < dim; k++) {
          q[k] = pr->query[i + k * m_query];
          q_lost[k] = pr->query_residual != NULL ? pr->query_residual[i + k * m_query] : 0.0;
        }
        query_moments(pr, count, parent, variable, chunk, q, q_lost,
                      pr->pairs == KDE_PAIRS_ABOVE ? i + 1 : 0,
                      pr->pairs == KDE_PAIRS_LEAVE_ONE_OUT ? i : -1, mine,
                      log_scale + i, acc);
        for (int64_t m = 0; m < count; m++) sums[i + m * m_query] = acc[m];
      }
    }
    if (slice.next < m_query && interrupted != NULL && interrupted(kde_slice_done(&slice))) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
  }

cleanup:
  free(exponents);
  free(parent);
  free(variable);
  free(scratch);
}
