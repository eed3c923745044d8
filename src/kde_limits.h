/* The CUDA backend's dimension limits, read by R (kdegpu_limits) for its
 * dispatch and its capability table, and by the kernels: the sampler's;
 * the derivative kernels' (the generic one keeps a query in shared
 * memory); the device plan's (beyond it an evaluation visits every unit,
 * so a fit skips its spatial order); mixed data's fused kernels'. Defines only, for C, CUDA and the
 * host emulator alike. */
#ifndef KDEGPU_KDE_LIMITS_H
#define KDEGPU_KDE_LIMITS_H

#define KDE_SAMPLE_MAX_DIM 128
#define KDE_CUDA_DERIVATIVE_MAX_DIM 128
#define KDE_CUDA_PLAN_MAX_DIM 8
/* Mixed data: the GPU's fused discrete columns (kernel_discrete.cu), at
 * most this many numeric and this many discrete columns. */
#define KDE_CUDA_DISCRETE_MAX 4

#endif /* KDEGPU_KDE_LIMITS_H */
