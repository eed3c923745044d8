/*
 * kde_cuda_stub.c: the CUDA interface (kde_cuda.h) for builds without nvcc.
 * Every call reports KDE_ERR_UNAVAILABLE, so api_cuda.c needs no #ifdef and the R
 * error tells the user how to get the CUDA backend.
 */
#include <stdio.h>
#include <string.h>

#include "kde_cuda.h"
#include "cdf.h"
#include "moments.h"
#include "conditional_cdf.h"
#include "cuda_off_reason.h" /* written by configure: why CUDA is off */

static void kde_stub_unavailable(kde_status *status)
{
  kde_status_set(status, KDE_ERR_UNAVAILABLE,
                 "kdegpu was built without the CUDA backend: %s",
                 KDEGPU_CUDA_OFF_REASON);
}

int kde_cuda_compiled(void) { return 0; }

int kde_cuda_device_count(kde_status *status)
{
  kde_stub_unavailable(status);
  return 0;
}

void kde_cuda_get_device_info(int device, kde_cuda_device_info *info,
                              kde_status *status)
{
  (void) device;
  if (info != NULL) memset(info, 0, sizeof *info);
  kde_stub_unavailable(status);
}

kde_cuda_model *kde_cuda_model_create(const kde_training_set *train,
                                      int precision, const int *devices,
                                      int n_devices, double memory_budget,
                                      double max_rounding, kde_status *status)
{
  (void) train;
  (void) precision;
  (void) devices;
  (void) n_devices;
  (void) memory_budget;
  (void) max_rounding;
  kde_stub_unavailable(status);
  return NULL;
}

double kde_cuda_model_rounding(const kde_cuda_model *model)
{
  (void) model;
  return 0;
}

int64_t kde_cuda_model_discrete(const kde_cuda_model *model)
{
  (void) model;
  return 0;
}

void kde_cuda_model_free(kde_cuda_model *model) { (void) model; }

const char *kde_cuda_model_path(const kde_cuda_model *model)
{
  (void) model;
  return "none";
}

void kde_cuda_log_density(kde_cuda_model *model, const kde_query_set *query,
                          kde_interrupt_probe interrupted, double *out,
                          kde_status *status)
{
  (void) model;
  (void) query;
  (void) interrupted;
  (void) out;
  kde_stub_unavailable(status);
}

void kde_cuda_sample(kde_cuda_model *model, const kde_sample_request *request,
                     kde_interrupt_probe interrupted, double *out, kde_status *status)
{
  (void) model;
  (void) request;
  (void) interrupted;
  (void) out;
  kde_stub_unavailable(status);
}

void kde_cuda_cdf(struct kde_cuda_model *model, const kde_cdf_problem *problem,
                  const double *query, int64_t n_query, kde_interrupt_probe interrupted,
                  double *out, kde_status *status)
{
  (void) model;
  (void) problem;
  (void) query;
  (void) n_query;
  (void) interrupted;
  (void) out;
  kde_stub_unavailable(status);
}

void kde_cuda_moments(const kde_moment_problem *problem, const int *devices,
                      int n_devices, double memory_budget, kde_interrupt_probe interrupted,
                      double *log_scale, double *sums, kde_status *status)
{
  (void) problem;
  (void) devices;
  (void) n_devices;
  (void) memory_budget;
  (void) interrupted;
  (void) log_scale;
  (void) sums;
  kde_stub_unavailable(status);
}

void kde_cuda_derivative_sums(kde_cuda_model *model, const kde_derivative_problem *problem,
                              double tolerance, int threads, kde_interrupt_probe interrupted,
                              double *log_scale, double *s0, double *k1sum, double *first,
                              double *second, kde_status *status)
{
  (void) model;
  (void) problem;
  (void) tolerance;
  (void) threads;
  (void) interrupted;
  (void) log_scale;
  (void) s0;
  (void) k1sum;
  (void) first;
  (void) second;
  kde_stub_unavailable(status);
}

void kde_cuda_conditional_cdf(const kde_conditional_cdf_problem *problem, const double *z,
                              const double *v, int64_t m, const int *devices, int n_devices,
                              double memory_budget, kde_interrupt_probe interrupted,
                              double *out, double *density, kde_status *status)
{
  (void) problem;
  (void) z;
  (void) v;
  (void) m;
  (void) devices;
  (void) n_devices;
  (void) memory_budget;
  (void) interrupted;
  (void) out;
  (void) density;
  kde_stub_unavailable(status);
}
