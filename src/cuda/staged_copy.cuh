/*
 * staged_copy.cuh: large copies between pageable host memory and a device
 * through the device's two pinned chunks (staged_copy.cu).
 */
#ifndef KDEGPU_CUDA_STAGED_COPY_CUH
#define KDEGPU_CUDA_STAGED_COPY_CUH

#include <stddef.h>

#include "kde_status.h"
#include "model.cuh"

namespace kdegpu {

/* bytes of host src to device dst, queued on rep->stream (src may be
 * reused when it returns). Any thread; calls for one device take turns.
 * Returns 0, or -1 with the status set. */
int upload_staged(kde_replica *rep, void *dst, const void *src, size_t bytes, int threads,
                  kde_status *status);

/* bytes of device src to host dst after the work queued on rep->stream;
 * returns when dst holds them. */
int download_staged(kde_replica *rep, void *dst, const void *src, size_t bytes, int threads,
                    kde_status *status);

} // namespace kdegpu

#endif /* KDEGPU_CUDA_STAGED_COPY_CUH */
