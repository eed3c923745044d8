// Checks prune.c's kde_plan_may_pay, the test that lets a few queries skip
// planning (src/cuda/evaluate.cu): wherever it says a plan cannot pay, the
// exact plan (kde_tiles_to_visit) must visit at least that share of the
// tiles; on normal, clustered and widely spread data, query boxes from a
// point to the whole data, three kernels, d = 1..4. It must also prove the
// obvious case: a box holding every point. And kde_prune_groups_local_share,
// the estimate by which the GPU plans smaller evaluations of clustered
// data: not below 0.8 of the exact plans' mean share at points of the data,
// and telling N(0, I) data from clusters far apart.
#include "prune.h"
#include "spatial.h"
#include <kdegpu/kernels.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

int main()
{
  int failures = 0;
  const int64_t n = 256 * 400, tile = 256, n_tiles = n / tile;
  const char *shapes[] = {"normal", "clustered", "spread"};
  for (int kernel : {KDE_GAUSSIAN, KDE_EPANECHNIKOV, KDE_EXPONENTIAL})
    for (int d = 1; d <= 4; d++)
      for (int shape = 0; shape < 3; shape++)
        for (double tol : {1e-7, 1e-3}) {
          std::mt19937_64 rng(11 + 100 * kernel + 10 * d + shape);
          std::normal_distribution<double> N(0, 1);
          std::uniform_real_distribution<double> U(-1, 1);
          std::vector<double> centres(20 * d);
          for (auto &c : centres) c = 200 * U(rng);
          std::vector<double> z(n * d); /* column-major, whitened units */
          for (int64_t j = 0; j < n; j++)
            for (int c = 0; c < d; c++)
              z[j + c * n] = shape == 0   ? 5 * N(rng)
                             : shape == 1 ? centres[(j % 20) * d + c] + N(rng)
                                          : 2000 * U(rng);
          std::vector<int64_t> order(n);
          kde_kd_sort(z.data(), n, d, tile, 128, 1, order.data());
          std::vector<double> lo(n_tiles * d), hi(n_tiles * d), lw(n_tiles), rest(n_tiles);
          kde_tile_boxes(z.data(), n, d, tile, 1, lo.data(), hi.data());
          std::vector<double> w(n);
          for (int64_t j = 0; j < n; j++) w[j] = (1.0 + 0.5 * (j % 7 == 0)) / (1.2 * n);
          kde_tile_log_weights(w.data(), n, tile, 1, lw.data(), rest.data());
          std::vector<double> centroid(n_tiles * d), spread2(n_tiles);
          kde_tile_centroids(z.data(), w.data(), n, d, tile, 1, centroid.data(), spread2.data());
          kde_prune_plan p{};
          p.kernel = kernel;
          p.dim = d;
          p.n_tiles = n_tiles;
          p.lo = lo.data();
          p.hi = hi.data();
          p.log_weight = lw.data();
          p.log_weight_rest = rest.data();
          p.tolerance = tol;
          p.derivative = KDE_PRUNE_DENSITY;
          kde_prune_groups g;
          if (kde_prune_groups_make(d, n_tiles, lo.data(), hi.data(), lw.data(), NULL, &g) != 0) return 2;

          /* query boxes: a point of the data, a point far from it, the
           * boxes of 10 and 128 random points, and the whole data */
          std::vector<std::vector<double>> boxes;
          std::uniform_int_distribution<int64_t> pick(0, n - 1);
          for (int b = 0; b < 12; b++) {
            const int count = b < 4 ? 1 : b < 8 ? 10 : 128;
            std::vector<double> box(2 * d);
            for (int c = 0; c < d; c++) {
              box[c] = INFINITY;
              box[d + c] = -INFINITY;
            }
            for (int k = 0; k < count; k++) {
              const int64_t j = pick(rng);
              for (int c = 0; c < d; c++) {
                const double v = z[j + c * n] + (b == 1 ? 1e4 : 0.0);
                box[c] = std::min(box[c], v);
                box[d + c] = std::max(box[d + c], v);
              }
            }
            boxes.push_back(box);
          }
          std::vector<double> all(2 * d);
          kde_rows_box(z.data(), n, d, 0, n, all.data(), all.data() + d);
          boxes.push_back(all);

          int unsound = 0, proven = 0, dropped = 0;
          std::vector<double> scratch(2 * n_tiles);
          std::vector<int64_t> visit(n_tiles);
          for (size_t b = 0; b < boxes.size(); b++) {
            const double *q_lo = boxes[b].data(), *q_hi = q_lo + d;
            const int64_t visited = kde_tiles_to_visit(&p, q_lo, q_hi, scratch.data(), visit.data());
            const bool nearly_all = visited >= 0.9 * n_tiles;
            const int pays = kde_plan_may_pay(&p, &g, q_lo, q_hi, 0.9);
            unsound += !pays && !nearly_all;
            proven += !pays;
            dropped += nearly_all;
            if (b + 1 == boxes.size() && pays) unsound++; /* the whole data: must be proven */
          }
          /* the groups' share estimate against the exact plans' mean
           * share for 64 points of the data */
          double exact_share = 0.0;
          for (int k = 0; k < 64; k++) {
            std::vector<double> point(d);
            const int64_t j = pick(rng);
            for (int c = 0; c < d; c++) point[c] = z[j + c * n];
            exact_share += (double) kde_tiles_to_visit(&p, point.data(), point.data(),
                                                       scratch.data(), visit.data()) /
                           (64.0 * n_tiles);
          }
          p.centroid = centroid.data();
          p.spread2 = spread2.data();
          const double estimate = kde_prune_groups_local_share(&p, &g);
          p.centroid = p.spread2 = nullptr;
          /* an estimate from above that tells N(0, I) data (sd 5
           * bandwidths) from clusters, for the kernels with tails */
          const bool tails = kernel != KDE_EPANECHNIKOV;
          const bool misjudged = estimate < 0.8 * exact_share ||
                                 (tails && shape == 0 && estimate < 0.3) ||
                                 (tails && shape == 1 && estimate > 0.25);
          printf("  local share: estimate %.3f, exact plans at the data %.3f%s\n", estimate,
                 exact_share, misjudged ? "   <-- FAIL" : "");
          const bool fail = unsound > 0 || misjudged;
          printf("plan pays: kernel %d d=%d %-9s tol=%.0e: %zu boxes, plan visited >= 90%% for %d, "
                 "proven for %d, unsound %d%s\n",
                 kernel, d, shapes[shape], tol, boxes.size(), dropped, proven, unsound,
                 fail ? "   <-- FAIL" : "");
          failures += fail;
          kde_prune_groups_free(&g);
        }
  return failures > 0;
}
