# Mixed data (numeric, factor and ordered columns): against a plain-R
# product kernel written here from np's definitions (np.kernels), on every
# backend.

mixed_frame <- function(n, seed) {
  set.seed(seed)
  data.frame(a = rnorm(n), b = rnorm(n),
             g = factor(sample(c("x", "y", "z"), n, TRUE), levels = c("x", "y", "z")),
             o = factor(sample(1:4, n, TRUE), levels = 1:4, ordered = TRUE))
}

# k(s, r) of a discrete kernel: rows s (the query's level), one column per
# training point's level r.
ref_discrete <- function(kernel, levels, lambda, s, r) {
  dist <- abs(s - r)
  switch(kernel,
    aitchisonaitken = ifelse(dist == 0, 1 - lambda, lambda / (levels - 1)),
    liracine_u = ifelse(dist == 0, 1, lambda),
    liracine_o = lambda^dist,
    wangvanryzin = ifelse(dist == 0, 1 - lambda, (1 - lambda) / 2 * lambda^dist),
    racineliyan = lambda^dist / vapply(r, function(ri) sum(lambda^abs(seq_len(levels) - ri)), 0))
}

# log f at the rows of q (a data frame), or leaving each training point out.
ref_mixed <- function(train, q, H, lambda, kernels, weights = NULL, leave_one_out = FALSE) {
  n <- nrow(train)
  w <- if (is.null(weights)) rep(1 / n, n) else weights / sum(weights)
  numeric <- names(train)[vapply(train, is.numeric, NA)]
  categorical <- setdiff(names(train), numeric)
  X <- as.matrix(train[numeric])
  Q <- as.matrix(q[numeric])
  vapply(seq_len(nrow(q)), function(i) {
    k <- rep(1, n)
    if (length(numeric) > 0L) {
      dx <- sweep(X, 2L, Q[i, ])
      k <- exp(-0.5 * rowSums((dx %*% solve(H)) * dx)) /
        sqrt(det(2 * pi * H))
    }
    for (name in categorical) {
      k <- k * ref_discrete(kernels[[name]], nlevels(train[[name]]), lambda[[name]],
                            as.integer(q[[name]][i]), as.integer(train[[name]]))
    }
    if (leave_one_out) {
      log(sum((w * k)[-i]) / (1 - w[i]))
    } else {
      log(sum(w * k))
    }
  }, 0)
}

ref_kernels <- function(factor_kernel, ordered_kernel) {
  list(g = if (factor_kernel == "liracine") "liracine_u" else factor_kernel,
       o = if (ordered_kernel == "liracine") "liracine_o" else ordered_kernel)
}

test_that("every discrete kernel's product estimate matches the plain sum, on every backend", {
  train <- mixed_frame(150, 3101)
  q <- mixed_frame(30, 3102)
  H <- matrix(c(0.3, 0.05, 0.05, 0.2), 2)
  lambda <- c(g = 0.3, o = 0.4)
  w <- rexp(150)
  for (be in eval_backends()) {
    for (fk in c("aitchisonaitken", "liracine")) {
      for (ok in c("racineliyan", "liracine", "wangvanryzin")) {
        for (weights in list(NULL, w)) {
          fit <- kde_on(be, train, H = H, lambda = lambda, factor_kernel = fk,
                        ordered_kernel = ok, weights = weights)
          lab <- be_label(be, fk, ok, if (is.null(weights)) "equal weights" else "weights")
          ref <- ref_mixed(train, q, H, lambda, ref_kernels(fk, ok), weights)
          expect_log_density_equal(unname(predict(fit, q, log = TRUE)), unname(ref), tol = be$tol,
                                   label = lab)
          ref_loo <- ref_mixed(train, train, H, lambda, ref_kernels(fk, ok), weights,
                               leave_one_out = TRUE)
          expect_log_density_equal(predict(fit, log = TRUE, leave_one_out = TRUE), ref_loo,
                                   tol = be$tol, label = paste(lab, "leave one out"))
        }
      }
    }
  }
})

test_that("lambda = 0 counts matching levels only, and the largest lambda ignores the column", {
  train <- mixed_frame(120, 3111)
  q <- mixed_frame(20, 3112)
  H <- diag(c(0.25, 0.3))
  kernels <- ref_kernels("aitchisonaitken", "racineliyan")
  for (be in eval_backends()) {
    for (lambda in list(c(g = 0, o = 0), c(g = 2 / 3, o = 1), c(g = 0, o = 1))) {
      fit <- kde_on(be, train, H = H, lambda = lambda)
      ref <- ref_mixed(train, q, H, lambda, kernels)
      expect_log_density_equal(unname(predict(fit, q, log = TRUE)), unname(ref), tol = be$tol,
                               label = be_label(be, "lambda", paste(lambda, collapse = ",")))
    }
  }
})

test_that("fused and embedded sums agree with the plain sum: skipped tiles, many or only factors", {
  # n = 4000 points in tight clusters by level: far tiles skip (the lower
  # bound takes the worst discrete factor), on every backend
  set.seed(3115)
  n <- 4000
  g <- sample(3L, n, TRUE)
  big <- data.frame(a = rnorm(n, 8 * g, 0.3), b = rnorm(n, sd = 0.3),
                    g = factor(c("x", "y", "z")[g], levels = c("x", "y", "z")),
                    o = factor(sample(1:4, n, TRUE), levels = 1:4, ordered = TRUE))
  # enough queries for the GPU's blocks of 128 to lie within one cluster
  q <- big[sample(n, 600), ]
  q$a <- q$a + rnorm(600, sd = 0.2)
  H <- diag(c(0.05, 0.04))
  kernels <- ref_kernels("aitchisonaitken", "racineliyan")
  # five factor columns: beyond the GPU's fused kernels (the embedding serves)
  set.seed(3116)
  many <- data.frame(y = rnorm(200))
  for (k in 1:5) many[[paste0("f", k)]] <- factor(sample(letters[1:3], 200, TRUE), levels = letters[1:3])
  lambda_many <- stats::setNames(seq(0.1, 0.5, by = 0.1), paste0("f", 1:5))
  kernels_many <- as.list(stats::setNames(rep("aitchisonaitken", 5), names(lambda_many)))
  only <- many[paste0("f", 1:3)]
  for (be in eval_backends()) {
    for (lambda in list(c(g = 0.1, o = 0.2), c(g = 0, o = 0.05))) {
      fit <- kde_on(be, big, H = H, lambda = lambda)
      expect_log_density_equal(unname(predict(fit, q, log = TRUE)),
                               ref_mixed(big, q, H, lambda, kernels), tol = be$tol,
                               label = be_label(be, "clusters", paste(lambda, collapse = ",")))
      # the other clusters' tiles were skipped (with a lambda of 0 the lower
      # bound's worst factor is 0: nothing is); the GPU's query blocks of
      # 128 along a Hilbert curve span two clusters more often than the CPU's of 16
      if (lambda[["g"]] > 0) {
        expect_lt(kdegpu:::pairs_share(fit$inner), if (be$backend == "cpu") 0.75 else 0.95)
      }
    }
    fit <- kde_on(be, many, bw = 0.3, lambda = lambda_many)
    expect_log_density_equal(unname(predict(fit, many[1:30, ], log = TRUE)),
                             ref_mixed(many, many[1:30, ], matrix(0.09), lambda_many,
                                       kernels_many), tol = be$tol,
                             label = be_label(be, "five factors"))
    fit <- kde_on(be, only, lambda = lambda_many[1:3])
    expect_log_density_equal(unname(predict(fit, only[1:30, ], log = TRUE)),
                             ref_mixed(only, only[1:30, ], NULL, lambda_many[1:3],
                                       kernels_many[1:3]), tol = be$tol,
                             label = be_label(be, "factors only"))
  }
})

test_that("with normalised kernels the estimate sums (and integrates) to 1", {
  set.seed(3121)
  cats <- data.frame(g = factor(sample(letters[1:3], 60, TRUE), levels = letters[1:3]),
                     o = factor(sample(1:5, 60, TRUE), levels = 1:5, ordered = TRUE))
  fit <- kde_gpu(cats, lambda = c(0.2, 0.5), backend = "cpu")
  grid <- expand.grid(g = factor(letters[1:3], levels = letters[1:3]),
                      o = factor(1:5, levels = 1:5, ordered = TRUE))
  expect_equal(sum(predict(fit, grid)), 1, tolerance = 1e-13)
  # the plain-R pmf
  ref <- ref_mixed(cats, grid, NULL, c(g = 0.2, o = 0.5),
                   ref_kernels("aitchisonaitken", "racineliyan"))
  expect_equal(unname(predict(fit, grid, log = TRUE)), ref, tolerance = 1e-13)
  one <- data.frame(y = rnorm(80), g = factor(sample(c("u", "v"), 80, TRUE)))
  fit1 <- kde_gpu(one, bw = 0.4, lambda = 0.2, backend = "cpu")
  total <- sum(vapply(c("u", "v"), function(level) {
    stats::integrate(function(y) predict(fit1, data.frame(y = y, g = level)), -Inf, Inf,
                     rel.tol = 1e-10)$value
  }, 0))
  expect_equal(total, 1, tolerance = 1e-8)
})

test_that("conditional densities given factors or numbers are the ratio of two plain sums", {
  train <- mixed_frame(140, 3131)
  q <- mixed_frame(25, 3132)
  H <- matrix(c(0.3, 0.08, 0.08, 0.25), 2)
  lambda <- c(g = 0.25, o = 0.35)
  kernels <- ref_kernels("aitchisonaitken", "racineliyan")
  for (be in eval_backends()) {
    fit <- kde_on(be, train, H = H, lambda = lambda)
    joint <- ref_mixed(train, q, H, lambda, kernels)
    for (given in list(c("g", "o"), "a", c("o", "b"), 3L)) {
      names_given <- if (is.numeric(given)) names(train)[given] else given
      numeric <- intersect(c("a", "b"), names_given)
      margin <- ref_mixed(train[names_given], q[names_given],
                          H[match(numeric, c("a", "b")), match(numeric, c("a", "b")),
                            drop = FALSE], lambda[intersect(names(lambda), names_given)],
                          kernels)
      expect_log_density_equal(unname(predict(fit, q, log = TRUE, given = given)),
                               unname(joint - margin), tol = be$tol,
                               label = be_label(be, "given", paste(given, collapse = ",")))
    }
    loo <- ref_mixed(train, train, H, lambda, kernels, leave_one_out = TRUE) -
      ref_mixed(train["g"], train["g"], NULL, lambda["g"], kernels, leave_one_out = TRUE)
    expect_log_density_equal(predict(fit, log = TRUE, leave_one_out = TRUE, given = "g"), loo,
                             tol = be$tol, label = be_label(be, "leave one out given g"))
  }
})

test_that("newdata may give factor columns as characters, in any column order", {
  train <- mixed_frame(80, 3141)
  fit <- kde_gpu(train, H = diag(2) * 0.3, lambda = 0.3, backend = "cpu")
  q <- train[1:5, ]
  q_chr <- data.frame(o = as.character(q$o), g = as.character(q$g), b = q$b, a = q$a)
  expect_equal(predict(fit, q_chr), predict(fit, q))
  expect_equal(names(predict(fit, q)), row.names(q))
})

test_that("logLik is the leave-one-out likelihood, with one df per parameter", {
  train <- mixed_frame(90, 3151)
  H <- diag(c(0.3, 0.2))
  lambda <- c(g = 0.3, o = 0.5)
  fit <- kde_gpu(train, H = H, lambda = lambda, backend = "cpu")
  ll <- logLik(fit)
  ref <- sum(ref_mixed(train, train, H, lambda, ref_kernels("aitchisonaitken", "racineliyan"),
                       leave_one_out = TRUE))
  expect_equal(as.numeric(ll), ref, tolerance = 1e-12)
  expect_identical(attr(ll, "df"), 4L) # diagonal H: 2, two lambdas
})

test_that("bw = \"mlcv\" maximises the plain leave-one-out likelihood over H and lambda", {
  train <- mixed_frame(100, 3161)
  train$b <- train$b + as.integer(train$g) # b depends on g: lambda(g) should stay small
  kernels <- ref_kernels("aitchisonaitken", "racineliyan")
  for (shape in c("mlcv-diagonal", "mlcv-scalar")) {
    fit <- kde_gpu(train, bw = shape, backend = "cpu")
    criterion <- function(sd, lambda) {
      sum(ref_mixed(train, train, diag(sd^2, 2), lambda, kernels, leave_one_out = TRUE))
    }
    sd <- sqrt(diag(fit$H))
    best <- criterion(sd, fit$lambda)
    expect_equal(as.numeric(logLik(fit)), best, tolerance = 1e-10)
    expect_equal(fit$selection$criterion, best, tolerance = 1e-8)
    steps <- if (shape == "mlcv-scalar") list(c(1.03, 1.03), c(0.97, 0.97)) else
      list(c(1.03, 1), c(0.97, 1), c(1, 1.03), c(1, 0.97))
    for (step in steps) {
      expect_lte(criterion(sd * step, fit$lambda), best + 1e-9 * abs(best))
    }
    for (k in 1:2) for (delta in c(-0.02, 0.02)) {
      moved <- fit$lambda
      moved[k] <- min(max(moved[k] + delta, 0), c(2 / 3, 1)[k])
      expect_lte(criterion(sd, moved), best + 1e-9 * abs(best))
    }
    expect_lt(fit$lambda[["g"]], 0.3)
  }
  # given numbers, only the lambdas are chosen (and the reverse)
  fixed <- kde_gpu(train, bw = c(0.4, 0.5), backend = "cpu")
  expect_equal(unname(sqrt(diag(fixed$H))), c(0.4, 0.5))
  expect_false(is.null(fixed$selection))
  only_h <- kde_gpu(train, bw = "mlcv-diagonal", lambda = c(0.1, 0.2), backend = "cpu")
  expect_equal(only_h$lambda, c(g = 0.1, o = 0.2))
})

test_that("a search that starts from a subsample's answer reaches the same optimum", {
  train <- mixed_frame(400, 3163)
  train$b <- train$b + as.integer(train$g)
  columns <- kdegpu:::mixed_columns(train)
  kernels <- kdegpu:::mixed_kernel_names(columns, "aitchisonaitken", "racineliyan")
  parts <- kdegpu:::mixed_parts(train, columns)
  w <- rep(1 / 400, 400)
  set.seed(11)
  before <- .Random.seed
  piloted <- kdegpu:::select_mixed(parts, columns, kernels, w, NULL, NULL, "full", "cpu",
                                   pilot_points = 100)
  expect_identical(.Random.seed, before) # the subsample leaves the session's stream
  direct <- kdegpu:::select_mixed(parts, columns, kernels, w, NULL, NULL, "full", "cpu")
  expect_gt(piloted$details$pilot_evaluations, 0)
  expect_identical(direct$details$pilot_evaluations, 0L)
  expect_equal(piloted$details$criterion, direct$details$criterion, tolerance = 1e-7)
  expect_equal(piloted$H, direct$H, tolerance = 1e-3)
  # and it is a local optimum of the plain-R criterion
  criterion <- function(H, lambda) {
    sum(ref_mixed(train, train, H, lambda, ref_kernels("aitchisonaitken", "racineliyan"),
                  leave_one_out = TRUE))
  }
  best <- criterion(piloted$H, piloted$lambda)
  expect_equal(piloted$details$criterion, best, tolerance = 1e-8)
  for (f in c(0.97, 1.03)) {
    expect_lte(criterion(piloted$H * f, piloted$lambda), best + 1e-9 * abs(best))
    for (k in 1:2) {
      moved <- piloted$lambda
      moved[k] <- min(moved[k] * f, c(0.5, 1)[k]) # within each kernel's range
      expect_lte(criterion(piloted$H, moved), best + 1e-9 * abs(best))
    }
  }
})

test_that("sample() draws the numbers and the levels from the kernels' law", {
  set.seed(3171)
  train <- data.frame(y = c(0, 10), o = factor(c("lo", "hi"), levels = c("lo", "mid", "hi"),
                                              ordered = TRUE))
  fit <- kde_gpu(train, bw = 1, lambda = 0.5, ordered_kernel = "liracine", backend = "cpu")
  draws <- sample(fit, 20000)
  expect_s3_class(draws, "data.frame")
  expect_identical(levels(draws$o), c("lo", "mid", "hi"))
  expect_true(is.ordered(draws$o))
  # each point's mass is its kernel's total over the levels: 1 + 0.5 + 0.25
  # for both, so each is picked half the time; then lo -> (1, .5, .25)/1.75
  from_lo <- draws$y < 5
  expect_equal(mean(from_lo), 0.5, tolerance = 0.03)
  expect_equal(as.vector(prop.table(table(draws$o[from_lo]))), c(1, 0.5, 0.25) / 1.75,
               tolerance = 0.05)
  expect_equal(mean(draws$y[from_lo]), 0, tolerance = 0.05)
  expect_equal(stats::sd(draws$y[from_lo]), 1, tolerance = 0.03)
})

test_that("bad input to mixed fits names the argument", {
  train <- mixed_frame(40, 3181)
  fit <- kde_gpu(train, H = diag(2) * 0.3, lambda = 0.3, backend = "cpu")
  q <- train[1:3, ]
  unseen <- q
  unseen$g <- as.character(unseen$g)
  unseen$g[2] <- "w"
  expect_error(predict(fit, unseen), "newdata.*column g has values the fit's levels lack: w")
  other_levels <- q
  other_levels$g <- factor(as.character(q$g), levels = c("z", "y", "x"))
  expect_error(predict(fit, other_levels), "newdata.*column g has levels z, y, x")
  numeric_g <- q
  numeric_g$g <- 1:3
  expect_error(predict(fit, numeric_g), "newdata.*column g is integer, but the fit's g is a factor")
  factor_a <- q
  factor_a$a <- factor(1:3)
  expect_error(predict(fit, factor_a), "newdata.*column a is a factor, but the fit's a is numeric")
  expect_error(predict(fit, q[c("a", "g")]), "newdata.*lacks the fit's columns b, o")
  expect_error(predict(fit, as.matrix(q[1:2])), "newdata.*must be a data frame")
  expect_error(predict(fit, q, type = "cdf"), "`type` must be \"density\" for mixed data")
  expect_error(kde_gpu(train, lambda = c(0.3, 0.2, 0.1), backend = "cpu"),
               "`lambda` must be one number, or one per factor column \\(2: g, o\\)")
  expect_error(kde_gpu(train, H = diag(2), lambda = c(g = 0.9, o = 0.1), backend = "cpu"),
               "`lambda` for column g \\(aitchisonaitken kernel, 3 levels\\) must be in \\[0, 0.6667\\]")
  expect_error(kde_gpu(train, H = diag(2), lambda = c(g = 0.1, p = 0.1), backend = "cpu"),
               "`lambda` names columns g, p but the factor columns are g, o")
  expect_error(kde_gpu(train, lambda = 0.1, factor_kernel = "gaussian", backend = "cpu"),
               "`factor_kernel` must be one of \"aitchisonaitken\", \"liracine\"")
  expect_error(kde_gpu(train, lambda = 0.1, ordered_kernel = "x", backend = "cpu"),
               "`ordered_kernel` must be one of")
  expect_error(kde_gpu(faithful, lambda = 0.1, backend = "cpu"),
               "`lambda` applies to mixed data")
  expect_error(kde_gpu(train, lambda = 0.1, lower = 0, backend = "cpu"),
               "`lower` does not apply to mixed data")
  expect_error(kde_gpu(train, lambda = 0.1, adaptive = TRUE, backend = "cpu"),
               "`adaptive` does not apply to mixed data")
  expect_error(kde_gpu(train, lambda = 0.1, kernel = "epanechnikov", backend = "cpu"),
               "`kernel` must be \"gaussian\" for mixed data")
  expect_error(kde_gpu(train, bw = "plugin", lambda = 0.1, backend = "cpu"),
               "`bw` = \"plugin\" is not a selector for mixed data")
  with_na <- train
  with_na$a[3] <- NA
  expect_error(kde_gpu(with_na, lambda = 0.1, backend = "cpu"), "`x` has missing values in column a")
  with_chr <- train
  with_chr$s <- "text"
  expect_error(kde_gpu(with_chr, lambda = 0.1, backend = "cpu"),
               "`x` has columns that are neither numeric nor factors: s \\(character\\)")
  one_level <- train
  one_level$c <- factor("k")
  expect_error(kde_gpu(one_level, lambda = 0.1, backend = "cpu"),
               "`x` column c is a factor with 1 level")
  tied <- data.frame(a = rep(1:5, 8), g = factor(rep(c("u", "v"), 20)))
  expect_error(kde_gpu(tied, backend = "cpu"), "`bw` = \"mlcv\" has no maximum on these data")
  edited <- fit
  edited$lambda[1] <- 0.5
  expect_error(predict(edited, q), "`object\\$lambda` was changed after fitting")
  expect_error(sample(fit, 3, replace = FALSE), "`replace` must be TRUE")
  expect_error(predict(fit, q, given = "nope"), "`given` names columns the data do not have: nope")
})

test_that("plot() draws each level's conditional density of a numeric column", {
  train <- mixed_frame(60, 3191)
  fit <- kde_gpu(train, H = diag(2) * 0.3, lambda = 0.3, backend = "cpu")
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off())
  expect_identical(plot(fit), fit)
  expect_identical(plot(fit, column = "b", by = "o", n = 50), fit)
  expect_error(plot(fit, column = "g"), "`column` must name one numeric column of the fit \\(a, b\\)")
  expect_error(plot(fit, by = "a"), "`by` must name one factor column of the fit \\(g, o\\)")
  expect_error(plot(fit, col = "red"), "col")
})

test_that("bw_mlcv(given = ) on mixed data maximises the plain conditional likelihood", {
  set.seed(3201)
  n <- 90
  train <- data.frame(a = rnorm(n), g = factor(sample(c("u", "v", "w"), n, TRUE)))
  train$y <- 0.5 * train$a + as.integer(train$g) + rnorm(n, sd = 0.4)
  kernels <- list(g = "aitchisonaitken")
  b <- bw_mlcv(train, shape = "diagonal", given = c("a", "g"), backend = "cpu")
  expect_s3_class(b, "kdegpu_bandwidth")
  expect_identical(attr(b, "given"), c("a", "g"))
  criterion <- function(sd, lambda) {
    H <- diag(sd^2, 2)
    joint <- ref_mixed(train, train, H, c(g = lambda), kernels, leave_one_out = TRUE)
    margin <- ref_mixed(train[c("a", "g")], train[c("a", "g")], H[1, 1, drop = FALSE],
                        c(g = lambda), kernels, leave_one_out = TRUE)
    sum(joint - margin)
  }
  sd <- unname(as.vector(b))
  lambda <- attr(b, "lambda")[["g"]]
  best <- criterion(sd, lambda)
  for (step in list(c(1.03, 1), c(0.97, 1), c(1, 1.03), c(1, 0.97))) {
    expect_lte(criterion(sd * step, lambda), best + 1e-9 * abs(best))
  }
  expect_lte(criterion(sd, lambda + 0.02), best + 1e-9 * abs(best))
  fit <- kde_gpu(train, bw = b, backend = "cpu")
  expect_equal(fit$lambda, attr(b, "lambda"))
  expect_equal(unname(sqrt(diag(fit$H))), sd)
  expect_error(kde_gpu(train, bw = b, factor_kernel = "liracine", backend = "cpu"),
               "`bw` was chosen for the discrete kernels g: aitchisonaitken, not g: liracine")
  expect_error(bw_mlcv(train, grid = 5, backend = "cpu"), "`grid` does not apply to mixed data")
  expect_error(bw_mlcv(faithful, factor_kernel = "liracine", backend = "cpu"),
               "`factor_kernel` applies to mixed data")
  expect_error(bw_mlcv(train["g"], backend = "cpu"), "`x` needs a numeric column for bw_mlcv")
})

test_that("bw = \"lscv\" minimises the plain least-squares criterion (np's cv.ls)", {
  train <- mixed_frame(70, 3211)
  kernels <- ref_kernels("aitchisonaitken", "racineliyan")
  # int f^2 = sum_ij w_i w_j phi_2H(x_i - x_j) prod_k sum_l L_k(l, c_ik) L_k(l, c_jk)
  ref_lscv <- function(sd, lambda) {
    H <- diag(sd^2, 2)
    n <- nrow(train)
    X <- as.matrix(train[c("a", "b")])
    integral <- 0
    for (i in seq_len(n)) {
      dx <- sweep(X, 2L, X[i, ])
      k <- exp(-0.5 * rowSums((dx %*% solve(2 * H)) * dx)) / sqrt(det(2 * pi * 2 * H))
      for (name in c("g", "o")) {
        levels <- nlevels(train[[name]])
        K <- vapply(seq_len(levels), function(r) {
          ref_discrete(kernels[[name]], levels, lambda[[name]], seq_len(levels), r)
        }, numeric(levels))
        M <- crossprod(K)
        k <- k * M[as.integer(train[[name]][i]), as.integer(train[[name]])]
      }
      integral <- integral + sum(k) / n^2
    }
    loo <- ref_mixed(train, train, H, lambda, kernels, leave_one_out = TRUE)
    integral - 2 * mean(exp(loo))
  }
  fit <- kde_gpu(train, bw = "lscv-diagonal", backend = "cpu")
  expect_identical(fit$selection$method, "lscv")
  sd <- sqrt(diag(fit$H))
  best <- ref_lscv(sd, fit$lambda)
  expect_equal(fit$selection$criterion, best, tolerance = 1e-8)
  for (step in list(c(1.03, 1), c(0.97, 1), c(1, 1.03), c(1, 0.97))) {
    expect_gte(ref_lscv(sd * step, fit$lambda), best - 1e-9 * abs(best))
  }
  for (k in 1:2) for (delta in c(-0.02, 0.02)) {
    moved <- fit$lambda
    moved[k] <- min(max(moved[k] + delta, 0), c(2 / 3, 1)[k])
    expect_gte(ref_lscv(sd, moved), best - 1e-9 * abs(best))
  }
})

test_that("bw_lscv() on mixed data is kde_gpu(bw = \"lscv\")'s choice, as a bandwidth", {
  train <- mixed_frame(60, 3221)
  b <- bw_lscv(train, shape = "diagonal", backend = "cpu")
  fit <- kde_gpu(train, bw = "lscv-diagonal", backend = "cpu")
  expect_identical(attr(b, "method"), "lscv")
  expect_equal(unname(as.vector(b)), unname(sqrt(diag(fit$H))), tolerance = 1e-10)
  expect_equal(attr(b, "lambda"), fit$lambda, tolerance = 1e-10)
  expect_error(bw_lscv(train, reltol = 1e-3, backend = "cpu"), "`reltol` does not apply to mixed data")
})
