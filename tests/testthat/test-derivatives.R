# predict(type = "gradient" / "hessian", log =), checked against closed
# forms in plain R, ks::kdde() and central finite differences of predict()
# (helpers in helper-derivatives.R). With KDEGPU_TEST_VERBOSE set, every
# check reports its error.

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
    x <- dd_two_clusters(n, d)
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

test_that("CUDA: pruned derivatives of many queries in many batches match the CPU's in every row", {
  # Under this budget a batch holds 128 or 256 rows, so up to 4,000
  # queries take 6 to 32 batches (KDEGPU_TRACE on one H200); each batch's
  # rows go back to their places in the caller's columns, leaving the
  # other batches' rows as they were.
  skip_without_gpu()
  set.seed(901)
  for (d in 2:3) {
    n <- 3000L
    x <- dd_two_clusters(n, d)
    q <- x[sample.int(n, 4000L, replace = TRUE), ] + 0.05 * matrix(rnorm(4000L * d), 4000L, d)
    for (kernel in c("gaussian", "epanechnikov")) {
      cpu <- kde_gpu(x, kernel = kernel, backend = "cpu")
      qk <- dd_clear_of_edges(cpu, q)
      expect_gt(nrow(qk), 2000L)
      for (precision in c("double", "single")) {
        tol <- if (precision == "double") 1e-10 else 1e-4
        gpu <- kde_gpu(x, kernel = kernel, backend = "cuda", precision = precision)
        lab <- sprintf("cuda %s %s d=%d, %d queries in batches", precision, kernel, d, nrow(qk))
        with_kde_options(list(kdegpu.gpu_memory = 1.2e5), {
          dd_expect_backends(gpu, cpu, qk, tol, lab)
          # in another order: the same batches, each row's bits in its place
          perm <- sample.int(nrow(qk))
          g <- predict(gpu, qk, type = "gradient")
          g_perm <- predict(gpu, qk[perm, ], type = "gradient")
          expect_identical(unname(g_perm[order(perm), ]), unname(g),
                           label = paste(lab, "queries permuted"))
        })
      }
    }
  }
})

test_that("CUDA: derivatives on several GPUs are one GPU's bits", {
  skip_without_gpu()
  all_gpus <- several_gpus()
  # Clusters far apart: pruning leaves uneven work per batch, so the devices
  # take the batches as they free up.
  set.seed(845)
  centers <- matrix(runif(10 * 3, -30, 30), 10, 3)
  x <- centers[sample.int(10, 20000, replace = TRUE), ] + matrix(rnorm(60000), ncol = 3)
  q <- ref_queries(x, 20000, seed = 846)
  derivatives <- function(devices, kernel, precision, budget) {
    with_kde_options(list(kdegpu.devices = devices, kdegpu.gpu_memory = budget), {
      fit <- kde_gpu(x, kernel = kernel, backend = "cuda", precision = precision)
      list(gradient = predict(fit, q, type = "gradient"),
           hessian = predict(fit, q, type = "hessian", log = TRUE, tolerance = 0))
    })
  }
  for (kernel in c("gaussian", "epanechnikov")) {
    for (precision in c("double", "single")) {
      # one batch (the first device does it all), then batches of a few
      # thousand queries and the training set in shards under a 4 MiB budget
      for (budget in list(NULL, 2^22)) {
        lab <- paste(kernel, precision, if (is.null(budget)) "" else "4 MiB")
        one <- derivatives(0L, kernel, precision, budget)
        expect_identical(derivatives(all_gpus, kernel, precision, budget), one, label = lab)
      }
    }
  }
})
