/*
 * tools/gpu-tests/harness/harness.cu: tests and times the CUDA backend without R.
 *
 *   harness all      device info, correctness matrix, multi-device, errors,
 *                    interrupt, leak check, float-vs-double accuracy, timings
 *   harness test     everything but the timings
 *   harness quick    a small correctness subset (for compute-sanitizer)
 *   harness tiny     four small cases (for racecheck)
 *   harness bench    timings only
 *   harness nodevice what kde_cuda_device_count says (for machines without
 *                    a GPU)
 *   harness plan...  the device plan (harness_plan.cu: plan, plancheck,
 *                    planbench, planbig, planquick)
 *   harness ceiling  issue 32's kernel rows (harness_ceiling.cu)
 *   harness exp2     the polynomial exp2 against exp2, every float argument
 *   harness bound    each pair's arithmetic alone, with a share of the exp2s
 *                    on the FMA pipe: a bound on every kernel (harness_bound.cu)
 *
 * The reference is a plain double-precision loop over all training points
 * using the kernels.h functions on the original coordinates, computed on the
 * CPU for a subsample of the queries.
 *
 * Through the backend's tuning hooks (src/cuda/tuning_hooks.h): models are
 * made with `tuning` (tuning.no_mma: the FMA kernels only), and every
 * evaluation fills `stats` (event time of its kernels, batches, launches,
 * splits, whether the devices split the training set).
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "cuda/tuning_hooks.h"
#include "harness_data.h"

/* The device plan's checks and timings (harness_plan.cu). */
int plan_mode(const std::string &mode);
/* Issue 32's kernel rows (harness_ceiling.cu). */
int ceiling_mode();
int exp2_mode();
/* An upper bound on pairs per second (harness_bound.cu). */
int bound_mode();

/* How the next models are made, and what the last evaluation did. */
static kde_cuda_tuning tuning;
/* The faster forms' rounding bound of the models made here (R passes the
 * call's tolerance): the harness measures every form where it serves. */
static constexpr double kFormBound = 1e-4;
static kde_cuda_eval_stats stats;

static const char *kernel_names[KDE_N_KERNELS] = {
    "gaussian", "epanechnikov", "rectangular", "triangular",
    "biweight", "cosine",       "optcosine",   "exponential"};

/* ---- random data --------------------------------------------------------- */

/* the plan modes' generator, seeded as this file always was */
struct rng : harness_data::prng {
  explicit rng(uint64_t seed) : prng(seed, 1) {}
};

struct dataset {
  int64_t n = 0, d = 0;
  std::vector<double> x, w, lw; /* column-major n x d */
};

/* Points in bandwidth units: spread ~ n^(1/(d+4)) as after whitening by a
 * rule-of-thumb bandwidth, divided by the kernel's radius scale. Two
 * clusters so that densities vary. */
static dataset make_data(int64_t n, int64_t d, int kernel, int weights,
                         uint64_t seed)
{
  dataset s;
  rng r(seed);
  s.n = n;
  s.d = d;
  s.x.resize((size_t) n * d);
  const double spread =
      pow((double) std::max<int64_t>(n, 2), 1.0 / (d + 4)) / kde_scale(kernel, (int) d);
  for (int64_t j = 0; j < n; j++) {
    const double shift = (j % 3 == 0) ? 2.0 * spread : 0.0;
    for (int64_t k = 0; k < d; k++)
      s.x[j + k * n] = spread * r.normal() + (k == 0 ? shift : 0.0) + 0.3;
  }
  s.w.resize(n);
  s.lw.resize(n);
  double total = 0;
  for (int64_t j = 0; j < n; j++) {
    double w = 1.0;
    if (weights) w = (r.uniform() < 0.1) ? 0.0 : -log(r.uniform() + 1e-12);
    s.w[j] = w;
    total += w;
  }
  for (int64_t j = 0; j < n; j++) {
    s.w[j] /= total;
    s.lw[j] = s.w[j] > 0 ? log(s.w[j]) : -INFINITY;
  }
  return s;
}

static dataset make_queries(int64_t m, const dataset &train, uint64_t seed,
                            int far_every)
{
  dataset q;
  rng r(seed);
  q.n = m;
  q.d = train.d;
  q.x.resize((size_t) m * train.d);
  for (int64_t i = 0; i < m; i++) {
    /* near a training point, plus some noise; every far_every-th far away */
    const int64_t j = (int64_t) (r.uniform() * train.n);
    const int far = far_every > 0 && i % far_every == far_every - 1;
    for (int64_t k = 0; k < train.d; k++)
      q.x[i + k * m] = train.x[j + k * train.n] + 0.7 * r.normal() +
                       (far && k == 0 ? 1e3 : 0.0);
  }
  return q;
}

/* ---- reference ----------------------------------------------------------- */

/* |q_i - x_j|^2 for query row i (column-major, ldq rows) and point j. */
static double squared_distance(const dataset &t, int64_t j, const double *q,
                               int64_t ldq, int64_t i)
{
  double s2 = 0;
  for (int64_t k = 0; k < t.d; k++) {
    const double diff = q[i + k * ldq] - t.x[j + k * t.n];
    s2 += diff * diff;
  }
  return s2;
}

static double reference_one(int kernel, const dataset &t, const double *q,
                            int64_t ldq, int64_t i, int loo, double log_const)
{
  if (kde_kernel_is_compact(kernel)) {
    double sum = 0;
    for (int64_t j = 0; j < t.n; j++) {
      if (loo && j == i) continue;
      sum += t.w[j] * kde_profile(kernel, squared_distance(t, j, q, ldq, i));
    }
    return sum > 0 ? log_const + log(sum) : -INFINITY;
  }
  kde_lse st = kde_lse_empty();
  for (int64_t j = 0; j < t.n; j++) {
    if (loo && j == i) continue;
    st = kde_lse_add(st, t.lw[j] + kde_log_profile(kernel, squared_distance(t, j, q, ldq, i)));
  }
  return log_const + kde_lse_log(st);
}

static std::vector<double> reference(int kernel, const dataset &t,
                                     const dataset &q, const std::vector<int64_t> &rows,
                                     int loo, double log_const)
{
  std::vector<double> out(rows.size());
  unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned w = 0; w < nt; w++)
    pool.emplace_back([&, w]() {
      for (size_t r = w; r < rows.size(); r += nt)
        out[r] = reference_one(kernel, t, q.x.data(), q.n, rows[r], loo, log_const);
    });
  for (auto &th : pool) th.join();
  return out;
}

static std::vector<int64_t> sample_rows(int64_t m, int count, uint64_t seed)
{
  std::vector<int64_t> rows;
  rng r(seed);
  rows.push_back(0);
  rows.push_back(m - 1);
  for (int c = 0; c < count && (int64_t) rows.size() < m; c++)
    rows.push_back((int64_t) (r.uniform() * m));
  return rows;
}

struct compare_result {
  double max_err = 0; /* |got - ref| / max(1, |ref|) */
  int mismatched_inf = 0;
  int nan = 0;
  int n_inf = 0;
};

static compare_result compare(const std::vector<double> &got,
                              const std::vector<int64_t> &rows,
                              const std::vector<double> &ref)
{
  compare_result c;
  for (size_t r = 0; r < rows.size(); r++) {
    const double g = got[rows[r]], e = ref[r];
    if (std::isnan(g)) {
      c.nan++;
      continue;
    }
    if (std::isinf(e) || std::isinf(g)) {
      if (g != e) c.mismatched_inf++;
      else c.n_inf++;
      continue;
    }
    c.max_err = std::max(c.max_err, fabs(g - e) / std::max(1.0, fabs(e)));
  }
  return c;
}

/* ---- evaluation helpers -------------------------------------------------- */

static int failures = 0;

/* points in no spatial order */
static kde_training_set training_set(const dataset &t, int kernel)
{
  return harness_data::fixed_training_set(t.n, t.d, t.x.data(), t.w.data(), t.lw.data(),
                                          kernel, 0);
}

static int evaluate(const dataset &t, const dataset &q, int kernel, int precision,
                    std::vector<int> devices, double budget, int loo,
                    double log_const, std::vector<double> &out, kde_status *st,
                    kde_interrupt_probe probe = NULL)
{
  kde_training_set ts = training_set(t, kernel);
  kde_cuda_model *model = kde_cuda_model_create_tuned(
      &ts, precision, devices.data(), (int) devices.size(), budget, kFormBound, &tuning, st);
  if (model == NULL) return -1;
  kde_query_set qs = {};
  qs.center = qs.transform = NULL; /* already whitened */
  qs.n_query = q.n;
  qs.query = q.x.data();
  qs.log_const = log_const;
  qs.leave_one_out = loo;
  qs.tolerance = 0; /* the full sum */
  qs.host_threads = 0;
  out.assign(q.n, NAN);
  kde_cuda_log_density_stats(model, &qs, probe, out.data(), &stats, st);
  kde_cuda_model_free(model);
  return st->code == KDE_OK ? 0 : -1;
}

static double tiny_budget(int64_t d, int precision)
{
  const double tsz = precision == KDE_PRECISION_SINGLE ? 4 : 8;
  const double unit = 256.0 * (d + 1) * tsz;
  return 4 * unit + 1600 * (d * tsz + 16);
}

/* ---- correctness --------------------------------------------------------- */

/* |got - ref| / max(1, |ref|). Single precision: 1e-5 for the smooth
 * unbounded kernels; compact kernels lose relative accuracy in terms near
 * the edge of the support (float coordinates carry ~1e-7 |x| of rounding,
 * and k -> 0 there), and the rectangular kernel's discontinuity can flip a
 * point on the edge: 1e-4 and 2e-3. Double: 1e-10 throughout. */
static double tolerance(int kernel, int precision)
{
  if (precision != KDE_PRECISION_SINGLE) return 1e-10;
  if (!kde_kernel_is_compact(kernel)) return 1e-5;
  return kernel == KDE_RECTANGULAR ? 2e-3 : 1e-4;
}

static void correctness(bool quick)
{
  const int dims_all[] = {1, 2, 3, 5, 16};
  const int kernels_quick[] = {KDE_GAUSSIAN, KDE_EPANECHNIKOV, KDE_EXPONENTIAL};
  std::vector<int> kernels, dims;
  if (quick) {
    kernels.assign(kernels_quick, kernels_quick + 3);
    dims = {1, 3, 5};
  } else {
    for (int k = 0; k < KDE_N_KERNELS; k++) kernels.push_back(k);
    dims.assign(dims_all, dims_all + 5);
  }
  const int64_t n = quick ? 600 : 2345, m = quick ? 333 : 1777;
  int cases = 0, failed = 0;
  double worst[2] = {0, 0};
  double worst_kernel[2][KDE_N_KERNELS] = {{0}};
  printf("\n== correctness: n_train=%lld n_query=%lld (loo: n_query=n_train)\n",
         (long long) n, (long long) m);
  for (int precision = 0; precision <= 1; precision++)
    for (int kernel : kernels)
      for (int d : dims)
        for (int weights = 0; weights <= 1; weights++)
          for (int loo = 0; loo <= 1; loo++)
            for (int tiny = 0; tiny <= 1; tiny++) {
              const uint64_t seed = 1000 * kernel + 10 * d + weights;
              dataset t = make_data(n, d, kernel, weights, seed);
              dataset q = loo ? t : make_queries(m, t, seed + 7, 17);
              const double log_const = kde_log_norm_const(kernel, d);
              std::vector<int64_t> rows = sample_rows(q.n, quick ? 24 : 40, seed + 3);
              std::vector<double> ref = reference(kernel, t, q, rows, loo, log_const);
              std::vector<double> got;
              kde_status st;
              const double budget = tiny ? tiny_budget(d, precision) : 0;
              int rc = evaluate(t, q, kernel, precision, {0}, budget, loo,
                                log_const, got, &st);
              cases++;
              const double tol = tolerance(kernel, precision);
              bool ok = rc == 0;
              compare_result c;
              if (ok) {
                c = compare(got, rows, ref);
                ok = c.nan == 0 && c.mismatched_inf == 0 && c.max_err <= tol;
                /* every output written and not NaN */
                for (double v : got) if (std::isnan(v)) { ok = false; break; }
                worst[precision] = std::max(worst[precision], c.max_err);
                worst_kernel[precision][kernel] =
                    std::max(worst_kernel[precision][kernel], c.max_err);
              }
              if (!ok) failed++;
              if (!ok || (kernel == KDE_GAUSSIAN && d == 3 && !weights && !loo)) {
                printf("%s %-12s d=%-2d w=%d loo=%d tiny=%d %s: %s max_err=%.2e"
                       " inf=%d inf_mismatch=%d nan=%d batches=%lld launches=%lld%s%s\n",
                       ok ? "ok  " : "FAIL", kernel_names[kernel], d, weights, loo,
                       tiny, precision ? "single" : "double",
                       rc == 0 ? "" : "error", c.max_err, c.n_inf, c.mismatched_inf,
                       c.nan, (long long) stats.batches,
                       (long long) stats.launches, rc ? " :: " : "",
                       rc ? st.message : "");
              }
            }
  printf("correctness: %d cases, %d failed; worst error double %.2e, single %.2e\n",
         cases, failed, worst[0], worst[1]);
  printf("worst error by kernel (double / single):");
  for (int kernel : kernels)
    printf(" %s %.1e/%.1e", kernel_names[kernel], worst_kernel[0][kernel],
           worst_kernel[1][kernel]);
  printf("\n");
  failures += failed;
}

/* Several replicas (the same GPU listed twice exercises the code paths):
 * queries split across devices, and training split for few queries. */
static void multi_device()
{
  printf("\n== multi-device (device 0 listed twice)\n");
  for (int precision = 0; precision <= 1; precision++)
    for (int few = 0; few <= 1; few++)
      for (int tiny = 0; tiny <= 1; tiny++) {
        const int kernel = few ? KDE_GAUSSIAN : KDE_BIWEIGHT;
        const int d = 3;
        dataset t = make_data(5000, d, kernel, 1, 77 + few);
        dataset q = make_queries(few ? 100 : 40000, t, 78, 0);
        const double lc = kde_log_norm_const(kernel, d);
        std::vector<int64_t> rows = sample_rows(q.n, 40, 5);
        std::vector<double> ref = reference(kernel, t, q, rows, 0, lc);
        std::vector<double> got;
        kde_status st;
        int rc = evaluate(t, q, kernel, precision, {0, 0},
                          tiny ? tiny_budget(d, precision) * 4 : 0, 0, lc, got, &st);
        compare_result c;
        bool ok = rc == 0;
        if (ok) {
          c = compare(got, rows, ref);
          ok = c.nan == 0 && c.mismatched_inf == 0 &&
               c.max_err <= (precision ? 1e-5 : 1e-10);
        }
        if (!ok) failures++;
        printf("%s %s m=%lld tiny=%d %s: mode=%s max_err=%.2e batches=%lld %s\n",
               ok ? "ok  " : "FAIL", kernel_names[kernel], (long long) q.n, tiny,
               precision ? "single" : "double",
               stats.split_training ? "split-training" : "split-queries",
               c.max_err, (long long) stats.batches, rc ? st.message : "");
      }
}

/* The tensor-core path (single-precision Gaussian, d >= 16) against the
 * reference and against the FMA path, at dimensions that are and are not
 * multiples of 8. */
/* The wide tensor-core kernel (3xFP16) against the reference and the FMA
 * kernel. far: a few queries (and in far = 2 one training point) beyond
 * fp16's range, which the kernel stores scaled per row (and for which the
 * model falls back to the FMA kernel). */
static void tensor_core_case(int d, int loo, int tiny, int far)
{
  dataset t = make_data(3001, d, KDE_GAUSSIAN, 1, 300 + d);
  if (far == 2) t.x[5] = 4e4; /* beyond 2^15 once scaled, 13 units off the mean */
  dataset q = loo ? t : make_queries(1500, t, 301, 13);
  if (far && !loo)
    for (int64_t i = 0; i < q.n; i += 97) q.x[i + (i % d) * q.n] += i % 2 ? 1e5 : -3e8;
  const double lc = kde_log_norm_const(KDE_GAUSSIAN, d);
  std::vector<int64_t> rows = sample_rows(q.n, 40, 7);
  if (far) rows.push_back(97);
  std::vector<double> ref = reference(KDE_GAUSSIAN, t, q, rows, loo, lc);
  std::vector<double> tc, fma;
  kde_status st, st2;
  const double budget = tiny ? tiny_budget(d, 1) * 2 : 0;
  int rc = evaluate(t, q, KDE_GAUSSIAN, 1, {0}, budget, loo, lc, tc, &st);
  tuning.no_mma = 1;
  int rc2 = evaluate(t, q, KDE_GAUSSIAN, 1, {0}, budget, loo, lc, fma, &st2);
  tuning.no_mma = 0;
  compare_result c, c2;
  double vs = 0;
  bool ok = rc == 0 && rc2 == 0;
  if (ok) {
    c = compare(tc, rows, ref);
    c2 = compare(fma, rows, ref);
    for (int64_t i = 0; i < q.n; i++)
      if (std::isfinite(fma[i]))
        vs = std::max(vs, fabs(tc[i] - fma[i]) / std::max(1.0, fabs(fma[i])));
      else if (tc[i] != fma[i])
        vs = INFINITY;
    ok = c.nan == 0 && c.mismatched_inf == 0 && c.max_err <= 1e-5 && vs <= 1e-5;
    if (far == 2) ok = ok && vs == 0; /* the same (FMA) kernel ran */
  }
  failures += !ok;
  printf("%s gaussian d=%d loo=%d tiny=%d far=%d single: tc max_err %.2e, fma max_err"
         " %.2e, tc vs fma (all %lld queries) %.2e %s%s\n",
         ok ? "ok  " : "FAIL", d, loo, tiny, far, c.max_err, c2.max_err,
         (long long) q.n, vs, rc ? st.message : "", rc2 ? st2.message : "");
}

static void tensor_core_tests()
{
  printf("\n== wide tensor-core (3xFP16) path\n");
  for (int d : {16, 21, 64})
    for (int loo = 0; loo <= 1; loo++)
      for (int tiny = 0; tiny <= 1; tiny++) tensor_core_case(d, loo, tiny, 0);
  for (int d : {16, 64})
    for (int far = 1; far <= 2; far++) tensor_core_case(d, 0, 0, far);
  tensor_core_case(250, 0, 0, 0); /* one block per SM */
}

static int probe_calls = 0;
static int probe_stop_at_3(double done)
{
  (void) done;
  return ++probe_calls >= 3;
}

static void errors_and_interrupts()
{
  printf("\n== errors, interrupts, leaks\n");
  size_t free0 = 0, free1 = 0, total = 0;
  cudaSetDevice(0);
  cudaMemGetInfo(&free0, &total);
  kde_status st;
  dataset t = make_data(3000, 3, KDE_GAUSSIAN, 0, 5);
  dataset q = make_queries(2000, t, 6, 0);
  std::vector<double> got;

  int rc = evaluate(t, q, KDE_GAUSSIAN, 0, {0}, 1000.0, 0, 0, got, &st);
  bool ok = rc != 0 && st.code == KDE_ERR_ALLOC;
  printf("%s tiny budget -> code %d: %s\n", ok ? "ok  " : "FAIL", st.code, st.message);
  failures += !ok;

  rc = evaluate(t, q, KDE_GAUSSIAN, 0, {99}, 0, 0, 0, got, &st);
  ok = rc != 0 && st.code == KDE_ERR_ARGUMENT;
  printf("%s bad device -> code %d: %s\n", ok ? "ok  " : "FAIL", st.code, st.message);
  failures += !ok;

  rc = evaluate(t, q, KDE_GAUSSIAN, 0, {0}, 0, 1, 0, got, &st);
  ok = rc != 0 && st.code == KDE_ERR_ARGUMENT;
  printf("%s loo with n_query != n_train -> code %d: %s\n", ok ? "ok  " : "FAIL",
         st.code, st.message);
  failures += !ok;

  probe_calls = 0;
  rc = evaluate(t, q, KDE_GAUSSIAN, 1, {0}, tiny_budget(3, 1), 0, 0, got, &st,
                probe_stop_at_3);
  ok = rc != 0 && st.code == KDE_ERR_INTERRUPTED && probe_calls == 3;
  printf("%s interrupt at the 3rd probe -> code %d: %s\n", ok ? "ok  " : "FAIL",
         st.code, st.message);
  failures += !ok;

  /* all-outside-support: compact kernel, queries far away -> -inf */
  {
    dataset far = make_queries(500, t, 9, 1); /* every query far */
    rc = evaluate(t, far, KDE_EPANECHNIKOV, 1, {0}, 0, 0, 0, got, &st);
    int all_inf = rc == 0;
    for (double v : got) all_inf &= v == -INFINITY;
    printf("%s every term outside the support -> -inf\n", all_inf ? "ok  " : "FAIL");
    failures += !all_inf;
    rc = evaluate(t, far, KDE_GAUSSIAN, 1, {0}, 0, 0, 0, got, &st);
    std::vector<int64_t> rows = sample_rows(far.n, 20, 3);
    std::vector<double> ref = reference(KDE_GAUSSIAN, t, far, rows, 0, 0);
    compare_result c = compare(got, rows, ref);
    ok = rc == 0 && c.nan == 0 && c.mismatched_inf == 0 && c.max_err < 1e-5;
    printf("%s gaussian far away (log-density ~ %.3g): max_err %.2e\n",
           ok ? "ok  " : "FAIL", ref[0], c.max_err);
    failures += !ok;
  }
  /* all weights zero but one */
  {
    dataset t1 = t;
    for (int64_t j = 0; j < t1.n; j++) { t1.w[j] = 0; t1.lw[j] = -INFINITY; }
    t1.w[1234] = 1; t1.lw[1234] = 0;
    for (int prec = 0; prec <= 1; prec++) {
      rc = evaluate(t1, q, KDE_GAUSSIAN, prec, {0}, 0, 0, 0, got, &st);
      std::vector<int64_t> rows = sample_rows(q.n, 20, 3);
      std::vector<double> ref = reference(KDE_GAUSSIAN, t1, q, rows, 0, 0);
      compare_result c = compare(got, rows, ref);
      ok = rc == 0 && c.nan == 0 && c.mismatched_inf == 0 &&
           c.max_err < (prec ? 1e-5 : 1e-10);
      printf("%s one non-zero weight (%s): max_err %.2e\n", ok ? "ok  " : "FAIL",
             prec ? "single" : "double", c.max_err);
      failures += !ok;
    }
    /* leave one out of the only weighted point: -inf there */
    dataset t2 = t1;
    rc = evaluate(t2, t2, KDE_GAUSSIAN, 1, {0}, 0, 1, 0, got, &st);
    ok = rc == 0 && got[1234] == -INFINITY && std::isfinite(got[0]);
    printf("%s loo of the only weighted point -> -inf there, finite elsewhere\n",
           ok ? "ok  " : "FAIL");
    failures += !ok;
  }
  cudaSetDevice(0);
  cudaMemGetInfo(&free1, &total);
  ok = free1 == free0;
  printf("%s device memory free before %zu, after %zu\n", ok ? "ok  " : "FAIL",
         free0, free1);
  failures += !ok;
}

/* ---- timings ------------------------------------------------------------- */

struct timing {
  double kernel_s, wall_s;
};

static timing time_eval(kde_cuda_model *model, const dataset &q, int reps,
                        std::vector<double> &out)
{
  kde_query_set qs = {};
  qs.center = qs.transform = NULL; /* already whitened */
  qs.n_query = q.n;
  qs.query = q.x.data();
  qs.log_const = 0;
  qs.leave_one_out = 0;
  qs.tolerance = 0; /* the full sum */
  qs.host_threads = 0;
  out.assign(q.n, NAN);
  std::vector<double> ks, ws;
  kde_status st;
  for (int r = 0; r < reps + 1; r++) {
    auto t0 = std::chrono::steady_clock::now();
    kde_cuda_log_density_stats(model, &qs, NULL, out.data(), &stats, &st);
    auto t1 = std::chrono::steady_clock::now();
    if (st.code != KDE_OK) {
      printf("FAIL evaluation: %s\n", st.message);
      failures++;
      return {NAN, NAN};
    }
    if (r == 0) continue; /* warm-up */
    ks.push_back(stats.kernel_ms * 1e-3);
    ws.push_back(std::chrono::duration<double>(t1 - t0).count());
  }
  std::sort(ks.begin(), ks.end());
  std::sort(ws.begin(), ws.end());
  return {ks[ks.size() / 2], ws[ws.size() / 2]};
}

static double expected_rate(int kernel, int d, int precision)
{
  double r = precision ? 3e12 : 3e11;
  if (d > 4) r /= d / 4.0;
  if (precision && kernel == KDE_GAUSSIAN && d >= 16 && !tuning.no_mma)
    r = d <= 16 ? 2e12 : 8e11;
  if (kernel != KDE_GAUSSIAN) r /= 2;
  return r;
}

/* kbench: the accuracy of every timed single-precision run is checked. */
static bool check_every_timing = false;
/* bench_one's data spread, in bandwidths, times the rule of thumb's */
static double data_scale = 1;

static void bench_one(int kernel, int d, int64_t n, int64_t m_full, int precision,
                      const char *label, std::vector<double> *keep = NULL,
                      dataset *keep_q = NULL, dataset *keep_t = NULL)
{
  /* cap the queries so that one evaluation takes about 0.3 s (not when the
   * results are kept for a comparison) */
  int64_t m = m_full;
  const double target_pairs = 0.3 * expected_rate(kernel, d, precision);
  if (keep == NULL && (double) m * n > target_pairs)
    m = std::max<int64_t>(16384, (int64_t) (target_pairs / n));
  if (m > m_full) m = m_full;
  dataset t = make_data(n, d, kernel, 0, 42 + d);
  for (double &v : t.x) v *= data_scale;
  dataset q = make_queries(m, t, 43, 0);
  kde_training_set ts = training_set(t, kernel);
  int dev = 0;
  kde_status st;
  kde_cuda_model *model =
      kde_cuda_model_create_tuned(&ts, precision, &dev, 1, 0, kFormBound, &tuning, &st);
  if (model == NULL) {
    printf("FAIL model: %s\n", st.message);
    failures++;
    return;
  }
  std::vector<double> out;
  timing tm = time_eval(model, q, 3, out);
  kde_cuda_model_free(model);
  const double pairs = (double) n * m;
  /* accuracy of the timed run against the CPU reference on a few queries */
  char acc[64] = "";
  if ((d >= 16 || check_every_timing) && precision == 1 && n == 1000000) {
    std::vector<int64_t> rows = sample_rows(m, 14, 17);
    std::vector<double> ref = reference(kernel, t, q, rows, 0, 0);
    compare_result c = compare(out, rows, ref);
    snprintf(acc, sizeof acc, " max_err(16 q)=%.1e", c.max_err);
    if (!(c.max_err <= 1e-5) || c.nan || c.mismatched_inf) failures++;
  }
  printf("%-12s %-12s d=%-3d n=%-9lld m=%-9lld %-6s kernel %9.3f ms  %8.3e eval/s"
         "  (wall %8.3f ms, %8.3e/s) splits=%d%s\n",
         label, kernel_names[kernel], d, (long long) n, (long long) m,
         precision ? "single" : "double", tm.kernel_s * 1e3, pairs / tm.kernel_s,
         tm.wall_s * 1e3, pairs / tm.wall_s, stats.max_splits, acc);
  fflush(stdout);
  if (keep) *keep = out;
  if (keep_q) *keep_q = q;
  if (keep_t) *keep_t = t;
}

static void bench()
{
  printf("\n== timings (median of 3 after a warm-up; kernel = event time of the"
         " kernels; eval = n_train x n_query pairs)\n");
  const int64_t sizes[] = {10000, 100000, 1000000};
  for (int precision = 1; precision >= 0; precision--)
    for (int d : {1, 3, 16, 64})
      for (int64_t n : sizes) bench_one(KDE_GAUSSIAN, d, n, n, precision, "square");
  for (int precision = 1; precision >= 0; precision--)
    for (int kernel = 0; kernel < KDE_N_KERNELS; kernel++)
      bench_one(kernel, 3, 1000000, 1000000, precision, "kernels");
  for (int precision = 1; precision >= 0; precision--)
    for (int d : {3, 16})
      bench_one(KDE_GAUSSIAN, d, 10000000, 100, precision, "100x1e7");
  tuning.no_mma = 1; /* the FMA kernel at the tensor-core sizes */
  for (int d : {16, 64}) {
    bench_one(KDE_GAUSSIAN, d, 1000000, 1000000, 1, "fma-only");
    bench_one(KDE_GAUSSIAN, d, 10000000, 100, 1, "fma-only");
  }
  tuning.no_mma = 0;
  bench_one(KDE_GAUSSIAN, 64, 10000000, 100, 1, "100x1e7");

  /* accuracy at n = 1e6: single vs double vs the CPU reference */
  printf("\n== accuracy: gaussian d=3, n=1e6\n");
  std::vector<double> f, dd;
  dataset q, t;
  const int64_t n = 1000000, m = 200000;
  bench_one(KDE_GAUSSIAN, 3, n, m, 1, "acc", &f, &q, &t);
  bench_one(KDE_GAUSSIAN, 3, n, m, 0, "acc", &dd);
  if (f.size() == dd.size() && !f.empty()) {
    double worst = 0;
    for (size_t i = 0; i < f.size(); i++)
      worst = std::max(worst, fabs(f[i] - dd[i]) / std::max(1.0, fabs(dd[i])));
    std::vector<int64_t> rows = sample_rows((int64_t) f.size(), 62, 11);
    std::vector<double> ref = reference(KDE_GAUSSIAN, t, q, rows, 0, 0);
    compare_result cf = compare(f, rows, ref), cd = compare(dd, rows, ref);
    const bool ok = worst <= 1e-5 && cf.max_err <= 1e-5 && cd.max_err <= 1e-10;
    printf("%s single vs double over %zu queries: max rel %.2e; vs CPU reference"
           " (64 queries): single %.2e, double %.2e\n",
           ok ? "ok  " : "FAIL", f.size(), worst, cf.max_err, cd.max_err);
    failures += !ok;
  }
}

/* ---- main ---------------------------------------------------------------- */

static void device_info()
{
  kde_status st;
  int n = kde_cuda_device_count(&st);
  printf("kde_cuda_compiled() = %d, kde_cuda_device_count() = %d, status %d%s%s\n",
         kde_cuda_compiled(), n, st.code, st.code ? ": " : "", st.message);
  for (int dev = 0; dev < n; dev++) {
    kde_cuda_device_info info;
    kde_cuda_get_device_info(dev, &info, &st);
    printf("device %d: %s, cc %d.%d, %d SMs, %.1f / %.1f GiB free\n", dev, info.name,
           info.compute_major, info.compute_minor, info.multiprocessors,
           info.free_memory / 1073741824.0, info.total_memory / 1073741824.0);
  }
}

int main(int argc, char **argv)
{
  std::string mode = argc > 1 ? argv[1] : "all";
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* the kernels as they were written: the expanded Gaussian wherever it
   * serves (the model's own choice by rounding: MODE=forms) */
  tuning.form = 1;
  if (mode == "nodevice") {
    device_info();
    kde_status st;
    int dev = 0;
    dataset t = make_data(10, 2, 0, 0, 1);
    kde_training_set ts = training_set(t, 0);
    kde_cuda_model *m = kde_cuda_model_create(&ts, 0, &dev, 1, 0, kFormBound, &st);
    printf("model_create without a device -> %p, code %d: %s\n", (void *) m, st.code,
           st.message);
    kde_cuda_model_free(NULL);
    return m == NULL && st.code == KDE_ERR_UNAVAILABLE ? 0 : 1;
  }
  device_info();
  if (mode == "tiny") {
    for (int precision = 0; precision <= 1; precision++)
      for (int d : {2, 3, 7}) {
        dataset t = make_data(700, d, KDE_GAUSSIAN, 1, 3);
        dataset q = make_queries(200, t, 4, 0);
        std::vector<double> got;
        kde_status st;
        int rc = evaluate(t, q, KDE_GAUSSIAN, precision, {0}, 0, 0, 0, got, &st);
        printf("tiny d=%d prec=%d rc=%d %s\n", d, precision, rc, st.message);
        failures += rc != 0;
      }
  } else if (mode.compare(0, 4, "plan") == 0) {
    failures += plan_mode(mode);
  } else if (mode == "ceiling") {
    failures += ceiling_mode();
  } else if (mode == "exp2") {
    failures += exp2_mode();
  } else if (mode == "bound") {
    failures += bound_mode();
  } else if (mode == "quick") {
    correctness(true);
  } else if (mode == "kbench") {
    /* the shapes of the speed targets, single precision, with accuracy */
    check_every_timing = true;
    bench_one(KDE_GAUSSIAN, 3, 1000000, 1000000, 1, "square");
    bench_one(KDE_EXPONENTIAL, 3, 1000000, 1000000, 1, "kernels");
    bench_one(KDE_GAUSSIAN, 64, 1000000, 1000000, 1, "square");
    bench_one(KDE_GAUSSIAN, 3, 10000000, 100, 1, "100x1e7");
  } else if (mode == "wide") {
    /* large d: the wide tensor-core kernel against the FMA kernel */
    for (int d : {96, 128, 160, 208, 256}) {
      bench_one(KDE_GAUSSIAN, d, 1000000, 100000, 1, "tc");
      tuning.no_mma = 1;
      bench_one(KDE_GAUSSIAN, d, 1000000, 100000, 1, "fma");
      tuning.no_mma = 0;
    }
  } else if (mode == "forms") {
    /* the Gaussian's two forms, single precision, n = 1e6: speed (1e6
     * queries, capped at ~0.3 s) and the largest error against double over
     * 5e4 queries; data spread at the rule of thumb and 5x wider (a
     * bandwidth 5x narrower). "auto" is the model's own choice. */
    const char *names[] = {"auto", "expanded", "expanded-fma", "difference"};
    for (double scale : {1.0, 5.0})
      for (int d : {3, 16, 64}) {
        data_scale = scale;
        std::vector<double> dd, got;
        dataset q, t;
        bench_one(KDE_GAUSSIAN, d, 1000000, 50000, 0, "double", &dd, &q, &t);
        for (int f = 0; f < 4; f++) {
          tuning.form = f == 0 ? 0 : f == 3 ? 2 : 1;
          tuning.no_mma = f == 2;
          bench_one(KDE_GAUSSIAN, d, 1000000, 1000000, 1, names[f]);
          bench_one(KDE_GAUSSIAN, d, 1000000, 50000, 1, names[f], &got);
          double worst = 0;
          for (size_t i = 0; i < dd.size(); i++)
            worst = std::max(worst, fabs(expm1(got[i] - dd[i])));
          /* eps R^2 in storage units (log2 e per bandwidth^2), R from the
           * mean, as the model centres */
          std::vector<double> mean(d, 0.0);
          for (int64_t k = 0; k < d; k++) {
            for (int64_t j = 0; j < t.n; j++) mean[k] += t.x[j + k * t.n];
            mean[k] /= (double) t.n;
          }
          double r2 = 0;
          for (int64_t j = 0; j < t.n; j++) {
            double norm2 = 0;
            for (int64_t k = 0; k < d; k++)
              norm2 += (t.x[j + k * t.n] - mean[k]) * (t.x[j + k * t.n] - mean[k]);
            r2 = std::max(r2, norm2);
          }
          printf("forms d=%d scale=%.0f %-12s max rel err vs double %.2e  (eps R^2 = %.1e)\n",
                 d, scale, names[f], worst, ldexp(r2 * 1.4426950408889634, -24));
          fflush(stdout);
        }
      }
    tuning.form = 1;
    tuning.no_mma = 0;
    data_scale = 1;
  } else if (mode == "tcacc") {
    /* the tensor-core kernels (d = 3: bfloat16; d >= 16: 3xFP16) against
     * the FMA kernel: single vs double over every query, n = 1e6 */
    for (int d : {3, 16, 64}) {
      std::vector<double> tc, fma_, dd;
      dataset q, t;
      bench_one(KDE_GAUSSIAN, d, 1000000, 50000, 1, "tc", &tc, &q, &t);
      tuning.no_mma = 1;
      bench_one(KDE_GAUSSIAN, d, 1000000, 50000, 1, "fma", &fma_);
      tuning.no_mma = 0;
      bench_one(KDE_GAUSSIAN, d, 1000000, 50000, 0, "double", &dd);
      double w_tc = 0, w_fma = 0, mean_tc = 0, mean_fma = 0;
      for (size_t i = 0; i < dd.size(); i++) {
        const double den = std::max(1.0, fabs(dd[i]));
        w_tc = std::max(w_tc, fabs(tc[i] - dd[i]) / den);
        w_fma = std::max(w_fma, fabs(fma_[i] - dd[i]) / den);
        mean_tc += (tc[i] - dd[i]) / den / dd.size();
        mean_fma += (fma_[i] - dd[i]) / den / dd.size();
      }
      printf("tcacc d=%d: max rel vs double: tc %.2e fma %.2e; mean signed: tc %.2e"
             " fma %.2e\n", d, w_tc, w_fma, mean_tc, mean_fma);
    }
    /* a bandwidth 5x narrower than the rule of thumb, queries at training
     * points: a pair's exponent is a small difference of terms ~ |x|^2 / 2 */
    for (int d : {16, 64}) {
      dataset t = make_data(200000, d, KDE_GAUSSIAN, 0, 77);
      for (double &v : t.x) v *= 5;
      dataset q;
      q.n = 20000;
      q.d = d;
      for (int64_t k = 0; k < d; k++)
        q.x.insert(q.x.end(), t.x.begin() + k * t.n, t.x.begin() + k * t.n + q.n);
      const double lc = kde_log_norm_const(KDE_GAUSSIAN, d);
      std::vector<double> tc, fma_, dd;
      kde_status st;
      int rc = evaluate(t, q, KDE_GAUSSIAN, 1, {0}, 0, 0, lc, tc, &st);
      tuning.no_mma = 1;
      rc |= evaluate(t, q, KDE_GAUSSIAN, 1, {0}, 0, 0, lc, fma_, &st);
      tuning.no_mma = 0;
      rc |= evaluate(t, q, KDE_GAUSSIAN, 0, {0}, 0, 0, lc, dd, &st);
      double w_tc = 0, w_fma = 0;
      for (int64_t i = 0; rc == 0 && i < q.n; i++) {
        const double den = std::max(1.0, fabs(dd[i]));
        w_tc = std::max(w_tc, fabs(tc[i] - dd[i]) / den);
        w_fma = std::max(w_fma, fabs(fma_[i] - dd[i]) / den);
      }
      failures += rc != 0;
      printf("tcacc narrow d=%d (log-density %.1f): max rel vs double: tc %.2e fma %.2e\n",
             d, rc == 0 ? dd[0] : NAN, w_tc, w_fma);
    }
  } else if (mode == "profile") {
    /* one evaluation of each shape, for ncu */
    struct shape { int d; int64_t n, m; } shapes[] = {
        {3, 1000000, 131072}, {3, 10000000, 100}, {64, 1000000, 65536}};
    for (const shape &sh : shapes) {
      dataset t = make_data(sh.n, sh.d, KDE_GAUSSIAN, 0, 42);
      dataset q = make_queries(sh.m, t, 43, 0);
      std::vector<double> got;
      kde_status st;
      int rc = evaluate(t, q, KDE_GAUSSIAN, 1, {0}, 0, 0, 0, got, &st);
      printf("profile d=%d n=%lld m=%lld rc=%d splits=%d %s\n", sh.d, (long long) sh.n,
             (long long) sh.m, rc, stats.max_splits, st.message);
    }
  } else {
    if (mode == "all" || mode == "test") {
      correctness(false);
      failures += exp2_mode();
      tensor_core_tests();
      multi_device();
      errors_and_interrupts();
    }
    if (mode == "all" || mode == "bench") bench();
  }
  printf("\nharness %s: %d failure%s\n", mode.c_str(), failures,
         failures == 1 ? "" : "s");
  return failures ? 1 : 0;
}
