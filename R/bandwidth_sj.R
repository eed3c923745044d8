# Sheather-Jones bandwidths in 1-D, exactly: stats::bw.SJ()'s formulas and
# search (R's src/library/stats/R/bandwidths.R and src/bandwidths.c,
# bw_phi4 / bw_phi6), with the pair sums of Gaussian derivatives computed
# over every pair (Gaussian moment sums, moments.R) instead of over binned
# pair distances.

#' Sheather-Jones bandwidth, exact
#'
#' `bw_sj()` is [stats::bw.SJ()] with its density-derivative functionals
#' computed exactly: bw.SJ() counts the pair distances in `nb` bins, kdegpu
#' sums the Gaussian derivative over every pair (on the GPU when `backend`
#' allows), so the result is Sheather and Jones's bandwidth of the data
#' themselves, within about 1% of `bw.SJ(x, nb = 1e5)`. The formulas are
#' bw.SJ()'s, diagonal terms included as there:
#' \deqn{\hat\phi_r(h) = \frac{1}{n(n-1) h^{r+1}} \sum_{i,j}
#'   \phi^{(r)}\left(\frac{x_i - x_j}{h}\right),}
#' `"ste"` solves the equation of Sheather and Jones (1991) by
#' [stats::uniroot()] over bw.SJ()'s interval, `"dpi"` is their direct
#' plug-in. `kde_gpu(x, bw = "SJ")` (alias `"sj-ste"`) and `bw = "sj-dpi"`
#' use it.
#'
#' With weights, the pair sums are weighted (\eqn{w_i w_j}, weights summing
#' to 1, divided by \eqn{1 - \sum w_i^2} where bw.SJ() divides by
#' \eqn{n(n-1)}), the scale is the weighted standard deviation and
#' interquartile range, and n is the effective sample size
#' \eqn{1 / \sum w_i^2}, as kdegpu's other rules use it; equal weights give
#' the unweighted bandwidth.
#'
#' @param x A numeric vector (or one-column matrix or data frame).
#' @param method `"ste"` (solve the equation) or `"dpi"` (direct plug-in).
#' @param weights Optional non-negative weights, as for [kde_gpu()].
#' @param backend As for [kde_gpu()]: where the pair sums run.
#' @param ... Not used; a misspelled argument is an error.
#' @return A `kdegpu_bandwidth` (see [bandwidth]): the Gaussian kernel's
#'   standard deviation, with its variance as attribute `H`.
#' @seealso [bw_plugin()] for d > 1, [stats::bw.SJ()].
#' @examples
#' bw_sj(faithful$eruptions, backend = "cpu")
#' bw.SJ(faithful$eruptions, nb = 1e5)
#' @export
bw_sj <- function(x, method = c("ste", "dpi"), weights = NULL,
                  backend = c("auto", "cuda", "cpu"), ...) {
  check_dots_empty("bw_sj()", c("x", "method", "weights", "backend"), list(), ...)
  method <- match_choice(method, c("ste", "dpi"), "method")
  x <- as_point_matrix(x, "x")
  if (ncol(x) != 1L) {
    stop_arg("x", sprintf(paste0("must be one-dimensional for bw_sj(), not %d columns; ",
                                 "use bw_plugin() in d > 1."), ncol(x)))
  }
  weights <- normalise_weights(weights, nrow(x))
  check_two_points(weights, "bw_sj()")
  backend <- choose_backend(match_choice(backend, c("auto", "cuda", "cpu"), "backend"))
  bw <- sj_bandwidth(x[, 1L], weights, method, backend)
  new_bandwidth(matrix(bw^2, 1L, 1L), "scalar", if (method == "ste") "SJ" else "sj-dpi",
                colnames(x), sd = bw)
}

sj_bandwidth <- function(x, weights, method, backend) {
  spread <- weighted_spread(x, weights)
  if (length(spread$x) < 2L) stop_arg("x", "needs at least 2 points for the SJ rule.")
  keep <- weights > 0
  x <- x[keep]
  weights <- weights[keep] / sum(weights[keep])
  n <- spread$n
  scale <- min(spread$sd, spread$iqr / 1.349)
  if (!(scale > 0)) {
    stop_arg("x", "has no spread (sd or interquartile range 0): the SJ rule needs some.")
  }
  self_weight <- 1 - sum(weights^2)
  # The rule is scale-equivariant, and h^7 overflows at h = 1e50: search on
  # the data divided by a power of 2 near their spread (exact), scale back.
  unit <- 2^round(log2(scale))
  x <- x / unit
  # phi_r(h): bw.SJ()'s SDh (r = 4) and TDh (r = 6), pairs summed exactly.
  phi <- function(h, r) {
    sums <- pair_derivative_sums(matrix(x / h), weights, r, backend)
    sums$value[[1L]] / (self_weight * h^(r + 1))
  }
  unit * sj_search(function(h) phi(h, 4L), function(h) phi(h, 6L), scale / unit, n, method)
}

# bw.SJ()'s search, given its two functionals: the same constants, interval,
# widening and tolerance.
sj_search <- function(SDh, TDh, scale, n, method) {
  a <- 1.24 * scale * n^(-1 / 7)
  b <- 1.23 * scale * n^(-1 / 9)
  c1 <- 1 / (2 * sqrt(pi) * n)
  TD <- -TDh(b)
  if (!is.finite(TD) || TD <= 0) {
    stop_arg("x", "is too sparse for the SJ rule (its sixth-derivative functional is not negative).")
  }
  if (method == "dpi") return((c1 / SDh((2.394 / (n * TD))^(1 / 7)))^(1 / 5))
  upper <- 1.144 * scale * n^(-1 / 5)
  lower <- 0.1 * upper
  tol <- 0.1 * lower
  alph2 <- 1.357 * (SDh(a) / TD)^(1 / 7)
  if (!is.finite(alph2)) stop_arg("x", "is too sparse for the SJ rule (alpha2 is not finite).")
  fSD <- function(h) (c1 / SDh(alph2 * h^(5 / 7)))^(1 / 5) - h
  f_lower <- fSD(lower)
  f_upper <- fSD(upper)
  tries <- 1L
  while (f_lower * f_upper > 0) {
    if (tries > 99L) stop_arg("x", "gives no SJ solution in bw.SJ()'s widened search range.")
    if (tries %% 2L) {
      upper <- upper * 1.2
      f_upper <- fSD(upper)
    } else {
      lower <- lower / 1.2
      f_lower <- fSD(lower)
    }
    tries <- tries + 1L
  }
  stats::uniroot(fSD, c(lower, upper), f.lower = f_lower, f.upper = f_upper, tol = tol)$root
}
