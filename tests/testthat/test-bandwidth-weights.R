# The rules nrd0 and nrd honour weights (weighted sd and quartiles, effective
# sample size 1 / sum(w^2)), and `adjust` multiplies the selected bandwidth.

# bw.nrd0()'s and bw.nrd()'s formulas with weights, written out from the
# definitions: sd from the weighted variance with cov.wt()'s correction,
# quartiles by interpolating the sorted values, the i-th at C_{i-1} /
# (1 - w_i) (C the cumulative weight: (i - 1) / (n - 1) for equal weights).
ref_weighted_rule <- function(x, w, rule) {
  keep <- w > 0
  x <- x[keep]
  w <- w[keep] / sum(w[keep])
  o <- order(x)
  x <- x[o]
  w <- w[o]
  mu <- sum(w * x)
  s <- sqrt(sum(w * (x - mu)^2) / (1 - sum(w^2)))
  position <- (cumsum(w) - w) / (1 - w)
  q <- approx(position, x, c(0.25, 0.75), ties = "ordered")$y
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
  # One point of positive weight has no spread: bw.nrd0()'s fallback, |x| (n = 1).
  expect_equal(kde_gpu(c(1, 2, 3), bw = "nrd0", weights = c(0, 1, 0), backend = "cpu")$bw,
               0.9 * 2)
  expect_error(kde_gpu(c(1, 2, 3), bw = "nrd", weights = c(0, 1, 0), backend = "cpu"),
               "`x` has one point of positive weight \\(row 2.*rule \"nrd\"")
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

test_that("zero spread takes bw.nrd0()'s fallback in 1-D, decided exactly", {
  # identical values: the weighted mean's rounding is not a spread
  for (x in list(rep(3, 10), rep(0.1, 7), rep(-1e-3, 3), rep(0, 4), c(5, 5))) {
    expect_equal(kde_gpu(x, backend = "cpu")$bw, stats::bw.nrd0(x), tolerance = 1e-15)
    expect_equal(kde_gpu(x, weights = seq_along(x), backend = "cpu")$bw,
                 0.9 * (if (x[1] != 0) abs(x[1]) else 1) * (1 / sum((seq_along(x) / sum(seq_along(x)))^2))^(-0.2),
                 tolerance = 1e-14)
  }
  # one point of positive weight among others: no spread, |x| with n = 1
  expect_equal(kde_gpu(c(1, 7, 3), weights = c(0, 2, 0), backend = "cpu")$bw, 0.9 * 7)
  # the other rules have no fallback (bw.nrd() gives 0): a clear error
  for (rule in c("nrd", "scott", "silverman")) {
    expect_error(kde_gpu(rep(3, 10), bw = rule, backend = "cpu"),
                 sprintf("`x` has no spread: all its values of positive weight are 3, so rule \"%s\"",
                         rule))
  }
})

test_that("zero spread in d > 1 is an error naming the cause, for every rule", {
  x <- cbind(a = c(1, 4, 2, 8, 5), b = 3)
  for (rule in c("nrd0", "nrd", "scott", "silverman")) {
    expect_error(kde_gpu(x, bw = rule, backend = "cpu"),
                 sprintf("`x` column 2 \\(`b`\\) has no spread: all its values of positive weight are 3, so rule \"%s\"",
                         rule))
    expect_error(kde_gpu(cbind(1:5, c(2, 1, 4, 3, 5)), bw = rule, weights = c(0, 0, 1, 0, 0),
                         backend = "cpu"),
                 "`x` has one point of positive weight \\(row 3")
  }
  # constant only among the points of positive weight
  expect_error(kde_gpu(cbind(1:4, c(9, 2, 2, 2)), weights = c(0, 1, 1, 1), backend = "cpu"),
               "`x` column 2 has no spread: all its values of positive weight are 2")
})

test_that("a negligible weight acts as its weight says, for every rule", {
  x <- c(0, 1, 2, 50)
  for (rule in c("nrd0", "nrd", "scott", "silverman")) {
    reference <- kde_gpu(x[1:3], bw = rule, backend = "cpu")$bw
    expect_equal(kde_gpu(x, bw = rule, weights = c(1, 1, 1, 1e-300), backend = "cpu")$bw,
                 reference, tolerance = 1e-14, label = rule)
    expect_equal(kde_gpu(x, bw = rule, weights = c(1, 1, 1, 0), backend = "cpu")$bw,
                 reference, tolerance = 1e-14, label = rule)
    # a value of negligible weight inside the data, too
    expect_equal(kde_gpu(c(0, 1, 2, 50), bw = rule, weights = c(1, 1e-300, 1, 1), backend = "cpu")$bw,
                 kde_gpu(c(0, 2, 50), bw = rule, backend = "cpu")$bw, tolerance = 1e-14, label = rule)
  }
  expect_equal(kde_gpu(x[1:3], bw = "nrd0", backend = "cpu")$bw, stats::bw.nrd0(0:2))
  # small but not negligible: the quartiles move continuously, not as a full point's share
  small <- kde_gpu(x, weights = c(1, 1, 1, 1e-10), backend = "cpu")$bw
  expect_equal(small, stats::bw.nrd0(0:2), tolerance = 1e-8)
  # in d > 1, the same
  x2 <- cbind(c(0, 1, 2, 50), c(3, 1, 2, -40))
  for (rule in c("nrd0", "nrd", "scott", "silverman")) {
    expect_equal(kde_gpu(x2, bw = rule, weights = c(1, 1, 1, 1e-300), backend = "cpu")$H,
                 kde_gpu(x2[1:3, ], bw = rule, backend = "cpu")$H, tolerance = 1e-14, label = rule)
  }
  # one point of weight that counts: no spread
  expect_equal(kde_gpu(c(4, 9), weights = c(1, 1e-300), backend = "cpu")$bw, 0.9 * 4)
})

test_that("weights whose total overflows are normalised as their proportions say", {
  x <- c(1, 2, 3, 7)
  expect_equal(kde_gpu(x, weights = rep(1e308, 4), backend = "cpu")$bw, stats::bw.nrd0(x),
               tolerance = 1e-15)
  fit <- kde_gpu(x, weights = c(1e308, 1e308, 1e308, 0.5e308), backend = "cpu")
  expect_equal(fit$weights, c(2, 2, 2, 1) / 7, tolerance = 1e-15)
  expect_equal(predict(fit, 2.5),
               predict(kde_gpu(x, weights = c(2, 2, 2, 1), backend = "cpu"), 2.5), tolerance = 1e-14)
  x2 <- cbind(x, c(3, 1, 4, 1))
  fit2 <- kde_gpu(x2, weights = rep(1e308, 4), backend = "cpu")
  expect_equal(predict(fit2, c(2, 2)), predict(kde_gpu(x2, backend = "cpu"), c(2, 2)),
               tolerance = 1e-14)
})

test_that("a point of weight 0 takes no part in the weighted covariance, however far it lies", {
  set.seed(950)
  x <- matrix(rnorm(200, sd = 1e-10), ncol = 2)
  w <- runif(100)
  ref <- stats::cov.wt(x, wt = w / sum(w))$cov
  for (far in c(1e300, -1e308, 1e-300)) {
    expect_equal(kdegpu:::weighted_cov(rbind(x, far), c(w, 0)), ref, tolerance = 1e-12,
                 label = format(far))
  }
})

test_that("the weights' and columns' one-pass summaries match plain R", {
  set.seed(630)
  w <- c(rexp(5e4), 0, 0, 1e-300, rexp(5e4))
  facts <- kdegpu:::weight_facts(w)
  # double sums in blocks of 8192 (R's sum() accumulates in long double)
  expect_equal(facts[["total"]], sum(w), tolerance = 1e-12)
  expect_equal(facts[["sum_squares"]], sum(w^2), tolerance = 1e-12)
  expect_identical(facts[["smallest"]], min(w[w > 0]))
  expect_identical(facts[["largest"]], max(w))
  expect_identical(facts[["which_largest"]], as.double(which.max(w)))
  expect_identical(facts[["positive"]], as.double(sum(w > 0)))
  none <- kdegpu:::weight_facts(c(0, 0))
  expect_identical(none[["smallest"]], Inf)
  expect_identical(none[["positive"]], 0)
  x <- cbind(rnorm(length(w)), -3e300 * runif(length(w)), 1e-300)
  expect_equal(kdegpu:::weighted_centre(x, w), drop(crossprod(w, x)), tolerance = 1e-12)
  expect_identical(kdegpu:::column_magnitudes(x), apply(abs(x), 2, max))
})
