// Checks unit_spread.c's layout of a spatially ordered training set (the
// CUDA backend's units, src/cuda/spread.cu) on normal, clustered and widely
// spread data, d = 1..3, several widths: wherever a layout is made,
//   - every point has one position and every position at most one point
//     (point_at and position_of inverse), n_positions whole units;
//   - each unit holds one run's points, as a prefix, nulls after them;
//   - the runs keep their order, and each run's points their order within
//     each part;
//   - a unit of a run that was split is at most the layout's width wide
//     along every coordinate.
// (Where no layout is made, unit_spread.c found no wide run, or splitting
// them would have taken too many units: not checked here.)
#include "spatial.h"
#include "unit_spread.h"
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main()
{
  int failures = 0;
  const int64_t unit = 256;
  const char *shapes[] = {"normal", "clustered", "spread"};
  for (int64_t d = 1; d <= 3; d++)
    for (int shape = 0; shape < 3; shape++)
      for (double width : {2.0, 8.0, 32.0})
        for (int64_t n : {(int64_t) 777, unit * 300 + 17}) {
          std::mt19937_64 rng(5 + 10 * d + shape);
          std::normal_distribution<double> N(0, 1);
          std::uniform_real_distribution<double> U(0, 1);
          std::vector<double> centres(20 * d);
          for (auto &c : centres) c = 800 * U(rng);
          std::vector<double> z(n * d);
          for (int64_t i = 0; i < n; i++) {
            const int64_t c = (int64_t) (U(rng) * 20) % 20;
            for (int64_t k = 0; k < d; k++)
              z[i + k * n] = shape == 0   ? 10 * N(rng)
                             : shape == 1 ? centres[c * d + k] + N(rng)
                                          : 4000 * U(rng);
          }
          std::vector<int64_t> order(n);
          kde_kd_sort(z.data(), n, d, unit, 16, 2, order.data());
          kde_unit_spread s;
          const int rc = kde_unit_spread_make(z.data(), n, d, unit, width, 0.25, 2, &s);
          const int64_t n_runs = (n + unit - 1) / unit;
          int64_t bad = rc != 0;
          std::vector<double> run_extent(n_runs, 0.0);
          for (int64_t r = 0; r < n_runs; r++)
            for (int64_t k = 0; k < d; k++) {
              double lo = INFINITY, hi = -INFINITY;
              for (int64_t i = r * unit; i < std::min(n, (r + 1) * unit); i++) {
                lo = std::min(lo, z[i + k * n]);
                hi = std::max(hi, z[i + k * n]);
              }
              run_extent[r] = std::max(run_extent[r], hi - lo);
            }
          if (rc == 0 && s.n_positions > 0) {
            bad += s.n_positions % unit != 0;
            std::vector<int> seen(n, 0);
            int64_t last_run = 0;
            for (int64_t u = 0; u < s.n_positions / unit; u++) {
              const int64_t *at = s.point_at + u * unit;
              bad += at[0] < 0; /* a part is never empty */
              if (at[0] < 0) continue;
              const int64_t run = at[0] / unit;
              bad += run < last_run; /* runs in order */
              last_run = run;
              double lo[3], hi[3];
              for (int64_t k = 0; k < d; k++) lo[k] = hi[k] = z[at[0] + k * n];
              bool nulls = false;
              for (int64_t p = 0; p < unit; p++) {
                if (at[p] < 0) {
                  nulls = true;
                  continue;
                }
                const int64_t i = at[p];
                if (i >= n) {
                  bad++;
                  continue;
                }
                bad += nulls || i / unit != run || seen[i]++ > 0 ||
                       s.position_of[i] != u * unit + p || (p > 0 && at[p - 1] >= at[p]);
                for (int64_t k = 0; k < d; k++) {
                  lo[k] = std::min(lo[k], z[i + k * n]);
                  hi[k] = std::max(hi[k], z[i + k * n]);
                }
              }
              if (run_extent[run] > s.width)
                for (int64_t k = 0; k < d; k++) bad += hi[k] - lo[k] > s.width;
            }
            for (int64_t i = 0; i < n; i++) bad += seen[i] != 1;
          }
          failures += bad > 0;
          printf("%s %s d=%lld width=%g n=%lld: layout of %lld positions (%lld units plain), %lld "
                 "faults\n",
                 bad ? "FAIL" : "ok  ", shapes[shape], (long long) d, width, (long long) n,
                 (long long) s.n_positions, (long long) n_runs, (long long) bad);
          kde_unit_spread_free(&s);
        }
  printf("unit_spread: %d failures\n", failures);
  return failures > 0 ? 1 : 0;
}
