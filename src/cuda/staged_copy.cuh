/*
 * staged_copy.cuh: large copies between pageable host memory and a device
 * through the replica's two pinned chunks (staged_copy.cu).
 */
#ifndef KDEGPU_CUDA_STAGED_COPY_CUH
#define KDEGPU_CUDA_STAGED_COPY_CUH

#include <stddef.h>

#include "kde_status.h"
#include "model.cuh"

namespace kdegpu {

/* bytes of host src to device dst, queued on rep->stream (src may be
 * reused when it returns). One caller at a time per replica. Returns 0,
 * or -1 with the status set. */
int upload_staged(kde_replica *rep, void *dst, const void *src, size_t bytes, int threads,
                  kde_status *status);

/* bytes of device src to host dst after the work queued on rep->stream;
 * returns when dst holds them. */
int download_staged(kde_replica *rep, void *dst, const void *src, size_t bytes, int threads,
                    kde_status *status);

/* The replica's pinned chunks and their events (kde_cuda_model_free). */
void staging_release(kde_replica *rep);

} // namespace kdegpu

#endif /* KDEGPU_CUDA_STAGED_COPY_CUH */
