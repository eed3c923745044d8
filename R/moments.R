# Gaussian moment sums: the pair-sum engine of src/moments.h, on the CPU or
# the GPU. Internal; the plug-in bandwidths (bandwidth_plugin.R) build their
# psi functionals on it, and gradients, Hessians, the score and mean-shift
# can use it too (its queries are any points).
#
# For whitened training points `train` (n x d), weights `weights` (>= 0, any
# total) and whitened queries `query` (m x d), with u = x_j - q_i:
#   log_scale[i] = max_j (log w_j - |u|^2 / 2)
#   sums[i, m]   = sum_j w_j exp(-|u|^2 / 2 - log_scale[i]) u^a_m,
# a_m the m-th row of moment_index(d, degree) (by degree, then decreasing
# lexicographic order). pairs: "all"; "leave_one_out" (queries are the
# training points, j == i left out); "above" (queries are the training
# points, only j > i: half a symmetric sum over i != j). backend: "cpu" or
# "cuda" (every GPU of options(kdegpu.devices), a share of the queries
# each; the same results however many).
gaussian_moments <- function(train, weights, query = train, degree = 0L,
                             pairs = c("all", "leave_one_out", "above"),
                             backend = "cpu") {
  storage.mode(train) <- "double"
  storage.mode(query) <- "double"
  degree <- as.integer(degree)
  pairs <- match(match.arg(pairs), c("all", "leave_one_out", "above")) - 1L
  if (backend == "cuda") {
    devices <- gpu_devices(gpus_for_cuda_fit())
    return(.Call(C_kdegpu_moments_cuda, train, as.double(weights), query, degree,
                 pairs, devices, gpu_memory_budget(), cpu_threads(),
                 progress_delay()))
  }
  .Call(C_kdegpu_moments_cpu, train, as.double(weights), query, degree, pairs,
        cpu_threads(), progress_delay())
}

# The multi-indices of the moment sums, one per row, in the engine's order.
moment_index <- function(d, degree) {
  .Call(C_kdegpu_moment_index, as.integer(d), as.integer(degree))
}

# Coefficients of the probabilists' Hermite polynomials He_0..He_6 by power
# 0..k: D^k phi(x) = (-1)^k He_k(x) phi(x) for the standard normal phi.
hermite_coefficients <- list(
  1, c(0, 1), c(-1, 0, 1), c(0, -3, 0, 1), c(3, 0, -6, 0, 1),
  c(0, 15, 0, -10, 0, 1), c(-15, 0, 45, 0, -15, 0, 1)
)

# The matrix that turns moment sums of degree <= r into the products
# He_b(u) = prod_k He_{b_k}(u_k), one column per multi-index b of degree r
# (rows: moment_index(d, r)).
hermite_matrix <- function(d, r) {
  index <- moment_index(d, r)
  keys <- apply(index, 1L, paste, collapse = ",")
  targets <- index[rowSums(index) == r, , drop = FALSE]
  out <- matrix(0, nrow(index), nrow(targets))
  for (b in seq_len(nrow(targets))) {
    # every combination of one power per coordinate, with its coefficient
    terms <- list(list(power = integer(), coef = 1))
    for (k in seq_len(d)) {
      coef_k <- hermite_coefficients[[targets[b, k] + 1L]]
      terms <- unlist(lapply(terms, function(t) {
        lapply(which(coef_k != 0) - 1L, function(e) {
          list(power = c(t$power, e), coef = t$coef * coef_k[[e + 1L]])
        })
      }), recursive = FALSE)
    }
    for (t in terms) {
      row <- match(paste(t$power, collapse = ","), keys)
      out[row, b] <- out[row, b] + t$coef
    }
  }
  list(matrix = out, index = targets)
}

# Density-derivative functionals of whitened points z (n x d) with weights
# w summing to 1: for every multi-index b of degree r,
#   sum_i sum_j w_i w_j (D^b phi)(z_i - z_j),
# phi the standard normal density in d dimensions, diagonal terms included.
# (D^b phi)(z_i - z_j) = He_b(u) phi(u) with u = z_j - z_i. r is even, so
# the summand is symmetric in (i, j): twice the sum over j > i (half the
# pairs) plus the diagonal, He_b(0) phi(0) sum_i w_i^2. Returns the values
# and the multi-indices (rows of `index`).
pair_derivative_sums <- function(z, w, r, backend = "cpu") {
  d <- ncol(z)
  moments <- gaussian_moments(z, w, z, r, "above", backend)
  hermite <- hermite_matrix(d, r)
  per_query <- moments$sums %*% hermite$matrix
  scale <- exp(moments$log_scale + log(w))
  scale[w == 0 | moments$log_scale == -Inf] <- 0
  at_zero <- hermite$matrix[1L, ] # He_b(0): the constant coefficients
  value <- 2 * drop(crossprod(scale, per_query)) + at_zero * sum(w^2)
  list(value = value * (2 * pi)^(-d / 2), index = hermite$index)
}
