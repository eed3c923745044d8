# kde_classifier() against ks::kda() given the same bandwidth matrices and
# priors, and against plain-R references (posteriors, leave-one-out).

# The classes of ks::kda() at `E` (its x.group.estimate; d <= 3, where ks
# also computes its grids).
ks_kda_classes <- function(x, groups, Hs, prior, E) {
  k <- if (ncol(x) == 1L) {
    ks::kda(x[, 1], groups, hs = sqrt(vapply(Hs, drop, 0)), prior.prob = prior,
            eval.points = E[, 1], binned = FALSE)
  } else {
    ks::kda(x, groups, Hs = do.call(rbind, Hs), prior.prob = prior, eval.points = E)
  }
  factor(as.character(k$x.group.estimate), levels(groups))
}

# Posteriors from ks's per-group densities at E (what kda compares).
ks_posteriors <- function(x, groups, Hs, prior, E) {
  dens <- vapply(seq_along(levels(groups)), function(g) {
    xg <- x[groups == levels(groups)[g], , drop = FALSE]
    if (ncol(x) == 1L) {
      ks::kde(xg[, 1], h = sqrt(drop(Hs[[g]])), eval.points = E[, 1], binned = FALSE)$estimate
    } else {
      ks::kde(xg, H = Hs[[g]], eval.points = E)$estimate
    }
  }, numeric(nrow(E)))
  p <- sweep(matrix(dens, nrow(E)), 2L, prior, "*")
  p / rowSums(p)
}

three_groups <- function(d, seed = 1) {
  set.seed(seed)
  n <- c(a = 40, b = 55, c = 30)
  x <- rbind(matrix(rnorm(n[1] * d), ncol = d),
             matrix(rnorm(n[2] * d, mean = 1.2), ncol = d),
             matrix(rnorm(n[3] * d, mean = c(-1, 2, 0)[seq_len(d)], sd = 0.7), ncol = d,
                    byrow = TRUE))
  list(x = x, groups = factor(rep(names(n), n), levels = c("a", "b", "c")))
}

test_that("kde_classifier() agrees with ks::kda() given the same H and prior (d = 1, 2, 3)", {
  skip_if_not_installed("ks")
  worst <- 0
  for (d in 1:3) {
    s <- three_groups(d)
    Hs <- list(diag(0.2, d), diag(0.3, d) + 0.02, diag(0.15, d))
    for (prior in list(NULL, c(0.5, 0.2, 0.3))) {
      fit <- kde_classifier(s$x, s$groups, H = Hs, prior = prior, backend = "cpu")
      pr <- if (is.null(prior)) as.vector(table(s$groups)) / nrow(s$x) else prior
      set.seed(d)
      E <- matrix(rnorm(200 * d, mean = 0.5, sd = 1.5), ncol = d)
      # in 1-D ks::kda() bins whatever `binned` says (its defaults override
      # it) and interpolates from its grid, 0 beyond it: compare classes
      # inside the data's range
      inside <- if (d == 1L) E[, 1] > min(s$x) & E[, 1] < max(s$x) else TRUE
      lab <- paste("d =", d, if (is.null(prior)) "estimated prior" else "given prior")
      expect_equal(unname(fit$prior), pr, info = lab)
      expect_identical(unname(predict(fit, E))[inside],
                       ks_kda_classes(s$x, s$groups, Hs, pr, E)[inside], info = lab)
      post <- predict(fit, E, type = "posterior")
      expect_identical(colnames(post), c("a", "b", "c"))
      diff <- max(abs(post - ks_posteriors(s$x, s$groups, Hs, pr, E)))
      worst <- max(worst, diff)
      expect_lt(diff, 1e-10)
    }
  }
})

test_that("posteriors are computed in log space: finite far from the data", {
  s <- three_groups(2)
  fit <- kde_classifier(s$x, s$groups, H = list(diag(0.1, 2), diag(0.2, 2), diag(0.1, 2)),
                        backend = "cpu")
  far <- rbind(c(40, 40), c(-30, 5))
  post <- predict(fit, far, type = "posterior")
  expect_true(all(is.finite(post)))
  expect_equal(rowSums(post), c(1, 1))
  # the widest kernels win far out; the log-sum-exp by hand agrees
  expect_identical(as.character(predict(fit, far)), c("b", "b"))
  scores <- vapply(1:3, function(g) predict(fit$fits[[g]], far, log = TRUE) +
                     log(fit$prior[[g]]), numeric(2))
  ref <- exp(scores - apply(scores, 1L, max))
  expect_equal(unname(post), ref / rowSums(ref), tolerance = 1e-12)
  # a compact kernel reaches nowhere near: class NA, posteriors NaN
  fit_e <- kde_classifier(s$x, s$groups, bw = 0.5, kernel = "epanechnikov", backend = "cpu")
  expect_true(is.na(predict(fit_e, c(40, 40))))
  expect_true(all(is.nan(predict(fit_e, c(40, 40), type = "posterior"))))
})

test_that("leave-one-out classes and error rate match a plain-R reference", {
  s <- three_groups(2, seed = 5)
  Hs <- list(diag(0.3, 2), diag(0.4, 2), diag(0.2, 2))
  fit <- kde_classifier(s$x, s$groups, H = Hs, prior = c(0.3, 0.3, 0.4), backend = "cpu")
  lev <- levels(s$groups)
  dens <- function(q, xg, H) {
    u <- sweep(xg, 2L, q)
    mean(exp(-rowSums((u %*% solve(H)) * u) / 2)) / (2 * pi * sqrt(det(H)))
  }
  ref <- t(vapply(seq_len(nrow(s$x)), function(i) {
    vapply(seq_along(lev), function(g) {
      own <- s$groups == lev[g]
      if (s$groups[i] == lev[g]) own[i] <- FALSE
      dens(s$x[i, ], s$x[own, , drop = FALSE], Hs[[g]]) * c(0.3, 0.3, 0.4)[g]
    }, 0)
  }, numeric(3)))
  ref_class <- factor(lev[max.col(ref, ties.method = "first")], lev)
  expect_identical(unname(predict(fit, leave_one_out = TRUE)), ref_class)
  expect_equal(unname(predict(fit, type = "posterior", leave_one_out = TRUE)),
               ref / rowSums(ref), tolerance = 1e-12)
  expect_equal(loo_error(fit), mean(ref_class != s$groups))
  sm <- summary(fit)
  expect_equal(sm$loo_error, loo_error(fit))
  expect_equal(sum(diag(sm$confusion)), sum(ref_class == s$groups))
  expect_output(print(sm), "Leave-one-out error rate")
  expect_output(print(fit), "Kernel discriminant")
  # at the training points without leave_one_out: the full densities,
  # in the data's order, named by its row names
  x <- s$x
  rownames(x) <- paste0("p", seq_len(nrow(x)))
  fit_n <- kde_classifier(x, s$groups, H = Hs, backend = "cpu")
  expect_identical(names(predict(fit_n)), rownames(x))
  expect_identical(unname(predict(fit_n)), unname(predict(fit_n, x)))
})

test_that("bandwidths per group: selectors, lists, arrays, one matrix; priors by name", {
  fit <- kde_classifier(iris[, 1:2], iris$Species, bw = "scott", backend = "cpu")
  expect_equal(fit$fits$setosa$H,
               kde_gpu(iris[iris$Species == "setosa", 1:2], bw = "scott", backend = "cpu")$H)
  # default: each group's plug-in bandwidth
  fit_p <- kde_classifier(iris[, 1:2], iris$Species, backend = "cpu")
  expect_equal(unname(fit_p$fits$virginica$H),
               unname(attr(bw_plugin(iris[iris$Species == "virginica", 1:2], backend = "cpu"), "H")))
  Hs <- list(virginica = diag(0.1, 2), setosa = diag(0.2, 2), versicolor = diag(0.3, 2))
  a <- kde_classifier(iris[, 1:2], iris$Species, H = Hs, backend = "cpu")
  expect_equal(unname(a$fits$setosa$H), diag(0.2, 2))
  arr <- array(c(diag(0.2, 2), diag(0.3, 2), diag(0.1, 2)), c(2, 2, 3))
  b <- kde_classifier(iris[, 1:2], iris$Species, H = arr, backend = "cpu")
  expect_equal(predict(a, iris[, 1:2], type = "posterior"),
               predict(b, iris[, 1:2], type = "posterior"))
  one <- kde_classifier(iris[, 1:2], iris$Species, H = diag(0.2, 2), backend = "cpu")
  expect_equal(unname(one$fits$virginica$H), diag(0.2, 2))
  mixed <- kde_classifier(iris[, 1:2], iris$Species, bw = list(0.3, "scott", c(0.2, 0.4)),
                          backend = "cpu")
  expect_identical(mixed$fits$versicolor$bandwidth_method, "scott")
  pr <- kde_classifier(iris[, 1:2], iris$Species, bw = 0.3,
                       prior = c(virginica = 0.5, setosa = 0.2, versicolor = 0.3),
                       backend = "cpu")
  expect_equal(pr$prior, c(setosa = 0.2, versicolor = 0.3, virginica = 0.5))
  # 1-D: one variance (H) or standard deviation (bw) per group, as ks's hs
  v <- kde_classifier(iris$Sepal.Length, iris$Species, H = c(0.04, 0.09, 0.16), backend = "cpu")
  s <- kde_classifier(iris$Sepal.Length, iris$Species, bw = c(0.2, 0.3, 0.4), backend = "cpu")
  expect_equal(unname(vapply(v$fits, function(f) drop(f$H), 0)), c(0.04, 0.09, 0.16))
  expect_equal(predict(v, 4:8, type = "posterior"), predict(s, 4:8, type = "posterior"))
  # groups given as a character vector: levels sorted, as factor() does
  ch <- kde_classifier(iris[, 1:2], as.character(iris$Species), bw = 0.3, backend = "cpu")
  expect_identical(ch$levels, levels(iris$Species))
  expect_s3_class(predict(ch, iris[1:3, 1:2]), "factor")
})

test_that("kde_classifier() errors name the argument", {
  x <- iris[, 1:2]
  g <- iris$Species
  expect_error(kde_classifier("a", g), "^`x`")
  expect_error(kde_classifier(x, g[-1]), "^`groups` must have one value per point of `x` \\(150\\), not 149")
  expect_error(kde_classifier(x, replace(g, 3, NA)), "^`groups` has NA \\(point 3\\)")
  expect_error(kde_classifier(x, rep("a", 150)), "^`groups` must have at least 2 groups")
  expect_error(kde_classifier(x, c("lone", as.character(g[-1]))),
               "^`groups` has group with fewer than 2 points: lone \\(1\\)")
  expect_error(kde_classifier(x, factor(g, levels = c(levels(g), "none"))),
               "^`groups` has group with fewer than 2 points: none \\(0\\)")
  expect_error(kde_classifier(x, g, prior = c(0.5, 0.5)), "^`prior` must have one probability per group")
  expect_error(kde_classifier(x, g, prior = c(0.5, 0.4, 0.3)), "^`prior` must sum to 1")
  expect_error(kde_classifier(x, g, prior = c(setosa = 0.2, versicolor = 0.3, other = 0.5)),
               "^`prior` has names setosa, versicolor, other but the groups are")
  expect_error(kde_classifier(x, g, prior = c(NA, 0.5, 0.5)), "^`prior` must be non-negative")
  expect_error(kde_classifier(x, g, H = list(diag(2), diag(2))), "^`H` must have one element per group")
  expect_error(kde_classifier(x, g, H = list(diag(2), diag(2), diag(-1, 2))), "^`H` \\(group \"virginica\"\\) must be positive definite")
  expect_error(kde_classifier(x, g, H = diag(3)), "^`H` \\(group \"setosa\"\\) must be a 2 x 2 matrix")
  expect_error(kde_classifier(x, g, H = array(diag(2), c(2, 2, 2))), "^`H` has 2 matrices")
  expect_error(kde_classifier(x, g, H = diag(2), bw = 1), "^`H` and `bw` cannot both be given")
  expect_error(kde_classifier(x, g, bw = "nosuch"), "^`bw` \\(group \"setosa\"\\)")
  expect_error(kde_classifier(x, g, kernel = "no"), "^`kernel`")
  expect_error(kde_classifier(x, g, backend = "tpu"), "^`backend`")
  expect_error(kde_classifier(x, g, Hs = 1), "`Hs`.*`H`")
  fit <- kde_classifier(x, g, bw = 0.3, backend = "cpu")
  expect_error(predict(fit, matrix(0, 2, 3)), "^`newdata` must have 2 columns")
  expect_error(predict(fit, data.frame(a = 1, b = 2)), "^`newdata` has columns a, b")
  expect_error(predict(fit, x, leave_one_out = TRUE), "^`leave_one_out` applies to the training points")
  expect_error(predict(fit, x, type = "density"), "^`type`")
  expect_error(predict(structure(list(), class = "kde_classifier")), "^`object` is not an intact")
  expect_error(loo_error(fit$fits[[1]]), "^`fit` is not an intact kde_classifier")
})
