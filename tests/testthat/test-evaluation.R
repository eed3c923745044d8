# The evaluation suite: every backend usable here (eval_backends(): the CPU
# always, the CUDA backend in double and in single precision where a GPU is)
# against the same references: the plain-R estimator of helper-reference.R,
# ks::kde(binned = FALSE) and stats::density(). Each reference is computed
# once per case and every backend is compared with it at the tolerance of
# its precision. expect_log_density_equal() also asks for -Inf exactly
# where the reference has it, so the single-precision backend's -Inf pattern
# is the double ones'.

test_that("each backend fits where it is asked to, in the asked precision", {
  x <- ref_data(20, 2, seed = 1)
  for (be in eval_backends()) {
    fit <- kde_on(be, x)
    expect_identical(fit$backend, be$backend)
    expect_identical(fit$precision, be$precision)
  }
})

test_that("every kernel matches the reference in d = 1 to 5, scalar, diagonal and full H, weighted or not", {
  # n = 157 is off the GPU's 32-point tiles (larger, odder sizes further down).
  for (d in 1:5) {
    x <- ref_data(157, d, seed = 10 + d)
    q <- ref_queries(x, 90, seed = 20 + d)
    sdv <- apply(x, 2, sd)
    bw_scalar <- 0.4 * mean(sdv)
    bw_vector <- 0.35 * sdv * seq(0.8, 1.2, length.out = d)
    H_full <- ref_full_H(d, 0.45 * mean(sdv), seed = 30 + d)
    set.seed(40 + d)
    w <- rexp(nrow(x))
    specs <- list(
      scalar = list(args = list(bw = bw_scalar), H = diag(bw_scalar^2, d)),
      vector = list(args = list(bw = bw_vector), H = diag(bw_vector^2, d)),
      full = list(args = list(H = H_full), H = H_full)
    )
    for (be in eval_backends()) for (sp in names(specs)) {
      fit <- do.call(kde_on, c(list(be, x), specs[[sp]]$args))
      expect_equal(fit$H, specs[[sp]]$H, tolerance = 1e-14, ignore_attr = TRUE,
                   label = be_label(be, "H of d =", d, sp))
    }
    for (k in ref_kernels) for (sp in names(specs)) for (wt in list(NULL, w)) {
      want <- ref_log_density(x, q, specs[[sp]]$H, k, wt)
      for (be in eval_backends()) {
        lab <- be_label(be, sprintf("%s d=%d %s H%s", k, d, sp,
                                    if (is.null(wt)) "" else " weighted"))
        fit <- do.call(kde_on, c(list(be, x, kernel = k, weights = wt),
                                 specs[[sp]]$args))
        got <- predict(fit, q, log = TRUE)
        expect_log_density_equal(got, want, tol = be$tol, label = lab)
        if (sp == "full" && is.null(wt)) {
          expect_equal(predict(fit, q), exp(got), tolerance = 1e-14, label = lab)
        }
      }
    }
  }
})

test_that("predict() without newdata evaluates at the training points", {
  for (d in c(1, 3)) {
    x <- ref_data(80, d, seed = 50 + d)
    H <- ref_full_H(d, 0.5, seed = 51)
    for (k in c("gaussian", "biweight", "exponential")) {
      want <- ref_log_density(x, x, H, k)
      for (be in eval_backends()) {
        fit <- kde_on(be, x, H = H, kernel = k)
        got <- predict(fit, log = TRUE)
        expect_log_density_equal(got, want, tol = be$tol,
                                 label = be_label(be, k, d))
        expect_equal(got, predict(fit, x, log = TRUE), tolerance = be$tol)
      }
    }
  }
})

test_that("leave-one-out densities and logLik() match the reference", {
  # Every kernel unweighted and three weighted, n = 300 across the GPU's
  # 256-point units: the self term is dropped inside the kernel sum.
  for (d in 1:3) {
    x <- ref_data(300, d, seed = 410 + d)
    H <- ref_full_H(d, 0.7, seed = 420 + d)
    set.seed(430 + d)
    w <- rexp(300)
    cases <- c(lapply(ref_kernels, function(k) list(k = k, w = NULL)),
               lapply(c("gaussian", "biweight", "exponential"),
                      function(k) list(k = k, w = w)))
    for (cs in cases) {
      want <- ref_loo_log_density(x, H, cs$k, cs$w)
      want_ll <- ref_loo_loglik(x, H, cs$k, cs$w, terms = want)
      for (be in eval_backends()) {
        lab <- be_label(be, cs$k, "d =", d,
                        if (is.null(cs$w)) "" else "weighted")
        fit <- kde_on(be, x, H = H, kernel = cs$k, weights = cs$w)
        expect_log_density_equal(predict(fit, log = TRUE, leave_one_out = TRUE),
                                 want, tol = be$tol, label = lab)
        expect_equal(as.numeric(logLik(fit)), want_ll, tolerance = be$tol,
                     label = lab)
      }
    }
  }
})

test_that("logLik() is -Inf when a point has no neighbour in a compact support", {
  x <- c(0, 0.1, 0.2, 50)
  for (be in eval_backends()) {
    fit <- kde_on(be, x, bw = 0.5, kernel = "epanechnikov")
    expect_identical(predict(fit, log = TRUE, leave_one_out = TRUE) == -Inf,
                     c(FALSE, FALSE, FALSE, TRUE), label = be$name)
    expect_identical(as.numeric(logLik(fit)), -Inf, label = be$name)
    expect_true(is.finite(as.numeric(logLik(kde_on(be, x, bw = 0.5)))),
                label = be$name)
  }
})

test_that("the default bandwidths are the ones the density uses", {
  x1 <- ref_data(150, 1, seed = 63)[, 1]
  q1 <- seq(-4, 4, length.out = 33)
  want1 <- ref_log_density(x1, q1, stats::bw.nrd0(x1)^2, "gaussian")
  for (be in eval_backends()) {
    expect_log_density_equal(predict(kde_on(be, x1), q1, log = TRUE), want1,
                             tol = be$tol, label = be_label(be, "nrd0"))
  }
  for (d in c(2, 3, 5)) {
    x <- ref_data(120, d, seed = 64 + d)
    scott <- nrow(x)^(-2 / (d + 4)) * stats::cov(x)
    q <- ref_queries(x, 20, seed = 70)
    want <- ref_log_density(x, q, scott, "gaussian")
    for (be in eval_backends()) {
      expect_log_density_equal(predict(kde_on(be, x), q, log = TRUE), want,
                               tol = be$tol, label = be_label(be, "Scott d =", d))
    }
  }
})

test_that("1-D scalar bw is density()'s bw, for every kernel", {
  x <- c(-2, -0.5, 0, 0.1, 3)
  q <- seq(-8, 8, by = 0.013)
  for (k in ref_kernels) {
    want <- rowMeans(outer(q, x, function(a, b) ref_density_kernel_1d(k, a - b, 0.9)))
    for (be in eval_backends()) {
      fit <- kde_on(be, x, bw = 0.9, kernel = k)
      lab <- be_label(be, k)
      if (be$precision == "double") {
        # 1e-9: near the support edge the closed forms cancel differently.
        expect_density_equal(predict(fit, q), want, tol = 1e-9, label = lab)
      } else {
        # single: relative accuracy away from a compact support's edge
        # (where f -> 0 amplifies a coordinate's rounding without bound),
        # and everywhere to 1e-5 of the largest density
        got <- predict(fit, q)
        inner <- want >= 1e-3 * max(want)
        expect_log_density_equal(log(got[inner]), log(want[inner]), tol = be$tol, label = lab)
        expect_lte(max(abs(got - want)) / max(want), be$tol, label = paste(lab, "absolute"))
      }
    }
  }
})

test_that("far from the data: finite unbounded log densities, -Inf for compact", {
  bw <- 0.25
  x <- c(0, 1, 5)
  q <- c(-300, 250, 1e5)
  x3 <- ref_data(40, 3, seed = 75)
  far3 <- matrix(c(100, 0, 0, -50, 80, 1, 0, 0, 1e6), 3, 3, byrow = TRUE)
  for (be in eval_backends()) {
    fit <- kde_on(be, 0, bw = bw)
    expect_equal(predict(fit, 1e3, log = TRUE),
                 -0.5 * 1e6 / bw^2 - log(sqrt(2 * pi) * bw), tolerance = be$tol,
                 label = be$name)
    expect_identical(predict(fit, 1e3), 0)
    fit_e <- kde_on(be, 0, bw = bw, kernel = "exponential")
    expect_equal(predict(fit_e, -1e4, log = TRUE),
                 -log(sqrt(2) * bw) - sqrt(2) * 1e4 / bw, tolerance = be$tol,
                 label = be$name)
    # A mixture far away is dominated by the nearest point but not equal to it.
    for (k in c("gaussian", "exponential")) {
      got <- predict(kde_on(be, x, bw = 0.5, kernel = k), q, log = TRUE)
      expect_true(all(is.finite(got)), label = be_label(be, k))
      expect_log_density_equal(got, ref_log_density(x, q, 0.25, k),
                               tol = be$tol, label = be_label(be, k))
    }
    # Every query outside the support of every point: all -Inf, density 0,
    # in 1-D and 3-D.
    for (k in ref_compact) {
      lab <- be_label(be, k)
      fit1 <- kde_on(be, c(0, 1), bw = bw, kernel = k)
      expect_identical(predict(fit1, c(-100, 50, 1e6), log = TRUE), rep(-Inf, 3),
                       label = lab)
      fit3 <- kde_on(be, x3, bw = 0.5, kernel = k)
      expect_identical(predict(fit3, far3, log = TRUE), rep(-Inf, 3), label = lab)
      expect_identical(predict(fit3, far3), rep(0, 3), label = lab)
    }
  }
})

test_that("compact kernels: zero exactly outside the support, positive inside", {
  # One point, bw = 1: the support is |q| < a.
  for (k in ref_compact) {
    a <- ref_constants(k, 1)$a
    for (be in eval_backends()) {
      fit <- kde_on(be, 0, bw = 1, kernel = k)
      expect_gt(predict(fit, 0.999 * a), 0, label = be_label(be, k))
      expect_identical(predict(fit, c(-1.001 * a, 1.001 * a, 1.5 * a)), c(0, 0, 0),
                       label = be_label(be, k))
    }
  }
})

test_that("zero weights drop their points; weights are normalised", {
  x <- ref_data(50, 2, seed = 76)
  q <- ref_queries(x, 25, seed = 77)
  w <- rep(c(0, 1, 3), length.out = 50)
  for (be in eval_backends()) {
    # Double precision: the same sums in another order.
    tol <- if (be$precision == "double") 1e-13 else be$tol
    for (k in c("gaussian", "epanechnikov")) {
      lab <- be_label(be, k)
      fw <- predict(kde_on(be, x, bw = 0.6, kernel = k, weights = w), q, log = TRUE)
      fsub <- predict(kde_on(be, x[w > 0, ], bw = 0.6, kernel = k,
                             weights = w[w > 0]), q, log = TRUE)
      expect_log_density_equal(fw, fsub, tol = tol, label = lab)
      f10 <- predict(kde_on(be, x, bw = 0.6, kernel = k, weights = 10 * w), q,
                     log = TRUE)
      expect_log_density_equal(f10, fw, tol = tol, label = lab)
      expect_log_density_equal(fw, ref_log_density(x, q, diag(0.36, 2), k, w),
                               tol = be$tol, label = lab)
    }
    # Equal weights equal the unweighted fit.
    expect_log_density_equal(
      predict(kde_on(be, x, bw = 0.6, weights = rep(2, 50)), q, log = TRUE),
      predict(kde_on(be, x, bw = 0.6), q, log = TRUE), tol = tol, label = be$name)
  }
})

test_that("duplicated training points and a single training point work", {
  x <- rbind(matrix(1, 5, 2), matrix(c(0, 2), 1))
  q <- rbind(c(1, 1), c(0, 2), c(0.5, 1.5))
  H <- matrix(c(0.3, 0.1, 0.1, 0.2), 2)
  for (k in ref_kernels) {
    want <- ref_log_density(x, q, H, k)
    want_loo <- ref_loo_log_density(x, H, k)
    want1 <- ref_log_density(x[6, , drop = FALSE], q, H, k)
    for (be in eval_backends()) {
      lab <- be_label(be, k)
      fit <- kde_on(be, x, H = H, kernel = k)
      expect_log_density_equal(predict(fit, q, log = TRUE), want, tol = be$tol,
                               label = lab)
      # Leave-one-out drops one copy of a duplicated point, not all five.
      expect_log_density_equal(predict(fit, log = TRUE, leave_one_out = TRUE),
                               want_loo, tol = be$tol, label = lab)
      fit1 <- kde_on(be, x[6, , drop = FALSE], H = H, kernel = k)
      expect_log_density_equal(predict(fit1, q, log = TRUE), want1, tol = be$tol,
                               label = lab)
    }
  }
})

test_that("n and m off every tile size, and fewer queries than a block, match the reference", {
  # n = 1237 and m = 771 are multiples of no tile, block or unit size (32,
  # 64, 128, 256, 1024, ...); m = 1, 3, 31 are fewer queries than one block.
  for (d in c(1, 3)) {
    x <- ref_data(1237, d, seed = 200 + d)
    q <- ref_queries(x, 771 - 9, seed = 210 + d)   # 771 rows in all
    expect_equal(nrow(q), 771)
    H <- ref_full_H(d, 0.3, seed = 220 + d)
    set.seed(230 + d)
    w <- runif(nrow(x))
    for (k in ref_kernels) {
      want <- ref_log_density(x, q, H, k, w)
      for (be in eval_backends()) {
        lab <- be_label(be, k, "d =", d)
        # Single precision: 1e-4. This H is about half the normal-reference
        # one in places, where single precision is documented to lose
        # accuracy, and at d = 3 one query (35 whitened units from the
        # center) has a lone neighbour at 0.9996 of the triangular kernel's
        # support radius: log(1 - s) multiplies float's rounding of
        # |q|^2 + |x|^2 - 2 q.x by 1 / (1 - s) (8.6e-5 measured on an H100).
        tol <- if (be$precision == "single") 1e-4 else be$tol
        fit <- kde_on(be, x, H = H, kernel = k, weights = w)
        expect_log_density_equal(predict(fit, q, log = TRUE), want, tol = tol,
                                 label = lab)
        for (m in c(1, 3, 31)) {
          expect_log_density_equal(
            predict(fit, q[seq_len(m), , drop = FALSE], log = TRUE),
            want[seq_len(m)], tol = tol, label = paste(lab, "m =", m))
        }
      }
    }
  }
})

test_that("lopsided shapes: tiny n with many queries, many points with one query", {
  x_small <- ref_data(3, 2, seed = 240)
  x_big <- ref_data(5003, 2, seed = 241)
  q_big <- ref_queries(x_big, 4097, seed = 242)
  H <- ref_full_H(2, 0.4, seed = 243)
  for (k in c("gaussian", "biweight")) {
    want_small <- ref_log_density(x_small, q_big, H, k)
    want_big <- ref_log_density(x_big, q_big[1:65, ], H, k)
    for (be in eval_backends()) {
      f_small <- kde_on(be, x_small, H = H, kernel = k)
      expect_log_density_equal(predict(f_small, q_big, log = TRUE), want_small,
                               tol = be$tol, label = be_label(be, k, "n = 3"))
      f_big <- kde_on(be, x_big, H = H, kernel = k)
      for (m in c(1, 2, 65)) {
        expect_log_density_equal(
          predict(f_big, q_big[seq_len(m), , drop = FALSE], log = TRUE),
          want_big[seq_len(m)], tol = be$tol, label = be_label(be, k, "m =", m))
      }
    }
  }
})

test_that("n = m = 2e4 in 2-D: full evaluation agrees with the reference on a subset", {
  # 4e8 pairs: more than one of the CPU's chunks between interrupt polls.
  x <- ref_data(2e4, 2, seed = 250)
  set.seed(251)
  idx <- sort(c(1, 2e4, sample.int(2e4, 198)))
  n <- nrow(x)
  for (k in c("gaussian", "epanechnikov")) {
    H <- kde_gpu(x, kernel = k, backend = "cpu")$H
    want <- ref_log_density(x, x[idx, ], H, k)
    for (be in eval_backends()) {
      lab <- be_label(be, k)
      fit <- kde_on(be, x, kernel = k)
      all_lp <- predict(fit, log = TRUE)
      expect_length(all_lp, 2e4)
      expect_log_density_equal(all_lp[idx], want, tol = be$tol, label = lab)
      # The same points as an explicit, smaller query set.
      expect_log_density_equal(predict(fit, x[idx, ], log = TRUE), all_lp[idx],
                               tol = if (be$precision == "double") 1e-13 else be$tol,
                               label = paste(lab, "subset"))
      if (k == "gaussian") {
        # Leave-one-out at this size, through the exact identity
        # f_{-i}(x_i) = (n f(x_i) - K_H(0)) / (n - 1) for equal weights,
        # except at isolated points where n f(x_i) is close to K_H(0) and the
        # identity cancels: those are evaluated directly by the reference.
        log_k0 <- ref_log_density(matrix(0, 1, 2), matrix(0, 1, 2), H, k)
        ratio <- n * exp(all_lp - log_k0)
        loo <- log((n * exp(all_lp) - exp(log_k0)) / (n - 1))
        lonely <- which(ratio < 20)
        expect_gt(length(lonely), 0)   # the cancelling case is exercised
        loo[lonely] <- vapply(lonely, function(i) {
          ref_log_density(x[-i, ], x[i, , drop = FALSE], H, k)
        }, numeric(1))
        expect_equal(as.numeric(logLik(fit)), sum(loo),
                     tolerance = max(be$tol, 1e-11), label = lab)
      }
    }
  }
})

test_that("wide d = 67 and 137 (the CUDA FMA kernel's dimension chunks) match the reference", {
  # On the GPU the wide FMA kernel splits d into chunks that fit its shared
  # memory when d > 66 in double and d > 133 in single precision: 67 makes
  # two chunks in double, 137 three in double and two in single, the last
  # one shorter. Epanechnikov and exponential take that kernel in both
  # precisions; the Gaussian does in double, and in single it takes the
  # wide tensor-core kernel instead (d >= 16).
  # Queries: 60 fresh points from the data's law, and ref_queries()'s
  # training points and far points. H = c times the sample covariance, c
  # such that a fresh point has some but not all of the 300 training points
  # inside a compact kernel's support (median 100 of 300 at d = 67, 250 at
  # d = 137: with n / d this small the sample covariance underestimates the
  # spread of new points).
  for (d in c(67, 137)) {
    xq <- ref_data(360, d, seed = 260 + d)
    x <- xq[1:300, ]
    q <- rbind(xq[301:360, ], ref_queries(x, 0, seed = 270 + d))
    H <- c(`67` = 2, `137` = 3)[[as.character(d)]] * stats::cov(x)
    set.seed(280 + d)
    w <- rexp(nrow(x))
    for (k in c("epanechnikov", "exponential", "gaussian")) {
      want <- ref_log_density(x, q, H, k, w)
      for (be in eval_backends()) {
        fit <- kde_on(be, x, H = H, kernel = k, weights = w)
        expect_log_density_equal(predict(fit, q, log = TRUE), want, tol = be$tol,
                                 label = be_label(be, k, "d =", d))
      }
    }
  }
})

test_that("gaussian with full H matches ks::kde(binned = FALSE) in 2-D and 3-D", {
  skip_if_not_installed("ks")
  for (d in c(2, 3)) {
    x <- ref_data(300, d, seed = 100 + d)
    H <- ref_full_H(d, 0.5, seed = 110 + d)
    q <- ref_queries(x, 100, seed = 120 + d)[1:100, ]
    want <- ks::kde(x, H = H, eval.points = q, binned = FALSE)$estimate
    for (be in eval_backends()) {
      fit <- kde_on(be, x, H = H)
      expect_log_density_equal(predict(fit, q, log = TRUE), log(want),
                               tol = max(be$tol, 1e-12),
                               label = be_label(be, "ks d =", d))
    }
  }
})

test_that("gaussian default (Scott) bandwidth also agrees with ks::kde at that H", {
  skip_if_not_installed("ks")
  x <- ref_data(200, 2, seed = 130)
  q <- ref_queries(x, 50, seed = 131)[1:50, ]
  H <- kde_gpu(x, backend = "cpu")$H
  want <- ks::kde(x, H = H, eval.points = q, binned = FALSE)$estimate
  for (be in eval_backends()) {
    fit <- kde_on(be, x)
    expect_equal(fit$H, H, tolerance = 1e-14)
    expect_log_density_equal(predict(fit, q, log = TRUE), log(want),
                             tol = max(be$tol, 1e-12), label = be$name)
  }
})

test_that("every density() kernel agrees with stats::density in 1-D (binned)", {
  # density() bins the data and convolves by FFT, so it is only an
  # approximation: compare in the bulk, on a fine grid.
  set.seed(140)
  x <- c(rnorm(700), rnorm(300, 3, 0.5))
  w <- rexp(1000)
  shared <- c("gaussian", "epanechnikov", "rectangular", "triangular",
              "biweight", "cosine", "optcosine")
  for (k in shared) {
    for (wt in list(NULL, w / sum(w))) {
      dd <- stats::density(x, bw = 0.3, kernel = k, n = 2048, weights = wt)
      bulk <- dd$y > 0.05 * max(dd$y)
      for (be in eval_backends()) {
        fit <- kde_on(be, x, bw = 0.3, kernel = k, weights = wt)
        rel <- abs(predict(fit, dd$x)[bulk] / dd$y[bulk] - 1)
        lab <- be_label(be, k, if (is.null(wt)) "" else "weighted")
        if (k == "rectangular") {
          # Binning blurs the jumps of the rectangular kernel.
          expect_lt(mean(rel), 1e-2, label = lab)
          expect_lt(max(rel), 0.15, label = lab)
        } else {
          expect_lt(max(rel), 5e-3, label = lab)
        }
      }
    }
  }
})

test_that("the default bandwidth is density()'s default, and so is the density", {
  set.seed(141)
  x <- rgamma(500, 2)
  dd <- stats::density(x, n = 2048)
  bulk <- dd$y > 0.05 * max(dd$y)
  for (be in eval_backends()) {
    fit <- kde_on(be, x)
    expect_equal(sqrt(c(fit$H)), dd$bw, tolerance = 1e-14)
    expect_lt(max(abs(predict(fit, dd$x)[bulk] / dd$y[bulk] - 1)), 5e-3,
              label = be$name)
  }
})
