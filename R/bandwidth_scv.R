#' Smoothed cross-validation bandwidth matrices, exact
#'
#' `bw_scv()` is the smoothed cross-validation selector of [ks::Hscv()]
#' (`shape = "full"`) and [ks::Hscv.diag()] (`shape = "diagonal"`) with every
#' pair sum computed exactly over all pairs (on the GPU when `backend`
#' allows). The criterion, in ks's pre-transformed coordinates (pre-sphered
#' for `"full"`, pre-scaled for `"diagonal"`), is
#' \deqn{\mathrm{SCV}(H) = \frac{R(K)}{n |H|^{1/2}} + \sum_{i,j} w_i w_j
#'   \left[\phi_{2H+2G} - 2 \phi_{H+2G} + \phi_{2G}\right](x_i - x_j),}
#' diagonal terms included, as ks's unbinned `scv.mat()`; the pilot G is
#' ks's: in 2-D from a one-stage plug-in bandwidth and the SAMSE psi_6
#' pilot (`gamse.scv()`), in d >= 3 the scalar "dscalar" pilot for SCV.
#' ks computes that plug-in pilot binned; kdegpu computes it exactly, so the
#' two can differ slightly. The criterion is minimised as ks does (BFGS over
#' the symmetric square root of H for `"full"`, Nelder-Mead over the
#' standard deviations for `"diagonal"`).
#'
#' Weights enter the pair sums (\eqn{w_i w_j}), the pre-transformation and
#' n (the effective sample size \eqn{1 / \sum w_i^2}); equal weights give
#' the unweighted selector. In 1-D use [bw_sj()] or [bw_lscv()].
#' `kde_gpu(x, bw = "scv")` uses `shape = "full"`, `bw = "scv-diagonal"` the
#' diagonal one.
#'
#' @inheritParams bw_plugin
#' @return A `kdegpu_bandwidth` (see [bandwidth]): the matrix H (the
#'   kernel's covariance, `shape = "full"`) or the kernel's standard deviation
#'   per column (`"diagonal"`; in 1-D the standard deviation), with the
#'   matrix H as attribute `H` either way.
#' @seealso [bw_plugin()], [bw_lscv()].
#' @examples
#' bw_scv(faithful, backend = "cpu")
#' @export
bw_scv <- function(x, shape = c("full", "diagonal"), weights = NULL,
                   backend = c("auto", "cuda", "cpu"), ...) {
  old <- renamed_arguments("bw_scv()", c(type = "shape"), c("x", "shape", "weights", "backend"),
                           names(match.call()), ...)
  shape <- match_choice(old$shape %||% shape, c("full", "diagonal"), "shape")
  x <- as_point_matrix(x, "x")
  if (ncol(x) < 2L) {
    stop_arg("x", "must have at least 2 columns for bw_scv(); in 1-D use bw_sj() or bw_lscv().")
  }
  weights <- normalise_weights(weights, nrow(x))
  check_two_points(weights, "bw_scv()")
  backend <- choose_backend(match_choice(backend, c("auto", "cuda", "cpu"), "backend"))
  H <- scv_bandwidth(x, weights, shape, backend)
  new_bandwidth(H, shape, selector_name("scv", shape, ncol(x)), colnames(x))
}

scv_bandwidth <- function(x, weights, type, backend) {
  d <- ncol(x)
  pre <- prescale(x, weights, if (type == "full") "sphere" else "scale")
  n <- pre$n
  g <- if (d == 2L) {
    pilot_scv_samse(pre$x, weights, pre$S, n, backend)
  } else {
    pilot_dscalar(pre$x, weights, pre$S, n, backend, scv = TRUE)
  }
  G <- diag(g^2, d)
  RK <- (4 * pi)^(-d / 2)
  constant <- gaussian_pair_sum(pre$x, weights, 2 * G, backend)
  scv <- function(H) {
    if (!all(is.finite(H)) || det(H) <= 0) return(Inf)
    bias <- gaussian_pair_sum(pre$x, weights, 2 * H + 2 * G, backend) -
      2 * gaussian_pair_sum(pre$x, weights, H + 2 * G, backend) + constant
    RK / (n * sqrt(det(H))) + max(bias, 0)
  }
  Hstart <- (4 / (n * (d + 2)))^(2 / (d + 4)) * pre$S # ks's Hns()
  H <- minimise_over_H(scv, Hstart, type, if (type == "full") "BFGS" else "Nelder-Mead")
  H <- pre$S12 %*% H %*% pre$S12
  (H + t(H)) / 2
}

# sum_{i,j} w_i w_j phi_Sigma(x_i - x_j), diagonal included (ks's Qr(x,
# Sigma, deriv.order = 0, inc = 1)), from the degree-0 moment sums over
# j > i of the points whitened by Sigma.
gaussian_pair_sum <- function(x, w, Sigma, backend) {
  R <- chol(Sigma)
  z <- x %*% backsolve(R, diag(ncol(x)))
  moments <- gaussian_moments(z, w, z, 0L, "above", backend)
  scale <- exp(moments$log_scale + log(w))
  scale[w == 0 | moments$log_scale == -Inf] <- 0
  (2 * sum(scale * moments$sums[, 1L]) + sum(w^2)) *
    (2 * pi)^(-ncol(x) / 2) / prod(diag(R))
}

# ks's gamse.scv(nstage = 1) for 2-D: the pilot g from a one-stage plug-in
# H (ks::Hpi(nstage = 1, pre = "sphere")) and the SAMSE psi_6 estimates.
pilot_scv_samse <- function(x, w, S, n, backend) {
  d <- ncol(x)
  Hamise <- plugin_bandwidth(x, w, "full", backend, nstage = 1L)
  psi6 <- psi_estimate(x, w, pilot_samse(S, n, 6L), 6L, backend)
  # psi_6 as the vector over all d^6 ordered index tuples
  tuples <- as.matrix(expand.grid(rep(list(seq_len(d)), 6L)))
  full <- unname(psi6[apply(tuples, 1L, function(t) index_key(tabulate(t, nbins = d)))])
  c11 <- drop(crossprod(full, kronecker(kronecker(Hamise, diag(d^4)), Hamise) %*% full)) / 4
  c12 <- 3 / 4 * (4 * pi)^(-d / 2) *
    sum(as.vector(kronecker(kronecker(Hamise, diag(d)), Hamise)) * full)
  c22 <- (4 * pi)^(-d) / 64 * (4 * sum(diag(Hamise %*% Hamise)) + (d + 8) * sum(diag(Hamise))^2)
  num <- 2 * (d + 4) * c22
  den <- -(d + 2) * c12 + sqrt((d + 2)^2 * c12^2 + 8 * (d + 4) * c11 * c22)
  (num / (den * n))^(1 / (d + 6))
}
