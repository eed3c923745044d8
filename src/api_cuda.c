/*
 * The .Call glue of the CUDA backend: device information, the fit's device
 * model (an external pointer with a finalizer), evaluation and sampling.
 * Without CUDA these call kde_cuda_stub.c, which says why.
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include "api.h"
#include "api_glue.h"
#include "kde_backend.h"
#include "kde_cuda.h"
#include "threads.h"

SEXP kdegpu_cuda_info(void)
{
  kde_status status;
  kde_status_clear(&status);
  int n = cuda_allowed(&status) ? kde_cuda_device_count(&status) : 0;
  if (n < 0) n = 0;

  const char *fields[] = {"compiled", "message", "name", "total_memory",
                          "free_memory", "compute_capability",
                          "multiprocessors"};
  const int n_fields = 7;
  SEXP out = PROTECT(Rf_allocVector(VECSXP, n_fields));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, n_fields));
  for (int i = 0; i < n_fields; i++)
    SET_STRING_ELT(names, i, Rf_mkChar(fields[i]));
  Rf_setAttrib(out, R_NamesSymbol, names);

  SET_VECTOR_ELT(out, 0, Rf_ScalarLogical(kde_cuda_compiled()));
  SET_VECTOR_ELT(out, 1, Rf_mkString(status.message));
  SEXP name = PROTECT(Rf_allocVector(STRSXP, n));
  SEXP total = PROTECT(Rf_allocVector(REALSXP, n));
  SEXP free_mem = PROTECT(Rf_allocVector(REALSXP, n));
  SEXP capability = PROTECT(Rf_allocVector(STRSXP, n));
  SEXP sms = PROTECT(Rf_allocVector(INTSXP, n));
  for (int i = 0; i < n; i++) {
    kde_cuda_device_info info;
    kde_status device_status;
    kde_status_clear(&device_status);
    memset(&info, 0, sizeof info);
    kde_cuda_get_device_info(i, &info, &device_status);
    char cc[32];
    snprintf(cc, sizeof cc, "%d.%d", info.compute_major, info.compute_minor);
    SET_STRING_ELT(name, i, Rf_mkChar(device_status.code == KDE_OK
                                          ? info.name : "unavailable"));
    REAL(total)[i] = info.total_memory;
    REAL(free_mem)[i] = info.free_memory;
    SET_STRING_ELT(capability, i, Rf_mkChar(cc));
    INTEGER(sms)[i] = info.multiprocessors;
  }
  SET_VECTOR_ELT(out, 2, name);
  SET_VECTOR_ELT(out, 3, total);
  SET_VECTOR_ELT(out, 4, free_mem);
  SET_VECTOR_ELT(out, 5, capability);
  SET_VECTOR_ELT(out, 6, sms);
  UNPROTECT(7);
  return out;
}

/* The number of usable GPUs alone: cheap enough to ask before every
 * evaluation (kdegpu_cuda_info also reads each device's properties). */
SEXP kdegpu_cuda_device_count(void)
{
  kde_status status;
  kde_status_clear(&status);
  int n = cuda_allowed(&status) ? kde_cuda_device_count(&status) : 0;
  return Rf_ScalarInteger(n < 0 ? 0 : n);
}

/* The tag that marks an external pointer as a CUDA model of this package:
 * the glue never hands any other pointer to the backend. */
static SEXP cuda_model_tag(void)
{
  return Rf_install("kdegpu_cuda_model");
}

static int is_cuda_model_handle(SEXP handle)
{
  return TYPEOF(handle) == EXTPTRSXP &&
         R_ExternalPtrTag(handle) == cuda_model_tag();
}

static void cuda_model_finalizer(SEXP handle)
{
  if (!is_cuda_model_handle(handle)) return;
  kde_cuda_model *model = (kde_cuda_model *) R_ExternalPtrAddr(handle);
  /* In a forked child the model's device memory belongs to the parent's
   * CUDA context: forget the pointer, touch nothing. */
  if (model != NULL && !kde_cuda_inherited()) kde_cuda_model_free(model);
  R_ClearExternalPtr(handle);
}

/* Uploads the training set; returns an external pointer whose finalizer
 * frees the device memory when the fit is garbage-collected. */
SEXP kdegpu_cuda_model_create(SEXP train, SEXP weight, SEXP scale, SEXP tile_size,
                              SEXP kernel, SEXP precision, SEXP devices, SEXP memory_budget,
                              SEXP max_rounding, SEXP discrete, SEXP raw, SEXP order,
                              SEXP center, SEXP transform, SEXP threads)
{
  int n_threads = arg_threads(threads);
  kde_training_set t = arg_training_set(train, weight, scale, kernel,
                                        tile_size, n_threads);
  arg_discrete(discrete, &t);
  int prec = arg_int_scalar(precision, "precision");
  if (prec != KDE_PRECISION_DOUBLE && prec != KDE_PRECISION_SINGLE)
    Rf_error("`precision` must be 0 (double) or 1 (single)");
  if (TYPEOF(devices) != INTSXP || XLENGTH(devices) < 1)
    Rf_error("`devices` must be a non-empty integer vector");
  for (R_xlen_t i = 0; i < XLENGTH(devices); i++)
    if (INTEGER(devices)[i] == NA_INTEGER || INTEGER(devices)[i] < 0)
      Rf_error("`devices` must hold non-negative device indices");
  double budget = arg_double_scalar(memory_budget, "memory_budget");
  double rounding = arg_double_scalar(max_rounding, "max_rounding");
  if (!(rounding >= 0))
    Rf_error("`max_rounding` must be a non-negative number");

  kde_status status;
  kde_status_clear(&status);
  kde_cuda_model *model = NULL;
  /* a double fit far from its centre: what its points' whitening lost
   * (the model keeps it where it serves: model.cu) */
  float *residual = NULL;
  if (prec == KDE_PRECISION_DOUBLE && t.n_discrete == 0 &&
      arg_fit_residual(raw, order, center, transform, &t, &residual) != 0)
    Rf_error("out of memory for the residuals of a fit of %lld points", (long long) t.n_train);
  t.residual = residual;
  if (cuda_allowed(&status))
    model = kde_cuda_model_create(&t, prec, INTEGER(devices),
                                  (int) XLENGTH(devices), budget, rounding, &status);
  free(residual);
  if (model == NULL) {
    kde_status_set(&status, KDE_ERR_CUDA, "could not create the CUDA model");
    raise_status(&status);
  }
  /* The shape rides in the pointer's protected slot, so an evaluation can
   * check its queries against the model it really holds. */
  SEXP shape = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(shape)[0] = (double) t.n_train;
  REAL(shape)[1] = (double) t.dim;
  SEXP handle = PROTECT(R_MakeExternalPtr(model, cuda_model_tag(), shape));
  R_RegisterCFinalizerEx(handle, cuda_model_finalizer, TRUE);
  /* how its pairs are computed, for print() (kde_cuda_model_path), and
   * the expanded form's predicted rounding, from which R knows the form a
   * call's tolerance asks for (cuda_model) */
  SEXP path = PROTECT(Rf_mkString(kde_cuda_model_path(model)));
  Rf_setAttrib(handle, Rf_install("path"), path);
  SEXP predicted = PROTECT(Rf_ScalarReal(kde_cuda_model_rounding(model)));
  Rf_setAttrib(handle, Rf_install("rounding"), predicted);
  UNPROTECT(4);
  return handle;
}

/* The model behind a handle, and its shape (n_train, dim). */
kde_cuda_model *arg_cuda_model(SEXP handle, int64_t *n_train, int64_t *dim)
{
  if (!is_cuda_model_handle(handle))
    Rf_error("`model` must be a CUDA model made by kdegpu");
  SEXP shape = R_ExternalPtrProtected(handle);
  if (TYPEOF(shape) != REALSXP || XLENGTH(shape) != 2)
    Rf_error("`model` is damaged (its shape is missing)");
  kde_cuda_model *model = (kde_cuda_model *) R_ExternalPtrAddr(handle);
  if (model == NULL)
    Rf_error("`model` is no longer on the GPU (restored from a file?)");
  *n_train = (int64_t) REAL(shape)[0];
  *dim = (int64_t) REAL(shape)[1];
  return model;
}

SEXP kdegpu_cuda_model_valid(SEXP handle)
{
  return Rf_ScalarLogical(is_cuda_model_handle(handle) &&
                          R_ExternalPtrAddr(handle) != NULL &&
                          !kde_cuda_inherited());
}

SEXP kdegpu_cuda_model_release(SEXP handle)
{
  if (!Rf_isNull(handle) && !is_cuda_model_handle(handle))
    Rf_error("`model` must be a CUDA model made by kdegpu or NULL");
  if (!Rf_isNull(handle)) cuda_model_finalizer(handle);
  return R_NilValue;
}

SEXP kdegpu_log_density_cuda(SEXP handle, SEXP query, SEXP center,
                             SEXP transform, SEXP log_const,
                             SEXP leave_one_out, SEXP tolerance, SEXP threads,
                             SEXP progress_delay)
{
  int64_t n_train, dim;
  kde_status status;
  kde_status_clear(&status);
  if (!cuda_allowed(&status)) raise_status(&status);
  kde_cuda_model *model = arg_cuda_model(handle, &n_train, &dim);
  kde_query_set q = arg_query_set(query, center, transform, log_const,
                                  leave_one_out, tolerance, dim,
                                  kde_cuda_model_discrete(model), n_train,
                                  arg_threads(threads));
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) q.n_query));
  progress_begin(progress_delay);
  double share = NAN;
  q.pairs_share = &share;
  if (q.n_query > 0)
    kde_cuda_log_density(model, &q, poll_between_chunks, REAL(out), &status);
  return finish_evaluation(out, share, &status);
}

/* Draws from a CUDA fit (see kde_cuda_sample); returns a size x d matrix.
 * `scale`: NULL, or an adaptive fit's lambda_j (point j's noise is scaled
 * by it). */
SEXP kdegpu_sample_cuda(SEXP model, SEXP train, SEXP cumulative, SEXP scale, SEXP chol_h,
                        SEXP kernel, SEXP size, SEXP seed, SEXP threads,
                        SEXP progress_delay)
{
  kde_sample_request request;
  int64_t rows, cols;
  int n_threads = arg_threads(threads);
  request.kernel = arg_kernel(kernel);
  request.train = arg_matrix(train, "train", n_threads, &request.n_train,
                             &request.dim);
  if (request.n_train < 1 || request.dim < 1 || request.dim > KDE_SAMPLE_MAX_DIM)
    Rf_error("`train` must have at least one row and 1 to %d columns",
             KDE_SAMPLE_MAX_DIM);
  request.cumulative = arg_double_vector(cumulative, "cumulative", request.n_train);
  for (int64_t j = 0; j < request.n_train; j++) {
    double c = request.cumulative[j];
    if (!(c >= 0 && c <= 1) || (j > 0 && c < request.cumulative[j - 1]))
      Rf_error("`cumulative` must be non-decreasing cumulative weights in [0, 1]");
  }
  if (request.cumulative[request.n_train - 1] != 1)
    Rf_error("`cumulative` must end at 1");
  request.scale = NULL;
  if (!Rf_isNull(scale)) {
    request.scale = arg_double_vector(scale, "scale", request.n_train);
    for (int64_t j = 0; j < request.n_train; j++)
      if (!(request.scale[j] > 0) || !R_FINITE(request.scale[j]))
        Rf_error("`scale` must be positive and finite (element %lld is not)",
                 (long long) j + 1);
  }
  request.chol_h = arg_matrix(chol_h, "chol_h", 1, &rows, &cols);
  if (rows != request.dim || cols != request.dim)
    Rf_error("`chol_h` must be a %lld x %lld matrix", (long long) request.dim,
             (long long) request.dim);
  double draws = arg_double_scalar(size, "size");
  if (draws < 0 || draws != floor(draws) || draws > INT_MAX)
    Rf_error("`size` must be a whole number in 0..%d", INT_MAX);
  request.size = (int64_t) draws;
  const double *seed_words = arg_double_vector(seed, "seed", 2);
  for (int i = 0; i < 2; i++) {
    if (!(seed_words[i] >= 0 && seed_words[i] < 4294967296.0) ||
        seed_words[i] != floor(seed_words[i]))
      Rf_error("`seed` must be two whole numbers in [0, 2^32)");
    request.seed[i] = (uint32_t) seed_words[i];
  }
  kde_status status;
  kde_status_clear(&status);
  if (!cuda_allowed(&status)) raise_status(&status);
  int64_t model_n = 0, model_dim = 0;
  kde_cuda_model *handle = arg_cuda_model(model, &model_n, &model_dim);
  if (model_n != request.n_train || model_dim != request.dim)
    Rf_error("`model` must be the CUDA model of `train`");

  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) request.size, (int) request.dim));
  progress_begin(progress_delay);
  kde_cuda_sample(handle, &request, poll_between_chunks, REAL(out), &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}
