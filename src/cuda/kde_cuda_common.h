/*
 * kde_cuda_common.h: what the CUDA sources share: the default memory
 * budget, wall times, and how they report failure. Every runtime
 * call goes through KDE_CUDA_TRY, every launch through KDE_CUDA_LAUNCHED;
 * both record the call, the error and file:line into a kde_status named
 * `status` and jump to the function's `cleanup:` label. Nothing prints,
 * exits or throws. Included by the .cu files only.
 */
#ifndef KDEGPU_KDE_CUDA_COMMON_H
#define KDEGPU_KDE_CUDA_COMMON_H

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <chrono>

#include "kde_backend.h"

/* The device memory a model or a sampling run may use: the user's budget,
 * or by default half of what is free now. */
static inline double budget_bytes(double requested, size_t free_bytes)
{
  return requested > 0 ? requested : 0.5 * (double) free_bytes;
}

/* An A/B switch of the backend (KDEGPU_PLAN_REFINE and the like): on
 * unless the environment variable `name` is "0". Callers read it once. */
static inline int kde_env_switch(const char *name)
{
  const char *v = getenv(name);
  return !(v != NULL && strcmp(v, "0") == 0);
}

/* A number from the environment variable `name` (test and A/B overrides
 * such as KDEGPU_PLAN_MIN_PAIRS), or `fallback` where it is unset, empty,
 * not a whole number, or outside [lo, hi]. */
static inline double kde_env_number(const char *name, double fallback, double lo, double hi)
{
  const char *v = getenv(name);
  char *end = NULL;
  if (v == NULL || v[0] == '\0') return fallback;
  const double x = strtod(v, &end);
  return *end == '\0' && x >= lo && x <= hi ? x : fallback;
}

/* Milliseconds from t0 to t1 (wall time, for traces and timings). */
static inline double kde_ms_between(std::chrono::steady_clock::time_point t0,
                                    std::chrono::steady_clock::time_point t1)
{
  return std::chrono::duration<double, std::milli>(t1 - t0).count();
}

/* KDEGPU_TRACE=<file>: evaluations (evaluate.cu: the loop, its kernels'
 * event time and its plans' host time; plan.cu: each batch's plan, phase
 * by phase) and model creation (model.cu) append their phases' wall times
 * there; NULL when unset. Read once (model.cu). */
FILE *kde_trace_file(void);

static inline const char *kde_basename(const char *path)
{
  const char *slash = strrchr(path, '/');
  return slash != NULL ? slash + 1 : path;
}

static inline void kde_cuda_record(kde_status *status, cudaError_t err,
                            const char *call, const char *file, int line)
{
  int alloc = err == cudaErrorMemoryAllocation;
  (void) cudaGetLastError(); /* clear a non-sticky error for the next call */
  kde_status_set(status, alloc ? KDE_ERR_ALLOC : KDE_ERR_CUDA,
                 "CUDA call `%s` failed (%s:%d): %s: %s%s", call,
                 kde_basename(file), line, cudaGetErrorName(err),
                 cudaGetErrorString(err),
                 alloc ? ". The GPU ran out of memory: lower the memory budget"
                         " with options(kdegpu.gpu_memory = ...) or use"
                         " precision = 'single'"
                       : "");
}

/* Every runtime call goes through this; on failure it records and jumps to
 * the enclosing function's `cleanup:` label. */
#define KDE_CUDA_TRY(call)                                                   \
  do {                                                                       \
    cudaError_t kde_err_ = (call);                                           \
    if (kde_err_ != cudaSuccess) {                                           \
      kde_cuda_record(status, kde_err_, #call, __FILE__, __LINE__);          \
      goto cleanup;                                                          \
    }                                                                        \
  } while (0)

/* After each kernel launch (launch errors are reported by cudaGetLastError;
 * errors while running surface at the next synchronising call). */
#define KDE_CUDA_LAUNCHED(what)                                              \
  do {                                                                       \
    cudaError_t kde_err_ = cudaGetLastError();                               \
    if (kde_err_ != cudaSuccess) {                                           \
      kde_cuda_record(status, kde_err_, "launch of the " what, __FILE__,     \
                      __LINE__);                                             \
      goto cleanup;                                                          \
    }                                                                        \
  } while (0)

#define KDE_HOST_ALLOC(ptr, count, what)                                     \
  do {                                                                       \
    size_t kde_n_ = (size_t) (count);                                        \
    (ptr) = (decltype(ptr)) calloc(kde_n_ > 0 ? kde_n_ : 1, sizeof *(ptr));  \
    if ((ptr) == NULL) {                                                     \
      kde_status_set(status, KDE_ERR_ALLOC,                                  \
                     "out of host memory allocating %.0f bytes for %s",      \
                     (double) kde_n_ * sizeof *(ptr), what);                 \
      goto cleanup;                                                          \
    }                                                                        \
  } while (0)

#endif /* KDEGPU_KDE_CUDA_COMMON_H */
