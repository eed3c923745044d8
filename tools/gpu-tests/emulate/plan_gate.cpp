// Checks src/cuda/plan_gate.cu's one_block_plan_can_pay, compiled for the
// host: whether a plan can pay for one query block (at most 128 queries,
// decided before they are ordered) must not depend on the order of the
// block's rows, although it tests some of them one by one (every m / 32-th
// where plans are refined per query). Fits of N(0, s^2 I) data in whitened
// (bandwidth) units, s = 0.6 (compact: one query's plan keeps nearly every
// unit) and 5, and 20 clusters far apart; d = 1 to 3; m = 40, 100, 128
// queries near the centre, each set also with 1, 2 or 5 of them moved 8 s
// out along the first axis (where a sample of the rows, taken in the
// caller's order, found or missed them: 57 of these 648 sets changed with
// the order before the rows were sorted); groups of 256 and of 8 units
// (plans refined per query, or not). Each set is asked in 8 random orders.
#include "model.cuh"
#include "plan.cuh"
#include "prune.h"
#include "spatial.h"
#include <kdegpu/kernels.h>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

FILE *kde_trace_file(void) { return NULL; }

using namespace kdegpu;

int main()
{
  int failures = 0, checks = 0, pays = 0;
  const int64_t n_units = 400, n = n_units * kUnit;
  const char *shapes[] = {"N(0, 0.6^2)", "N(0, 5^2)", "clustered"};
  const double spread[] = {0.6, 5, 1};
  for (int d = 1; d <= 3; d++)
    for (int shape = 0; shape < 3; shape++) {
      std::mt19937_64 rng(3 + 10 * d + shape);
      std::normal_distribution<double> N(0, 1);
      std::uniform_real_distribution<double> U(-1, 1);
      const double s = spread[shape];
      std::vector<double> centres(20 * d);
      for (auto &c : centres) c = 200 * U(rng);
      std::vector<double> z(n * d); /* column-major, whitened units */
      for (int64_t j = 0; j < n; j++)
        for (int c = 0; c < d; c++)
          z[j + c * n] = shape < 2 ? s * N(rng) : centres[(j % 20) * d + c] + N(rng);
      std::vector<int64_t> order(n);
      kde_kd_sort(z.data(), n, d, kUnit, 128, 1, order.data());
      std::vector<double> lo(n_units * d), hi(n_units * d), lw(n_units), rest(n_units);
      kde_tile_boxes(z.data(), n, d, kUnit, 1, lo.data(), hi.data());
      std::vector<double> w(n, 1.0 / (double) n);
      kde_tile_log_weights(w.data(), n, kUnit, 1, lw.data(), rest.data());
      kde_cuda_model *model = (kde_cuda_model *) calloc(1, sizeof(kde_cuda_model));
      if (model == NULL) return 2;
      model->kernel = KDE_GAUSSIAN;
      model->precision = KDE_PRECISION_SINGLE;
      model->n_train = model->n_points = n;
      model->dim = d;
      model->unit_lo = lo.data();
      model->unit_hi = hi.data();
      model->unit_log_weight = lw.data();
      model->unit_log_rest = rest.data();
      if (kde_prune_groups_make(d, n_units, lo.data(), hi.data(), lw.data(), rest.data(),
                                &model->unit_groups) != 0)
        return 2;
      int case_checks = 0, case_failures = 0, case_pays = 0;
      for (int64_t group_tiles : {kPlanGroupTiles, (int64_t) 8})
        for (double near : {0.1, 0.3, 1.0})
          for (int moved : {0, 1, 2, 5})
            for (int64_t m : {40, 100, 128}) {
              model->device_groups.group_tiles = group_tiles;
              std::vector<double> q(m * d);
              const int64_t home = (int64_t) (rng() % (uint64_t) n); /* clusters: one's centre */
              for (int64_t i = 0; i < m; i++)
                for (int c = 0; c < d; c++)
                  q[i + c * m] = (shape < 2 ? 0.0 : z[home + c * n]) + near * s * N(rng);
              for (int k = 0; k < moved; k++) {
                const int64_t i = (int64_t) (rng() % (uint64_t) m);
                q[i] += 8 * s;
              }
              kde_query_set qs{};
              qs.n_query = m;
              qs.query = q.data();
              qs.tolerance = 1e-7;
              const int first = one_block_plan_can_pay(model, &qs);
              int same = 1;
              std::vector<double> shuffled(m * d);
              std::vector<int64_t> rows(m);
              for (int round = 0; round < 8; round++) {
                for (int64_t i = 0; i < m; i++) rows[i] = i;
                std::shuffle(rows.begin(), rows.end(), rng);
                for (int c = 0; c < d; c++)
                  for (int64_t i = 0; i < m; i++) shuffled[i + c * m] = q[rows[i] + c * m];
                qs.query = shuffled.data();
                if (one_block_plan_can_pay(model, &qs) != first) same = 0;
              }
              case_checks++;
              case_pays += first;
              if (!same) {
                case_failures++;
                printf("plan gate d=%d %s: %lld queries (%d moved out, groups of %lld) changed "
                       "with the order FAIL\n",
                       d, shapes[shape], (long long) m, moved, (long long) group_tiles);
              }
            }
      printf("plan gate d=%d %-11s: %d query sets (%d a plan may pay for), the same decision in "
             "8 orders of each%s\n",
             d, shapes[shape], case_checks, case_pays, case_failures ? " FAIL" : "");
      checks += case_checks;
      failures += case_failures;
      pays += case_pays;
      kde_prune_groups_free(&model->unit_groups);
      free(model);
    }
  printf("plan gate: %d query sets, %d failed\n", checks, failures);
  return failures > 0;
}
