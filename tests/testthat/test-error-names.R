# Every exported function, for each of its arguments: a bad value gives an
# error whose message names that argument (backticked), as the user wrote
# it; an option's bad value names the option. The list of functions comes
# from the namespace, so a new export without rows here fails.

autoplot.kde_gpu <- kdegpu:::autoplot.kde_gpu # registered lazily, for ggplot2
f1 <- kde_gpu(faithful$eruptions, backend = "cpu")
f2 <- kde_gpu(faithful, backend = "cpu")
x1 <- faithful$eruptions
fc <- kde_classifier(iris[, 1:2], iris$Species, bw = 0.3, backend = "cpu")

# One row per (function, argument): a call with one bad value. Arguments
# without a row are listed in `no_bad_value` with the reason.
bad_calls <- list(
  kde_gpu = list(
    x = quote(kde_gpu("a", backend = "cpu")),
    bw = quote(kde_gpu(x1, bw = -1, backend = "cpu")),
    H = quote(kde_gpu(x1, H = matrix(-1), backend = "cpu")),
    kernel = quote(kde_gpu(x1, kernel = "no", backend = "cpu")),
    weights = quote(kde_gpu(x1, weights = -x1, backend = "cpu")),
    backend = quote(kde_gpu(x1, backend = "tpu")),
    precision = quote(kde_gpu(x1, precision = "half", backend = "cpu")),
    adjust = quote(kde_gpu(x1, adjust = -1, backend = "cpu")),
    lower = quote(kde_gpu(x1, lower = 3, backend = "cpu")),
    upper = quote(kde_gpu(x1, upper = 3, backend = "cpu")),
    debias = quote(kde_gpu(x1, debias = NA, backend = "cpu")),
    adaptive = quote(kde_gpu(x1, adaptive = "yes", backend = "cpu")),
    alpha = quote(kde_gpu(x1, adaptive = TRUE, alpha = 2, backend = "cpu")),
    lambda = quote(kde_gpu(data.frame(y = x1, g = factor(x1 > 3)), lambda = 2, backend = "cpu")),
    factor_kernel = quote(kde_gpu(data.frame(y = x1, g = factor(x1 > 3)), lambda = 0.1,
                                  factor_kernel = "no", backend = "cpu")),
    ordered_kernel = quote(kde_gpu(data.frame(y = x1, g = ordered(x1 > 3)), lambda = 0.1,
                                   ordered_kernel = "no", backend = "cpu"))
  ),
  bw_plugin = list(
    x = quote(bw_plugin(5, backend = "cpu")),
    shape = quote(bw_plugin(x1, shape = "no", backend = "cpu")),
    weights = quote(bw_plugin(faithful, weights = c(1, rep(0, 271)), backend = "cpu")),
    backend = quote(bw_plugin(x1, backend = "tpu")),
    ... = quote(bw_plugin(x1, nosuch = 1, backend = "cpu"))
  ),
  bw_scv = list(
    x = quote(bw_scv(5, backend = "cpu")),
    shape = quote(bw_scv(x1, shape = "no", backend = "cpu")),
    weights = quote(bw_scv(faithful, weights = c(1, rep(0, 271)), backend = "cpu")),
    backend = quote(bw_scv(faithful, backend = "tpu")),
    ... = quote(bw_scv(faithful, nosuch = 1, backend = "cpu"))
  ),
  bw_sj = list(
    x = quote(bw_sj(5, backend = "cpu")),
    method = quote(bw_sj(x1, method = "no", backend = "cpu")),
    weights = quote(bw_sj(x1, weights = c(1, rep(0, 271)), backend = "cpu")),
    backend = quote(bw_sj(x1, backend = "tpu")),
    ... = quote(bw_sj(x1, nosuch = 1, backend = "cpu"))
  ),
  bw_lscv = list(
    x = quote(bw_lscv(5, backend = "cpu")),
    shape = quote(bw_lscv(x1, shape = "no", backend = "cpu")),
    weights = quote(bw_lscv(x1, weights = -x1, backend = "cpu")),
    range = quote(bw_lscv(x1, range = c(-1, 1), backend = "cpu")),
    grid = quote(bw_lscv(x1, grid = 0, backend = "cpu")),
    reltol = quote(bw_lscv(x1, reltol = NA, backend = "cpu")),
    kernel = quote(bw_lscv(x1, kernel = "no", backend = "cpu")),
    backend = quote(bw_lscv(x1, backend = "tpu")),
    precision = quote(bw_lscv(x1, precision = "half", backend = "cpu")),
    cluster = quote(bw_lscv(x1, cluster = "no", backend = "cpu")),
    tolerance = quote(bw_lscv(x1, tolerance = 2, backend = "cpu")),
    factor_kernel = quote(bw_lscv(data.frame(y = x1, g = factor(x1 > 3)),
                                  factor_kernel = "no", backend = "cpu")),
    ordered_kernel = quote(bw_lscv(data.frame(y = x1, g = ordered(x1 > 3)),
                                   ordered_kernel = "no", backend = "cpu")),
    ... = quote(bw_lscv(x1, nosuch = 1, backend = "cpu"))
  ),
  bw_mlcv = list(
    x = quote(bw_mlcv(5, backend = "cpu")),
    shape = quote(bw_mlcv(x1, shape = "no", backend = "cpu")),
    weights = quote(bw_mlcv(x1, weights = -x1, backend = "cpu")),
    range = quote(bw_mlcv(x1, range = c(-1, 1), backend = "cpu")),
    grid = quote(bw_mlcv(x1, grid = 0, backend = "cpu")),
    reltol = quote(bw_mlcv(x1, reltol = NA, backend = "cpu")),
    kernel = quote(bw_mlcv(x1, kernel = "no", backend = "cpu")),
    backend = quote(bw_mlcv(x1, backend = "tpu")),
    precision = quote(bw_mlcv(x1, precision = "half", backend = "cpu")),
    cluster = quote(bw_mlcv(x1, cluster = "no", backend = "cpu")),
    tolerance = quote(bw_mlcv(x1, tolerance = 2, backend = "cpu")),
    lower = quote(bw_mlcv(x1, lower = 3, backend = "cpu")),
    upper = quote(bw_mlcv(x1, upper = 3, backend = "cpu")),
    given = quote(bw_mlcv(x1, given = 1, backend = "cpu")),
    factor_kernel = quote(bw_mlcv(data.frame(y = x1, g = factor(x1 > 3)),
                                  factor_kernel = "no", backend = "cpu")),
    ordered_kernel = quote(bw_mlcv(data.frame(y = x1, g = ordered(x1 > 3)),
                                   ordered_kernel = "no", backend = "cpu")),
    ... = quote(bw_mlcv(x1, nosuch = 1, backend = "cpu"))
  ),
  contour_levels = list(
    fit = quote(contour_levels(1, 0.5)),
    prob = quote(contour_levels(f2, 2)),
    coverage = quote(contour_levels(f2, 0.5, coverage = "nosuch")),
    draws = quote(contour_levels(f2, 0.5, draws = 1)),
    seed = quote(contour_levels(f2, 0.5, seed = NA))
  ),
  kde_grid = list(
    fit = quote(kde_grid(1)),
    n = quote(kde_grid(f2, n = 0)),
    lims = quote(kde_grid(f2, lims = "a")),
    cut = quote(kde_grid(f2, cut = -1)),
    margin = quote(kde_grid(f2, margin = 5))
  ),
  kde_modes = list(
    fit = quote(kde_modes(1)),
    start = quote(kde_modes(f2, start = data.frame(a = 3, b = 70))),
    step_tol = quote(kde_modes(f2, step_tol = -1)),
    merge_tol = quote(kde_modes(f2, merge_tol = -1)),
    max_iter = quote(kde_modes(f2, max_iter = 0.5)),
    min_size = quote(kde_modes(f2, min_size = -1)),
    ... = quote(kde_modes(f2, nosuch = 1))
  ),
  kdegpu_info = list(),
  kde_test = list(
    x1 = quote(kde_test("a", x1, backend = "cpu")),
    x2 = quote(kde_test(x1, c(1, NA), backend = "cpu")),
    H1 = quote(kde_test(x1, x1, H1 = -1, backend = "cpu")),
    H2 = quote(kde_test(x1, x1, H2 = matrix(1, 2, 2), backend = "cpu")),
    backend = quote(kde_test(x1, x1, backend = "tpu")),
    ... = quote(kde_test(x1, x1, nosuch = 1, backend = "cpu"))
  ),
  kde_classifier = list(
    x = quote(kde_classifier("a", iris$Species, backend = "cpu")),
    groups = quote(kde_classifier(iris[, 1:2], iris$Species[-1], backend = "cpu")),
    H = quote(kde_classifier(iris[, 1:2], iris$Species, H = list(diag(2)), backend = "cpu")),
    bw = quote(kde_classifier(iris[, 1:2], iris$Species, bw = -1, backend = "cpu")),
    prior = quote(kde_classifier(iris[, 1:2], iris$Species, prior = c(a = 1), backend = "cpu")),
    kernel = quote(kde_classifier(iris[, 1:2], iris$Species, kernel = "no", backend = "cpu")),
    backend = quote(kde_classifier(iris[, 1:2], iris$Species, backend = "tpu")),
    ... = quote(kde_classifier(iris[, 1:2], iris$Species, nosuch = 1, backend = "cpu"))
  ),
  loo_error = list(
    fit = quote(loo_error(f2)),
    ... = quote(loo_error(fc, nosuch = 1))
  ),
  predict.kde_classifier = list(
    object = quote(predict(structure(list(), class = "kde_classifier"))),
    newdata = quote(predict(fc, matrix(0, 2, 3))),
    type = quote(predict(fc, type = "density")),
    leave_one_out = quote(predict(fc, leave_one_out = NA)),
    ... = quote(predict(fc, nosuch = 1))
  ),
  print.kde_classifier = list(
    x = quote(print(structure(list(), class = "kde_classifier"))),
    ... = quote(print(fc, nosuch = 1))
  ),
  summary.kde_classifier = list(
    object = quote(summary(structure(list(), class = "kde_classifier"))),
    ... = quote(summary(fc, nosuch = 1))
  ),
  sample = list(
    x = quote(sample(structure(list(), class = "kde_gpu"), 1)),
    size = quote(sample(f1, size = -1)),
    replace = quote(sample(f1, 3, replace = FALSE)),
    prob = quote(sample(f1, 3, prob = 1)),
    ... = quote(sample(f1, 3, nosuch = 1))
  ),
  as.density = list(
    x = quote(as.density(f2)),
    n = quote(as.density(f1, n = 0)),
    lims = quote(as.density(f1, lims = c(2, 1))),
    cut = quote(as.density(f1, cut = -1)),
    ... = quote(as.density(f1, nosuch = 1))
  ),
  predict = list(
    object = quote(predict(structure(list(), class = "kde_gpu"))),
    newdata = quote(predict(f2, matrix(0, 2, 3))),
    log = quote(predict(f2, log = NA)),
    leave_one_out = quote(predict(f2, leave_one_out = "a")),
    cluster = quote(predict(f2, cluster = "no")),
    split = quote(predict(f2, split = "no")),
    tolerance = quote(predict(f2, tolerance = 2)),
    type = quote(predict(f2, type = "no")),
    given = quote(predict(f2, given = "no")),
    ... = quote(predict(f2, nosuch = 1))
  ),
  logLik = list(
    object = quote(logLik(structure(list(), class = "kde_gpu"))),
    cluster = quote(logLik(f2, cluster = "no")),
    tolerance = quote(logLik(f2, tolerance = 2)),
    ... = quote(logLik(f2, nosuch = 1))
  ),
  plot = list(
    x = quote(plot(structure(list(), class = "kde_gpu"))),
    prob = quote(plot(f2, prob = 2)),
    n = quote(plot(f2, n = 0)),
    image = quote(plot(f2, image = NA)),
    key = quote(plot(f2, key = NA)),
    fill = quote(plot(f2, fill = NA)),
    main = quote(plot(f2, main = function() 1)),
    xlab = quote(plot(f2, xlab = function() 1)),
    ylab = quote(plot(f2, ylab = function() 1)),
    coverage = quote(plot(f2, coverage = "nosuch")),
    # graphical parameters pass on; those plot() cannot honour are named
    ... = quote(plot(f2, levels = 3))
  ),
  autoplot = list(
    object = quote(autoplot.kde_gpu(structure(list(), class = "kde_gpu"))),
    prob = quote(autoplot.kde_gpu(f2, prob = 2)),
    n = quote(autoplot.kde_gpu(f2, n = 0)),
    margin = quote(autoplot.kde_gpu(f2, margin = 5)),
    ... = quote(autoplot.kde_gpu(f2, nosuch = 1))
  ),
  print = list(
    x = quote(print(structure(list(), class = "kde_gpu"))),
    digits = quote(print(f2, digits = -1)),
    ... = quote(print(f2, nosuch = 1))
  ),
  quantile = list(
    x = quote(quantile(f2, 0.5)),
    probs = quote(quantile(f1, 2)),
    names = quote(quantile(f1, 0.5, names = NA)),
    given = quote(quantile(f2, 0.5, given = data.frame(nope = 1))),
    ... = quote(quantile(f1, 0.5, nosuch = 1))
  ),
  simulate = list(
    object = quote(simulate(structure(list(), class = "kde_gpu"))),
    nsim = quote(simulate(f1, nsim = 0)),
    seed = quote(simulate(f1, seed = "a")),
    ... = quote(simulate(f1, nosuch = 1))
  ),
  summary = list(
    object = quote(summary(structure(list(), class = "kde_gpu"))),
    ... = quote(summary(f1, nosuch = 1))
  ),
  as.data.frame = list(
    x = quote(as.data.frame(structure(list(), class = "kde_gpu"))),
    row.names = quote(as.data.frame(f2, row.names = 1:3)),
    n = quote(as.data.frame(f2, n = 0)),
    lims = quote(as.data.frame(f2, lims = "a")),
    cut = quote(as.data.frame(f2, cut = -1)),
    margin = quote(as.data.frame(f2, margin = 5)),
    ... = quote(as.data.frame(f2, nosuch = 1))
  )
)

# Arguments with no row: no value of them is wrong on its own.
no_bad_value <- list(
  # `optional` is part of as.data.frame()'s generic and ignored, as in base
  # R's methods for classes whose names are fixed
  as.data.frame = "optional"
)

# The functions and methods a user can call: the exports, and the S3
# methods registered for a fit (print() of its helper classes aside); a
# kde_classifier() fit's methods by their full names (generic.class).
exported_functions <- function() {
  ns <- asNamespace("kdegpu")
  exports <- Filter(function(f) is.function(get(f, ns)), getNamespaceExports("kdegpu"))
  registered <- getNamespaceInfo(ns, "S3methods") # generic, class, method
  fit_methods <- sub("^ggplot2::", "", registered[registered[, 2L] == "kde_gpu", 1L])
  classifier_methods <- paste0(registered[registered[, 2L] == "kde_classifier", 1L],
                               ".kde_classifier")
  sort(union(setdiff(exports, c("sample", "as.density")), c(fit_methods, classifier_methods)))
}

arguments_of <- function(fun) {
  ns <- asNamespace("kdegpu")
  f <- get0(paste0(fun, ".kde_gpu"), ns, inherits = FALSE)
  if (is.null(f)) f <- get(fun, ns)
  names(formals(f))
}

test_that("every exported function and fit method has a row per argument", {
  funs <- exported_functions()
  missing_funs <- setdiff(funs, names(bad_calls))
  expect_identical(missing_funs, character(), info = "exports without rows in bad_calls")
  for (fun in intersect(funs, names(bad_calls))) {
    args <- arguments_of(fun)
    missing_args <- as.character(setdiff(args, c(names(bad_calls[[fun]]), no_bad_value[[fun]])))
    expect_identical(missing_args, character(), info = paste(fun, "arguments without rows"))
  }
})

test_that("a bad value of each argument gives an error that names it", {
  for (fun in names(bad_calls)) {
    # autoplot() needs ggplot2 before it checks anything
    if (fun == "autoplot" && !requireNamespace("ggplot2", quietly = TRUE)) next
    for (arg in names(bad_calls[[fun]])) {
      # an unknown argument in `...` is named as written
      name <- if (arg != "...") arg else if (fun == "plot") "levels" else "nosuch"
      expect_error(eval(bad_calls[[fun]][[arg]]), paste0("`", name, "`"), fixed = TRUE,
                   info = paste0(fun, "(", arg, ")"))
    }
  }
})

test_that("errors blame the cause, not a symptom or an internal name", {
  # the selectors' data: too few points, weights, scale, collinearity
  expect_error(bw_sj(5), "^`x` has 1 point; bw_sj\\(\\) needs at least 2")
  expect_error(bw_plugin(5), "^`x` has 1 point; bw_plugin\\(\\) needs at least 2")
  expect_error(bw_plugin(faithful, weights = c(1, rep(0, 271)), backend = "cpu"),
               "^`weights` leave 1 point of positive weight")
  expect_error(bw_plugin(faithful * 1e300, backend = "cpu"), "^`x` spans .*overflows")
  expect_error(bw_plugin(faithful * 1e-300, backend = "cpu"), "^`x` spans only .*underflows")
  # (the SJ rule works on the data scaled by a power of 2: it scales with them)
  for (s in c(1e300, 1e-300)) {
    expect_equal(as.numeric(bw_sj(faithful$eruptions * s, backend = "cpu")) / s,
                 as.numeric(bw_sj(faithful$eruptions, backend = "cpu")), tolerance = 1e-12)
  }
  expect_error(bw_plugin(cbind(a = 1:10, b = 1), backend = "cpu"), "^`x` has constant column: b")
  expect_error(bw_plugin(cbind(a = 1:10, b = 1:10), backend = "cpu"), "^`x` has collinear columns")
  expect_error(kde_gpu(faithful, weights = c(1, 1, rep(0, 270)), backend = "cpu"),
               "^`bw` rule \"scott\" gave a singular bandwidth: `weights` leave 2 points in 2 columns")
  expect_error(kde_gpu(faithful * 1e300, backend = "cpu"),
               "^`x` is on a scale kdegpu cannot compute at .*overflows")
  # bandwidths whose square leaves double precision: the fit names `bw`
  expect_error(kde_gpu(c(1, 2, 3) * 1e300, bw = 1e299, backend = "cpu"),
               "^`bw` = 1e\\+299 is outside the scale .* overflows")
  expect_error(kde_gpu(c(1, 2, 3) * 1e-300, bw = 1e-301, backend = "cpu"),
               "^`bw` = 1e-301 is outside the scale .* underflows")
  expect_error(kde_gpu(c(1, 2, 3), adjust = 1e200, backend = "cpu"), "^`adjust` takes the bandwidth outside the scale")
  # kde_modes() has no `newdata`
  expect_error(kde_modes(f2, start = data.frame(a = 3, b = 70)), "^`start` has columns a, b")
})

test_that("a bad option names the option", {
  bad_options <- list(
    kdegpu.threads = list(1.5, Inf, 1e10, 0, "a", NA, c(1, 2)),
    kdegpu.tolerance = list("a", 2, -1, NA),
    kdegpu.gpu_memory = list(-1, "a"),
    kdegpu.progress = list(NA, "yes"),
    kdegpu.progress_delay = list(-1, Inf, "a")
  )
  for (option in names(bad_options)) {
    for (value in bad_options[[option]]) {
      # kde_modes() reads the tolerance option too (it has no `tolerance`)
      for (call in list(quote(predict(f1, 1)), quote(logLik(f1)), quote(kde_modes(f1)))) {
        if (option == "kdegpu.gpu_memory") next # read by the CUDA backend only
        expect_error(with_kde_options(setNames(list(value), option), eval(call)),
                     paste0("`options(", option, ")`"), fixed = TRUE,
                     info = paste(option, format(value)))
      }
    }
  }
})
