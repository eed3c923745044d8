/*
 * plan.cuh: the pruning plan made on the device (plan.cu) and the queries'
 * spatial order made there (order.cu), shared with evaluate.cu and
 * evaluate_step.cu.
 *
 * The decision is prune.c's (kde_tiles_to_visit, the one statement of the
 * proof), made per query block by one CUDA block in double precision; what
 * it decides goes to the kernels as today's host plan did: the units each
 * block of kBlockQueries queries visits, ascending (visit, visit_offset in
 * kde_args; block_visits in accumulate.cuh).
 */
#ifndef KDEGPU_CUDA_PLAN_CUH
#define KDEGPU_CUDA_PLAN_CUH

#include <cuda_runtime.h>

#include <stdint.h>

#include "kde_cuda.h"
#include "kde_limits.h"
#include "model.cuh"
#include "prune.h"
#include "tuning.cuh"

namespace kdegpu {

/* The device plan serves query blocks of up to this many dimensions (the
 * model keeps unit boxes for d <= 4 only; a box lives in shared memory). */
constexpr int kPlanMaxDim = KDE_CUDA_PLAN_MAX_DIM;
/* Threads of the planning kernels: one block per query block, the units in
 * block-stride. 8 warps: enough to hide the double-precision latency of a
 * box pair without starving the small grids of a short batch. */
constexpr int kPlanThreads = 256;
/* A batch of few query blocks is planned in chunks of units, no more
 * chunks than one per this many mask words (32 units each: one
 * block-stride of kPlanThreads, so that a thread's units are not a chain
 * of double-precision latencies), in about this many CUDA blocks in all:
 * enough to fill an H100 or H200 (132 SMs). 8 words: the plan of one query
 * block against 1e7 points took 78 us in 39 chunks of 32 words, about 8%
 * of the full sum of its 128 queries (H200). */
constexpr int64_t kPlanChunkWords = 8;
constexpr int64_t kPlanFillBlocks = 1024;
/* A unit is skipped only where its key (its bound's log relative to the
 * budget) is past its bucket's edge by this: the decisions compute the
 * key again after the bucket sums, in other code that may round it
 * otherwise. Keeping a unit is always safe. */
constexpr double kKeySlack = 1e-6;
/* A batch's plan that visits at least this share of its units is dropped:
 * the plain sweep costs less than the lists. */
constexpr double kPlanDropShare = 0.9;
/* Refining a plan per query (plan_refine) costs a tenth to a fifth of the
 * full sum where the boxes keep nearly every unit and the queries are few
 * (100 queries against 1e7 points, H200: +13%, the union of their own needs
 * still nearly every unit), and pays from about 1000 queries (0.34 of the
 * units kept). A batch of fewer query blocks whose boxes keep nearly every
 * unit sweeps them unrefined. */
constexpr int64_t kRefineMinBlocks = 8;

/* The device plan's groups of units (plan_grouped_kernels.cuh): the host's
 * (kde_prune_groups_make: 256 groups) up to 256 x kPlanGroupTiles units;
 * beyond that, groups of at least kPlanGroupTiles units, kPlanMaxGroups of
 * them at most (954 units each at n = 5e8). A query block looks into the
 * groups near it unit by unit, whole: at n = 5e8 the host's groups (7,600
 * units, about 7 bandwidths wide at the data's centre) cost the count 2.11
 * s of a 1e7-query evaluation, these 1.22 s (H200). */
constexpr int64_t kPlanGroupTiles = 256;
/* A batch of this many query blocks takes the grouped plan (one CUDA block
 * each) rather than the chunks' sweep of every unit: at n = 1e8, 2e6
 * queries (977 blocks a batch), the plan's count 160 -> 88 ms, the
 * evaluation 1.79 -> 1.71 s (H200); at 270 blocks it took a tenth longer. */
constexpr int64_t kPlanGroupedMinBlocks = 512;
constexpr int64_t kPlanMaxGroups = 2048;
inline int64_t plan_group_tiles(int64_t n_units)
{
  const int64_t host = kde_prune_test_group_tiles(n_units);
  int64_t tiles = (n_units + kPlanMaxGroups - 1) / kPlanMaxGroups;
  if (tiles < kPlanGroupTiles) tiles = kPlanGroupTiles;
  return tiles < host ? tiles : host;
}

/* The groups (bit g: rows 32 g ..) whose mask words, one per group, have
 * bit `bit` set. */
__host__ __device__ inline unsigned groups_of_bit(const uint32_t *group_words, int bit)
{
  unsigned need = 0u;
  for (int g = 0; g < kQueryGroups; g++) need |= (group_words[g] >> bit & 1u) << g;
  return need;
}

/* The groups of a query block that need unit t, from the block's
 * kQueryGroups mask rows (plan_refine: a row per group). */
__host__ __device__ inline unsigned unit_groups(const uint32_t *rows, int64_t words, int64_t t)
{
  uint32_t group_words[kQueryGroups];
  for (int g = 0; g < kQueryGroups; g++) group_words[g] = rows[g * words + t / 32];
  return groups_of_bit(group_words, (int) (t % 32));
}

/* Query rows in group g of a block with block_rows rows (the last block of
 * a batch may be short). */
__host__ __device__ inline int64_t group_rows_in(int64_t block_rows, int g)
{
  const int64_t r = block_rows - kGroupRows * g;
  return r < 0 ? 0 : r > kGroupRows ? kGroupRows : r;
}

/* How a query block decides: compact support, every unit, or the bounds;
 * the same on the host and in every kernel. */
enum { kDecideSupport = 0, kDecideAll = 1, kDecideBounds = 2 };

/* Device bytes per query that a plan made on the device takes at most (a
 * batch's budget reserves them): per query block its lists with every
 * unit listed (the box plan's, before the refinement narrows them), their
 * groups and offset, the decisions' bits (a row per group) and the block's
 * box; per query the refinement's state. */
inline double device_plan_bytes_per_query(int64_t n_units, int64_t dim)
{
  const double units = (double) n_units;
  return (units * (sizeof(int32_t) + sizeof(uint8_t)) + sizeof(int64_t) +
          units * kQueryGroups / 8 +
          (double) (2 * dim + 2) * sizeof(double)) / kBlockQueries +
         sizeof(double) + sizeof(int32_t);
}

/* The log-sum-exp of the states of each WIDTH aligned lanes (the whole warp
 * by default), merged by xor-butterfly, known to each of them: the same
 * bits on every lane, as kde_lse_merge(a, b) and (b, a) are the same. */
template <int WIDTH = 32> __device__ __forceinline__ kde_lse warp_lse(kde_lse s)
{
  static_assert(WIDTH >= 1 && WIDTH <= 32 && (WIDTH & (WIDTH - 1)) == 0, "lanes by powers of 2");
  for (int o = WIDTH / 2; o > 0; o >>= 1) {
    kde_lse other;
    other.max = __shfl_xor_sync(0xffffffffu, s.max, o);
    other.sum = __shfl_xor_sync(0xffffffffu, s.sum, o);
    s = kde_lse_merge(s, other);
  }
  return s;
}
__host__ __device__ inline int plan_decision(const kde_prune_plan &p)
{
  return kde_kernel_is_compact(p.kernel) ? kDecideSupport
         : p.tolerance > 0               ? kDecideBounds
                                         : kDecideAll;
}

/* The units' groups on a device (the model's device_groups: n_groups <=
 * kPlanMaxGroups), NULL lo where the model has none. */
struct plan_groups {
  int64_t n_groups, group_tiles;
  const double *lo, *hi;       /* n_groups x dim, group-major */
  const double *log_weight_sum, *log_rest_sum;
};

/* Whether a plan may take the groups (kde_tiles_to_visit_grouped's rule). */
__host__ __device__ inline bool plan_groups_apply(const kde_prune_plan &p, const plan_groups &g)
{
  return g.lo != NULL && g.n_groups >= 1 && g.n_groups <= kPlanMaxGroups &&
         2 * g.n_groups <= p.n_tiles && p.inv_scale2_lo == NULL &&
         !(p.leave_one_out && g.log_rest_sum == NULL) && p.derivative == KDE_PRUNE_DENSITY &&
         plan_decision(p) != kDecideAll;
}

/* The decision's inputs on one replica (prune.c's kde_prune_plan, its
 * arrays on that device; uploaded with the model). */
kde_prune_plan device_prune_plan(const kde_cuda_model *model, const kde_replica *rep,
                                 double tolerance, int leave_one_out);

/* The box of each block of kBlockQueries rows of z (rows [0, rows), column
 * k at z + k * ldz, double): box[b * 2 * dim + k] the low and box[b * 2 *
 * dim + dim + k] the high corner, as kde_rows_box computes them. */
int plan_block_boxes(const double *z, int64_t ldz, int64_t rows, int dim, double *box,
                     cudaStream_t stream, kde_status *status);

/* What planning one batch found. */
typedef struct {
  int64_t blocks;     /* query blocks */
  int64_t total;      /* units visited, all blocks together */
  int64_t last_count; /* units visited by the last block */
  int64_t group_rows; /* refined: the query rows the small-d kernel
                         evaluates the lists' units for (those of the
                         groups that need them), all units together */
} plan_counts;

/* The plan of `blocks` query blocks with boxes `box` (device) on rep's
 * stream: each block's decision (its visited units as a bit mask in
 * rep->plan_mask) and the exclusive scan of their counts in
 * rep->visit_offset[0..blocks]; returns, through `counts`, the total read
 * back (one small synchronising copy), so the caller can reserve the lists
 * or decide to sweep. Many blocks of a density's plan take the model's
 * groups of units first (plan_grouped_kernels.cuh). */
int plan_count(const kde_cuda_model *model, const kde_prune_plan *plan, const double *box,
               int64_t blocks, kde_replica *rep, plan_counts *counts, kde_status *status);

/* The model's groups of units on rep's device (none: lo NULL). */
plan_groups replica_groups(const kde_cuda_model *model, const kde_replica *rep);

/* 1 with the status set where the plan's dimension is past what the
 * device plan serves (kPlanMaxDim), else 0. */
int plan_dim_unserved(const kde_prune_plan *plan, kde_status *status);

/* rep's buffers for the counts of `blocks` query blocks, their scan and
 * what each skipped (a mask is the caller's). */
int plan_reserve_counts(int64_t blocks, kde_replica *rep, kde_status *status);

/* plan_count's grouped plan of `blocks` query blocks with boxes `box`
 * (plan_grouped.cu), its buffers reserved. */
int plan_grouped_boxes(const plan_groups &groups, const kde_prune_plan *plan,
                       const double *box, int64_t blocks, kde_replica *rep, kde_status *status);

/* The plan of a batch of fewer than kPlanQueryMaxBlocks query blocks made
 * query by query from the units' groups (plan_grouped.cu; prune.c's
 * "per-query plans"), where plan_groups_apply allows: each query's own
 * grouped plan ORed into its group's mask row (plan_refine's layout),
 * each block's kept units and the rows that evaluate them counted and
 * scanned into rep->visit_offset and `counts` (with counts->group_rows).
 * No box plan before it; plan_fill then writes the lists. The queries:
 * rows [0, rows) of z as for plan_refine. A few queries' boxes keep nearly
 * every unit where their own plans keep a few: at n = 1e8, 1,000 queries
 * refined from their blocks' boxes took 21 ms of plan for 6 ms of kernels
 * (H200). */
constexpr int64_t kPlanQueryMaxBlocks = 256;
/* ... where the groups hold kPlanGroupTiles units or more (fits of more
 * than 16.7M points); where they hold kPlanQueryMinGroupTiles to
 * kPlanGroupTiles, for fewer than kPlanQuerySmallGroupBlocks blocks, and
 * for one block only if it is one row of kGroupRows queries. A per-query
 * plan costs the units of the groups near each query, a row evaluates
 * the union of its queries' (n = 1e7, 153 units a group, d = 3, single,
 * H200, against the box plan or none: 10 queries 0.87x the full sum's
 * time against 1.13x, 100 1.13x against 1.16x, 1,000 0.60x against
 * 0.83x, 1e4 0.33x against 0.37x, 3e4 0.23x either way and 0.27x planned
 * per query; n = 6e6, 92 units a group: 10 queries 1.04x against 1.13x,
 * but 100 1.33x against 1.17x; at 31 units a group they did not pay). */
constexpr int64_t kPlanQueryMinGroupTiles = 64;
constexpr int64_t kPlanQuerySmallGroupBlocks = 128;
inline bool plan_query_applies(int64_t rows, int64_t group_tiles)
{
  const int64_t blocks = (rows + kBlockQueries - 1) / kBlockQueries;
  if (group_tiles >= kPlanGroupTiles) return blocks < kPlanQueryMaxBlocks;
  return group_tiles >= kPlanQueryMinGroupTiles && blocks < kPlanQuerySmallGroupBlocks &&
         (blocks > 1 || rows <= kGroupRows);
}
/* The warps of a query's CUDA block: a query's plan is a chain of
 * double-precision latencies, so where the queries are few, each takes
 * more of an SM's warps (n = 1e7, the 153-unit groups, H200: 10 queries
 * 1.11x the full sum's time with 8 warps, 0.69x with 32; 1,000 queries
 * 0.60x, 0.54x with 16, 0.57x with 32; 1e4 queries 0.31x, 0.36x with 32).
 * From the rows alone (about two and eight a multiprocessor of an H100 or
 * H200), as the warps set the plan's order of sums: the same plan on every
 * device. */
inline int plan_query_warps(int64_t rows)
{
  if (rows <= 256) return 32;
  return rows <= 1024 ? 16 : 8;
}
int plan_query(const plan_groups &groups, const kde_prune_plan *plan, const double *z,
               int64_t ldz, int64_t rows, kde_replica *rep, plan_counts *counts,
               kde_status *status);

/* The exclusive scan of the blocks' counts in rep->plan_count into
 * rep->visit_offset, and the total read back into `counts` (a synchronising
 * copy). */
int plan_scan_counts(int64_t blocks, kde_replica *rep, plan_counts *counts, kde_status *status);
/* The same after reading back the rows that evaluate the groups' units
 * (plan_count[blocks + 1], added there by the count kernels of plan_refine
 * and plan_query) into counts->group_rows. */
int plan_scan_group_counts(int64_t blocks, kde_replica *rep, plan_counts *counts,
                           kde_status *status);

/* Each block's list narrowed to the units its queries need, each query
 * from its own distances (plan_refine.cu; prune.c's per-query
 * refinement): from the lists plan_fill left in rep->visit and what each
 * block skipped (rep->plan_skipped), the new decisions into rep->plan_mask
 * (kQueryGroups rows per block, one per group of 32 queries), their counts
 * scanned into rep->visit_offset and `counts` (with counts->group_rows);
 * plan_fill then writes the narrowed lists. The queries: rows [0, rows) of
 * z (whitened, double, column k at z + k * ldz, on rep's device). */
int plan_refine(const kde_prune_plan *plan, const double *z, int64_t ldz, int64_t rows,
                kde_replica *rep, plan_counts *counts, kde_status *status);

/* The lists themselves, rep->visit[visit_offset[b] ..) for each block b,
 * ascending, from the mask plan_count (mask_rows 1) or plan_refine
 * (kQueryGroups: their OR) left (rep->visit holds counts->total units);
 * with `groups`, the groups that need each unit in rep->visit_groups. */
int plan_fill(const kde_prune_plan *plan, const plan_counts *counts, int mask_rows, int groups,
              kde_replica *rep, kde_status *status);

/* A batch's plan, for its device's kernels. */
typedef struct {
  int visiting; /* 1: the lists are in rep->visit and rep->visit_offset; 0:
                   the batch sweeps every unit (a plan that would visit
                   nearly all of them is not used) */
  double pairs; /* the pairs its lists evaluate, when visiting */
  double units_per_block; /* the lists' mean length within the job's units */
  int groups;   /* the lists' groups are in rep->visit_groups */
} batch_plan;

/* The plan of the n_batch queries whose boxes plan_block_boxes left in
 * rep->plan_box, made on rep's device for the decision's inputs of
 * host_plan (tolerance, leave one out) against that device's units, and
 * refined per query (plan_refine) from the queries themselves (z, ldz as
 * there). The job covers job_units of the model's units. query_groups: the
 * kernel evaluates a unit only for the groups of 32 queries that need it
 * (kde_small_kernel; the pairs are counted so). */
int plan_batch_device(const kde_cuda_model *model, kde_replica *rep,
                      const kde_prune_plan *host_plan, const double *z, int64_t ldz,
                      int64_t n_batch, int64_t job_units, int query_groups, batch_plan *out,
                      kde_status *status);

/* The same made on the host (prune.c, kde_plan_query_blocks) for rows
 * [first, first + n_batch) of the ordered whitened queries (host, n_query x
 * dim), uploaded to rep's device (KDEGPU_DEVICE_PLAN=0). */
int plan_batch_host(const kde_prune_plan *plan, const double *queries, int64_t n_query,
                    int threads, int64_t first, int64_t n_batch, int64_t job_units,
                    kde_replica *rep, batch_plan *out, kde_status *status);

/* The queries in a spatial order, made on rep's device: the raw queries
 * uploaded, whitened there (with rep->whitening when the query set has a
 * transform), Hilbert-ordered over their bounding box (CUB radix sort) unless
 * they leave one out (the training set's k-d order already is one). On
 * success *sorted is a device array (m x dim, column-major, the caller
 * cudaFrees it; where the model reads the queries' lo parts, query_lo_rows,
 * m x 2 dim: theirs in the columns after z's) and order[0..m) (host; NULL
 * when leaving one out) the caller's row of each ordered one. Returns 1 when done, 0 when it would
 * take more than `bytes_allowed` of the device (nothing allocated then: the
 * caller orders on the host), -1 on failure. */
int order_queries(const kde_cuda_model *model, const kde_query_set *query,
                  kde_replica *rep, double bytes_allowed, double **sorted,
                  int64_t *order, kde_status *status);

/* The queries of a pruned evaluation, whitened and in a spatial order. */
typedef struct {
  const double *z;        /* ordered, whitened: n_query x dim, on the host or
                             on the first device (on_device) */
  const double *z_lo;     /* their lo parts (kde_query_set's query_lo) in the
                             same order, n_query x dim with stride n_query
                             (after z's columns where ordered on the device,
                             else a block of their own), where the model
                             reads them (query_lo_rows), else NULL */
  int64_t *order;         /* the caller's row of each; NULL leaving one out */
  const double *codes;    /* mixed data: their codes in that order, on the
                             host (n_query x n_discrete), else NULL */
  double *host_sorted, *host_whitened, *on_device; /* what z points into */
  double *host_codes;     /* what codes points into when reordered */
  double reserved;        /* device bytes on_device holds, on reserved_on */
  const kde_replica *reserved_on;
} ordered_queries;

/* Orders an evaluation's queries: with on_device, on the first device
 * (order_queries), kept there (other devices copy their batches from it,
 * device to device); otherwise, for at most kHostOrderMaxQueries, or when the
 * device lacks the room, on the host (kde_whiten, kde_kd_sort, as the CPU
 * backend).
 * Returns 0, or -1 with the status set and nothing left allocated. */
int order_evaluation_queries(kde_cuda_model *model, const kde_query_set *query,
                             int on_device, ordered_queries *oq, kde_status *status);
void ordered_queries_free(const kde_cuda_model *model, ordered_queries *oq);

/* Whether a plan can pay (plan_gate.cu), asked in this order by
 * log_density_run: plan_worth_making, from the pairs (and the fit's groups'
 * estimate of a query's share); for one query block (at most kBlockQueries
 * queries, not leaving one out) one_block_plan_can_pay, before they are
 * ordered; for more, plan_can_pay on the ordered queries z (m rows, on the
 * host unless on_device). host_prune_plan: the decisions' inputs from the
 * model's units. */
kde_prune_plan host_prune_plan(const kde_cuda_model *model, double tolerance, int leave_one_out);
int plan_worth_making(kde_cuda_model *model, const kde_query_set *query);
int one_block_plan_can_pay(const kde_cuda_model *model, const kde_query_set *query);
int plan_can_pay(const kde_cuda_model *model, const kde_prune_plan *plan, const double *z,
                 int on_device, int64_t m);

} // namespace kdegpu

#endif /* KDEGPU_CUDA_PLAN_CUH */
