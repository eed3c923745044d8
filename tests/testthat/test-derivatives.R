# predict(type = "gradient" / "hessian", log =), kde_modes() (mean shift)
# and kde_gpu(debias = TRUE) (SD-KDE), checked against closed forms in
# plain R, ks::kdde() and ks::kms(), and central finite differences of
# predict(). With KDEGPU_TEST_VERBOSE set, every check reports its error.

# ---- Plain-R references and comparisons -----------------------------------

# The Gaussian estimate straight from its formula, v = q - x_j:
#   f(q)    = sum_j w_j phi_H(v)
#   grad f  = sum_j w_j phi_H(v) (-H^-1 v)
#   Hess f  = sum_j w_j phi_H(v) (H^-1 v v' H^-1 - H^-1)
# and of log f: score = grad f / f, Hess log f = Hess f / f - score score'.
# No whitening, no log scale: for queries within a few tens of bandwidths.
dd_gauss_ref <- function(x, q, H, w = NULL) {
  x <- ref_as_matrix(x)
  d <- ncol(x)
  q <- ref_as_matrix(q, d)
  H <- as.matrix(H)
  w <- if (is.null(w)) rep(1, nrow(x)) else w
  w <- w / sum(w)
  Hi <- solve(H)
  const <- (2 * pi)^(-d / 2) / sqrt(det(H))
  m <- nrow(q)
  f <- numeric(m)
  grad <- matrix(0, m, d)
  hess <- array(0, c(m, d, d))
  for (i in seq_len(m)) {
    U <- -sweep(x, 2, q[i, ])            # rows v_j' = (q - x_j)'
    HU <- U %*% Hi                       # rows (H^-1 v_j)'
    wphi <- w * const * exp(-rowSums(U * HU) / 2)
    f[i] <- sum(wphi)
    grad[i, ] <- -colSums(wphi * HU)
    hess[i, , ] <- crossprod(HU * wphi, HU) - f[i] * Hi
  }
  score <- grad / f
  hess_log <- hess / f
  for (i in seq_len(m)) hess_log[i, , ] <- hess_log[i, , ] - tcrossprod(score[i, ])
  list(f = f, grad = grad, hess = hess, score = score, hess_log = hess_log)
}

# The largest error of any point, relative to the size of that point's
# expected vector or matrix (its largest entry, or `floor[i]` where that is
# larger): rows of m x k matrices, or the [i, , ] of m x d x d arrays.
dd_err <- function(actual, expected, floor = 0) {
  m <- dim(expected)[1L]
  a <- matrix(actual, m)
  e <- matrix(expected, m)
  scale <- pmax(apply(abs(e), 1L, max), floor)
  max(apply(abs(a - e), 1L, max) / scale)
}

dd_expect_close <- function(actual, expected, tol, label, floor = 0) {
  expect_equal(dim(actual), dim(expected), label = paste("dim of", label))
  expect_true(all(is.finite(actual)), label = paste("finite", label))
  err <- dd_err(actual, expected, floor)
  if (nzchar(Sys.getenv("KDEGPU_TEST_VERBOSE"))) {
    message(sprintf("%-55s %.2e", label, err))
  }
  expect_lte(err, tol, label = paste("relative error of", label))
  invisible(err)
}

# Central differences of a function of the rows of q (m x d) with steps
# `steps` per coordinate: for `fun` giving an m-vector, an m x d matrix
# (the gradient); for `fun` giving an m x d matrix, an m x d x d array
# whose [i, , k] is the derivative of row i along coordinate k.
dd_central <- function(fun, q, steps) {
  m <- nrow(q)
  d <- ncol(q)
  parts <- lapply(seq_len(d), function(k) {
    e <- matrix(0, m, d)
    e[, k] <- steps[k]
    (fun(q + e) - fun(q - e)) / (2 * steps[k])
  })
  if (is.null(dim(parts[[1L]]))) return(matrix(unlist(parts), m, d))
  array(unlist(parts), c(m, d, d))
}

dd_kernels <- setdiff(ref_kernels, "rectangular")
dd_cusp <- c("triangular", "exponential") # a cusp at 0: no derivative at a training point

# Queries at which every term of the estimate is smooth: within about a
# bandwidth of random training points, and (kernels without a cusp) some
# training points themselves; kept where the whitened distance s = |v|/a
# to every training point is more than `margin` from 1 (a compact kernel's
# edge, where the density has a kink) and, for the kernels with a cusp,
# from 0; and where the density is positive.
dd_smooth_queries <- function(x, H, kernel, m, seed, margin = 0.005) {
  set.seed(seed)
  n <- nrow(x)
  d <- ncol(x)
  R <- chol(H)
  a <- ref_constants(kernel, d)$a
  near <- x[sample.int(n, m, replace = TRUE), , drop = FALSE] +
    0.7 * matrix(rnorm(m * d), m, d) %*% R
  cand <- if (kernel %in% dd_cusp) near else rbind(near, x[sample.int(n, 4L), , drop = FALSE])
  Rinv <- backsolve(R, diag(d))
  zx <- t(x %*% Rinv)
  zq <- cand %*% Rinv
  keep <- apply(zq, 1L, function(z) {
    s <- sqrt(colSums((zx - z)^2)) / a
    (!(kernel %in% ref_compact) || (all(abs(s - 1) > margin) && any(s < 1))) &&
      (!(kernel %in% dd_cusp) || all(s > margin))
  })
  cand[keep, , drop = FALSE]
}

# ---- Gaussian: closed form --------------------------------------------------

test_that("Gaussian gradients and Hessians match the closed form, d = 1 to 3, weighted", {
  for (d in 1:3) {
    x <- ref_data(60, d, seed = 100 + d)
    H <- ref_full_H(d, 0.6, seed = 110 + d)
    set.seed(120 + d)
    w <- rexp(60)
    # fresh points, 5 training points, and one 8 bandwidths out
    q <- ref_queries(x, 12, seed = 130 + d)[1:17, , drop = FALSE]
    q <- rbind(q, colMeans(x) + 8 * sqrt(diag(H)) * sign(seq_len(d) - 1.5))
    for (wt in list(NULL, w)) {
      lab <- sprintf("gaussian d=%d%s", d, if (is.null(wt)) "" else " weighted")
      fit <- kde_gpu(x, H = H, weights = wt, backend = "cpu")
      ref <- dd_gauss_ref(x, q, H, wt)
      dd_expect_close(predict(fit, q, type = "gradient"), ref$grad, 1e-10, paste(lab, "gradient"))
      dd_expect_close(predict(fit, q, type = "hessian"), ref$hess, 1e-10, paste(lab, "Hessian"))
      dd_expect_close(predict(fit, q, type = "gradient", log = TRUE), ref$score, 1e-10,
                      paste(lab, "score"))
      dd_expect_close(predict(fit, q, type = "hessian", log = TRUE), ref$hess_log, 1e-10,
                      paste(lab, "Hessian of log f"))
    }
    # without newdata: at the training points, named by the data's row names
    rownames(x) <- paste0("p", seq_len(60))
    fit <- kde_gpu(x, H = H, weights = w, backend = "cpu")
    g <- predict(fit, type = "gradient")
    expect_identical(rownames(g), rownames(x))
    dd_expect_close(g, dd_gauss_ref(x, x, H, w)$grad, 1e-10,
                    sprintf("gaussian d=%d gradient at the training points", d))
  }
})

test_that("Gaussian gradients and Hessians match ks::kdde() in 2-D", {
  skip_if_not_installed("ks")
  x <- ref_data(80, 2, seed = 200)
  H <- ref_full_H(2, 0.5, seed = 201)
  q <- ref_queries(x, 10, seed = 202)[1:15, ]
  set.seed(203)
  w <- runif(80)
  for (wt in list(NULL, w)) {
    lab <- if (is.null(wt)) "ks::kdde" else "ks::kdde weighted"
    # ks wants weights that sum to n (it rescales others, with a warning)
    ks_w <- if (is.null(wt)) rep(1, 80) else 80 * wt / sum(wt)
    k1 <- ks::kdde(x, H = H, deriv.order = 1, eval.points = q, binned = FALSE, w = ks_w)
    k2 <- ks::kdde(x, H = H, deriv.order = 2, eval.points = q, binned = FALSE, w = ks_w)
    # ks's columns are the rows of deriv.ind (how often each coordinate is
    # differentiated): for order 2 all d^2 ordered pairs (p, q), p fastest,
    # i.e. the columns of the vectorised Hessian
    pairs <- expand.grid(p = 1:2, q = 1:2)
    expect_equal(unname(k1$deriv.ind), diag(2))
    expect_equal(unname(k2$deriv.ind),
                 t(mapply(function(p, q) tabulate(c(p, q), 2L), pairs$p, pairs$q)))
    fit <- kde_gpu(x, H = H, weights = wt, backend = "cpu")
    dd_expect_close(predict(fit, q, type = "gradient"), k1$estimate, 1e-8,
                    paste(lab, "gradient"))
    dd_expect_close(predict(fit, q, type = "hessian"), array(k2$estimate, c(15, 2, 2)), 1e-8,
                    paste(lab, "Hessian"))
  }
})

# ---- Every kernel: finite differences ---------------------------------------

test_that("gradients and Hessians of every differentiable kernel match finite differences", {
  cases <- c(lapply(1:3, function(d) list(d = d, kernels = dd_kernels)),
             list(list(d = 5, kernels = c("gaussian", "epanechnikov", "cosine", "exponential"))))
  for (case in cases) {
    d <- case$d
    x <- ref_data(50, d, seed = 300 + d)
    H <- ref_full_H(d, 0.7, seed = 310 + d)
    set.seed(320 + d)
    w <- rexp(50)
    steps <- 1e-5 * sqrt(diag(H))
    bw_min <- sqrt(min(diag(H)))
    for (kernel in case$kernels) {
      lab <- sprintf("%s d=%d", kernel, d)
      fit <- kde_gpu(x, H = H, kernel = kernel, weights = w, backend = "cpu")
      q <- dd_smooth_queries(x, H, kernel, m = 16, seed = 330 + d)
      expect_gte(nrow(q), 10)
      f <- predict(fit, q, tolerance = 0)
      expect_true(all(f > 0))
      grad <- predict(fit, q, type = "gradient")
      hess <- predict(fit, q, type = "hessian")
      fd_grad <- dd_central(function(p) predict(fit, p, tolerance = 0), q, steps)
      fd_hess <- dd_central(function(p) predict(fit, p, type = "gradient"), q, steps)
      # errors relative to each point's largest entry, or to the natural
      # size f / bw (f / bw^2) where all entries are small: the 1-D
      # triangular estimate is piecewise linear, its Hessian 0
      dd_expect_close(grad, fd_grad, 1e-6, paste(lab, "gradient vs FD"), floor = f / bw_min)
      dd_expect_close(hess, fd_hess, 1e-6, paste(lab, "Hessian vs FD"), floor = f / bw_min^2)
      score <- predict(fit, q, type = "gradient", log = TRUE)
      fd_score <- dd_central(function(p) predict(fit, p, log = TRUE, tolerance = 0), q, steps)
      fd_hess_log <- dd_central(function(p) predict(fit, p, type = "gradient", log = TRUE),
                                q, steps)
      dd_expect_close(score, fd_score, 1e-6, paste(lab, "score vs FD"), floor = 1 / bw_min)
      dd_expect_close(predict(fit, q, type = "hessian", log = TRUE), fd_hess_log, 1e-6,
                      paste(lab, "Hessian of log f vs FD"), floor = 1 / bw_min^2)
      # the derivatives of log f are those of f divided by f
      # (floor: at an isolated training point the gradient is exactly 0)
      dd_expect_close(score, grad / f, 1e-12, paste(lab, "score = gradient / f"),
                      floor = 1 / bw_min)
    }
  }
})

test_that("the Hessian is symmetric and its [i, , ] is point i's", {
  x <- ref_data(40, 3, seed = 400)
  fit <- kde_gpu(x, H = ref_full_H(3, 0.8, seed = 401), kernel = "biweight", backend = "cpu")
  q <- x[1:6, ] + 0.1
  hess <- predict(fit, q, type = "hessian")
  expect_equal(dim(hess), c(6L, 3L, 3L))
  for (i in 1:6) {
    # symmetric to rounding (A B A' is formed as a product with kronecker(A, A))
    expect_equal(hess[i, , ], t(hess[i, , ]), tolerance = 1e-13)
    one <- predict(fit, q[i, , drop = FALSE], type = "hessian")
    expect_equal(one[1, , ], hess[i, , ], tolerance = 1e-14)
  }
})

# ---- Far tails ----------------------------------------------------------------

test_that("the score stays exact far into the Gaussian tail, where the density underflows", {
  set.seed(500)
  x <- c(rnorm(25), 4 + rnorm(5, sd = 0.3))
  w <- runif(30)
  h <- 0.4
  fit <- kde_gpu(x, bw = h, weights = w, backend = "cpu")
  q <- c(max(x) + 60 * h, min(x) - 100 * h, max(x) + 1000 * h)
  expect_identical(predict(fit, q), c(0, 0, 0)) # the regime: f underflows
  # log-space reference: p_j proportional to w_j exp(-(q - x_j)^2 / (2 h^2)),
  # normalised by log-sum-exp; u_j = (x_j - q) / h^2;
  # score = sum p_j u_j, Hess log f = sum p_j (u_j - score)^2 - 1 / h^2
  ref <- t(vapply(q, function(qi) {
    lw <- log(w) - (qi - x)^2 / (2 * h^2)
    p <- exp(lw - ref_log_sum_exp(lw))
    u <- (x - qi) / h^2
    s <- sum(p * u)
    c(score = s, hess = sum(p * (u - s)^2) - 1 / h^2)
  }, numeric(2)))
  dd_expect_close(predict(fit, q, type = "gradient", log = TRUE), ref[, "score", drop = FALSE],
                  1e-10, "far-tail gaussian score")
  # the package forms E[u^2] - E[u]^2 (scaled), which cancels: at 1000
  # bandwidths score^2 is about 1e5 times the result (measured: 1.5e-12)
  dd_expect_close(predict(fit, q, type = "hessian", log = TRUE), array(ref[, "hess"], c(3, 1, 1)),
                  1e-9, "far-tail gaussian Hessian of log f")
  expect_identical(unname(predict(fit, q, type = "gradient")), matrix(0, 3, 1))
  # the Laplace kernel: beyond the data the score is -sqrt(2) / h to the
  # right and sqrt(2) / h to the left (every term is exp(-sqrt(2)|v|/h))
  fit_exp <- kde_gpu(x, bw = h, weights = w, kernel = "exponential", backend = "cpu")
  q_exp <- c(max(x) + 1000 * h, min(x) - 2000 * h, max(x) + 3 * h)
  expect_identical(predict(fit_exp, q_exp[1:2]), c(0, 0))
  dd_expect_close(predict(fit_exp, q_exp, type = "gradient", log = TRUE),
                  matrix(sqrt(2) / h * c(-1, 1, -1)), 1e-12, "far-tail exponential score")
})

# ---- Arguments ------------------------------------------------------------------

test_that("derivatives of bounded fits are those of the reflected data's estimate", {
  # With a diagonal H, reflecting a coordinate keeps the kernel, so the
  # reflection estimator equals the unbounded estimate of the data and its
  # images (G copies: G times that estimate), inside the box.
  set.seed(77)
  x <- cbind(rexp(300), runif(300, 0, 2))
  lower <- c(0, 0)
  upper <- c(Inf, 2)
  images <- list(x, cbind(-x[, 1], x[, 2]), cbind(x[, 1], -x[, 2]), cbind(x[, 1], 4 - x[, 2]),
                 cbind(-x[, 1], -x[, 2]), cbind(-x[, 1], 4 - x[, 2]))
  q <- rbind(cbind(runif(40, 0, 3), runif(40, 0, 2)), c(0, 1), c(0.5, 0), c(0.01, 1.99))
  outside <- rbind(c(-0.1, 1), c(1, 2.5))
  for (k in c("gaussian", "epanechnikov", "biweight")) {
    for (be in test_backends()) {
      lab <- paste(k, be)
      fit <- kde_gpu(x, H = diag(c(0.04, 0.02)), kernel = k, lower = lower, upper = upper,
                     backend = be, precision = "double")
      reference <- kde_gpu(do.call(rbind, images), H = fit$H, kernel = k, backend = "cpu")
      G <- length(images)
      for (type in c("gradient", "hessian")) {
        got <- predict(fit, q, type = type)
        want <- G * predict(reference, q, type = type)
        expect_equal(unname(got), unname(want), tolerance = 1e-10, label = paste(lab, type))
        # the log-density's: f's divided by f, less the score's outer product
        got_log <- predict(fit, q, type = type, log = TRUE)
        f <- G * predict(reference, q)
        score <- predict(reference, q, type = "gradient") * G / f
        want_log <- if (type == "gradient") score else {
          want / f - array(score[, rep(1:2, 2)] * score[, rep(1:2, each = 2)], c(nrow(q), 2, 2))
        }
        ok <- f > 0
        expect_gt(sum(ok), 30)
        expect_equal(matrix(got_log, nrow(q))[ok, ], matrix(want_log, nrow(q))[ok, ],
                     tolerance = 1e-9, label = paste(lab, type, "log"))
        # outside the box: density 0, derivatives 0, those of log f undefined
        expect_true(all(predict(fit, outside, type = type) == 0), label = paste(lab, type))
        expect_true(all(is.nan(predict(fit, outside, type = type, log = TRUE))),
                    label = paste(lab, type, "log outside"))
      }
    }
  }
  # a full H and every differentiable kernel: finite differences of predict()
  fit <- kde_gpu(x, H = matrix(c(0.05, 0.01, 0.01, 0.03), 2), lower = lower, upper = upper,
                 backend = "cpu")
  p <- c(0.4, 1.1)
  h <- 1e-5
  fd <- sapply(1:2, function(j) {
    e <- replace(c(0, 0), j, h)
    (predict(fit, rbind(p + e)) - predict(fit, rbind(p - e))) / (2 * h)
  })
  expect_equal(drop(predict(fit, rbind(p), type = "gradient")), fd, tolerance = 1e-7)
})

test_that("derivatives are refused where they are not available", {
  x <- faithful$eruptions
  expect_error(predict(kde_gpu(x, kernel = "rectangular", backend = "cpu"), 2, type = "gradient"),
               "`type` = \"gradient\" needs a kernel with a derivative; the rectangular kernel")
  expect_error(predict(kde_gpu(x, kernel = "tophat", backend = "cpu"), 2, type = "hessian"),
               "`type` = \"hessian\" needs a kernel with a derivative")
  fit <- kde_gpu(x, backend = "cpu")
  expect_error(predict(fit, type = "gradient", leave_one_out = TRUE),
               "`leave_one_out` applies to type = \"density\", not \"gradient\"")
  # the check comes before any contact with the workers: a stand-in
  # object of class "cluster" is enough
  expect_error(predict(fit, 2, type = "hessian", cluster = structure(list(), class = "cluster")),
               "`cluster` applies to type = \"density\", not \"hessian\"")
  expect_error(predict(fit, 2, type = "gradient", log = NA), "`log` must be TRUE or FALSE")
  expect_error(predict(fit, c(1, NA), type = "gradient"),
               "`newdata` must contain only finite values")
})

# ---- kde_modes() ------------------------------------------------------------------

# An exact stationary point near p by Newton's method on predict()'s
# gradient and Hessian.
dd_newton <- function(fit, p) {
  p <- matrix(p, 1L)
  for (i in 1:50) {
    step <- solve(predict(fit, p, type = "hessian")[1L, , ],
                  predict(fit, p, type = "gradient")[1L, ])
    p <- p - step
    if (sqrt(sum(step^2)) < 1e-12 * sqrt(max(diag(fit$H)))) break
  }
  drop(p)
}

test_that("kde_modes() gives ks::kms()'s modal clusters of faithful", {
  skip_if_not_installed("ks")
  H <- ks::Hpi(faithful, deriv.order = 1)
  km <- ks::kms(faithful, H = H)
  fit <- kde_gpu(faithful, H = H, backend = "cpu")
  m <- kde_modes(fit)
  # the default tolerances are ks's: 0.001 x the smallest and 0.01 x the
  # largest interquartile range
  expect_equal(c(m$tol, m$merge_tol), c(km$tol.iter, km$tol.clust), tolerance = 1e-14)
  expect_true(all(m$converged))
  expect_equal(nrow(m$modes), nrow(km$mode))
  # the same partition up to relabelling: every cluster of one is a
  # cluster of the other
  tab <- table(km$label, m$label)
  expect_true(all(rowSums(tab > 0) == 1) && all(colSums(tab > 0) == 1),
              label = "kde_modes() and ks::kms() partition faithful alike")
  # the matched modes are one mode at the merge resolution (ks iterates
  # every point until the slowest converges, kde_modes() stops each point
  # on its own, so ks's modes are closer to the exact ones)
  matched <- apply(tab, 1L, which.max)
  gap <- sqrt(rowSums((unname(as.matrix(km$mode)) - m$modes[matched, ])^2))
  expect_lt(max(gap), m$merge_tol)
  # densities at the modes, decreasing, from predict()
  expect_equal(unname(m$density), unname(predict(fit, m$modes)), tolerance = 1e-14)
  expect_true(all(diff(m$density) < 0))
  # mean shift and its default tolerances scale with the data: faithful
  # in units 1000 times larger has the same clusters (the ascent's
  # Euclidean steps are equivariant under a uniform scaling only)
  m_scaled <- kde_modes(kde_gpu(faithful / 1000, H = H / 1e6, backend = "cpu"))
  expect_identical(m_scaled$label, m$label)
  expect_equal(m_scaled$modes, m$modes / 1000, tolerance = 1e-10)
})

test_that("kde_modes() merges small clusters as ks::kms() does (min_size)", {
  skip_if_not_installed("ks")
  set.seed(21)
  centres <- rbind(c(0, 0), c(4, 0), c(2, 3.5))
  x <- centres[rep(1:3, c(120, 90, 60)), ] + matrix(rnorm(540, sd = 0.6), ncol = 2)
  x <- rbind(x, c(9, 9), c(-6, 7)) # two lone points: clusters of one
  H <- ks::Hpi(x, deriv.order = 1)
  fit <- kde_gpu(x, H = H, backend = "cpu")
  kept <- kde_modes(fit, min_size = 0)
  merged <- kde_modes(fit) # default: round(0.01 * 272) = 3, as ks
  expect_identical(merged$min_size, 3L)
  sizes <- tabulate(kept$label)
  expect_true(sum(sizes == 1) >= 2, label = "the lone points are modes of their own")
  expect_equal(nrow(merged$modes), sum(sizes > 3))
  expect_true(all(tabulate(merged$label) > 3))
  # every big cluster is kept whole, and its mode with it
  big <- which(sizes > 3)
  for (k in big) {
    expect_length(unique(merged$label[kept$label == k]), 1L)
  }
  expect_equal(merged$modes, kept$modes[big, , drop = FALSE])
  # a lone point joins the cluster of the mode nearest to its own mode
  lone <- which(kept$label == which(sizes == 1)[1])
  nearest <- big[which.min(colSums((t(kept$modes[big, ]) - kept$modes[kept$label[lone], ])^2))]
  expect_identical(merged$label[lone], match(nearest, big))
  # and the partition is ks's
  km <- ks::kms(x, H = H)
  tab <- table(km$label, merged$label)
  expect_true(all(rowSums(tab > 0) == 1) && all(colSums(tab > 0) == 1),
              label = "kde_modes() and ks::kms() partition the mixture alike")
  expect_error(kde_modes(fit, min_size = -1), "`min_size` must be one non-negative whole number")
})

test_that("kde_modes() ends near local maxima of the estimate", {
  for (case in list(list(kernel = "gaussian", d = 2), list(kernel = "biweight", d = 2),
                    list(kernel = "gaussian", d = 3), list(kernel = "faithful", d = 2))) {
    lab <- paste(case$kernel, "d =", case$d)
    d <- case$d
    fit <- if (case$kernel == "faithful") {
      kde_gpu(faithful, bw = "plugin", backend = "cpu")
    } else {
      set.seed(600 + d)
      x <- rbind(matrix(rnorm(60 * d), ncol = d), matrix(rnorm(40 * d, mean = 4), ncol = d))
      kde_gpu(x, kernel = case$kernel, backend = "cpu")
    }
    m <- kde_modes(fit, min_size = 0) # every mode, however few points climb to it
    expect_true(all(m$converged), label = lab)
    for (k in seq_len(nrow(m$modes))) {
      lab_k <- paste(lab, "mode", k)
      exact <- dd_newton(fit, m$modes[k, ])
      expect_lt(sqrt(sum(predict(fit, exact, type = "gradient")^2)),
                1e-10 * predict(fit, exact) / sqrt(min(diag(fit$H))),
                label = paste(lab_k, "Newton converged"))
      # a maximum: the Hessian is negative definite
      hess <- predict(fit, exact, type = "hessian")[1L, , ]
      expect_true(all(eigen(hess, symmetric = TRUE, only.values = TRUE)$values < 0),
                  label = paste(lab_k, "negative definite Hessian"))
      # the mode found is that maximum at the merge resolution
      gap <- sqrt(sum((m$modes[k, ] - exact)^2))
      expect_lt(gap, m$merge_tol, label = paste(lab_k, "distance to the exact mode"))
      if (case$kernel != "biweight") {
        # Gaussian mean shift: the next step would be s = H score, shorter
        # than `tol`; linearised at the mode, s = H Hess(log f) (x - mode),
        # so |x - mode| <= |s| / sigma_min(H Hess(log f)) (1.5: slack for
        # the linearisation)
        score <- predict(fit, m$modes[k, , drop = FALSE], type = "gradient", log = TRUE)
        s <- drop(fit$H %*% score[1L, ])
        expect_lt(sqrt(sum(s^2)), m$tol, label = paste(lab_k, "next mean-shift step"))
        hess_log <- predict(fit, exact, type = "hessian", log = TRUE)[1L, , ]
        bound <- sqrt(sum(s^2)) / min(svd(fit$H %*% hess_log)$d)
        expect_lte(gap, 1.5 * bound, label = paste(lab_k, "distance vs the linearised bound"))
      }
    }
    # the start points all ended within merge_tol of their mode
    gap <- sqrt(rowSums((m$end_points - m$modes[m$label, , drop = FALSE])^2))
    expect_lt(max(gap), m$merge_tol, label = lab)
  }
})

test_that("kde_modes() ascents end within tol of their mode where mean shift converges slowly", {
  # Many points and a narrow bandwidth: near a mode each step is ~0.97 of
  # the one before, so stopping at the first step below `tol` would leave
  # ascents up to ~100 tol short, and three modes counted as eight.
  set.seed(41)
  centres <- matrix(c(-3, 0, 3, 0, 3, 0), ncol = 2)
  x <- centres[sample(3, 2e4, TRUE), ] + matrix(rnorm(4e4), ncol = 2)
  fit <- kde_gpu(x, backend = "cpu", adjust = 0.5)
  m <- kde_modes(fit, start = x[1:150, ], min_size = 0)
  expect_true(all(m$converged))
  expect_equal(nrow(m$modes), 3L)
  # the same ascents continued with a 1000 times smaller tol
  far <- kde_modes(fit, start = m$end_points, step_tol = 1e-3 * m$tol, min_size = 0)
  gap <- sqrt(rowSums((m$end_points - far$end_points)^2))
  expect_lt(max(gap), 3 * m$tol)
  expect_identical(far$label, m$label)
})

test_that("kde_modes() climbs a bounded fit's reflection estimate, modes on a bound too", {
  set.seed(31)
  # 1-D, lower = 0: the reflection estimate of exponential data peaks at 0
  x <- rexp(400)
  for (be in test_backends()) {
    fit <- kde_gpu(x, lower = 0, backend = be, precision = "double")
    m <- kde_modes(fit, min_size = 0)
    expect_true(all(m$converged), label = be)
    expect_true(all(m$end_points >= 0))
    top <- which.max(m$density)
    expect_lt(abs(m$modes[top, 1]), 5 * m$tol, label = paste(be, "mode at the bound"))
    grid <- seq(0, 5, by = 1e-3)
    expect_gte(m$density[top], max(predict(fit, grid)) * (1 - 1e-5))
  }
  # 2-D, a blob against the lower bound of the first coordinate and one inside
  x2 <- rbind(cbind(abs(rnorm(200, sd = 0.5)), rnorm(200)), cbind(rnorm(200, 4), rnorm(200, 3)))
  fit <- kde_gpu(x2, lower = c(0, -Inf), backend = "cpu")
  m <- kde_modes(fit)
  expect_true(all(m$end_points[, 1] >= 0))
  for (k in seq_len(nrow(m$modes))) {
    # a maximum of predict() in the box, refined by a bounded optimiser
    best <- stats::optim(m$modes[k, ], function(p) -predict(fit, rbind(p)), method = "L-BFGS-B",
                         lower = c(0, -Inf), control = list(factr = 1e3))
    expect_lt(sqrt(sum((best$par - m$modes[k, ])^2)), 10 * m$tol, label = paste("mode", k))
  }
  # the blob against the bound climbs to one mode, on the bound
  blob <- rep(1:2, each = 200)
  expect_length(unique(m$label[blob == 1]), 1L)
  expect_lte(sum(m$label[blob == 2] == m$label[[1]]), 10)
  expect_lt(m$modes[m$label[[1]], 1], 5 * m$tol)
})

test_that("one mean-shift step is the kernel-derivative-weighted mean, from training points too", {
  # g_j = -k1(t_j), k1 = dk/dt, t = s^2, written here from k(s): dk/dt = k'(s) / (2s)
  ref_g <- function(kernel, s) {
    switch(kernel,
      gaussian     = exp(-s^2 / 2) / 2,
      epanechnikov = ifelse(s < 1, 1, 0),
      biweight     = ifelse(s < 1, 2 * (1 - s^2), 0),
      cosine       = ifelse(s < 1, ifelse(s == 0, pi^2 / 4, pi * sin(pi * s) / (4 * s)), 0),
      optcosine    = ifelse(s < 1, ifelse(s == 0, pi^2 / 8, pi * sin(pi * s / 2) / (4 * s)), 0)
    )
  }
  for (d in 1:2) {
    x <- ref_data(40, d, seed = 700 + d)
    H <- ref_full_H(d, 0.8, seed = 710 + d)
    set.seed(720 + d)
    w <- runif(40)
    start <- rbind(x[1:5, , drop = FALSE], x[6:10, , drop = FALSE] + 0.2)
    Rinv <- backsolve(chol(H), diag(d))
    for (kernel in c("gaussian", "epanechnikov", "biweight", "cosine", "optcosine")) {
      a <- ref_constants(kernel, d)$a
      expected <- t(apply(start, 1L, function(p) {
        s <- sqrt(rowSums((sweep(x, 2, p) %*% Rinv)^2)) / a
        g <- w * ref_g(kernel, s)
        colSums(g * x) / sum(g)
      }))
      if (d == 1) expected <- t(expected)
      fit <- kde_gpu(x, H = H, kernel = kernel, weights = w, backend = "cpu")
      one <- kde_modes(fit, start = start, max_iter = 1)
      dd_expect_close(one$end_points - start, expected - start, 1e-12,
                      sprintf("%s d=%d one mean-shift step", kernel, d))
    }
  }
})

test_that("kde_modes() checks its arguments", {
  x <- faithful
  for (kernel in c("triangular", "exponential", "rectangular")) {
    expect_error(kde_modes(kde_gpu(x, kernel = kernel, backend = "cpu")),
                 sprintf("`fit` has the %s kernel; mean shift needs the gaussian", kernel))
  }
  expect_error(kde_modes(kde_gpu(x, lower = 0, backend = "cpu"), start = c(-1, 2)),
               "`start` has points outside the fit's `lower`/`upper` bounds")
  fit <- kde_gpu(x, backend = "cpu")
  expect_error(kde_modes(fit, step_tol = 0), "`step_tol` must be one positive number")
  expect_error(kde_modes(fit, step_tol = c(1, 2)), "`step_tol` must be one positive number")
  expect_error(kde_modes(fit, merge_tol = -1), "`merge_tol` must be one positive number")
  expect_error(kde_modes(fit, merge_tol = NA_real_), "`merge_tol` must be one positive number")
  expect_error(kde_modes(fit, max_iter = 2.5), "`max_iter` must be one non-negative whole number")
  expect_error(kde_modes(fit, start = c(1, 2, 3)), "`start`")
  expect_error(kde_modes(fit, H = diag(2)), "kde_modes\\(\\) got unknown argument `H`")
  expect_error(kde_modes(faithful), "`fit`")
})

# ---- SD-KDE -----------------------------------------------------------------------

test_that("debias = TRUE is the estimate of the points moved by H score / 2", {
  for (d in 1:2) {
    x <- ref_data(50, d, seed = 800 + d)
    H <- ref_full_H(d, 0.6, seed = 810 + d)
    set.seed(820 + d)
    w <- rexp(50)
    q <- ref_queries(x, 10, seed = 830 + d)[1:15, , drop = FALSE]
    for (wt in list(NULL, w)) {
      lab <- sprintf("debias d=%d%s", d, if (is.null(wt)) "" else " weighted")
      # the score of the plain estimate (every point, itself included)
      moved <- x + dd_gauss_ref(x, x, H, wt)$score %*% H / 2
      fit <- kde_gpu(x, H = H, weights = wt, debias = TRUE, backend = "cpu")
      expect_true(fit$debias)
      dd_expect_close(unname(fit$x), moved, 1e-12, paste(lab, "moved points"))
      expected <- dd_gauss_ref(moved, q, H, wt)$f
      got <- predict(fit, q)
      err <- max(abs(got / expected - 1))
      expect_lt(err, 1e-10, label = paste(lab, "density"))
      expect_log_density_equal(predict(fit, q, log = TRUE), log(expected), 1e-10, lab)
    }
  }
})

test_that("debias = TRUE is refused where it is not defined", {
  expect_error(kde_gpu(faithful, kernel = "epanechnikov", debias = TRUE, backend = "cpu"),
               "`debias` needs the gaussian kernel .* not epanechnikov")
  expect_error(kde_gpu(precip, lower = 0, debias = TRUE, backend = "cpu"),
               "`debias` is not available with `lower`/`upper` bounds")
  expect_error(kde_gpu(precip, debias = NA, backend = "cpu"), "`debias` must be TRUE or FALSE")
})

# ---- CUDA --------------------------------------------------------------------------

# Every kernel's sums run on the GPU's fused derivative kernels
# (src/cuda/derivatives.cu), in the fit's precision.
test_that("CUDA: the single-precision score at a bandwidth 5x below Scott's rule takes the difference form and matches the CPU's", {
  skip_without_gpu()
  # There the density's expanded form would round by ~1e-3 (test-cuda.R),
  # and the gradient's expanded form loses more: its first sums are
  # sum(t x) - q s0, |x| ~ 150 bandwidths against a score of a few. Both
  # take the difference form. The reference is the CPU's (double, the
  # difference form); a score below 1e-3 / h (an isolated training point's,
  # ~1e-10 / h) is compared in absolute terms at that floor.
  for (d in c(2, 3, 16)) {
    x <- ref_offset_normal(if (d == 16) 2e4 else 1e5, d, seed = 890 + d)
    # at training points and near them (0.02 is half a bandwidth or less)
    q <- rbind(x[1:300, ], x[301:600, ] + matrix(rnorm(300 * d), 300) * 0.02)
    single <- kde_gpu(x, bw = "scott", adjust = 1 / 5, backend = "cuda", precision = "single")
    cpu <- kde_gpu(x, bw = "scott", adjust = 1 / 5, backend = "cpu")
    expect_output(print(single), "(difference form)", fixed = TRUE)
    h <- sqrt(min(diag(cpu$H)))
    dd_expect_close(predict(single, q, type = "gradient", log = TRUE, tolerance = 0),
                    predict(cpu, q, type = "gradient", log = TRUE, tolerance = 0), 1e-3,
                    sprintf("cuda single score, d = %d, Scott / 5", d), floor = 1e-3 / h)
  }
})

test_that("CUDA: Gaussian derivatives, far-tail score, modes and SD-KDE match the references", {
  skip_without_gpu()
  tol <- 1e-5
  for (d in 1:3) {
    x <- ref_data(60, d, seed = 100 + d)
    H <- ref_full_H(d, 0.6, seed = 110 + d)
    set.seed(120 + d)
    w <- rexp(60)
    q <- ref_queries(x, 12, seed = 130 + d)[1:17, , drop = FALSE]
    for (wt in list(NULL, w)) {
      lab <- sprintf("cuda gaussian d=%d%s", d, if (is.null(wt)) "" else " weighted")
      fit <- kde_gpu(x, H = H, weights = wt, backend = "cuda", precision = "double")
      ref <- dd_gauss_ref(x, q, H, wt)
      dd_expect_close(predict(fit, q, type = "gradient"), ref$grad, tol, paste(lab, "gradient"))
      dd_expect_close(predict(fit, q, type = "hessian"), ref$hess, tol, paste(lab, "Hessian"))
      dd_expect_close(predict(fit, q, type = "gradient", log = TRUE), ref$score, tol,
                      paste(lab, "score"))
      dd_expect_close(predict(fit, q, type = "hessian", log = TRUE), ref$hess_log, tol,
                      paste(lab, "Hessian of log f"))
    }
  }
  # a non-Gaussian kernel on a CUDA fit
  x <- ref_data(50, 2, seed = 302)
  H <- ref_full_H(2, 0.7, seed = 312)
  q <- dd_smooth_queries(x, H, "biweight", m = 12, seed = 332)
  cpu <- kde_gpu(x, H = H, kernel = "biweight", backend = "cpu")
  gpu <- kde_gpu(x, H = H, kernel = "biweight", backend = "cuda", precision = "double")
  dd_expect_close(predict(gpu, q, type = "hessian"), predict(cpu, q, type = "hessian"), 1e-12,
                  "cuda biweight Hessian vs cpu")

  set.seed(500)
  x <- c(rnorm(25), 4 + rnorm(5, sd = 0.3))
  w <- runif(30)
  h <- 0.4
  fit <- kde_gpu(x, bw = h, weights = w, backend = "cuda", precision = "double")
  q <- c(max(x) + 60 * h, min(x) - 100 * h, max(x) + 1000 * h)
  ref <- vapply(q, function(qi) {
    lw <- log(w) - (qi - x)^2 / (2 * h^2)
    sum(exp(lw - ref_log_sum_exp(lw)) * (x - qi) / h^2)
  }, 0)
  dd_expect_close(predict(fit, q, type = "gradient", log = TRUE), matrix(ref), tol,
                  "cuda far-tail gaussian score")

  fit_cpu <- kde_gpu(faithful, backend = "cpu")
  fit_gpu <- kde_gpu(faithful, backend = "cuda", precision = "double")
  m_cpu <- kde_modes(fit_cpu)
  m_gpu <- kde_modes(fit_gpu)
  tab <- table(m_cpu$label, m_gpu$label)
  expect_true(all(rowSums(tab > 0) == 1) && all(colSums(tab > 0) == 1),
              label = "cuda and cpu modal clusters of faithful")
  expect_lt(max(abs(m_gpu$modes - m_cpu$modes[apply(tab, 2L, which.max), ])), 2 * m_cpu$tol)

  # mean shift takes its own tolerance (1e-3 of the step's), not the
  # option's: a loose options(kdegpu.tolerance) leaves the ascent as it is
  set.seed(510)
  centres <- matrix(c(-3, 0, 3, 0, 3, 0), ncol = 2)
  x <- centres[sample(3, 3000, TRUE), ] + matrix(rnorm(6000), ncol = 2)
  starts <- x[1:200, ]
  m_cpu <- kde_modes(kde_gpu(x, backend = "cpu"), start = starts)
  m_gpu <- with_kde_options(list(kdegpu.tolerance = 0.5),
                            kde_modes(kde_gpu(x, backend = "cuda", precision = "double"),
                                      start = starts))
  tab <- table(m_cpu$label, m_gpu$label)
  expect_true(all(rowSums(tab > 0) == 1) && all(colSums(tab > 0) == 1),
              label = "cuda (tolerance option 0.5) and cpu modal clusters")
  # a point whose last step is within rounding of `tol` may stop one step
  # earlier or later: 2 tol
  expect_lt(max(sqrt(rowSums((m_gpu$end_points - m_cpu$end_points)^2))), 2 * m_cpu$tol)

  x <- ref_data(50, 2, seed = 802)
  H <- ref_full_H(2, 0.6, seed = 812)
  q <- ref_queries(x, 10, seed = 832)[1:15, ]
  moved <- x + dd_gauss_ref(x, x, H)$score %*% H / 2
  fit <- kde_gpu(x, H = H, debias = TRUE, backend = "cuda", precision = "double")
  expect_lt(max(abs(predict(fit, q) / dd_gauss_ref(moved, q, H)$f - 1)), tol,
            label = "cuda debias density")
})

# A CUDA fit's derivatives against the CPU backend's for the same data: the
# gradient, the Hessian and those of log f through predict(), and the raw
# sums (derivative_sums()) through what does not depend on their scale M:
# log_scale + log s0 (log f less its constant), and k1sum, first and second
# over s0. Errors are relative to each point's largest entry, or to the
# natural size of its entries where that is larger (f / bw, f / bw^2, 1 /
# bw, 1 / bw^2: where the terms cancel, as near an inflection point, the
# rounding is that of the terms). Points where the estimate is 0 (beyond a
# compact kernel's reach) must agree on that.
dd_expect_backends <- function(gpu, cpu, q, tol, label) {
  f <- predict(cpu, q, tolerance = 0)
  bw <- sqrt(min(eigen(cpu$H, symmetric = TRUE, only.values = TRUE)$values))
  for (type in c("gradient", "hessian")) {
    for (log in c(FALSE, TRUE)) {
      a <- predict(gpu, q, type = type, log = log)
      e <- predict(cpu, q, type = type, log = log)
      lab <- paste(label, type, if (log) "of log f")
      nan <- apply(matrix(is.nan(e), nrow(q)), 1L, any)
      expect_identical(apply(matrix(is.nan(a), nrow(q)), 1L, any), nan,
                       label = paste("where", lab, "is NaN"))
      if (all(nan)) next
      keep <- which(!nan)
      sub <- function(v) if (type == "gradient") v[keep, , drop = FALSE] else v[keep, , , drop = FALSE]
      # 1e-300: rows exactly 0 on both (no training point within reach)
      floor <- pmax(if (log) rep(1, length(keep)) else f[keep], 1e-300) /
        bw^(if (type == "gradient") 1 else 2)
      dd_expect_close(sub(a), sub(e), tol, lab, floor = floor)
    }
  }
  zq <- kdegpu:::whiten(cpu, q)
  sa <- kdegpu:::derivative_sums(gpu, zq, second = TRUE)
  se <- kdegpu:::derivative_sums(cpu, zq, second = TRUE)
  live <- se$s0 > 0
  expect_identical(sa$s0 > 0, live, label = paste(label, "sums: which points the kernels reach"))
  if (!any(live)) return(invisible())
  level_a <- (sa$log_scale + log(sa$s0))[live]
  level_e <- (se$log_scale + log(se$s0))[live]
  expect_lte(max(abs(level_a - level_e) / pmax(1, abs(level_e))), tol,
             label = paste(label, "sums: log_scale + log s0"))
  ratios <- function(s) cbind(s$k1sum, s$first, matrix(s$second, length(s$s0)))[live, , drop = FALSE] /
    s$s0[live]
  # floor: a point on a lone training point of a cusp kernel has only its
  # own term, which adds nothing to these
  dd_expect_close(ratios(sa), ratios(se), tol, paste(label, "sums: k1sum, first, second over s0"),
                  floor = 1e-300)
}

# Queries whose pairs are all clear of a compact kernel's edge (|t - 1| at
# least `margin`), where float's rounding could move a term across the
# support (k1, k2 jump there): rows of q in the fit's coordinates.
dd_clear_of_edges <- function(fit, q, margin = 1e-3) {
  if (!fit$kernel %in% ref_compact) return(q)
  zq <- kdegpu:::whiten(fit, q)
  keep <- apply(zq, 1L, function(z) all(abs(colSums((t(fit$z) - z)^2) - 1) > margin))
  q[keep, , drop = FALSE]
}

test_that("CUDA: every kernel's derivative sums match the CPU's, d = 1, 2, 3, 5, 16, both precisions", {
  skip_without_gpu()
  for (precision in c("double", "single")) {
    tol <- if (precision == "double") 1e-10 else 1e-4
    for (d in c(1L, 2L, 3L, 5L, 16L)) {
      n <- if (d >= 5L) 150L else 80L
      x <- ref_data(n, d, seed = 700 + d)
      H <- ref_full_H(d, if (d >= 5L) 1.2 else 0.6, seed = 710 + d)
      set.seed(720 + d)
      w <- rexp(n)
      for (kernel in dd_kernels) {
        # near the data, clear of the edges (and of the cusps: 1/s) by a
        # margin that float's rounding of s leaves alone (a cosine term at
        # s = 0.995 keeps 3 digits in float, at 0.98 5); training points
        # exactly (the cusps' t = 0); in double also a point in the far tail
        margin <- if (precision == "double") 0.005 else 0.02
        q <- rbind(dd_smooth_queries(x, H, kernel, m = 40, seed = 730 + d, margin = margin),
                   x[c(3, 7), , drop = FALSE])
        if (precision == "double") q <- rbind(q, colMeans(x) + 6 * sqrt(diag(H)))
        for (wt in list(NULL, w)) {
          lab <- sprintf("cuda %s %s d=%d%s", precision, kernel, d,
                         if (is.null(wt)) "" else " weighted")
          cpu <- kde_gpu(x, H = H, kernel = kernel, weights = wt, backend = "cpu")
          gpu <- kde_gpu(x, H = H, kernel = kernel, weights = wt, backend = "cuda",
                         precision = precision)
          dd_expect_backends(gpu, cpu, q, tol, lab)
        }
      }
    }
  }
})

test_that("CUDA: derivative sums match the CPU's over many tiles, pruned, in batches and shards", {
  skip_without_gpu()
  set.seed(900)
  for (d in 2:4) {
    n <- 3000L
    x <- matrix(rnorm(n * d), n, d)
    x[seq_len(n / 3), 1L] <- x[seq_len(n / 3), 1L] + 6 # two clusters
    q <- rbind(x[sample.int(n, 300L), ] + 0.05 * matrix(rnorm(300L * d), 300L, d),
               x[1:5, ])
    # far out (compact kernels: nowhere in reach); in double only, where
    # the Hessian of log f there (E[v v'] - E[v] E[v]', which cancels) has
    # the digits to spare
    far <- matrix(colMeans(x) + 9, 1L)
    for (kernel in c("gaussian", "exponential", "epanechnikov", "biweight")) {
      cpu <- kde_gpu(x, kernel = kernel, backend = "cpu")
      for (precision in c("double", "single")) {
        tol <- if (precision == "double") 1e-10 else 1e-4
        qk <- dd_clear_of_edges(cpu, if (precision == "double") rbind(q, far) else q)
        lab <- sprintf("cuda %s %s d=%d n=%d", precision, kernel, d, n)
        gpu <- kde_gpu(x, kernel = kernel, backend = "cuda", precision = precision)
        dd_expect_backends(gpu, cpu, qk, tol, lab)
        # a budget too small for the training set: it streams in shards,
        # the queries come in batches and are ordered on the host (the
        # option restored even when this fails, so that no later test
        # runs under it)
        with_kde_options(list(kdegpu.gpu_memory = 1.2e5),
                         dd_expect_backends(gpu, cpu, qk, tol, paste(lab, "small budget")))
      }
    }
  }
})

