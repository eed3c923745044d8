/*
 * evaluate.cu: one evaluation: the kernel choice (the one dispatch point)
 * and launch shape on each device, query batches and training shards sized
 * from the memory budget, the loop that keeps every device busy (fixed
 * query ranges, or batches claimed as devices free up when pruning makes the
 * work per query uneven), and the host merge of their states when they split
 * the training set.
 */
#include <cuda_runtime.h>

#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>
#include <thread>
#include <type_traits>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "kde_cuda_common.h"
#include "kernels.cuh"
#include "layout.cuh"
#include "model.cuh"
#include "plan.cuh"
#include "prune.h"
#include "spatial.h"
#include "tuning.cuh"
#include "tuning_hooks.h"

using namespace kdegpu;

/* KDEGPU_DEVICE_PLAN=0: a pruned evaluation orders its queries and plans
 * its batches on the host (kde_kd_order, kde_plan_query_blocks), and the
 * single-precision Gaussian and exponential do not prune, as before the
 * device plan; for A/B measurements (bench/cuda/NOTES.md). Read once. */
static int device_plan_enabled(void)
{
  static const int enabled = [] {
    const char *v = getenv("KDEGPU_DEVICE_PLAN");
    return !(v != NULL && strcmp(v, "0") == 0);
  }();
  return enabled;
}

/* KDEGPU_TRACE=<file>: each evaluation appends its phases' wall times
 * there (ordering, setup, the devices' loop and when each device finished,
 * the scatter back to the caller's order); for measurements of several
 * devices (bench/gpu_multi.R). Read once. */
static FILE *trace_file(void)
{
  static FILE *const file = [] {
    const char *path = getenv("KDEGPU_TRACE");
    return path != NULL && path[0] != '\0' ? fopen(path, "a") : (FILE *) NULL;
  }();
  return file;
}

static double ms_between(std::chrono::steady_clock::time_point t0,
                         std::chrono::steady_clock::time_point t1)
{
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

/* The one dispatch point: runtime (kernel, d, layout, adaptive) -> the
 * instantiation of a kernel family, through the selector its translation
 * unit exports. (An adaptive model has the plain layout.) */
template <typename T>
static kde_kernel_fn<T> select_kernel(int kernel, int dim, int layout, int adaptive)
{
  if constexpr (std::is_same<T, float>::value) {
    if (layout == KDE_LAYOUT_TC_WIDE) return select_tc_wide_kernel();
    if (layout == KDE_LAYOUT_TC_SMALL) return select_tc_small_kernel();
  }
  if (adaptive)
    return dim <= 4 ? select_small_adaptive_kernel<T>(kernel, dim)
                    : select_wide_adaptive_kernel<T>(kernel);
  if (dim <= 4) return select_small_kernel<T>(kernel, dim);
  return select_wide_kernel<T>(kernel);
}

/* What an evaluation that prunes shares with its steps: the decision's
 * inputs (prune.c) and the queries, whitened and in spatial order, in the
 * coordinates of the model's unit boxes. */
typedef struct {
  kde_prune_plan plan;   /* on the host; device: each replica's copy */
  const double *queries; /* n_query x dim, column-major (host plan) */
  int64_t n_query;
  int threads;
  int device;            /* 1: each batch planned on its device (plan.cu) */
  double reserved;       /* device bytes the ordered queries hold there */
  const kde_replica *reserved_on;
} prune_context;

/* One device's share of an evaluation. */
typedef struct {
  kde_replica *rep;
  int64_t q_lo, q_hi;       /* queries of this device (all, when claiming) */
  int64_t *claim_cursor;    /* shared next unclaimed query, or NULL: fixed range */
  int64_t claimed;          /* first row of the batch claimed next, or -1 */
  int in_flight;            /* a step is queued on the device */
  int64_t batches;          /* batches finished (for the trace) */
  std::chrono::steady_clock::time_point finished_at; /* its last step (trace) */
  int64_t u_lo, u_hi;       /* training units of this device */
  int64_t shard_units;      /* units per step */
  int64_t ldq_max;          /* rows of a query batch */
  int split_cap;            /* partial states per row of a batch */
  double *state_max;        /* host, [q_hi - q_lo], this device's states */
  double *state_sum;        /* (when the host merges devices' states) */
  double *out;              /* or host results of q_lo.. (finished here) */
  /* kernel choice */
  void *fn;
  size_t smem;
  int chunk_dims, n_chunks;
  int concurrency;          /* resident blocks over all SMs */
  cudaEvent_t ev_start, ev_stop;
  /* cursor */
  int64_t q_next;           /* first query of the current batch */
  int64_t n_batch;          /* rows in the current batch */
  int64_t ldq;
  int64_t shard;            /* next shard within the current batch */
  int64_t step_units;       /* training units of the step in flight */
  int64_t raw_first;        /* the batch uploaded to rep->raw, if raw_rows */
  int64_t raw_rows;
  int batch_started;        /* this step packed a new batch */
  int batch_done;           /* this step finished the batch */
  const prune_context *prune; /* NULL: every query block visits every unit */
  int visiting;             /* the current batch has a plan on the device */
  double batch_pairs;       /* pairs its plan evaluates (when visiting) */
  double *pairs;            /* pairs evaluated, all devices together */
  kde_cuda_eval_stats *stats; /* counters, or NULL (then no kernel timing) */
} kde_device_job;

/* Splits of the training range for one launch (grid.y). With 8 or more
 * waves of query blocks, none (the last wave costs at most 1/8). Otherwise
 * enough blocks for at least 4 waves (few queries, many training points),
 * each split at least kMinUnitsPerSplit units; among the candidates the
 * first whose last wave is nearly full (wave efficiency >= 96%), or else the
 * most efficient. */
static int choose_splits(const kde_device_job *job, int64_t blocks_q,
                         int64_t units)
{
  const int64_t conc = job->concurrency > 0 ? job->concurrency : 1;
  int64_t s_max = units / kMinUnitsPerSplit, s_lo, best = 1;
  double best_eff = -1;
  if (s_max > job->split_cap) s_max = job->split_cap;
  if (s_max > 65535) s_max = 65535;
  if (s_max < 1) s_max = 1;
  if (blocks_q >= 8 * conc) return 1;
  s_lo = ceil_div(4 * conc, blocks_q);
  if (s_lo > s_max) s_lo = s_max;
  for (int64_t s = s_lo; s <= s_max && s < s_lo + 64; s++) {
    /* the split count after rounding the split length to whole units */
    const int64_t actual = ceil_div(units, ceil_div(units, s));
    const int64_t blocks = blocks_q * actual;
    const double eff = (double) blocks / (double) (ceil_div(blocks, conc) * conc);
    if (eff > best_eff + 1e-9) {
      best_eff = eff;
      best = actual;
    }
    if (eff >= 0.96) break;
  }
  return (int) best;
}

/* Relative cost of a pair on the path a model takes (FMAs for the distance
 * or dot product, plus the exp), for the size of a step: double precision
 * runs about 5x slower, the wide tensor-core kernel about 4x faster. */
static double pair_cost(const kde_cuda_model *model)
{
  double cost = (double) model->dim + 4;
  if (model->precision == KDE_PRECISION_DOUBLE) cost *= 5;
  if (model->layout == KDE_LAYOUT_TC_WIDE) cost *= 0.25;
  return cost;
}

static int64_t batch_rows(const kde_device_job *job, int64_t first)
{
  return job->q_hi - first < job->ldq_max ? job->q_hi - first : job->ldq_max;
}

/* The first row of the batch after the current one: the next rows of a
 * fixed range, or the next unclaimed batch of all the queries (q_hi when
 * none is left). Claims are taken on this one host thread. */
static int64_t claim_next_batch(kde_device_job *job)
{
  int64_t first;
  if (job->claim_cursor == NULL) return job->q_next + job->n_batch;
  if (job->claimed >= 0) {
    first = job->claimed;
    job->claimed = -1;
    return first;
  }
  first = *job->claim_cursor;
  if (first >= job->q_hi) return job->q_hi;
  *job->claim_cursor += batch_rows(job, first);
  return first;
}

/* Starts the upload of raw query rows [first, first + rows) to rep->raw on
 * the upload stream, once the previous batch there has been packed. The
 * source is R's (pageable) memory: the call returns when the copy has left
 * it, while the device may still be running the previous batch; or the
 * queries ordered on the first device (order.cu), a copy within or between
 * devices (cudaMemcpyDefault tells them apart). */
static int upload_raw(const kde_cuda_model *model, const kde_query_set *query,
                      kde_device_job *job, int64_t first, int64_t rows,
                      kde_status *status)
{
  kde_replica *rep = job->rep;
  KDE_CUDA_TRY(cudaStreamWaitEvent(rep->upload, rep->raw_free, 0));
  KDE_CUDA_TRY(cudaMemcpy2DAsync(rep->raw.ptr, (size_t) job->ldq_max * sizeof(double),
                                 query->query + first,
                                 (size_t) query->n_query * sizeof(double),
                                 (size_t) rows * sizeof(double), (size_t) model->dim,
                                 cudaMemcpyDefault, rep->upload));
  KDE_CUDA_TRY(cudaEventRecord(rep->raw_ready, rep->upload));
  job->raw_first = first;
  job->raw_rows = rows;
  return 0;
cleanup:
  return -1;
}

/* Packs the current batch (uploaded to rep->raw) into rep->query, and its
 * |q|^2 / 2 into the third row of rep->acc. */
template <typename T>
static int pack_batch(const kde_cuda_model *model, const kde_query_set *query,
                      kde_device_job *job, kde_status *status)
{
  kde_replica *rep = job->rep;
  kde_pack_args<T> args;
  const kde_pack_fn<T> pack = select_pack_kernel<T>(model->layout);
  const unsigned blocks = (unsigned) ceil_div(job->ldq, kPackThreads);
  args.raw = (const double *) rep->raw.ptr;
  args.ldr = job->ldq_max;
  args.rows = job->n_batch;
  args.ldq = job->ldq;
  args.dim = (int) model->dim;
  args.k16 = model->k16;
  args.center = query->transform != NULL ? rep->whitening : NULL;
  args.transform = query->transform != NULL ? rep->whitening + model->dim : NULL;
  args.model_center = rep->model_center;
  args.scale = model->scale;
  args.dst = (T *) rep->query.ptr;
  args.offset = (double *) rep->acc.ptr + 2 * job->ldq_max;
  KDE_CUDA_TRY(cudaStreamWaitEvent(rep->stream, rep->raw_ready, 0));
  pack<<<blocks, kPackThreads, 0, rep->stream>>>(args);
  KDE_CUDA_LAUNCHED("query packing kernel");
  /* a plan made here needs the query blocks' boxes, from the raw (whitened,
   * double) rows before the next batch overwrites them */
  if (job->prune != NULL && job->prune->device &&
      (buffer_reserve(&rep->plan_box, (size_t) (2 * model->dim * (job->ldq / kBlockQueries)) *
                                          sizeof(double), status) != 0 ||
       plan_block_boxes((const double *) rep->raw.ptr, job->ldq_max, job->n_batch,
                        (int) model->dim, (double *) rep->plan_box.ptr, rep->stream,
                        status) != 0))
    goto cleanup;
  KDE_CUDA_TRY(cudaEventRecord(rep->raw_free, rep->stream));
  job->raw_rows = 0; /* consumed */
  return 0;
cleanup:
  return -1;
}

/* Enqueue one step of `job` (one query batch against one training shard)
 * on its device. Returns 0, or -1 with the status set. */
template <typename T>
static int enqueue_step(const kde_cuda_model *model, const kde_query_set *query,
                        kde_device_job *job, kde_status *status)
{
  kde_replica *rep = job->rep;
  kde_args<T> args;
  int64_t shard_first, shard_units, blocks_q;
  int splits, lanes_log2;
  const T *train;
  double *acc = (double *) rep->acc.ptr;
  const kde_merge_fn<T> merge = select_merge_kernel<T>();
  const kde_finish_fn finish = select_finish_kernel();
  dim3 grid;

  KDE_CUDA_TRY(cudaSetDevice(rep->device));
  job->batch_started = job->shard == 0;
  if (job->batch_started) {
    job->n_batch = batch_rows(job, job->q_next);
    job->ldq = ceil_div(job->n_batch, kBlockQueries) * kBlockQueries;
    if (job->raw_rows != job->n_batch || job->raw_first != job->q_next)
      if (upload_raw(model, query, job, job->q_next, job->n_batch, status) != 0)
        goto cleanup;
    if (pack_batch<T>(model, query, job, status) != 0) goto cleanup;
    job->visiting = 0;
    if (job->prune != NULL) {
      const prune_context *pc = job->prune;
      const int64_t units = job->u_hi - job->u_lo;
      batch_plan bp;
      if ((pc->device ? plan_batch_device(model, rep, &pc->plan, job->n_batch, units, &bp, status)
                      : plan_batch_host(&pc->plan, pc->queries, pc->n_query, pc->threads,
                                        job->q_next, job->n_batch, units, rep, &bp, status)) != 0)
        goto cleanup;
      job->visiting = bp.visiting;
      job->batch_pairs = bp.pairs;
    }
    *job->pairs += job->visiting ? job->batch_pairs
                                 : (double) job->n_batch * (double) (job->u_hi - job->u_lo) *
                                       (double) kUnit;
  }
  shard_first = job->u_lo + job->shard * job->shard_units;
  shard_units = job->shard_units;
  if (shard_units > job->u_hi - shard_first) shard_units = job->u_hi - shard_first;
  job->step_units = shard_units;
  if (model->resident) {
    train = (const T *) rep->train +
            shard_first * (kUnit / kTileWidth) * model->tile_elems;
  } else {
    KDE_CUDA_TRY(cudaMemcpyAsync(
        rep->shard.ptr,
        (const T *) model->host_train +
            shard_first * (kUnit / kTileWidth) * model->tile_elems,
        (size_t) shard_units * kUnit * point_bytes(model),
        cudaMemcpyHostToDevice, rep->stream));
    train = (const T *) rep->shard.ptr;
  }

  blocks_q = job->ldq / kBlockQueries;
  splits = choose_splits(job, blocks_q, shard_units);
  args.train = train;
  args.n_points = shard_units * kUnit;
  args.split_points = ceil_div(shard_units, splits) * kUnit;
  args.query = (const T *) rep->query.ptr;
  args.ldq = job->ldq;
  args.n_query = job->n_batch;
  args.part_max = (T *) rep->part.ptr;
  args.part_sum = (T *) rep->part.ptr + (size_t) job->split_cap * job->ldq_max;
  args.dim = (int) model->dim;
  args.chunk_dims = job->chunk_dims;
  args.n_chunks = job->n_chunks;
  args.leave_one_out = query->leave_one_out;
  args.query_base = job->q_next;
  args.train_base = shard_first * kUnit;
  args.tile_elems = model->tile_elems;
  args.k16 = model->k16;
  args.visit = job->visiting ? (const int32_t *) rep->visit.ptr : NULL;
  args.visit_offset = job->visiting ? (const int64_t *) rep->visit_offset.ptr : NULL;
  grid = dim3((unsigned) blocks_q, (unsigned) splits, 1);

  if (job->stats != NULL) KDE_CUDA_TRY(cudaEventRecord(job->ev_start, rep->stream));
  ((kde_kernel_fn<T>) job->fn)<<<grid, kThreads, job->smem, rep->stream>>>(args);
  KDE_CUDA_LAUNCHED("main kernel");
  lanes_log2 = 0;
  while ((1 << lanes_log2) < splits && lanes_log2 < 5) lanes_log2++;
  merge<<<(unsigned) ceil_div(job->n_batch << lanes_log2, 256), 256, 0, rep->stream>>>(
      args.part_max, args.part_sum, job->ldq, splits, job->n_batch, acc,
      acc + job->ldq_max, job->shard == 0, lanes_log2);
  KDE_CUDA_LAUNCHED("merge kernel");
  job->batch_done = shard_first + shard_units >= job->u_hi;
  if (job->batch_done && job->out != NULL) {
    finish<<<(unsigned) ceil_div(job->n_batch, 256), 256, 0, rep->stream>>>(
        acc, acc + job->ldq_max, acc + 2 * job->ldq_max, job->n_batch, query->log_const,
        model->expanded);
    KDE_CUDA_LAUNCHED("finishing kernel");
  }
  if (job->stats != NULL) {
    KDE_CUDA_TRY(cudaEventRecord(job->ev_stop, rep->stream));
    job->stats->launches++;
    if (splits > job->stats->max_splits) job->stats->max_splits = splits;
  }

  job->shard++;
  return 0;
cleanup:
  return -1;
}

/* After the step: the next batch's raw rows travel while this one runs. */
static int prefetch_next_batch(const kde_cuda_model *model,
                               const kde_query_set *query, kde_device_job *job,
                               kde_status *status)
{
  int64_t next;
  if (!job->batch_started) return 0;
  next = claim_next_batch(job);
  if (job->claim_cursor != NULL && next < job->q_hi) job->claimed = next;
  if (next >= job->q_hi) return 0;
  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  return upload_raw(model, query, job, next, batch_rows(job, next), status);
cleanup:
  return -1;
}

/* Once the step has finished: a finished batch's results, or its states and
 * |q|^2 / 2 for the host to merge, go straight into the host arrays. */
static int collect_batch(kde_device_job *job, double *query_offset,
                         kde_status *status)
{
  const double *acc = (const double *) job->rep->acc.ptr;
  const int64_t at = job->q_next - job->q_lo;
  const size_t bytes = (size_t) job->n_batch * sizeof(double);
  if (!job->batch_done) return 0;
  if (job->out != NULL) {
    KDE_CUDA_TRY(cudaMemcpy(job->out + at, acc + 2 * job->ldq_max, bytes,
                            cudaMemcpyDeviceToHost));
    goto next_batch;
  }
  KDE_CUDA_TRY(cudaMemcpy(job->state_max + at, acc, bytes, cudaMemcpyDeviceToHost));
  KDE_CUDA_TRY(cudaMemcpy(job->state_sum + at, acc + job->ldq_max, bytes,
                          cudaMemcpyDeviceToHost));
  KDE_CUDA_TRY(cudaMemcpy(query_offset + job->q_next, acc + 2 * job->ldq_max, bytes,
                          cudaMemcpyDeviceToHost));
next_batch:
  job->q_next = claim_next_batch(job);
  job->batches++;
  job->shard = 0;
  job->batch_done = 0;
  if (job->stats != NULL) job->stats->batches++;
  return 0;
cleanup:
  return -1;
}

/* Kernel choice, launch shape and batch sizes for one device. */
template <typename T>
static int prepare_job(const kde_cuda_model *model, kde_device_job *job,
                       kde_status *status)
{
  const int64_t d = model->dim;
  const size_t tsz = sizeof(T);
  const size_t merge_smem = 2 * (size_t) kWarps * kBlockQueries * tsz;
  /* rows to cover: the fixed range, or a share of a claimed batch */
  const int64_t n_job = job->claim_cursor == NULL
                            ? job->q_hi - job->q_lo
                            : ceil_div(job->q_hi - job->q_lo, kClaimedBatches);
  const int64_t units = job->u_hi - job->u_lo;
  double avail, per_query;
  int blocks_per_sm = 0;
  const int rows_extra = 1 + model->adaptive; /* aux (and scale) rows per point */
  kde_kernel_fn<T> fn = select_kernel<T>(model->kernel, (int) d, model->layout,
                                         model->adaptive);

  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  if (model->layout == KDE_LAYOUT_TC_WIDE) {
    job->chunk_dims = (int) d;
    job->n_chunks = 1;
    job->smem = tc_wide_smem_bytes(model->k16);
  } else if (model->layout == KDE_LAYOUT_TC_SMALL) {
    job->chunk_dims = (int) d;
    job->n_chunks = 1;
    job->smem = 2 * (size_t) kUnit * point_bytes(model);
  } else if (d <= 4) {
    job->chunk_dims = (int) d;
    job->n_chunks = 1;
    job->smem = 2 * (size_t) kUnit * (d + rows_extra) * tsz;
  } else {
    size_t cap = job->rep->smem_optin < kWideSmemCap ? job->rep->smem_optin
                                                      : kWideSmemCap;
    /* sq: dc x 128, sx: 2 x (dc + rows_extra) x 32 values */
    int64_t dc_max = ((int64_t) (cap / tsz) - 2 * rows_extra * kTileWidth) /
                     (kBlockQueries + 2 * kTileWidth);
    if (dc_max < 1) dc_max = 1;
    job->n_chunks = (int) ceil_div(d, dc_max);
    job->chunk_dims = (int) ceil_div(d, job->n_chunks);
    job->smem = ((size_t) job->chunk_dims * kBlockQueries +
                 2 * (size_t) (job->chunk_dims + rows_extra) * kTileWidth) * tsz;
  }
  if (job->smem < merge_smem) job->smem = merge_smem;
  job->fn = (void *) fn;
  if (job->smem > 48 * 1024)
    KDE_CUDA_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      (int) job->smem));
  KDE_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks_per_sm, fn, kThreads, job->smem));
  if (blocks_per_sm < 1) blocks_per_sm = 1;
  job->concurrency = blocks_per_sm * job->rep->multiprocessors;

  /* Memory: the resident replica, or one shard, then query batches. */
  avail = job->rep->budget;
  if (model->resident) {
    avail -= (double) model->n_points * point_bytes(model);
    job->shard_units = units > 0 ? units : 1;
  } else {
    int64_t fit = (int64_t) (0.5 * job->rep->budget / (kUnit * point_bytes(model)));
    job->shard_units = units < fit ? units : fit;
    if (job->shard_units < 1) job->shard_units = 1;
    avail -= (double) job->shard_units * kUnit * point_bytes(model);
  }
  /* Half of the rest for query rows (raw and packed coordinates, the
   * accumulated states, a plan's share: its lists at their largest, 0.9 of
   * every unit, and when made here the decisions' bits and the boxes), half
   * for the partial states of the splits. The queries ordered on this
   * device stay there for the whole evaluation. */
  per_query = (double) model->query_elems * tsz + (double) (d + 3) * sizeof(double);
  if (job->prune != NULL) {
    const double all_units = (double) (model->n_points / kUnit);
    per_query += (0.9 * all_units * sizeof(int32_t) + sizeof(int64_t)) / kBlockQueries;
    if (job->prune->device)
      per_query += (all_units / 8 + (2 * d + 1) * sizeof(double)) / kBlockQueries;
    if (job->prune->reserved_on == job->rep) avail -= job->prune->reserved;
  }
  job->ldq_max = (int64_t) (0.5 * avail / per_query) / kBlockQueries * kBlockQueries;
  {
    const int64_t need = ceil_div(n_job, kBlockQueries) * kBlockQueries;
    if (job->ldq_max > need) job->ldq_max = need;
    if (job->ldq_max > kMaxBatchRows) job->ldq_max = kMaxBatchRows;
    /* bounded work per step, but never below a few full waves of blocks */
    int64_t rows = (int64_t) (kMaxWorkPerStep / pair_cost(model) /
                              ((double) job->shard_units * kUnit));
    int64_t floor_rows = (int64_t) 4 * job->concurrency * kBlockQueries;
    if (rows < floor_rows) rows = floor_rows;
    rows = rows / kBlockQueries * kBlockQueries;
    if (job->ldq_max > rows) job->ldq_max = rows;
    /* batches of equal size rather than a short last one */
    if (job->ldq_max >= kBlockQueries) {
      const int64_t n_batches = ceil_div(need, job->ldq_max);
      job->ldq_max = ceil_div(ceil_div(need, n_batches), kBlockQueries) * kBlockQueries;
    }
  }
  if (job->ldq_max < kBlockQueries) {
    kde_status_set(status, KDE_ERR_ALLOC,
                   "the GPU memory budget (%.0f bytes on device %d) leaves no"
                   " room for a batch of %d queries; raise"
                   " options(kdegpu.gpu_memory = ...) or use precision ="
                   " 'single'", job->rep->budget, job->rep->device,
                   kBlockQueries);
    goto cleanup;
  }
  {
    double cap = 0.5 * avail / ((double) job->ldq_max * 2 * tsz);
    int64_t most = units / kMinUnitsPerSplit; /* choose_splits never exceeds */
    /* nor does it ask for more than a few waves of blocks in all */
    const int64_t wave_rows = (int64_t) 16 * job->concurrency * kBlockQueries;
    if (most > wave_rows / job->ldq_max) most = wave_rows / job->ldq_max;
    if (most < 1) most = 1;
    if (most > 65535) most = 65535;
    job->split_cap = cap > (double) most ? (int) most : (int) cap;
    if (job->split_cap < 1) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "the GPU memory budget (%.0f bytes on device %d) is too"
                     " small for this evaluation; raise"
                     " options(kdegpu.gpu_memory = ...)",
                     job->rep->budget, job->rep->device);
      goto cleanup;
    }
  }
  return 0;
cleanup:
  return -1;
}

/* The device buffers of a job (its device is current). */
template <typename T>
static int reserve_scratch(const kde_cuda_model *model, kde_device_job *job,
                           kde_status *status)
{
  kde_replica *rep = job->rep;
  const size_t rows = (size_t) job->ldq_max;
  if (buffer_reserve(&rep->raw, rows * model->dim * sizeof(double), status) != 0 ||
      buffer_reserve(&rep->query, rows * model->query_elems * sizeof(T), status) != 0 ||
      buffer_reserve(&rep->part, 2 * (size_t) job->split_cap * rows * sizeof(T),
                     status) != 0 ||
      buffer_reserve(&rep->acc, 3 * rows * sizeof(double), status) != 0)
    return -1;
  if (!model->resident &&
      buffer_reserve(&rep->shard, (size_t) job->shard_units * kUnit * point_bytes(model),
                     status) != 0)
    return -1;
  return 0;
}

/* Jobs with a step queued. */
static int active_jobs(const kde_device_job *jobs, int n_dev)
{
  int active = 0;
  for (int r = 0; r < n_dev; r++) active += jobs[r].in_flight;
  return active;
}

/* After a job's step: wait for it (at once when it was polled done), count
 * its pairs and time, and collect a finished batch. */
static int finish_step(kde_device_job *job, double *query_offset,
                       double *done_pairs, kde_status *status)
{
  KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
  KDE_CUDA_TRY(cudaStreamSynchronize(job->rep->stream));
  job->in_flight = 0;
  if (job->stats != NULL) {
    float ms = 0;
    KDE_CUDA_TRY(cudaEventElapsedTime(&ms, job->ev_start, job->ev_stop));
    job->stats->kernel_ms += ms;
    job->stats->steps++;
  }
  *done_pairs += (double) job->n_batch * (double) job->step_units;
  return collect_batch(job, query_offset, status);
cleanup:
  return -1;
}

template <typename T>
static void log_density_impl(kde_cuda_model *model, const kde_query_set *query,
                             const prune_context *prune,
                             kde_interrupt_probe interrupted, double *out,
                             kde_cuda_eval_stats *stats, kde_status *status)
{
  const int64_t nq = query->n_query;
  const int n_dev = model->n_devices;
  const int64_t n_units = model->n_points / kUnit;
  kde_device_job *jobs = NULL;
  double *state_max = NULL, *state_sum = NULL, *query_offset = NULL;
  double total_pairs = 0, done_pairs = 0, evaluated = 0;
  int64_t claim_cursor = 0; /* the next query no device has claimed */
  int split_training, claiming, prev = -1, active, n_states_per_query, failed = 1;

  const auto t_start = std::chrono::steady_clock::now();
  auto t_loop = t_start;
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  /* Few queries for several devices: split the training set instead. */
  split_training = n_dev > 1 && nq < (int64_t) n_dev * kMinQueriesPerDevice;
  claiming = !split_training;
  n_states_per_query = split_training ? n_dev : 1;
  if (stats != NULL) stats->split_training = split_training;

  KDE_HOST_ALLOC(jobs, n_dev, "the device jobs");
  if (split_training) {
    KDE_HOST_ALLOC(state_max, (size_t) nq * n_states_per_query, "partial results");
    KDE_HOST_ALLOC(state_sum, (size_t) nq * n_states_per_query, "partial results");
    KDE_HOST_ALLOC(query_offset, nq, "query norms");
  }

  for (int r = 0; r < n_dev; r++) {
    kde_device_job *job = &jobs[r];
    job->rep = &model->rep[r];
    if (split_training) {
      job->q_lo = 0;
      job->q_hi = nq;
      job->u_lo = n_units * r / n_dev;
      job->u_hi = n_units * (r + 1) / n_dev;
      job->state_max = state_max + (size_t) r * nq;
      job->state_sum = state_sum + (size_t) r * nq;
      /* an empty share: nothing to do, states stay empty */
      for (int64_t i = 0; i < nq; i++) {
        job->state_max[i] = -INFINITY;
        job->state_sum[i] = 0;
      }
    } else { /* every device claims batches of all the queries */
      job->q_lo = 0;
      job->q_hi = nq;
      job->u_lo = 0;
      job->u_hi = n_units;
      job->out = out;
      job->claim_cursor = &claim_cursor;
    }
    job->claimed = -1;
    job->q_next = job->q_lo;
    job->prune = prune;
    job->pairs = &evaluated;
    if (job->q_hi <= job->q_lo || job->u_hi <= job->u_lo) {
      job->q_next = job->q_hi;
      continue;
    }
    total_pairs += claiming ? (double) nq * (double) n_units / n_dev
                            : (double) (job->q_hi - job->q_lo) * (double) (job->u_hi - job->u_lo);
    if (prepare_job<T>(model, job, status) != 0) goto cleanup;
  }
  /* Claimed batches of one size and launches of one split limit on every
   * device (the smallest, where memory differs: the first holds the ordered
   * queries), so that the devices' batches are the ones one device would
   * run, summed in the same order. */
  if (claiming) {
    int64_t rows = INT64_MAX;
    int split_cap = INT_MAX;
    for (int r = 0; r < n_dev; r++) {
      if (jobs[r].q_next >= jobs[r].q_hi) continue;
      if (jobs[r].ldq_max < rows) rows = jobs[r].ldq_max;
      if (jobs[r].split_cap < split_cap) split_cap = jobs[r].split_cap;
    }
    for (int r = 0; r < n_dev; r++) {
      jobs[r].ldq_max = rows;
      jobs[r].split_cap = split_cap;
    }
  }
  for (int r = 0; r < n_dev; r++) {
    kde_device_job *job = &jobs[r];
    if (job->q_next >= job->q_hi) continue;
    KDE_CUDA_TRY(cudaSetDevice(job->rep->device)); /* reserve_scratch's device */
    if (claiming) job->q_next = claim_next_batch(job); /* after ldq_max is known */
    if (reserve_scratch<T>(model, job, status) != 0) goto cleanup;
    if (sync_whitening(model, query, job->rep, status) != 0) goto cleanup;
    if (stats != NULL) {
      job->stats = stats;
      KDE_CUDA_TRY(cudaEventCreate(&job->ev_start));
      KDE_CUDA_TRY(cudaEventCreate(&job->ev_stop));
    }
  }

  t_loop = std::chrono::steady_clock::now();
  /* Every device with work has a step queued: a device whose step has
   * finished hands its batch back and gets the next step (and the upload of
   * the batch after it), while the others run; the interrupt probe runs
   * here, between steps, on this thread. */
  for (;;) {
    int finished = 0;
    active = 0;
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      if (job->in_flight) {
        if (active_jobs(jobs, n_dev) > 1) {
          KDE_CUDA_TRY(cudaSetDevice(job->rep->device));
          const cudaError_t done = cudaStreamQuery(job->rep->stream);
          if (done == cudaErrorNotReady) {
            active++;
            continue;
          }
          KDE_CUDA_TRY(done);
        }
        if (finish_step(job, query_offset, &done_pairs, status) != 0) goto cleanup;
        job->finished_at = std::chrono::steady_clock::now();
        finished++;
      }
      if (job->q_next >= job->q_hi) continue;
      if (enqueue_step<T>(model, query, job, status) != 0) goto cleanup;
      if (prefetch_next_batch(model, query, job, status) != 0) goto cleanup;
      job->in_flight = 1;
      active++;
    }
    if (active == 0) break;
    if (finished > 0 && interrupted != NULL && interrupted(done_pairs / total_pairs)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
    if (finished == 0) std::this_thread::yield();
  }

  /* Split training: merge the devices' states and finish on the host. */
  for (int64_t i = 0; split_training && i < nq; i++) {
    kde_lse_2 st = kde_lse_make_2(state_max[i], state_sum[i]);
    for (int r = 1; r < n_states_per_query; r++)
      st = kde_lse_merge_2(st, kde_lse_make_2(state_max[(size_t) r * nq + i],
                                              state_sum[(size_t) r * nq + i]));
    out[i] = finish_log_density(st, query_offset[i], model->expanded, query->log_const);
  }
  /* the pairs evaluated: visited units x kUnit per query, of n_points each */
  if (stats != NULL) {
    stats->pairs_evaluated = evaluated;
    stats->pairs_total = (double) nq * (double) model->n_points;
  }
  if (query->pairs_share != NULL)
    *query->pairs_share = evaluated / ((double) nq * (double) model->n_points);
  if (trace_file() != NULL) {
    const auto t_end = std::chrono::steady_clock::now();
    fprintf(trace_file(), "evaluate n_query=%lld devices=%d split_training=%d claiming=%d"
            " setup_ms=%.2f loop_ms=%.2f", (long long) nq, n_dev, split_training, claiming,
            ms_between(t_start, t_loop), ms_between(t_loop, t_end));
    for (int r = 0; r < n_dev; r++)
      fprintf(trace_file(), " dev%d_done_ms=%.2f dev%d_batches=%lld", r,
              ms_between(t_loop, jobs[r].finished_at), r, (long long) jobs[r].batches);
    fprintf(trace_file(), "\n");
    fflush(trace_file());
  }
  failed = 0;

cleanup:
  if (jobs != NULL) {
    for (int r = 0; r < n_dev; r++) {
      kde_device_job *job = &jobs[r];
      kde_replica *rep = job->rep;
      if (rep == NULL || cudaSetDevice(rep->device) != cudaSuccess) continue;
      /* on an error path work may still be queued on buffers freed below */
      (void) cudaStreamSynchronize(rep->upload);
      (void) cudaStreamSynchronize(rep->stream);
      if (failed || scratch_bytes(rep) > kKeepScratchBytes) scratch_release(rep);
      if (job->ev_start) (void) cudaEventDestroy(job->ev_start);
      if (job->ev_stop) (void) cudaEventDestroy(job->ev_stop);
    }
    (void) cudaGetLastError();
  }
  free(jobs);
  free(state_max);
  free(state_sum);
  free(query_offset);
  if (prev >= 0) (void) cudaSetDevice(prev);
}

extern "C" void kde_cuda_log_density(kde_cuda_model *model,
                                     const kde_query_set *query,
                                     kde_interrupt_probe interrupted,
                                     double *out, kde_status *status)
{
  kde_cuda_log_density_stats(model, query, interrupted, out, NULL, status);
}

extern "C" void kde_cuda_log_density_stats(kde_cuda_model *model,
                                           const kde_query_set *query,
                                           kde_interrupt_probe interrupted,
                                           double *out, kde_cuda_eval_stats *stats,
                                           kde_status *status)
{
  kde_status_clear(status);
  if (stats != NULL) memset(stats, 0, sizeof *stats);
  if (model == NULL || query == NULL || out == NULL ||
      (query->n_query > 0 && query->query == NULL) || query->n_query < 0) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "kde_cuda_log_density needs a model, a query set and an"
                   " output buffer");
    return;
  }
  if ((query->center == NULL) != (query->transform == NULL)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "the queries' whitening needs both a center and a"
                   " transform, or neither");
    return;
  }
  if (query->leave_one_out && query->n_query != model->n_train) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "leave-one-out needs the training points as queries:"
                   " n_query = %lld but n_train = %lld",
                   (long long) query->n_query, (long long) model->n_train);
    return;
  }
  if (query->n_query == 0) return;
  if (!(query->tolerance >= 0 && query->tolerance < 1)) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "the tolerance must be in [0, 1)");
    return;
  }
  /* Pruning pays where the kernels' work outweighs the ordering and the
   * planning. Made on the device (order.cu, plan.cu: milliseconds at 1e6 x
   * 1e6), it pays for every kernel; made on the host (KDEGPU_DEVICE_PLAN=0:
   * about 0.2 s at 1e6 x 1e6 on an H100 host of 16 cores, and quadratic in
   * the blocks), only for compact kernels (1.8-2x) and double precision
   * (2.1-3.2x at d = 3), so the single-precision Gaussian and exponential
   * then sweep every unit (bench/cuda/NOTES.md); their results are the full
   * sum, within any tolerance. */
  const int device_plan = device_plan_enabled() && model->dim <= kPlanMaxDim;
  const int prunes = model->unit_lo != NULL &&
                     (kde_kernel_is_compact(model->kernel) ||
                      (query->tolerance > 0 &&
                       (model->precision == KDE_PRECISION_DOUBLE || device_plan)));
  if (!prunes) {
    if (model->precision == KDE_PRECISION_SINGLE)
      log_density_impl<float>(model, query, NULL, interrupted, out, stats, status);
    else
      log_density_impl<double>(model, query, NULL, interrupted, out, stats, status);
    return;
  }

  /* Pruning: the queries whitened and put in a spatial order (order.cu),
   * the results put back in the caller's order here. */
  const int64_t m = query->n_query, d = model->dim;
  double *sorted_out = NULL;
  prune_context pc;
  ordered_queries oq;
  kde_query_set sorted_query = *query;
  const auto t0 = std::chrono::steady_clock::now();
  memset(&pc, 0, sizeof pc);
  if (order_evaluation_queries(model, query, device_plan, &oq, status) != 0) goto cleanup;
  if (oq.order != NULL) KDE_HOST_ALLOC(sorted_out, m, "the ordered results");
  sorted_query.query = oq.z;
  sorted_query.center = sorted_query.transform = NULL;
  pc.plan.kernel = model->kernel;
  pc.plan.dim = d;
  pc.plan.n_tiles = model->n_points / kUnit;
  pc.plan.lo = model->unit_lo;
  pc.plan.hi = model->unit_hi;
  pc.plan.log_weight = model->unit_log_weight;
  pc.plan.log_weight_rest = model->unit_log_rest;
  pc.plan.inv_scale2_lo = model->unit_scale_lo; /* NULL unless adaptive */
  pc.plan.inv_scale2_hi = model->unit_scale_hi;
  pc.plan.tolerance = query->tolerance;
  pc.plan.leave_one_out = query->leave_one_out;
  pc.queries = oq.z; /* read by the host plan only: on the host when it runs */
  pc.n_query = m;
  pc.threads = query->host_threads;
  pc.device = device_plan;
  pc.reserved = oq.reserved;
  pc.reserved_on = oq.reserved_on;
  {
    const double order_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
            .count();
    const int64_t *order = oq.order;
    double *result = order != NULL ? sorted_out : out;
    if (model->precision == KDE_PRECISION_SINGLE)
      log_density_impl<float>(model, &sorted_query, &pc, interrupted, result, stats, status);
    else
      log_density_impl<double>(model, &sorted_query, &pc, interrupted, result, stats, status);
    const auto t_scatter = std::chrono::steady_clock::now();
    if (status->code == KDE_OK && order != NULL)
      kde_scatter_rows(sorted_out, order, m, query->host_threads, out);
    if (trace_file() != NULL) {
      fprintf(trace_file(), "pruned n_query=%lld order_ms=%.2f scatter_ms=%.2f\n",
              (long long) m, order_ms,
              ms_between(t_scatter, std::chrono::steady_clock::now()));
      fflush(trace_file());
    }
    if (stats != NULL) {
      stats->order_ms = order_ms;
      stats->device_plan = device_plan;
    }
  }
cleanup:
  ordered_queries_free(model, &oq);
  free(sorted_out);
}
