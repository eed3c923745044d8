# kde_gpu(debias = TRUE) (SD-KDE): the estimate of the points moved by
# H score / 2.

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
