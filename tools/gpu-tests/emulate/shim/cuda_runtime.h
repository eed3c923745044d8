/* Shim for tools/gpu-tests/emulate (host emulation of the CUDA kernels). */
#pragma once
#include <stdint.h>
#include <math.h>
#include <barrier>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__
#define __launch_bounds__(...)
typedef struct CUstream_st *cudaStream_t;
struct alignas(16) float4 { float x, y, z, w; };
struct uint3_ { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {} };
extern thread_local uint3_ threadIdx;
extern uint3_ blockIdx, blockDim, gridDim;
extern std::barrier<> *g_barrier;
inline void __syncthreads() { g_barrier->arrive_and_wait(); }
