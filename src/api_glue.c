/*
 * What every .Call entry point shares (api.c, api_cuda.c, api_moments.c):
 * argument checkers that name the argument, the progress bar and the
 * interrupt poll the backends call between chunks, the one place where a
 * kde_status becomes an R condition, and the gate in front of the CUDA
 * runtime after fork().
 */
#include <float.h>
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
#include <limits.h>

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>

#include "api_glue.h"
#include "data_summary.h"
#include "finite.h"
#include "threads.h"
#include "whiten.h"
#include <kdegpu/kernels.h>

/* ---- argument checkers ------------------------------------------------- */

/* A double matrix whose dim attribute matches its length (a damaged
 * object, e.g. from readRDS() of a corrupted file, can claim more elements
 * than it holds); returns its data and dimensions. */
const double *arg_matrix_shape(SEXP x, const char *name, int64_t *nrow,
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
const double *arg_matrix(SEXP x, const char *name, int threads,
                         int64_t *nrow, int64_t *ncol)
{
  const double *data = arg_matrix_shape(x, name, nrow, ncol);
  int64_t bad = kde_first_nonfinite(data, (int64_t) XLENGTH(x), threads);
  if (bad >= 0)
    Rf_error("`%s` must contain only finite values (element %lld is not)",
             name, (long long) bad + 1);
  return data;
}

const double *arg_double_vector(SEXP x, const char *name,
                                int64_t length)
{
  if (TYPEOF(x) != REALSXP || XLENGTH(x) != length)
    Rf_error("`%s` must be a double vector of length %lld", name,
             (long long) length);
  return REAL(x);
}

double arg_double_scalar(SEXP x, const char *name)
{
  if (TYPEOF(x) != REALSXP || XLENGTH(x) != 1 || !R_FINITE(REAL(x)[0]))
    Rf_error("`%s` must be one finite double", name);
  return REAL(x)[0];
}

int arg_int_scalar(SEXP x, const char *name)
{
  if (TYPEOF(x) != INTSXP || XLENGTH(x) != 1 || INTEGER(x)[0] == NA_INTEGER)
    Rf_error("`%s` must be one non-missing integer", name);
  return INTEGER(x)[0];
}

int arg_flag(SEXP x, const char *name)
{
  if (TYPEOF(x) != LGLSXP || XLENGTH(x) != 1 || LOGICAL(x)[0] == NA_LOGICAL)
    Rf_error("`%s` must be TRUE or FALSE", name);
  return LOGICAL(x)[0];
}

int arg_kernel(SEXP x)
{
  int kernel = arg_int_scalar(x, "kernel");
  if (kernel < 0 || kernel >= KDE_N_KERNELS)
    Rf_error("`kernel` must be a kernel index in 0..%d, not %d",
             KDE_N_KERNELS - 1, kernel);
  return kernel;
}

/* Weights: non-negative, finite, summing to 1 (R normalises them). The
 * log weights are computed here once so both backends share them. */
void arg_weights(SEXP weight, int64_t n, int threads, kde_training_set *train)
{
  const double *w = arg_double_vector(weight, "weight", n);
  double *log_w = (double *) R_alloc((size_t) (n > 0 ? n : 1), sizeof(double));
  /* one pass on every allowed core (serial, 1.7 s of a fit of 1e8 points),
   * the total in blocks fixed by n */
  const int64_t rows = kde_sum_block_rows(n), n_blocks = (n + rows - 1) / rows;
  double part[KDE_SUM_MAX_BLOCKS];
  int64_t first_bad = n;
#pragma omp parallel for num_threads(kde_thread_count_for(threads, (double) n)) \
    schedule(static) reduction(min : first_bad)
  for (int64_t b = 0; b < n_blocks; b++) {
    const int64_t begin = b * rows, end = begin + rows < n ? begin + rows : n;
    double sum = 0.0;
    for (int64_t j = begin; j < end; j++) {
      const double v = w[j];
      if (!(v >= 0 && v <= DBL_MAX) && j < first_bad) first_bad = j;
      sum += v;
      log_w[j] = v > 0 ? log(v) : -INFINITY;
    }
    part[b] = sum;
  }
  if (first_bad < n)
    Rf_error("`weight` must be finite and non-negative (element %lld is not)",
             (long long) first_bad + 1);
  double total = 0.0;
  for (int64_t b = 0; b < n_blocks; b++) total += part[b];
  if (!(fabs(total - 1.0) < 1e-8))
    Rf_error("`weight` must sum to 1, not %g", total);
  train->weight = w;
  train->log_weight = log_w;
  train->inv_scale2 = NULL;
}

/* The adaptive estimator's per-point scales lambda_j (NULL: none) as the
 * backends take them, 1 / lambda_j^2 (kde_backend.h). */
const double *arg_inv_scale2(SEXP scale, int64_t n)
{
  if (Rf_isNull(scale)) return NULL;
  const double *lambda = arg_double_vector(scale, "scale", n);
  double *inv = (double *) R_alloc((size_t) n, sizeof(double));
  for (int64_t j = 0; j < n; j++) {
    inv[j] = 1.0 / (lambda[j] * lambda[j]);
    if (!(lambda[j] > 0) || !R_FINITE(lambda[j]) || !R_FINITE(inv[j]) || !(inv[j] > 0))
      Rf_error("`scale` must be positive, finite and within 1e+-150"
               " (element %lld is not)", (long long) j + 1);
  }
  return inv;
}

/* The training set from (train, weight, scale, kernel); memory owned by R. */
kde_training_set arg_training_set(SEXP train, SEXP weight, SEXP scale,
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
  arg_weights(weight, t.n_train, threads, &t);
  t.inv_scale2 = arg_inv_scale2(scale, t.n_train);
  t.n_discrete = 0;
  t.codes = t.discrete_penalty = NULL;
  t.residual = NULL;
  return t;
}

/* Mixed data: the last rows of `penalty` (NULL: none) columns of the
 * training matrix are discrete codes (kde_training_set). */
void arg_discrete(SEXP penalty, kde_training_set *t)
{
  if (Rf_isNull(penalty)) return;
  int64_t rows, cols;
  const double *p = arg_matrix_shape(penalty, "discrete", &rows, &cols);
  if (cols != 3 || rows < 1 || rows >= t->dim)
    Rf_error("`discrete` must be a k x 3 matrix, k below the columns of `train`");
  if (t->kernel != KDE_GAUSSIAN)
    Rf_error("`discrete` columns combine with the Gaussian kernel only");
  for (int64_t i = 0; i < rows * 3; i++)
    if (!(p[i] <= 0))
      Rf_error("`discrete` penalties must be at most 0 (-Inf allowed)");
  t->n_discrete = rows;
  t->dim -= rows;
  t->codes = t->train + t->dim * t->n_train;
  t->discrete_penalty = p;
}

/* The queries, and their whitening (center and transform both NULL when
 * they are whitened already). */
kde_query_set arg_query_set(SEXP query, SEXP center, SEXP transform,
                            SEXP log_const, SEXP leave_one_out,
                            SEXP tolerance, int64_t dim, int64_t n_discrete,
                            int64_t n_train, int threads)
{
  kde_query_set q;
  int64_t query_dim;
  q.query = arg_matrix(query, "query", threads, &q.n_query, &query_dim);
  if (query_dim != dim + n_discrete)
    Rf_error("`query` must have %lld columns, like `train`, not %lld",
             (long long) (dim + n_discrete), (long long) query_dim);
  q.codes = n_discrete > 0 ? q.query + dim * q.n_query : NULL;
  if (Rf_isNull(transform) != Rf_isNull(center))
    Rf_error("`center` and `transform` must both be given or both be NULL");
  q.center = q.transform = q.query_lo = NULL;
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
  q.tolerance = arg_tolerance(tolerance);
  q.host_threads = threads;
  q.pairs_share = NULL;
  if (q.leave_one_out && q.n_query != n_train)
    Rf_error("`leave_one_out` needs the queries to be the training points");
  return q;
}

/* The relative error allowed in each sum, R's message for a bad one. */
double arg_tolerance(SEXP tolerance)
{
  double value = arg_double_scalar(tolerance, "tolerance");
  if (!(value >= 0 && value < 1))
    Rf_error("`tolerance` must be one number in [0, 1): the relative error allowed "
             "(0: the full sum)");
  return value;
}

/* The user's options(kdegpu.threads), as R passes it (0: all allowed). */
int arg_threads(SEXP threads)
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
  int percent;    /* what the bar last said, and when */
  double drawn_at;
} progress = {-1, 0, 0, -1, 0};

static double seconds_now(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double) ts.tv_sec + 1e-9 * (double) ts.tv_nsec;
}

/* `delay`: seconds after which the bar appears; negative: never. */
void progress_begin(SEXP delay)
{
  progress.delay = arg_double_scalar(delay, "progress");
  progress.shown = 0;
  progress.percent = -1;
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
  /* redrawn when its percentage moves, or each second for the time left
   * (the GPU's poll comes every 20 ms) */
  const int percent = (int) (100 * done + 0.5);
  if (percent == progress.percent && elapsed - progress.drawn_at < 1) return;
  progress.percent = percent;
  progress.drawn_at = elapsed;
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
int poll_between_chunks(double done)
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
void raise_status(const kde_status *status)
{
  progress_end();
  if (status->code == KDE_OK) return;
  if (status->code == KDE_ERR_INTERRUPTED) resignal_interrupt();
  Rf_error("kdegpu: %s", status->message);
}

/* The end of an evaluation's entry point (api_glue.h): on success the
 * share of the query x training pairs it computed (kde_query_set.pairs_share)
 * becomes the attribute "pairs_share" of `out`, which R moves into the fit
 * (evaluate_log_density()); NA when nothing was evaluated. `out`, the last
 * object the caller protected, is unprotected, then a failed status becomes
 * an R condition. */
SEXP finish_evaluation(SEXP out, double share, const kde_status *status)
{
  if (status->code == KDE_OK) {
    SEXP value = PROTECT(Rf_ScalarReal(ISNAN(share) ? NA_REAL : share));
    Rf_setAttrib(out, Rf_install("pairs_share"), value);
    UNPROTECT(1);
  }
  UNPROTECT(1); /* out */
  raise_status(status);
  return out;
}

SEXP evaluate_on_cpu(const kde_training_set *train, const kde_cpu_tiles *tiles, SEXP query,
                     SEXP center, SEXP transform, SEXP log_const, SEXP leave_one_out,
                     SEXP tolerance, int n_threads, SEXP progress_delay)
{
  kde_query_set q = arg_query_set(query, center, transform, log_const, leave_one_out,
                                  tolerance, train->dim, train->n_discrete, train->n_train,
                                  n_threads);
  SEXP out = PROTECT(Rf_allocVector(REALSXP, (R_xlen_t) q.n_query));
  kde_status status;
  kde_status_clear(&status);
  progress_begin(progress_delay);
  double share = NAN;
  q.pairs_share = &share;
  kde_cpu_log_density(train, tiles, &q, n_threads, poll_between_chunks, REAL(out), &status);
  return finish_evaluation(out, share, &status);
}

static const char cuda_after_fork[] =
    "the CUDA backend cannot run in a process forked after it was used"
    " (parallel::mclapply(), makeForkCluster()): a CUDA context does not"
    " survive fork(). Use a PSOCK cluster (parallel::makePSOCKcluster(),"
    " future's multisession plan) or backend = \"cpu\" in the children";

/* Whether this process may call the CUDA runtime; if it may, remembers
 * that it did, for children forked later. */
int cuda_allowed(kde_status *status)
{
  if (kde_cuda_inherited()) {
    kde_status_set(status, KDE_ERR_UNAVAILABLE, "%s", cuda_after_fork);
    return 0;
  }
  kde_note_cuda_used();
  return 1;
}

int arg_fit_residual(SEXP raw, SEXP order, SEXP center, SEXP transform,
                     const kde_training_set *train, float **residual)
{
  const int64_t n = train->n_train, d = train->dim;
  *residual = NULL;
  if (d > KDE_WHITEN_EXACT_MAX_DIM || TYPEOF(raw) != REALSXP || TYPEOF(center) != REALSXP ||
      TYPEOF(transform) != REALSXP || (TYPEOF(order) != INTSXP && TYPEOF(order) != REALSXP) ||
      XLENGTH(order) != n || XLENGTH(center) != d || XLENGTH(transform) != d * d)
    return 0;
  SEXP raw_dim = Rf_getAttrib(raw, R_DimSymbol);
  if (TYPEOF(raw_dim) != INTSXP || XLENGTH(raw_dim) != 2 || INTEGER(raw_dim)[1] != d ||
      (double) INTEGER(raw_dim)[0] * (double) d != (double) XLENGTH(raw))
    return 0;
  double extent = 0.0;
  for (int64_t i = 0; i < n * d; i++)
    extent = fabs(train->train[i]) > extent ? fabs(train->train[i]) : extent;
  if (!(extent >= KDE_OFFSET_MIN_EXTENT)) return 0;

  const int64_t n_raw = INTEGER(raw_dim)[0];
  int64_t *rows = (int64_t *) malloc((size_t) (n > 0 ? n : 1) * sizeof(int64_t));
  float *lost = (float *) malloc((size_t) (n * d > 0 ? n * d : 1) * sizeof(float));
  if (rows == NULL || lost == NULL) {
    free(rows);
    free(lost);
    return -1;
  }
  for (int64_t i = 0; i < n; i++) {
    const double r = TYPEOF(order) == INTSXP
                         ? (INTEGER(order)[i] == NA_INTEGER ? 0.0 : (double) INTEGER(order)[i])
                         : REAL(order)[i];
    rows[i] = r >= 1 && r <= (double) n_raw ? (int64_t) r - 1 : -1;
  }
  if (kde_fit_residual(train->train, n, d, REAL(raw), n_raw, rows, REAL(center),
                       REAL(transform), train->host_threads, lost))
    *residual = lost;
  else
    free(lost);
  free(rows);
  return 0;
}
