/*
 * The CPU backend's model of a fit: what every evaluation needs that
 * depends on the training set alone (the checks of its points and weights,
 * the log weights, an adaptive fit's 1 / lambda^2, the tiles' boxes and log
 * weights), made once per fit instead of once per evaluation. Scoring a few
 * points against a large fit spent most of its time there (n = 1e6: the
 * log weights alone cost more than the pairs of ten queries).
 *
 * An external pointer; its protected value holds the R vectors that the
 * training set points into, so they live as long as the model.
 */
#include <stdlib.h>
#include <string.h>

#include <R.h>
#include <Rinternals.h>

#include "api.h"
#include "api_glue.h"
#include "kde_backend.h"

typedef struct {
  kde_training_set train; /* train, weight: in R's vectors; the rest owned */
  double *log_weight, *inv_scale2;
  kde_cpu_tiles tiles;    /* n_tiles 0 when the points are in no spatial order */
} kde_cpu_model;

static SEXP cpu_model_tag(void)
{
  static SEXP tag = NULL;
  if (tag == NULL) tag = Rf_install("kdegpu_cpu_model");
  return tag;
}

static void cpu_model_free(kde_cpu_model *model)
{
  if (model == NULL) return;
  free(model->log_weight);
  free(model->inv_scale2);
  kde_cpu_tiles_free(&model->tiles);
  free(model);
}

static void cpu_model_finalizer(SEXP handle)
{
  cpu_model_free((kde_cpu_model *) R_ExternalPtrAddr(handle));
  R_ClearExternalPtr(handle);
}

/* A copy of `n` doubles in memory the model owns (NULL for NULL). */
static double *owned_copy(const double *src, int64_t n, int *failed)
{
  if (src == NULL) return NULL;
  double *dst = (double *) malloc((size_t) n * sizeof(double));
  if (dst == NULL) {
    *failed = 1;
    return NULL;
  }
  memcpy(dst, src, (size_t) n * sizeof(double));
  return dst;
}

/* The offset mode (kde_cpu_offsets_make) where the fit's raw points come
 * with it and are far from their centre (arg_fit_residual). 0, or -1 out
 * of memory. */
static int make_offsets(kde_cpu_model *model, SEXP raw, SEXP order, SEXP center,
                        SEXP transform)
{
  float *residual = NULL;
  if (model->tiles.n_tiles == 0) return 0;
  if (arg_fit_residual(raw, order, center, transform, &model->train, &residual) != 0)
    return -1;
  if (residual == NULL) return 0;
  return kde_cpu_offsets_make(&model->train, residual, &model->tiles) < 0 ? -1 : 0;
}

SEXP kdegpu_cpu_model_create(SEXP train, SEXP weight, SEXP scale, SEXP kernel,
                             SEXP tile_size, SEXP discrete, SEXP raw, SEXP order,
                             SEXP center, SEXP transform, SEXP threads)
{
  int n_threads = arg_threads(threads);
  kde_training_set t = arg_training_set(train, weight, scale, kernel, tile_size, n_threads);
  arg_discrete(discrete, &t);
  kde_cpu_model *model = (kde_cpu_model *) calloc(1, sizeof(kde_cpu_model));
  int failed = model == NULL;
  if (!failed) {
    /* arg_training_set's log weights and scales live until .Call returns */
    model->log_weight = owned_copy(t.log_weight, t.n_train, &failed);
    model->inv_scale2 = owned_copy(t.inv_scale2, t.n_train, &failed);
    model->train = t;
    model->train.log_weight = model->log_weight;
    model->train.inv_scale2 = model->inv_scale2;
  }
  if (!failed && t.tile_size > 0)
    failed = kde_cpu_tiles_make(&model->train, n_threads, &model->tiles) != 0;
  if (!failed && t.tile_size > 0 && t.n_discrete == 0)
    failed = make_offsets(model, raw, order, center, transform) != 0;
  if (failed) {
    cpu_model_free(model);
    Rf_error("out of memory making the CPU model of %lld points",
             (long long) t.n_train);
  }
  SEXP keep = PROTECT(Rf_allocVector(VECSXP, 4));
  SET_VECTOR_ELT(keep, 0, train);
  SET_VECTOR_ELT(keep, 1, weight);
  SET_VECTOR_ELT(keep, 2, scale);
  SET_VECTOR_ELT(keep, 3, discrete);
  SEXP handle = PROTECT(R_MakeExternalPtr(model, cpu_model_tag(), keep));
  R_RegisterCFinalizerEx(handle, cpu_model_finalizer, TRUE);
  UNPROTECT(2);
  return handle;
}

const float *cpu_model_residual(SEXP handle, const double *train, int64_t n_train,
                               int64_t dim)
{
  if (!Rf_asLogical(kdegpu_cpu_model_valid(handle))) return NULL;
  const kde_cpu_model *model = (const kde_cpu_model *) R_ExternalPtrAddr(handle);
  if (model->train.train != train || model->train.n_train != n_train ||
      model->train.dim != dim)
    return NULL;
  return model->tiles.residual;
}

SEXP kdegpu_cpu_model_valid(SEXP handle)
{
  return Rf_ScalarLogical(TYPEOF(handle) == EXTPTRSXP &&
                          R_ExternalPtrTag(handle) == cpu_model_tag() &&
                          R_ExternalPtrAddr(handle) != NULL);
}

SEXP kdegpu_log_density_cpu_model(SEXP handle, SEXP query, SEXP center, SEXP transform,
                                  SEXP log_const, SEXP leave_one_out, SEXP tolerance,
                                  SEXP threads, SEXP progress_delay)
{
  if (!Rf_asLogical(kdegpu_cpu_model_valid(handle)))
    Rf_error("`model` must be a live CPU model made by kdegpu");
  const kde_cpu_model *model = (const kde_cpu_model *) R_ExternalPtrAddr(handle);
  return evaluate_on_cpu(&model->train, model->tiles.n_tiles > 0 ? &model->tiles : NULL,
                         query, center, transform, log_const, leave_one_out, tolerance,
                         arg_threads(threads), progress_delay);
}
