# The CPU thread count (option kdegpu.threads) changes speed, not results.

test_that("results are identical with 1 and 2 threads", {
  x <- ref_data(3001, 3, seed = 600)
  q <- ref_queries(x, 997, seed = 601)
  set.seed(602)
  w <- runif(3001)
  for (k in c("gaussian", "epanechnikov", "exponential")) {
    fit <- kde_gpu(x, kernel = k, weights = w, backend = "cpu")
    with_kde_options(list(kdegpu.threads = 1), {
      p1 <- predict(fit, q, log = TRUE)
      l1 <- logLik(fit)
    })
    with_kde_options(list(kdegpu.threads = 2), {
      p2 <- predict(fit, q, log = TRUE)
      l2 <- logLik(fit)
    })
    expect_identical(p1, p2, label = k)
    expect_identical(l1, l2, label = k)
    expect_log_density_equal(p1, ref_log_density(x, q, fit$H, k, w),
                             label = k)
  }
})

test_that("more threads than cores or queries still gives the same answer", {
  x <- ref_data(200, 2, seed = 610)
  q <- ref_queries(x, 3, seed = 611)
  fit <- kde_gpu(x, bw = 0.5, backend = "cpu")
  p1 <- with_kde_options(list(kdegpu.threads = 1), predict(fit, q))
  p64 <- with_kde_options(list(kdegpu.threads = 64), predict(fit, q))
  expect_identical(p64, p1)
})

test_that("kdegpu_info()$threads is a positive integer", {
  expect_identical(with_kde_options(list(kdegpu.threads = 1),
                                    kdegpu_info()$threads), 1L)
})

test_that("small jobs run on one thread, large ones on all that are allowed", {
  # Threads from the work (src/threads.c), capped by kdegpu.threads: a small
  # evaluation on a shared machine ran 2.4-3x slower on 2 threads than on 1.
  entry <- kdegpu:::C_kdegpu_threads_for_work
  all <- kdegpu_info()$threads
  expect_identical(.Call(entry, 0L, 0), 1L)
  expect_identical(.Call(entry, 0L, 272 * 272 * 2), 1L)   # faithful, leave one out
  expect_identical(.Call(entry, 0L, 1e12), all)
  expect_identical(.Call(entry, 1L, 1e12), 1L)
  expect_identical(.Call(entry, 64L, 1e12), all)
  expect_identical(.Call(entry, 0L, 2.5e7), min(all, 2L))
  expect_error(.Call(entry, 0L, NA_real_), "`work`")
  # and the answer stays that of one thread where a job crosses the line
  x <- ref_data(3000, 2, seed = 620)
  fit <- kde_gpu(x, bw = 0.3, backend = "cpu")
  for (m in c(10, 5000)) {
    q <- ref_queries(x, m, seed = 621)
    p1 <- with_kde_options(list(kdegpu.threads = 1), predict(fit, q, type = "cdf"))
    p2 <- with_kde_options(list(kdegpu.threads = 2), predict(fit, q, type = "cdf"))
    expect_identical(p1, p2)
  }
})

test_that("a fit is the same with 1 and 2 threads: its order, points, weights and centre", {
  # 3e5 points: the k-d order's top levels are partitioned by several
  # tasks, and the sums run in 37 blocks
  set.seed(620)
  x <- matrix(rnorm(3e5 * 3), ncol = 3)
  x[1:1000, 1] <- 0 # ties in the order's keys
  w <- rexp(3e5)
  fits <- lapply(c(1, 2), function(threads) {
    with_kde_options(list(kdegpu.threads = threads), kde_gpu(x, weights = w, backend = "cpu"))
  })
  for (part in c("order", "z", "tile_weights", "center", "H")) {
    expect_identical(fits[[1]][[part]], fits[[2]][[part]], label = part)
  }
  fit <- fits[[1]]
  expect_identical(fit$tile_weights, fit$weights[fit$order])
  expect_equal(sort(fit$order), seq_len(3e5))
  expect_equal(unname(fit$center), drop(crossprod(w / sum(w), x)), tolerance = 1e-13)
  expect_equal(fit$z, kdegpu:::whiten(fit, x)[fit$order, ], tolerance = 1e-15)
})

test_that("the k-d order ends on keys with few distinct values, the same for any thread count", {
  set.seed(621)
  x <- matrix(as.double(sample(c(0, 0, 0, 1, 2), 3e5 * 3, TRUE)), ncol = 3)
  fits <- lapply(c(1, 2), function(threads) {
    with_kde_options(list(kdegpu.threads = threads), kde_gpu(x, bw = 0.5, backend = "cpu"))
  })
  expect_identical(fits[[1]]$order, fits[[2]]$order)
  expect_equal(sort(fits[[1]]$order), seq_len(3e5))
  q <- rbind(c(0, 0, 0), c(1, 2, 0.5))
  expect_log_density_equal(predict(fits[[1]], q, log = TRUE), ref_log_density(x, q, fits[[1]]$H, "gaussian"))
})

test_that("densities are R's exp() of the log-densities, to the bit, on any thread count", {
  # long enough for several threads (the throttle: 1e7 units a thread)
  set.seed(603)
  v <- c(rnorm(2e6, -3, 40), -Inf, Inf, NA, NaN, -745.2, 709.8, 710, -1e300, 1e300, 0, -0)
  names(v) <- sprintf("q%d", seq_along(v))
  for (threads in c(1, 2)) {
    with_kde_options(list(kdegpu.threads = threads), {
      e <- kdegpu:::exp_on_cores(v)
    })
    expect_identical(e, exp(v), label = sprintf("exp on %d threads", threads))
  }
  # NA stays NA and NaN stays NaN, as R keeps them
  e <- kdegpu:::exp_on_cores(c(NA, NaN))
  expect_true(is.na(e[1]) && !is.nan(e[1]))
  expect_true(is.nan(e[2]))
  # predict()'s densities are exactly exp() of its log-densities, names kept
  x <- ref_data(2000, 2, seed = 604)
  q <- ref_queries(x, 300, seed = 605)
  rownames(q) <- sprintf("p%d", seq_len(nrow(q)))
  fit <- kde_gpu(x, backend = "cpu")
  lf <- predict(fit, q, log = TRUE)
  expect_identical(predict(fit, q), exp(lf))
  expect_identical(names(predict(fit, q)), rownames(q))
})
