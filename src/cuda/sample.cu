/*
 * sample.cu: draws from a kernel density estimate on the GPU
 * (interface in kde_cuda.h). One thread per draw:
 *
 *   1. pick training point j with probability w_j: a binary search of a
 *      uniform in the cumulative weights;
 *   2. a standard draw z of the kernel (identity covariance): for the
 *      Gaussian, d normals; otherwise a uniform direction g / |g| (g
 *      Gaussian) times a * s, with s the radius law of the kernel
 *      (kdegpu/radius.h, which the CPU's sampler shares);
 *   3. x_j + z %*% chol(H), or x_j + lambda_j z %*% chol(H) for an
 *      adaptive fit (point j's covariance is lambda_j^2 H).
 *
 * Random numbers: Philox4x32-10 (Salmon et al., SC'11), a counter-based
 * generator: draw i uses the counters (i, call, 0, 0) under the key `seed`,
 * so a draw depends on (seed, i) only, not on the launch shape or batch.
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "kdegpu/kernels.h"
#include "kde_cuda.h"
#include "kde_cuda_common.h"
#include "model.cuh"

using kdegpu::copy_parts_to_replica;
using kdegpu::copy_to_replica;
using kdegpu::device_share;
using kdegpu::host_array;
using kdegpu::point_bytes;

namespace {

constexpr int kSampleThreads = 128;
/* Draws per batch at most, which bounds the output buffer on the device. */
constexpr int64_t kMaxSampleBatch = (int64_t) 1 << 22;

/* The random numbers of one draw. */
struct draw_random {
  uint32_t key0, key1;
  uint32_t draw_lo, draw_hi;
  uint32_t call;
  uint32_t block[4];
  int used;
  bool have_normal;
  double spare_normal;

  __device__ draw_random(const uint32_t seed[2], int64_t draw)
      : key0(seed[0]), key1(seed[1]), draw_lo((uint32_t) draw),
        draw_hi((uint32_t) ((uint64_t) draw >> 32)), call(0), used(4),
        have_normal(false), spare_normal(0)
  {
  }

  __device__ void refill()
  {
    uint32_t c0 = draw_lo, c1 = draw_hi, c2 = call++, c3 = 0;
    uint32_t k0 = key0, k1 = key1;
#pragma unroll
    for (int round = 0; round < 10; round++) {
      const uint32_t lo0 = 0xD2511F53u * c0, hi0 = __umulhi(0xD2511F53u, c0);
      const uint32_t lo1 = 0xCD9E8D57u * c2, hi1 = __umulhi(0xCD9E8D57u, c2);
      c0 = hi1 ^ c1 ^ k0;
      c1 = lo1;
      c2 = hi0 ^ c3 ^ k1;
      c3 = lo0;
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    block[0] = c0;
    block[1] = c1;
    block[2] = c2;
    block[3] = c3;
    used = 0;
  }

  __device__ uint32_t bits()
  {
    if (used == 4) refill();
    return block[used++];
  }

  /* Uniform on (0, 1), 53 random bits, never 0 or 1. */
  __device__ double uniform()
  {
    const double hi = (double) (bits() >> 5), lo = (double) (bits() >> 6);
    return (hi * 67108864.0 + lo + 0.5) * (1.0 / 9007199254740992.0);
  }

  /* Standard normal, Box-Muller, both values of a pair used. */
  __device__ double normal()
  {
    if (have_normal) {
      have_normal = false;
      return spare_normal;
    }
    const double r = sqrt(-2.0 * log(uniform()));
    double s, c;
    sincospi(2.0 * uniform(), &s, &c);
    spare_normal = r * s;
    have_normal = true;
    return r * c;
  }
};

} // namespace

/* The radius law (kdegpu/radius.h) on this generator. */
typedef draw_random kde_radius_rng;
#define KDE_RADIUS_FN __device__ inline
__device__ inline double kde_radius_uniform(draw_random *rng) { return rng->uniform(); }
__device__ inline double kde_radius_exponential(draw_random *rng) { return -log(rng->uniform()); }
#include "kdegpu/radius.h"

namespace {

struct kde_sample_args {
  const double *train;      /* n x dim */
  const double *cumulative; /* n */
  const double *scale_point; /* n, or NULL: lambda_j of an adaptive fit */
  const double *chol_h;     /* dim x dim */
  int64_t n;
  int dim;
  int kernel;
  double scale;             /* the kernel's radius scale a */
  uint32_t seed[2];
  int64_t first;            /* index of the batch's first draw */
  int64_t rows;             /* draws in the batch */
  double *out;              /* dim x rows, column-major */
};

__global__ void __launch_bounds__(kSampleThreads) kde_sample_kernel(const kde_sample_args a)
{
  const int64_t row = (int64_t) blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= a.rows) return;
  draw_random rng(a.seed, a.first + row);

  /* the first point whose cumulative weight passes u */
  const double u = rng.uniform();
  int64_t lo = 0, hi = a.n - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (a.cumulative[mid] > u) hi = mid;
    else lo = mid + 1;
  }

  double z[KDE_SAMPLE_MAX_DIM];
  double norm2 = 0;
  for (int k = 0; k < a.dim; k++) {
    z[k] = rng.normal();
    norm2 += z[k] * z[k];
  }
  double factor = a.scale_point != NULL ? a.scale_point[lo] : 1.0;
  if (a.kernel != KDE_GAUSSIAN)
    factor *= a.scale * kde_kernel_radius(a.kernel, a.dim, norm2, &rng) / sqrt(norm2);
  if (factor != 1.0)
    for (int k = 0; k < a.dim; k++) z[k] *= factor;
  for (int c = 0; c < a.dim; c++) {
    double value = a.train[lo + (int64_t) c * a.n];
    for (int k = 0; k < a.dim; k++) value = fma(z[k], a.chol_h[k + (int64_t) c * a.dim], value);
    a.out[row + (int64_t) c * a.rows] = value;
  }
}


/* One device's buffers for its share of the draws (device_share). */
struct sample_device {
  double *points; /* the replica's kept copy, or `own` */
  double *own, *chol, *out;
};

} // namespace

extern "C" void kde_cuda_sample(kde_cuda_model *model, const kde_sample_request *request,
                                kde_interrupt_probe interrupted, double *out,
                                kde_status *status)
{
  const int64_t n = request->n_train, d = request->dim;
  const size_t chol_bytes = (size_t) (d * d) * sizeof(double);
  const int has_scale = request->scale != NULL;
  const size_t points_bytes = (size_t) (n * (d + 1 + has_scale)) * sizeof(double);
  const host_array parts[3] = {{request->train, n * d}, {request->cumulative, n},
                               {request->scale, n}};
  sample_device *dev = NULL;
  device_share *share = NULL;
  int prev = -1, n_dev = 0;
  kde_sample_args args;

  kde_status_clear(status);
  if (n < 1 || d < 1 || d > KDE_SAMPLE_MAX_DIM || request->size < 0 ||
      request->kernel < 0 || request->kernel >= KDE_N_KERNELS) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "kde_cuda_sample needs n >= 1, 1 <= dim <= %d, size >= 0"
                   " and a known kernel", KDE_SAMPLE_MAX_DIM);
    return;
  }
  if (model == NULL || model->n_train != n || model->n_devices < 1) {
    kde_status_set(status, KDE_ERR_ARGUMENT,
                   "internal: the sampler's training set is not the CUDA model's");
    return;
  }
  if (request->size == 0) return;
  dev = (sample_device *) calloc((size_t) model->n_devices, sizeof(sample_device));
  share = (device_share *) calloc((size_t) model->n_devices, sizeof(device_share));
  if (dev == NULL || share == NULL) {
    kde_status_set(status, KDE_ERR_ALLOC, "out of host memory for sampling");
    goto cleanup;
  }
  KDE_CUDA_TRY(cudaGetDevice(&prev));
  n_dev = model->n_devices;
  split_rows(model, request->size, share);
  for (int r = 0; r < n_dev; r++) {
    sample_device *v = &dev[r];
    device_share *sh = &share[r];
    kde_replica *rep = sh->rep;
    double avail = rep->budget;
    int kept;
    KDE_CUDA_TRY(cudaSetDevice(rep->device));
    if (model->resident) avail -= (double) model->n_points * (double) point_bytes(model);
    /* the points, whole: each draw picks any of them */
    const double *held = rep->sample_points;
    kept = keep_arrays(rep, &rep->sample_points, parts, has_scale ? 3 : 2, status);
    if (kept < 0) goto cleanup;
    if (kept) {
      if (held == NULL) avail -= (double) points_bytes;
      v->points = rep->sample_points;
    } else if ((double) points_bytes <= 0.5 * avail) {
      KDE_CUDA_TRY(cudaMalloc((void **) &v->own, points_bytes));
      if (copy_parts_to_replica(rep, v->own, parts, has_scale ? 3 : 2, status) != 0)
        goto cleanup;
      v->points = v->own;
      avail -= (double) points_bytes;
    } else {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "the GPU memory budget (%.0f bytes) cannot hold the training"
                     " set (%.0f bytes) for sampling; raise"
                     " options(kdegpu.gpu_memory = ...)", rep->budget, (double) points_bytes);
      goto cleanup;
    }
    KDE_CUDA_TRY(cudaMalloc((void **) &v->chol, chol_bytes));
    if (copy_to_replica(rep, v->chol, request->chol_h, chol_bytes, status) != 0) goto cleanup;
    avail -= (double) chol_bytes;
    sh->batch = (int64_t) (avail / ((double) d * sizeof(double)));
    if (sh->batch > kMaxSampleBatch) sh->batch = kMaxSampleBatch;
    if (sh->batch > sh->n) sh->batch = sh->n;
    if (sh->n > 0 && sh->batch < kSampleThreads && sh->batch < sh->n) {
      kde_status_set(status, KDE_ERR_ALLOC,
                     "the GPU memory budget (%.0f bytes) leaves no room for a batch of"
                     " draws; raise options(kdegpu.gpu_memory = ...)", rep->budget);
      goto cleanup;
    }
    if (sh->n > 0)
      KDE_CUDA_TRY(cudaMalloc((void **) &v->out, (size_t) (sh->batch * d) * sizeof(double)));
  }

  args.n = n;
  args.dim = (int) d;
  args.kernel = request->kernel;
  args.scale = kde_scale(request->kernel, (int) d);
  args.seed[0] = request->seed[0];
  args.seed[1] = request->seed[1];
  /* rounds: one batch of every device that has draws left; draw i is the
   * same on any device (Philox keyed by the seed, counted by i) */
  for (int64_t done = 0; done < request->size;) {
    int64_t finished;
    for (int r = 0; r < n_dev; r++) {
      sample_device *v = &dev[r];
      const int64_t rows = next_rows(share[r]);
      if (rows <= 0) continue;
      KDE_CUDA_TRY(cudaSetDevice(share[r].rep->device));
      args.train = v->points;
      args.cumulative = v->points + n * d;
      args.scale_point = has_scale ? v->points + n * (d + 1) : NULL;
      args.chol_h = v->chol;
      args.out = v->out;
      args.first = share[r].first + share[r].done;
      args.rows = rows;
      kde_sample_kernel<<<(unsigned) ((rows + kSampleThreads - 1) / kSampleThreads),
                          kSampleThreads, 0, share[r].rep->stream>>>(args);
      KDE_CUDA_LAUNCHED("sampling kernel");
      /* the columns of this batch into the size x d result */
      KDE_CUDA_TRY(cudaMemcpy2DAsync(out + args.first, (size_t) request->size * sizeof(double),
                                     v->out, (size_t) rows * sizeof(double),
                                     (size_t) rows * sizeof(double), (size_t) d,
                                     cudaMemcpyDeviceToHost, share[r].rep->stream));
    }
    finished = finish_round(share, n_dev, status);
    if (finished < 0) goto cleanup;
    done += finished;
    if (interrupted != NULL && done < request->size &&
        interrupted((double) done / (double) request->size)) {
      kde_status_set(status, KDE_ERR_INTERRUPTED, "interrupted by the user");
      goto cleanup;
    }
  }

cleanup:
  for (int r = 0; r < n_dev; r++) {
    sample_device *v = &dev[r];
    if (share[r].rep == NULL || cudaSetDevice(share[r].rep->device) != cudaSuccess) continue;
    (void) cudaStreamSynchronize(share[r].rep->stream);
    if (v->own != NULL) (void) cudaFree(v->own);
    if (v->chol != NULL) (void) cudaFree(v->chol);
    if (v->out != NULL) (void) cudaFree(v->out);
  }
  free(dev);
  free(share);
  (void) cudaGetLastError();
  if (prev >= 0) (void) cudaSetDevice(prev);
}
