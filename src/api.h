/* The .Call entry points (api.c), registered in init.c under these same
 * names: R calls .Call(C_kdegpu_<name>, ...) (useDynLib(.fixes = "C_")).
 * Every entry point that runs a parallel region takes `threads`, the
 * user's options(kdegpu.threads) (0: all that are allowed). */
#ifndef KDEGPU_API_H
#define KDEGPU_API_H

#include <Rinternals.h>

/* `scale`: NULL, or the adaptive estimator's lambda_j per training point
 * (its lambda_j^-d already folded into `weight`, kde_backend.h). */
SEXP kdegpu_log_density_cpu(SEXP train, SEXP weight, SEXP scale,
                            SEXP tile_size, SEXP query, SEXP center,
                            SEXP transform, SEXP kernel, SEXP log_const,
                            SEXP leave_one_out, SEXP tolerance, SEXP threads,
                            SEXP progress_delay);
SEXP kdegpu_conditional_cdf(SEXP train, SEXP response, SEXP log_weight, SEXP scale,
                            SEXP query, SEXP value, SEXP with_density, SEXP devices,
                            SEXP memory_budget, SEXP threads, SEXP progress_delay);
SEXP kdegpu_cdf(SEXP train, SEXP weight, SEXP scale, SEXP bandwidth,
                SEXP kernel, SEXP query, SEXP lower, SEXP upper,
                SEXP images, SEXP model, SEXP threads, SEXP progress_delay);
SEXP kdegpu_spatial_order(SEXP x, SEXP threads);
SEXP kdegpu_unit_spread(SEXP z, SEXP width, SEXP growth, SEXP threads);
SEXP kdegpu_whiten_sort(SEXP x, SEXP center, SEXP transform, SEXP weights, SEXP threads);
SEXP kdegpu_weight_facts(SEXP weights, SEXP threads);
SEXP kdegpu_weighted_centre(SEXP x, SEXP weights, SEXP threads);
SEXP kdegpu_column_magnitudes(SEXP x, SEXP threads);
SEXP kdegpu_cpu_info(SEXP threads);
SEXP kdegpu_limits(void);
SEXP kdegpu_cpu_model_create(SEXP train, SEXP weight, SEXP scale, SEXP kernel,
                             SEXP tile_size, SEXP discrete, SEXP raw, SEXP order,
                             SEXP center, SEXP transform, SEXP threads);
SEXP kdegpu_cpu_model_valid(SEXP handle);
SEXP kdegpu_log_density_cpu_model(SEXP handle, SEXP query, SEXP center, SEXP transform,
                                  SEXP log_const, SEXP leave_one_out, SEXP tolerance,
                                  SEXP threads, SEXP progress_delay);
SEXP kdegpu_threads_for_work(SEXP threads, SEXP work);
SEXP kdegpu_kernel_profile(SEXP kernel, SEXP radius);
SEXP kdegpu_kernel_constants(SEXP kernel, SEXP dim);
SEXP kdegpu_lse_rows(SEXP parts);
SEXP kdegpu_first_nonfinite(SEXP x, SEXP threads);
SEXP kdegpu_exp(SEXP x, SEXP threads);
SEXP kdegpu_whiten(SEXP x, SEXP center, SEXP transform, SEXP threads);
SEXP kdegpu_whiten_exact(SEXP x, SEXP center, SEXP transform, SEXP threads);
SEXP kdegpu_weighted_cov(SEXP x, SEXP weights, SEXP threads);
SEXP kdegpu_weighted_spread(SEXP x, SEXP weights);
SEXP kdegpu_cuda_info(void);
SEXP kdegpu_cuda_device_count(void);
SEXP kdegpu_cuda_model_create(SEXP train, SEXP weight, SEXP scale, SEXP tile_size,
                              SEXP kernel, SEXP precision, SEXP devices, SEXP memory_budget,
                              SEXP max_rounding, SEXP discrete, SEXP raw, SEXP order,
                              SEXP center, SEXP transform, SEXP threads);
SEXP kdegpu_cuda_model_valid(SEXP handle);
SEXP kdegpu_cuda_model_release(SEXP handle);
SEXP kdegpu_log_density_cuda(SEXP handle, SEXP query, SEXP center,
                             SEXP transform, SEXP log_const,
                             SEXP leave_one_out, SEXP tolerance, SEXP threads,
                             SEXP progress_delay);
SEXP kdegpu_standard_draws(SEXP kernel, SEXP size, SEXP dim, SEXP progress_delay);
SEXP kdegpu_sample_cuda(SEXP model, SEXP train, SEXP cumulative, SEXP scale, SEXP chol_h,
                        SEXP kernel, SEXP size, SEXP seed, SEXP threads,
                        SEXP progress_delay);
SEXP kdegpu_moments_cpu(SEXP train, SEXP weight, SEXP query, SEXP degree,
                        SEXP pairs, SEXP threads, SEXP progress_delay);
SEXP kdegpu_moments_cuda(SEXP train, SEXP weight, SEXP query, SEXP degree,
                         SEXP pairs, SEXP devices, SEXP memory_budget,
                         SEXP threads, SEXP progress_delay);
SEXP kdegpu_moment_index(SEXP dim, SEXP degree);
SEXP kdegpu_derivative_sums_cpu(SEXP kernel, SEXP train, SEXP log_weight,
                                SEXP scale, SEXP query, SEXP second, SEXP finish,
                                SEXP model, SEXP query_residual, SEXP threads,
                                SEXP progress_delay);
SEXP kdegpu_derivative_sums_cuda(SEXP model, SEXP kernel, SEXP train, SEXP log_weight,
                                 SEXP query, SEXP query_residual, SEXP second, SEXP tolerance,
                                 SEXP finish, SEXP threads, SEXP progress_delay);

#endif
