/*
 * cdf.cu: the kernel estimate's CDF on the fit's GPUs (the contract:
 * cdf.h), with the CPU's arithmetic (kde_cdf_term, kde_cdf_without_sum),
 * double throughout.
 *
 * The queries are split into one contiguous range per device of the
 * model (kde_cuda_model's replicas); each device sums its range in
 * batches under its memory budget. Thread (query i, split s) sums the
 * terms of training points [s * split_len, (s + 1) * split_len); a second
 * kernel adds a query's splits in split order. The splits depend on the
 * training set's size only, so a query's CDF is the same bits on every
 * device, in every batch and under every budget. The training points,
 * their weights and factors stay on a device once they take at most a
 * quarter of its budget; otherwise each batch streams them in shards of
 * whole splits, which sum the same terms in the same order.
 */
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cdf.h"
#include "kde_cuda_common.h"
#include "model.cuh"

using kdegpu::copy_to_replica;
using kdegpu::device_share;
using kdegpu::host_array;
using kdegpu::point_bytes;

namespace {

constexpr int kThreads = 128;
/* Kernel terms per batch between interrupt polls: well under a second
 * (a Gaussian term costs about as much as a double erfc). */
constexpr double kTermsPerBatch = 2.0e10;
/* Training points per split at least, so that a thread's loop outweighs
 * its start; and at most this many splits (a few per SM of a large GPU
 * when a quantile's bisection asks for one query at a time). */
constexpr int64_t kMinSplitLength = 256;
constexpr int64_t kMaxSplits = 512;

/* Splits [0, n_splits) of the points in `p` (a shard: p.n_train points from
 * split `first_split` on), each query's partial sums at partial[split *
 * rows + i]. */
__global__ void cdf_split_sums(const kde_cdf_problem p, const double *query,
                               int64_t rows, int64_t first_split, int64_t split_len,
                               double scale, double *partial)
{
  const int64_t i = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  if (i >= rows) return;
  const int64_t split = blockIdx.y;
  const double *x = query + i;
  const double fixed = kde_cdf_without_sum(&p, x, rows);
  double total = 0;
  if (fixed < 0) {
    const int64_t begin = split * split_len;
    const int64_t end = begin + split_len < p.n_train ? begin + split_len : p.n_train;
    for (int64_t j = begin; j < end; j++) total += kde_cdf_term(&p, x, rows, j, scale);
  } else if (split + first_split == 0) {
    total = fixed;
  }
  partial[(split + first_split) * rows + i] = total;
}

__global__ void cdf_add_splits(const double *partial, int64_t rows, int64_t splits,
                               double *out)
{
  const int64_t i = (int64_t) blockIdx.x * kThreads + threadIdx.x;
  if (i >= rows) return;
  double total = 0;
  for (int64_t s = 0; s < splits; s++) total += partial[s * rows + i];
  out[i] = kde_cdf_clamp(total);
}

/* The points' arrays in one allocation: coordinates (points x dim,
 * column-major), weights, and an adaptive fit's factors. */
size_t points_bytes(const kde_cdf_problem *p, int64_t points)
{
  return (size_t) (points * (p->dim + 1 + (p->scale != NULL ? 1 : 0))) * sizeof(double);
}

/* Copies points [first, first + count) of `p` into `dst` (on the device)
 * in that layout. */
int upload_points(const kde_cdf_problem *p, int64_t first, int64_t count, double *dst,
                  cudaStream_t stream, kde_status *status)
{
  KDE_CUDA_TRY(cudaMemcpy2DAsync(dst, (size_t) count * sizeof(double), p->train + first,
                                 (size_t) p->n_train * sizeof(double),
                                 (size_t) count * sizeof(double), (size_t) p->dim,
                                 cudaMemcpyHostToDevice, stream));
  KDE_CUDA_TRY(cudaMemcpyAsync(dst + count * p->dim, p->weight + first,
                               (size_t) count * sizeof(double), cudaMemcpyHostToDevice,
                               stream));
  if (p->scale != NULL)
    KDE_CUDA_TRY(cudaMemcpyAsync(dst + count * (p->dim + 1), p->scale + first,
                                 (size_t) count * sizeof(double), cudaMemcpyHostToDevice,
                                 stream));
  return 0;
cleanup:
  return -1;
}

/* The problem as a kernel reads it: its small arrays at `small` (on the
 * device: bandwidth, lower, upper, image signs and shifts, then the image
 * counts), its points (`count` from `points`, in upload_points' layout). */
kde_cdf_problem device_problem(const kde_cdf_problem *p, double *small, const double *points,
                               int64_t count, int64_t n_images)
{
  kde_cdf_problem dp = *p;
  const int64_t d = p->dim;
  dp.n_train = count;
  dp.train = points;
  dp.weight = points + count * d;
  dp.scale = p->scale != NULL ? points + count * (d + 1) : NULL;
  dp.bandwidth = small;
  dp.lower = small + d;
  dp.upper = small + 2 * d;
  dp.image_sign = small + 3 * d;
  dp.image_shift = small + 3 * d + n_images;
  dp.image_count = (const int64_t *) (small + 3 * d + 2 * n_images);
  return dp;
}

/* One device's buffers for its share of the queries (device_share). */
struct cdf_device {
  int64_t shard_splits;                           /* splits per shard */
  double *small, *points, *query, *partial, *out; /* on the device; points:
                                                     a shard unless resident */
  const double *resident;                         /* the replica's copy */
};

} // namespace

extern "C" void kde_cuda_cdf(kde_cuda_model *model, const kde_cdf_problem *p,
                             const double *query, int64_t n_query,
                             kde_interrupt_probe interrupted, double *out,
                             kde_status *status)
{
  cdf_device *dev = NULL;
  device_share *share = NULL;
  int prev = -1, n_dev = 0;
  int64_t n_images = 0, splits = 1, split_len = 0;
  size_t small_bytes = 0;
  double *host_small = NULL;
  const int64_t n = p->n_train, d = p->dim;
  const double scale = kde_scale(p->kernel, 1);

  if (!kde_cdf_problem_valid(p, n_query, status) || n_query == 0) return;
  if (model == NULL || model->n_train != n || model->n_devices < 1) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: the CDF's training set is not the CUDA model's");
    return;
  }
  n_images = kde_cdf_image_total(p);
  /* splits by the training set alone (see the top of the file) */
  split_len = (n + kMaxSplits - 1) / kMaxSplits;
  if (split_len < kMinSplitLength) split_len = kMinSplitLength;
  splits = (n + split_len - 1) / split_len;

  /* the small arrays, one upload per device */
  small_bytes = (size_t) (3 * d + 2 * n_images) * sizeof(double) + (size_t) d * sizeof(int64_t);
  host_small = (double *) malloc(small_bytes);
  dev = (cdf_device *) calloc((size_t) model->n_devices, sizeof(cdf_device));
  share = (device_share *) calloc((size_t) model->n_devices, sizeof(device_share));
  if (host_small == NULL || dev == NULL || share == NULL) {
    kde_status_set(status, KDE_ERR_ALLOC, "out of host memory for the CDF");
    goto cleanup;
  }
  memcpy(host_small, p->bandwidth, (size_t) d * sizeof(double));
  memcpy(host_small + d, p->lower, (size_t) d * sizeof(double));
  memcpy(host_small + 2 * d, p->upper, (size_t) d * sizeof(double));
  memcpy(host_small + 3 * d, p->image_sign, (size_t) n_images * sizeof(double));
  memcpy(host_small + 3 * d + n_images, p->image_shift, (size_t) n_images * sizeof(double));
  memcpy(host_small + 3 * d + 2 * n_images, p->image_count, (size_t) d * sizeof(int64_t));

  KDE_CUDA_TRY(cudaGetDevice(&prev));
  n_dev = (int) model->n_devices;
  split_rows(model, n_query, share);
  for (int r = 0; r < n_dev; r++) {
    cdf_device *v = &dev[r];
    device_share *sh = &share[r];
    kde_replica *rep = sh->rep;
    double avail = rep->budget, per_row;
    const double all_points = (double) points_bytes(p, n);
    KDE_CUDA_TRY(cudaSetDevice(rep->device));
    if (model->resident) avail -= (double) model->n_points * (double) point_bytes(model);
    {
      /* in upload_points' layout */
      const host_array parts[3] = {{p->train, n * d}, {p->weight, n}, {p->scale, n}};
      const double *held = rep->cdf_points;
      const int kept = keep_arrays(rep, &rep->cdf_points, parts, p->scale != NULL ? 3 : 2,
                                   status);
      if (kept < 0) goto cleanup;
      if (kept && held == NULL) avail -= all_points;
      v->resident = rep->cdf_points;
    }
    KDE_CUDA_TRY(cudaMalloc((void **) &v->small, small_bytes));
    if (copy_to_replica(rep, v->small, host_small, small_bytes, status) != 0) goto cleanup;
    avail -= (double) small_bytes;
    /* else shards of whole splits in half of what is left */
    v->shard_splits = splits;
    if (v->resident == NULL) {
      const double split_bytes = (double) points_bytes(p, split_len);
      v->shard_splits = (int64_t) (0.5 * avail / split_bytes);
      if (v->shard_splits > splits) v->shard_splits = splits;
      if (v->shard_splits < 1) {
        kde_status_set(status, KDE_ERR_ALLOC,
                       "the GPU memory budget (%.0f bytes) is too small for the CDF;"
                       " raise options(kdegpu.gpu_memory = ...)", rep->budget);
        goto cleanup;
      }
      KDE_CUDA_TRY(cudaMalloc((void **) &v->points,
                              points_bytes(p, v->shard_splits * split_len)));
      avail -= (double) points_bytes(p, v->shard_splits * split_len);
    }
    /* batch rows: by time (terms), then memory (coordinates, partial
     * sums of every split, the result) */
    per_row = (double) (d + splits + 1) * sizeof(double);
    sh->batch = (int64_t) (kTermsPerBatch / ((double) n * (double) n_images));
    if (sh->batch < 1) sh->batch = 1;
    if ((double) sh->batch * per_row > avail) sh->batch = (int64_t) (avail / per_row);
    if (sh->batch > sh->n) sh->batch = sh->n;
    if (sh->n > 0 && sh->batch < 1) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "the GPU memory budget (%.0f bytes) leaves no room for a batch of"
                     " the CDF; raise options(kdegpu.gpu_memory = ...)", rep->budget);
      goto cleanup;
    }
    if (sh->n > 0) {
      KDE_CUDA_TRY(cudaMalloc((void **) &v->query, (size_t) (sh->batch * d) * sizeof(double)));
      KDE_CUDA_TRY(cudaMalloc((void **) &v->partial,
                              (size_t) (sh->batch * splits) * sizeof(double)));
      KDE_CUDA_TRY(cudaMalloc((void **) &v->out, (size_t) sh->batch * sizeof(double)));
    }
  }

  /* rounds: one batch of every device that has queries left */
  for (int64_t done = 0; done < n_query;) {
    int64_t finished;
    for (int r = 0; r < n_dev; r++) {
      cdf_device *v = &dev[r];
      const int64_t rows = next_rows(share[r]), at = share[r].first + share[r].done;
      cudaStream_t stream = share[r].rep->stream;
      if (rows <= 0) continue;
      KDE_CUDA_TRY(cudaSetDevice(share[r].rep->device));
      KDE_CUDA_TRY(cudaMemcpy2DAsync(v->query, (size_t) rows * sizeof(double), query + at,
                                     (size_t) n_query * sizeof(double),
                                     (size_t) rows * sizeof(double), (size_t) d,
                                     cudaMemcpyHostToDevice, stream));
      for (int64_t s0 = 0; s0 < splits; s0 += v->shard_splits) {
        const int64_t ns = splits - s0 < v->shard_splits ? splits - s0 : v->shard_splits;
        const int64_t p0 = s0 * split_len;
        const int64_t count = n - p0 < ns * split_len ? n - p0 : ns * split_len;
        kde_cdf_problem dp;
        if (v->resident != NULL) {
          /* the whole set: the shard's columns are views of it */
          dp = device_problem(p, v->small, v->resident, n, n_images);
          dp.train = v->resident + p0;
          dp.weight = v->resident + n * d + p0;
          dp.scale = p->scale != NULL ? v->resident + n * (d + 1) + p0 : NULL;
          dp.n_train = count;
        } else {
          if (upload_points(p, p0, count, v->points, stream, status) != 0) goto cleanup;
          dp = device_problem(p, v->small, v->points, count, n_images);
        }
        const dim3 grid((unsigned) ((rows + kThreads - 1) / kThreads), (unsigned) ns);
        cdf_split_sums<<<grid, kThreads, 0, stream>>>(dp, v->query, rows, s0, split_len, scale,
                                                       v->partial);
        KDE_CUDA_LAUNCHED("CDF kernel");
      }
      cdf_add_splits<<<(unsigned) ((rows + kThreads - 1) / kThreads), kThreads, 0, stream>>>(
          v->partial, rows, splits, v->out);
      KDE_CUDA_LAUNCHED("CDF split sum");
      KDE_CUDA_TRY(cudaMemcpyAsync(out + at, v->out, (size_t) rows * sizeof(double),
                                   cudaMemcpyDeviceToHost, stream));
    }
    finished = finish_round(share, n_dev, status);
    if (finished < 0) goto cleanup;
    done += finished;
    if (interrupted != NULL && done < n_query &&
        interrupted((double) done / (double) n_query)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
  }

cleanup:
  for (int r = 0; r < n_dev; r++) {
    cdf_device *v = &dev[r];
    if (share[r].rep == NULL || cudaSetDevice(share[r].rep->device) != cudaSuccess) continue;
    (void) cudaStreamSynchronize(share[r].rep->stream);
    if (v->small != NULL) (void) cudaFree(v->small);
    if (v->points != NULL) (void) cudaFree(v->points);
    if (v->query != NULL) (void) cudaFree(v->query);
    if (v->partial != NULL) (void) cudaFree(v->partial);
    if (v->out != NULL) (void) cudaFree(v->out);
  }
  free(host_small);
  free(dev);
  free(share);
  (void) cudaGetLastError();
  if (prev >= 0) (void) cudaSetDevice(prev);
}
