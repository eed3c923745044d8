# The pieces of the multivariate plug-in and smoothed cross-validation
# selectors of ks 1.14 (Duong; Chacon and Duong 2010, 2018), with the
# density-derivative functionals psi_r computed exactly from the Gaussian
# moment sums (moments.R) instead of on a grid. Each function names the ks
# function it follows; formulas are ks's.
#
# Multi-indices are keyed by strings "a1,a2,...". A psi estimate is a named
# vector over the multi-indices of one degree r:
#   psi_b = sum_{i,j} w_i w_j (D^b phi_G)(x_i - x_j),   G = g^2 I,
# diagonal terms included (ks's kfe(inc = 1)); with equal weights
# n^-2 sum_{i,j}.

index_key <- function(a) paste(a, collapse = ",")

# E[t^a] for t ~ N(0, C), by Isserlis's recursion
#   E[t_k t^b] = sum_l C_kl b_l E[t^(b - e_l)],
# memoised in `memo` (an environment).
gaussian_expectation <- function(a, C, memo) {
  if (sum(a) %% 2L == 1L) return(0)
  if (all(a == 0L)) return(1)
  key <- index_key(a)
  if (!is.null(memo[[key]])) return(memo[[key]])
  k <- which(a > 0L)[[1L]]
  b <- a
  b[k] <- b[k] - 1L
  value <- 0
  for (l in which(b > 0L)) {
    c <- b
    c[l] <- c[l] - 1L
    value <- value + C[k, l] * b[l] * gaussian_expectation(c, C, memo)
  }
  memo[[key]] <- value
  value
}

# (D^a phi_Sigma)(0) = i^|a| E[t^a] phi_Sigma(0) with t ~ N(0, Sigma^-1)
# (the derivative of the inverse Fourier transform at 0); ks's
# dmvnorm.deriv(0, Sigma = Sigma) for one multi-index.
derivative_at_zero <- function(a, Sigma, memo = new.env()) {
  if (sum(a) %% 2L == 1L) return(0)
  d <- ncol(Sigma)
  (-1)^(sum(a) / 2) * gaussian_expectation(as.integer(a), solve(Sigma), memo) *
    (2 * pi)^(-d / 2) / sqrt(det(Sigma))
}

# Normal-reference psi_a = (D^a phi_{2 Sigma})(0): ks's psins().
psi_normal <- function(a, Sigma, memo = new.env()) derivative_at_zero(a, 2 * Sigma, memo)

# ks's nu(r, A): r! 2^r times the r-th coefficient of det(I - 2 t A)^(-1/2).
ks_nu <- function(r, A) {
  ev <- eigen(A, symmetric = TRUE, only.values = TRUE)$values
  traces <- vapply(seq_len(max(r, 1L)), function(p) sum(ev^p), 0)
  nu <- 1
  if (r >= 1L) {
    for (p in seq_len(r)) nu <- c(nu, sum(traces[seq_len(p)] * rev(nu)) / (2 * p))
  }
  factorial(r) * 2^r * nu[[r + 1L]]
}

# ks's OF(m): the number of perfect matchings of m items, (m - 1)!!.
odd_factorial <- function(m) factorial(m) / (2^(m / 2) * factorial(m / 2))

# Multi-indices of degree r in d dimensions (the engine's order: decreasing
# lexicographic, as ks's unique index lists).
degree_index <- function(d, r) {
  index <- moment_index(d, r)
  index[rowSums(index) == r, , drop = FALSE]
}

multinomial <- function(a) factorial(sum(a)) / prod(factorial(a))

# The psi_r estimates for pilot G = g^2 I on points x (n x d, weights w):
# ks's kfe(x, G, deriv.order = r, inc = 1), one value per multi-index.
psi_estimate <- function(x, w, g, r, backend) {
  sums <- pair_derivative_sums(x / g, w, r, backend)
  stats::setNames(sums$value / g^(ncol(x) + r), apply(sums$index, 1L, index_key))
}

# ks's gsamse(): the SAMSE pilot bandwidth for psi of order `modr` (4 or 6)
# in the sphered/scaled coordinates, from normal-reference psi of order
# modr + 2 or, at stage 2, from estimates `psihat` of that order. At stage
# 2, ks 1.14 finds the estimate for multi-index b at the position of b in
# its list of distinct multi-indices, but reads it from its vector over all
# d^6 ordered index tuples (psifun2() -> gsamse(psihat = kfe(deriv.vec =
# TRUE))), so it uses the functional of another multi-index (in 2-D psi_51
# for psi_42 and psi_24, psi_42 for psi_06). ks_positions = TRUE does the
# same, so that bw_plugin() gives ks::Hpi()'s bandwidth; FALSE reads by
# multi-index.
pilot_samse <- function(S, n, modr, psihat = NULL, ks_positions = TRUE) {
  d <- ncol(S)
  index <- degree_index(d, modr)
  index <- index[apply(index %% 2L == 0L, 1L, all), , drop = FALSE]
  memo_k <- new.env()
  memo_s <- new.env()
  K <- apply(index, 1L, function(a) derivative_at_zero(a, diag(d), memo_k))
  if (!is.null(psihat)) distinct <- apply(degree_index(d, modr + 2L), 1L, index_key)
  psi <- apply(index, 1L, function(a) {
    sum(vapply(seq_len(d), function(j) {
      b <- a
      b[j] <- b[j] + 2L
      if (is.null(psihat)) return(psi_normal(b, S, memo_s))
      if (ks_positions) b <- ks_tuple_at(match(index_key(b), distinct), d, modr + 2L)
      psihat[[index_key(b)]]
    }, 0))
  })
  B1 <- (2 * modr + 2 * d) * sum(K^2)
  B2 <- (modr + d - 2) * sum(K * psi)
  B3 <- sum(psi^2)
  gamma1 <- (-B2 + sqrt(B2^2 + 4 * B1 * B3)) / (2 * B1)
  (gamma1 * n)^(-1 / (modr + d + 2))
}

# The multi-index of entry `position` (1-based) of ks's vector over the d^r
# ordered index tuples (dmvnorm.deriv(deriv.vec = TRUE): the last index
# runs fastest).
ks_tuple_at <- function(position, d, r) {
  digits <- (position - 1L) %/% d^((r - 1L):0) %% d
  tabulate(digits + 1L, nbins = d)
}

# Sum over ordered 6-tuples of (sum_k psi_{2 e_k + tuple})^2 for the
# normal-reference psi_8 of ks's gdscalar() (its B3): by multi-index c of
# degree 6, counted multinomial(c) times.
laplacian_psi8_square <- function(S) {
  d <- ncol(S)
  memo <- new.env()
  index <- degree_index(d, 6L)
  sum(apply(index, 1L, function(c) {
    lap <- sum(vapply(seq_len(d), function(k) {
      b <- c
      b[k] <- b[k] + 2L
      psi_normal(b, S, memo)
    }, 0))
    multinomial(c) * lap^2
  }))
}

# eta_6 = sum_{i,j} w_i w_j (Laplacian^3 phi_G)(x_i - x_j): ks's
# Qr(x, deriv.order = 6, Sigma = G, inc = 1), from the psi_6 estimates:
# Laplacian^3 = sum over multi-indices c of degree 3 of
# multinomial(c) D^(2c).
eta6_from_psi <- function(psi6, d) {
  index <- degree_index(d, 3L)
  sum(apply(index, 1L, function(c) multinomial(c) * psi6[[index_key(2L * c)]]))
}

# ks's gdscalar(nstage = 2): the scalar pilot g for psi_4 (scv = TRUE: the
# one for smoothed cross-validation), in the sphered/scaled coordinates x
# with covariance S.
pilot_dscalar <- function(x, w, S, n, backend, scv = FALSE) {
  d <- ncol(x)
  cf <- if (scv) c(2^(-d), 2^(-d / 2 + 1), 4) else c(1, 1, 1)
  B3 <- laplacian_psi8_square(S)
  factor_b <- prod(d + 2 * (0:3)) * odd_factorial(6)
  nu4 <- ks_nu(4L, solve(S))
  if (!scv) {
    B1 <- 2 * (2 * pi)^(-d) * factor_b
    B2 <- -(d + 4) * 2^(-d / 2 + 2) * (2 * pi)^(-d) * det(S)^(-1 / 2) * odd_factorial(6) * nu4
  } else {
    B1 <- 2^(-5) * (4 * pi)^(-d) * factor_b
    B2 <- -(d + 4) * 2^(-6) * (4 * pi)^(-d) * det(S)^(-1 / 2) * odd_factorial(6) * nu4
    B3 <- 4 * B3
  }
  g6 <- (2 * B1 / (-B2 + sqrt(B2^2 + 4 * B1 * B3)))^(1 / (d + 8)) * n^(-1 / (d + 8))
  eta6 <- eta6_from_psi(psi_estimate(x, w, g6, 6L, backend), d)
  L0 <- (2 * pi)^(-d / 2)
  A1 <- cf[1] * (2 * d + 8) * L0^2 * odd_factorial(4) * ks_nu(2L, diag(d))
  A2 <- cf[2] * (d + 2) * L0 * odd_factorial(4) * eta6
  A3 <- cf[3] * eta6^2
  (2 * A1 / ((-A2 + sqrt(A2^2 + 4 * A1 * A3)) * n))^(1 / (d + 6))
}

# The d^2 x d^2 matrix Psi_4 with entry ((i, j), (k, l)) = psi_{e_i + e_j +
# e_k + e_l} (ks's invvec of its derivative vector).
psi4_matrix <- function(psi4, d) {
  pairs <- expand.grid(i = seq_len(d), j = seq_len(d))
  out <- matrix(0, d^2, d^2)
  for (r in seq_len(d^2)) {
    for (s in seq_len(d^2)) {
      a <- tabulate(c(pairs$i[r], pairs$j[r], pairs$i[s], pairs$j[s]), nbins = d)
      out[r, s] <- psi4[[index_key(a)]]
    }
  }
  out
}

# The symmetric square root (ks's matrix.sqrt).
matrix_sqrt <- function(A) {
  e <- eigen(A, symmetric = TRUE)
  e$vectors %*% diag(sqrt(pmax(e$values, 0)), nrow(A)) %*% t(e$vectors)
}

vech <- function(A) A[lower.tri(A, diag = TRUE)]

invvech <- function(v, d) {
  A <- matrix(0, d, d)
  A[lower.tri(A, diag = TRUE)] <- v
  A[upper.tri(A)] <- t(A)[upper.tri(A)]
  A
}

# Minimises a criterion of H as ks does: H = L L with L symmetric (full,
# BFGS over vech(L)) or diagonal (over diag(L); `method` as ks: BFGS for
# Hpi.diag, Nelder-Mead for Hscv.diag), from the square root of Hstart.
minimise_over_H <- function(criterion, Hstart, type, method = "BFGS") {
  d <- ncol(Hstart)
  L0 <- matrix_sqrt(Hstart)
  if (type == "full") {
    to_H <- function(p) {
      L <- invvech(p, d)
      L %*% L
    }
    start <- vech(L0)
  } else {
    to_H <- function(p) diag(p^2, d)
    start <- diag(L0)
  }
  result <- stats::optim(start, function(p) criterion(to_H(p)), method = method)
  to_H(result$par)
}
