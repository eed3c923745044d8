# The CUDA backend against the same plain-R reference, in double (1e-10
# relative on the log density) and single (1e-5) precision. Skips cleanly
# without a usable GPU.

skip_without_gpu <- function() {
  skip_if(nrow(kdegpu_info()$gpus) == 0, "no usable GPU")
}

cuda_tol <- c(double = 1e-10, single = 1e-5)

test_that("CUDA: every kernel matches the reference in d = 1, 2, 3, 5", {
  skip_without_gpu()
  for (d in c(1, 2, 3, 5)) {
    x <- ref_data(157, d, seed = 700 + d)
    q <- ref_queries(x, 90, seed = 710 + d)
    H <- ref_full_H(d, 0.45 * mean(apply(x, 2, sd)), seed = 720 + d)
    set.seed(730 + d)
    w <- rexp(nrow(x))
    for (prec in names(cuda_tol)) {
      for (k in ref_kernels) {
        for (wt in list(NULL, w)) {
          fit <- kde_gpu(x, H = H, kernel = k, weights = wt, backend = "cuda",
                         precision = prec)
          expect_identical(fit$backend, "cuda")
          expect_identical(fit$precision, prec)
          lab <- sprintf("cuda %s %s d=%d%s", prec, k, d,
                         if (is.null(wt)) "" else " weighted")
          want <- ref_log_density(x, q, H, k, wt)
          got <- predict(fit, q, log = TRUE)
          if (prec == "double") {
            expect_log_density_equal(got, want, tol = cuda_tol[[prec]],
                                     label = lab)
          } else {
            # Single precision: compare where both are finite; the support
            # edge of compact kernels may round either way, so only points
            # well inside / well outside are compared for -Inf.
            expect_false(anyNA(got), label = lab)
            ok <- is.finite(want)
            err <- max(abs(got[ok] - want[ok]) / pmax(1, abs(want[ok])))
            expect_lte(err, cuda_tol[[prec]], label = lab)
          }
        }
      }
    }
  }
})

test_that("CUDA: scalar and diagonal bandwidths, and the far field", {
  skip_without_gpu()
  x <- ref_data(64, 3, seed = 740)
  q <- ref_queries(x, 40, seed = 741)
  for (spec in list(list(bw = 0.6, H = diag(0.36, 3)),
                    list(bw = c(0.5, 0.7, 0.9), H = diag(c(0.25, 0.49, 0.81))))) {
    for (k in c("gaussian", "cosine", "exponential")) {
      fit <- kde_gpu(x, bw = spec$bw, kernel = k, backend = "cuda")
      expect_log_density_equal(predict(fit, q, log = TRUE),
                               ref_log_density(x, q, spec$H, k), label = k)
    }
  }
  bw <- 0.25
  for (prec in names(cuda_tol)) {
    fit <- kde_gpu(0, bw = bw, backend = "cuda", precision = prec)
    expect_equal(predict(fit, 1e3, log = TRUE),
                 -0.5 * 1e6 / bw^2 - log(sqrt(2 * pi) * bw),
                 tolerance = cuda_tol[[prec]])
    for (k in ref_compact) {
      fitk <- kde_gpu(c(0, 1), bw = bw, kernel = k, backend = "cuda",
                      precision = prec)
      expect_identical(predict(fitk, c(-100, 50, 1e6), log = TRUE),
                       rep(-Inf, 3), label = paste(prec, k))
    }
  }
})

test_that("CUDA: fewer queries than a block, and n, m off every tile size", {
  skip_without_gpu()
  for (d in c(1, 3)) {
    x <- ref_data(1237, d, seed = 750 + d)
    H <- ref_full_H(d, 0.3, seed = 760 + d)
    set.seed(770 + d)
    w <- runif(1237)
    q_all <- ref_queries(x, 1000, seed = 780 + d)[1:1000, , drop = FALSE]
    for (k in c("gaussian", "epanechnikov", "exponential")) {
      want_all <- ref_log_density(x, q_all, H, k, w)
      for (prec in names(cuda_tol)) {
        fit <- kde_gpu(x, H = H, kernel = k, weights = w, backend = "cuda",
                       precision = prec)
        got <- predict(fit, q_all, log = TRUE)
        ok <- is.finite(want_all)
        lab <- paste(prec, k, "d =", d)
        if (prec == "double") {
          expect_log_density_equal(got, want_all, label = lab)
        } else {
          expect_lte(max(abs(got[ok] - want_all[ok]) / pmax(1, abs(want_all[ok]))),
                     1e-5, label = lab)
        }
        for (m in c(1, 3, 31)) {
          got_m <- predict(fit, q_all[seq_len(m), , drop = FALSE], log = TRUE)
          expect_equal(got_m, got[seq_len(m)], tolerance = cuda_tol[[prec]],
                       label = paste(lab, "m =", m))
        }
      }
    }
  }
})

test_that("CUDA: leave-one-out via logLik matches the reference", {
  skip_without_gpu()
  for (d in c(1, 2)) {
    x <- ref_data(300, d, seed = 790 + d)
    H <- ref_full_H(d, 0.6, seed = 795 + d)
    set.seed(799)
    w <- rexp(300)
    for (k in c("gaussian", "biweight", "exponential")) {
      for (wt in list(NULL, w)) {
        want <- ref_loo_loglik(x, H, k, wt)
        for (prec in names(cuda_tol)) {
          fit <- kde_gpu(x, H = H, kernel = k, weights = wt, backend = "cuda",
                         precision = prec)
          got <- logLik(fit)
          expect_equal(as.numeric(got), want, tolerance = cuda_tol[[prec]],
                       label = paste(prec, k, d))
          # And it agrees with the CPU backend.
          fit_cpu <- kde_gpu(x, H = H, kernel = k, weights = wt,
                             backend = "cpu")
          expect_equal(as.numeric(got), as.numeric(logLik(fit_cpu)),
                       tolerance = cuda_tol[[prec]])
        }
      }
    }
  }
})

test_that("CUDA: a tiny memory budget gives the same answer", {
  skip_without_gpu()
  x <- ref_data(20011, 2, seed = 800)
  q <- ref_queries(x, 30000, seed = 801)
  idx <- c(1:5, 29000:29004, nrow(q) - 0:3)
  for (k in c("gaussian", "epanechnikov")) {
    for (prec in names(cuda_tol)) {
      lab <- paste(k, prec)
      fit <- kde_gpu(x, kernel = k, backend = "cuda", precision = prec)
      p_default <- predict(fit, q, log = TRUE)
      ll_default <- as.numeric(logLik(fit))
      # The budget applies to fits (and their evaluations) made under it.
      with_kde_options(list(kdegpu.gpu_memory = 2^20), {
        fit_small <- kde_gpu(x, kernel = k, backend = "cuda", precision = prec)
        p_small <- predict(fit_small, q, log = TRUE)
        ll_small <- as.numeric(logLik(fit_small))
      })
      expect_identical(p_small == -Inf, p_default == -Inf, label = lab)
      ok <- is.finite(p_default)
      expect_lte(max(abs(p_small[ok] - p_default[ok]) /
                       pmax(1, abs(p_default[ok]))),
                 if (prec == "double") 1e-12 else 1e-5, label = lab)
      expect_equal(ll_small, ll_default, tolerance = cuda_tol[[prec]],
                   label = lab)
      if (prec == "double") {
        expect_log_density_equal(p_small[idx],
                                 ref_log_density(x, q[idx, ], fit$H, k),
                                 label = lab)
      }
    }
  }
})

test_that("CUDA: single precision at n = 1e5 is within 1e-5 of double", {
  skip_without_gpu()
  x <- ref_data(1e5, 2, seed = 810)
  q <- ref_queries(x, 5000, seed = 811)
  for (k in c("gaussian", "epanechnikov")) {
    p64 <- predict(kde_gpu(x, kernel = k, backend = "cuda",
                           precision = "double"), q, log = TRUE)
    p32 <- predict(kde_gpu(x, kernel = k, backend = "cuda",
                           precision = "single"), q, log = TRUE)
    ok <- is.finite(p64)
    expect_gt(sum(ok), 4000)
    expect_lte(max(abs(p32[ok] - p64[ok]) / pmax(1, abs(p64[ok]))), 1e-5,
               label = k)
    idx <- c(1:10, 4990:4999)
    expect_log_density_equal(p64[idx],
                             ref_log_density(x, q[idx, ], kde_gpu(x)$H, k),
                             label = k)
  }
})

test_that("CUDA: the tensor-core paths (single gaussian, d = 3, 16, 21, 64) match the reference", {
  skip_without_gpu()
  for (d in c(3, 16, 21, 64)) {
    x <- ref_data(700, d, seed = 840 + d)
    q <- ref_queries(x, 150, seed = 850 + d)
    # Queries beyond fp16's range (2^15 bandwidths): the d >= 16 kernel
    # stores such rows scaled by a power of two.
    far <- rbind(colMeans(x) + c(1e5, rep(0, d - 1)),
                 colMeans(x) - c(rep(0, d - 1), 3e7))
    q <- rbind(q, far)
    # Half the normal-reference H: in single precision the expanded form
    # |q|^2 + |x|^2 - 2 q.x loses accuracy when the bandwidth is far below
    # the data's spread (harness tcacc "narrow": 2e-5 to 3e-5 at a 5x
    # narrower bandwidth, with or without the tensor cores).
    H <- 0.5 * kde_gpu(x, backend = "cpu")$H
    set.seed(870 + d)
    w <- rexp(700)
    for (wt in list(NULL, w)) {
      lab <- sprintf("cuda single gaussian d=%d%s", d,
                     if (is.null(wt)) "" else " weighted")
      fit <- kde_gpu(x, H = H, weights = wt, backend = "cuda",
                     precision = "single")
      expect_log_density_equal(predict(fit, q, log = TRUE),
                               ref_log_density(x, q, H, "gaussian", wt),
                               tol = cuda_tol[["single"]], label = lab)
      # Leave-one-out: the kernels skip a query's own point.
      cpu <- kde_gpu(x, H = H, weights = wt, backend = "cpu")
      expect_equal(as.numeric(logLik(fit)), as.numeric(logLik(cpu)),
                   tolerance = cuda_tol[["single"]], label = lab)
    }
  }
})

test_that("CUDA: matches the CPU backend on the same fit", {
  skip_without_gpu()
  x <- ref_data(2000, 3, seed = 820)
  q <- ref_queries(x, 500, seed = 821)
  for (k in ref_kernels) {
    cpu <- predict(kde_gpu(x, kernel = k, backend = "cpu"), q, log = TRUE)
    gpu <- predict(kde_gpu(x, kernel = k, backend = "cuda"), q, log = TRUE)
    expect_log_density_equal(gpu, cpu, tol = 1e-10, label = k)
  }
  expect_identical(kde_gpu(x, backend = "auto")$backend, "cuda")
  expect_output(print(kde_gpu(x, backend = "cuda")), "cuda")
})

test_that("CUDA: GPU draws are reproducible under set.seed, whatever the batch size", {
  skip_without_gpu()
  # (Their law is checked in test-sample.R, against the same references as
  # the CPU's draws.)
  for (d in c(1, 3)) {
    fit <- kde_gpu(ref_data(50, d, seed = 830), kernel = "cosine", backend = "cuda",
                   precision = "single")
    set.seed(1)
    a <- sample(fit, 3e4)
    b <- sample(fit, 3e4) # R's generator moved on: new draws
    expect_false(isTRUE(all.equal(a, b)))
    set.seed(1)
    expect_identical(sample(fit, 3e4), a)
    # Batches of a few thousand draws (a small memory budget): same draws.
    set.seed(1)
    small <- with_kde_options(list(kdegpu.gpu_memory = 2^16), sample(fit, 3e4))
    expect_identical(small, a)
    # Small sizes stay with R's sampler.
    set.seed(2)
    expect_length(ref_as_matrix(sample(fit, 100)), 100 * d)
  }
})

test_that("CUDA: errors in GPU sampling are R errors", {
  skip_without_gpu()
  fit <- kde_gpu(ref_data(2000, 3, seed = 831), backend = "cuda")
  expect_error(with_kde_options(list(kdegpu.gpu_memory = 1000), sample(fit, 2e4)),
               "budget")
  entry <- kdegpu:::C_kdegpu_sample_cuda
  ok <- function(cumulative = cumsum(rep(0.5, 2)), seed = c(1, 2), size = 1e4) {
    .Call(entry, matrix(0, 2, 1), cumulative, matrix(1, 1, 1), 0L, size, seed, 0L, 0,
          1L, -1)
  }
  expect_equal(dim(ok()), c(1e4, 1L))
  expect_error(ok(cumulative = c(0.7, 0.5)), "`cumulative`")
  expect_error(ok(cumulative = c(0.5, 0.9)), "`cumulative`")
  expect_error(ok(seed = c(-1, 2)), "`seed`")
  expect_error(ok(seed = 1), "`seed`")
  expect_error(ok(size = -1), "`size`")
  expect_error(ok(size = 0.5), "`size`")
})
