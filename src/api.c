/*
 * The .Call glue: the only C code that sees a SEXP. Each entry point checks
 * its arguments by name (a direct .Call with junk errors, never crashes),
 * turns them into plain C values, calls a backend and turns a kde_status
 * into an R error. R has validated everything already; these checks are
 * the second line of defence.
 */
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <limits.h>

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include "api.h"
#include "kde_backend.h"
#include "kde_cuda.h"
#include "cdf.h"
#include "moments.h"
#include "derivatives.h"
#include "finite.h"
#include "spatial.h"
#include "threads.h"
#include "whiten.h"
#include <kdegpu/kernels.h>

/* ---- argument checkers ------------------------------------------------- */

/* A double matrix whose dim attribute matches its length (a damaged
 * object, e.g. from readRDS() of a corrupted file, can claim more elements
 * than it holds); returns its data and dimensions. */
static const double *arg_matrix_shape(SEXP x, const char *name, int64_t *nrow,
                                      int64_t *ncol)
{
  if (TYPEOF(x) != REALSXP)
    Rf_error("`%s` must be a double matrix, not of type '%s'", name,
             Rf_type2char(TYPEOF(x)));
  SEXP dim = Rf_getAttrib(x, R_DimSymbol);
  if (TYPEOF(dim) != INTSXP || XLENGTH(dim) != 2)
    Rf_error("`%s` must be a matrix (it has no 2-d dim attribute)", name);
  int rows = INTEGER(dim)[0], cols = INTEGER(dim)[1];
  if (rows == NA_INTEGER || cols == NA_INTEGER || rows < 0 || cols < 0 ||
      (double) rows * (double) cols != (double) XLENGTH(x))
    Rf_error("`%s` is damaged: its dim attribute (%d x %d) does not match"
             " its %lld elements", name, rows, cols, (long long) XLENGTH(x));
  *nrow = rows;
  *ncol = cols;
  return REAL(x);
}

/* A finite double matrix (the scan runs on `threads` threads). */
static const double *arg_matrix(SEXP x, const char *name, int threads,
                                int64_t *nrow, int64_t *ncol)
{
  const double *data = arg_matrix_shape(x, name, nrow, ncol);
  int64_t bad = kde_first_nonfinite(data, (int64_t) XLENGTH(x), threads);
  if (bad >= 0)
    Rf_error("`%s` must contain only finite values (element %lld is not)",
             name, (long long) bad + 1);
  return data;
}

static const double *arg_double_vector(SEXP x, const char *name,
                                       int64_t length)
{
  if (TYPEOF(x) != REALSXP || XLENGTH(x) != length)
    Rf_error("`%s` must be a double vector of length %lld", name,
             (long long) length);
  return REAL(x);
}

static double arg_double_scalar(SEXP x, const char *name)
{
  if (TYPEOF(x) != REALSXP || XLENGTH(x) != 1 || !R_FINITE(REAL(x)[0]))
    Rf_error("`%s` must be one finite double", name);
  return REAL(x)[0];
}

static int arg_int_scalar(SEXP x, const char *name)
{
  if (TYPEOF(x) != INTSXP || XLENGTH(x) != 1 || INTEGER(x)[0] == NA_INTEGER)
    Rf_error("`%s` must be one non-missing integer", name);
  return INTEGER(x)[0];
}

static int arg_flag(SEXP x, const char *name)
{
  if (TYPEOF(x) != LGLSXP || XLENGTH(x) != 1 || LOGICAL(x)[0] == NA_LOGICAL)
    Rf_error("`%s` must be TRUE or FALSE", name);
  return LOGICAL(x)[0];
}

static int arg_kernel(SEXP x)
{
  int kernel = arg_int_scalar(x, "kernel");
  if (kernel < 0 || kernel >= KDE_N_KERNELS)
    Rf_error("`kernel` must be a kernel index in 0..%d, not %d",
             KDE_N_KERNELS - 1, kernel);
  return kernel;
}

/* Weights: non-negative, finite, summing to 1 (R normalises them). The
 * log weights are computed here once so both backends share them. */
static void arg_weights(SEXP weight, int64_t n, kde_training_set *train)
{
  const double *w = arg_double_vector(weight, "weight", n);
  double total = 0.0;
  for (int64_t j = 0; j < n; j++) {
    if (!R_FINITE(w[j]) || w[j] < 0)
      Rf_error("`weight` must be finite and non-negative (element %lld is not)",
               (long long) j + 1);
    total += w[j];
  }
  if (!(fabs(total - 1.0) < 1e-8))
    Rf_error("`weight` must sum to 1, not %g", total);
  double *log_w = (double *) R_alloc((size_t) n, sizeof(double));
  for (int64_t j = 0; j < n; j++)
    log_w[j] = w[j] > 0 ? log(w[j]) : -INFINITY;
  train->weight = w;
  train->log_weight = log_w;
}

/* The training set from (train, weight, kernel); memory owned by R. */
static kde_training_set arg_training_set(SEXP train, SEXP weight,
                                         SEXP kernel, SEXP tile_size,
                                         int threads)
{
  kde_training_set t;
  t.kernel = arg_kernel(kernel);
  t.tile_size = arg_int_scalar(tile_size, "tile_size");
  t.host_threads = threads;
  if (t.tile_size != 0 && t.tile_size != KDE_TILE_POINTS)
    Rf_error("`tile_size` must be 0 (points in no spatial order) or %d",
             KDE_TILE_POINTS);
  t.train = arg_matrix(train, "train", threads, &t.n_train, &t.dim);
  if (t.n_train < 1 || t.dim < 1)
    Rf_error("`train` must have at least one row and one column");
  arg_weights(weight, t.n_train, &t);
  return t;
}

/* The queries, and their whitening (center and transform both NULL when
 * they are whitened already). */
static kde_query_set arg_query_set(SEXP query, SEXP center, SEXP transform,
                                   SEXP log_const, SEXP leave_one_out,
                                   SEXP tolerance, int64_t dim,
                                   int64_t n_train, int threads)
{
  kde_query_set q;
  int64_t query_dim;
  q.query = arg_matrix(query, "query", threads, &q.n_query, &query_dim);
  if (query_dim != dim)
    Rf_error("`query` must have %lld columns, like `train`, not %lld",
             (long long) dim, (long long) query_dim);
  if (Rf_isNull(transform) != Rf_isNull(center))
    Rf_error("`center` and `transform` must both be given or both be NULL");
  q.center = q.transform = NULL;
  if (!Rf_isNull(transform)) {
    int64_t rows, cols;
    q.center = arg_double_vector(center, "center", dim);
    q.transform = arg_matrix(transform, "transform", threads, &rows, &cols);
    if (rows != dim || cols != dim)
      Rf_error("`transform` must be a %lld x %lld matrix", (long long) dim,
               (long long) dim);
  }
  q.log_const = arg_double_scalar(log_const, "log_const");
  q.leave_one_out = arg_flag(leave_one_out, "leave_one_out");
  q.tolerance = arg_double_scalar(tolerance, "tolerance");
  q.host_threads = threads;
  q.pairs_share = NULL;
  if (!(q.tolerance >= 0 && q.tolerance < 1))
    Rf_error("`tolerance` must be in [0, 1), not %g", q.tolerance);
  if (q.leave_one_out && q.n_query != n_train)
    Rf_error("`leave_one_out` needs the queries to be the training points");
  return q;
}

/* The user's options(kdegpu.threads), as R passes it (0: all allowed). */
static int arg_threads(SEXP threads)
{
  int n = arg_int_scalar(threads, "threads");
  if (n < 0) Rf_error("`threads` must be 0 (all allowed) or positive");
  return n;
}

/* ---- interrupts, progress and errors ------------------------------------ */

static void check_interrupt(void *unused)
{
  (void) unused;
  R_CheckUserInterrupt();
}

/* The progress bar of the running evaluation: .Call runs on R's main
 * thread, one evaluation at a time, and so do the backends' polls. */
#define PROGRESS_WIDTH 30
static struct {
  double delay;   /* seconds before the bar appears; negative: no bar */
  double start;
  int shown;
} progress = {-1, 0, 0};

static double seconds_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

/* `delay`: seconds after which the bar appears; negative: never. */
static void progress_begin(SEXP delay)
{
  progress.delay = arg_double_scalar(delay, "progress");
  progress.shown = 0;
  progress.start = seconds_now();
}

/* Clears the bar, so that what R prints next starts on a clean line. */
static void progress_end(void)
{
  if (progress.shown) REprintf("\r%*s\r", PROGRESS_WIDTH + 40, "");
  progress.delay = -1;
  progress.shown = 0;
}

static void progress_draw(double done)
{
  static const char bar[] = "==============================";
  const double elapsed = seconds_now() - progress.start;
  if (progress.delay < 0 || elapsed < progress.delay || !(done > 0) ||
      done >= 1)
    return;
  REprintf("\rkdegpu: [%-*.*s] %3.0f%%, about %.0f s left ", PROGRESS_WIDTH,
           (int) (done * PROGRESS_WIDTH), bar, 100 * done,
           elapsed * (1 - done) / done);
  progress.shown = 1;
}

/* The backends' poll between chunks (kde_interrupt_probe): draws the bar,
 * then asks R whether the user pressed Ctrl-C. R_CheckUserInterrupt
 * longjmps; R_ToplevelExec catches that, so the backend learns about the
 * interrupt as a return value and frees its memory before the glue passes
 * the interrupt on (jeroen/curl's pattern). */
static int poll_between_chunks(double done)
{
  progress_draw(done);
  return !R_ToplevelExec(check_interrupt, NULL);
}

/* Passes on an interrupt that the poll caught, once the backend has freed
 * everything, as R itself does for Ctrl-C (errors.c, onintr): it signals a
 * condition of class c("interrupt", "condition"), which
 * tryCatch(interrupt = ) and withCallingHandlers() see, and when no
 * handler takes it, jumps to the top level through the "abort" restart,
 * as an interrupt does. Only R API functions: no internal entry point. */
static void NORET resignal_interrupt(void)
{
  SEXP condition = PROTECT(Rf_allocVector(VECSXP, 0));
  SEXP classes = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_STRING_ELT(classes, 0, Rf_mkChar("interrupt"));
  SET_STRING_ELT(classes, 1, Rf_mkChar("condition"));
  Rf_setAttrib(condition, R_ClassSymbol, classes);
  SEXP signal = PROTECT(Rf_lang2(Rf_install("signalCondition"), condition));
  Rf_eval(signal, R_BaseEnv);
  SEXP abort = PROTECT(Rf_lang2(Rf_install("invokeRestart"), Rf_mkString("abort")));
  Rf_eval(abort, R_BaseEnv);
  UNPROTECT(4);
  Rf_error("kdegpu: interrupted"); /* not reached: "abort" always exists */
}

/* The one place where a backend's status becomes an R condition. */
static void raise_status(const kde_status *status)
{
  progress_end();
  if (status->code == KDE_OK) return;
  if (status->code == KDE_ERR_INTERRUPTED) resignal_interrupt();
  Rf_error("kdegpu: %s", status->message);
}

/* The share of the query x training pairs that an evaluation computed
 * (kde_query_set.pairs_share), as the attribute "pairs_share" of its result,
 * which R moves into the fit (evaluate_log_density()); NA when nothing was
 * evaluated. `out` is protected. */
static void set_pairs_share(SEXP out, double share)
{
  SEXP value = PROTECT(Rf_ScalarReal(ISNAN(share) ? NA_REAL : share));
  Rf_setAttrib(out, Rf_install("pairs_share"), value);
  UNPROTECT(1);
}

/* ---- CPU ---------------------------------------------------------------- */

SEXP kdegpu_log_density_cpu(SEXP train, SEXP weight, SEXP tile_size,
                            SEXP query, SEXP center, SEXP transform,
                            SEXP kernel, SEXP log_const, SEXP leave_one_out,
                            SEXP tolerance, SEXP threads, SEXP progress_delay)
{
  int n_threads = arg_threads(threads);
  kde_training_set t = arg_training_set(train, weight, kernel, tile_size,
                                        n_threads);
  kde_query_set q = arg_query_set(query, center, transform, log_const,
                                  leave_one_out, tolerance, t.dim, t.n_train,
                                  n_threads);

  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) q.n_query));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  double share = NAN;
  q.pairs_share = &share;
  kde_cpu_log_density(&t, &q, n_threads, poll_between_chunks, REAL(out),
                      &status);
  if (status.code == KDE_OK) set_pairs_share(out, share);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

/* The CDF (cdf.c) of a product-kernel estimate, bounded coordinates folded
 * in; R checked the kernel and H. `images` is list(count, sign, shift). */
SEXP kdegpu_cdf_cpu(SEXP train, SEXP weight, SEXP bandwidth, SEXP kernel,
                    SEXP query, SEXP lower, SEXP upper, SEXP images,
                    SEXP threads, SEXP progress_delay)
{
  int n_threads = arg_threads(threads);
  kde_cdf_problem p;
  int64_t query_rows, query_dim;
  p.kernel = arg_kernel(kernel);
  p.train = arg_matrix(train, "train", n_threads, &p.n_train, &p.dim);
  if (p.n_train < 1 || p.dim < 1)
    Rf_error("`train` must have at least one row and one column");
  if (p.dim > 1 && p.kernel != KDE_GAUSSIAN)
    Rf_error("`kernel` must be the Gaussian (0) in more than one dimension");
  kde_training_set weights;
  arg_weights(weight, p.n_train, &weights);
  p.weight = weights.weight;
  p.bandwidth = arg_double_vector(bandwidth, "bandwidth", p.dim);
  p.lower = arg_double_vector(lower, "lower", p.dim);
  p.upper = arg_double_vector(upper, "upper", p.dim);
  for (int64_t c = 0; c < p.dim; c++) {
    if (!(p.bandwidth[c] > 0) || !R_FINITE(p.bandwidth[c]))
      Rf_error("`bandwidth` must be positive and finite");
    if (ISNAN(p.lower[c]) || ISNAN(p.upper[c]) || !(p.lower[c] < p.upper[c]))
      Rf_error("`lower` must be below `upper` in every coordinate");
  }
  if (TYPEOF(images) != VECSXP || XLENGTH(images) != 3)
    Rf_error("`images` must be list(count, sign, shift)");
  SEXP count = VECTOR_ELT(images, 0);
  if (TYPEOF(count) != INTSXP || XLENGTH(count) != p.dim)
    Rf_error("`images$count` must be an integer vector with one count per column");
  int64_t *counts = (int64_t *) R_alloc((size_t) p.dim, sizeof(int64_t));
  int64_t n_images = 0;
  for (int64_t c = 0; c < p.dim; c++) {
    int value = INTEGER(count)[c];
    if (value == NA_INTEGER || value < 1)
      Rf_error("`images$count` must be positive");
    counts[c] = value;
    n_images += value;
  }
  p.image_count = counts;
  p.image_sign = arg_double_vector(VECTOR_ELT(images, 1), "images$sign", n_images);
  p.image_shift = arg_double_vector(VECTOR_ELT(images, 2), "images$shift", n_images);
  for (int64_t g = 0; g < n_images; g++)
    if ((p.image_sign[g] != 1 && p.image_sign[g] != -1) || !R_FINITE(p.image_shift[g]))
      Rf_error("`images` must have signs of 1 or -1 and finite shifts");
  const double *q = arg_matrix_shape(query, "query", &query_rows, &query_dim);
  if (query_dim != p.dim)
    Rf_error("`query` must have %lld columns, like `train`", (long long) p.dim);
  for (int64_t i = 0; i < query_rows * query_dim; i++)
    if (ISNAN(q[i])) Rf_error("`query` must not contain NA or NaN");

  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) query_rows));
  kde_status status;
  progress_begin(progress_delay);
  kde_cpu_cdf(&p, q, query_rows, n_threads, poll_between_chunks, REAL(out), &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

SEXP kdegpu_cpu_info(SEXP threads)
{
  int n_threads = arg_threads(threads);
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 3));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, 3));
  SET_VECTOR_ELT(out, 0, Rf_ScalarLogical(kde_has_openmp()));
  SET_VECTOR_ELT(out, 1, Rf_ScalarInteger(kde_thread_count(n_threads)));
  SET_VECTOR_ELT(out, 2, Rf_ScalarLogical(kde_in_forked_child()));
  SET_STRING_ELT(names, 0, Rf_mkChar("openmp"));
  SET_STRING_ELT(names, 1, Rf_mkChar("threads"));
  SET_STRING_ELT(names, 2, Rf_mkChar("forked_child"));
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

/* Row-wise log-sum-exp of an m x k matrix of log values (-Inf allowed),
 * with the kernels' own merge: how partial results over training shards,
 * computed anywhere, are combined. */
SEXP kdegpu_lse_rows(SEXP parts)
{
  int64_t m, k;
  const double *p = arg_matrix_shape(parts, "parts", &m, &k);
  for (int64_t i = 0; i < m * k; i++)
    if (ISNAN(p[i]) || p[i] == INFINITY)
      Rf_error("`parts` must hold log values in [-Inf, Inf), not NaN or Inf");
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) m));
  for (int64_t i = 0; i < m; i++) {
    kde_lse state = kde_lse_empty();
    for (int64_t c = 0; c < k; c++) state = kde_lse_add(state, p[i + c * m]);
    REAL(out)[i] = kde_lse_log(state);
  }
  UNPROTECT(1);
  return out;
}

/* The 1-based position of the first NA, NaN or infinite element of a double
 * vector, 0 if there is none: R's is.finite() would allocate a logical
 * copy of the data (256 MB for 1e6 points in 64-D) just to say "fine". */
SEXP kdegpu_first_nonfinite(SEXP x, SEXP threads)
{
  if (TYPEOF(x) != REALSXP) Rf_error("`x` must be a double vector");
  int n_threads = arg_threads(threads);
  return Rf_ScalarReal(
      (double) kde_first_nonfinite(REAL(x), (int64_t) XLENGTH(x), n_threads) + 1);
}

/* The spatial order of a fit's whitened points (kde_kd_order: tiles of
 * KDE_TILE_POINTS, each in blocks of KDE_QUERY_BLOCK, so that
 * leave-one-out's queries, the training points themselves, come in compact
 * blocks too), 1-based for R. */
SEXP kdegpu_spatial_order(SEXP x, SEXP threads)
{
  int64_t n, d;
  int n_threads = arg_threads(threads);
  const double *data = arg_matrix(x, "x", n_threads, &n, &d);
  int64_t *order = (int64_t *) R_alloc((size_t) (n > 0 ? n : 1), sizeof(int64_t));
  kde_kd_order(data, n, d, KDE_TILE_POINTS, KDE_QUERY_BLOCK, n_threads, order);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) n));
  for (int64_t i = 0; i < n; i++) REAL(out)[i] = (double) order[i] + 1;
  UNPROTECT(1);
  return out;
}

/* z = (x - center) T, the whitening every evaluation's queries go through. */
SEXP kdegpu_whiten(SEXP x, SEXP center, SEXP transform, SEXP threads)
{
  int64_t n, d, t_rows, t_cols;
  int n_threads = arg_threads(threads);
  const double *data = arg_matrix(x, "x", n_threads, &n, &d);
  const double *c = arg_double_vector(center, "center", d);
  const double *t = arg_matrix(transform, "transform", n_threads, &t_rows, &t_cols);
  if (t_rows != d || t_cols != d)
    Rf_error("`transform` must be a %lld x %lld matrix", (long long) d, (long long) d);
  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) n, (int) d));
  kde_whiten(data, n, d, c, t, n_threads, REAL(out));
  UNPROTECT(1);
  return out;
}

/* ---- kernel constants --------------------------------------------------- */

/* c(scale, log_norm_const) of kernels.h, so R uses the same numbers. */
SEXP kdegpu_kernel_constants(SEXP kernel, SEXP dim)
{
  int k = arg_kernel(kernel);
  int d = arg_int_scalar(dim, "dim");
  if (d < 1) Rf_error("`dim` must be at least 1");
  SEXP out = PROTECT(Rf_allocVector(REALSXP, 2));
  REAL(out)[0] = kde_scale(k, d);
  REAL(out)[1] = kde_log_norm_const(k, d);
  UNPROTECT(1);
  return out;
}

/* ---- CUDA --------------------------------------------------------------- */

static const char cuda_after_fork[] =
    "the CUDA backend cannot run in a process forked after it was used"
    " (parallel::mclapply(), makeForkCluster()): a CUDA context does not"
    " survive fork(). Use a PSOCK cluster (parallel::makePSOCKcluster(),"
    " future's multisession plan) or backend = \"cpu\" in the children";

/* Whether this process may call the CUDA runtime; if it may, remembers
 * that it did, for children forked later. */
static int cuda_allowed(kde_status *status)
{
  if (kde_cuda_inherited()) {
    kde_status_set(status, KDE_ERR_UNAVAILABLE, "%s", cuda_after_fork);
    return 0;
  }
  kde_note_cuda_used();
  return 1;
}

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
SEXP kdegpu_cuda_model_create(SEXP train, SEXP weight, SEXP tile_size,
                              SEXP kernel, SEXP precision, SEXP devices,
                              SEXP memory_budget, SEXP threads)
{
  int n_threads = arg_threads(threads);
  kde_training_set t = arg_training_set(train, weight, kernel, tile_size,
                                        n_threads);
  int prec = arg_int_scalar(precision, "precision");
  if (prec != KDE_PRECISION_DOUBLE && prec != KDE_PRECISION_SINGLE)
    Rf_error("`precision` must be 0 (double) or 1 (single)");
  if (TYPEOF(devices) != INTSXP || XLENGTH(devices) < 1)
    Rf_error("`devices` must be a non-empty integer vector");
  for (R_xlen_t i = 0; i < XLENGTH(devices); i++)
    if (INTEGER(devices)[i] == NA_INTEGER || INTEGER(devices)[i] < 0)
      Rf_error("`devices` must hold non-negative device indices");
  double budget = arg_double_scalar(memory_budget, "memory_budget");

  kde_status status;
  kde_status_clear(&status);
  kde_cuda_model *model = NULL;
  if (cuda_allowed(&status))
    model = kde_cuda_model_create(&t, prec, INTEGER(devices),
                                  (int) XLENGTH(devices), budget, &status);
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
  UNPROTECT(2);
  return handle;
}

/* The model behind a handle, and its shape (n_train, dim). */
static kde_cuda_model *arg_cuda_model(SEXP handle, int64_t *n_train,
                                      int64_t *dim)
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
                                  leave_one_out, tolerance, dim, n_train,
                                  arg_threads(threads));
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) q.n_query));
  progress_begin(progress_delay);
  double share = NAN;
  q.pairs_share = &share;
  if (q.n_query > 0)
    kde_cuda_log_density(model, &q, poll_between_chunks, REAL(out), &status);
  if (status.code == KDE_OK) set_pairs_share(out, share);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

/* Draws from a CUDA fit (see kde_cuda_sample); returns a size x d matrix. */
SEXP kdegpu_sample_cuda(SEXP train, SEXP cumulative, SEXP chol_h, SEXP kernel,
                        SEXP size, SEXP seed, SEXP device, SEXP memory_budget,
                        SEXP threads, SEXP progress_delay)
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
  int gpu = arg_int_scalar(device, "device");
  double budget = arg_double_scalar(memory_budget, "memory_budget");

  SEXP out = PROTECT(Rf_allocMatrix(REALSXP, (int) request.size, (int) request.dim));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  if (cuda_allowed(&status))
    kde_cuda_sample(&request, gpu, budget, poll_between_chunks, REAL(out), &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

/* ---- Gaussian moment sums (moments.h) ----------------------------------- */

/* Multi-indices beyond this many would take more memory per query than any
 * caller needs (d = 100 at degree 2 has 5151). */
#define MOMENT_COUNT_LIMIT 100000

static int arg_degree(SEXP degree)
{
  int p = arg_int_scalar(degree, "degree");
  if (p < 0 || p > KDE_MOMENT_MAX_DEGREE)
    Rf_error("`degree` must be in 0..%d, not %d", KDE_MOMENT_MAX_DEGREE, p);
  return p;
}

/* The problem from (train, weight, query, degree, pairs); log weights in
 * R's memory. Weights need not sum to 1. */
static kde_moment_problem arg_moment_problem(SEXP train, SEXP weight,
                                             SEXP query, SEXP degree,
                                             SEXP pairs, int threads,
                                             int64_t *count)
{
  kde_moment_problem pr;
  int64_t query_dim;
  pr.train = arg_matrix(train, "train", threads, &pr.n_train, &pr.dim);
  if (pr.n_train < 1 || pr.dim < 1)
    Rf_error("`train` must have at least one row and one column");
  pr.query = arg_matrix(query, "query", threads, &pr.n_query, &query_dim);
  if (query_dim != pr.dim)
    Rf_error("`query` must have %lld columns, like `train`, not %lld",
             (long long) pr.dim, (long long) query_dim);
  const double *w = arg_double_vector(weight, "weight", pr.n_train);
  double *log_w = (double *) R_alloc((size_t) pr.n_train, sizeof(double));
  for (int64_t j = 0; j < pr.n_train; j++) {
    if (!R_FINITE(w[j]) || w[j] < 0)
      Rf_error("`weight` must be finite and non-negative (element %lld is not)",
               (long long) j + 1);
    log_w[j] = w[j] > 0 ? log(w[j]) : -INFINITY;
  }
  pr.log_weight = log_w;
  pr.degree = arg_degree(degree);
  pr.pairs = arg_int_scalar(pairs, "pairs");
  if (pr.pairs < KDE_PAIRS_ALL || pr.pairs > KDE_PAIRS_ABOVE)
    Rf_error("`pairs` must be 0 (all), 1 (leave one out) or 2 (j > i), not %d",
             pr.pairs);
  if (pr.pairs != KDE_PAIRS_ALL && pr.n_query != pr.n_train)
    Rf_error("`pairs` %d needs the queries to be the training points", pr.pairs);
  *count = kde_moment_count(pr.dim, pr.degree, MOMENT_COUNT_LIMIT);
  if (*count < 0)
    Rf_error("%lld dimensions at degree %d give more than %d moment sums per query",
             (long long) pr.dim, pr.degree, MOMENT_COUNT_LIMIT);
  return pr;
}

/* list(log_scale = n_query values, sums = n_query x count matrix). */
static SEXP moment_result(int64_t n_query, int64_t count)
{
  SEXP out = PROTECT(Rf_allocVector(VECSXP, 2));
  SEXP names = PROTECT(Rf_allocVector(STRSXP, 2));
  SET_VECTOR_ELT(out, 0, Rf_allocVector(REALSXP, (R_xlen_t) n_query));
  SET_VECTOR_ELT(out, 1, Rf_allocMatrix(REALSXP, (int) n_query, (int) count));
  SET_STRING_ELT(names, 0, Rf_mkChar("log_scale"));
  SET_STRING_ELT(names, 1, Rf_mkChar("sums"));
  Rf_setAttrib(out, R_NamesSymbol, names);
  UNPROTECT(2);
  return out;
}

SEXP kdegpu_moments_cpu(SEXP train, SEXP weight, SEXP query, SEXP degree,
                        SEXP pairs, SEXP threads, SEXP progress_delay)
{
  int64_t count;
  int n_threads = arg_threads(threads);
  kde_moment_problem pr = arg_moment_problem(train, weight, query, degree,
                                             pairs, n_threads, &count);
  if (pr.n_query > INT_MAX) Rf_error("`query` has too many rows");
  SEXP out = PROTECT(moment_result(pr.n_query, count));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  kde_cpu_moments(&pr, n_threads, poll_between_chunks,
                  REAL(VECTOR_ELT(out, 0)), REAL(VECTOR_ELT(out, 1)), &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

SEXP kdegpu_moments_cuda(SEXP train, SEXP weight, SEXP query, SEXP degree,
                         SEXP pairs, SEXP device, SEXP memory_budget,
                         SEXP threads, SEXP progress_delay)
{
  int64_t count;
  int n_threads = arg_threads(threads);
  kde_moment_problem pr = arg_moment_problem(train, weight, query, degree,
                                             pairs, n_threads, &count);
  if (pr.n_query > INT_MAX) Rf_error("`query` has too many rows");
  int gpu = arg_int_scalar(device, "device");
  if (gpu < 0) Rf_error("`device` must be a non-negative device index");
  double budget = arg_double_scalar(memory_budget, "memory_budget");
  SEXP out = PROTECT(moment_result(pr.n_query, count));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  if (cuda_allowed(&status) && pr.n_query > 0)
    kde_cuda_moments(&pr, gpu, budget, poll_between_chunks,
                     REAL(VECTOR_ELT(out, 0)), REAL(VECTOR_ELT(out, 1)), &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}

/* The multi-indices of kde_moment_index, as a count x dim integer matrix
 * (row m: the exponents of moment sum m). */
SEXP kdegpu_moment_index(SEXP dim, SEXP degree)
{
  int d = arg_int_scalar(dim, "dim");
  int p = arg_degree(degree);
  if (d < 1) Rf_error("`dim` must be at least 1");
  int64_t count = kde_moment_count(d, p, MOMENT_COUNT_LIMIT);
  if (count < 0)
    Rf_error("%d dimensions at degree %d give more than %d moment sums", d, p,
             MOMENT_COUNT_LIMIT);
  SEXP out = PROTECT(Rf_allocMatrix(INTSXP, (int) count, d));
  kde_moment_index(d, p, count, INTEGER(out), NULL, NULL);
  UNPROTECT(1);
  return out;
}

/* ---- kernel-derivative sums (derivatives.h) ------------------------------ */

/* list(log_scale, s0, k1sum, first = m x d, second = m x d*d or NULL). */
SEXP kdegpu_derivative_sums_cpu(SEXP kernel, SEXP train, SEXP log_weight,
                                SEXP query, SEXP second, SEXP threads,
                                SEXP progress_delay)
{
  int n_threads = arg_threads(threads);
  kde_derivative_problem p;
  int64_t query_dim;
  p.kernel = arg_kernel(kernel);
  p.train = arg_matrix(train, "train", n_threads, &p.n_train, &p.dim);
  if (p.n_train < 1 || p.dim < 1)
    Rf_error("`train` must have at least one row and one column");
  p.query = arg_matrix(query, "query", n_threads, &p.n_query, &query_dim);
  if (query_dim != p.dim)
    Rf_error("`query` must have %lld columns, like `train`", (long long) p.dim);
  if (p.n_query > INT_MAX || p.dim * p.dim > INT_MAX / (p.n_query > 0 ? p.n_query : 1))
    Rf_error("`query` has too many rows");
  p.log_weight = arg_double_vector(log_weight, "log_weight", p.n_train);
  for (int64_t j = 0; j < p.n_train; j++)
    if (ISNAN(p.log_weight[j]) || p.log_weight[j] == INFINITY)
      Rf_error("`log_weight` must be below Inf and not NaN (element %lld)", (long long) j + 1);
  int want_second = arg_flag(second, "second");
  const int m = (int) p.n_query, d = (int) p.dim;

  SEXP out = PROTECT(Rf_allocVector(VECSXP, 5));
  SET_VECTOR_ELT(out, 0, Rf_allocVector(REALSXP, m));
  SET_VECTOR_ELT(out, 1, Rf_allocVector(REALSXP, m));
  SET_VECTOR_ELT(out, 2, Rf_allocVector(REALSXP, m));
  SET_VECTOR_ELT(out, 3, Rf_allocMatrix(REALSXP, m, d));
  if (want_second) SET_VECTOR_ELT(out, 4, Rf_allocMatrix(REALSXP, m, d * d));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  kde_cpu_derivative_sums(&p, n_threads, poll_between_chunks, REAL(VECTOR_ELT(out, 0)),
                          REAL(VECTOR_ELT(out, 1)), REAL(VECTOR_ELT(out, 2)),
                          REAL(VECTOR_ELT(out, 3)),
                          want_second ? REAL(VECTOR_ELT(out, 4)) : NULL, &status);
  UNPROTECT(1);
  raise_status(&status);
  return out;
}
