#' Fit an exact kernel density estimate
#'
#' `kde_gpu()` prepares an exact kernel density estimate of the rows of `x`
#' for evaluation with [predict()][predict.kde_gpu], sampling with
#' [sample()][sample.kde_gpu] and plotting. Evaluation is exact: every
#' training point contributes to every query, streamed in tiles with an
#' online log-sum-exp, so memory stays proportional to the data and the
#' n x m kernel matrix is never formed. It runs on NVIDIA GPUs through the
#' CUDA backend, or on all CPU cores through the OpenMP backend.
#'
#' @section Bandwidth convention:
#' As in R, the bandwidth is the *standard deviation* of the kernel, for
#' every kernel: a scalar `bw` is exactly `stats::density()`'s `bw` in 1-D
#' and means \eqn{H = bw^2 I} in d dimensions; a vector `bw` of length d
#' means `H = diag(bw^2)`; `H` is the kernel's covariance matrix, as in
#' `ks::kde()`. A full `H` is applied by whitening the data once with its
#' Cholesky factor.
#'
#' @section Kernels:
#' The kernels of `stats::density()`: `"gaussian"`, `"epanechnikov"`,
#' `"rectangular"` (alias `"tophat"`), `"triangular"` (alias `"linear"`),
#' `"biweight"`, `"cosine"`, `"optcosine"`, plus `"exponential"` (the
#' Laplace kernel). In d > 1 each is the radially symmetric kernel whose
#' profile is the 1-D one, scaled to covariance `H` and normalised in d
#' dimensions. Compact kernels give density 0 (log-density `-Inf`) outside
#' their support; the Gaussian log-density is finite and accurate however
#' far a query is from the data.
#'
#' @section Backends and precision:
#' `backend = "auto"` uses the GPU when one is usable and otherwise the CPU
#' (saying so once per session); `"cuda"` insists on a GPU and errors when
#' none is usable; `"cpu"` always uses the CPU. `precision = "single"`
#' computes in float32 on the GPU, several times faster; the CPU backend
#' always computes in double, whatever `precision` says.
#'
#' Accuracy: double precision agrees with a plain-R reference to about
#' 1e-14 relative or better on log-densities (a few 1e-13 on data spanning
#' thousands of bandwidths). In single
#' precision the GPU computes the Gaussian's squared distances either in the
#' difference form \eqn{|q - x|^2}, whose rounding is relative to each
#' pair's distance, or in the faster expanded form \eqn{|q|^2 + |x|^2 - 2 q
#' \cdot x}{|q|^2 + |x|^2 - 2 q.x} (at d >= 3; on the tensor cores at d = 3
#' and d >= 16), whose rounding grows with the square of how many
#' bandwidths the points lie from their mean. A call takes the expanded form
#' only while its predicted rounding of a density, \eqn{(0.4 + d/20)
#' \epsilon R^2}{(0.4 + d/20) eps R^2} for the farthest point R bandwidths
#' from the mean, is within the call's `tolerance` (see
#' [predict()][predict.kde_gpu]): at the default tolerance (1e-7 in single,
#' 1e-14 in double) practically every fit takes the difference form, and a
#' looser one, say `options(kdegpu.tolerance = 1e-4)`, opts into the faster
#' form (the fit's GPU copy is remade when a call asks for the other form;
#' `print()` says which it has). At d <= 4 the difference form stores each
#' point relative to the centre of its run of 64 neighbouring points (a
#' quarter of a tile of 256) and takes each query as a high and a low part,
#' so that a difference rounds relative to the pair's distance and the
#' run's size, not to where the data sit; a tile that spans a gap in the
#' data (between clusters) is split into tiles of its own, at most 32
#' bandwidths wide where that adds at most a quarter of the tiles. In
#' single precision at d = 3, a run whose points lie within about a
#' bandwidth of its centre takes the expanded form relative to that centre
#' for queries near enough (their distance from the centre times the run's
#' radius within about 44 squared bandwidths), which rounds about as the
#' difference form does there and is faster.
#' Derivatives take the difference form where the density's expanded form
#' would round too much; Hessians always do. Far from all the data a density
#' made of terms \eqn{e^{-D^2/2}}{exp(-D^2/2)} at D bandwidths keeps about
#' \eqn{6 \times 10^{-8} D^2}{6e-8 D^2} relative in single precision,
#' float's limit on the exponent. Sums of many terms are compensated
#' (Kahan). The other kernels always take the difference form. The default
#' `tolerance` of skipped terms in single precision, 1e-7
#' ([default_tolerance]), is below this rounding. What each form costs and
#' how close single comes to double on the shapes users run (clustered and
#' GPS-like data, offsets, narrow and wide bandwidths, n up to 10^8) is
#' measured in `vignette("performance", package = "kdegpu")` and the CSV
#' files of `inst/benchmarks` (each names its card, date and commit).
#'
#' [kdegpu_info()] shows what this installation can do; [kdegpu-options]
#' lists the options that set the CPU threads (`kdegpu.threads`), the GPU
#' memory an evaluation may use (`kdegpu.gpu_memory`), the GPUs
#' (`kdegpu.devices`), the tolerance, and the progress bar.
#'
#' @section Bounded support:
#' With finite `lower` or `upper` the fit is the reflection estimator: the
#' unbounded estimate folded into the box \eqn{[lower, upper]} (mass that
#' the kernels put beyond a bound is reflected back across it), so the
#' density is 0 outside the box (a query exactly on a bound is inside) and
#' integrates to 1 inside, without the bias of a plain truncation at the
#' bounds. For a coordinate with one bound that is \eqn{\hat f(x) + \hat
#' f(2L - x)}; with two bounds the folding repeats (reflections across
#' both bounds and their compositions), where the kernel reaches that far:
#' exactly for compact kernels, and up to terms below about 1e-17 of a
#' point's own term for the Gaussian and exponential kernels. In d > 1
#' every combination of the columns' reflections counts, so an evaluation
#' costs one pass over the data per image (\eqn{2^k} for k columns with
#' one bound; at most 4096) but no extra memory: the images are of the
#' queries, not copies of the data. With a diagonal H this is the classical
#' reflection estimator (data mirrored across each bound, the same
#' weights); with a full H the mirrored points carry the mirrored kernel
#' (the correlation's sign flips), which keeps the mass 1 inside the box.
#' [predict()][predict.kde_gpu] (densities, CDFs, leave-one-out, which
#' leaves out a point together with its mirror images), [logLik()],
#' [sample()][sample.kde_gpu] (draws from the unbounded estimate, folded
#' back), [quantile()][quantile.kde_gpu], [kde_grid()] and [plot()] (default
#' limits within the bounds) all honour the bounds. The bandwidth rules and
#' the plug-in selectors (`"SJ"`, `"sj-dpi"`, `"plugin"`) see the data as
#' they are: they choose the bandwidth of the unbounded estimate, which the
#' reflection then folds; `"mlcv"` maximises the bounded estimate's own
#' leave-one-out likelihood ([bw_mlcv()] with `lower`, `upper`), while
#' `"lscv"` would score the unbounded estimate and is refused with bounds.
#' An adaptive fit (`adaptive = TRUE`) with bounds folds the adaptive
#' estimate the same way; its pilot is the bounded fixed estimate, so points
#' near a bound do not get the wide kernels of a density underestimated
#' there, and the images reach as far as its widest kernel.
#'
#' @section Adaptive bandwidths:
#' With `adaptive = TRUE` the fit is the sample-point adaptive estimator
#' (Abramson, 1982; Silverman, 1986, section 5.3): training point j gets
#' its own bandwidth matrix \eqn{\lambda_j^2 H},
#' \deqn{\hat f(x) = \sum_j w_j |\lambda_j^2 H|^{-1/2} K(H^{-1/2} (x - x_j) /
#' \lambda_j),}{f(x) = sum_j w_j |lambda_j^2 H|^(-1/2) K(H^(-1/2) (x - x_j) / lambda_j),}
#' with local factors \eqn{\lambda_j = (\tilde f(x_j) / g)^{-\alpha}}{lambda_j
#' = (f~(x_j) / g)^(-alpha)}: the pilot \eqn{\tilde f}{f~} is the fixed-bandwidth
#' estimate with the same kernel, `H` and weights (whatever chose `H`: a
#' rule, a selector, `adjust`), evaluated at the training points with each
#' point's own term included (as in Silverman's definition; without it a
#' compact kernel's pilot could be 0 at an isolated point) and in double
#' precision on the fit's backend whatever `precision` says (so the factors
#' agree across backends and precisions to rounding), and \eqn{\log g
#' = \sum_j w_j \log \tilde f(x_j)}{log g = sum_j w_j log f~(x_j)} is its
#' weighted geometric mean, so the factors' weighted geometric mean is 1.
#' Points in sparse regions get wider kernels, points in dense ones
#' narrower. `alpha` is the sensitivity: 1/2 (the default) is Abramson's
#' square-root law, 0 gives the fixed estimate and larger values adapt more
#' strongly (1/d is another choice in the literature). A point of weight 0 whose pilot is 0 gets factor 1 (it
#' contributes nothing). The factors are `object$adaptive$lambda`.
#'
#' Evaluation is exact and fused as for a fixed fit (one more per-point
#' value in the tiles, on both backends; the GPU's tensor-core paths fall
#' back to its FMA kernels, so the single-precision Gaussian at d = 3 and
#' d >= 16 runs slower than a fixed fit), and skipping tiles keeps its
#' guarantee:
#' each tile's bounds use its widest and its narrowest kernel.
#' [predict()][predict.kde_gpu] (densities, `type = "cdf"`, leave-one-out,
#' which keeps the full fit's factors), [logLik()],
#' [sample()][sample.kde_gpu] (point j's noise has covariance
#' \eqn{\lambda_j^2 H}, on the GPU too), [quantile()][quantile.kde_gpu],
#' grids, margins, plots, clusters and GPU memory budgets all honour the
#' factors, and so do derivatives (`type = "gradient"`, `"hessian"`) and
#' [kde_modes()], whose sums for an adaptive fit run on the CPU (exact, in
#' double precision) whatever the fit's backend. With `lower` or `upper`
#' the adaptive estimate is folded into the box (see Bounded support), its
#' pilot the bounded fixed estimate. Not yet available: `debias`.
#'
#' Unlike `ks::kde.sp()` (ks 1.14: d = 2 only; local bandwidths from a
#' pilot's fourth derivatives on data scaled by the columns' standard
#' deviations, ignoring `H`; kernels cut off 3.7 standard deviations out on
#' a grid; weights ignored in the final sum), the factors here follow
#' Abramson's law from the fixed estimate with the given `H`, in any
#' dimension, for every kernel and with weights, and are evaluated exactly
#' anywhere. Given the same local bandwidths the two are the same sum
#' (tests/testthat/test-adaptive.R compares them).
#'
#' @section Interrupts and forked processes:
#' Ctrl-C stops an evaluation within about a second, frees its memory (host
#' and GPU) and signals R's own interrupt condition, so
#' `tryCatch(..., interrupt = )` sees it as it sees any interrupt. In a
#' process forked by [parallel::mclapply()] or [parallel::makeForkCluster()]
#' the CPU backend runs on one thread per child (OpenMP's thread pool does
#' not survive `fork()`; the children are the parallelism). A GPU cannot be
#' used in such a child once the parent has used it (a CUDA context does
#' not survive `fork()`): a new fit there uses the CPU, and a CUDA fit's
#' methods stop with an error that says to use a PSOCK cluster
#' ([parallel::makePSOCKcluster()], future's `multisession`), whose workers
#' use their GPUs normally.
#'
#' @param x The data: a numeric vector (1-D), or a matrix or data frame of
#'   numeric columns with one point per row; a data frame with `factor` or
#'   `ordered` columns is mixed data (see [kde_gpu-mixed]; the fit is then
#'   of class `"kde_mixed"`).
#' @param bw The kernel's standard deviation: one positive number, one per
#'   column, a selector's result (any of them, see [bandwidth]), or the name
#'   of a rule: `"nrd0"` (default in 1-D, as `density()`), `"nrd"` (per
#'   column in d > 1), `"scott"` (default in d > 1: \eqn{H = n^{-2/(d+4)}
#'   \mathrm{cov}(x)}), `"silverman"`, or of a selector with exact pair sums:
#'   cross-validation `"lscv"` (alias `"ucv"`, Gaussian kernel) or `"mlcv"`
#'   ([bw_lscv()]); `"SJ"` (alias `"sj-ste"`) and `"sj-dpi"` in 1-D
#'   ([bw_sj()]); `"plugin"` (ks::Hpi()'s H, [bw_plugin()]; in 1-D the SJ
#'   direct plug-in); `"scv"` (ks::Hscv()'s smoothed cross-validation,
#'   d >= 2, [bw_scv()]). A selector's name gives a full H in d > 1;
#'   `"-diagonal"` after it (`"plugin-diagonal"`) a diagonal one, and
#'   `"lscv-scalar"`, `"mlcv-scalar"` a scalar one.
#' @param H The kernel's covariance matrix (d x d, symmetric positive
#'   definite), or a selector's result, instead of `bw`.
#' @section Scale:
#' Data may lie anywhere in double precision's range; bandwidths (kernel
#' sds, also those a rule or selector chooses) from about 3e-151 to 3e150
#' work, where H and its inverse are ordinary doubles, and the rules compute
#' on rescaled data so their squares neither overflow nor underflow. A
#' bandwidth outside that range is an error that names the scale and says
#' to rescale: the fit of x / s at q / s, divided by \eqn{s^d}, is the
#' density at q.
#' @param kernel The kernel's name (see Kernels).
#' @param weights Optional non-negative weights, one per point, at least one
#'   positive; normalised to sum to 1. Zero weights contribute nothing.
#'   Every bandwidth rule honours them: `"nrd0"` and `"nrd"` through the
#'   weighted standard deviation and quartiles, `"scott"` and `"silverman"`
#'   through the weighted covariance, all with the effective sample size
#'   \eqn{1 / \sum w_i^2}; equal weights give the unweighted rules. In
#'   the rules, weights that all together are below rounding of the total
#'   (1e-300 beside 1) count as 0. Data with no spread among the points of
#'   positive weight (identical values, one such point) get `bw.nrd0()`'s
#'   fallback from `"nrd0"` in 1-D, and an error naming the cause from the
#'   other rules and in d > 1.
#' @param backend `"auto"`, `"cuda"` or `"cpu"` (see Backends and precision).
#' @param precision `"double"` or `"single"` (GPU only). Single precision is
#'   several times faster; its accuracy is under Backends and precision.
#' @param adjust A positive factor applied to the selected bandwidth, as in
#'   [stats::density()]: the fit uses `adjust * bw` (`adjust^2 * H`).
#' @param lower,upper Bounds of the support (see Bounded support): one
#'   number for every column or one per column, `-Inf` / `Inf` (the
#'   defaults) for none. The data must lie within them.
#' @param debias If `TRUE` (Gaussian kernel only), the score-debiased
#'   estimate (SD-KDE; Epstein et al., 2025, "Score-debiased kernel density
#'   estimation"): each point is moved by \eqn{H \nabla \log \hat f(x_i) / 2}
#'   along the score of the ordinary estimate (exact, from
#'   `predict(type = "gradient", log = TRUE)`, on the fit's backend), and
#'   the fit is the estimate of the moved points with the same `H`. This
#'   removes the leading \eqn{O(h^2)} bias term, so the bandwidth that
#'   suits it is larger than for the plain estimate. The fit's `x` holds
#'   the moved points.
#' @param adaptive If `TRUE`, the sample-point adaptive estimate (see
#'   Adaptive bandwidths): each point's bandwidth is scaled by a local
#'   factor from a pilot estimate, the fixed-bandwidth fit with the same
#'   `H` (with `lower`/`upper`, the bounded fixed fit; see Bounded
#'   support). Not with `debias`.
#' @param alpha The sensitivity of the local factors, a number in \[0, 1\]:
#'   \eqn{\lambda_j = (\tilde f(x_j) / g)^{-\alpha}}{lambda_j = (f~(x_j) /
#'   g)^(-alpha)}; 1/2 (the default) is Abramson's square-root law, 0 the
#'   fixed estimate. Only for `adaptive = TRUE` (an error otherwise).
#' @param lambda Mixed data only (a data frame with `factor` or `ordered`
#'   columns; see [kde_gpu-mixed]): the discrete kernels' smoothing
#'   parameters, one number for every factor column or one per factor
#'   column (by name or in order); `NULL` (the default) chooses them by
#'   maximum-likelihood cross-validation.
#' @param factor_kernel,ordered_kernel Mixed data only: the kernel of the
#'   unordered factors, `"aitchisonaitken"` (default) or `"liracine"`, and
#'   of the ordered ones, `"racineliyan"` (default), `"liracine"` or
#'   `"wangvanryzin"` (see [kde_gpu-mixed]).
#' @return An object of class `"kde_gpu"`: a list with the data `x`, the
#'   normalised `weights`, `n`, `d`, the bandwidth matrix `H` (and `bw`,
#'   its square root on the diagonal, when `H` is diagonal), `kernel`,
#'   `backend`, `precision`, `call`, `data.name`, the bounds `lower`
#'   and `upper` (one per column, infinite where there is none), and for
#'   an adaptive fit `adaptive`, a list with `alpha` and the local factors
#'   `lambda` (one per point, in the data's order). These fields are the
#'   fit as it was made, to read, not to edit: every method that evaluates
#'   stops with an error naming a field changed after fitting (refit with
#'   the new value instead).
#' @references Abramson, I. S. (1982). On bandwidth variation in kernel
#'   estimates: a square root law. *The Annals of Statistics* 10(4),
#'   1217-1223.
#'
#'   Silverman, B. W. (1986). *Density Estimation for Statistics and Data
#'   Analysis*. Chapman and Hall, London. Section 5.3 (the adaptive kernel
#'   estimate).
#' @seealso [predict.kde_gpu()], [sample.kde_gpu()], [plot.kde_gpu()],
#'   [logLik.kde_gpu()], [as.density()], [kdegpu-options] (the options
#'   kdegpu reads)
#' @examples
#' fit <- kde_gpu(faithful$eruptions, backend = "cpu")
#' fit
#' predict(fit, c(2, 3, 4.5))
#'
#' # 2-D with a full bandwidth matrix (Scott's rule by default)
#' fit2 <- kde_gpu(faithful, kernel = "epanechnikov", backend = "cpu")
#' predict(fit2, faithful[1:3, ], log = TRUE)
#'
#' # adaptive bandwidths: wider kernels in the sparse tail
#' fit_a <- kde_gpu(rivers, adaptive = TRUE, backend = "cpu")
#' fit_a
#' range(fit_a$adaptive$lambda)
#'
#' # positive data: the reflection estimator, 0 below the bound
#' fit3 <- kde_gpu(rivers, lower = 0, backend = "cpu")
#' predict(fit3, c(-1, 0, 100))
#' integrate(function(x) predict(fit3, x), 0, Inf)$value
#' @export
kde_gpu <- function(x, bw = NULL, H = NULL, kernel = "gaussian", weights = NULL,
                    backend = c("auto", "cuda", "cpu"),
                    precision = c("double", "single"), adjust = 1, lower = -Inf,
                    upper = Inf, debias = FALSE, adaptive = FALSE, alpha = 1 / 2,
                    lambda = NULL, factor_kernel = "aitchisonaitken",
                    ordered_kernel = "racineliyan") {
  data_name <- deparse1(substitute(x))
  call <- match.call()
  backend <- match_choice(backend, c("auto", "cuda", "cpu"), "backend")
  precision <- match_choice(precision, c("double", "single"), "precision")
  kernel <- resolve_kernel(kernel)
  adjust <- check_adjust(adjust)
  if (is_mixed_data(x)) {
    given <- c(lower = !missing(lower), upper = !missing(upper), debias = !missing(debias),
               adaptive = !missing(adaptive), alpha = !missing(alpha))
    return(kde_mixed(x, bw, H, kernel, weights, backend, precision, adjust, lambda,
                     factor_kernel, ordered_kernel, names(given)[given], call, data_name))
  }
  mixed_only <- c(lambda = !missing(lambda), factor_kernel = !missing(factor_kernel),
                  ordered_kernel = !missing(ordered_kernel))
  if (any(mixed_only)) {
    stop_arg(names(mixed_only)[mixed_only][1L],
             "applies to mixed data: a data frame with factor or ordered columns.")
  }
  check_flag(debias, "debias")
  if (debias && kernel != "gaussian") {
    stop_arg("debias", sprintf("needs the gaussian kernel (score debiasing is defined for it), not %s.",
                               kernel))
  }
  check_flag(adaptive, "adaptive")
  # alpha only means something for an adaptive fit: given alone it is
  # more likely a mistake than a wish for the fixed estimate
  if (!missing(alpha) && !adaptive) {
    stop_arg("alpha", "applies to adaptive fits only: add `adaptive = TRUE`.")
  }
  alpha <- check_alpha(alpha)
  if (adaptive && debias) {
    stop_arg("adaptive", "cannot be combined with `debias = TRUE` yet: choose one.")
  }
  x <- as_point_matrix(x, "x")
  weights <- normalise_weights(weights, nrow(x))
  bounds <- resolve_bounds(lower, upper, x)
  bounded <- any(is.finite(c(bounds$lower, bounds$upper)))
  if (debias && bounded) stop_arg("debias", "is not available with `lower`/`upper` bounds.")
  requested_backend <- backend
  backend <- choose_backend(backend)
  precision <- fit_precision(precision, kernel, weights, backend)
  selector <- if (is.character(bw) && length(bw) == 1L && !is.na(bw) && is.null(H)) {
    parse_selector(bw)
  }
  if (bounded && isTRUE(selector$base == "lscv")) {
    stop_arg("bw", sprintf(paste0(
      "= \"%s\" scores an unbounded estimate; with `lower` or `upper` give \"mlcv\" ",
      "(the bounded estimate's leave-one-out likelihood), `bw` or `H`, a rule (\"nrd0\", ",
      "\"nrd\", \"scott\", \"silverman\") or a plug-in selector (\"SJ\", \"sj-dpi\", ",
      "\"plugin\")."), bw))
  }
  bandwidth <- if (!is.null(selector)) {
    check_data_scale(x, weights)
    bandwidth_by_selector(x, weights, selector, kernel, backend, precision, bounds, bw)
  } else {
    resolve_bandwidth(x, weights, bw, H)
  }
  bandwidth <- adjust_bandwidth(bandwidth, adjust)
  # a selector's choice, or `adjust`, may still leave the scale that H can hold
  check_bandwidth_scale(diag(bandwidth$H), if (adjust != 1) "adjust" else "x",
                        column_magnitudes(x), bandwidth$method)
  object <- new_kde_gpu(x, weights, bandwidth, kernel, backend, precision, call, data_name)
  if (debias) {
    # SD-KDE: every point moved by H / 2 times the estimate's score there,
    # then the estimate of the moved points with the same H
    score <- evaluate_derivative(object, x, "gradient", log = TRUE)
    release_device_copy(object) # the pilot's GPU memory, before the next fit's
    moved <- x + (score %*% bandwidth$H) / 2
    dimnames(moved) <- dimnames(x)
    object <- new_kde_gpu(moved, weights, bandwidth, kernel, backend, precision, call, data_name)
  }
  if (adaptive) {
    # a bounded fit's pilot is the bounded (reflection) fixed estimate
    if (bounded) object <- set_bounds(object, bounds, kernel)
    lambda <- local_factors(pilot_log_density(object), weights, alpha)
    release_device_copy(object)
    object <- set_local_factors(object, lambda, alpha)
    # the kernel weights w_j lambda_j^-d are what reach the GPU
    object$precision <- fit_precision(object$precision, kernel, object$tile_weights, backend)
    if (backend == "cuda") cuda_model(object)
  }
  object$debias <- debias
  # Cluster workers choose their own backend unless the user asked for one.
  object$requested_backend <- requested_backend
  object$adjust <- adjust
  seal_fit(set_bounds(object, bounds, kernel))
}

# The fit's bounds and the images of its box; an adaptive fit's widest
# kernel (lambda_j^2 H) decides how far the images must reach.
set_bounds <- function(object, bounds, kernel) {
  object$lower <- bounds$lower
  object$upper <- bounds$upper
  bounded <- any(is.finite(c(bounds$lower, bounds$upper)))
  widest <- if (is.null(object$adaptive)) 1 else {
    max(object$adaptive$lambda[object$weights > 0])
  }
  object$images <- if (bounded) {
    fold_images(kernel, object$H, bounds$lower, bounds$upper, widest)
  }
  object
}

# `order`: a spatial order of x's rows to reuse instead of computing one: a
# bandwidth search's fits share the order of the data whitened by its
# starting bandwidth (a bandwidth c^2 H has H's order exactly; a nearby
# shape, an order almost as compact), and every order gives the same sums.
# `tolerance`: that of the evaluations the fit is made for (NULL: the
# default), so that its GPU copy is made once in the form they take.
# `discrete`: a mixed-data fit's discrete columns (mixed_fit.R), list(codes
# = n x k level ranks, penalty = k x 3: src/kde_backend.h's
# discrete_penalty), kept with the codes in the spatial order; its
# evaluations take queries of ncol(x) + k columns, the codes last.
new_kde_gpu <- function(x, weights, bandwidth, kernel, backend, precision,
                        call, data_name, lambda = NULL, order = NULL, tolerance = NULL,
                        discrete = NULL) {
  H <- bandwidth$H
  dimnames(H) <- list(colnames(x), colnames(x))
  white <- whitening(H, kernel)
  center <- weighted_centre(x, weights)
  object <- structure(list(
    x = x,
    weights = weights,
    n = nrow(x),
    d = ncol(x),
    H = H,
    bw = if (bandwidth$type != "full") sqrt(diag(H)) else NULL,
    bandwidth_type = bandwidth$type,
    bandwidth_method = bandwidth$method,
    kernel = kernel,
    backend = backend,
    precision = precision,
    call = call,
    data.name = data_name,
    # Evaluation state: the whitened, centred training points in a spatial
    # (k-d) order whose tiles of 256 points are compact (z; its row i is
    # point order[i] of x, its kernel's weight tile_weights[i] and, for an
    # adaptive fit, its scale tile_scale[i]; see set_local_factors()), so
    # that evaluations skip what provably cannot matter, and the constant
    # that turns a kernel sum into a log-density.
    center = center,
    transform = white$transform,
    chol_H = white$R,
    log_const = white$log_const,
    z = NULL,
    order = NULL,
    tile_size = NULL,
    tile_weights = NULL,
    tile_scale = NULL,
    id = new_data_id(), # names the data on cluster workers
    device = new.env(parent = emptyenv())
  ), class = "kde_gpu")
  spatial <- spatial_order_wanted(backend, ncol(x))
  object$tile_size <- if (spatial) spatial_tile_size else 0L
  if (spatial && is.null(order)) {
    # whitened and sorted where they are made (src/api_fit.c)
    sorted <- .Call(C_kdegpu_whiten_sort, x, as.double(center), object$transform,
                    as.double(weights), cpu_threads())
    object$z <- sorted$z
    object$order <- sorted$order
    object$tile_weights <- sorted$weights
  } else if (spatial) {
    object$order <- order
    object$z <- whiten(object, x)[order, , drop = FALSE]
    object$tile_weights <- weights[order]
  } else {
    object$z <- whiten(object, x)
    object$order <- seq_len(nrow(x))
    object$tile_weights <- weights
  }
  if (!is.null(discrete)) {
    object$discrete <- list(codes = discrete$codes[object$order, , drop = FALSE],
                            penalty = discrete$penalty)
  }
  if (!is.null(lambda)) object <- set_local_factors(object, lambda)
  if (backend == "cuda") cuda_model(object, resolve_tolerance(tolerance, object))
  object
}

# The precision a fit computes in. Single precision on the GPU keeps a
# compact kernel's weights as floats (src/cuda/pack.cu stores w_j itself
# for kernels that do not sum logs; the Gaussian and exponential keep
# log w_j, which float holds): a normalised weight below float's smallest
# normal number, 2^-126, loses its digits or becomes 0, and a query near
# only such points would get density 0 (log -Inf) where the exact one is
# finite. Such a fit computes in double instead, and says so.
fit_precision <- function(precision, kernel, weights, backend) {
  if (precision != "single" || backend != "cuda" || !is_compact_kernel(kernel)) {
    return(precision)
  }
  smallest <- min(weights[weights > 0])
  if (smallest >= 2^-126) return(precision)
  warning(sprintf(paste0(
    "`precision = \"single\"` cannot hold these `weights` with the %s kernel: the smallest ",
    "positive one is %s of the total, below float's range (1.2e-38), so the GPU's sums ",
    "would drop those points; computing in double precision instead."),
    kernel, format(smallest, digits = 3)), call. = FALSE)
  "double"
}

# ---- the sample-point adaptive estimator ----------------------------------

# The pilot: the fixed estimate at its own points, self terms kept, always
# in double precision (a single-precision CUDA fit gets a double copy for
# it), so that the local factors, part of the estimate's definition, are
# the same on every backend and precision to rounding.
pilot_log_density <- function(object) {
  if (object$backend == "cuda" && object$precision == "single") {
    object$precision <- "double"
    object$device <- new.env(parent = emptyenv())
    on.exit(release_device_copy(object))
  }
  if (is_bounded(object)) return(bounded_training_log_density(object, FALSE, NULL))
  log_density_at_training_points(object, leave_one_out = FALSE)
}

# Abramson's local factors from the pilot log-densities at the training
# points: lambda_j = (f(x_j) / g)^-alpha, log g = sum_j w_j log f(x_j) (the
# weighted geometric mean, over points of positive weight: a point of
# weight 0 may have pilot 0, and it adds nothing to the estimate anyway, so
# its factor is 1 there).
local_factors <- function(pilot, weights, alpha) {
  positive <- weights > 0
  log_g <- sum(weights[positive] * pilot[positive])
  lambda <- exp(-alpha * (pilot - log_g))
  lambda[!is.finite(pilot) | !is.finite(lambda)] <- 1
  lambda
}

# Point j's kernel gets covariance lambda_j^2 H: in whitened coordinates its
# s^2 is divided by lambda_j^2 (the backends' tile_scale) and its weight
# multiplied by lambda_j^-d. Those kernel weights are normalised to sum 1
# (as the backends expect; nothing then overflows, however small lambda),
# and the log of their total goes into log_const. `alpha`: NA for the fits
# made inside (margins, cluster shards) from an adaptive fit's factors.
set_local_factors <- function(object, lambda, alpha = NA_real_) {
  log_w <- log(object$weights) - object$d * log(lambda)
  top <- max(log_w)
  kernel_weights <- exp(log_w - top)
  total <- sum(kernel_weights)
  object$tile_weights <- (kernel_weights / total)[object$order]
  object$tile_scale <- as.double(lambda[object$order])
  object$log_const <- object$log_const + top + log(total)
  object$adaptive <- list(alpha = alpha, lambda = as.double(lambda))
  object$id <- new_data_id()
  object
}

check_alpha <- function(alpha) {
  if (!is.numeric(alpha) || length(alpha) != 1L || is.na(alpha) || !is.finite(alpha) ||
      alpha < 0 || alpha > 1) {
    stop_arg("alpha", "must be one number in [0, 1] (1/2: Abramson's square-root law).")
  }
  as.double(alpha)
}

match_choice <- function(value, choices, arg) {
  if (identical(value, choices)) return(choices[[1L]])
  if (!is.character(value) || length(value) != 1L || is.na(value) ||
      is.na(hit <- pmatch(value, choices))) {
    stop_arg(arg, "must be one of ", paste0("\"", choices, "\"", collapse = ", "), ".")
  }
  choices[[hit]]
}
