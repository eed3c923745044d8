/*
 * staged_copy.cu: copies of tens of megabytes between pageable host memory
 * (the caller's R matrix, a result's order) and a device. The driver moves
 * pageable memory through its own pinned buffer with one thread, at about
 * 7 GB/s on an H200's host (the 1e7 x 3 queries of a pruned evaluation in
 * 27-34 ms, a tenth of it on four GPUs). Here host threads copy into one
 * of two pinned chunks of the replica while the copy engine moves the
 * other, so that both run near their bandwidth at once. Smaller copies,
 * or a host that will not pin the chunks, take the driver's path.
 */
#include <cuda_runtime.h>

#include <stdint.h>

#include "kde_cuda_common.h"
#include "spatial.h"
#include "staged_copy.cuh"

namespace kdegpu {

/* Below this, the driver's copy (no pinned chunks to allocate). */
constexpr size_t kStagedMinBytes = (size_t) 32 << 20;
/* Each of the two chunks. */
constexpr size_t kStagingChunk = (size_t) 16 << 20;

/* Allocates the chunks and their events once per replica; 0 when the host
 * cannot pin them (the caller takes the driver's path). */
static int staging_ready(kde_replica *rep)
{
  if (rep->staging != NULL) return 1;
  if (cudaHostAlloc(&rep->staging, 2 * kStagingChunk, cudaHostAllocDefault) != cudaSuccess) {
    rep->staging = NULL;
    (void) cudaGetLastError();
    return 0;
  }
  for (int k = 0; k < 2; k++)
    if (cudaEventCreateWithFlags(&rep->staging_used[k], cudaEventDisableTiming) != cudaSuccess) {
      (void) cudaGetLastError();
      staging_release(rep);
      return 0;
    }
  return 1;
}

void staging_release(kde_replica *rep)
{
  for (int k = 0; k < 2; k++)
    if (rep->staging_used[k] != NULL) {
      (void) cudaEventDestroy(rep->staging_used[k]);
      rep->staging_used[k] = NULL;
    }
  if (rep->staging != NULL) (void) cudaFreeHost(rep->staging);
  rep->staging = NULL;
}

static inline char *chunk(kde_replica *rep, int64_t k)
{
  return (char *) rep->staging + (size_t) (k & 1) * kStagingChunk;
}

static inline size_t chunk_bytes(size_t bytes, int64_t k)
{
  const size_t first = (size_t) k * kStagingChunk;
  return bytes - first < kStagingChunk ? bytes - first : kStagingChunk;
}

int upload_staged(kde_replica *rep, void *dst, const void *src, size_t bytes, int threads,
                  kde_status *status)
{
  const int64_t chunks = (int64_t) ((bytes + kStagingChunk - 1) / kStagingChunk);
  if (bytes < kStagedMinBytes || !staging_ready(rep)) {
    KDE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, rep->stream));
    return 0;
  }
  for (int64_t k = 0; k < chunks; k++) {
    const size_t at = (size_t) k * kStagingChunk, n = chunk_bytes(bytes, k);
    /* the chunk's last copy has left it (or, first time round, the
     * previous call's) */
    KDE_CUDA_TRY(cudaEventSynchronize(rep->staging_used[k & 1]));
    kde_copy_bytes(chunk(rep, k), (const char *) src + at, n, threads);
    KDE_CUDA_TRY(cudaMemcpyAsync((char *) dst + at, chunk(rep, k), n, cudaMemcpyHostToDevice,
                                 rep->stream));
    KDE_CUDA_TRY(cudaEventRecord(rep->staging_used[k & 1], rep->stream));
  }
  return 0;
cleanup:
  return -1;
}

int download_staged(kde_replica *rep, void *dst, const void *src, size_t bytes, int threads,
                    kde_status *status)
{
  const int64_t chunks = (int64_t) ((bytes + kStagingChunk - 1) / kStagingChunk);
  if (bytes < kStagedMinBytes || !staging_ready(rep)) {
    KDE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, rep->stream));
    KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
    return 0;
  }
  /* chunk k + 1 arrives while the host empties chunk k */
  for (int64_t k = 0; k <= chunks; k++) {
    if (k < chunks) {
      KDE_CUDA_TRY(cudaMemcpyAsync(chunk(rep, k), (const char *) src + (size_t) k * kStagingChunk,
                                   chunk_bytes(bytes, k), cudaMemcpyDeviceToHost, rep->stream));
      KDE_CUDA_TRY(cudaEventRecord(rep->staging_used[k & 1], rep->stream));
    }
    if (k > 0) {
      KDE_CUDA_TRY(cudaEventSynchronize(rep->staging_used[(k - 1) & 1]));
      kde_copy_bytes((char *) dst + (size_t) (k - 1) * kStagingChunk, chunk(rep, k - 1),
                     chunk_bytes(bytes, k - 1), threads);
    }
  }
  return 0;
cleanup:
  (void) cudaStreamSynchronize(rep->stream);
  return -1;
}

} // namespace kdegpu
