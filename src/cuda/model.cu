/*
 * model.cu: the model's lifetime: device count and info, the training set
 * packed and copied to every device (or kept on the host to stream), the
 * device buffers that evaluations reuse, and freeing it all.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "kde_cuda_common.h"
#include "kernel_facts.cuh"
#include "kernels.cuh"
#include "layout.cuh"
#include "model.cuh"
#include "plan.cuh"
#include "data_summary.h"
#include "prune.h"
#include "spatial.h"
#include "spread.cuh"
#include "staged_copy.cuh"
#include "tuning.cuh"
#include "tuning_hooks.h"

using namespace kdegpu;

static_assert(kUnit == KDE_TILE_POINTS,
              "the CUDA unit is the fit's spatial tile (kde_backend.h)");

extern "C" int kde_cuda_compiled(void) { return 1; }

extern "C" int kde_cuda_device_count(kde_status *status)
{
  int count = 0;
  cudaError_t err;
  kde_status_clear(status);
  err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void) cudaGetLastError();
    kde_status_set(status, KDE_ERR_UNAVAILABLE,
                   "no usable CUDA device: cudaGetDeviceCount failed with %s"
                   " (%s); check that an NVIDIA GPU and its driver are"
                   " installed and visible (CUDA_VISIBLE_DEVICES)",
                   cudaGetErrorName(err), cudaGetErrorString(err));
    return 0;
  }
  if (count <= 0) {
    kde_status_set(status, KDE_ERR_UNAVAILABLE,
                   "no usable CUDA device: the driver reports 0 devices");
    return 0;
  }
  return count;
}

extern "C" void kde_cuda_get_device_info(int device, kde_cuda_device_info *info,
                                         kde_status *status)
{
  cudaDeviceProp prop;
  size_t free_b = 0, total_b = 0;
  int count, prev = -1;
  kde_status_clear(status);
  if (info == NULL) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "`info` must not be NULL");
    return;
  }
  memset(info, 0, sizeof *info);
  count = kde_cuda_device_count(status);
  if (count == 0) return;
  if (device < 0 || device >= count) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "`device` must be in 0..%d, not %d", count - 1, device);
    return;
  }
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  KDE_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  KDE_CUDA_TRY(cudaSetDevice(device));
  KDE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
  snprintf(info->name, sizeof info->name, "%s", prop.name);
  info->total_memory = (double) total_b;
  info->free_memory = (double) free_b;
  info->compute_major = prop.major;
  info->compute_minor = prop.minor;
  info->multiprocessors = prop.multiProcessorCount;
cleanup:
  if (prev >= 0) (void) cudaSetDevice(prev);
}

FILE *kde_trace_file(void)
{
  static FILE *const file = [] {
    const char *path = getenv("KDEGPU_TRACE");
    return path != NULL && path[0] != '\0' ? fopen(path, "a") : (FILE *) NULL;
  }();
  return file;
}

namespace kdegpu {

/* The wall times of a model's creation, phase by phase, for KDEGPU_TRACE
 * (bench/fit.R's profile of a fit at 1e8 points). */
struct phase_trace {
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  char text[400] = "";
  size_t length = 0;
  void mark(const char *phase)
  {
    if (kde_trace_file() == NULL || length >= sizeof text) return;
    const auto now = std::chrono::steady_clock::now();
    length += (size_t) snprintf(text + length, sizeof text - length, " %s_ms=%.1f", phase,
                                kde_ms_between(last, now));
    last = now;
  }
};

void buffer_release(kde_buffer *buffer)
{
  if (buffer->ptr != NULL) (void) cudaFree(buffer->ptr);
  buffer->ptr = NULL;
  buffer->bytes = 0;
}

/* Makes `buffer` (on the current device) hold at least `bytes`. */
int buffer_reserve(kde_buffer *buffer, size_t bytes, kde_status *status)
{
  if (buffer->ptr != NULL && buffer->bytes >= bytes) return 0;
  buffer_release(buffer);
  KDE_CUDA_TRY(cudaMalloc(&buffer->ptr, bytes > 0 ? bytes : 1));
  buffer->bytes = bytes;
  return 0;
cleanup:
  return -1;
}

int copy_to_replica(kde_replica *rep, void *dst, const void *src, size_t bytes,
                    kde_status *status)
{
  KDE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, rep->stream));
  return 0;
cleanup:
  return -1;
}

size_t host_arrays_bytes(const host_array *parts, int n_parts)
{
  size_t bytes = 0;
  for (int k = 0; k < n_parts; k++) bytes += (size_t) parts[k].count * sizeof(double);
  return bytes;
}

int copy_parts_to_replica(kde_replica *rep, void *dst, const host_array *parts, int n_parts,
                          kde_status *status)
{
  char *at = (char *) dst;
  for (int k = 0; k < n_parts; k++) {
    const size_t bytes = (size_t) parts[k].count * sizeof(double);
    if (bytes > 0 && copy_to_replica(rep, at, parts[k].data, bytes, status) != 0) return -1;
    at += bytes;
  }
  return 0;
}

int keep_arrays(kde_replica *rep, double **slot, const host_array *parts, int n_parts,
                kde_status *status)
{
  const size_t bytes = host_arrays_bytes(parts, n_parts);
  double *dst = NULL;
  if (*slot != NULL) return 1;
  if ((double) bytes > 0.25 * rep->budget) return 0;
  KDE_CUDA_TRY(cudaMalloc((void **) &dst, bytes > 0 ? bytes : 1));
  if (copy_parts_to_replica(rep, dst, parts, n_parts, status) != 0) goto cleanup;
  *slot = dst;
  rep->budget -= (double) bytes;
  return 1;
cleanup:
  if (dst != NULL) (void) cudaFree(dst);
  return -1;
}

void split_rows(kde_cuda_model *model, int64_t total, device_share *shares)
{
  const int64_t each = (total + model->n_devices - 1) / model->n_devices;
  for (int r = 0; r < model->n_devices; r++) {
    device_share *s = &shares[r];
    s->rep = &model->rep[r];
    s->first = (int64_t) r * each < total ? (int64_t) r * each : total;
    s->n = total - s->first < each ? total - s->first : each;
    s->done = 0;
    s->batch = 0;
  }
}

int64_t finish_round(device_share *shares, int n_shares, kde_status *status)
{
  int64_t finished = 0;
  for (int r = 0; r < n_shares; r++) {
    device_share *s = &shares[r];
    const int64_t rows = next_rows(*s);
    if (rows <= 0) continue;
    KDE_CUDA_TRY(cudaSetDevice(s->rep->device));
    KDE_CUDA_TRY(cudaStreamSynchronize(s->rep->stream));
    s->done += rows;
    finished += rows;
  }
  return finished;
cleanup:
  return -1;
}

/* The evaluation scratch of a replica (its device is current). */
size_t scratch_bytes(const kde_replica *rep)
{
  return rep->raw.bytes + rep->query.bytes + rep->part.bytes + rep->acc.bytes +
         rep->shard.bytes + rep->visit.bytes + rep->visit_offset.bytes + rep->visit_groups.bytes +
         rep->plan_box.bytes + rep->plan_mask.bytes + rep->plan_count.bytes +
         rep->plan_temp.bytes + rep->plan_part.bytes + rep->plan_skipped.bytes +
         rep->plan_query.bytes;
}
void scratch_release(kde_replica *rep)
{
  buffer_release(&rep->raw);
  buffer_release(&rep->query);
  buffer_release(&rep->part);
  buffer_release(&rep->acc);
  buffer_release(&rep->shard);
  buffer_release(&rep->visit);
  buffer_release(&rep->visit_offset);
  buffer_release(&rep->visit_groups);
  buffer_release(&rep->plan_box);
  buffer_release(&rep->plan_mask);
  buffer_release(&rep->plan_count);
  buffer_release(&rep->plan_temp);
  buffer_release(&rep->plan_part);
  buffer_release(&rep->plan_skipped);
  buffer_release(&rep->plan_query);
}

/* The queries' whitening on a replica's device, uploaded when it differs
 * from what is there (a fit keeps one, so usually once per model). */
int sync_whitening(kde_cuda_model *model, const kde_query_set *query, kde_replica *rep,
                   kde_status *status)
{
  const int64_t d = model->dim;
  const size_t bytes = (size_t) (d + d * d) * sizeof(double);
  if (query->transform == NULL) return 0;
  if (model->whitening == NULL) {
    model->whitening = (double *) malloc(bytes);
    if (model->whitening == NULL) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "out of host memory allocating %.0f bytes for the whitening",
                     (double) bytes);
      return -1;
    }
  }
  if (model->whitening_serial == 0 ||
      memcmp(model->whitening, query->center, d * sizeof(double)) != 0 ||
      memcmp(model->whitening + d, query->transform, d * d * sizeof(double)) != 0) {
    memcpy(model->whitening, query->center, d * sizeof(double));
    memcpy(model->whitening + d, query->transform, d * d * sizeof(double));
    model->whitening_serial++;
  }
  if (rep->whitening_serial == model->whitening_serial) return 0;
  KDE_CUDA_TRY(cudaSetDevice(rep->device));
  if (rep->whitening == NULL) KDE_CUDA_TRY(cudaMalloc((void **) &rep->whitening, bytes));
  if (copy_to_replica(rep, rep->whitening, model->whitening, bytes, status) != 0) return -1;
  rep->whitening_serial = model->whitening_serial;
  return 0;
cleanup:
  return -1;
}


} // namespace kdegpu

extern "C" void kde_cuda_model_free(kde_cuda_model *model)
{
  int prev = -1;
  if (model == NULL) return;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  if (model->rep != NULL) {
    for (int r = 0; r < model->n_devices; r++) {
      kde_replica *rep = &model->rep[r];
      if (rep->stream == NULL) continue; /* never set up: nothing on it */
      if (cudaSetDevice(rep->device) != cudaSuccess) continue;
      (void) cudaStreamSynchronize(rep->stream);
      if (rep->upload != NULL) {
        (void) cudaStreamSynchronize(rep->upload);
        (void) cudaStreamDestroy(rep->upload);
      }
      (void) cudaStreamDestroy(rep->stream);
      if (rep->raw_ready != NULL) (void) cudaEventDestroy(rep->raw_ready);
      if (rep->raw_free != NULL) (void) cudaEventDestroy(rep->raw_free);
      if (rep->train != NULL) (void) cudaFree(rep->train);
      if (rep->model_center != NULL) (void) cudaFree(rep->model_center);
      if (rep->whitening != NULL) (void) cudaFree(rep->whitening);
      if (rep->units != NULL) (void) cudaFree(rep->units);
      if (rep->groups != NULL) (void) cudaFree(rep->groups);
      if (rep->anchor != NULL) (void) cudaFree(rep->anchor);
      if (rep->deriv_train != NULL) (void) cudaFree(rep->deriv_train);
      if (rep->cdf_points != NULL) (void) cudaFree(rep->cdf_points);
      if (rep->sample_points != NULL) (void) cudaFree(rep->sample_points);
      scratch_release(rep);
    }
  }
  (void) cudaGetLastError();
  free(model->rep);
  free(model->host_train);
  free(model->center);
  free(model->residual);
  free(model->whitening);
  free(model->unit_lo);
  free(model->unit_hi);
  free(model->unit_log_weight);
  free(model->unit_log_rest);
  free(model->unit_centroid);
  free(model->unit_spread2);
  free(model->unit_scale_lo);
  free(model->unit_scale_hi);
  kde_unit_spread_free(&model->spread);
  kde_prune_groups_free(&model->unit_groups);
  kde_prune_groups_free(&model->device_groups);
  free(model);
  if (prev >= 0) (void) cudaSetDevice(prev);
}

extern "C" kde_cuda_model *kde_cuda_model_create(const kde_training_set *train,
                                                 int precision,
                                                 const int *devices,
                                                 int n_devices,
                                                 double memory_budget,
                                                 double max_rounding,
                                                 kde_status *status)
{
  return kde_cuda_model_create_tuned(train, precision, devices, n_devices, memory_budget,
                                     max_rounding, NULL, status);
}

extern "C" const char *kde_cuda_model_path(const kde_cuda_model *model)
{
  if (model->layout != KDE_LAYOUT_PLAIN) return "tensor cores";
  return model->expanded ? "expanded form" : "difference form";
}

/* The predicted rounding of a density, relative, in the Gaussian's
 * expanded form, aux + q.x - |q|^2 / 2 with aux = log2 w - |x|^2 / 2: its
 * terms reach R^2 / 2, R the farthest point from the centre in storage
 * units, each rounded at the precision's epsilon, and a pair's level sums
 * d + 1 of them. Measured (tools/gpu-tests/harness "forms", n = 1e6, single
 * against double, the largest error of a density over 5e4 queries): 0.38
 * eps R^2 on the tensor cores and 0.53 on the FMA units at d = 3, 1.1-1.3
 * at d = 16, 2.0-3.8 at d = 64; (0.4 + d / 20) eps R^2 bounds them. Beyond
 * it the model takes the difference form |q - x|^2, whose rounding is
 * relative to each pair's own distance. */
static double expanded_rounding(const kde_training_set *train, const kde_cuda_model *model)
{
  const double eps = model->precision == KDE_PRECISION_SINGLE ? 0x1p-24 : 0x1p-53;
  const double factor = 0.4 + (double) model->dim / 20;
  return factor * eps * train_max_norm2(train, model);
}

/* kTightRadius2, or the environment's KDEGPU_TIGHT_RADIUS2 (a number from
 * 0 to kTightRadius2; 0: every tile in the difference form), so that
 * benchmarks and tests can compare the two forms in one process; anything
 * else is ignored (a larger radius would round beyond what was measured). */
static float tight_radius2()
{
  return (float) kde_env_number("KDEGPU_TIGHT_RADIUS2", kTightRadius2, 0, kTightRadius2);
}

extern "C" double kde_cuda_model_rounding(const kde_cuda_model *model)
{
  return model->expanded_rounding;
}

extern "C" int64_t kde_cuda_model_discrete(const kde_cuda_model *model)
{
  return model->n_discrete;
}

extern "C" kde_cuda_model *kde_cuda_model_create_tuned(const kde_training_set *train,
                                                       int precision,
                                                       const int *devices,
                                                       int n_devices,
                                                       double memory_budget,
                                                       double max_rounding,
                                                       const kde_cuda_tuning *tuning,
                                                       kde_status *status)
{
  kde_cuda_model *model = NULL;
  int count = 0, prev = -1, ok = 0, mma_ok = 1, expanded_single, prunes;
  size_t train_bytes = 0, unit_bytes = 0, min_smem_optin = 0, anchor_bytes = 0;
  void *host_anchor = NULL; /* an anchored model's anchors until uploaded */
  double *anchor_lo = NULL, *anchor_hi = NULL; /* and the boxes they centre */
  spread_set spread;        /* an anchored model's spread training set */
  kde_training_set without_residual; /* the caller's, where residuals do not serve */
  double min_budget = 0;
  phase_trace trace;

  kde_status_clear(status);
  memset(&spread, 0, sizeof spread);
  if (train == NULL || train->train == NULL || train->weight == NULL ||
      train->log_weight == NULL || train->n_train < 1 || train->dim < 1) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "the training set must have n_train >= 1, dim >= 1 and"
                   " non-NULL coordinates and weights");
    return NULL;
  }
  if (train->kernel < 0 || train->kernel >= KDE_N_KERNELS) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "unknown kernel code %d",
                   train->kernel);
    return NULL;
  }
  if (precision != KDE_PRECISION_DOUBLE && precision != KDE_PRECISION_SINGLE) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "unknown precision code %d",
                   precision);
    return NULL;
  }
  if (train->dim > (1 << 20)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "dim = %lld is beyond the CUDA backend's limit of 2^20",
                   (long long) train->dim);
    return NULL;
  }
  if (devices == NULL || n_devices < 1) {
    kde_status_set(status, KDE_ERR_ARGUMENT, "at least one device is needed");
    return NULL;
  }
  count = kde_cuda_device_count(status);
  if (count == 0) return NULL;
  for (int r = 0; r < n_devices; r++) {
    if (devices[r] < 0 || devices[r] >= count) {
      kde_status_set(status, KDE_ERR_ARGUMENT,
                     "device %d does not exist: this machine has %d CUDA"
                     " device%s (0..%d)",
                     devices[r], count, count == 1 ? "" : "s", count - 1);
      return NULL;
    }
  }

  KDE_CUDA_TRY(cudaGetDevice(&prev));
  KDE_HOST_ALLOC(model, 1, "the model");
  model->kernel = train->kernel;
  model->precision = precision;
  model->n_train = train->n_train;
  model->dim = train->dim;
  model->n_points = (train->n_train + kUnit - 1) / kUnit * kUnit;
  model->elem = precision == KDE_PRECISION_SINGLE ? sizeof(float) : sizeof(double);
  model->scale = kde_log2_coordinate_scale(train->kernel);
  model->adaptive = train->inv_scale2 != NULL;
  model->n_discrete = (int) train->n_discrete;
  if (train->n_discrete > 0 &&
      (train->n_discrete > kMaxDiscrete || train->dim > kSmallMaxDim || train->kernel != KDE_GAUSSIAN ||
       model->adaptive || train->codes == NULL || train->discrete_penalty == NULL)) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: discrete columns need the Gaussian, a fixed bandwidth,"
                   " d <= 4 and at most %d of them", kMaxDiscrete);
    goto cleanup;
  }
  for (int k = 0; k < model->n_discrete; k++) {
    model->mismatch[k] = train->discrete_penalty[k] * kLog2e;
    model->per_level[k] = train->discrete_penalty[train->n_discrete + k] * kLog2e;
  }
  model->log_lower_factor = kde_discrete_log_lower_factor(train);
  model->n_devices = n_devices;
  KDE_HOST_ALLOC(model->rep, n_devices, "the device list");
  KDE_HOST_ALLOC(model->center, model->dim, "the training mean");

  kde_column_means(train->train, train->n_train, model->dim, train->host_threads,
                   model->center);
  /* the expanded form would need a per-pair |q|^2 / lambda^2: adaptive
   * models take the difference form */
  model->expanded_rounding = NAN;
  /* discrete columns: the difference form (kernel_discrete.cu) */
  if (train->kernel == KDE_GAUSSIAN && !model->adaptive && model->n_discrete == 0) {
    model->expanded_rounding = expanded_rounding(train, model);
    model->rounding_ok = tuning != NULL && tuning->form != 0
                             ? tuning->form == 1
                             : model->expanded_rounding <= max_rounding;
  }
  model->expanded = model->rounding_ok && train->dim >= 3;
  trace.mark("centre_rounding");

  min_budget = -1;
  mma_ok = 1;
  for (int r = 0; r < n_devices; r++) {
    kde_replica *rep = &model->rep[r];
    size_t free_b = 0, total_b = 0;
    int value = 0;
    rep->device = devices[r];
    KDE_CUDA_TRY(cudaSetDevice(rep->device));
    KDE_CUDA_TRY(cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount,
                                        rep->device));
    rep->multiprocessors = value;
    KDE_CUDA_TRY(cudaDeviceGetAttribute(
        &value, cudaDevAttrMaxSharedMemoryPerBlockOptin, rep->device));
    rep->smem_optin = (size_t) value;
    KDE_CUDA_TRY(cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor,
                                        rep->device));
    if (value < 8) mma_ok = 0; /* mma.sync m16n8k16 (f16, bf16) needs sm_80 */
    KDE_CUDA_TRY(cudaMemGetInfo(&free_b, &total_b));
    rep->budget = budget_bytes(memory_budget, free_b);
    KDE_CUDA_TRY(cudaStreamCreateWithFlags(&rep->stream, cudaStreamNonBlocking));
    KDE_CUDA_TRY(cudaStreamCreateWithFlags(&rep->upload, cudaStreamNonBlocking));
    KDE_CUDA_TRY(cudaEventCreateWithFlags(&rep->raw_ready, cudaEventDisableTiming));
    KDE_CUDA_TRY(cudaEventCreateWithFlags(&rep->raw_free, cudaEventDisableTiming));
    KDE_CUDA_TRY(cudaMalloc((void **) &rep->model_center, model->dim * sizeof(double)));
    if (copy_to_replica(rep, rep->model_center, model->center, model->dim * sizeof(double),
                        status) != 0)
      goto cleanup;
    if (min_budget < 0 || rep->budget < min_budget) min_budget = rep->budget;
    if (r == 0 || rep->smem_optin < min_smem_optin) min_smem_optin = rep->smem_optin;
  }

  trace.mark("devices");

  /* Storage layout: a tensor-core one for the single-precision Gaussian at
   * d = kTcSmallDim and d >= kTcWideMinDim (training points within fp16's
   * range, and the block's shared memory within the device's: d <= 288 on
   * an H100, where even at one block per SM it is 2.8x the FMA kernel at d =
   * 208), in the expanded form (their MMA gives q.x), else 32-point tiles
   * of (d + 1) rows (d + 2 for an adaptive model, which has no tensor-core
   * kernel and takes the FMA kernels). */
  expanded_single = precision == KDE_PRECISION_SINGLE && model->expanded;
  if (tuning != NULL && tuning->no_mma) mma_ok = 0;
  model->layout = KDE_LAYOUT_PLAIN;
  if (expanded_single && mma_ok && model->dim == kTcSmallDim)
    model->layout = KDE_LAYOUT_TC_SMALL;
  if (expanded_single && mma_ok && model->dim >= kTcWideMinDim &&
      tc_wide_smem_bytes(ceil_div(model->dim, 16)) <= min_smem_optin &&
      train_fits_f16(train, model))
    model->layout = KDE_LAYOUT_TC_WIDE;
  model->code_row = model->dim; /* the query's coordinates, then its codes */
  if (model->layout == KDE_LAYOUT_TC_WIDE) {
    model->k16 = (int) ceil_div(model->dim, 16);
    model->tile_elems = (int64_t) model->k16 * 512 + kTileWidth;
    model->code_row = (int64_t) model->k16 * 16 + 1; /* + the row scale */
  } else if (model->layout == KDE_LAYOUT_TC_SMALL) {
    model->tile_elems = (int64_t) kTileWidth * kTcPointWords;
  } else {
    model->tile_elems = (model->dim + 1 + model->adaptive + model->n_discrete) * kTileWidth;
  }
  /* Pruning: the FMA kernel for d <= 4 and the d = 3 tensor-core kernel
   * visit per query block only the units that can matter, when the
   * training set comes in a spatial order whose tiles are the units. */
  prunes = train->tile_size == kUnit && model->dim <= kSmallMaxDim &&
           (model->layout == KDE_LAYOUT_PLAIN || model->layout == KDE_LAYOUT_TC_SMALL);
  model->anchored = model->layout == KDE_LAYOUT_PLAIN && !model->expanded &&
                    model->dim <= kSmallMaxDim && !(tuning != NULL && tuning->no_anchor);
  /* The points' residuals serve an anchored double model, which keeps
   * double's digits relative to its anchors; the others store the points
   * as their queries are formed, without them. */
  if (train->residual != NULL && !(model->anchored && precision == KDE_PRECISION_DOUBLE)) {
    without_residual = *train;
    without_residual.residual = NULL;
    train = &without_residual;
  }
  if (train->residual != NULL) {
    KDE_HOST_ALLOC(model->residual, train->n_train * model->dim, "the points' residuals");
    kde_copy_bytes(model->residual, train->residual,
                   (size_t) (train->n_train * model->dim) * sizeof(float), train->host_threads);
    model->made_from = train->train;
  }
  /* An anchored model's runs that span gaps, each split into units of
   * their own (spread.cu): from here on the training set is the laid-out
   * one (model->n_train stays the caller's count) */
  if (prunes && model->anchored) {
    /* out of host memory for it: the plain layout, which needs none */
    if (spread_training_set(train, &spread, status) != 0) kde_status_clear(status);
    if (spread.layout.n_positions > 0) {
      model->spread = spread.layout;
      model->n_points = spread.layout.n_positions;
      train = &spread.set;
    }
  }
  trace.mark("layout"); /* the residuals' copy and the spread layout */
  /* The units' boxes, for the pruning (the anchors have their own) */
  if (prunes) {
    KDE_HOST_ALLOC(model->unit_lo, model->n_points / kUnit * model->dim, "the units' boxes");
    KDE_HOST_ALLOC(model->unit_hi, model->n_points / kUnit * model->dim, "the units' boxes");
    kde_tile_boxes(train->train, train->n_train, model->dim, kUnit, train->host_threads,
                   model->unit_lo, model->unit_hi);
    if (train->residual != NULL) /* the exact points' */
      kde_tile_boxes_widen(train->residual, train->n_train, model->dim, kUnit,
                           train->host_threads, model->unit_lo, model->unit_hi);
  }
  if (model->anchored) model->code_row = 2 * model->dim; /* hi and lo parts */
  /* (read by the single Gaussian's fixed-bandwidth kernel at d = 3) */
  model->tight_radius2 =
      model->anchored && precision == KDE_PRECISION_SINGLE ? tight_radius2() : 0.0f;
  trace.mark("boxes");
  model->query_elems = model->code_row + model->n_discrete;
  if (model->anchored) {
    const int64_t n_anchors = model->n_points / kAnchorPoints;
    KDE_HOST_ALLOC(anchor_lo, n_anchors * model->dim, "the anchors' boxes");
    KDE_HOST_ALLOC(anchor_hi, n_anchors * model->dim, "the anchors' boxes");
    anchor_boxes(train, model, anchor_lo, anchor_hi);
    anchor_bytes = (size_t) (n_anchors * 2 * model->dim) * model->elem;
    host_anchor = malloc(anchor_bytes);
    if (host_anchor == NULL) {
      kde_status_set(status, KDE_ERR_ALLOC, "out of host memory for the training set's anchors");
      goto cleanup;
    }
    if (precision == KDE_PRECISION_SINGLE)
      point_anchors<float>(model, anchor_lo, anchor_hi, (float *) host_anchor);
    else
      point_anchors<double>(model, anchor_lo, anchor_hi, (double *) host_anchor);
  }
  trace.mark("anchors");

  unit_bytes = kUnit * point_bytes(model);
  train_bytes = (size_t) model->n_points * point_bytes(model);
  {
    size_t n_elems = (size_t) (model->n_points / kTileWidth) * model->tile_elems;
    model->host_train = malloc(n_elems * model->elem);
    if (model->host_train == NULL) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "out of host memory allocating %.0f bytes for the"
                     " training set", (double) n_elems * model->elem);
      goto cleanup;
    }
  }
  if (model->layout == KDE_LAYOUT_TC_SMALL) {
    pack_train_tc_small(train, model, (uint32_t *) model->host_train);
  } else if (model->layout == KDE_LAYOUT_TC_WIDE) {
    if (pack_train_tc_wide(train, model, (uint32_t *) model->host_train) != 0) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "out of host memory packing the training set");
      goto cleanup;
    }
  } else if (precision == KDE_PRECISION_SINGLE)
    pack_train<float>(train, model, (const float *) host_anchor, (float *) model->host_train);
  else
    pack_train<double>(train, model, (const double *) host_anchor,
                       (double *) model->host_train);

  trace.mark("pack");

  /* Resident when the training set takes at most half the budget; otherwise
   * stream shards of at most half the budget from the host copy. */
  model->resident = (double) train_bytes <= 0.5 * min_budget;
  if (!model->resident && 0.5 * min_budget < (double) unit_bytes) {
    kde_status_set(status, KDE_ERR_ALLOC,
                   "the GPU memory budget (%.0f bytes) is too small: streaming"
                   " the training set needs more than %.0f bytes per device;"
                   " raise options(kdegpu.gpu_memory = ...)",
                   min_budget, 2.0 * unit_bytes);
    goto cleanup;
  }
  if (model->resident) {
    for (int r = 0; r < n_devices; r++) {
      kde_replica *rep = &model->rep[r];
      KDE_CUDA_TRY(cudaSetDevice(rep->device));
      KDE_CUDA_TRY(cudaMalloc(&rep->train, train_bytes));
      /* through pinned chunks (the driver's pageable copy: 6.5 GB/s) */
      if (upload_staged(rep, rep->train, model->host_train, train_bytes, train->host_threads,
                        status) != 0)
        goto cleanup;
      KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
    }
    free(model->host_train);
    model->host_train = NULL;
  }
  if (model->anchored) {
    for (int r = 0; r < n_devices; r++) {
      kde_replica *rep = &model->rep[r];
      KDE_CUDA_TRY(cudaSetDevice(rep->device));
      KDE_CUDA_TRY(cudaMalloc(&rep->anchor, anchor_bytes));
      if (upload_staged(rep, rep->anchor, host_anchor, anchor_bytes, train->host_threads,
                        status) != 0)
        goto cleanup;
      KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
      rep->budget -= (double) anchor_bytes;
    }
  }

  trace.mark("upload");

  /* Pruning: the units' weights beside their boxes */
  if (prunes) {
    const int64_t n_units = model->n_points / kUnit;
    KDE_HOST_ALLOC(model->unit_log_weight, n_units, "the units' weights");
    KDE_HOST_ALLOC(model->unit_log_rest, n_units, "the units' weights");
    kde_tile_log_weights(train->weight, train->n_train, kUnit, train->host_threads,
                         model->unit_log_weight, model->unit_log_rest);
    if (kde_prune_groups_make(model->dim, n_units, model->unit_lo, model->unit_hi,
                              model->unit_log_weight, model->unit_log_rest,
                              &model->unit_groups) != 0 ||
        kde_prune_groups_make_sized(model->dim, n_units, plan_group_tiles(n_units),
                                    model->unit_lo, model->unit_hi, model->unit_log_weight,
                                    model->unit_log_rest, &model->device_groups) != 0) {
      kde_status_set(status, KDE_ERR_ALLOC, "out of host memory for the units' groups");
      goto cleanup;
    }
    if (model->adaptive) {
      KDE_HOST_ALLOC(model->unit_scale_lo, n_units, "the units' scales");
      KDE_HOST_ALLOC(model->unit_scale_hi, n_units, "the units' scales");
      kde_tile_boxes(train->inv_scale2, train->n_train, 1, kUnit, 1, model->unit_scale_lo,
                     model->unit_scale_hi);
    } else {
      KDE_HOST_ALLOC(model->unit_centroid, n_units * model->dim, "the units' centroids");
      KDE_HOST_ALLOC(model->unit_spread2, n_units, "the units' centroids");
      kde_tile_centroids(train->train, train->weight, train->n_train, model->dim, kUnit,
                         train->host_threads, model->unit_centroid, model->unit_spread2);
    }
    /* and on every device, for the plans made there (plan.cu) */
    /* boxes and weights; an adaptive model's scales, or the centroids */
    const int64_t box = n_units * model->dim;
    const host_array unit_parts[6] = {
        {model->unit_lo, box},
        {model->unit_hi, box},
        {model->unit_log_weight, n_units},
        {model->unit_log_rest, n_units},
        {model->adaptive ? model->unit_scale_lo : model->unit_centroid,
         model->adaptive ? n_units : box},
        {model->adaptive ? model->unit_scale_hi : model->unit_spread2, n_units}};
    /* the groups, for the grouped plan */
    const kde_prune_groups *g = &model->device_groups;
    const host_array group_parts[4] = {{g->lo, g->n_groups * model->dim},
                                       {g->hi, g->n_groups * model->dim},
                                       {g->log_weight_sum, g->n_groups},
                                       {g->log_rest_sum, g->n_groups}};
    for (int r = 0; r < n_devices; r++) {
      kde_replica *rep = &model->rep[r];
      KDE_CUDA_TRY(cudaSetDevice(rep->device));
      KDE_CUDA_TRY(cudaMalloc((void **) &rep->units, host_arrays_bytes(unit_parts, 6)));
      KDE_CUDA_TRY(cudaMalloc((void **) &rep->groups, host_arrays_bytes(group_parts, 4)));
      if (copy_parts_to_replica(rep, rep->units, unit_parts, 6, status) != 0 ||
          copy_parts_to_replica(rep, rep->groups, group_parts, 4, status) != 0)
        goto cleanup;
    }
  }
  trace.mark("units");
  if (kde_trace_file() != NULL) {
    fprintf(kde_trace_file(), "model n_train=%lld dim=%lld%s\n", (long long) model->n_train,
            (long long) model->dim, trace.text);
    fflush(kde_trace_file());
  }
  ok = 1;

cleanup:
  free(host_anchor);
  free(anchor_lo);
  free(anchor_hi);
  spread_set_free(&spread);
  if (prev >= 0) (void) cudaSetDevice(prev);
  if (!ok) {
    kde_cuda_model_free(model);
    return NULL;
  }
  return model;
}
