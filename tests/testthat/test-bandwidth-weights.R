# The rules nrd0 and nrd honour weights (weighted sd and quartiles, effective
# sample size 1 / sum(w^2)), and `adjust` multiplies the selected bandwidth.

# bw.nrd0()'s and bw.nrd()'s formulas with weights, written out from the
# definitions: sd from the weighted variance with cov.wt()'s correction,
# quartiles by interpolating the sorted values placed at the centres of
# their weight shares (rescaled to run from 0 to 1).
ref_weighted_rule <- function(x, w, rule) {
  keep <- w > 0
  x <- x[keep]
  w <- w[keep] / sum(w[keep])
  o <- order(x)
  x <- x[o]
  w <- w[o]
  mu <- sum(w * x)
  s <- sqrt(sum(w * (x - mu)^2) / (1 - sum(w^2)))
  centre <- cumsum(w) - w / 2
  position <- (centre - centre[1]) / (centre[length(x)] - centre[1])
  q <- approx(position, x, c(0.25, 0.75))$y
  n_eff <- 1 / sum(w^2)
  spread <- min(s, (q[2] - q[1]) / 1.34)
  if (rule == "nrd0") 0.9 * spread * n_eff^(-0.2) else 1.06 * spread * n_eff^(-0.2)
}

test_that("nrd0 and nrd equal stats::bw.nrd0() and bw.nrd() without weights", {
  for (x in list(faithful$eruptions, precip, c(1, 1, 1, 1, 2), c(5, 5))) {
    expect_equal(kde_gpu(x, bw = "nrd0", backend = "cpu")$bw, stats::bw.nrd0(x),
                 tolerance = 1e-14)
    expect_equal(kde_gpu(x, bw = "nrd0", weights = rep(2, length(x)), backend = "cpu")$bw,
                 stats::bw.nrd0(x), tolerance = 1e-14)
  }
  for (x in list(faithful$eruptions, precip)) {
    expect_equal(kde_gpu(x, bw = "nrd", backend = "cpu")$bw, stats::bw.nrd(x), tolerance = 1e-14)
  }
  # Per column in d > 1.
  fit <- kde_gpu(faithful, bw = "nrd0", backend = "cpu")
  expect_equal(unname(fit$bw), unname(vapply(faithful, stats::bw.nrd0, 0)), tolerance = 1e-14)
})

test_that("nrd0 and nrd honour weights", {
  x <- faithful$eruptions
  set.seed(510)
  w <- rexp(length(x))
  for (rule in c("nrd0", "nrd")) {
    fit <- kde_gpu(x, bw = rule, weights = w, backend = "cpu")
    expect_equal(fit$bw, ref_weighted_rule(x, w, rule), tolerance = 1e-12)
    # Weighting the long eruptions up moves the bandwidth off the unweighted one.
    expect_false(isTRUE(all.equal(fit$bw, kde_gpu(x, bw = rule, backend = "cpu")$bw)))
    # Only the weights' proportions matter.
    expect_equal(kde_gpu(x, bw = rule, weights = 7 * w, backend = "cpu")$bw, fit$bw,
                 tolerance = 1e-14)
  }
  # Points of weight 0 are as if dropped.
  w0 <- rep(c(1, 0, 1), length.out = length(x))
  expect_equal(kde_gpu(x, bw = "nrd0", weights = w0, backend = "cpu")$bw,
               stats::bw.nrd0(x[w0 > 0]), tolerance = 1e-14)
  # In d > 1, column by column.
  fit2 <- kde_gpu(faithful, bw = "nrd", weights = w, backend = "cpu")
  expect_equal(unname(fit2$bw), c(ref_weighted_rule(faithful[[1]], w, "nrd"),
                                  ref_weighted_rule(faithful[[2]], w, "nrd")),
               tolerance = 1e-12)
  expect_error(kde_gpu(c(1, 2, 3), bw = "nrd0", weights = c(0, 1, 0), backend = "cpu"),
               "`bw`.*positive weight")
})

test_that("adjust multiplies the selected bandwidth, as in density()", {
  x <- faithful$eruptions
  base <- kde_gpu(x, backend = "cpu")
  wide <- kde_gpu(x, adjust = 2, backend = "cpu")
  expect_equal(wide$bw, 2 * base$bw, tolerance = 1e-14)
  expect_equal(wide$bw, stats::density(x, adjust = 2)$bw, tolerance = 1e-14)
  expect_equal(kde_gpu(x, bw = 0.3, adjust = 0.5, backend = "cpu")$bw, 0.15, tolerance = 1e-14)
  full <- kde_gpu(faithful, backend = "cpu")
  expect_equal(kde_gpu(faithful, adjust = 1.5, backend = "cpu")$H, 2.25 * full$H,
               tolerance = 1e-14)
  expect_equal(kde_gpu(faithful, H = full$H, adjust = 3, backend = "cpu")$H, 9 * full$H,
               tolerance = 1e-14)
  expect_equal(unname(kde_gpu(faithful, bw = c(0.3, 5), adjust = 2, backend = "cpu")$bw),
               c(0.6, 10), tolerance = 1e-14)
  # The density is the one at the adjusted bandwidth.
  expect_equal(predict(wide, c(2, 4)), predict(kde_gpu(x, bw = 2 * base$bw, backend = "cpu"),
                                               c(2, 4)), tolerance = 1e-14)
  expect_output(print(wide), "adjust = 2")
  expect_output(print(base), "rule nrd0\\)")
})

test_that("a bad adjust is an error that names it", {
  for (bad in list(0, -1, NA, Inf, c(1, 2), "2", NULL)) {
    expect_error(kde_gpu(faithful$eruptions, adjust = bad, backend = "cpu"), "`adjust`")
  }
})

test_that("weighted_cov() is stats::cov.wt()'s covariance, offset data and zero weights included", {
  set.seed(11)
  for (d in c(1L, 3L)) {
    x <- matrix(rnorm(200 * d, mean = 1e4), ncol = d, dimnames = list(NULL, letters[seq_len(d)]))
    w <- runif(200)
    w[1:5] <- 0
    expected <- stats::cov.wt(x, wt = w / sum(w))$cov
    got <- kdegpu:::weighted_cov(x, w)
    expect_equal(got, expected, tolerance = 1e-12)
    expect_identical(dimnames(got), dimnames(expected))
  }
})
