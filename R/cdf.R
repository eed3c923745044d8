# The estimate's cumulative distribution function (predict(type = "cdf"))
# and its quantiles. Closed-form integrated kernels in
# inst/include/kdegpu/kernels.h, summed exactly in double: for a CUDA fit
# on its GPUs (src/cuda/cdf.cu), else on the CPU (src/cdf.c).

# The CDF at the rows of `query` (a matrix in the fit's coordinates, +-Inf
# allowed): 1-D for every kernel, the Gaussian with a diagonal H in d > 1.
evaluate_cdf <- function(object, query) {
  if (object$d > 1L && (object$kernel != "gaussian" || object$bandwidth_type == "full")) {
    stop_arg("type", sprintf(paste0(
      "= \"cdf\" needs a 1-D fit, or in d > 1 the Gaussian kernel with a diagonal H ",
      "(this fit: %d-D, %s kernel, %s H), where the CDF is a sum of products of pnorm()."),
      object$d, object$kernel, if (object$bandwidth_type == "full") "full" else "diagonal"))
  }
  lower <- if (is.null(object$lower)) rep(-Inf, object$d) else object$lower
  upper <- if (is.null(object$upper)) rep(Inf, object$d) else object$upper
  per_coordinate <- if (is_bounded(object)) {
    object$images$per_coordinate
  } else {
    rep(list(data.frame(sign = 1, shift = 0)), object$d)
  }
  images <- list(vapply(per_coordinate, nrow, 0L),
                 as.double(unlist(lapply(per_coordinate, `[[`, "sign"))),
                 as.double(unlist(lapply(per_coordinate, `[[`, "shift"))))
  # a CUDA fit sums on its GPUs, through its device copy (the same
  # arithmetic as the CPU's, cdf.h)
  model <- if (object$backend == "cuda") cuda_model(object, tolerance = NA)
  .Call(C_kdegpu_cdf, object$x, object$weights, object$adaptive$lambda, sqrt(diag(object$H)),
        kernel_index(object$kernel), query, as.double(lower), as.double(upper), images,
        model, cpu_threads(), progress_delay())
}

#' Quantiles of a 1-D kernel density estimate
#'
#' The quantiles of the distribution a 1-D [kde_gpu()] fit estimates: for
#' each probability p the smallest x with \eqn{\hat F(x) \ge p}, where
#' \eqn{\hat F} is `predict(x, type = "cdf")`, found by bisection on the
#' exact CDF to within about 1e-12 of the data's scale (so the CDF at the
#' result is p to about 1e-10 or better). `probs` 0 and 1 give the ends of
#' the support: `-Inf` and `Inf` for the Gaussian and exponential kernels
#' without bounds, else the data's range widened by the kernel's reach, or
#' the bounds of a bounded fit.
#'
#' @param x A 1-D [kde_gpu()] fit.
#' @param probs Probabilities in \[0, 1\].
#' @param names If `TRUE`, the result is named by the probabilities
#'   (`"25%"`), as [stats::quantile()] names it.
#' @param given `NULL`, or conditional quantiles: the values of the columns
#'   to condition on, a data frame or matrix whose column names are among
#'   the fit's (one row per point, or a named vector for one point), all
#'   but one of the fit's columns, the response. For a Gaussian fit (fixed
#'   or adaptive, unbounded) of any dimension: the quantiles of \eqn{\hat
#'   F(y \mid x)}{F(y | x)} (see [predict()][predict.kde_gpu], `type =
#'   "cdf"` with `given`), found by Newton's steps on the exact conditional
#'   CDF inside a bracket, to about 1e-12 of the data's scale: kernel
#'   quantile regression, as `np::npqreg()` computes it from `npcdist()`.
#' @param ... Not used: an argument given here is an error that names it.
#' @return A numeric vector with one quantile per probability; with
#'   `given`, a matrix with one row per point and one column per
#'   probability.
#' @seealso [predict.kde_gpu()] with `type = "cdf"`.
#' @examples
#' fit <- kde_gpu(faithful$eruptions, backend = "cpu")
#' quantile(fit, c(0.1, 0.5, 0.9))
#' predict(fit, quantile(fit, 0.9), type = "cdf")
#' # a bounded fit: quantiles stay within the bounds
#' quantile(kde_gpu(rivers, lower = 0, backend = "cpu"), c(0, 0.01, 0.5))
#' # conditional quantiles: the waiting time's quartiles after 2 and 4.5 min
#' fit2 <- kde_gpu(faithful, backend = "cpu")
#' quantile(fit2, c(0.25, 0.5, 0.75), given = data.frame(eruptions = c(2, 4.5)))
#' @importFrom stats quantile
#' @export
quantile.kde_gpu <- function(x, probs = seq(0, 1, 0.25), names = TRUE, given = NULL, ...) {
  check_dots_empty("quantile()", c("x", "probs", "names", "given"), list(), ...)
  check_fit(x, "x")
  probs <- check_probabilities(probs, "probs")
  check_flag(names, "names")
  if (!is.null(given)) {
    out <- conditional_quantiles(x, probs, given)
    if (!names) colnames(out) <- NULL
    return(out)
  }
  if (x$d != 1L) {
    stop_arg("x", sprintf(paste0("must be a 1-D fit for quantile(), not %d-D (or give the ",
                                 "conditioning values as `given`)."), x$d))
  }
  ends <- support_ends(x)
  out <- rep(NA_real_, length(probs))
  out[probs == 0] <- ends$from
  out[probs == 1] <- ends$to
  inner <- probs > 0 & probs < 1
  if (any(inner)) out[inner] <- bisect_cdf(x, probs[inner], ends$lo, ends$hi)
  if (names) names(out) <- probability_labels(probs)
  out
}

# Where the estimate's mass lies: from, to (the support's ends, maybe
# infinite) and lo, hi (finite points with F(lo) = 0 to rounding and
# F(hi) = 1, that bracket every inner quantile).
support_ends <- function(fit) {
  sd <- sqrt(fit$H[1L, 1L])
  reach <- if (is_compact_kernel(fit$kernel)) {
    kernel_constants(fit$kernel, 1L)$scale * sd
  } else {
    # beyond 40 (Gaussian) or 800 (exponential) sds the tails underflow
    if (fit$kernel == "gaussian") 40 * sd else 800 * sd
  }
  keep <- fit$weights > 0
  # an adaptive fit's kernels reach lambda_j times as far
  reach <- reach * if (is.null(fit$adaptive)) 1 else fit$adaptive$lambda[keep]
  from <- min(fit$x[keep, 1L] - reach)
  to <- max(fit$x[keep, 1L] + reach)
  lower <- if (is.null(fit$lower)) -Inf else fit$lower
  upper <- if (is.null(fit$upper)) Inf else fit$upper
  lo <- max(from, lower)
  hi <- min(to, upper)
  compact <- is_compact_kernel(fit$kernel)
  list(from = if (is.finite(lower)) lower else if (compact) from else -Inf,
       to = if (is.finite(upper)) upper else if (compact) to else Inf,
       lo = lo, hi = hi)
}

# The smallest x in [lo, hi] with F(x) >= p for each p, by bisection on
# the predicate: all p at once, one CDF call per step, until the brackets
# are below 1e-12 of the data's scale or two neighbouring doubles.
bisect_cdf <- function(fit, probs, lo, hi) {
  a <- rep(lo, length(probs)) # F(a) < p (or a = lo)
  b <- rep(hi, length(probs)) # F(b) >= p
  scale <- max(abs(c(lo, hi)), hi - lo)
  for (step in seq_len(200L)) {
    open <- b - a > 1e-12 * scale
    if (!any(open)) break
    mid <- (a[open] + b[open]) / 2
    at_mid <- evaluate_cdf(fit, matrix(mid, ncol = 1L))
    up <- at_mid >= probs[open]
    b[open] <- ifelse(up, mid, b[open])
    a[open] <- ifelse(up, a[open], mid)
  }
  b
}
