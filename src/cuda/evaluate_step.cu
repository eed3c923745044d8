/*
 * evaluate_step.cu: one device's share of an evaluation (evaluate_job.cuh):
 * the kernel choice (the one dispatch point) and launch shape on the
 * device, query batches and training shards sized from the memory budget,
 * and each step (a query batch against a training shard) enqueued there.
 * The loop over the devices: evaluate.cu.
 */
#include <cuda_runtime.h>

#include <stdint.h>

#include <type_traits>

#include "kde_cuda.h"
#include "kde_cuda_common.h"
#include "evaluate_job.cuh"
#include "kernels.cuh"
#include "layout.cuh"
#include "model.cuh"
#include "plan.cuh"
#include "tuning.cuh"

namespace kdegpu {

/* A fixed-bandwidth Gaussian model at d >= 3 in the difference form (its
 * expanded form's rounding, model.cu's expanded_rounding, beyond the
 * tolerance it was made for): kernel_plain.cu's. */
static bool plain_gaussian(const kde_cuda_model *model)
{
  return model->kernel == KDE_GAUSSIAN && model->dim >= 3 && !model->expanded &&
         !model->adaptive;
}

/* The one dispatch point: a model's (kernel, d, layout, form) -> the
 * instantiation of a kernel family, through the selector its translation
 * unit exports. (An adaptive model has the plain layout.) */
template <typename T> static kde_kernel_fn<T> select_kernel(const kde_cuda_model *model)
{
  const int kernel = model->kernel, dim = (int) model->dim;
  if constexpr (std::is_same<T, float>::value) {
    if (model->layout == KDE_LAYOUT_TC_WIDE) return select_tc_wide_kernel();
    if (model->layout == KDE_LAYOUT_TC_SMALL) return select_tc_small_kernel();
  }
  if (model->n_discrete > 0) return select_discrete_kernel<T>(dim, model->n_discrete);
  if (plain_gaussian(model)) return select_plain_gaussian_kernel<T>(dim);
  if (model->adaptive)
    return dim <= kSmallMaxDim ? select_small_adaptive_kernel<T>(kernel, dim)
                    : select_wide_adaptive_kernel<T>(kernel);
  if (dim <= kSmallMaxDim) return select_small_kernel<T>(kernel, dim);
  return select_wide_kernel<T>(kernel);
}

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

/* Relative cost of a pair on the path a model takes (FMAs for the dot
 * product, or subtractions and FMAs for the plain Gaussian's distance, plus
 * the exp), for the size of a step: double precision runs about 5x slower,
 * the wide tensor-core kernel about 4x faster. */
static double pair_cost(const kde_cuda_model *model)
{
  double cost = (plain_gaussian(model) ? 2.0 : 1.0) * (double) model->dim + 4;
  if (model->precision == KDE_PRECISION_DOUBLE) cost *= 5;
  if (model->layout == KDE_LAYOUT_TC_WIDE) cost *= 0.25;
  return cost;
}

/* Where a batch's lo parts go in rep->raw, after its coordinates and codes;
 * NULL where the queries bring none that the model reads. */
static double *raw_lo(const kde_cuda_model *model, const kde_query_set *query,
                      const kde_device_job *job)
{
  if (query_lo_rows(model) == 0 || query->query_lo == NULL || query->transform != NULL)
    return NULL;
  return (double *) job->rep->raw.ptr + (model->dim + model->n_discrete) * job->ldq_max;
}

int upload_raw(const kde_cuda_model *model, const kde_query_set *query, kde_device_job *job,
               int64_t first, int64_t rows, kde_status *status)
{
  kde_replica *rep = job->rep;
  KDE_CUDA_TRY(cudaStreamWaitEvent(rep->upload, rep->raw_free, 0));
  KDE_CUDA_TRY(cudaMemcpy2DAsync(rep->raw.ptr, (size_t) job->ldq_max * sizeof(double),
                                 query->query + first,
                                 (size_t) query->n_query * sizeof(double),
                                 (size_t) rows * sizeof(double), (size_t) model->dim,
                                 cudaMemcpyDefault, rep->upload));
  if (model->n_discrete > 0) /* mixed data: the codes in the rows after */
    KDE_CUDA_TRY(cudaMemcpy2DAsync((double *) rep->raw.ptr + model->dim * job->ldq_max,
                                   (size_t) job->ldq_max * sizeof(double), query->codes + first,
                                   (size_t) query->n_query * sizeof(double),
                                   (size_t) rows * sizeof(double), (size_t) model->n_discrete,
                                   cudaMemcpyDefault, rep->upload));
  if (raw_lo(model, query, job) != NULL) /* and then the lo parts */
    KDE_CUDA_TRY(cudaMemcpy2DAsync(raw_lo(model, query, job), (size_t) job->ldq_max * sizeof(double),
                                   query->query_lo + first,
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
 * |q|^2 / 2 into the third row of rep->acc. The caller records rep->raw_free
 * once nothing more reads the raw rows (a device plan reads them). */
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
  args.raw_lo = raw_lo(model, query, job);
  args.model_center = rep->model_center;
  args.scale = model->scale;
  args.dst = (T *) rep->query.ptr;
  args.anchored = model->anchored;
  args.n_discrete = model->n_discrete;
  args.code_row = model->code_row;
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
  job->raw_rows = 0; /* consumed */
  return 0;
cleanup:
  return -1;
}

template <typename T>
int enqueue_step(const kde_cuda_model *model, const kde_query_set *query, kde_device_job *job,
                 kde_status *status)
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
    job->batch_groups = 0;
    if (job->prune != NULL) {
      const prune_context *pc = job->prune;
      const int64_t units = job->u_hi - job->u_lo;
      batch_plan bp;
      /* the small-d kernel evaluates a unit per group of 32 queries */
      const int query_groups = model->layout != KDE_LAYOUT_TC_SMALL;
      const auto t_plan = std::chrono::steady_clock::now();
      if ((pc->device ? plan_batch_device(model, rep, &pc->plan, (const double *) rep->raw.ptr,
                                          job->ldq_max, job->n_batch, units, query_groups, &bp,
                                          status)
                      : plan_batch_host(&pc->plan, pc->queries, pc->n_query, pc->threads,
                                        job->q_next, job->n_batch, units, rep, &bp, status)) != 0)
        goto cleanup;
      if (job->stats != NULL)
        job->stats->plan_ms += kde_ms_between(t_plan, std::chrono::steady_clock::now());
      job->visiting = bp.visiting;
      job->batch_pairs = bp.pairs;
      job->batch_list_units = bp.units_per_block;
      job->batch_groups = bp.groups;
    }
    /* the next batch may overwrite the raw rows now */
    KDE_CUDA_TRY(cudaEventRecord(rep->raw_free, rep->stream));
    job->pairs += job->visiting ? job->batch_pairs
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
  {
    /* a planned batch's splits share out its lists (block_visits): as many
     * as the lists' length fills, not the shard's */
    int64_t work_units = shard_units;
    if (job->visiting) {
      const double listed = ceil(job->batch_list_units * (double) shard_units /
                                 (double) (job->u_hi - job->u_lo));
      if (listed < (double) work_units) work_units = listed > 1 ? (int64_t) listed : 1;
    }
    splits = choose_splits(job, blocks_q, work_units);
  }
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
  args.visit_groups =
      job->visiting && job->batch_groups ? (const uint8_t *) rep->visit_groups.ptr : NULL;
  args.anchor = (const T *) rep->anchor;
  args.tight_radius2 = model->tight_radius2;
  args.n_discrete = model->n_discrete;
  args.code_row = model->code_row;
  for (int k = 0; k < kMaxDiscrete; k++) {
    args.mismatch[k] = k < model->n_discrete ? (T) model->mismatch[k] : (T) 0;
    args.per_level[k] = k < model->n_discrete ? (T) model->per_level[k] : (T) 0;
  }
  grid = dim3((unsigned) blocks_q, (unsigned) splits, 1);

  if (job->stats != NULL) KDE_CUDA_TRY(cudaEventRecord(job->ev_start, rep->stream));
  ((kde_kernel_fn<T>) job->fn)<<<grid, kThreads, job->smem, rep->stream>>>(args);
  KDE_CUDA_LAUNCHED("main kernel");
  /* threads per query in the merge: up to a warp, or a block where there
   * are more splits than its threads (then the batch has few queries) */
  lanes_log2 = 0;
  while ((1 << lanes_log2) < splits && lanes_log2 < 5) lanes_log2++;
  if (splits > kMergeThreads) lanes_log2 = kMergeBlockLanesLog2;
  merge<<<(unsigned) ceil_div(job->n_batch << lanes_log2, kMergeThreads), kMergeThreads, 0,
          rep->stream>>>(
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

template <typename T>
int prepare_job(const kde_cuda_model *model, kde_device_job *job, kde_status *status)
{
  const int64_t d = model->dim;
  const size_t tsz = sizeof(T);
  const size_t merge_smem = 2 * (size_t) kWarps * kBlockQueries * tsz;
  int64_t n_job; /* rows to cover: the fixed range, or a claimed batch */
  const int64_t units = job->u_hi - job->u_lo;
  double avail, per_query;
  int blocks_per_sm = 0;
  /* aux (and scale, or codes) rows per point */
  const int rows_extra = 1 + model->adaptive + model->n_discrete;
  kde_kernel_fn<T> fn = select_kernel<T>(model);

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
  /* A claimed batch is about 1/kClaimedBatches of the queries, but at
   * least a full wave of query blocks: fewer rows would leave the device
   * half idle and pay a step's fixed costs for little work (a CV loop's
   * n = 1e4 evaluations run in one batch, as before claiming). */
  n_job = job->q_hi - job->q_lo;
  if (job->claim_cursor != NULL) {
    const int64_t wave = (int64_t) job->concurrency * kBlockQueries;
    const int64_t share = ceil_div(n_job, kClaimedBatches);
    if (n_job > wave) n_job = share > wave ? share : wave;
  }

  /* Memory: the resident replica, or one shard, then query batches. */
  avail = job->rep->budget;
  if (model->resident) {
    avail -= (double) model->n_points * point_bytes(model);
    job->shard_units = units > 0 ? units : 1;
  } else {
    int64_t fit = (int64_t) (0.5 * job->rep->budget / (kUnit * point_bytes(model)));
    job->shard_units = units < fit ? units : fit;
    if (job->limit_shard_units > 0 && job->shard_units > job->limit_shard_units)
      job->shard_units = job->limit_shard_units;
    if (job->shard_units < 1) job->shard_units = 1;
    avail -= (double) job->shard_units * kUnit * point_bytes(model);
  }
  /* Half of the rest for query rows (raw and packed coordinates, the
   * accumulated states, a plan's share: its lists at their largest, and
   * when made here the decisions' bits, the boxes and the refinement's
   * state), half for the partial states of the splits. The
   * queries ordered on this device stay there for the whole evaluation. */
  per_query = (double) model->query_elems * tsz +
              (double) (d + model->n_discrete + query_lo_rows(model) + 3) * sizeof(double);
  if (job->prune != NULL) {
    const int64_t all_units = model->n_points / kUnit;
    /* a host plan's lists stop at kPlanDropShare */
    per_query += job->prune->device
                     ? device_plan_bytes_per_query(all_units, d)
                     : (kPlanDropShare * (double) all_units * sizeof(int32_t) + sizeof(int64_t)) /
                           kBlockQueries;
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
    if (job->limit_ldq > 0 && job->ldq_max > job->limit_ldq) job->ldq_max = job->limit_ldq;
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

template <typename T>
int reserve_scratch(const kde_cuda_model *model, kde_device_job *job, kde_status *status)
{
  kde_replica *rep = job->rep;
  const size_t rows = (size_t) job->ldq_max;
  if (buffer_reserve(&rep->raw,
                     rows * (model->dim + model->n_discrete + query_lo_rows(model)) *
                         sizeof(double),
                     status) != 0 ||
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

template int prepare_job<float>(const kde_cuda_model *, kde_device_job *, kde_status *);
template int prepare_job<double>(const kde_cuda_model *, kde_device_job *, kde_status *);
template int reserve_scratch<float>(const kde_cuda_model *, kde_device_job *, kde_status *);
template int reserve_scratch<double>(const kde_cuda_model *, kde_device_job *, kde_status *);
template int enqueue_step<float>(const kde_cuda_model *, const kde_query_set *,
                                 kde_device_job *, kde_status *);
template int enqueue_step<double>(const kde_cuda_model *, const kde_query_set *,
                                  kde_device_job *, kde_status *);

} // namespace kdegpu
