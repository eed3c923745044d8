#' Kernel two-sample test of equal densities
#'
#' `kde_test()` tests H0: \eqn{f_1 = f_2}, that two samples come from the
#' same density, with the statistic of Duong, Goud and Schauer (2012), as
#' [ks::kde.test()] computes it, but with every pair sum exact: the
#' integrated squared difference of the two Gaussian kernel estimates,
#' \deqn{T = \hat\psi_1 + \hat\psi_2 - (\hat\psi_{12} + \hat\psi_{21}),}
#' where \eqn{\hat\psi_1 = n_1^{-2} \sum_{i,j} K_{H_1}(X_{1i} - X_{1j})}
#' (diagonal terms included), \eqn{\hat\psi_{12} = (n_1 n_2)^{-1}
#' \sum_{i,j} K_{H_1}(X_{1i} - X_{2j})}, and \eqn{\hat\psi_2},
#' \eqn{\hat\psi_{21}} likewise with \eqn{H_2}. Under H0, T is asymptotically
#' normal with mean \eqn{\mu_T = (n_1^{-1} |H_1|^{-1/2} + n_2^{-1}
#' |H_2|^{-1/2}) K(0)} and variance \eqn{\sigma_T^2 = 3 (n_1 v_1 + n_2 v_2) /
#' (n_1 + n_2) (1/n_1 + 1/n_2)}, where \eqn{v_k = \nabla \hat f_k(\bar X_k)^T
#' S_k \nabla \hat f_k(\bar X_k)} comes from the gradient of a normal-scale
#' estimate (ks's `Hns(deriv.order = 1)`) at the sample mean and the sample
#' covariance \eqn{S_k}. The test is one-sided: the p-value is
#' \eqn{P(Z > z)} for \eqn{z = (T - \mu_T) / \sigma_T}.
#'
#' The sums are means of [kde_gpu()] fits evaluated exactly with
#' [predict()][predict.kde_gpu] (on the GPU when `backend` allows), so no n x n
#' matrix is formed and the test runs at any n: \eqn{\hat\psi_1} is the mean of
#' the fit on `x1` (bandwidth `H1`) at `x1`, \eqn{\hat\psi_{12}} its mean at
#' `x2`. Where ks interpolates the gradient behind \eqn{v_k} from a grid,
#' kdegpu evaluates it exactly (`predict(type = "gradient")`); where ks bins
#' the data to choose the default bandwidths (from n = 500 in 2-D, 1000 in
#' 3-D, always in 1-D), kdegpu sums exactly. Given the same `H1`, `H2` (and
#' ks's `var.fhat1`, `var.fhat2` set to `v_1`, `v_2` of the result), the
#' statistic and p-value are ks's with `binned = FALSE` to rounding.
#'
#' The samples are unweighted: the null distribution above is for equally
#' weighted points (a `weights` argument is refused).
#'
#' @param x1,x2 The two samples: numeric vectors (1-D), or matrices or data
#'   frames with the same numeric columns (matched by name when both name
#'   them), one point per row; at least 2 points each.
#' @param H1,H2 The Gaussian kernels' covariance matrices (d x d; in 1-D
#'   one number, the variance, or a 1 x 1 matrix). By default, as ks: the
#'   plug-in bandwidth for the density functional \eqn{\psi_0} (ks's
#'   `Hpi.kfe()`; `hpi.kfe()` in 1-D) of each sample, with its pair sums
#'   exact.
#' @param backend `"auto"`, `"cuda"` or `"cpu"`, as for [kde_gpu()].
#' @param ... Not used: an argument given here is an error that names it.
#' @return An object of class `"htest"` (printed as [stats::t.test()]'s):
#'   `statistic` (the standardised `z`), `p.value`, `estimate` (`T`),
#'   `null.value` (0: T estimates the integrated squared difference
#'   \eqn{\int (f_1 - f_2)^2}), `alternative` (`"greater"`), `method`,
#'   `data.name`, and the pieces: `H1`, `H2`, `psi` (`psi1`, `psi2`,
#'   `psi12`, `psi21`), `null.mean` and `null.var` (\eqn{\mu_T}, \eqn{\sigma_T^2}),
#'   `var.fhat` (\eqn{v_1}, \eqn{v_2}) and `n` (\eqn{n_1}, \eqn{n_2}).
#' @references Duong, T., Goud, B. and Schauer, K. (2012). Closed-form
#'   density-based framework for automatic detection of cellular
#'   morphology changes. *Proceedings of the National Academy of Sciences*
#'   109(22), 8382-8387.
#' @seealso [ks::kde.test()], [kde_classifier()]
#' @examples
#' set.seed(1)
#' x1 <- matrix(rnorm(400), ncol = 2)
#' kde_test(x1, matrix(rnorm(400), ncol = 2), backend = "cpu")
#' kde_test(x1, matrix(rnorm(400, mean = 0.5), ncol = 2), backend = "cpu")
#'
#' # eruptions of Old Faithful after short and long waits
#' short <- faithful$waiting < 70
#' kde_test(faithful$eruptions[short], faithful$eruptions[!short], backend = "cpu")
#' @export
kde_test <- function(x1, x2, H1 = NULL, H2 = NULL, backend = c("auto", "cuda", "cpu"), ...) {
  check_dots_empty("kde_test()", c("x1", "x2", "H1", "H2", "backend"), kde_test_hints, ...)
  data_name <- paste(deparse1(substitute(x1)), "and", deparse1(substitute(x2)))
  x1 <- as_point_matrix(x1, "x1")
  x2 <- match_columns(as_point_matrix(x2, "x2", ncol(x1)), x1, "x2")
  d <- ncol(x1)
  for (arg in c("x1", "x2")) {
    x <- get(arg)
    if (nrow(x) < 2L) {
      stop_arg(arg, sprintf("has %d point; kde_test() needs at least 2 in each sample.", nrow(x)))
    }
    # the default bandwidth and the variance terms both sphere the sample
    if (is.null(chol_or_null(stats::var(x)))) {
      stop_arg(arg, sprintf(paste0("has a singular covariance (constant or collinear columns, ",
                                   "or fewer than %d points): the default bandwidth and the ",
                                   "variance of its density estimate need a full-rank one."),
                            d + 1L))
    }
  }
  backend <- choose_backend(match_choice(backend, c("auto", "cuda", "cpu"), "backend"))
  H1 <- if (is.null(H1)) kfe_bandwidth(x1, backend) else bandwidth_from_H(H1, d, "H1")$H
  H2 <- if (is.null(H2)) kfe_bandwidth(x2, backend) else bandwidth_from_H(H2, d, "H2")$H
  n1 <- nrow(x1)
  n2 <- nrow(x2)
  # the pair means: fit k's density averaged over a sample
  fit1 <- kde_gpu(x1, H = H1, backend = backend)
  fit2 <- kde_gpu(x2, H = H2, backend = backend)
  psi <- c(psi1 = mean(predict(fit1, x1)), psi2 = mean(predict(fit2, x2)),
           psi12 = mean(predict(fit1, x2)), psi21 = mean(predict(fit2, x1)))
  # free each GPU copy now rather than at garbage collection: at large n
  # the next fits need the memory
  release_device_copy(fit1)
  release_device_copy(fit2)
  var_fhat <- c(gradient_spread(x1, backend), gradient_spread(x2, backend))
  T_hat <- unname(psi[["psi1"]] + psi[["psi2"]] - (psi[["psi12"]] + psi[["psi21"]]))
  K0 <- (2 * pi)^(-d / 2)
  null_mean <- (1 / (n1 * sqrt(det(H1))) + 1 / (n2 * sqrt(det(H2)))) * K0
  null_var <- 3 * (n1 * var_fhat[1L] + n2 * var_fhat[2L]) / (n1 + n2) * (1 / n1 + 1 / n2)
  z <- (T_hat - null_mean) / sqrt(null_var)
  dimnames(H1) <- dimnames(H2) <- list(colnames(x1), colnames(x1))
  structure(list(
    statistic = c(z = z),
    p.value = stats::pnorm(z, lower.tail = FALSE),
    estimate = c(T = T_hat),
    null.value = c("integrated squared difference of the densities" = 0),
    alternative = "greater",
    method = sprintf("Kernel two-sample test (Duong, Goud and Schauer), %d-D", d),
    data.name = data_name,
    H1 = H1, H2 = H2, psi = psi, null.mean = null_mean, null.var = null_var,
    var.fhat = c(var_fhat1 = var_fhat[1L], var_fhat2 = var_fhat[2L]),
    n = c(n1 = n1, n2 = n2)
  ), class = "htest")
}

kde_test_hints <- list(
  weights = paste("kde_test() takes unweighted samples: the null distribution of its",
                  "statistic is derived for equally weighted points."),
  binned = "kde_test() sums every pair exactly; there is nothing to bin."
)

# v = grad f(mean)' S grad f(mean): the gradient of the estimate with ks's
# normal-scale bandwidth for the first derivative, Hns(deriv.order = 1) =
# (4 / (n (d + 4)))^(2 / (d + 6)) S, at the sample mean, exactly.
gradient_spread <- function(x, backend) {
  n <- nrow(x)
  d <- ncol(x)
  S <- stats::var(x)
  H <- (4 / (n * (d + 4)))^(2 / (d + 6)) * S
  # one query: the data's own order (a spatial one would cost a sort of
  # every point and buy nothing)
  fit <- new_kde_gpu(x, rep(1 / n, n), list(H = H, type = "full", method = "given"),
                     "gaussian", backend, "double", NULL, "x", order = seq_len(n))
  g <- drop(evaluate_derivative(fit, matrix(colMeans(x), 1L), "gradient", log = FALSE))
  release_device_copy(fit)
  drop(crossprod(g, S %*% g))
}

# ks's Hpi.kfe(deriv.order = 0) (two stages, scalar pilot, pre-sphered
# data) in d > 1 and hpi.kfe() in 1-D: the plug-in bandwidth for the
# functional psi_0 = int f^2, its pilot functional psi_2 summed exactly
# (ks bins it from n = 500 in 2-D, 1000 in 3-D, always in 1-D).
kfe_bandwidth <- function(x, backend) {
  n <- nrow(x)
  d <- ncol(x)
  w <- rep(1 / n, n)
  K0 <- (2 * pi)^(-d / 2)
  if (d == 1L) {
    s <- stats::sd(x[, 1L])
    psi4_ns <- 12 / ((2 * s)^5 * sqrt(pi)) # ks's psins.1d(4, s) = 4! / ((2 s)^5 2! sqrt(pi))
    g <- (2 * K0 / (psi4_ns * n))^(1 / 5)
    psi2 <- psi_estimate(x, w, g, 2L, backend)[[1L]]
    h <- (K0 / (-psi2 * n))^(1 / 3)
    return(matrix(h^2, 1L, 1L))
  }
  pre <- prescale(x, w, "sphere")
  S <- stats::var(pre$x)
  # pilot: A1 = |D^2 K(0)|^2 = d K0^2, A2 = D^2 K(0)' (vec(I)' x I) psi_4^NS =
  # -K0 sum_{i,j} psi_{2 e_i + 2 e_j}
  memo <- new.env()
  lap2 <- 0
  for (i in seq_len(d)) for (j in seq_len(d)) {
    a <- integer(d)
    a[i] <- a[i] + 2L
    a[j] <- a[j] + 2L
    lap2 <- lap2 + psi_normal(a, S, memo)
  }
  A1 <- d * K0^2
  A2 <- -K0 * lap2
  g <- (-A1 / (2 * A2 * n))^(1 / (d + 4))
  psi2 <- psi_estimate(pre$x, w, g, 2L, backend)
  P2 <- matrix(0, d, d) # vec(P2) = ks's psi_2 over ordered pairs
  for (i in seq_len(d)) for (j in seq_len(d)) {
    P2[i, j] <- psi2[[index_key(tabulate(c(i, j), nbins = d))]]
  }
  amse <- function(H) (K0 / (n * sqrt(det(H))) + sum(H * P2) / 2)^2
  Hstart <- (2 / (n * d))^(2 / (d + 2)) * 2 * S # ks's Gns(r = 0)
  H <- pre$S12 %*% minimise_over_H(amse, Hstart, "full") %*% pre$S12
  (H + t(H)) / 2
}
