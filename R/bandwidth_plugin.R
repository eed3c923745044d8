#' Plug-in bandwidth matrices, exact
#'
#' `bw_plugin()` is the two-stage plug-in selector of [ks::Hpi()]
#' (`shape = "full"`) and [ks::Hpi.diag()] (`shape = "diagonal"`) with its
#' density-derivative functionals computed exactly: ks bins the data on a
#' grid from n = 500 (2-D) or 1000 (3-D) points on, and without binning it
#' forms the n x n matrix; kdegpu sums the Gaussian derivatives over every
#' pair in one streaming pass per functional (on the GPU when `backend`
#' allows), so it runs at any n.
#'
#' It follows ks 1.14's defaults: the data are pre-sphered (`"full"`) or
#' pre-scaled (`"diagonal"`); the pilot is SAMSE in 2-D and the scalar
#' "dscalar" pilot in d >= 3; two stages; the functionals
#' \deqn{\hat\psi_r = \sum_{i,j} w_i w_j D^{\otimes r} \phi_G(x_i - x_j)}
#' include the diagonal terms i = j, as ks's `kfe(inc = 1)` does; the
#' criterion \eqn{n^{-1} R(K) |H|^{-1/2} + \frac14 \mathrm{vec}^T H
#' \hat\Psi_4 \mathrm{vec} H} is minimised as ks does (BFGS over the
#' symmetric square root of H; Hpi.diag's closed form in 2-D). One quirk
#' is kept on purpose, so that the result is ks's: in the second stage of
#' the 2-D SAMSE pilot, ks 1.14 looks up the sixth-order functionals by
#' their position in its list of distinct multi-indices but reads them from
#' its vector over all ordered index tuples, so it uses
#' \eqn{\hat\psi_{51}} where the formula has \eqn{\hat\psi_{42}} and
#' \eqn{\hat\psi_{24}}, and \eqn{\hat\psi_{42}} for \eqn{\hat\psi_{06}}.
#' kdegpu does the same. In 1-D
#' `bw_plugin()` gives the Sheather-Jones direct plug-in bandwidth
#' ([bw_sj()] with `method = "dpi"`).
#'
#' Weights enter the pair sums (\eqn{w_i w_j}, summing to 1 as n^-2 does),
#' the pre-sphering (weighted covariance) and n, which is the effective
#' sample size \eqn{1 / \sum w_i^2} as in kdegpu's other rules; equal weights
#' give the unweighted selector. `kde_gpu(x, bw = "plugin")` uses
#' `shape = "full"`, `bw = "plugin-diagonal"` the diagonal one.
#'
#' @param x Data, as for [kde_gpu()].
#' @param shape `"full"` (as `ks::Hpi()`) or `"diagonal"` (as `ks::Hpi.diag()`).
#' @param weights Optional non-negative weights, as for [kde_gpu()].
#' @param backend As for [kde_gpu()]: where the pair sums run.
#' @param ... `type`, the old name of `shape` (deprecated: it works, with a
#'   warning, until the next release); anything else is an error.
#' @return A `kdegpu_bandwidth` (see [bandwidth]): the matrix H (the
#'   kernel's covariance, `shape = "full"`) or the kernel's standard deviation
#'   per column (`"diagonal"`; in 1-D the standard deviation), with the
#'   matrix H as attribute `H` either way.
#' @seealso [bw_scv()], [bw_sj()], [bw_lscv()].
#' @examples
#' H <- bw_plugin(faithful, backend = "cpu")
#' H
#' bw_plugin(faithful, shape = "diagonal", backend = "cpu")
#' fit <- kde_gpu(faithful, H = H, backend = "cpu")
#' @export
bw_plugin <- function(x, shape = c("full", "diagonal"), weights = NULL,
                      backend = c("auto", "cuda", "cpu"), ...) {
  old <- renamed_arguments("bw_plugin()", c(type = "shape"), c("x", "shape", "weights", "backend"),
                           names(match.call()), ...)
  shape <- match_choice(old$shape %||% shape, c("full", "diagonal"), "shape")
  x <- as_point_matrix(x, "x")
  weights <- normalise_weights(weights, nrow(x))
  check_two_points(weights, "bw_plugin()")
  backend <- choose_backend(match_choice(backend, c("auto", "cuda", "cpu"), "backend"))
  H <- plugin_bandwidth(x, weights, shape, backend)
  new_bandwidth(H, shape, selector_name("plugin", shape, ncol(x)), colnames(x))
}

# nstage = 1: ks::Hpi(nstage = 1)'s SAMSE pilot from the normal reference
# (the pilot of bw_scv() in 2-D).
plugin_bandwidth <- function(x, weights, type, backend, nstage = 2L) {
  d <- ncol(x)
  if (d == 1L) return(matrix(sj_bandwidth(x[, 1L], weights, "dpi", backend)^2, 1L, 1L))
  pre <- prescale(x, weights, if (type == "full") "sphere" else "scale")
  n <- pre$n
  RK <- (4 * pi)^(-d / 2)
  psi4 <- if (nstage == 1L) {
    psi_estimate(pre$x, weights, pilot_samse(pre$S, n, 4L), 4L, backend)
  } else {
    psi4_two_stage(pre$x, weights, pre$S, n, backend)
  }
  if (type == "diagonal" && d == 2L) {
    # ks::Hpi.diag()'s closed form for the 2-D SAMSE pilot
    psi40 <- psi4[["4,0"]]
    psi22 <- psi4[["2,2"]]
    psi04 <- psi4[["0,4"]]
    h1 <- (psi04^(3 / 4) * RK / (psi40^(3 / 4) * (sqrt(psi40 * psi04) + psi22) * n))^(1 / 6)
    h2 <- (psi40 / psi04)^(1 / 4) * h1
    return(pre$S12 %*% diag(c(h1, h2)^2) %*% pre$S12)
  }
  P <- psi4_matrix(psi4, d)
  amise <- function(H) RK / (n * sqrt(det(H))) + drop(crossprod(as.vector(H), P %*% as.vector(H))) / 4
  Hstart <- (4 / (n * (d + 2)))^(2 / (d + 4)) * pre$S # ks's Hns()
  H <- minimise_over_H(amise, Hstart, type)
  H <- pre$S12 %*% H %*% pre$S12
  (H + t(H)) / 2
}

# ks's pre.sphere() / pre.scale() with weights: x S^(-1/2) (or x divided by
# the standard deviations), the transform back (S12), the covariance of the
# transformed points and the effective n.
prescale <- function(x, weights, how) {
  S <- weighted_cov(x, weights)
  if (is.null(chol_or_null(S))) stop_singular_spread(x, weights)
  S12 <- if (how == "sphere") matrix_sqrt(S) else diag(sqrt(diag(S)), ncol(x))
  z <- x %*% solve(S12)
  list(x = z, S = weighted_cov(z, weights), S12 = S12, n = 1 / sum(weights^2))
}

# The psi_4 estimates of ks's two-stage plug-in in pre-transformed
# coordinates: SAMSE pilots in 2-D (ks's psifun2()), the scalar pilot
# (gdscalar()) in d >= 3.
psi4_two_stage <- function(x, w, S, n, backend) {
  d <- ncol(x)
  if (d == 2L) {
    psi6 <- psi_estimate(x, w, pilot_samse(S, n, 6L), 6L, backend)
    g4 <- pilot_samse(S, n, 4L, psi6)
  } else {
    g4 <- pilot_dscalar(x, w, S, n, backend)
  }
  psi_estimate(x, w, g4, 4L, backend)
}
