# The conditional CDF F(y | x) of a Gaussian fit for one response column
# y given the others x (predict(type = "cdf", given = )), and its
# quantiles (quantile(fit, probs, given = newdata)): exact sums in double
# (src/conditional_cdf.c; a CUDA fit's on its GPUs, cuda/conditional_cdf.cu).

# The fit's parts that the sums need, for the response `response` given
# the columns `given`: whitened x (z_j = R^-T x_j with H_xx = R'R), u_j =
# (y_j - B x_j) / sigma, the log weights (an adaptive fit's lambda_j^-dim
# in them) and the map from queries to (z, v).
conditional_cdf_problem <- function(object, given) {
  response <- setdiff(seq_len(object$d), given)
  if (length(response) != 1L) {
    stop_arg("given", sprintf(paste0("must leave exactly one response column for type = ",
                                     "\"cdf\" (and quantiles); it leaves %d."),
                              length(response)))
  }
  H <- object$H
  R <- chol(H[given, given, drop = FALSE])
  B <- drop(solve(H[given, given, drop = FALSE], H[given, response]))
  sigma <- sqrt(H[response, response] - sum(B * H[given, response]))
  centre <- object$center
  lambda <- object$adaptive$lambda
  log_weight <- log(object$weights)
  if (!is.null(lambda)) log_weight <- log_weight - length(given) * log(lambda)
  transform <- function(x, y) {
    x <- sweep(x, 2L, centre[given])
    list(z = t(backsolve(R, t(x), transpose = TRUE)),
         v = (y - centre[response] - drop(x %*% B)) / sigma)
  }
  train <- transform(object$x[, given, drop = FALSE], object$x[, response])
  list(given = given, response = response, B = B, sigma = sigma, transform = transform,
       z = train$z, u = train$v, log_weight = log_weight, lambda = lambda,
       devices = if (object$backend == "cuda") gpu_devices(gpus_for_cuda_fit()))
}

# F(y | x) (and, with `density`, f(y | x)) at the rows of x and y.
evaluate_conditional_cdf <- function(problem, x, y, density = FALSE) {
  q <- problem$transform(x, y)
  out <- .Call(C_kdegpu_conditional_cdf, problem$z, problem$u, problem$log_weight,
               problem$lambda, q$z, q$v, density, problem$devices,
               if (!is.null(problem$devices)) gpu_memory_budget(), cpu_threads(),
               progress_delay())
  if (!density) return(out)
  m <- length(y)
  list(cdf = out[seq_len(m)], density = out[m + seq_len(m)] / problem$sigma)
}

# predict(type = "cdf", given = ): F(y | x) at the rows of `query`.
predict_conditional_cdf <- function(object, query, columns) {
  problem <- conditional_cdf_problem(object, columns)
  x <- query[, columns, drop = FALSE]
  if (!all(is.finite(x))) {
    stop_arg("newdata", "must have finite values in the conditioning (`given`) columns.")
  }
  evaluate_conditional_cdf(problem, x, query[, problem$response])
}

# quantile(fit, probs, given = newdata): for each row of newdata (the
# conditioning columns) and each p, the smallest y with F(y | x) >= p, by
# Newton's steps on the exact F kept inside a bracket (bisection where a
# step leaves it), to 1e-12 of the bracket's scale.
conditional_quantiles <- function(object, probs, given) {
  why <- conditional_refusal(object)
  if (!is.null(why)) stop_arg("given", why)
  newdata <- given
  if (is.null(dim(newdata))) newdata <- matrix(newdata, nrow = 1L,
                                               dimnames = list(NULL, names(newdata)))
  if (is.null(colnames(newdata)) || is.null(colnames(object$x))) {
    stop_arg("given", paste0("must be a data frame or matrix whose column names are among ",
                             "the fit's (the fit's columns need names too)."))
  }
  columns <- given_index(colnames(newdata), colnames(object$x), object$d)
  x <- as.matrix(newdata) * 1
  if (!is.numeric(x) || !all(is.finite(x))) stop_arg("given", "must hold finite numbers.")
  problem <- conditional_cdf_problem(object, columns)
  m <- nrow(x)
  grid <- expand.grid(row = seq_len(m), p = seq_along(probs))
  xs <- x[grid$row, , drop = FALSE]
  p <- probs[grid$p]
  # every point's kernel, given x, is normal around B x + sigma u_j with sd
  # sigma lambda_j: 40 of those sds beyond, F is 0 or 1 to rounding
  centre <- object$center[problem$response] +
    drop(sweep(xs, 2L, object$center[columns]) %*% problem$B)
  reach <- 40 * problem$sigma * if (is.null(problem$lambda)) 1 else max(problem$lambda)
  a <- centre + problem$sigma * min(problem$u) - reach # F(a) < p
  b <- centre + problem$sigma * max(problem$u) + reach # F(b) >= p
  out <- ifelse(p == 0, -Inf, ifelse(p == 1, Inf, NA_real_))
  open <- which(p > 0 & p < 1)
  y <- (a + b) / 2
  scale <- pmax(abs(a), abs(b), b - a)
  for (step in seq_len(200L)) {
    if (length(open) == 0L) break
    at <- evaluate_conditional_cdf(problem, xs[open, , drop = FALSE], y[open], density = TRUE)
    up <- at$cdf >= p[open]
    b[open] <- ifelse(up, y[open], b[open])
    a[open] <- ifelse(up, a[open], y[open])
    newton <- y[open] - (at$cdf - p[open]) / at$density
    inside <- is.finite(newton) & newton > a[open] & newton < b[open]
    converged <- inside & abs(newton - y[open]) <= 1e-12 * scale[open]
    tight <- !converged & b[open] - a[open] <= 1e-12 * scale[open]
    y[open] <- ifelse(inside, newton, (a[open] + b[open]) / 2)
    out[open[converged]] <- y[open[converged]]
    out[open[tight]] <- b[open[tight]]
    open <- open[!(converged | tight)]
  }
  out[open] <- b[open]
  dimnames_rows <- rownames(newdata)
  matrix(out, m, length(probs),
         dimnames = list(dimnames_rows, probability_labels(probs)))
}
