# The sample-point adaptive estimator (kde_gpu(adaptive = TRUE)) against
# plain-R sums of its definition: the pilot (the fixed estimate with the
# same H at the training points, self terms kept), Abramson's local factors
# lambda_j = (f(x_j) / g)^-alpha with g the weighted geometric mean, and
# f(x) = sum_j w_j |lambda_j^2 H|^-1/2 K(H^-1/2 (x - x_j) / lambda_j).

# lambda_j from the pilot, as R/kde_gpu.R defines it (points of weight 0
# do not enter g; their factor is 1 where their pilot is 0).
ref_lambda <- function(x, H, kernel, weights, alpha) {
  pilot <- ref_log_density(x, x, H, kernel, weights)
  w <- weights / sum(weights)
  log_g <- sum(w[w > 0] * pilot[w > 0])
  lambda <- exp(-alpha * (pilot - log_g))
  lambda[!is.finite(pilot)] <- 1
  lambda
}

adaptive_case <- function(d, n = 120, seed = 1) {
  x <- ref_data(n, d, seed = seed)
  set.seed(seed + 100)
  w <- runif(n)
  w[c(3, 7)] <- 0
  list(x = x, w = w, H = ref_full_H(d, 0.6, seed = seed + 200),
       q = ref_queries(x, 25, seed = seed + 300))
}

test_that("adaptive fits match the plain-R estimator for every kernel (d = 1, 2, 3)", {
  for (d in 1:3) {
    case <- adaptive_case(d, seed = d)
    for (k in ref_kernels) {
      lab <- paste(k, "d =", d)
      fit <- kde_gpu(case$x, H = case$H, kernel = k, weights = case$w, backend = "cpu",
                     adaptive = TRUE)
      lambda <- ref_lambda(case$x, case$H, k, case$w, 0.5)
      positive <- case$w > 0
      expect_equal(fit$adaptive$lambda[positive], lambda[positive], tolerance = 1e-12,
                   label = paste("lambda", lab))
      expect_identical(fit$adaptive$alpha, 0.5)
      expected <- ref_adaptive_log_density(case$x, case$q, case$H, k, case$w, lambda)
      expect_log_density_equal(predict(fit, case$q, log = TRUE), expected, tol = 1e-10,
                               label = lab)
      expect_density_equal(predict(fit, case$q), exp(expected), tol = 1e-10, label = lab)
    }
  }
})

test_that("alpha sets the sensitivity; alpha = 0 is the fixed estimate", {
  case <- adaptive_case(2, seed = 11)
  fixed <- kde_gpu(case$x, H = case$H, weights = case$w, backend = "cpu")
  zero <- kde_gpu(case$x, H = case$H, weights = case$w, backend = "cpu", adaptive = TRUE,
                  alpha = 0)
  expect_equal(zero$adaptive$lambda, rep(1, nrow(case$x)))
  expect_log_density_equal(predict(zero, case$q, log = TRUE),
                           predict(fixed, case$q, log = TRUE), tol = 1e-13, label = "alpha 0")
  for (alpha in c(0.25, 1)) {
    fit <- kde_gpu(case$x, H = case$H, kernel = "biweight", weights = case$w,
                   backend = "cpu", adaptive = TRUE, alpha = alpha)
    lambda <- ref_lambda(case$x, case$H, "biweight", case$w, alpha)
    expect_log_density_equal(
      predict(fit, case$q, log = TRUE),
      ref_adaptive_log_density(case$x, case$q, case$H, "biweight", case$w, lambda),
      tol = 1e-10, label = paste("alpha", alpha))
  }
  # low-density points get wider kernels: lambda falls as the pilot rises
  fit <- kde_gpu(case$x, H = case$H, backend = "cpu", adaptive = TRUE)
  pilot <- predict(kde_gpu(case$x, H = case$H, backend = "cpu"), log = TRUE)
  expect_true(all(diff(fit$adaptive$lambda[order(pilot)]) <= 1e-12))
  expect_equal(sum(log(fit$adaptive$lambda)) / nrow(case$x), 0, tolerance = 1e-12)
})

test_that("leave-one-out and logLik of an adaptive fit match plain R", {
  for (d in c(1, 3)) {
    case <- adaptive_case(d, n = 120, seed = 20 + d)
    for (k in c("gaussian", "epanechnikov", "exponential")) {
      lab <- paste(k, "d =", d)
      fit <- kde_gpu(case$x, H = case$H, kernel = k, weights = case$w, backend = "cpu",
                     adaptive = TRUE)
      lambda <- fit$adaptive$lambda # the full fit's factors, kept when leaving out
      expected <- ref_adaptive_log_density(case$x, case$x, case$H, k, case$w, lambda,
                                           leave_out = seq_len(nrow(case$x)))
      loo <- predict(fit, log = TRUE, leave_one_out = TRUE)
      expect_log_density_equal(loo, expected, tol = 1e-10, label = lab)
      w <- case$w / sum(case$w)
      n <- nrow(case$x)
      expect_equal(as.numeric(logLik(fit)), sum(ifelse(w > 0, n * w * expected, 0)),
                   tolerance = 1e-10, label = lab)
    }
  }
})

test_that("pruned evaluation of adaptive fits agrees with the full sum", {
  # clustered data, so that tiles are far apart in their kernels' units
  set.seed(31)
  centres <- matrix(runif(16, -30, 30), 8, 2)
  x <- centres[rep(1:8, each = 700), ] + matrix(rnorm(11200), 5600, 2) *
    rep(c(0.3, 1, 2, 0.5, 3, 0.2, 1, 5), each = 700)
  q <- rbind(x[sample.int(nrow(x), 1500), ] + rnorm(3000, sd = 0.5),
             matrix(runif(1000, -40, 40), 500, 2))
  for (k in c("gaussian", "exponential", "epanechnikov", "cosine")) {
    fit <- kde_gpu(x, kernel = k, backend = "cpu", adaptive = TRUE, bw = 0.8)
    full <- predict(fit, q, log = TRUE, tolerance = 0)
    # tolerance 0: unbounded kernels sum every pair, compact ones skip only
    # the tiles beyond every kernel's reach
    if (k %in% c("gaussian", "exponential")) expect_equal(kdegpu:::pairs_share(fit), 1)
    pruned <- predict(fit, q, log = TRUE)
    expect_lt(kdegpu:::pairs_share(fit), 0.9, label = paste(k, "share of pairs"))
    expect_log_density_equal(pruned, full, tol = 1e-13, label = k)
    if (k %in% c("gaussian", "exponential")) {
      # the guarantee: (1 - tol) f <= f' <= f, here at tolerance 1e-3
      coarse <- predict(fit, q, tolerance = 1e-3)
      exact <- exp(full)
      expect_true(all(coarse <= exact * (1 + 1e-12)), label = k)
      expect_true(all(coarse >= exact * (1 - 1e-3 - 1e-12)), label = k)
      loo_full <- predict(fit, log = TRUE, leave_one_out = TRUE, tolerance = 0)
      loo <- predict(fit, log = TRUE, leave_one_out = TRUE)
      expect_log_density_equal(loo, loo_full, tol = 1e-13, label = paste(k, "loo"))
    }
  }
})

test_that("draws from an adaptive fit follow the estimate", {
  # 1-D: a KS test against the estimate's exact CDF (fixed seed)
  set.seed(41)
  x1 <- c(rnorm(300), rexp(200) * 3 + 4)
  fit1 <- kde_gpu(x1, backend = "cpu", adaptive = TRUE, kernel = "epanechnikov")
  set.seed(42)
  draws <- sample(fit1, 20000)
  expect_gt(suppressWarnings(stats::ks.test(draws, function(v) predict(fit1, v, type = "cdf")))$p.value,
            1e-3)
  # 2-D: moments against the exact mixture's, sum_j w_j N(x_j, lambda_j^2 H)
  case <- adaptive_case(2, n = 300, seed = 43)
  fit <- kde_gpu(case$x, H = case$H, weights = case$w, backend = "cpu", adaptive = TRUE)
  w <- fit$weights
  lambda <- fit$adaptive$lambda
  mu <- colSums(case$x * w)
  second <- crossprod(case$x * sqrt(w)) + sum(w * lambda^2) * case$H
  cov_exact <- second - tcrossprod(mu)
  set.seed(44)
  size <- 2e5
  draws <- sample(fit, size)
  se <- sqrt(diag(cov_exact) / size)
  expect_true(all(abs(colMeans(draws) - mu) < 5 * se))
  expect_equal(unname(stats::cov(draws)), unname(cov_exact), tolerance = 0.02)
  # the fixed fit's draws are narrower: the law really changed
  fixed_cov <- crossprod(case$x * sqrt(w)) + case$H - tcrossprod(mu)
  expect_gt(sum(diag(cov_exact)) - sum(diag(fixed_cov)), 20 * sum(se))
})

test_that("the CDF and quantiles of a 1-D adaptive fit", {
  set.seed(51)
  x <- c(rnorm(150), rnorm(50, 5, 0.3))
  # the kernels' CDFs with sd 1: pnorm, and the triangular on [-sqrt 6, sqrt 6]
  kernel_cdf <- list(gaussian = stats::pnorm, triangular = function(u) {
    v <- pmin(pmax(u / sqrt(6), -1), 1)
    ifelse(v <= 0, (1 + v)^2 / 2, 1 - (1 - v)^2 / 2)
  })
  for (k in names(kernel_cdf)) {
    fit <- kde_gpu(x, kernel = k, backend = "cpu", adaptive = TRUE)
    at <- c(-2, 0, 2.5, 5, 6)
    h <- fit$adaptive$lambda * sqrt(fit$H[1, 1]) # point j's kernel sd
    exact <- vapply(at, function(v) sum(fit$weights * kernel_cdf[[k]]((v - x) / h)), 0)
    expect_equal(predict(fit, at, type = "cdf"), exact, tolerance = 1e-12, label = k)
    p <- c(0.1, 0.5, 0.9)
    expect_equal(unname(predict(fit, quantile(fit, p), type = "cdf")), p, tolerance = 1e-9)
  }
})

test_that("an adaptive fit equals ks::kde.sp's sum where the definitions coincide", {
  skip_if_not_installed("ks")
  # ks::kde.sp (d = 2) picks its own local bandwidths h_j (not Abramson's
  # (f / g)^-1/2 from the fixed estimate with the same H: from derivatives of
  # a pilot on data scaled by the columns' sds) and sums its kernels on a
  # grid, each cut off 3.7 sds from its centre. Given its h_j as lambda_j
  # (with H = diag(sd^2)), the estimators are the same sum; the exact one is
  # ks::kde() of each point at the grid points, without the cut-off.
  set.seed(61)
  x <- rbind(matrix(rnorm(120), 60), matrix(rnorm(80, 3, 0.5), 40))
  fh <- ks::kde.sp(x, binned = FALSE, gridsize = c(15L, 15L), compute.cont = FALSE)
  S <- diag(apply(x, 2, stats::sd))
  fit <- kde_gpu(x, H = S %*% S, backend = "cpu")
  # (a fit made by hand, sealed as kde_gpu() seals its fits)
  fit <- kdegpu:::seal_fit(kdegpu:::set_local_factors(fit, sqrt(fh$H)))
  grid <- as.matrix(expand.grid(fh$eval.points))
  ours <- predict(fit, grid)
  y <- x %*% solve(S)
  grid_y <- grid %*% solve(S)
  exact <- Reduce(`+`, lapply(seq_len(nrow(x)), function(j) {
    ks::kde(y[j, , drop = FALSE], H = fh$H[j] * diag(2), eval.points = grid_y,
            binned = FALSE)$estimate
  })) / nrow(x) / det(S)
  expect_equal(ours, exact, tolerance = 1e-10)
  # kde.sp's own grid differs only by the kernels it cut off
  theirs <- as.vector(fh$estimate)
  expect_true(all(ours >= theirs * (1 - 1e-12)))
  dense <- theirs > 0.05 * max(theirs)
  expect_lt(max(abs(ours[dense] / theirs[dense] - 1)), 0.05)
})

# The density of an adaptive 3-D fit at (u, t) integrated over t: 16-point
# Gauss-Legendre on pieces that end where the line enters or leaves a
# point's support (the ellipsoid of radius a lambda_j, compact kernels).
integrated_third <- function(fit, u) {
  m <- 16
  k <- seq_len(m - 1)
  J <- matrix(0, m, m)
  J[cbind(k, k + 1)] <- J[cbind(k + 1, k)] <- k / sqrt(4 * k^2 - 1)
  e <- eigen(J, symmetric = TRUE)
  nodes <- e$values
  weights <- 2 * e$vectors[1, ]^2
  lambda <- fit$adaptive$lambda
  sd <- sqrt(fit$H[3, 3])
  lower <- min(fit$x[, 3] - 8 * sd * lambda)
  upper <- max(fit$x[, 3] + 8 * sd * lambda)
  breaks <- seq(lower, upper, by = sd / 4)
  if (fit$kernel %in% ref_compact) {
    Q <- solve(fit$H)
    a <- ref_constants(fit$kernel, 3)$a
    for (j in seq_len(fit$n)) {
      offset <- c(u - fit$x[j, 1:2], 0)
      qb <- 2 * sum(Q[3, ] * offset)
      qc <- sum(offset * (Q %*% offset)) - (a * lambda[j])^2
      disc <- qb^2 - 4 * Q[3, 3] * qc
      if (disc > 0) breaks <- c(breaks, fit$x[j, 3] + (-qb + c(-1, 1) * sqrt(disc)) / (2 * Q[3, 3]))
    }
  }
  breaks <- sort(unique(pmin(pmax(breaks, lower), upper)))
  half <- diff(breaks) / 2
  mid <- (breaks[-1] + breaks[-length(breaks)]) / 2
  t <- as.vector(outer(nodes, half) + rep(mid, each = m))
  sum(predict(fit, cbind(u[1], u[2], t)) * rep(weights, length(half)) * rep(half, each = m))
}

test_that("margins, grids and cluster evaluation honour the local factors", {
  case <- adaptive_case(3, n = 150, seed = 71)
  for (k in c("gaussian", "epanechnikov")) {
    fit <- kde_gpu(case$x, H = case$H, kernel = k, weights = case$w, backend = "cpu",
                   adaptive = TRUE)
    # the margin on columns 1:2 integrates column 3 out
    at <- rbind(c(-1, 0), c(0.5, 1.5))
    margin <- kdegpu:::margin_density(fit, 1:2, at)
    expect_equal(margin, apply(at, 1, integrated_third, fit = fit), tolerance = 1e-6,
                 label = k)
  }
  fit <- kde_gpu(case$x, H = case$H, weights = case$w, backend = "cpu", adaptive = TRUE)
  grid <- kde_grid(fit, n = 5)
  expect_true(all(is.finite(grid$density)))
  # plots draw through predict() and the margins
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  expect_no_error(plot(fit))
  fit1 <- kde_gpu(case$x[, 1], backend = "cpu", adaptive = TRUE)
  expect_no_error(plot(fit1))
  dens <- as.density(fit1)
  expect_equal(sum(dens$y) * diff(dens$x[1:2]), 1, tolerance = 1e-3)
  cl <- tryCatch(parallel::makePSOCKcluster(2), error = function(e) e)
  if (inherits(cl, "error")) skip(paste("cannot start local PSOCK workers:", conditionMessage(cl)))
  on.exit(parallel::stopCluster(cl), add = TRUE)
  parallel::clusterEvalQ(cl, options(kdegpu.threads = 1L))
  here <- predict(fit, case$q, log = TRUE)
  expect_log_density_equal(predict(fit, case$q, log = TRUE, cluster = cl, split = "training"),
                           here, tol = 1e-12, label = "training split")
  expect_log_density_equal(predict(fit, case$q, log = TRUE, cluster = cl), here,
                           tol = 1e-12, label = "query split")
  expect_equal(as.numeric(logLik(fit, cluster = cl)), as.numeric(logLik(fit)),
               tolerance = 1e-12)
})

test_that("adaptive fits print, summarise, and refuse what they cannot do yet", {
  x <- ref_data(100, 2, seed = 81)
  fit <- kde_gpu(x, backend = "cpu", adaptive = TRUE, alpha = 0.3)
  expect_output(print(fit), "adaptive: +sample-point \\(Abramson\\), alpha = 0.3, local factors")
  expect_output(print(summary(fit)), "Local bandwidth factors lambda")
  expect_s3_class(summary(fit)$lambda, "summaryDefault")
  expect_error(kde_gpu(x, adaptive = NA), "`adaptive` must be TRUE or FALSE")
  expect_error(kde_gpu(x, adaptive = "yes"), "`adaptive` must be TRUE or FALSE")
  expect_error(kde_gpu(x, adaptive = c(TRUE, FALSE)), "`adaptive` must be TRUE or FALSE")
  for (bad in list(-0.1, 1.5, NA, Inf, "a", c(0.2, 0.3))) {
    expect_error(kde_gpu(x, backend = "cpu", adaptive = TRUE, alpha = bad),
                 "`alpha` must be one number in \\[0, 1\\]")
  }
  expect_error(kde_gpu(x, backend = "cpu", alpha = 0.5),
               "`alpha` applies to adaptive fits only: add `adaptive = TRUE`")
  expect_error(kde_gpu(x, backend = "cpu", adaptive = TRUE, debias = TRUE),
               "`adaptive` cannot be combined with `debias = TRUE`")
  broken <- fit
  broken$tile_scale <- broken$tile_scale[-1]
  expect_error(predict(broken, x[1:2, ]), "`object` is not an intact kde_gpu\\(\\) fit")
  # the C entry point checks its scales itself
  entry <- kdegpu:::C_kdegpu_log_density_cpu
  call <- function(scale) {
    .Call(entry, fit$z, fit$tile_weights, scale, 0L, fit$z[1:2, ], NULL, NULL, 0L, 0, FALSE,
          0, 1L, -1)
  }
  expect_length(call(fit$tile_scale), 2L)
  expect_error(call(fit$tile_scale[-1]), "`scale` must be a double vector of length 100")
  expect_error(call(replace(fit$tile_scale, 5, 0)), "`scale` must be positive, finite")
  expect_error(call(replace(fit$tile_scale, 5, NaN)), "`scale` must be positive, finite")
  expect_error(call(replace(fit$tile_scale, 5, 1e-200)), "`scale` must be positive, finite")
})

test_that("CUDA: adaptive fits match the plain-R estimator (double 1e-10, single 1e-5)", {
  skip_without_gpu()
  tol <- c(double = 1e-10, single = 1e-5)
  for (d in c(1, 2, 3, 6)) {
    case <- adaptive_case(d, n = 700, seed = 90 + d)
    for (k in ref_kernels) {
      lambda <- ref_lambda(case$x, case$H, k, case$w, 0.5)
      expected <- ref_adaptive_log_density(case$x, case$q, case$H, k, case$w, lambda)
      loo_expected <- ref_adaptive_log_density(case$x, case$x[1:40, ], case$H, k, case$w,
                                               lambda, leave_out = 1:40)
      for (prec in names(tol)) {
        lab <- paste("cuda", prec, k, "d =", d)
        # compact kernels in single precision lose relative accuracy at the
        # edge of their support (src/cuda/DESIGN.md)
        t <- if (prec == "single" && k %in% ref_compact) 1e-3 else tol[[prec]]
        fit <- kde_gpu(case$x, H = case$H, kernel = k, weights = case$w, backend = "cuda",
                       precision = prec, adaptive = TRUE)
        # the pilot is evaluated in double precision for either precision
        positive <- case$w > 0
        expect_equal(fit$adaptive$lambda[positive], lambda[positive], tolerance = 1e-10,
                     label = lab)
        expect_log_density_equal(predict(fit, case$q, log = TRUE), expected, tol = t,
                                 label = lab)
        loo <- predict(fit, log = TRUE, leave_one_out = TRUE)[1:40]
        expect_log_density_equal(loo, loo_expected, tol = t, label = paste(lab, "loo"))
      }
    }
  }
})

test_that("CUDA: adaptive fits under a tiny memory budget, pruned, and GPU draws", {
  skip_without_gpu()
  x <- ref_data(20011, 2, seed = 95)
  q <- ref_queries(x, 3000, seed = 96)
  for (prec in c("double", "single")) {
    cpu <- kde_gpu(x, backend = "cpu", adaptive = TRUE, kernel = "epanechnikov")
    gpu <- kde_gpu(x, backend = "cuda", precision = prec, adaptive = TRUE,
                   kernel = "epanechnikov")
    p_cpu <- predict(cpu, q, log = TRUE)
    tol <- if (prec == "double") 1e-10 else 1e-3
    expect_log_density_equal(predict(gpu, q, log = TRUE), p_cpu, tol = tol, label = prec)
    expect_log_density_equal(predict(gpu, q, log = TRUE, tolerance = 0), p_cpu, tol = tol,
                             label = paste(prec, "full"))
    with_kde_options(list(kdegpu.gpu_memory = 2^20), {
      small <- kde_gpu(x, backend = "cuda", precision = prec, adaptive = TRUE,
                       kernel = "epanechnikov")
      expect_log_density_equal(predict(small, q, log = TRUE), p_cpu, tol = tol,
                               label = paste(prec, "budget"))
    })
  }
  fit <- kde_gpu(x, backend = "cuda", adaptive = TRUE)
  set.seed(97)
  draws <- sample(fit, 2e5) # on the GPU (>= 1e4 draws)
  w <- fit$weights
  mu <- colSums(x * w)
  cov_exact <- crossprod(x * sqrt(w)) + sum(w * fit$adaptive$lambda^2) * fit$H - tcrossprod(mu)
  expect_equal(unname(stats::cov(draws)), unname(cov_exact), tolerance = 0.02)
})

test_that("adaptive fits' gradients, Hessians and scores match plain R and finite differences", {
  set.seed(91)
  x <- rbind(matrix(rnorm(150), ncol = 2), matrix(rt(100, df = 3), ncol = 2) * 3 + 4)
  w <- runif(nrow(x), 0.5, 2)
  H <- matrix(c(0.3, 0.08, 0.08, 0.2), 2)
  q <- rbind(matrix(rnorm(20, sd = 2), ncol = 2), x[1:3, ], c(30, -30))
  for (be in test_backends()) {
    fit <- kde_gpu(x, H = H, weights = w, adaptive = TRUE, backend = be, precision = "double")
    lambda <- fit$adaptive$lambda
    wn <- fit$weights / sum(fit$weights)
    # sum_j w_j N(q; x_j, lambda_j^2 H): its gradient and Hessian in plain R
    ref <- function(p) {
      f <- 0
      g <- numeric(2)
      h <- matrix(0, 2, 2)
      for (j in seq_len(nrow(x))) {
        S <- lambda[j]^2 * H
        Si <- solve(S)
        u <- p - x[j, ]
        k <- wn[j] * exp(-0.5 * sum(u * (Si %*% u))) / (2 * pi * sqrt(det(S)))
        f <- f + k
        g <- g - k * drop(Si %*% u)
        h <- h + k * (Si %*% u %*% t(u) %*% Si - Si)
      }
      list(f = f, g = g, h = h)
    }
    refs <- lapply(seq_len(nrow(q)), function(i) ref(q[i, ]))
    grad <- predict(fit, q, type = "gradient")
    hess <- predict(fit, q, type = "hessian")
    score <- predict(fit, q, type = "gradient", log = TRUE)
    for (i in seq_len(nrow(q))) {
      r <- refs[[i]]
      lab <- paste(be, "query", i)
      if (r$f > 1e-300) {
        expect_equal(unname(grad[i, ]), r$g, tolerance = 1e-10, label = paste(lab, "gradient"))
        expect_equal(unname(hess[i, , ]), r$h, tolerance = 1e-10, label = paste(lab, "Hessian"))
        expect_equal(unname(score[i, ]), r$g / r$f, tolerance = 1e-10, label = paste(lab, "score"))
      }
    }
    # far out (the last query) the score is still finite: a weighted mean
    expect_true(all(is.finite(score[nrow(q), ])))
  }
  # compact kernels: finite differences of predict()
  for (k in c("epanechnikov", "biweight", "cosine")) {
    fit <- kde_gpu(x, kernel = k, adaptive = TRUE, backend = "cpu")
    p <- c(0.3, -0.2)
    h <- 1e-5
    fd <- sapply(1:2, function(j) {
      e <- replace(c(0, 0), j, h)
      (predict(fit, rbind(p + e)) - predict(fit, rbind(p - e))) / (2 * h)
    })
    expect_equal(drop(predict(fit, rbind(p), type = "gradient")), fd, tolerance = 1e-7, label = k)
  }
})

test_that("kde_modes() climbs an adaptive fit to its local maxima", {
  set.seed(92)
  x <- rbind(matrix(rnorm(300, sd = 0.5), ncol = 2), matrix(rnorm(300, mean = 6), ncol = 2))
  fit <- kde_gpu(x, adaptive = TRUE, backend = "cpu")
  m <- kde_modes(fit)
  expect_true(all(m$converged))
  for (k in seq_len(nrow(m$modes))) {
    at <- m$modes[k, , drop = FALSE]
    # a maximum: no ascent left, the Hessian negative definite
    expect_lt(max(abs(predict(fit, at, type = "gradient", log = TRUE) %*% fit$H)), 10 * m$tol)
    hess <- predict(fit, at, type = "hessian")[1L, , ]
    expect_true(all(eigen(hess, symmetric = TRUE, only.values = TRUE)$values < 0))
  }
  # the tight blob climbs to one mode of its own
  blob <- rep(1:2, each = 150)
  expect_length(unique(m$label[blob == 1]), 1L)
  expect_false(m$label[[1]] %in% m$label[blob == 2])
})

# The bounded adaptive estimate in plain R, for bounds with one side per
# coordinate (the images: every combination of identity and x -> 2 L - x,
# exact): the pilot is the bounded fixed estimate at the data, the factors
# Abramson's from it, the estimate the adaptive one folded.
ref_bounded_images <- function(q, lower) {
  q <- ref_as_matrix(q, length(lower))
  bounded <- which(is.finite(lower))
  flips <- as.matrix(expand.grid(rep(list(c(FALSE, TRUE)), length(bounded))))
  lapply(seq_len(nrow(flips)), function(g) {
    image <- q
    for (k in seq_along(bounded)[flips[g, ]]) {
      c <- bounded[k]
      image[, c] <- 2 * lower[c] - q[, c]
    }
    image
  })
}
ref_log_sum_images <- function(parts) {
  top <- do.call(pmax, parts)
  top[!is.finite(top)] <- 0
  top + log(Reduce(`+`, lapply(parts, function(p) exp(p - top))))
}
ref_bounded_adaptive <- function(x, q, H, kernel, w, lower, alpha = 0.5, leave_out = NULL) {
  pilot <- ref_log_sum_images(lapply(ref_bounded_images(x, lower), function(img) {
    ref_log_density(x, img, H, kernel, w)
  }))
  wn <- w / sum(w)
  lambda <- exp(-alpha * (pilot - sum(wn[wn > 0] * pilot[wn > 0])))
  density <- ref_log_sum_images(lapply(ref_bounded_images(q, lower), function(img) {
    ref_adaptive_log_density(x, img, H, kernel, w, lambda, leave_out)
  }))
  list(lambda = lambda, log_density = density)
}

test_that("bounded adaptive fits equal the folded adaptive estimate in plain R", {
  set.seed(97)
  # 1-D, exponential data against 0; 2-D, full H, one column bounded below
  x1 <- matrix(rexp(150), ncol = 1)
  q1 <- matrix(c(0, 1e-3, 0.1, 0.5, 2, 6), ncol = 1)
  x2 <- cbind(rexp(120, 2), rnorm(120))
  x2[, 2] <- x2[, 2] + 0.5 * x2[, 1]
  q2 <- rbind(c(0, 0), c(0.05, -1), c(0.4, 0.3), c(2, 1))
  w2 <- runif(120)
  cases <- list(
    list(x = x1, q = q1, H = matrix(0.3^2), w = rep(1, 150), lower = 0),
    list(x = x2, q = q2, H = matrix(c(0.04, 0.02, 0.02, 0.09), 2), w = w2, lower = c(0, -Inf)))
  for (case in cases) {
    for (k in c("gaussian", "epanechnikov", "biweight")) {
      ref <- ref_bounded_adaptive(case$x, case$q, case$H, k, case$w, case$lower)
      loo <- ref_bounded_adaptive(case$x, case$x[1:30, , drop = FALSE], case$H, k, case$w,
                                  case$lower, leave_out = 1:30)$log_density
      for (backend in test_backends()) {
        lab <- paste(backend, k, "d =", ncol(case$x))
        fit <- kde_gpu(case$x, H = case$H, kernel = k, weights = case$w, lower = case$lower,
                       adaptive = TRUE, backend = backend, precision = "double")
        positive <- case$w > 0
        expect_equal(fit$adaptive$lambda[positive], ref$lambda[positive], tolerance = 1e-10,
                     label = lab)
        expect_log_density_equal(predict(fit, case$q, log = TRUE), ref$log_density,
                                 tol = 1e-10, label = lab)
        expect_log_density_equal(predict(fit, log = TRUE, leave_one_out = TRUE)[1:30], loo,
                                 tol = 1e-10, label = paste(lab, "loo"))
      }
    }
  }
})

test_that("a bounded adaptive fit integrates to 1 in its box, and its draws stay there", {
  set.seed(98)
  x <- rexp(400)
  x <- x[x < 4]
  for (k in c("gaussian", "epanechnikov")) {
    fit <- kde_gpu(x, kernel = k, lower = 0, upper = 4, adaptive = TRUE, backend = "cpu")
    # (the epanechnikov kernels' edges are kinks: integrate() reports roundoff
    # below 1e-7)
    mass <- integrate(function(t) predict(fit, t), 0, 4, subdivisions = 5000L,
                      rel.tol = 1e-7, stop.on.error = FALSE)$value
    expect_equal(mass, 1, tolerance = 1e-5, label = k)
    expect_equal(predict(fit, c(-1e-9, 4 + 1e-9)), c(0, 0))
    draws <- sample(fit, 2000)
    expect_true(all(draws >= 0 & draws <= 4))
    # the CDF reaches 1 at the upper bound and its quantiles stay inside
    expect_equal(predict(fit, 4, type = "cdf"), 1, tolerance = 1e-9)
    expect_true(all(quantile(fit, c(0.001, 0.5, 0.999)) > 0))
  }
  # derivatives and modes of the folded adaptive estimate
  fit <- kde_gpu(x, lower = 0, upper = 4, adaptive = TRUE, backend = "cpu")
  t <- c(0.2, 1, 3)
  numeric_gradient <- (predict(fit, t + 1e-5) - predict(fit, t - 1e-5)) / 2e-5
  expect_equal(as.vector(predict(fit, t, type = "gradient")), numeric_gradient,
               tolerance = 1e-6)
  modes <- kde_modes(fit, start = c(0.05, 0.5, 3.9))
  m <- as.vector(modes$modes)
  expect_true(all(m >= 0 & m <= 4))
  # each a local maximum in the box, to the ascent's tolerance (exponential
  # data: the highest on the bound 0, where the reflection's slope is 0)
  near <- predict(fit, c(pmax(m - 0.01, 0), pmin(m + 0.01, 4)))
  expect_true(all(near <= rep(predict(fit, m), 2) * (1 + 1e-5)))
  expect_lt(min(m), 0.01)
  # The widest kernel decides the images' reach: two isolated points in a
  # narrow box get kernels wide enough to need more images than the fixed
  # fit (images from H alone lose 8e-4 of the mass with the biweight).
  x <- c(runif(300, 0, 0.3), 0.95, 0.97)
  for (k in c("gaussian", "epanechnikov", "biweight")) {
    fixed <- kde_gpu(x, bw = 0.1, kernel = k, lower = 0, upper = 1, backend = "cpu")
    adaptive <- kde_gpu(x, bw = 0.1, kernel = k, lower = 0, upper = 1, adaptive = TRUE,
                        backend = "cpu")
    expect_gt(nrow(adaptive$images$sign), nrow(fixed$images$sign))
    mass <- integrate(function(t) predict(adaptive, t), 0, 1, subdivisions = 5000L,
                      rel.tol = 1e-8, stop.on.error = FALSE)$value
    expect_equal(mass, 1, tolerance = 1e-6, label = k)
  }
  # too many images for the widest kernel: the error says why
  x3 <- matrix(rbeta(600, 0.5, 3), ncol = 3)
  expect_error(kde_gpu(x3, lower = 0, upper = 1, adaptive = TRUE, alpha = 1, bw = 0.2,
                       backend = "cpu"),
               "`lower` and `upper` need .* images .* adaptive fit's widest kernel")
})
