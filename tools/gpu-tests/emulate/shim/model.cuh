/* tools/gpu-tests/emulate shim: the few names of src/cuda/model.cuh that the derivative kernels use, for the host. */
#pragma once
typedef struct kde_cuda_model kde_cuda_model; typedef struct { int device; } kde_replica;
