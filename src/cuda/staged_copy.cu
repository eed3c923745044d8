/*
 * staged_copy.cu: copies of tens of megabytes between pageable host memory
 * (the caller's R matrix, a result's order) and a device. The driver moves
 * pageable memory through its own pinned buffer with one thread, at about
 * 7 GB/s on an H200's host (the 1e7 x 3 queries of a pruned evaluation in
 * 27-34 ms, a tenth of it on four GPUs). Here host threads copy into one
 * of two pinned chunks of the device while the copy engine moves the
 * other, so that both run near their bandwidth at once. Smaller copies,
 * or a host that will not pin the chunks, take the driver's path.
 */
#include <cuda_runtime.h>

#include <mutex>
#include <stdint.h>

#include "kde_cuda_common.h"
#include "spatial.h"
#include "staged_copy.cuh"

namespace kdegpu {

/* Below this, the driver's copy (no pinned chunks to allocate). */
constexpr size_t kStagedMinBytes = (size_t) 32 << 20;
/* Each of the two chunks. */
constexpr size_t kStagingChunk = (size_t) 16 << 20;

/* Two pinned chunks per device, shared by every model in the process (a
 * model's own pair held 32 MB of pinned host memory for as long as its fit
 * lived, and a bandwidth search makes many fits): made on first use and
 * kept until the process ends, as the device's context is. The lock is
 * held for a whole copy. The events say when the device has done with
 * each chunk, whichever of the device's streams recorded them: a copy
 * waits for them before it refills a chunk, the previous copy's included. */
struct device_staging {
  std::mutex lock;
  void *chunks = nullptr;
  cudaEvent_t used[2] = {nullptr, nullptr};
  bool refused = false; /* the host would not pin them: not asked again */
};
constexpr int kStagingDevices = 64;
static device_staging staging_of[kStagingDevices];

/* Makes the current device's chunks and events on first use (st->lock
 * held; the callers have made rep->device current, so that the events
 * belong to the device whose streams record them); false when it cannot
 * (the caller takes the driver's path). */
static bool staging_ready(device_staging *st)
{
  if (st->chunks != nullptr) return true;
  if (st->refused) return false;
  void *chunks = nullptr;
  cudaEvent_t used[2] = {nullptr, nullptr};
  bool ok = cudaHostAlloc(&chunks, 2 * kStagingChunk, cudaHostAllocDefault) == cudaSuccess;
  for (int k = 0; ok && k < 2; k++)
    ok = cudaEventCreateWithFlags(&used[k], cudaEventDisableTiming) == cudaSuccess;
  if (!ok) {
    (void) cudaGetLastError();
    for (int k = 0; k < 2; k++)
      if (used[k] != nullptr) (void) cudaEventDestroy(used[k]);
    if (chunks != nullptr) (void) cudaFreeHost(chunks);
    st->refused = true;
    return false;
  }
  st->chunks = chunks;
  st->used[0] = used[0];
  st->used[1] = used[1];
  return true;
}

/* The device's staging, or NULL for a device past the table. */
static device_staging *staging_for(const kde_replica *rep)
{
  return rep->device >= 0 && rep->device < kStagingDevices ? &staging_of[rep->device] : nullptr;
}

static inline char *chunk(const device_staging *st, int64_t k)
{
  return (char *) st->chunks + (size_t) (k & 1) * kStagingChunk;
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
  device_staging *st = bytes < kStagedMinBytes ? nullptr : staging_for(rep);
  std::unique_lock<std::mutex> held;
  if (st != nullptr) held = std::unique_lock<std::mutex>(st->lock);
  if (st == nullptr || !staging_ready(st)) {
    KDE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, rep->stream));
    return 0;
  }
  for (int64_t k = 0; k < chunks; k++) {
    const size_t at = (size_t) k * kStagingChunk, n = chunk_bytes(bytes, k);
    /* the chunk's last copy has left it (or, first time round, the
     * previous call's) */
    KDE_CUDA_TRY(cudaEventSynchronize(st->used[k & 1]));
    kde_copy_bytes(chunk(st, k), (const char *) src + at, n, threads);
    KDE_CUDA_TRY(cudaMemcpyAsync((char *) dst + at, chunk(st, k), n, cudaMemcpyHostToDevice,
                                 rep->stream));
    KDE_CUDA_TRY(cudaEventRecord(st->used[k & 1], rep->stream));
  }
  return 0;
cleanup:
  /* a copy out of a chunk may be under way that no event covers: done
   * before the lock lets another caller refill it */
  (void) cudaStreamSynchronize(rep->stream);
  return -1;
}

int download_staged(kde_replica *rep, void *dst, const void *src, size_t bytes, int threads,
                    kde_status *status)
{
  const int64_t chunks = (int64_t) ((bytes + kStagingChunk - 1) / kStagingChunk);
  device_staging *st = bytes < kStagedMinBytes ? nullptr : staging_for(rep);
  std::unique_lock<std::mutex> held;
  if (st != nullptr) held = std::unique_lock<std::mutex>(st->lock);
  if (st == nullptr || !staging_ready(st)) {
    KDE_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, rep->stream));
    KDE_CUDA_TRY(cudaStreamSynchronize(rep->stream));
    return 0;
  }
  /* chunk k + 1 arrives while the host empties chunk k; the first copy
   * into a chunk waits until the previous call's upload has left it */
  for (int64_t k = 0; k <= chunks; k++) {
    if (k < chunks) {
      if (k < 2) KDE_CUDA_TRY(cudaStreamWaitEvent(rep->stream, st->used[k & 1], 0));
      KDE_CUDA_TRY(cudaMemcpyAsync(chunk(st, k), (const char *) src + (size_t) k * kStagingChunk,
                                   chunk_bytes(bytes, k), cudaMemcpyDeviceToHost, rep->stream));
      KDE_CUDA_TRY(cudaEventRecord(st->used[k & 1], rep->stream));
    }
    if (k > 0) {
      KDE_CUDA_TRY(cudaEventSynchronize(st->used[(k - 1) & 1]));
      kde_copy_bytes((char *) dst + (size_t) (k - 1) * kStagingChunk, chunk(st, k - 1),
                     chunk_bytes(bytes, k - 1), threads);
    }
  }
  return 0;
cleanup:
  (void) cudaStreamSynchronize(rep->stream);
  return -1;
}

} // namespace kdegpu
