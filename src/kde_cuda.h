/*
 * The CUDA backend's C interface. Implemented by src/cuda/ (its layout and
 * design: src/cuda/kernels.cuh) when configure finds nvcc, and by
 * kde_cuda_stub.c (every call reports KDE_ERR_UNAVAILABLE) when it does
 * not, so api_cuda.c needs no #ifdef.
 */
#ifndef KDEGPU_KDE_CUDA_H
#define KDEGPU_KDE_CUDA_H

#include <stddef.h>
#include "kde_backend.h"
#include "kde_limits.h"
#include "derivatives.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { KDE_PRECISION_DOUBLE = 0, KDE_PRECISION_SINGLE = 1 } kde_precision;

/* Training data resident on one or more devices; opaque to the glue. */
typedef struct kde_cuda_model kde_cuda_model;

/* 1 when the CUDA backend was compiled in, 0 for the stub. */
int kde_cuda_compiled(void);

/* Number of usable devices (0 with a status message when the driver or
 * device is missing; that message is what the R error says). */
int kde_cuda_device_count(kde_status *status);

typedef struct {
  char name[256];
  double total_memory;  /* bytes */
  double free_memory;   /* bytes */
  int compute_major;
  int compute_minor;
  int multiprocessors;
} kde_cuda_device_info;

void kde_cuda_get_device_info(int device, kde_cuda_device_info *info,
                              kde_status *status);

/*
 * Copies the training set to the devices listed in `devices` (n_devices >=
 * 1). `memory_budget` bounds the device memory (bytes, per device) that the
 * model and each evaluation may use; <= 0 means the default, a safe
 * fraction of free memory. When the training set does not fit, the model
 * keeps a host copy and streams it in batches. `max_rounding` is the
 * largest relative rounding of a density that the fit accepts from a
 * faster form: the Gaussian takes its expanded form (with the tensor cores
 * where they serve) only while that form's predicted rounding
 * (kde_cuda_model_rounding) is within it, else the difference form. Returns
 * NULL on failure, with nothing left allocated.
 */
kde_cuda_model *kde_cuda_model_create(const kde_training_set *train,
                                      int precision, const int *devices,
                                      int n_devices, double memory_budget,
                                      double max_rounding, kde_status *status);

/* The predicted relative rounding of a density in the Gaussian's expanded
 * form for this model's training set (NaN: the model has no expanded form,
 * another kernel or an adaptive fit), whichever form it took. */
double kde_cuda_model_rounding(const kde_cuda_model *model);

/* The model's discrete columns (kde_training_set; 0 for numeric data):
 * its queries carry that many codes after their coordinates. */
int64_t kde_cuda_model_discrete(const kde_cuda_model *model);

/* Frees every device and host allocation of the model; NULL is a no-op. */
void kde_cuda_model_free(kde_cuda_model *model);

/* How the model's evaluations compute a pair, for print(): "tensor cores"
 * (the single-precision Gaussian's expanded form on the MMA units),
 * "expanded form" (the Gaussian at d >= 3 on the FMA units: aux + q.x) or
 * "difference form" (|q - x|^2: every other kernel and dimension, and the
 * Gaussian where the expanded form would round too much). */
const char *kde_cuda_model_path(const kde_cuda_model *model);

/* Same contract as kde_cpu_log_density(). */
void kde_cuda_log_density(kde_cuda_model *model, const kde_query_set *query,
                          kde_interrupt_probe interrupted, double *out,
                          kde_status *status);

/*
 * The kernel-derivative sums of derivatives.h (the same contract as
 * kde_cpu_derivative_sums) for the fit behind `model`, on its first
 * device, in its precision. `problem` holds the fit's training points as
 * the model was made from them (same order and weights), for the layouts
 * its kernels cannot read; its kernel and shape must be the model's, and
 * its queries whitened. `tolerance` (as kde_query_set's) lets a fit whose
 * points are in a spatial order skip what provably matters less: every sum
 * stays within tolerance times s0 of the full one (compact kernels skip
 * only exact zeros). `threads`: host threads for the queries' order when
 * it is made on the host. `second` may be NULL.
 */
void kde_cuda_derivative_sums(kde_cuda_model *model, const kde_derivative_problem *problem,
                              double tolerance, int threads, kde_interrupt_probe interrupted,
                              double *log_scale, double *s0, double *k1sum, double *first,
                              double *second, kde_status *status);

/*
 * Draws from the estimate: each draw picks training point j with
 * probability w_j (through the cumulative weights) and adds kernel noise
 * with covariance H (lambda_j^2 H given `scale`), as z %*% chol_h for a
 * standard draw z of the kernel (identity covariance). Random numbers come from a counter-based
 * generator (Philox4x32-10) keyed by `seed`, so draw i depends on (seed, i)
 * only: the same seed gives the same draws on any device and batch size.
 */
typedef struct {
  int kernel;               /* kde_kernel */
  int64_t n_train;
  int64_t dim;              /* 1 .. KDE_SAMPLE_MAX_DIM */
  const double *train;      /* n_train x dim, original coordinates */
  const double *cumulative; /* n_train: cumulative weights, last positive 1 */
  const double *scale;      /* NULL, or n_train factors lambda_j of an
                               adaptive fit: point j's noise is lambda_j z */
  const double *chol_h;     /* dim x dim: noise z becomes z %*% chol_h */
  int64_t size;             /* draws */
  uint32_t seed[2];
} kde_sample_request;


/* Writes size x dim draws (column-major) to `out`, on the devices of
 * `model` (the fit's, made from the same training points) within each
 * one's memory budget; draw i is the same on any of them. */
void kde_cuda_sample(kde_cuda_model *model, const kde_sample_request *request,
                     kde_interrupt_probe interrupted, double *out, kde_status *status);

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_KDE_CUDA_H */
