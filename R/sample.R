#' Random samples and permutations, and draws from a density estimate
#'
#' kdegpu makes [base::sample()] generic so that `sample(fit, size)` draws
#' from a [kde_gpu()] fit. Every other call goes to `base::sample()`
#' unchanged, with the same results under the same seed.
#'
#' @param x A [kde_gpu()] fit, or anything [base::sample()] accepts.
#' @param size The number of points to draw.
#' @param replace,prob As in [base::sample()]. For a fit, draws are always
#'   independent (`replace = TRUE`) and weighted by the fit's `weights`: any
#'   other `replace`, or a `prob`, is an error.
#' @param ... Not used: an argument given here is an error that names it.
#' @return For a fit: a matrix with `size` rows and the fit's columns (a
#'   plain vector in 1-D). Otherwise what [base::sample()] returns.
#' @details A draw picks a training point with probability equal to its
#'   weight and adds kernel noise with covariance `H` (\eqn{\lambda_j^2 H}
#'   for point j of an adaptive fit, on either backend): a uniform direction
#'   times a radius from the kernel's radial law (exact, through beta and
#'   gamma variates or rejection), mapped through the Cholesky factor of
#'   `H`. On the CPU backend all randomness comes from R's generator. A
#'   CUDA fit draws 10,000 points or more (in up to 128 dimensions) on the
#'   GPU, from a counter-based generator (Philox4x32-10) whose key is taken
#'   from R's generator. Either way `set.seed()` makes draws reproducible;
#'   the GPU's draws for a seed are not the CPU's, but have the same law.
#'   A bounded fit (`lower`, `upper`) draws from the unbounded estimate and
#'   folds each draw back into the bounds (reflecting it across the bound it
#'   crossed, repeatedly between two bounds): exactly the reflected density
#'   that [predict()][predict.kde_gpu] evaluates.
#' @examples
#' fit <- kde_gpu(faithful$waiting, backend = "cpu")
#' set.seed(1)
#' draws <- sample(fit, 1000)
#' c(mean(draws), mean(faithful$waiting))
#' sample(1:10) # base R's sample, unchanged
#' @export
sample <- function(x, size, replace = FALSE, prob = NULL, ...) {
  UseMethod("sample")
}

#' @rdname sample
#' @export
sample.default <- function(x, size, replace = FALSE, prob = NULL, ...) {
  check_dots_empty("sample()", c("x", "size", "replace", "prob"), list(), ...)
  if (missing(size)) base::sample(x, replace = replace, prob = prob)
  else base::sample(x, size, replace = replace, prob = prob)
}

#' @rdname sample
#' @export
sample.kde_gpu <- function(x, size, replace = TRUE, prob = NULL, ...) {
  check_dots_empty("sample()", c("x", "size"), list(), ...)
  check_fit(x, "x")
  if (!isTRUE(replace)) {
    stop_arg("replace", "must be TRUE for draws from a density estimate (they are independent).")
  }
  if (!is.null(prob)) {
    stop_arg("prob", "does not apply to draws from a fit: give `weights` to kde_gpu().")
  }
  if (missing(size)) stop_arg("size", "is missing: how many points to draw?")
  size <- check_count(size, "size")
  d <- x$d
  draws <- if (samples_on_gpu(x, size)) {
    gpu_draws(x, size)
  } else {
    picked <- sample.int(x$n, size, replace = TRUE, prob = x$weights)
    noise <- standard_kernel_noise(x$kernel, size, d) %*% x$chol_H
    # an adaptive fit's point j has covariance lambda_j^2 H
    if (!is.null(x$adaptive)) noise <- noise * x$adaptive$lambda[picked]
    x$x[picked, , drop = FALSE] + noise
  }
  # a bounded fit: draws from the unbounded estimate, folded into the box
  if (is_bounded(x)) draws <- fold_points(draws, x$lower, x$upper)
  dimnames(draws) <- list(NULL, colnames(x$x))
  if (d == 1L) drop(draws) else draws
}

# The GPU draws a CUDA fit's samples where the capability table says it
# serves the fit, and the draws are enough to pay for its set-up.
samples_on_gpu <- function(fit, size) {
  size >= gpu_sample_min_size && gpu_serves("sample", fit)
}

# The GPU's generator is keyed by two 32-bit words drawn from R's generator.
gpu_draws <- function(fit, size) {
  model <- cuda_model(fit, tolerance = NA) # any form: only its devices serve
  key <- floor(stats::runif(2L) * 2^32)
  cumulative <- cumsum(fit$weights)
  cumulative <- cumulative / cumulative[length(cumulative)]
  .Call(C_kdegpu_sample_cuda, model, fit$x, cumulative, fit$adaptive$lambda, fit$chol_H,
        kernel_index(fit$kernel), as.double(size), key, cpu_threads(), progress_delay())
}

# size x d draws from the kernel with identity covariance: for the
# Gaussian normals, otherwise a direction times a * s, where s has density
# proportional to s^(d-1) k(s) (kdegpu/radius.h, as the GPU draws it).
standard_kernel_noise <- function(kernel, size, d) {
  draws <- .Call(C_kdegpu_standard_draws, kernel_index(kernel), as.double(size),
                 as.integer(d), progress_delay())
  if (kernel == "gaussian") draws else draws * kernel_constants(kernel, d)$scale
}

#' Simulate data sets from a density estimate
#'
#' @param object A [kde_gpu()] fit.
#' @param nsim Number of simulated data sets, each with as many points as
#'   the training data.
#' @param seed As in [stats::simulate()]: `NULL`, or an integer for
#'   `set.seed()`.
#' @param ... Not used: an argument given here is an error that names it.
#' @return In 1-D, a data frame with `nsim` columns `sim_1`, ...; in d > 1 a
#'   list of `nsim` matrices. The generator state is attached as attribute
#'   `"seed"`, as [stats::simulate()] does.
#' @examples
#' fit <- kde_gpu(faithful$eruptions, backend = "cpu")
#' sims <- simulate(fit, nsim = 2, seed = 1)
#' sapply(sims, mean)
#' @importFrom stats simulate
#' @export
simulate.kde_gpu <- function(object, nsim = 1, seed = NULL, ...) {
  check_dots_empty("simulate()", c("object", "nsim", "seed"), list(), ...)
  check_fit(object)
  nsim <- check_count(nsim, "nsim")
  if (nsim < 1L) stop_arg("nsim", "must be at least 1: the number of simulated samples.")
  if (!is.null(seed) && (!is.numeric(seed) || length(seed) != 1L || !is.finite(seed))) {
    stop_arg("seed", "must be NULL or one number, as set.seed() takes.")
  }
  if (!exists(".Random.seed", envir = .GlobalEnv, inherits = FALSE)) stats::runif(1)
  if (is.null(seed)) {
    rng_state <- get(".Random.seed", envir = .GlobalEnv)
  } else {
    old_seed <- get(".Random.seed", envir = .GlobalEnv)
    on.exit(assign(".Random.seed", old_seed, envir = .GlobalEnv))
    set.seed(seed)
    rng_state <- structure(seed, kind = as.list(RNGkind()))
  }
  sims <- lapply(seq_len(nsim), function(i) sample.kde_gpu(object, object$n))
  names(sims) <- paste0("sim_", seq_len(nsim))
  out <- if (object$d == 1L) as.data.frame(sims) else sims
  attr(out, "seed") <- rng_state
  out
}
