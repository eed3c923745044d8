# Least-squares cross-validation of mixed data (np's cv.ls): LSCV = int f^2
# - 2 sum_i w_i f_{-i}(x_i), with the integral over the numeric columns and
# the sum over every combination of the factors' levels. For levels l,
# f(x, l) = sum_i v_i phi_H(x - x_i) with v_i = w_i prod_k L_k(l_k, c_ik),
# so int f(x, l)^2 dx = sum_ij v_i v_j phi_2H(x_i - x_j): one exact
# Gaussian sum with weights v at the points, per combination of levels.

# int sum_l f(x, l)^2 dx at H and lambda.
mixed_integral_squared <- function(parts, columns, kernels, lambda, H, weights, backend) {
  matrices <- discrete_kernel_matrices(columns, kernels, lambda)
  combinations <- as.matrix(expand.grid(lapply(columns$levels, seq_along)))
  total <- 0
  for (row in seq_len(nrow(combinations))) {
    v <- weights
    for (k in seq_along(matrices)) v <- v * matrices[[k]][combinations[row, k], parts$codes[, k]]
    mass <- sum(v)
    if (!(mass > 0)) next
    if (ncol(parts$x) == 0L) {
      total <- total + mass^2
      next
    }
    fit <- new_kde_gpu(parts$x, v / mass, list(H = 2 * H, type = "full", method = "lscv"),
                       "gaussian", backend, "double", NULL, "x")
    at_points <- exp(log_density_at_training_points(fit, FALSE))
    release_device_copy(fit)
    total <- total + mass^2 * sum(v / mass * at_points)
  }
  total
}

# The LSCV criterion from the leave-one-out log-densities of the fit.
mixed_lscv <- function(parts, columns, kernels, lambda, H, weights, backend, loo) {
  mixed_integral_squared(parts, columns, kernels, lambda, H, weights, backend) -
    2 * sum(ifelse(weights > 0, weights * exp(loo), 0))
}
