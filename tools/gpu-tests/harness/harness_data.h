/*
 * tools/gpu-tests/harness/harness_data.h: the ordered training sets of the
 * harness's plan and ceiling modes: points in bandwidth units spread as
 * after a rule-of-thumb bandwidth (normal or clustered), in a fit's spatial
 * order (tiles of 256), and their models.
 */
#ifndef KDEGPU_HARNESS_DATA_H
#define KDEGPU_HARNESS_DATA_H

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "cuda/tuning_hooks.h"
#include "spatial.h"

namespace harness_data {

constexpr int64_t kUnit = 256;       /* src/cuda/tuning.cuh */
constexpr int64_t kBlock = 128;      /* kBlockQueries */

struct prng {
  uint64_t s;
  explicit prng(uint64_t seed, uint64_t offset = 7) : s(seed * 0x9E3779B97F4A7C15ull + offset) {}
  uint64_t next()
  {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * 0x1.0p-53; }
  double normal()
  {
    double u = uniform(), v = uniform();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2 * log(u)) * cos(2 * M_PI * v);
  }
};

inline double now_ms()
{
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/* n points (column-major n x d) in bandwidth units, spread as after a
 * rule-of-thumb bandwidth for rule_n points (0: for n): "normal", or
 * "clustered" (12 tight clusters and 0.2% outliers far out). */
inline std::vector<double> points(int64_t n, int64_t d, int kernel, bool clustered, uint64_t seed,
                                  int64_t rule_n = 0)
{
  prng r(seed);
  std::vector<double> x((size_t) (n * d));
  const double spread =
      pow((double) std::max<int64_t>(rule_n > 0 ? rule_n : n, 2), 1.0 / (d + 4)) /
      kde_scale(kernel, (int) d);
  std::vector<double> centre(12 * d);
  prng rc(99); /* the same clusters for training points and queries */
  for (double &c : centre) c = (rc.uniform() - 0.5) * 8 * spread;
  for (int64_t j = 0; j < n; j++) {
    const int64_t c = (int64_t) (r.uniform() * 12);
    const bool far = clustered && r.uniform() < 0.002;
    for (int64_t k = 0; k < d; k++)
      x[j + k * n] = !clustered ? spread * r.normal()
                     : far      ? (r.uniform() - 0.5) * 100 * spread
                                : centre[c * d + k] + 0.3 * spread * r.normal();
  }
  return x;
}

/* A training set in the spatial order of a fit (tiles of 256, blocks of 16
 * inside), weights uniform or random with zeros. */
struct training {
  int64_t n, d;
  std::vector<double> x, w, lw;
};

inline training ordered_training(int64_t n, int64_t d, int kernel, bool clustered, bool weighted,
                          uint64_t seed)
{
  training t;
  t.n = n;
  t.d = d;
  std::vector<double> raw = points(n, d, kernel, clustered, seed);
  std::vector<int64_t> order(n);
  t.x = raw;
  kde_kd_sort(t.x.data(), n, d, KDE_TILE_POINTS, KDE_QUERY_BLOCK, 0, order.data());
  prng r(seed + 1);
  t.w.resize(n);
  t.lw.resize(n);
  double total = 0;
  for (int64_t j = 0; j < n; j++) {
    t.w[j] = !weighted ? 1.0 : r.uniform() < 0.05 ? 0.0 : -log(r.uniform() + 1e-12);
    total += t.w[j];
  }
  for (int64_t j = 0; j < n; j++) {
    t.w[j] /= total;
    t.lw[j] = t.w[j] > 0 ? log(t.w[j]) : -INFINITY;
  }
  return t;
}

/* A fixed-bandwidth training set of n points (column-major n x d), in
 * tiles of tile_size points of a spatial order (0: none). */
inline kde_training_set fixed_training_set(int64_t n, int64_t d, const double *x,
                                           const double *w, const double *lw, int kernel,
                                           int64_t tile_size)
{
  kde_training_set ts;
  ts.kernel = kernel;
  ts.n_train = n;
  ts.dim = d;
  ts.train = x;
  ts.weight = w;
  ts.log_weight = lw;
  ts.inv_scale2 = NULL;
  ts.tile_size = tile_size;
  ts.host_threads = 0;
  ts.n_discrete = 0;
  ts.codes = ts.discrete_penalty = NULL;
  ts.residual = NULL;
  return ts;
}

inline kde_cuda_model *make_model(const training &t, int kernel, int precision, kde_status *st,
                                  const kde_cuda_tuning *tuning = NULL)
{
  int dev = 0;
  const kde_training_set ts = fixed_training_set(t.n, t.d, t.x.data(), t.w.data(),
                                                 t.lw.data(), kernel, KDE_TILE_POINTS);
  return kde_cuda_model_create_tuned(&ts, precision, &dev, 1, 0, 1e-4, tuning, st);
}

/* log sum_j w_j k(|q_i - x_j|^2) in double over every training point but
 * self (-1: none); z is m x d, column-major. */
inline double reference(const training &t, int kernel, const double *z, int64_t m, int64_t i,
                 int64_t self)
{
  kde_lse s = kde_lse_empty();
  for (int64_t j = 0; j < t.n; j++) {
    if (j == self) continue;
    double s2 = 0;
    for (int64_t k = 0; k < t.d; k++) {
      const double diff = z[i + k * m] - t.x[j + k * t.n];
      s2 += diff * diff;
    }
    s = kde_lse_add(s, t.lw[j] + kde_log_profile(kernel, s2));
  }
  return kde_lse_log(s);
}

} // namespace harness_data

#endif /* KDEGPU_HARNESS_DATA_H */
