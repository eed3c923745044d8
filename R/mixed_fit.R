# kde_gpu() on mixed data (see mixed.R): the fit, and the joint
# maximum-likelihood cross-validation of H and the lambdas (np's cv.ml).

# kde_gpu()'s arguments that a mixed fit does not take, with why.
mixed_refused <- c(
  lower = "bounds apply to numeric columns of a numeric fit",
  upper = "bounds apply to numeric columns of a numeric fit",
  debias = "score debiasing needs a gradient in every column",
  adaptive = "the adaptive estimate's pilot would need factors per discrete column",
  alpha = "it belongs to adaptive fits")

kde_mixed <- function(x, bw, H, kernel, weights, backend, precision, adjust, lambda,
                      factor_kernel, ordered_kernel, refused, call, data_name) {
  if (length(refused) > 0L) {
    stop_arg(refused[[1L]], sprintf("does not apply to mixed data (factor columns): %s.",
                                    mixed_refused[[refused[[1L]]]]))
  }
  if (kernel != "gaussian") {
    stop_arg("kernel", sprintf(paste0("must be \"gaussian\" for mixed data (factor columns), ",
                                      "not \"%s\": the discrete kernels combine exactly with ",
                                      "the Gaussian only."), kernel))
  }
  factor_kernel <- match_choice(factor_kernel, factor_kernels, "factor_kernel")
  ordered_kernel <- match_choice(ordered_kernel, ordered_kernels, "ordered_kernel")
  columns <- mixed_columns(x)
  kernels <- mixed_kernel_names(columns, factor_kernel, ordered_kernel)
  n_levels <- lengths(columns$levels)
  parts <- mixed_parts(x, columns)
  weights <- normalise_weights(weights, nrow(x))
  backend <- choose_backend(backend)
  d_c <- length(columns$numeric)
  if (inherits(bw, "kdegpu_bandwidth") || inherits(H, "kdegpu_bandwidth")) {
    chosen_lambda <- attr(if (is.null(H)) bw else H, "lambda", exact = TRUE)
    chosen_kernels <- attr(if (is.null(H)) bw else H, "discrete_kernels", exact = TRUE)
    if (!is.null(chosen_kernels) && !identical(chosen_kernels, kernels)) {
      stop_arg(if (is.null(H)) "bw" else "H", sprintf(
        "was chosen for the discrete kernels %s, not %s; refit with those kernels.",
        paste(names(chosen_kernels), chosen_kernels, sep = ": ", collapse = ", "),
        paste(names(kernels), kernels, sep = ": ", collapse = ", ")))
    }
    if (is.null(lambda)) lambda <- chosen_lambda
  }
  if (!is.null(lambda)) lambda <- check_lambda(lambda, kernels, n_levels)
  selector <- if (is.character(bw) && length(bw) == 1L && !is.na(bw) && is.null(H)) {
    parse_selector(bw)
  }
  if (!is.null(selector) && !(selector$base %in% c("mlcv", "lscv"))) {
    stop_arg("bw", sprintf(paste0("= \"%s\" is not a selector for mixed data: give \"mlcv\" ",
                                  "or \"lscv\" (cross-validated jointly with the lambdas, as ",
                                  "np's cv.ml and cv.ls), a rule, a number or `H`."), bw))
  }
  # the default, as np's: maximum-likelihood cross-validation of everything
  if (is.null(bw) && is.null(H) && (d_c > 0L || is.null(lambda))) selector <- parse_selector("mlcv")
  bandwidth <- if (d_c == 0L) {
    if (!is.null(bw) && is.null(selector) || !is.null(H)) {
      stop_arg(if (is.null(H)) "bw" else "H", "applies to numeric columns, and the data have none.")
    }
    NULL
  } else if (is.null(selector)) {
    adjust_bandwidth(resolve_bandwidth(parts$x, weights, bw, H), adjust)
  }
  chosen <- NULL
  if (is.null(bandwidth) && d_c > 0L || is.null(lambda)) {
    shape <- if (is.null(selector) || d_c <= 1L) "scalar" else selector$shape
    method <- if (is.null(selector)) "mlcv" else selector$base
    chosen <- select_mixed(parts, columns, kernels, weights, bandwidth, lambda, shape,
                           backend, method = method)
    if (is.null(bandwidth) && d_c > 0L) {
      bandwidth <- adjust_bandwidth(list(H = chosen$H, type = shape, method = method), adjust)
    }
    lambda <- chosen$lambda
  }
  if (d_c > 0L) {
    check_bandwidth_scale(diag(bandwidth$H), if (adjust != 1) "adjust" else "x",
                          column_magnitudes(parts$x), bandwidth$method)
  }
  object <- new_kde_mixed(parts, columns, kernels, lambda, bandwidth, weights, backend,
                          precision, call, data_name)
  object$selection <- chosen$details
  object$row_names <- if (.row_names_info(x) > 0L) row.names(x)
  object$requested_backend <- backend
  object$adjust <- adjust
  seal_mixed(object)
}

# Whether a backend sums the discrete kernels fused into the Gaussian's
# pairs (src/kde_backend.h's discrete columns) for these numeric and
# discrete columns: the numeric columns' tiles then skip, and a factor
# costs one term per pair whatever its levels. The CPU always; the GPU's
# kernels up to the capability table's max_dim of each (kernel_discrete.cu).
# Otherwise the embedded points (mixed.R).
mixed_fused <- function(backend, d_c, n_discrete) {
  limit <- capability("mixed data: discrete columns fused into the pairs", backend)$max_dim
  is.na(limit) || (max(d_c, 1L) <= limit && n_discrete <= limit)
}

# The Gaussian fit that a mixed fit's sums run on: the numeric columns
# with the discrete columns fused (`fused`) or the embedded points, each
# point weighted by its Racine-Li-Yan normaliser; with nothing numeric,
# one zero column. `log_total`: the log of what that weighting took out.
mixed_inner <- function(parts, design, weights, backend, precision, data_name,
                        order = NULL, tolerance = NULL,
                        fused = mixed_fused(backend, ncol(parts$x), ncol(parts$codes))) {
  log_norm <- mixed_log_norm(design, parts$codes)
  kernel_weights <- weights * exp(min(log_norm) - log_norm)
  x <- if (fused) parts$x else mixed_embed(design, parts$x, parts$codes)
  H <- if (fused) design$H_numeric else design$H
  if (ncol(x) == 0L) H <- matrix(1, 1L, 1L) # nothing varies: one zero column, factor 1
  x <- numeric_or_zero_column(x, nrow(parts$codes))
  discrete <- if (fused && ncol(parts$codes) > 0L) {
    # a match's factor is 1 up to rounding (Aitchison-Aitken at its largest lambda)
    list(codes = parts$codes * 1, penalty = pmin(design$penalty, 0))
  }
  inner <- new_kde_gpu(x, kernel_weights / sum(kernel_weights),
                       list(H = H, type = "full", method = "mixed"), "gaussian", backend,
                       fit_precision(precision, "gaussian", weights, backend), NULL, data_name,
                       order = order, tolerance = tolerance, discrete = discrete)
  inner$log_total <- log(sum(kernel_weights)) - min(log_norm)
  inner
}

# The inner fit's coordinates: x, or with no numeric column (nothing
# varies continuously) one column of zeros, so that the Gaussian sums count
# the discrete factors alone.
numeric_or_zero_column <- function(x, n) if (ncol(x) == 0L) matrix(0, n, 1L) else x

# The fit of the parts (numeric matrix, level ranks) at H and lambda: the
# Gaussian fit its sums run on (`inner`, mixed_inner()) and the constant
# that turns its log-densities into the product kernel's.
new_kde_mixed <- function(parts, columns, kernels, lambda, bandwidth, weights, backend,
                          precision, call, data_name, order = NULL, tolerance = NULL) {
  design <- mixed_design(columns, kernels, lambda, bandwidth$H)
  inner <- mixed_inner(parts, design, weights, backend, precision, data_name, order, tolerance)
  log_const_numeric <- if (design$d_c > 0L) whitening(bandwidth$H, "gaussian")$log_const else 0
  structure(list(
    x = parts$x, codes = parts$codes, columns = columns, kernels = kernels, lambda = lambda,
    weights = weights, n = nrow(parts$codes), d = length(columns$names),
    H = if (design$d_c > 0L) {
      H <- bandwidth$H
      dimnames(H) <- list(columns$numeric, columns$numeric)
      H
    },
    bandwidth_type = bandwidth$type, bandwidth_method = bandwidth$method,
    kernel = "gaussian", backend = backend, precision = inner$precision,
    call = call, data.name = data_name,
    inner = inner,
    offset = log_const_numeric + design$log_match + inner$log_total - inner$log_const,
    id = new_data_id(), device = new.env(parent = emptyenv())
  ), class = "kde_mixed")
}

# What the edit check compares (fingerprint.R does the same for kde_gpu).
mixed_fitted_fields <- c("x", "codes", "columns", "kernels", "lambda", "weights", "H", "offset")

seal_mixed <- function(object) {
  object$device$fitted <- lapply(stats::setNames(nm = mixed_fitted_fields),
                                 function(f) object[[f]])
  object
}

check_mixed <- function(object, arg = "object") {
  intact <- inherits(object, "kde_mixed") && is.list(object) && is.environment(object$device) &&
    inherits(object$inner, "kde_gpu")
  if (!intact) stop_arg(arg, "is not an intact mixed-data fit from kde_gpu(); refit it.")
  fitted <- object$device$fitted
  for (field in names(fitted)) {
    if (!identical(object[[field]], fitted[[field]])) {
      stop(sprintf(paste0("`%s$%s` was changed after fitting; a fit is evaluated as it was ",
                          "made, so refit with kde_gpu() and the new value instead."),
                   arg, field), call. = FALSE)
    }
  }
  check_fit(object$inner, arg)
  invisible(object)
}

# log f_{-i}(x_i) of a mixed fit at H and lambda: the Gaussian's
# leave-one-out sums, in the product kernel's constants, each renormalised
# by the other points' weight 1 - w_i.
mixed_leave_one_out <- function(object, engine = NULL, tolerance = NULL) {
  sums <- mixed_sums(object, engine)
  inner <- sums$inner
  renormalised <- leave_one_out_log_density(inner, engine, tolerance)
  v <- inner$weights
  log_sums <- ifelse(v < 1, renormalised + log1p(-pmin(v, 1)), -Inf)
  renormalise_leave_one_out(log_sums + sums$offset, object$weights)
}

# The Gaussian fit an evaluation runs on and its offset: the fit's own,
# but the embedded points' on a cluster (its workers remake fits from
# their points alone), made once per fit.
mixed_sums <- function(object, engine = NULL) {
  inner <- object$inner
  if (is.null(engine) || is.null(inner$discrete)) return(list(inner = inner, offset = object$offset))
  if (is.null(object$device$embedded)) {
    design <- mixed_design(object$columns, object$kernels, object$lambda, object$H)
    object$device$embedded <- mixed_inner(list(x = object$x, codes = object$codes), design,
                                          object$weights, object$backend, object$precision,
                                          object$data.name, fused = FALSE)
  }
  embedded <- object$device$embedded
  list(inner = embedded, offset = object$offset + inner$log_const - embedded$log_const)
}

# ---- maximum-likelihood cross-validation --------------------------------

# Above this many points of positive weight the search starts where the
# same search on a tenth of them ends (recursively: 1e6 from 1e5 from 1e4),
# moved by the bandwidths' rate n^(-2 / (d_c + 4)) (Li and Racine's for
# the lambdas too), so that the full-size criterion, the costly one, is
# evaluated for the last few Newton steps only (from Scott's rule the
# search took 157 evaluations at every size).
mixed_pilot_points <- 20000

# Chooses what is not given of the numeric columns' H (of `shape`) and the
# lambdas, maximising sum_i n w_i log f_{-i}(x_i) (np's cv.ml) with
# nlm() (Newton with finite-difference gradients, as bw_mlcv()): H as a
# log-Cholesky factor relative to the start's, each lambda as its
# kernel's largest times a logistic, both through the pilot's curvature
# when there is a pilot (mixed_search_start). The sums are in double
# whatever the fit's precision (the finite differences need a smooth
# criterion; in single the search took 3x the evaluations). curvature:
# also return the criterion's Hessian at the optimum, in coordinates
# relative to it (what a larger sample's search starts from).
select_mixed <- function(parts, columns, kernels, weights, bandwidth, lambda, shape, backend,
                         given = NULL, method = "mlcv", checked = FALSE,
                         pilot_points = mixed_pilot_points,
                         curvature = FALSE) {
  d_c <- ncol(parts$x)
  free_H <- is.null(bandwidth) && d_c > 0L
  free_lambda <- is.null(lambda)
  # a conditional likelihood is unbounded through ties of the response only
  response <- setdiff(columns$numeric, columns$names[given])
  if (!checked && free_H && length(response) > 0L && method == "mlcv") {
    check_mixed_ties(parts$x[, response, drop = FALSE], weights, shape)
  }
  top <- mapply(lambda_max, kernels, lengths(columns$levels))
  start <- mixed_search_start(parts, columns, kernels, weights, bandwidth, lambda, shape,
                              backend, given, method, pilot_points)
  n_H <- if (!free_H) 0L else switch(shape, scalar = 1L, diagonal = d_c, full = d_c * (d_c + 1L) / 2L)
  # theta: the H part relative to `base`, the lambdas' angles (lambda_of)
  H_of <- function(theta, base = start$H) {
    if (!free_H) return(bandwidth$H)
    switch(shape,
      scalar = exp(2 * theta[1L]) * base,
      diagonal = diag(exp(2 * theta[seq_len(d_c)]), d_c) * base,
      full = {
        L <- matrix(0, d_c, d_c)
        L[lower.tri(L, diag = TRUE)] <- theta[seq_len(n_H)]
        diag(L) <- exp(diag(L))
        tcrossprod(t(chol(base)) %*% L)
      })
  }
  # each lambda as top sin(t)^2: nlm searches an open space that reaches
  # [0, top], and lambda's slope in t, 2 sqrt(lambda (top - lambda)), stays
  # usable near the ends (a logistic's, lambda (1 - lambda / top), left a
  # lambda of 1e-6 crawling for a hundred evaluations)
  lambda_of <- function(theta) {
    if (!free_lambda) return(lambda)
    stats::setNames(top * sin(theta[n_H + seq_along(kernels)])^2, names(kernels))
  }
  # the first fit's spatial order serves every fit of the search (any
  # order gives the same sums; the embedding's dimension stays the same)
  order <- NULL
  criterion <- function(H, lambda) {
    fit <- new_kde_mixed(parts, columns, kernels, lambda, list(H = H, type = "full"),
                         weights, backend, "double", NULL, "x", order = order,
                         tolerance = NULL)
    on.exit(release_device_copy(fit$inner))
    if (is.null(order)) order <<- fit$inner$order
    loo <- mixed_leave_one_out(fit)
    if (method == "lscv") {
      return(mixed_lscv(parts, columns, kernels, fit$lambda, H, weights, backend, loo))
    }
    if (!is.null(given)) { # log f_{-i}(y_i | x_i): less the margin's
      margin <- mixed_margin_fit(fit, given)
      on.exit(release_device_copy(margin$inner), add = TRUE)
      loo <- loo - mixed_leave_one_out(margin)
    }
    -as.numeric(loo_log_lik(loo, weights, 0L))
  }
  theta0 <- c(rep(0, n_H), if (free_lambda) asin(sqrt(start$lambda / top)))
  # nlm's steps in u = R (theta - theta0), R'R the pilot's Hessian: there
  # its first steps are about the right size and shape
  R <- if (is.null(start$curvature)) diag(length(theta0)) else start$curvature
  theta_of <- function(u) theta0 + backsolve(R, u)
  evaluations <- 0L
  size <- NULL
  # relative to the start's value; a step onto a criterion that is not
  # finite is a cliff that nlm's line search backs off from
  scaled <- function(H, lambda) {
    evaluations <<- evaluations + 1L
    value <- criterion(H, lambda)
    if (is.null(size)) size <<- if (is.finite(value) && value != 0) abs(value) else 1
    if (is.finite(value)) min(value / size, 1e10) else 1e10
  }
  digits <- criterion_digits(NULL, backend, "double")
  # nlm asks for its start's value twice: the last point's value is kept
  last <- list(u = NULL, value = NULL)
  # Forward differences of step 10^(-digits / 2) know the gradient to about
  # that much (the criterion's rounding over the step, and the step times
  # the curvature): nlm stops at ten times it. A smaller gradtol only spins
  # (mixed_data(3e4) in bench/mixed.R, on the CPU: 1e-7 took 62 + 135
  # evaluations, 1e-5 50 + 117, the criterion within 1e-10 and H within
  # 2e-4 of each other).
  found <- suppressWarnings(stats::nlm(function(u) {
    if (identical(u, last$u)) return(last$value)
    theta <- theta_of(u)
    last <<- list(u = u, value = scaled(H_of(theta), lambda_of(theta)))
    last$value
  }, rep(0, length(theta0)), ndigit = digits, gradtol = 10^(1 - digits / 2),
  steptol = 1e-7, iterlim = 200L))
  theta <- theta_of(found$estimate)
  value <- found$minimum * size
  H <- H_of(theta)
  hessian <- if (curvature) {
    # theta relative to the optimum: the H part from 0 at H, the angles as they are
    optimum <- c(rep(0, n_H), theta[n_H + seq_len(length(theta) - n_H)])
    finite_hessian(function(v) scaled(H_of(v, H), lambda_of(v)), optimum, found$minimum)
  }
  list(H = H, lambda = lambda_of(theta), hessian = hessian,
       details = list(method = method, criterion = if (method == "mlcv") -value else value,
                      evaluations = evaluations,
                      pilot_evaluations = start$evaluations,
                      converged = found$code %in% c(1L, 2L),
                      message = c("gradient close to zero", "successive steps small",
                                  "no lower point found", "iteration limit",
                                  "step too large")[found$code]))
}

# The Hessian of f at x (f(x) = fx) by finite differences of step h:
# central on the diagonal, forward off it; 1 + p (p + 3) / 2 evaluations.
finite_hessian <- function(f, x, fx, h = 1e-2) {
  p <- length(x)
  step <- function(i, j = NULL) {
    y <- x
    y[i] <- y[i] + h
    if (!is.null(j)) y[j] <- y[j] + h
    y
  }
  up <- vapply(seq_len(p), function(i) f(step(i)), 0)
  down <- vapply(seq_len(p), function(i) f(x - (step(i) - x)), 0)
  out <- diag((up + down - 2 * fx) / h^2, p)
  for (i in seq_len(p - 1L)) for (j in seq.int(i + 1L, p)) {
    out[i, j] <- out[j, i] <- (f(step(i, j)) - up[i] - up[j] + fx) / h^2
  }
  out
}

# R with R'R = A's positive part: eigenvalues below a thousandth of the
# largest raised to it (a flat direction, e.g. a lambda at its bound,
# keeps steps of a sensible size); NULL when A has no positive curvature.
curvature_factor <- function(A) {
  if (is.null(A) || !all(is.finite(A))) return(NULL)
  e <- eigen((A + t(A)) / 2, symmetric = TRUE)
  top <- max(e$values)
  if (!(top > 0)) return(NULL)
  values <- pmax(e$values, 1e-3 * top)
  chol(e$vectors %*% (values * t(e$vectors)))
}

# Where select_mixed() starts: Scott's rule (nrd0 in 1-D; its diagonal's
# mean for a scalar H, its diagonal for a diagonal one) and lambdas where
# each mismatch keeps a fifth of a match's weight; above
# mixed_pilot_points, the answer on a tenth of the points (drawn without
# moving the session's random numbers), moved to this size by the rate
# (pilot_points: mixed_pilot_points; smaller in the tests).
mixed_search_start <- function(parts, columns, kernels, weights, bandwidth, lambda, shape,
                               backend, given, method, pilot_points) {
  d_c <- ncol(parts$x)
  free_H <- is.null(bandwidth) && d_c > 0L
  top <- mapply(lambda_max, kernels, lengths(columns$levels))
  positive <- which(weights > 0)
  if (length(positive) > pilot_points && (free_H || is.null(lambda))) {
    keep <- with_seed(1L, sort(sample(positive, ceiling(length(positive) / 10))))
    pilot <- select_mixed(list(x = parts$x[keep, , drop = FALSE],
                               codes = parts$codes[keep, , drop = FALSE]),
                          columns, kernels, weights[keep] / sum(weights[keep]), bandwidth,
                          lambda, shape, backend, given, method, checked = TRUE,
                          pilot_points = pilot_points,
                          curvature = TRUE)
    rate <- (length(keep) / length(positive))^(2 / (d_c + 4))
    # off 0, where sin(t)^2 has no slope for the search to follow
    moved <- pmin(pmax(pilot$lambda * rate, 1e-4 * top), top)
    # the pilot's Hessian in coordinates relative to its optimum serves
    # here relative to the moved optimum (the same coordinates, scaled)
    return(list(H = if (free_H) pilot$H * rate, lambda = moved,
                curvature = curvature_factor(pilot$hessian),
                evaluations = pilot$details$evaluations + pilot$details$pilot_evaluations))
  }
  H <- if (free_H) {
    rule <- bandwidth_rule(parts$x, weights, if (d_c == 1L) "nrd0" else "scott")$H
    switch(shape, scalar = diag(mean(diag(rule)), d_c), diagonal = diag(diag(rule), d_c),
           full = rule)
  }
  lambda <- vapply(seq_along(kernels), function(k) {
    c_k <- length(columns$levels[[k]])
    if (kernels[[k]] == "aitchisonaitken") 0.2 * (c_k - 1) / (1 + 0.2 * (c_k - 1)) else 0.2
  }, 0)
  list(H = H, lambda = lambda, curvature = NULL, evaluations = 0L)
}

# Ties in the numeric columns make the likelihood unbounded as H shrinks
# (the discrete columns cannot bound it: a pair tied in the numbers keeps
# a positive factor for any lambda > 0).
check_mixed_ties <- function(x, weights, shape) {
  ties <- unbounded_tie_directions(x, weights, "mlcv", shape)
  if (length(ties) == 0L) return(invisible())
  columns <- colnames(x)[ties[[1L]]$columns]
  if (is.null(columns)) columns <- "the numeric columns"
  stop_arg("bw", sprintf(paste0("= \"mlcv\" has no maximum on these data: every point shares ",
                                "its values of %s with another, so the leave-one-out ",
                                "likelihood grows without bound as the bandwidth shrinks. ",
                                "Give `bw` or `H` for the numeric columns (rounded data: ",
                                "about their spacing or more)."),
                         paste(columns, collapse = ", ")))
}

# bw_mlcv() and bw_lscv() on mixed data: H (of `shape`) and the lambdas
# by cv.ml (of the joint density or, given, of the conditional one) or
# cv.ls; a kdegpu_bandwidth of the numeric columns carrying the lambdas.
mixed_cv_bandwidth <- function(x, method, shape, weights, kernel, backend, given,
                               factor_kernel, ordered_kernel) {
  if (kernel != "gaussian") {
    stop_arg("kernel", sprintf("must be \"gaussian\" for mixed data (factor columns), not \"%s\".",
                               kernel))
  }
  factor_kernel <- match_choice(factor_kernel, factor_kernels, "factor_kernel")
  ordered_kernel <- match_choice(ordered_kernel, ordered_kernels, "ordered_kernel")
  columns <- mixed_columns(x)
  if (length(columns$numeric) == 0L) {
    stop_arg("x", paste0("needs a numeric column for bw_mlcv(); for factors alone, ",
                         "kde_gpu(x) chooses the lambdas."))
  }
  kernels <- mixed_kernel_names(columns, factor_kernel, ordered_kernel)
  parts <- mixed_parts(x, columns)
  weights <- normalise_weights(weights, nrow(x))
  if (sum(weights > 0) < 3L) stop_arg("weights", "must give at least 3 points positive weight.")
  backend <- choose_backend(match_choice(backend, c("auto", "cuda", "cpu"), "backend"))
  if (!is.null(given)) given <- given_index(given, columns$names, length(columns$names))
  if (length(columns$numeric) == 1L) shape <- "scalar"
  chosen <- select_mixed(parts, columns, kernels, weights, NULL, NULL, shape, backend,
                         given, method)
  new_bandwidth(chosen$H, shape, method, columns$numeric, lambda = chosen$lambda,
                discrete_kernels = kernels,
                given = if (!is.null(given)) columns$names[given])
}
