# Sizes that cross and straddle typical tile / chunk sizes (64, 128, 256,
# 4096, ...), and one large problem checked on a subset of queries.

test_that("n and m that are not multiples of any tile size match the reference", {
  for (d in c(1, 3)) {
    x <- ref_data(1237, d, seed = 200 + d)
    q <- ref_queries(x, 771 - 9, seed = 210 + d)   # 771 rows in all
    expect_equal(nrow(q), 771)
    H <- ref_full_H(d, 0.3, seed = 220 + d)
    set.seed(230 + d)
    w <- runif(nrow(x))
    for (k in c("gaussian", "epanechnikov", "rectangular", "exponential")) {
      fit <- kde_gpu(x, H = H, kernel = k, weights = w, backend = "cpu")
      expect_log_density_equal(predict(fit, q, log = TRUE),
                               ref_log_density(x, q, H, k, w),
                               label = paste(k, "d =", d))
    }
  }
})

test_that("lopsided shapes: tiny n with many queries, many points with one query", {
  x_small <- ref_data(3, 2, seed = 240)
  x_big <- ref_data(5003, 2, seed = 241)
  q_big <- ref_queries(x_big, 4097, seed = 242)
  H <- ref_full_H(2, 0.4, seed = 243)
  for (k in c("gaussian", "biweight")) {
    f_small <- kde_gpu(x_small, H = H, kernel = k, backend = "cpu")
    expect_log_density_equal(predict(f_small, q_big, log = TRUE),
                             ref_log_density(x_small, q_big, H, k),
                             label = paste(k, "n = 3"))
    f_big <- kde_gpu(x_big, H = H, kernel = k, backend = "cpu")
    for (m in c(1, 2, 65)) {
      q <- q_big[seq_len(m), , drop = FALSE]
      expect_log_density_equal(predict(f_big, q, log = TRUE),
                               ref_log_density(x_big, q, H, k),
                               label = paste(k, "m =", m))
    }
  }
})

test_that("n = m = 2e4 in 2-D: full evaluation agrees with the reference on a subset", {
  x <- ref_data(2e4, 2, seed = 250)
  set.seed(251)
  idx <- sort(c(1, 2e4, sample.int(2e4, 198)))
  for (k in c("gaussian", "epanechnikov")) {
    fit <- kde_gpu(x, kernel = k, backend = "cpu")
    all_lp <- predict(fit, log = TRUE)
    expect_length(all_lp, 2e4)
    expect_log_density_equal(all_lp[idx],
                             ref_log_density(x, x[idx, ], fit$H, k),
                             label = k)
    # The same points as an explicit, smaller query set.
    expect_log_density_equal(predict(fit, x[idx, ], log = TRUE), all_lp[idx],
                             tol = 1e-13, label = paste(k, "subset"))
    if (k == "gaussian") {
      # Leave-one-out at this size, through the exact identity
      # f_{-i}(x_i) = (n f(x_i) - K_H(0)) / (n - 1) for equal weights, except
      # at isolated points where n f(x_i) is close to K_H(0) and the identity
      # cancels: those are evaluated directly by the reference.
      n <- nrow(x)
      log_k0 <- ref_log_density(matrix(0, 1, 2), matrix(0, 1, 2), fit$H, k)
      ratio <- n * exp(all_lp - log_k0)
      loo <- log((n * exp(all_lp) - exp(log_k0)) / (n - 1))
      lonely <- which(ratio < 20)
      expect_gt(length(lonely), 0)   # the cancelling case is exercised
      loo[lonely] <- vapply(lonely, function(i) {
        ref_log_density(x[-i, ], x[i, , drop = FALSE], fit$H, k)
      }, numeric(1))
      expect_equal(as.numeric(logLik(fit)), sum(loo), tolerance = 1e-11)
    }
  }
})
