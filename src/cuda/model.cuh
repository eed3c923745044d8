/*
 * model.cuh: the model on the host and its replicas on the devices
 * (storage layout, device buffers, streams), shared by model.cu (its
 * lifetime), pack.cu (the training packers) and evaluate*.cu.
 */
#ifndef KDEGPU_CUDA_MODEL_CUH
#define KDEGPU_CUDA_MODEL_CUH

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#include "kde_cuda.h"
#include "prune.h"
#include "tuning.cuh"
#include "unit_spread.h"

/* A device allocation that evaluations reuse while it is large enough. */
typedef struct {
  void *ptr;
  size_t bytes;
} kde_buffer;

typedef struct {
  int device;
  int multiprocessors;
  size_t smem_optin;      /* max dynamic shared memory per block */
  double budget;          /* bytes this model and its evaluations may use */
  void *train;            /* resident replica (NULL when streaming) */
  cudaStream_t stream;    /* packing and kernels */
  cudaStream_t upload;    /* raw query uploads, ahead of the kernels */
  cudaEvent_t raw_ready;  /* upload -> stream: the raw batch has arrived */
  cudaEvent_t raw_free;   /* stream -> upload: the raw batch is packed */
  double *model_center;   /* dim: the model's centre, on this device */
  double *whitening;      /* dim + dim x dim: center, transform (lazily) */
  int whitening_serial;   /* model->whitening_serial uploaded here */
  /* Pruning on this device (plan.cu): the units' boxes and log weights,
   * the model's unit_lo, unit_hi, unit_log_weight, unit_log_rest, then
   * for an adaptive model unit_scale_lo, unit_scale_hi, for any other
   * unit_centroid, unit_spread2, in one allocation (NULL when the model
   * visits every unit). */
  double *units;
  /* the model's device_groups on this device, for the grouped plan
   * (plan_grouped_kernels.cuh): n_groups x dim boxes' lo, hi, then the
   * groups' log total and log rest weights (NULL where units is) */
  double *groups;
  /* an anchored model's anchors (T: hi, lo per coordinate), one per run of
   * kAnchorPoints positions; NULL otherwise */
  void *anchor;
  /* The derivative sums' plain copy of a tensor-core model's training set
   * (derivatives.cu), made by the first such call and kept: packing it on
   * the host took a tenth of a gradient's time at n = 1e6. Its bytes
   * have left `budget`. aux in the expanded form or not, as deriv_expanded
   * says: it serves later calls of that form. */
  void *deriv_train;
  int deriv_expanded;
  /* The engines' own copies of the training points in double (keep_arrays):
   * the CDF's (cdf.cu: coordinates, weights, an adaptive fit's factors) and
   * the sampler's (sample.cu: coordinates, cumulative weights, factors). */
  double *cdf_points, *sample_points;
  /* Scratch of evaluations: raw query batch, packed queries, partial
   * states of the splits, accumulated states (max, sum, |q|^2 / 2), a
   * training shard when streaming, and a batch's pruning plan (the units
   * each query block visits, and where each block's list starts); for a
   * plan made on the device, the query blocks' boxes, the decisions (a bit
   * per unit and block), the counts, CUB's scan scratch and, for a plan
   * made in chunks, the chunks' partial sums; for its per-query
   * refinement (plan_refine.cu), what each block's plan skipped and each
   * query's remaining budget and first skipped bucket; the refined lists'
   * groups (a bit per group of 32 queries that needs the unit). */
  kde_buffer raw, query, part, acc, shard, visit, visit_offset, visit_groups;
  kde_buffer plan_box, plan_mask, plan_count, plan_temp, plan_part;
  kde_buffer plan_skipped, plan_query;
} kde_replica;

struct kde_cuda_model {
  int kernel;
  int precision;
  int64_t n_train;
  int64_t dim;
  int64_t n_points;     /* n_train padded to a multiple of kUnit, or the
                           spread layout's positions */
  size_t elem;          /* sizeof(T) */
  double *center;       /* dim: training mean, subtracted from both sets */
  double scale;         /* then coordinates are multiplied by this */
  double expanded_rounding; /* the Gaussian's expanded form's predicted
                               rounding of a density (model.cu); NaN for
                               other kernels and adaptive models */
  int rounding_ok;      /* the expanded form rounds within the bound the
                           model was made for (kde_cuda_model_create) */
  int expanded;         /* Gaussian, d >= 3, rounding_ok: the density's
                           storage aux = log2 w - |x|^2 / 2 */
  /* The plain layout for d <= 4 in the difference form stores each point
   * relative to the anchor of its run of kAnchorPoints (the centre of the
   * run's box), and the kernels form q - anchor per run (a warp's quarter of
   * a unit) from the query's hi and lo parts, so
   * that a pair's difference keeps the precision's relative accuracy
   * wherever the data sit (pack.cu). */
  int anchored;
  /* An anchored single model: a warp's quarter of a tile within this
   * squared radius of its anchor takes the expanded form (kTightRadius2;
   * 0: never), where the kernel has that path (the Gaussian, a fixed
   * bandwidth, d = 3: kernel_small.cuh) */
  float tight_radius2;
  /* An anchored double model of data far from their centre: what its
   * points' whitening lost (kde_training_set's residual: n_train x dim
   * floats in the caller's order, added when packing), kept for the
   * training points as queries, which come in the memory the model was
   * made from (kde_cuda_log_density), and the queries' lo parts
   * (kde_query_set's query_lo, query_lo_rows()) read. NULL: neither (a
   * query on a training point must land on it, and the points lack it). */
  float *residual;
  const double *made_from;
  /* An anchored model whose runs of kUnit points were not all compact:
   * its layout (unit_spread.h; n_positions = n_points, point i at
   * spread.position_of[i]), in which leave-one-out runs (spread.cu).
   * n_positions 0: point i at position i. */
  kde_unit_spread spread;
  int adaptive;         /* per-point scales: a row of 1 / lambda^2 after aux
                           (kernel_adaptive.cu), the plain layout only */
  /* Mixed data (kde_training_set's discrete columns; kernel_discrete.cu):
   * n_discrete code rows after aux in the plain layout's tiles, each
   * column's factors in log2 units, and the skipping's lower-bound factor
   * (natural log). 0 columns otherwise. */
  int n_discrete;
  double mismatch[kdegpu::kMaxDiscrete], per_level[kdegpu::kMaxDiscrete];
  double log_lower_factor;
  int layout;           /* enum kde_layout */
  int k16;              /* KDE_LAYOUT_TC_WIDE: ceil(dim / 16) */
  int64_t tile_elems;   /* values per 32-point storage tile */
  int64_t query_elems;  /* values per query row on the device */
  int64_t code_row;     /* the first of them that holds a discrete code */
  int resident;         /* whole training set on every device */
  void *host_train;     /* packed copy, kept when streaming */
  double *whitening;    /* host copy of the last queries' whitening */
  /* Pruning (the small-d FMA and tensor-core kernels, on a spatially
   * ordered training set; prune.c): per unit of kUnit points, its box in
   * the training set's coordinates (unit_lo, unit_hi: n_units x dim,
   * unit-major) and its log weights (unit_log_weight, unit_log_rest); all
   * NULL when the model visits every unit. */
  double *unit_lo, *unit_hi, *unit_log_weight, *unit_log_rest;
  /* an adaptive model's units' smallest and largest 1 / lambda^2 (NULL
   * otherwise), for prune.h's kde_prune_scale */
  double *unit_scale_lo, *unit_scale_hi;
  /* a fixed-bandwidth model's units' weighted centroids (n_units x dim)
   * and mean squared distances from them (NULL otherwise), for prune.h's
   * kde_prune_log_lower_query */
  double *unit_centroid, *unit_spread2;
  /* groups of units (prune.h), for the test of whether a few queries'
   * plan can pay (plan_gate.cu); empty when the model visits every unit */
  kde_prune_groups unit_groups;
  /* their estimate of the share of the units a query keeps at
   * local_share_tolerance (plan_gate.cu's plan_worth_making), once made */
  double local_share, local_share_tolerance;
  int local_share_made;
  int whitening_serial; /* bumped when it changes; 0: none yet */
  int n_devices;
  kde_replica *rep;
  /* the device plan's groups of units (plan.cuh's plan_group_tiles: finer
   * than unit_groups at large n), on each replica (groups); empty where
   * unit_groups is */
  kde_prune_groups device_groups;
};

namespace kdegpu {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* The rows of a query batch that hold its lo parts (model.cuh's residual),
 * after the coordinates and codes. */
inline int64_t query_lo_rows(const kde_cuda_model *model)
{
  return model->residual != NULL ? model->dim : 0;
}

/* Device bytes per training point (a 32-point storage tile / 32). */
inline size_t point_bytes(const kde_cuda_model *model)
{
  return (size_t) model->tile_elems * model->elem / kTileWidth;
}

/* Device buffers (model.cu). */
void buffer_release(kde_buffer *buffer);
int buffer_reserve(kde_buffer *buffer, size_t bytes, kde_status *status);
/* Copies `bytes` of host memory to the replica's device memory that its
 * kernels read, ordered on rep->stream (model.cu). Never a plain
 * cudaMemcpy there: from pageable memory it may return before the data
 * have landed, and the replicas' non-blocking streams do not wait for the
 * legacy stream's copy. */
int copy_to_replica(kde_replica *rep, void *dst, const void *src, size_t bytes,
                    kde_status *status);
size_t scratch_bytes(const kde_replica *rep);

/* Host arrays that an engine outside the density's storage (the CDF, the
 * sampler) keeps on a replica, one after another at *slot: made on the
 * first call while their bytes are at most a quarter of the replica's
 * budget, which they then leave; freed with the model. 1: *slot holds
 * them; 0: too large to keep (the caller uploads or streams them per
 * call); -1: a CUDA error in `status`. The replica's device is current. */
struct host_array {
  const double *data;
  int64_t count;
};
int keep_arrays(kde_replica *rep, double **slot, const host_array *parts, int n_parts,
                kde_status *status);
/* The bytes of host arrays as doubles; and copy_to_replica of them, one
 * after another, into device memory from dst. */
size_t host_arrays_bytes(const host_array *parts, int n_parts);
int copy_parts_to_replica(kde_replica *rep, void *dst, const host_array *parts, int n_parts,
                          kde_status *status);

/* One device's share of an engine's rows (the CDF's queries, the
 * sampler's draws): rows [first, first + n), `done` of them finished,
 * `batch` at a time. Shares are contiguous, one per replica, so that a
 * row's result does not depend on which device computes it. */
struct device_share {
  kde_replica *rep;
  int64_t first, n, done, batch;
};
/* `total` rows in one share per replica of `model` (shares: n_devices). */
void split_rows(kde_cuda_model *model, int64_t total, device_share *shares);
/* The rows of a share's next batch (0 when it is finished). */
inline int64_t next_rows(const device_share &s)
{
  return s.n - s.done < s.batch ? s.n - s.done : s.batch;
}
/* Waits for the batch each share has in flight on its replica's stream and
 * counts it done; the rows finished, or -1 (a CUDA error in `status`). */
int64_t finish_round(device_share *shares, int n_shares, kde_status *status);
void scratch_release(kde_replica *rep);

/* The queries' whitening on a replica's device, uploaded when it differs
 * from what is there (model.cu). */
int sync_whitening(kde_cuda_model *model, const kde_query_set *query, kde_replica *rep,
                   kde_status *status);

/* The training set in each storage layout (pack.cu). */
int train_fits_f16(const kde_training_set *train, const kde_cuda_model *model);
double train_max_norm2(const kde_training_set *train, const kde_cuda_model *model);
int pack_train_tc_wide(const kde_training_set *train, const kde_cuda_model *model,
                       uint32_t *dst);
void pack_train_tc_small(const kde_training_set *train, const kde_cuda_model *model,
                         uint32_t *dst);
/* anchors: an anchored model's (point_anchors), or NULL */
template <typename T>
void pack_train(const kde_training_set *train, const kde_cuda_model *model, const T *anchors,
                T *dst);
/* An anchored model's anchors: the boxes of its runs of kAnchorPoints
 * positions (n_points / kAnchorPoints x dim each), then their centres */
void anchor_boxes(const kde_training_set *train, const kde_cuda_model *model, double *lo,
                  double *hi);
template <typename T>
void point_anchors(const kde_cuda_model *model, const double *lo, const double *hi, T *dst);

} // namespace kdegpu

#endif /* KDEGPU_CUDA_MODEL_CUH */
