/*
 * derivatives.cu: the kernel-derivative sums of a CUDA fit (the contract:
 * ../derivatives.h; the kernels: derivatives.cuh) on every device of its
 * model: where the training points come from, the queries' spatial order
 * and each batch's pruning plan (order.cu, plan.cu), batches
 * and training shards under each device's memory budget, the merge of the
 * splits' states in double, and the results back in the caller's order.
 *
 * Devices: each takes the next batch of queries when it has none in
 * flight. Batches, shards and splits have one size on every device (the
 * smallest device's), so a query's sums are the same bits whichever
 * device computes them, and the same as on one device of that size.
 *
 * Adaptive fits never come here (R refuses their derivatives, and
 * kde_cuda_derivative_sums checks): their plain layout has a row of
 * 1 / lambda^2 per tile that these kernels do not read.
 *
 * Training points: the kernels read the fit's own device copy when it is
 * in the plain layout and resident (every fit but the tensor-core ones,
 * the single-precision Gaussian at d = 3 and d >= 16 in the expanded form,
 * whose layouts hold fp16 or bfloat16 pieces, and fits too large for the
 * budget); otherwise a plain
 * copy packed on the host from the fit's points (the same order and units)
 * is uploaded, or streamed in shards. A tensor-core model keeps its upload
 * for later calls (rep->deriv_train) when it takes at most a quarter of
 * the budget.
 *
 * Pruning (d <= 4 on a spatially ordered fit, as the density): the
 * queries in the density's spatial order (order.cu), each batch's plan by
 * the density's device plan (plan.cu) with the derivative sums' bounds
 * (prune.c states them): compact kernels skip exactly the units beyond the
 * support; the Gaussian and exponential skip units whose bounds, times
 * what bounds their pairs' derivative terms, add up to at most `tolerance`
 * times a lower bound of s0, so every sum is within that of the full one.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <thread>

#include "kdegpu/kernels.h"
#include "derivatives.h"
#include "kde_cuda.h"
#include "kde_cuda_common.h"
#include "derivatives.cuh"
#include "spatial.h"
#include "layout.cuh"
#include "model.cuh"
#include "numeric.cuh"
#include "plan.cuh"
#include "prune.h"
#include "tuning.cuh"

using namespace kdegpu;

namespace {

/* Work per batch (pairs times deriv_pair_cost): about 0.1 to 0.5 s on an
 * H100, so that the interrupt poll and the progress bar run that often. */
constexpr double kDerivWorkPerBatch = 3e12;
/* One batch's states on the host, at most. */
constexpr double kStagingBytes = 64.0 * 1024 * 1024;
constexpr int kMergeThreads = 256;

/* Operations per pair, for the size of a batch. */
double deriv_pair_cost(int64_t d, bool second, bool is_double)
{
  const double c = 3.0 * (double) d + 10 + (second ? (double) (d * (d + 1)) : 0.0);
  return is_double ? 4 * c : c;
}

/* Everything one call holds; deriv_free releases it. */
/* One device's part of a call: its training points, buffers and the batch
 * it has in flight. */
template <typename T> struct deriv_device {
  kde_replica *rep;
  const T *dev_train; /* the whole training set on this device, or NULL (shards) */
  const T *anchor;    /* the model's anchors when its copy serves (model.cuh) */
  T *own_dev, *shard;
  int64_t shard_units, ldq_max, split_cap; /* what its memory allows (deriv_size) */
  bool direct;        /* reads the ordered queries where they are (on its replica) */
  double *d_query, *d_acc, *staging;
  T *d_part;
  int64_t first, rows; /* the batch in flight; rows 0: none */
};

/* Everything one call holds; deriv_free releases it. */
template <typename T> struct deriv_run {
  kde_cuda_model *model;
  const kde_derivative_problem *p;
  bool second;
  int fields;
  deriv_kernel_fn<T> fn;
  size_t smem;
  int64_t n_units;
  /* the training points in the plain layout on the host (the model's, or
   * own_host packed here) for devices that do not hold them */
  const T *host_train;
  int expanded;
  T *own_host;
  double *weight;
  /* queries: ordered (pruning) or as given */
  int prune;
  ordered_queries oq;
  kde_prune_plan plan; /* the decision's tolerance and sums (prune.h) */
  /* One value of each for every device (the smallest of theirs), so that a
   * batch's splits, shards and rows, and so its sums' order, do not depend
   * on which device runs it. */
  int64_t concurrency, shard_units, ldq_max, split_cap;
  int n_dev;
  deriv_device<T> *dev;
};

template <typename T> void deriv_free(deriv_run<T> *r, int failed)
{
  for (int k = 0; r->dev != NULL && k < r->n_dev; k++) {
    deriv_device<T> *dv = &r->dev[k];
    kde_replica *rep = dv->rep;
    if (rep == NULL || cudaSetDevice(rep->device) != cudaSuccess) continue;
    /* on an error path work may still be queued on what is freed below */
    (void) cudaStreamSynchronize(rep->stream);
    if (dv->own_dev != NULL) (void) cudaFree(dv->own_dev);
    if (dv->shard != NULL) (void) cudaFree(dv->shard);
    if (dv->d_part != NULL) (void) cudaFree(dv->d_part);
    if (dv->d_acc != NULL) (void) cudaFree(dv->d_acc);
    if (dv->d_query != NULL) (void) cudaFree(dv->d_query);
    if (failed || scratch_bytes(rep) > kKeepScratchBytes) scratch_release(rep);
    free(dv->staging);
    (void) cudaGetLastError();
  }
  if (r->model != NULL) ordered_queries_free(r->model, &r->oq);
  free(r->dev);
  free(r->own_host);
  free(r->weight);
}

/* The training points' source (see the top of the file): each device's
 * own copy where the model or an earlier call left one, else the plain
 * copy packed here once for all of them. */
template <typename T> int deriv_training(deriv_run<T> *r, int threads, kde_status *status)
{
  const kde_cuda_model *model = r->model;
  const kde_derivative_problem *p = r->p;
  kde_training_set ts;
  kde_cuda_model shell;
  bool missing = false;
  if (model->layout == KDE_LAYOUT_PLAIN) {
    r->expanded = model->expanded;
    for (int k = 0; k < r->n_dev; k++) {
      r->dev[k].anchor = (const T *) r->dev[k].rep->anchor;
      if (model->resident) r->dev[k].dev_train = (const T *) r->dev[k].rep->train;
    }
    if (!model->resident) r->host_train = (const T *) model->host_train;
    return 0;
  }
  /* aux as the kernel wants it: the Gaussian's gradient up to
   * kDerivMaxFirstDim takes the expanded form where the density's rounding
   * allows it; Hessians, other kernels and the generic kernel beyond take
   * the difference form (derivatives_kernels.cuh) */
  r->expanded = p->kernel == KDE_GAUSSIAN && !r->second && model->rounding_ok &&
                p->dim <= kDerivMaxFirstDim;
  for (int k = 0; k < r->n_dev; k++) {
    /* kept from an earlier call of the same form (another form would make
     * the kernels convert aux in T: the result would depend on which call
     * came first) */
    kde_replica *rep = r->dev[k].rep;
    if (rep->deriv_train != NULL && rep->deriv_expanded == r->expanded)
      r->dev[k].dev_train = (const T *) rep->deriv_train;
    else
      missing = true;
  }
  if (!missing) return 0;
  memset(&ts, 0, sizeof ts);
  ts.kernel = p->kernel;
  ts.n_train = p->n_train;
  ts.dim = p->dim;
  ts.train = p->train;
  ts.log_weight = p->log_weight;
  ts.host_threads = threads;
  KDE_HOST_ALLOC(r->weight, p->n_train, "the weights");
  for (int64_t j = 0; j < p->n_train; j++) r->weight[j] = exp(p->log_weight[j]);
  ts.weight = r->weight;
  KDE_HOST_ALLOC(r->own_host, model->n_points * (p->dim + 1), "the training points");
  /* the model's centre and scale, the plain layout, aux as wanted */
  shell = *model;
  shell.adaptive = 0; /* never one here (kde_cuda_derivative_sums refuses them) */
  shell.layout = KDE_LAYOUT_PLAIN;
  shell.expanded = r->expanded;
  shell.tile_elems = (p->dim + 1) * kTileWidth;
  pack_train<T>(&ts, &shell, (const T *) NULL, r->own_host);
  r->host_train = r->own_host;
  return 0;
cleanup:
  return -1;
}

/* The columns of a batch of queries: their coordinates, and the lo parts
 * where the model reads them. */
template <typename T> int64_t query_columns(const deriv_run<T> *r)
{
  return r->p->dim * (r->oq.z_lo != NULL ? 2 : 1);
}

/* The queries' order and the plan's tolerance, when the fit prunes. */
template <typename T>
int deriv_order(deriv_run<T> *r, double tolerance, int threads, kde_status *status)
{
  const kde_derivative_problem *p = r->p;
  kde_query_set qs;
  const int compact = kde_kernel_is_compact(p->kernel);
  r->oq.z = p->query;
  /* what the queries' whitening lost, where the model reads it */
  r->oq.z_lo = query_lo_rows(r->model) > 0 ? p->query_residual : NULL;
  r->prune = r->model->unit_lo != NULL && p->dim <= kPlanMaxDim && (compact || tolerance > 0);
  if (!r->prune) return 0;
  memset(&qs, 0, sizeof qs);
  qs.n_query = p->n_query;
  qs.query = p->query; /* whitened already */
  qs.query_lo = r->oq.z_lo;
  qs.tolerance = tolerance;
  qs.host_threads = threads;
  if (order_evaluation_queries(r->model, &qs, 1, &r->oq, status) != 0) return -1;
  memset(&r->plan, 0, sizeof r->plan);
  r->plan.tolerance = compact ? 0.0 : tolerance;
  r->plan.derivative = r->second ? KDE_PRUNE_HESSIAN : KDE_PRUNE_GRADIENT;
  return 0;
}

/* The bytes of the smallest batch: kThreads rows at per_row bytes in half
 * the room (deriv_size gives rows half of what the training points leave)
 * and one split's partial states of them in the other half. */
template <typename T> double batch_rows_min(const deriv_run<T> *r, double per_row)
{
  return (double) kThreads * (2.0 * per_row + (double) r->fields * sizeof(T));
}

/* One device's memory: the training points (unless its model copy serves),
 * then what it allows of query batches (ldq_max) and the splits' partial
 * states (split_cap), within its budget. */
template <typename T> int deriv_size(deriv_run<T> *r, deriv_device<T> *dv, kde_status *status)
{
  const kde_cuda_model *model = r->model;
  kde_replica *rep = dv->rep;
  const int64_t d = r->p->dim, m = r->p->n_query;
  const size_t point = (size_t) (d + 1) * sizeof(T);
  const double train_bytes = (double) model->n_points * (double) point;
  const int64_t need = ceil_div(m, kThreads) * kThreads;
  double avail = rep->budget, per_row, room;
  int64_t rows;
  if (model->resident) avail -= (double) model->n_points * (double) point_bytes(model);
  dv->direct = r->oq.on_device != NULL && r->oq.reserved_on == rep;
  if (dv->direct) avail -= r->oq.reserved;
  /* per row of a batch: states, the uploaded rows, a plan's share */
  per_row = (double) r->fields * (sizeof(double) + sizeof(T)) +
            (dv->direct ? 0.0 : (double) query_columns(r) * sizeof(double));
  if (r->prune) per_row += device_plan_bytes_per_query(r->n_units, d);
  /* The training points (a copy or a shard) take half the budget, but never
   * what the smallest batch needs: kThreads rows in half of what is left,
   * one split's partial states in the other half. (Half of a small budget
   * could leave too little for a batch of Hessians at d = 4.) */
  room = 0.5 * avail;
  if (room > avail - batch_rows_min(r, per_row)) room = avail - batch_rows_min(r, per_row);
  dv->shard_units = r->n_units;
  if (dv->dev_train == NULL && train_bytes <= room) {
    /* on the device for this call; a tensor-core model's plain copy (the
     * first, when it takes at most a quarter of the budget) stays for later
     * calls, its bytes out of the budget of every later call on the model */
    const bool keep = model->layout != KDE_LAYOUT_PLAIN && rep->deriv_train == NULL &&
                      train_bytes <= 0.25 * rep->budget;
    KDE_CUDA_TRY(cudaMalloc((void **) &dv->own_dev, (size_t) train_bytes));
    KDE_CUDA_TRY(cudaMemcpyAsync(dv->own_dev, r->host_train, (size_t) train_bytes,
                                 cudaMemcpyHostToDevice, rep->stream));
    KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
    dv->dev_train = dv->own_dev;
    if (keep) { /* the model's now (model.cu frees it) */
      rep->deriv_train = dv->own_dev;
      rep->deriv_expanded = r->expanded;
      rep->budget -= train_bytes;
      dv->own_dev = NULL;
    }
    avail -= train_bytes;
  } else if (dv->dev_train == NULL) {
    dv->shard_units = room > 0 ? (int64_t) (room / ((double) kUnit * (double) point)) : 0;
    if (dv->shard_units > r->n_units) dv->shard_units = r->n_units;
    if (dv->shard_units < 1) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "the GPU memory budget (%.0f bytes) is too small for the derivative"
                     " sums; raise options(kdegpu.gpu_memory = ...)", rep->budget);
      return -1;
    }
    KDE_CUDA_TRY(cudaMalloc((void **) &dv->shard, (size_t) dv->shard_units * kUnit * point));
    avail -= (double) dv->shard_units * kUnit * (double) point;
  }
  /* half the rest for rows */
  dv->ldq_max = (int64_t) (0.5 * avail / per_row) / kThreads * kThreads;
  if (dv->ldq_max > need) dv->ldq_max = need;
  if (dv->ldq_max > kMaxBatchRows) dv->ldq_max = kMaxBatchRows;
  rows = (int64_t) (kStagingBytes / ((double) r->fields * sizeof(double))) / kThreads * kThreads;
  if (rows < kThreads) rows = kThreads;
  if (dv->ldq_max > rows) dv->ldq_max = rows;
  /* bounded work per batch, but a few full waves of blocks at least */
  rows = (int64_t) (kDerivWorkPerBatch /
                    deriv_pair_cost(d, r->second, sizeof(T) == sizeof(double)) /
                    ((double) r->n_units * kUnit));
  if (rows < 4 * r->concurrency * kThreads) rows = 4 * r->concurrency * kThreads;
  rows = rows / kThreads * kThreads;
  if (dv->ldq_max > rows) dv->ldq_max = rows;
  if (dv->ldq_max < kThreads) {
    kde_status_set(status, KDE_ERR_ALLOC,
                   "the GPU memory budget (%.0f bytes) leaves no room for a batch of %d"
                   " queries of the derivative sums; raise options(kdegpu.gpu_memory = ...)",
                   rep->budget, kThreads);
    return -1;
  }
  {
    /* as many splits as deriv_splits may ask for a full batch, within
     * the other half */
    const double cap = 0.5 * avail / ((double) dv->ldq_max * r->fields * sizeof(T));
    int64_t most = ceil_div(4 * r->concurrency, dv->ldq_max / kThreads);
    if (most > r->n_units / kMinUnitsPerSplit) most = r->n_units / kMinUnitsPerSplit;
    if (most > 65535) most = 65535;
    dv->split_cap = cap < (double) most ? (int64_t) cap : most;
    if (dv->split_cap < 1) dv->split_cap = 1;
  }
  return 0;
cleanup:
  return -1;
}

/* A device's buffers for batches of the call's common size. */
template <typename T>
int deriv_buffers(const deriv_run<T> *r, deriv_device<T> *dv, kde_status *status)
{
  const int64_t d = r->p->dim;
  KDE_CUDA_TRY(cudaMalloc((void **) &dv->d_part,
                          (size_t) (r->split_cap * r->fields * r->ldq_max) * sizeof(T)));
  KDE_CUDA_TRY(cudaMalloc((void **) &dv->d_acc,
                          (size_t) (r->fields * r->ldq_max) * sizeof(double)));
  if (!dv->direct)
    KDE_CUDA_TRY(cudaMalloc((void **) &dv->d_query,
                            (size_t) (query_columns(r) * r->ldq_max) * sizeof(double)));
  KDE_HOST_ALLOC(dv->staging, r->fields * r->ldq_max, "the derivative sums of a batch");
  return 0;
cleanup:
  return -1;
}

/* Every device's memory, then the call's common limits: the smallest
 * device's shards, rows and splits. */
template <typename T> int deriv_plan_devices(deriv_run<T> *r, kde_status *status)
{
  const int64_t need = ceil_div(r->p->n_query, kThreads) * kThreads;
  r->shard_units = r->ldq_max = r->split_cap = INT64_MAX;
  for (int k = 0; k < r->n_dev; k++) {
    deriv_device<T> *dv = &r->dev[k];
    KDE_CUDA_TRY(cudaSetDevice(dv->rep->device));
    if (deriv_size(r, dv, status) != 0) return -1;
    if (dv->shard_units < r->shard_units) r->shard_units = dv->shard_units;
    if (dv->ldq_max < r->ldq_max) r->ldq_max = dv->ldq_max;
    if (dv->split_cap < r->split_cap) r->split_cap = dv->split_cap;
  }
  { /* batches of equal size */
    const int64_t n_batches = ceil_div(need, r->ldq_max);
    r->ldq_max = ceil_div(ceil_div(need, n_batches), kThreads) * kThreads;
    if (kde_trace_file() != NULL) {
      fprintf(kde_trace_file(),
              "derivatives n_query=%lld batches=%lld rows=%lld shard_units=%lld pruned=%d\n",
              (long long) r->p->n_query, (long long) n_batches, (long long) r->ldq_max,
              (long long) r->shard_units, r->prune);
      fflush(kde_trace_file());
    }
  }
  for (int k = 0; k < r->n_dev; k++) {
    KDE_CUDA_TRY(cudaSetDevice(r->dev[k].rep->device));
    if (deriv_buffers(r, &r->dev[k], status) != 0) return -1;
  }
  return 0;
cleanup:
  return -1;
}

/* Splits of the training range for one launch (grid.y): none with enough
 * query blocks, else enough blocks for 4 waves, each split at least
 * kMinUnitsPerSplit units. */
int64_t deriv_splits(int64_t blocks_q, int64_t units, int64_t concurrency, int64_t cap)
{
  int64_t s;
  if (blocks_q >= 4 * concurrency) return 1;
  s = ceil_div(4 * concurrency, blocks_q);
  if (s > units / kMinUnitsPerSplit) s = units / kMinUnitsPerSplit;
  if (s > cap) s = cap;
  if (s < 1) s = 1;
  return ceil_div(units, ceil_div(units, s)); /* whole units, none empty */
}

/* A batch's query blocks are the plan's (plan_block_boxes, plan_refine). */
static_assert(kThreads == kBlockQueries, "derivative blocks are the plan's query blocks");

/* Queues rows [first, first + rows) of the (ordered) queries on a device:
 * plan, every shard, merge; their states end in its d_acc. */
template <typename T>
int deriv_enqueue(deriv_run<T> *r, deriv_device<T> *dv, int64_t first, int64_t rows,
                  kde_status *status)
{
  kde_replica *rep = dv->rep;
  const int64_t d = r->p->dim, m = r->p->n_query;
  const int64_t ldq = ceil_div(rows, kThreads) * kThreads, blocks_q = ldq / kThreads;
  const size_t point = (size_t) (d + 1) * sizeof(T);
  const double *qz = dv->direct ? r->oq.on_device + first : dv->d_query;
  const int64_t ldz = dv->direct ? m : r->ldq_max;
  /* the lo parts: the ordered queries' (order.cu; after z's columns on the
   * device), or in the batch's rows after its coordinates */
  const double *qz_lo = r->oq.z_lo == NULL ? NULL
                        : dv->direct      ? r->oq.z_lo + first
                                          : dv->d_query + d * r->ldq_max;
  int visiting = 0;
  KDE_CUDA_TRY(cudaSetDevice(rep->device));
  if (!dv->direct) { /* from the host, or from the device that ordered them */
    KDE_CUDA_TRY(cudaMemcpy2DAsync(dv->d_query, (size_t) r->ldq_max * sizeof(double),
                                   r->oq.z + first, (size_t) m * sizeof(double),
                                   (size_t) rows * sizeof(double), (size_t) d,
                                   cudaMemcpyDefault, rep->stream));
    if (qz_lo != NULL)
      KDE_CUDA_TRY(cudaMemcpy2DAsync(dv->d_query + d * r->ldq_max,
                                     (size_t) r->ldq_max * sizeof(double), r->oq.z_lo + first,
                                     (size_t) m * sizeof(double), (size_t) rows * sizeof(double),
                                     (size_t) d, cudaMemcpyDefault, rep->stream));
  }
  if (r->prune) {
    batch_plan bp;
    if (buffer_reserve(&rep->plan_box, (size_t) (2 * d * blocks_q) * sizeof(double), status) !=
            0 ||
        plan_block_boxes(qz, ldz, rows, (int) d, (double *) rep->plan_box.ptr, rep->stream,
                         status) != 0 ||
        plan_batch_device(r->model, rep, &r->plan, qz, ldz, rows, r->n_units, 0, &bp, status) !=
            0)
      return -1;
    visiting = bp.visiting;
  }
  for (int64_t shard_first = 0; shard_first < r->n_units; shard_first += r->shard_units) {
    const int64_t units = r->n_units - shard_first < r->shard_units ? r->n_units - shard_first
                                                                    : r->shard_units;
    const int64_t splits = deriv_splits(blocks_q, units, r->concurrency, r->split_cap);
    const int64_t offset = shard_first * kUnit * (d + 1);
    deriv_args<T> a;
    if (dv->dev_train == NULL)
      KDE_CUDA_TRY(cudaMemcpyAsync(dv->shard, r->host_train + offset,
                                   (size_t) units * kUnit * point, cudaMemcpyHostToDevice,
                                   rep->stream));
    a.train = dv->dev_train != NULL ? dv->dev_train + offset : dv->shard;
    a.n_points = units * kUnit;
    a.split_points = ceil_div(units, splits) * kUnit;
    a.train_base = shard_first * kUnit;
    a.query = qz;
    a.query_lo = qz_lo;
    a.ldz = ldz;
    a.n_query = rows;
    a.center = rep->model_center;
    a.dim = (int) d;
    a.expanded = r->expanded;
    a.anchor = dv->anchor;
    a.part = dv->d_part;
    a.ldq = ldq;
    a.fields = r->fields;
    a.visit = visiting ? (const int32_t *) rep->visit.ptr : NULL;
    a.visit_offset = visiting ? (const int64_t *) rep->visit_offset.ptr : NULL;
    r->fn<<<dim3((unsigned) blocks_q, (unsigned) splits), kThreads, r->smem, rep->stream>>>(a);
    KDE_CUDA_LAUNCHED("derivative-sum kernel");
    kde_deriv_merge_kernel<T><<<(unsigned) ceil_div(rows, kMergeThreads), kMergeThreads, 0,
                                rep->stream>>>(dv->d_part, (int) splits, r->fields, ldq, rows,
                                               dv->d_acc, r->ldq_max, shard_first == 0);
    KDE_CUDA_LAUNCHED("derivative-sum merge kernel");
  }
  dv->first = first;
  dv->rows = rows;
  return 0;
cleanup:
  return -1;
}

/* A device's finished batch: its states back (staging, [fields][rows]) and
 * into the results, in the caller's order: M from log2 to natural units,
 * second's triangle to both halves. */
template <typename T>
int deriv_collect(const deriv_run<T> *r, deriv_device<T> *dv, int threads, double *log_scale,
                  double *s0, double *k1sum, double *first_out, double *second_out,
                  kde_status *status)
{
  const int64_t d = r->p->dim, m = r->p->n_query, first = dv->first, rows = dv->rows;
  const int64_t *order = r->prune ? r->oq.order : NULL;
  double *st = dv->staging;
  KDE_CUDA_TRY(cudaSetDevice(dv->rep->device));
  KDE_CUDA_TRY(cudaMemcpy2DAsync(st, (size_t) rows * sizeof(double), dv->d_acc,
                                 (size_t) r->ldq_max * sizeof(double),
                                 (size_t) rows * sizeof(double), (size_t) r->fields,
                                 cudaMemcpyDeviceToHost, dv->rep->stream));
  KDE_CUDA_TRY(cudaStreamSynchronize(dv->rep->stream));
  dv->rows = 0;
  {
    /* one field of the batch to its rows of the caller's column `dst` */
    auto put = [&](int field, double *dst) {
      const double *src = st + (int64_t) field * rows;
      if (order != NULL) kde_scatter_rows(src, order + first, rows, threads, dst);
      else memcpy(dst + first, src, (size_t) rows * sizeof(double));
    };
    double *top = st + kFieldMax * rows; /* log2 of the scale: to natural logs */
    for (int64_t i = 0; i < rows; i++) top[i] = top[i] > -INFINITY ? top[i] * kLn2 : -INFINITY;
    put(kFieldMax, log_scale);
    put(kFieldS0, s0);
    put(kFieldK1, k1sum);
    for (int64_t c = 0; c < d; c++) put(kFieldFirst + (int) c, first_out + c * m);
    if (second_out != NULL)
      for (int64_t b = 0; b < d; b++)
        for (int64_t c = 0; c <= b; c++) {
          const int field = kFieldFirst + (int) (d + b * (b + 1) / 2 + c);
          put(field, second_out + (c + b * d) * m);
          if (c != b) put(field, second_out + (b + c * d) * m);
        }
  }
  return 0;
cleanup:
  return -1;
}

template <typename T>
void derivative_sums_impl(kde_cuda_model *model, const kde_derivative_problem *p,
                          double tolerance, int threads, kde_interrupt_probe interrupted,
                          double *log_scale, double *s0, double *k1sum, double *first,
                          double *second, kde_status *status)
{
  deriv_run<T> r;
  int prev = -1, failed = 1;
  int64_t next = 0, done = 0;
  memset(&r, 0, sizeof r);
  r.model = model;
  r.p = p;
  r.second = second != NULL;
  r.fields = deriv_fields((int) p->dim, r.second);
  r.n_units = model->n_points / kUnit;
  r.fn = select_deriv_kernel<T>(p->kernel, (int) p->dim, r.second, !model->rounding_ok,
                                &r.smem);
  if (r.fn == NULL) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "the GPU derivative sums need a kernel with a derivative and at most %d"
                   " dimensions", kDerivMaxDim);
    return;
  }
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  r.n_dev = model->n_devices;
  KDE_HOST_ALLOC(r.dev, r.n_dev, "the devices' parts");
  memset(r.dev, 0, (size_t) r.n_dev * sizeof *r.dev);
  r.concurrency = INT64_MAX;
  for (int k = 0; k < r.n_dev; k++) {
    kde_replica *rep = &model->rep[k];
    int blocks_per_sm = 0;
    r.dev[k].rep = rep;
    KDE_CUDA_TRY(cudaSetDevice(rep->device));
    if (r.smem > rep->smem_optin) {
      kde_status_set(status, KDE_ERR_ARGUMENT,
                     "the GPU derivative sums at d = %lld need %.0f bytes of shared memory,"
                     " more than GPU %d has (%.0f)", (long long) p->dim, (double) r.smem,
                     rep->device, (double) rep->smem_optin);
      goto cleanup;
    }
    if (r.smem > 48 * 1024)
      KDE_CUDA_TRY(cudaFuncSetAttribute(r.fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int) r.smem));
    KDE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks_per_sm, r.fn, kThreads,
                                                               r.smem));
    const int64_t c = (int64_t) (blocks_per_sm > 0 ? blocks_per_sm : 1) * rep->multiprocessors;
    if (c < r.concurrency) r.concurrency = c;
  }
  if (deriv_training(&r, threads, status) != 0 ||
      deriv_order(&r, tolerance, threads, status) != 0 || deriv_plan_devices(&r, status) != 0)
    goto cleanup;
  /* Each device with nothing in flight takes the next batch; a finished
   * batch comes back while the others run. The interrupt probe runs here,
   * between batches, on this thread. */
  for (;;) {
    int in_flight = 0, finished = 0;
    for (int k = 0; k < r.n_dev; k++) {
      deriv_device<T> *dv = &r.dev[k];
      if (dv->rows == 0 && next < p->n_query) {
        const int64_t rows = p->n_query - next < r.ldq_max ? p->n_query - next : r.ldq_max;
        if (deriv_enqueue(&r, dv, next, rows, status) != 0) goto cleanup;
        next += rows;
      }
      if (dv->rows > 0) in_flight++;
    }
    if (in_flight == 0) break;
    for (int k = 0; k < r.n_dev; k++) {
      deriv_device<T> *dv = &r.dev[k];
      if (dv->rows == 0) continue;
      if (in_flight > 1) { /* else wait for the one in flight */
        KDE_CUDA_TRY(cudaSetDevice(dv->rep->device));
        const cudaError_t state = cudaStreamQuery(dv->rep->stream);
        if (state == cudaErrorNotReady) continue;
        KDE_CUDA_TRY(state);
      }
      done += dv->rows;
      if (deriv_collect(&r, dv, threads, log_scale, s0, k1sum, first, second, status) != 0)
        goto cleanup;
      finished++;
    }
    if (finished > 0 && done < p->n_query && interrupted != NULL &&
        interrupted((double) done / (double) p->n_query)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
    if (finished == 0) std::this_thread::yield();
  }
  failed = 0;
cleanup:
  deriv_free(&r, failed);
  if (prev >= 0) (void) cudaSetDevice(prev);
}

} // namespace

extern "C" void kde_cuda_derivative_sums(kde_cuda_model *model,
                                         const kde_derivative_problem *problem,
                                         double tolerance, int threads,
                                         kde_interrupt_probe interrupted, double *log_scale,
                                         double *s0, double *k1sum, double *first,
                                         double *second, kde_status *status)
{
  kde_status_clear(status);
  if (model == NULL || problem == NULL || problem->n_query < 0 ||
      (problem->n_query > 0 && (problem->query == NULL || log_scale == NULL || s0 == NULL ||
                                k1sum == NULL || first == NULL))) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: invalid problem passed to the CUDA derivative sums");
    return;
  }
  if (problem->kernel != model->kernel || problem->dim != model->dim ||
      problem->n_train != model->n_train || problem->train == NULL ||
      problem->log_weight == NULL || model->n_discrete > 0) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: the derivative sums' training set is not the CUDA model's");
    return;
  }
  if (!(tolerance >= 0 && tolerance < 1)) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "the tolerance must be in [0, 1)");
    return;
  }
  /* an adaptive model's tiles have a row of 1 / lambda^2 after aux, and its
   * pairs another kernel each: neither the kernels nor the plan here know
   * them (R refuses derivatives of adaptive fits before this) */
  if (model->adaptive) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: the GPU derivative sums do not serve adaptive fits");
    return;
  }
  if (problem->n_query == 0) return;
  if (model->precision == KDE_PRECISION_SINGLE)
    derivative_sums_impl<float>(model, problem, tolerance, threads, interrupted, log_scale, s0,
                                k1sum, first, second, status);
  else
    derivative_sums_impl<double>(model, problem, tolerance, threads, interrupted, log_scale,
                                 s0, k1sum, first, second, status);
}
