#' Bandwidth selection by exact cross-validation
#'
#' `bw_lscv()` minimises the least-squares (unbiased) cross-validation
#' criterion and `bw_mlcv()` maximises the leave-one-out likelihood, over a
#' scalar bandwidth, one per coordinate, or a full bandwidth matrix. Both
#' evaluate their criterion exactly, with no binning, through the same fused
#' kernels as [predict()][predict.kde_gpu] (on the GPU when `backend` allows),
#' which is what makes O(n^2) criteria affordable at large n.
#'
#' The criteria, with weights \eqn{w_i} summing to 1 and \eqn{\hat f_{-i}}
#' the estimate without point i (its weight renormalised):
#' \deqn{\mathrm{LSCV}(H) = \int \hat f^2 - 2 \sum_i w_i \hat f_{-i}(x_i),
#'   \qquad \int \hat f^2 = \sum_{i,j} w_i w_j K_{2H}(x_i - x_j),}
#' \deqn{\mathrm{MLCV}(H) = \sum_i n w_i \log \hat f_{-i}(x_i)}
#' (the [logLik()][logLik.kde_gpu] of a fit). LSCV needs the kernel's
#' self-convolution in closed form, which the Gaussian kernel has (a Gaussian
#' with covariance 2H); it is the only kernel `bw_lscv()` supports. MLCV works
#' with every kernel; with a compact kernel it is `-Inf` for bandwidths so small
#' that some point has no neighbour within reach. Self terms are excluded
#' inside the kernel sums, exactly, also for duplicated points.
#'
#' The criteria can have several local optima, so the search is global: a
#' grid of bandwidths proportional to the normal-reference bandwidth
#' (`range` gives its limits as factors), then a local optimiser from the
#' best grid point: [stats::optimize()] for a scalar (for the kernels with
#' kinked or stepped criteria, first a finer grid around the three best
#' grid points, and for `"rectangular"`, whose likelihood is a step
#' function of the bandwidth, the exact maximum over every pair's distance
#' in the range when n <= 2000); otherwise, over log
#' standard deviations relative to the start or over the Cholesky factor of
#' H relative to the start's, [stats::nlm()] (a Newton-type search with
#' finite-difference gradients) for the kernels whose criteria are smooth
#' in H (gaussian, exponential, biweight, cosine), with Nelder-Mead
#' ([stats::optim()]) taking over where it stops without converging, and
#' Nelder-Mead restarted from its own answer for the others, whose
#' criteria have kinks where pairs cross the edge of the support. A
#' warning says when the optimum lies at the end of the search range, as
#' [stats::bw.ucv()] does.
#'
#' Exact ties (rounded data, a discrete column) make the criteria unbounded:
#' a tied pair's kernel term grows without bound as the bandwidth along the
#' tied column shrinks, so LSCV falls to \eqn{-\infty} once the tied pairs
#' outweigh the self terms of \eqn{\int \hat f^2}, and the leave-one-out
#' likelihood rises to \eqn{+\infty} when every point has a twin. The
#' selectors find these columns (all columns at once for a scalar
#' bandwidth) before searching. Where the search ends in one (its
#' bandwidth there below both the spacing of the column's distinct values
#' and the grid's lower end, or a scalar search at the grid's lower end),
#' they stop with an error that names the column and the alternatives
#' (MLCV for LSCV, a plug-in, or [jitter()]), since no bandwidth minimises
#' the criterion there. A local optimum away from the fall is returned as
#' usual: on rounded data such as `faithful` LSCV falls only for
#' bandwidths below the rounding, under the local minimum
#' [stats::bw.ucv()] finds too.
#'
#' @param x Data, as for [kde_gpu()].
#' @param shape `"scalar"` (one standard deviation; H = bw^2 I), `"diagonal"`
#'   (one per coordinate) or `"full"` (a full covariance matrix H).
#' @param weights Optional weights, as for [kde_gpu()].
#' @param range Factors of the normal-reference bandwidth that bound the grid
#'   search; `c(lower, upper)` with `0 < lower < upper`.
#' @param grid Number of grid points.
#' @param factor_kernel,ordered_kernel Mixed data (a data frame with factor
#'   columns) only: the discrete kernels, as in [kde_gpu()]. On mixed data
#'   `bw_mlcv()` chooses the numeric columns' H (of `shape`) and every
#'   factor's lambda jointly, as [kde_gpu-mixed] describes, by the
#'   leave-one-out likelihood of the joint density or, with `given`, of the
#'   conditional density of the other columns given those (np's
#'   `npcdensbw(bwmethod = "cv.ml")`), and `bw_lscv()` by least-squares
#'   cross-validation (np's `cv.ls`); the data need a numeric column. The
#'   result carries the lambdas (attribute `"lambda"`), and `kde_gpu(x, bw
#'   = b)` fits with both. `range`, `grid`, `reltol`, `cluster`,
#'   `tolerance`, `lower` and `upper` do not apply there.
#' @param reltol Relative tolerance of the local optimiser (for a matrix or
#'   per-coordinate bandwidth: [stats::nlm()]'s `steptol`, and `sqrt(reltol) /
#'   100` its `gradtol` on the criterion relative to its size at the start).
#'   Not to be confused with `tolerance`, the error allowed in each kernel sum.
#' @param kernel The kernel (`bw_mlcv()`); `bw_lscv()` supports `"gaussian"`.
#' @param backend,precision As for [kde_gpu()].
#' @param tolerance The relative error allowed in each kernel sum, as in
#'   [predict()][predict.kde_gpu] (default: `options(kdegpu.tolerance)`,
#'   else [default_tolerance] for the precision), in the local search and
#'   the criterion returned. The grid, which only picks where the local
#'   search starts, sums within 1e-6 (or `tolerance` if looser).
#' @param lower,upper `bw_mlcv()` only: bounds of a bounded fit, as for
#'   [kde_gpu()]; the criterion is then the leave-one-out log-likelihood of
#'   the reflection estimate (each point left out with its mirror images),
#'   so the bandwidth is the one for `kde_gpu(x, lower = , upper = )`.
#'   (LSCV would need the integral of the folded estimate's square over the
#'   box, which has no pair-sum form.)
#' @param given `bw_mlcv()` only: `NULL`, or the columns (names or numbers)
#'   of `x` to condition on: the criterion is then the leave-one-out
#'   log-likelihood of the conditional density of the other columns given
#'   these, \eqn{\sum_i w_i \log \hat f_{-i}(y_i \mid x_i)} (as
#'   `np::npcdensbw(bwmethod = "cv.ml")` defines it, exactly), for
#'   `predict(fit, newdata, given = )`. The bandwidth is the joint one, for
#'   `kde_gpu(x, H = )`; Gaussian kernel, no bounds, no cluster.
#' @param cluster `NULL`, a `parallel` cluster or `"future"`: spread each
#'   criterion evaluation over the workers, sharding the training points as
#'   [predict()][predict.kde_gpu] does (each worker receives its shard once
#'   per search).
#' @param ... `type` and `tol`, the old names of `shape` and `reltol`
#'   (deprecated: they work, with a warning, until the next release).
#' @return A `kdegpu_bandwidth` (see [bandwidth]): the standard deviation
#'   (`shape = "scalar"`), one per column (`"diagonal"`) or the matrix H
#'   (`"full"`), with attributes `H`, `shape`, `method` and, from the search,
#'   `criterion` (the criterion at the optimum: LSCV, or the leave-one-out
#'   log-likelihood for MLCV) and `trace` (a data frame of every
#'   evaluation); with `given`, attribute `given` too.
#' @examples
#' bw_lscv(faithful$eruptions, backend = "cpu")
#' bw.ucv(faithful$eruptions)
#' bw_mlcv(faithful$eruptions, kernel = "epanechnikov", backend = "cpu")
#' # for the conditional density of the waiting time given the eruption
#' b <- bw_mlcv(faithful, shape = "diagonal", given = "eruptions", backend = "cpu")
#' fit_c <- kde_gpu(faithful, H = b, backend = "cpu")
#' predict(fit_c, data.frame(eruptions = 2, waiting = c(50, 60)), given = "eruptions")
#' H <- bw_lscv(faithful[1:50, ], shape = "full", backend = "cpu", grid = 5, reltol = 1e-4)
#' H
#' fit <- kde_gpu(faithful, H = H, backend = "cpu")
#' @name bandwidth_cv
NULL

#' @rdname bandwidth_cv
#' @export
bw_lscv <- function(x, shape = c("scalar", "diagonal", "full"), weights = NULL,
                    range = c(0.1, 2), grid = 25L, reltol = 1e-8,
                    kernel = "gaussian", backend = c("auto", "cuda", "cpu"),
                    precision = c("double", "single"), cluster = NULL, ...,
                    tolerance = NULL, factor_kernel = "aitchisonaitken",
                    ordered_kernel = "racineliyan") {
  old <- renamed_arguments("bw_lscv()", c(type = "shape", tol = "reltol"),
                           c(cv_formals, "factor_kernel", "ordered_kernel"),
                           names(match.call()), ...)
  if (is_mixed_data(x)) {
    refuse_numeric_search_arguments(!missing(range), !missing(grid), !missing(reltol),
                                    cluster, tolerance)
    return(mixed_cv_bandwidth(x, "lscv", match_choice(old$shape %||% shape, bandwidth_shapes,
                                                      "shape"),
                              weights, resolve_kernel(kernel), backend, NULL, factor_kernel,
                              ordered_kernel))
  }
  refuse_discrete_kernels(!missing(factor_kernel), !missing(ordered_kernel))
  kernel <- resolve_kernel(kernel)
  if (kernel != "gaussian") {
    stop_arg("kernel", sprintf(paste0(
      "must be \"gaussian\" for bw_lscv(): least-squares cross-validation needs ",
      "the kernel's self-convolution in closed form; use bw_mlcv() for the %s kernel."),
      kernel))
  }
  select_bandwidth(x, "lscv", match_choice(old$shape %||% shape, bandwidth_shapes, "shape"),
                   weights, range, grid, old$reltol %||% reltol, kernel, backend, precision,
                   cluster, tolerance)
}

#' @rdname bandwidth_cv
#' @export
bw_mlcv <- function(x, shape = c("scalar", "diagonal", "full"), weights = NULL,
                    range = c(0.1, 2), grid = 25L, reltol = 1e-8,
                    kernel = "gaussian", backend = c("auto", "cuda", "cpu"),
                    precision = c("double", "single"), cluster = NULL, ...,
                    tolerance = NULL, lower = -Inf, upper = Inf, given = NULL,
                    factor_kernel = "aitchisonaitken", ordered_kernel = "racineliyan") {
  old <- renamed_arguments("bw_mlcv()", c(type = "shape", tol = "reltol"),
                           c(cv_formals, "lower", "upper", "given", "factor_kernel",
                             "ordered_kernel"), names(match.call()), ...)
  if (is_mixed_data(x)) {
    refuse_numeric_search_arguments(!missing(range), !missing(grid), !missing(reltol),
                                    cluster, tolerance, !missing(lower), !missing(upper))
    return(mixed_cv_bandwidth(x, "mlcv", match_choice(old$shape %||% shape, bandwidth_shapes,
                                                      "shape"),
                              weights, resolve_kernel(kernel), backend, given, factor_kernel,
                              ordered_kernel))
  }
  refuse_discrete_kernels(!missing(factor_kernel), !missing(ordered_kernel))
  select_bandwidth(x, "mlcv", match_choice(old$shape %||% shape, bandwidth_shapes, "shape"),
                   weights, range, grid, old$reltol %||% reltol, resolve_kernel(kernel),
                   backend, precision, cluster, tolerance, lower, upper, given)
}

cv_formals <- c("x", "shape", "weights", "range", "grid", "reltol", "kernel", "backend",
                "precision", "cluster", "tolerance")

# The numeric search's arguments, which a mixed-data search (nlm over H and
# the lambdas) does not take: the first one given is an error.
refuse_numeric_search_arguments <- function(range, grid, reltol, cluster, tolerance,
                                            lower = FALSE, upper = FALSE) {
  given <- c(range = range, grid = grid, reltol = reltol, cluster = !is.null(cluster),
             tolerance = !is.null(tolerance), lower = lower, upper = upper)
  if (any(given)) {
    stop_arg(names(given)[given][1L],
             "does not apply to mixed data (factor columns): their search is nlm's.")
  }
}

refuse_discrete_kernels <- function(factor_kernel, ordered_kernel) {
  if (factor_kernel || ordered_kernel) {
    stop_arg(if (factor_kernel) "factor_kernel" else "ordered_kernel",
             "applies to mixed data: a data frame with factor or ordered columns.")
  }
}

select_bandwidth <- function(x, criterion, type, weights, range, grid, reltol, kernel,
                             backend, precision, cluster = NULL, tolerance = NULL,
                             lower = -Inf, upper = Inf, given = NULL) {
  if (!is.null(tolerance)) tolerance <- check_tolerance(tolerance)
  x <- as_point_matrix(x, "x")
  bounds <- resolve_bounds(lower, upper, x)
  if (!any(is.finite(c(bounds$lower, bounds$upper)))) bounds <- NULL
  n <- nrow(x)
  d <- ncol(x)
  if (n < 3L) stop_arg("x", "needs at least 3 points for cross-validation.")
  weights <- normalise_weights(weights, n)
  if (sum(weights > 0) < 3L) stop_arg("weights", "must give at least 3 points positive weight.")
  if (!is.numeric(range) || length(range) != 2L || anyNA(range) || any(!is.finite(range)) ||
      range[[1L]] <= 0 || range[[1L]] >= range[[2L]]) {
    stop_arg("range", "must be two positive numbers c(lower, upper) with lower < upper.")
  }
  grid <- check_count(grid, "grid")
  if (grid < 3L) stop_arg("grid", "must be at least 3.")
  if (!is.numeric(reltol) || length(reltol) != 1L || !(reltol > 0)) {
    stop_arg("reltol", "must be one positive number.")
  }
  requested_backend <- match_choice(backend, c("auto", "cuda", "cpu"), "backend")
  backend <- choose_backend(requested_backend)
  precision <- match_choice(precision, c("double", "single"), "precision")
  engine <- cluster_engine(cluster)
  if (!is.null(given)) given <- conditional_selection(x, given, kernel, bounds, engine)
  # One id for the whole search: cluster workers receive their shard once.
  data <- if (is.null(engine)) NULL else cluster_data(x, weights, new_data_id(), new.env())

  # Normal reference: Silverman's rule with the full weighted covariance.
  S <- weighted_cov(x, weights)
  if (is.null(chol_or_null(S))) stop_singular_spread(x, weights)
  n_eff <- 1 / sum(weights^2)
  reference <- (4 / (d + 2))^(2 / (d + 4)) * n_eff^(-2 / (d + 4)) * S
  ties <- if (is.null(given)) unbounded_tie_directions(x, weights, criterion, type) else {
    conditional_tie_directions(x, weights, type, given)
  }

  trace <- new.env(parent = emptyenv())
  trace$rows <- list()
  # The criterion to minimise at bandwidth matrix H.
  objective <- function(H, sum_tolerance) {
    value <- evaluate(H, sum_tolerance)
    trace$rows[[length(trace$rows) + 1L]] <- c(value = value, H = as.vector(H))
    if (criterion == "mlcv") -value else value
  }
  safe_objective <- function(H, sum_tolerance = tolerance) {
    # a step of the local search can underflow a bandwidth to 0, or
    # overflow one (LSCV's 2H); both H and 2H, whose factors round apart
    # where H is all but singular
    if (is.null(chol_or_null(H)) || is.null(chol_or_null(2 * H))) return(.Machine$double.xmax)
    v <- objective(H, sum_tolerance)
    if (is.finite(v)) v else .Machine$double.xmax
  }

  # Grid over a common factor c: H = c^2 * shape, shape scalar/diagonal/full.
  shape <- switch(type,
    scalar = diag(mean(diag(S)), d) * (reference[1L, 1L] / S[1L, 1L]),
    diagonal = diag(diag(reference), d),
    full = reference)
  # Every fit of the search shares one spatial order, that of the data
  # whitened by the grid's shape (each grid bandwidth has exactly that
  # order; the local search's stay close): at n = 1e6 ordering took a third
  # of a search's time on a GPU.
  order <- if (is.null(engine)) spatial_order_for(x, weights, shape, kernel, backend)
  evaluate <- function(H, sum_tolerance = tolerance) {
    cv_criterion(x, weights, H, kernel, backend, precision, criterion, engine, data,
                 requested_backend, sum_tolerance, bounds, order, given)
  }
  # The grid only chooses where the local search starts, and neighbouring
  # grid values differ far more than sums within 1e-6 move them: its sums
  # take that tolerance (or the user's, if looser). A third less time per
  # evaluation at n = 1e6; the local search and the result use `tolerance`.
  grid_tolerance <- max(resolve_tolerance(tolerance, list(backend = backend, precision = precision)),
                        1e-6)
  factors <- exp(seq(log(range[[1L]]), log(range[[2L]]), length.out = grid))
  grid_values <- vapply(factors, function(f) safe_objective(f^2 * shape, grid_tolerance), 0)
  best <- which.min(grid_values)
  at_edge <- best == 1L || best == grid

  lower <- factors[max(1L, best - 1L)]
  upper <- factors[min(grid, best + 1L)]
  if (type == "scalar" && !(kernel %in% smooth_criterion_kernels)) {
    # kinks or steps: a finer grid first (R/bandwidth_cv_global.R)
    H <- scalar_global_search(safe_objective, shape, factors, grid_values, x, weights, kernel,
                              criterion, !is.null(bounds), reltol, grid_tolerance)^2 * shape
  } else if (type == "scalar") {
    opt <- stats::optimize(function(log_f) safe_objective(exp(2 * log_f) * shape),
                           log(c(lower, upper)), tol = reltol)
    H <- exp(2 * opt$minimum) * shape
  } else {
    H <- local_search(safe_objective, factors[best]^2 * shape, grid_values[best], type, reltol,
                      criterion_digits(tolerance, backend, precision),
                      newton = kernel %in% smooth_criterion_kernels)
  }
  H <- (H + t(H)) / 2
  check_tie_collapse(H, ties, criterion, type == "scalar" && best == 1L,
                     range[[1L]] / sqrt(diag(solve(reference))), colnames(x))
  if (at_edge) {
    warning(sprintf(paste0(
      "%s optimum at the %s end of the search range (factor %g of the normal-reference ",
      "bandwidth); widen `range`."), toupper(criterion),
      if (best == 1L) "lower" else "upper", factors[best]), call. = FALSE)
  }
  value <- evaluate(H)
  rows <- do.call(rbind, trace$rows)
  new_bandwidth(H, type, selector_name(criterion, type, d), colnames(x), criterion = value,
                trace = data.frame(evaluation = seq_len(nrow(rows)), rows),
                given = if (!is.null(given)) colnames(x)[given] %||% given)
}

# LSCV(H) or the leave-one-out log-likelihood at H, exactly; here, or over
# the cluster `engine` holding `data`.
cv_criterion <- function(x, weights, H, kernel, backend, precision, criterion,
                         engine = NULL, data = NULL, requested_backend = backend,
                         tolerance = NULL, bounds = NULL, order = NULL, given = NULL) {
  # log sum_j w_j K_B(x_i - x_j) at every training point, for bandwidth B.
  log_sums <- function(B, leave_one_out) {
    if (!is.null(engine)) {
      return(cluster_log_sum(engine, data, x, B, kernel, precision,
                             requested_backend, "training",
                             leave_one_out, tolerance))
    }
    fit <- new_kde_gpu(x, weights, list(H = B, type = "full", method = "given"),
                       kernel, backend, precision, NULL, "x", order = order,
                       tolerance = tolerance)
    on.exit(release_device_copy(fit))
    log_density_at_training_points(fit, leave_one_out, tolerance)
  }
  loo_sums <- if (is.null(bounds)) log_sums(H, TRUE) else {
    bounded_loo_sums(x, weights, H, kernel, backend, precision, engine, data,
                     requested_backend, tolerance, bounds, order)
  }
  if (is.null(loo_sums)) return(-Inf) # too many images: no candidate
  loo <- renormalise_leave_one_out(loo_sums, weights)
  if (!is.null(given)) { # log f_{-i}(y_i | x_i): less the margin's log f_{-i}(x_i)
    loo <- loo - conditioning_loo(x, weights, H, given, kernel, backend, precision, tolerance)
  }
  if (criterion == "mlcv") {
    w <- weights * nrow(x)
    return(sum(ifelse(w > 0, w * loo, 0)))
  }
  # int f^2 = sum_i w_i f_{2H}(x_i), a KDE with covariance 2H at the data.
  integral <- sum(weights * exp(log_sums(2 * H, FALSE)))
  integral - 2 * sum(weights * exp(loo))
}

# The leave-one-out sums of the bounded (reflection) estimate at H, each
# point left out with its images (MLCV with bounds); NULL for a bandwidth
# whose images would be too many (wide against a box).
bounded_loo_sums <- function(x, weights, H, kernel, backend, precision, engine, data,
                             requested_backend, tolerance, bounds, order = NULL) {
  images <- fold_images(kernel, H, bounds$lower, bounds$upper, too_many = "null")
  if (is.null(images)) return(NULL)
  fit <- new_kde_gpu(x, weights, list(H = H, type = "full", method = "given"),
                     kernel, backend, precision, NULL, "x", order = order,
                     tolerance = tolerance)
  on.exit(release_device_copy(fit))
  fit$requested_backend <- requested_backend
  fit$lower <- bounds$lower
  fit$upper <- bounds$upper
  fit$images <- images
  bounded_leave_one_out_sum(fit, tolerance, engine, data)
}

# Kernels whose profile has a continuous first derivative, at the edge of
# the support too: their criteria are smooth in H and a Newton-type search
# converges. The others' (epanechnikov, rectangular, triangular,
# optcosine) have kinks where pairs cross the support's edge, where nlm
# stalls (epanechnikov's MLCV on faithful ended up to 0.2 below Nelder-Mead's
# log-likelihood): Nelder-Mead searches those.
smooth_criterion_kernels <- c("gaussian", "exponential", "biweight", "cosine")

# The local search over diagonal or full H from `start` (where the
# criterion is about `start_value`, its scale): H = L0 M M' L0'
# with L0 the start's Cholesky factor and M lower triangular (log diagonal),
# so the parameters start at 0 whatever the data's units, and the criterion
# divided by its size at the start. stats::nlm (Newton-type, finite-
# difference gradients, `digits` significant digits in the criterion)
# needed about half the evaluations of Nelder-Mead restarted from its own
# answer, reaching a lower criterion in every case tried with a smooth
# criterion (`newton`); Nelder-Mead takes over where nlm stops without
# converging, and searches alone otherwise.
local_search <- function(objective, start, start_value, type, tol, digits, newton = TRUE) {
  d <- nrow(start)
  L0 <- if (type == "full") t(chol(start))
  par_to_H <- if (type == "diagonal") {
    function(p) start * tcrossprod(exp(p))
  } else {
    function(p) {
      M <- matrix(0, d, d)
      M[lower.tri(M, diag = TRUE)] <- p
      diag(M) <- exp(diag(M))
      LM <- L0 %*% M
      LM %*% t(LM)
    }
  }
  p0 <- numeric(if (type == "diagonal") d else d * (d + 1L) / 2L)
  size <- if (is.finite(start_value) && start_value != 0 &&
              abs(start_value) < .Machine$double.xmax) abs(start_value) else 1
  scaled <- function(p) objective(par_to_H(p)) / size
  # a step onto an invalid bandwidth (criterion not finite) is a cliff
  # nlm's line search backs off from
  # nlm's own first value, at the start (start_value may come from sums of
  # a looser tolerance: the grid's)
  at_start <- NULL
  bounded <- function(p) {
    v <- min(scaled(p), 1e10)
    if (is.null(at_start)) at_start <<- v
    v
  }
  found <- if (newton) tryCatch(
    suppressWarnings(stats::nlm(bounded, p0, ndigit = digits, gradtol = sqrt(tol) / 100,
                                steptol = tol, iterlim = 200L)),
    error = function(e) NULL)
  if (!is.null(found) && found$code %in% c(1L, 2L) && found$minimum <= at_start) {
    return(par_to_H(found$estimate))
  }
  p <- if (is.null(found)) p0 else found$estimate
  # Nelder-Mead restarted from its own answer: a fresh simplex escapes the
  # premature convergence a collapsed one shows on flat valleys.
  for (round in 1:3) {
    opt <- stats::optim(p, scaled, method = "Nelder-Mead",
                        control = list(reltol = tol, maxit = 200L * length(p)))
    if (round > 1L && abs(opt$value - previous) <= tol * abs(previous)) break
    previous <- opt$value
    p <- opt$par
  }
  par_to_H(opt$par)
}

# Significant digits of a criterion whose kernel sums are each within
# relative `tolerance` (or the precision's default), for nlm's finite
# differences.
criterion_digits <- function(tolerance, backend, precision) {
  tolerance <- resolve_tolerance(tolerance, list(backend = backend, precision = precision))
  max(3L, min(12L, floor(-log10(max(tolerance, 1e-15))) - 2L))
}

# bw = "lscv" / "ucv" / "mlcv" in kde_gpu(): scalar in 1-D, full H in d > 1.
