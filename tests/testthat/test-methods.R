# print / summary / plot / logLik / as.density / kdegpu_info.

test_that("print() mentions the backend and returns its argument invisibly", {
  fit <- kde_gpu(ref_data(30, 2, seed = 400), backend = "cpu")
  expect_output(print(fit), "cpu")
  expect_invisible(out <- print(fit))
  expect_identical(out, fit)
  fit1 <- kde_gpu(ref_data(30, 1, seed = 401)[, 1], kernel = "cosine",
                  backend = "cpu")
  expect_output(print(fit1), "cpu")
})

test_that("print() says the count as R holds it and whether the fit is weighted", {
  x <- ref_data(30, 2, seed = 408)
  expect_output(print(kde_gpu(x, backend = "cpu")), "(30 points in 2 dimensions)", fixed = TRUE)
  expect_output(print(kde_gpu(x, weights = c(2, rep(1, 29)), backend = "cpu")),
                "(30 points in 2 dimensions, weighted)", fixed = TRUE)
  # equal weights are no weighting
  expect_output(print(kde_gpu(x, weights = rep(3, 30), backend = "cpu")),
                "(30 points in 2 dimensions)", fixed = TRUE)
  # counts past 2^31 - 1, which sprintf("%d") refuses
  expect_identical(format_count(3e9), "3000000000")
  expect_identical(format_count(1e5), "100000")
  expect_identical(format_count(7L), "7")
})

test_that("summary() runs in 1-D and 3-D", {
  for (d in c(1, 3)) {
    fit <- kde_gpu(ref_data(30, d, seed = 402), backend = "cpu")
    expect_error(s <- summary(fit), NA)
    expect_error(capture.output(print(s)), NA)
  }
})

test_that("plot() works in 1-D, 2-D and 3-D", {
  path <- tempfile(fileext = ".pdf")
  grDevices::pdf(path)
  on.exit({
    grDevices::dev.off()
    unlink(path)
  }, add = TRUE)
  for (d in 1:3) {
    fit <- kde_gpu(ref_data(60, d, seed = 403 + d), backend = "cpu")
    expect_error(plot(fit), NA)
  }
  fit1 <- kde_gpu(ref_data(60, 1, seed = 407), kernel = "epanechnikov",
                  backend = "cpu")
  expect_error(plot(fit1, main = "title", col = 2), NA)
})

test_that("logLik() is a 'logLik' with nobs and the documented df", {
  # Its value, on every backend, is checked in test-evaluation.R. df: the
  # free bandwidth parameters, 1 (scalar), d (diagonal), d(d+1)/2 (full).
  for (d in c(2, 3)) {
    x <- ref_data(60, d, seed = 410 + d)
    set.seed(431)
    w <- rexp(60)
    specs <- list(list(args = list(bw = 0.5), df = 1),
                  list(args = list(bw = seq(0.4, 0.6, length.out = d)), df = d),
                  list(args = list(H = ref_full_H(d, 0.7, seed = 420 + d)),
                       df = d * (d + 1) / 2))
    for (sp in specs) for (wt in list(NULL, w)) {
      ll <- logLik(do.call(kde_gpu, c(list(x, weights = wt, backend = "cpu"),
                                      sp$args)))
      expect_s3_class(ll, "logLik")
      expect_equal(attr(ll, "nobs"), 60)
      expect_equal(attr(ll, "df"), sp$df)
    }
  }
})

test_that("as.density() gives a 'density' whose y is predict() at its x", {
  x <- ref_data(80, 1, seed = 440)[, 1]
  for (k in c("gaussian", "triangular")) {
    fit <- kde_gpu(x, bw = 0.4, kernel = k, backend = "cpu")
    den <- as.density(fit)
    expect_s3_class(den, "density")
    expect_length(den$x, 512)
    expect_length(den$y, 512)
    expect_equal(den$y, predict(fit, den$x), tolerance = 1e-13)
    expect_equal(den$bw, 0.4, tolerance = 1e-14)
    expect_equal(den$n, 80)
    expect_true(is.character(den$data.name))
    expect_true(is.call(den$call))
    expect_true(min(den$x) < min(x) && max(den$x) > max(x))
    expect_true(all(diff(den$x) > 0))
    expect_length(as.density(fit, n = 100)$x, 100)
    expect_output(print(den), "Bandwidth")
    path <- tempfile(fileext = ".pdf")
    grDevices::pdf(path)
    expect_error(plot(den), NA)
    grDevices::dev.off()
    unlink(path)
  }
  # It integrates to about 1 over a grid covering the data (+ 3 bw).
  fit <- kde_gpu(x, bw = 0.4, backend = "cpu")
  den <- as.density(fit, n = 2048)
  mass <- sum(diff(den$x) * (den$y[-1] + den$y[-2048]) / 2)
  expect_equal(mass, 1, tolerance = 5e-3)
})

test_that("kdegpu_info() reports the build and the hardware", {
  info <- kdegpu_info()
  expect_type(info, "list")
  expect_true(all(c("cuda_compiled", "gpus", "openmp", "threads") %in%
                    names(info)))
  expect_true(is.logical(info$cuda_compiled) && length(info$cuda_compiled) == 1)
  expect_true(is.logical(info$openmp) && length(info$openmp) == 1)
  expect_s3_class(info$gpus, "data.frame")
  expect_true(is.integer(info$threads) && length(info$threads) == 1)
  expect_gte(info$threads, 1L)
  if (!isTRUE(info$cuda_compiled)) expect_equal(nrow(info$gpus), 0)
})
