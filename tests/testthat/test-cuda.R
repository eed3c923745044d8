# What only the CUDA backend has: memory-budget batching, single against
# double precision at scale, the tensor-core paths, GPU sampling. Its
# evaluation against the references runs in test-evaluation.R, with the
# CPU's. Skips cleanly without a usable GPU.

cuda_tol <- c(double = 1e-10, single = 1e-5)

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
      # The queries in another order: the same spatial order and batches,
      # so each row's result to the bit, back in its own place.
      perm <- sample.int(nrow(q))
      with_kde_options(list(kdegpu.gpu_memory = 2^20), {
        fit_small <- kde_gpu(x, kernel = k, backend = "cuda", precision = prec)
        p_small <- predict(fit_small, q, log = TRUE)
        p_perm <- predict(fit_small, q[perm, ], log = TRUE)
        ll_small <- as.numeric(logLik(fit_small))
      })
      expect_identical(p_perm[order(perm)], p_small, label = paste(lab, "queries permuted"))
      # -Inf at the same queries, finite values within rounding.
      expect_log_density_equal(p_small, p_default,
                               tol = if (prec == "double") 1e-12 else 1e-5,
                               label = lab)
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
    # -Inf at the same queries, finite values within 1e-5.
    expect_gt(sum(is.finite(p64)), 4000)
    expect_log_density_equal(p32, p64, tol = 1e-5, label = k)
    idx <- c(1:10, 4990:4999)
    expect_log_density_equal(p64[idx],
                             ref_log_density(x, q[idx, ], kde_gpu(x)$H, k),
                             label = k)
  }
})

test_that("CUDA: fits whose tiles mix equal, unequal and zero weights match plain R (d = 1, 2, 3)", {
  skip_without_gpu()
  # The difference-form kernels take a warp's 64 points with one weight
  # per query, and others per pair: equal weights on the left half of the
  # data, unequal ones (some zero) on the right, so a fit has both kinds of
  # tiles, and tiles of each kind lie near every query.
  for (d in 1:3) {
    x <- ref_data(6000, d, seed = 830 + d)
    set.seed(840 + d)
    w <- ifelse(x[, 1] < 0, 1, rexp(nrow(x)) * (runif(nrow(x)) > 0.1))
    q <- ref_queries(x, 400, seed = 850 + d)
    for (precision in c("double", "single")) {
      fit <- kde_gpu(x, weights = w, backend = "cuda", precision = precision)
      ref <- ref_log_density(x, q, fit$H, "gaussian", weights = w)
      expect_log_density_equal(predict(fit, q, log = TRUE), ref,
                               tol = if (precision == "single") 1e-5 else 1e-11,
                               label = sprintf("d = %d, %s", d, precision))
      expect_log_density_equal(predict(fit, q, log = TRUE, tolerance = 0), ref,
                               tol = if (precision == "single") 1e-5 else 1e-11,
                               label = sprintf("d = %d, %s, tolerance 0", d, precision))
    }
  }
})

# Whether the first GPU has the tensor-core kernels' mma.sync (sm_80 on).
gpu_has_tensor_cores <- function() {
  cc <- kdegpu_info()$gpus$compute_capability[[1L]]
  as.numeric(sub("\\..*", "", cc)) >= 8
}

# The path a single-precision Gaussian fit should take at `tolerance`, by
# the rule in src/cuda/model.cu (expanded_rounding), written again here
# from the fit's whitened points: the expanded form (tensor cores where they
# serve) while (0.4 + d / 20) 2^-24 R^2 <= tolerance, R the farthest point
# from their mean in the kernel's storage units (sqrt(log2 e) per
# bandwidth).
expected_single_path <- function(fit, tolerance = default_tolerance[["single"]],
                                 tensor_cores = gpu_has_tensor_cores()) {
  z <- sweep(fit$z, 2, colMeans(fit$z))
  rounding <- (0.4 + ncol(z) / 20) * 2^-24 * max(rowSums(z^2)) * log2(exp(1))
  if (rounding > tolerance) return("difference form")
  if (tensor_cores) "tensor cores" else "expanded form"
}

test_that("CUDA: single precision stays within 1e-5 of double at a bandwidth 5x below Scott's rule, data offset by 1e4 (d = 3, 16, 64)", {
  skip_without_gpu()
  for (d in c(3, 16, 64)) {
    x <- ref_offset_normal(if (d == 3) 1e5 else 2e4, d, seed = 880 + d)
    # at training points (where the kernel sums are largest against the
    # rounding) and at new points from the same law
    q <- rbind(x[1:2000, ], matrix(rnorm(2000 * d), 2000) + 1e4)
    fits <- lapply(c(single = "single", double = "double"), function(p)
      kde_gpu(x, bw = "scott", adjust = 1 / 5, backend = "cuda", precision = p))
    lab <- sprintf("d = %d, Scott / 5, offset 1e4", d)
    # The expanded form would round by ~1e-4..1e-3 here: the fit takes the
    # difference form, and says so, even when the call allows 1e-4.
    expect_identical(expected_single_path(fits$single), "difference form", label = lab)
    expect_identical(expected_single_path(fits$single, 1e-4), "difference form", label = lab)
    expect_output(print(fits$single), "single precision (difference form)", fixed = TRUE)
    expect_log_density_equal(predict(fits$single, q, log = TRUE),
                             predict(fits$double, q, log = TRUE), tol = 1e-5, label = lab)
    # relative error of the densities themselves at the training points
    at <- seq_len(2000)
    expect_lt(max(abs(expm1(predict(fits$single, q[at, ], log = TRUE) -
                            predict(fits$double, q[at, ], log = TRUE)))), 1e-5,
              label = lab)
  }
})

test_that("CUDA: the tensor-core paths (single gaussian, d = 3, 16, 21, 64) serve a tolerance of 1e-4 and match the reference within it", {
  skip_without_gpu()
  # The faster forms serve only where the call's tolerance allows their
  # rounding: at the default (1e-7) these fits take the difference form.
  opt <- options(kdegpu.tolerance = 1e-4)
  on.exit(options(opt))
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
      expect_output(print(fit), expected_single_path(fit, 1e-4), fixed = TRUE)
      expect_log_density_equal(predict(fit, q, log = TRUE),
                               ref_log_density(x, q, H, "gaussian", wt),
                               tol = 2e-4, label = lab)
      # Leave-one-out: the kernels skip a query's own point.
      cpu <- kde_gpu(x, H = H, weights = wt, backend = "cpu")
      expect_equal(as.numeric(logLik(fit)), as.numeric(logLik(cpu)),
                   tolerance = 2e-4, label = lab)
      # the default tolerance: the same fit in the difference form, within
      # the single precision's own rounding
      exact <- predict(fit, q, log = TRUE, tolerance = 1e-7)
      expect_output(print(fit), "(difference form)", fixed = TRUE)
      expect_log_density_equal(exact, ref_log_density(x, q, H, "gaussian", wt),
                               tol = cuda_tol[["single"]], label = lab)
    }
  }
})

test_that("CUDA: backend = 'auto' picks the GPU and print() says so", {
  skip_without_gpu()
  # (The GPU's densities against the CPU's references: test-evaluation.R.)
  x <- ref_data(2000, 3, seed = 820)
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
    # two copies of the fit share the draws: the same draws
    set.seed(1)
    two <- with_kde_options(list(kdegpu.devices = c(0L, 0L)), sample(fit, 3e4))
    expect_identical(two, a)
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
  pair <- kde_gpu(c(0, 0), bw = 1, backend = "cuda")
  model <- kdegpu:::cuda_model(pair)
  ok <- function(cumulative = cumsum(rep(0.5, 2)), seed = c(1, 2), size = 1e4) {
    .Call(entry, model, matrix(0, 2, 1), cumulative, NULL, matrix(1, 1, 1), 0L, size, seed,
          1L, -1)
  }
  expect_equal(dim(ok()), c(1e4, 1L))
  expect_error(ok(cumulative = c(0.7, 0.5)), "`cumulative`")
  expect_error(ok(cumulative = c(0.5, 0.9)), "`cumulative`")
  expect_error(ok(seed = c(-1, 2)), "`seed`")
  expect_error(ok(seed = 1), "`seed`")
  expect_error(ok(size = -1), "`size`")
  expect_error(ok(size = 0.5), "`size`")
  expect_error(.Call(entry, model, matrix(0, 3, 1), c(0.25, 0.5, 1), NULL,
                     matrix(1, 1, 1), 0L, 1e4, c(1, 2), 1L, -1),
               "`model` must be the CUDA model of `train`")
})

test_that("CUDA: several GPUs give one GPU's answer (queries claimed, training split)", {
  skip_without_gpu()
  all_gpus <- several_gpus()
  # Tight clusters far apart: pruning leaves very different work per query,
  # so a pruned evaluation hands its batches to the GPUs as they free up.
  # Queries are claimed in batches where each GPU has at least 16,384 of
  # them (tuning.cuh's kMinQueriesPerDevice), else the GPUs split the
  # training set; `many` and the leave-one-out queries are claimed on every
  # machine (4 GPUs: 67,536 rows).
  n_claimed <- max(50000, 16384 * length(all_gpus) + 2000)
  set.seed(830)
  centers <- matrix(runif(20 * 3, -50, 50), 20, 3)
  x <- centers[sample.int(20, n_claimed, replace = TRUE), ] +
    matrix(rnorm(3 * n_claimed), ncol = 3)
  many <- ref_queries(x, n_claimed, seed = 831) # claimed across GPUs
  few <- ref_queries(x, 200, seed = 832)        # the training set split instead
  tol <- c(double = 1e-12, single = 1e-6)
  on_gpus <- function(devices, kernel, precision, tolerance, budget = NULL) {
    with_kde_options(list(kdegpu.devices = devices, kdegpu.gpu_memory = budget), {
      fit <- kde_gpu(x, kernel = kernel, backend = "cuda", precision = precision)
      list(many = predict(fit, many, log = TRUE, tolerance = tolerance),
           few = predict(fit, few, log = TRUE, tolerance = tolerance),
           loo = predict(fit, log = TRUE, leave_one_out = TRUE, tolerance = tolerance))
    })
  }
  for (k in c("gaussian", "epanechnikov")) {
    for (prec in names(tol)) {
      for (tolerance in list(NULL, 0)) {
        lab <- paste(k, prec, "tolerance", if (is.null(tolerance)) "default" else tolerance)
        one <- on_gpus(0L, k, prec, tolerance)
        two <- on_gpus(all_gpus, k, prec, tolerance)
        # the same batches, split alike, summed in the same order: the same bits
        expect_identical(two$many, one$many, label = paste(lab, "many"))
        expect_identical(two$loo, one$loo, label = paste(lab, "loo"))
        # few queries split the training set instead: within rounding
        expect_log_density_equal(two$few, one$few, tol = tol[[prec]], label = paste(lab, "few"))
      }
    }
  }
  # Training streamed from the host in shards on every GPU.
  one <- on_gpus(0L, "gaussian", "double", NULL, budget = 2^22)
  two <- on_gpus(all_gpus, "gaussian", "double", NULL, budget = 2^22)
  expect_log_density_equal(two$many, one$many, tol = 1e-12, label = "shards")
  expect_log_density_equal(two$few, one$few, tol = 1e-12, label = "shards, few")
})

test_that("CUDA: large query sets go up and their order comes back through the device's shared pinned chunks", {
  skip_without_gpu()
  # 4.5e6 queries in 3-D: 108 MB up and a 36 MB order back, both above the
  # 32 MB where staged_copy.cu takes its two 16 MB pinned chunks, which
  # every fit on the device shares. Two fits use them in turn, the first is
  # released, and the second's answers stay the bits of the first's, the
  # queries permuted included (the same spatial order and batches).
  set.seed(840)
  x <- matrix(rnorm(3 * 20000), ncol = 3)
  q <- matrix(rnorm(3 * 4.5e6, sd = 1.5), ncol = 3)
  perm <- sample.int(nrow(q))
  with_kde_options(list(kdegpu.devices = 0L), {
    first <- kde_gpu(x, backend = "cuda", precision = "single")
    second <- kde_gpu(x, backend = "cuda", precision = "single")
    p_first <- predict(first, q, log = TRUE)
    p_second <- predict(second, q[perm, ], log = TRUE)
    rm(first)
    invisible(gc())
    p_again <- predict(second, q, log = TRUE)
  })
  expect_identical(p_second[order(perm)], p_first)
  expect_identical(p_again, p_first)
  idx <- c(1:5, 2250000:2250004, nrow(q) - 0:4)
  expect_log_density_equal(p_first[idx], ref_log_density(x, q[idx, ], second$H, "gaussian"),
                           tol = 1e-5)
})
