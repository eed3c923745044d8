/* tools/gpu-tests/emulate shim: the few names of src/cuda/plan.cuh that the derivative kernels use, for the host. */
#pragma once
#include <stdint.h>
namespace kdegpu {
constexpr int kPlanMaxDim = 8;
constexpr int kPlanThreads = 256;
}
namespace kdegpu { typedef struct { int visiting; double pairs; } batch_plan; }
typedef struct kde_status_s kde_status;
