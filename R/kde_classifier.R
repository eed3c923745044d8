#' Kernel discriminant analysis
#'
#' `kde_classifier()` fits one exact kernel density estimate per group
#' (each with its own bandwidth) and classifies a point to the group with
#' the largest prior times density, as [ks::kda()] does:
#' \deqn{P(g \mid x) = \frac{\pi_g \hat f_g(x)}{\sum_h \pi_h \hat f_h(x)}.}
#' The posteriors are computed from the log-densities with a log-sum-exp,
#' so they stay finite and accurate far from all the data, where every
#' density underflows (there the group whose kernels reach farthest wins,
#' as it should). Evaluation is [predict()][predict.kde_gpu]'s: exact, on the GPU
#' when `backend` allows.
#'
#' Given the same bandwidth matrix per group (ks's `Hs`) and the same
#' prior, the classes are ks's and the posteriors those of ks's per-group
#' densities evaluated exactly (ks's `kde(eval.points = )`), to rounding.
#' (In 1-D ks 1.14's `kda()` bins the data whatever its `binned` says and
#' interpolates its densities from a grid that ends 3.7 bandwidths beyond
#' the data, where they become 0, so its classes there can differ.)
#'
#' @section Leave-one-out error:
#' [loo_error()] is the share of training points misclassified when each
#' point's own group density leaves it out (`predict(fit, leave_one_out =
#' TRUE)` on its group's fit; the other groups' densities are the full
#' ones). The bandwidths and priors are those of the full fit, not chosen
#' again without the point. [predict()][predict.kde_classifier] with
#' `leave_one_out = TRUE` gives the classes or posteriors behind it, and
#' [summary()][summary.kde_classifier] its confusion table.
#'
#' @param x The data: a numeric vector (1-D), or a matrix or data frame of
#'   numeric columns with one point per row.
#' @param groups The group of each point: a factor (its levels, in order,
#'   are the classes; each needs at least 2 points) or a vector turned into
#'   one with [factor()]; one per point, no `NA`.
#' @param H The bandwidth matrices (kernel covariances): a list with one
#'   d x d matrix per group (named by the levels, or in their order), a
#'   d x d x G array (ks's `Hs` for `kda()`), or one matrix for every
#'   group; in 1-D also a vector of one variance per group. Not with `bw`.
#' @param bw Anything [kde_gpu()] accepts as `bw` (a rule or selector name,
#'   or standard deviations), used for each group on its own points; or a
#'   list of such values, one per group (named by the levels, or in their
#'   order); in 1-D also a vector of one standard deviation per group (ks's
#'   `hs`). The default, as ks, is each
#'   group's plug-in bandwidth (`"plugin"`, see [bw_plugin()]; in 1-D the
#'   Sheather-Jones direct plug-in).
#' @param prior The groups' prior probabilities: `NULL` (the default) for
#'   their shares of the data, or one probability per group (named by the
#'   levels, or in their order) summing to 1.
#' @param kernel,backend As for [kde_gpu()].
#' @param ... Not used: an argument given here is an error that names it.
#' @return An object of class `"kde_classifier"`: a list with `fits` (the
#'   [kde_gpu()] fit of each group, named by level), `levels`, `prior`
#'   (named), `groups` (the training groups, a factor), `n` (points per
#'   group), `d`, `call` and `data.name`.
#' @references Duong, T. (2007). ks: Kernel density estimation and kernel
#'   discriminant analysis for multivariate data in R. *Journal of
#'   Statistical Software* 21(7).
#' @seealso [predict.kde_classifier()], [loo_error()], [ks::kda()],
#'   [kde_test()]
#' @examples
#' fit <- kde_classifier(iris[, 1:4], iris$Species, backend = "cpu")
#' fit
#' predict(fit, iris[c(1, 51, 101), 1:4])
#' round(predict(fit, iris[c(71, 84, 134), 1:4], type = "posterior"), 3)
#' loo_error(fit)
#'
#' # given bandwidths and priors
#' fit2 <- kde_classifier(iris[, 1:2], iris$Species, bw = "scott",
#'                        prior = c(setosa = 0.2, versicolor = 0.4, virginica = 0.4),
#'                        backend = "cpu")
#' summary(fit2)
#' @export
kde_classifier <- function(x, groups, H = NULL, bw = NULL, prior = NULL, kernel = "gaussian",
                           backend = c("auto", "cuda", "cpu"), ...) {
  check_dots_empty("kde_classifier()", c("x", "groups", "H", "bw", "prior", "kernel", "backend"),
                   kde_classifier_hints, ...)
  data_name <- deparse1(substitute(x))
  call <- match.call()
  x <- as_point_matrix(x, "x")
  groups <- check_groups(groups, nrow(x))
  lev <- levels(groups)
  G <- length(lev)
  d <- ncol(x)
  backend <- choose_backend(match_choice(backend, c("auto", "cuda", "cpu"), "backend"))
  kernel <- resolve_kernel(kernel)
  if (!is.null(H) && !is.null(bw)) stop_arg("H", "and `bw` cannot both be given: choose one.")
  # in 1-D a plain vector of one value per group is per group (ks's `hs`)
  one_each <- function(v) d == 1L && is.numeric(v) && is.null(dim(v)) && length(v) == G
  if (one_each(H)) H <- as.list(H)
  if (one_each(bw)) bw <- as.list(bw)
  Hs <- if (!is.null(H)) per_group(H, lev, "H", matrices = TRUE)
  bws <- if (!is.null(bw)) per_group(bw, lev, "bw") else rep(list("plugin"), G)
  prior <- check_prior(prior, groups)
  fits <- lapply(seq_len(G), function(g) {
    xg <- x[groups == lev[g], , drop = FALSE]
    blame_group(lev[g], if (!is.null(Hs)) {
      kde_gpu(xg, H = check_group_H(Hs[[g]], d), kernel = kernel, backend = backend)
    } else {
      kde_gpu(xg, bw = bws[[g]], kernel = kernel, backend = backend)
    })
  })
  names(fits) <- lev
  structure(list(
    fits = fits, levels = lev, prior = prior, groups = groups,
    n = stats::setNames(as.vector(table(groups)), lev), d = d,
    rownames = rownames(x), call = call, data.name = data_name
  ), class = "kde_classifier")
}

kde_classifier_hints <- list(
  Hs = "Give the groups' bandwidth matrices as `H` (a list, or ks's d x d x G array).",
  prior.prob = "The priors go in `prior`.",
  x.group = "The groups go in `groups`.",
  weights = "kde_classifier() takes unweighted points."
)

check_groups <- function(groups, n) {
  if (is.null(groups) || !is.atomic(groups) || !is.null(dim(groups)) && length(dim(groups)) > 1L &&
      ncol(as.matrix(groups)) > 1L) {
    stop_arg("groups", "must be a factor or a vector with one group per point.")
  }
  if (length(groups) != n) {
    stop_arg("groups", sprintf("must have one value per point of `x` (%d), not %d.",
                               n, length(groups)))
  }
  if (anyNA(groups)) stop_arg("groups", sprintf("has NA (point %d).", which(is.na(groups))[1L]))
  groups <- if (is.factor(groups)) groups else factor(groups)
  sizes <- table(groups)
  if (length(sizes) < 2L) {
    stop_arg("groups", "must have at least 2 groups, not ", length(sizes), ".")
  }
  small <- sizes < 2L
  if (any(small)) {
    stop_arg("groups", sprintf(
      "has group%s with fewer than 2 points: %s; each group needs 2 (drop unused levels with droplevels()).",
      if (sum(small) > 1L) "s" else "",
      paste0(names(sizes)[small], " (", sizes[small], ")", collapse = ", ")))
  }
  groups
}

# A per-group argument: a list with one value per level (named by the
# levels or in their order), a d x d x G array (H), or one value for all.
per_group <- function(value, lev, arg, matrices = FALSE) {
  G <- length(lev)
  if (matrices && is.array(value) && length(dim(value)) == 3L) {
    if (dim(value)[3L] != G) {
      stop_arg(arg, sprintf("has %d matrices (its third dimension) for %d groups.",
                            dim(value)[3L], G))
    }
    value <- lapply(seq_len(G), function(g) value[, , g])
    names(value) <- lev
  }
  if (!is.list(value)) return(rep(list(value), G))
  if (length(value) != G) {
    stop_arg(arg, sprintf("must have one element per group (%d: %s), not %d.", G,
                          paste(lev, collapse = ", "), length(value)))
  }
  nm <- names(value)
  if (!is.null(nm) && all(nzchar(nm))) {
    if (!setequal(nm, lev)) {
      stop_arg(arg, "has names ", paste(nm, collapse = ", "), " but the groups are ",
               paste(lev, collapse = ", "), ".")
    }
    value <- value[lev]
  }
  unname(value)
}

check_group_H <- function(H, d) {
  if (inherits(H, "kdegpu_bandwidth")) return(bandwidth_from_H(H, d, "H")$H)
  if (is.numeric(H) && is.null(dim(H)) && length(H) == 1L && d == 1L) H <- matrix(H, 1L, 1L)
  if (is.numeric(H) && !is.null(dim(H)) && length(dim(H)) == 2L && d == 1L && length(H) == 1L) {
    H <- matrix(H, 1L, 1L)
  }
  bandwidth_from_H(H, d, "H")$H
}

# Errors inside group g's fit name the group after the argument.
blame_group <- function(level, expr) {
  tryCatch(expr, error = function(e) {
    msg <- conditionMessage(e)
    msg <- if (grepl("^`[^`]+`", msg)) {
      sub("^(`[^`]+`)", sprintf("\\1 (group \"%s\")", level), msg)
    } else {
      sprintf("group \"%s\": %s", level, msg)
    }
    stop(msg, call. = FALSE)
  })
}

check_prior <- function(prior, groups) {
  lev <- levels(groups)
  G <- length(lev)
  if (is.null(prior)) return(stats::setNames(as.vector(table(groups)) / length(groups), lev))
  if (!is.numeric(prior) || is.complex(prior) || !is.null(dim(prior)) && length(dim(prior)) > 1L) {
    stop_arg("prior", "must be a numeric vector of probabilities, one per group.")
  }
  if (length(prior) != G) {
    stop_arg("prior", sprintf("must have one probability per group (%d: %s), not %d.", G,
                              paste(lev, collapse = ", "), length(prior)))
  }
  if (anyNA(prior) || any(!is.finite(prior)) || any(prior < 0)) {
    stop_arg("prior", "must be non-negative and finite (no NA).")
  }
  if (abs(sum(prior) - 1) > 1e-8) {
    stop_arg("prior", sprintf("must sum to 1, not %s.", format(sum(prior), digits = 8)))
  }
  nm <- names(prior)
  if (!is.null(nm)) {
    unknown <- setdiff(nm, lev)
    if (length(unknown) > 0L || anyDuplicated(nm)) {
      stop_arg("prior", "has names ", paste(nm, collapse = ", "), " but the groups are ",
               paste(lev, collapse = ", "), ".")
    }
    prior <- prior[lev]
  }
  stats::setNames(as.double(prior), lev)
}

check_classifier <- function(object, arg = "object") {
  ok <- inherits(object, "kde_classifier") && is.list(object) &&
    all(c("fits", "levels", "prior", "groups", "d") %in% names(object)) &&
    is.list(object$fits) && length(object$fits) == length(object$levels) &&
    length(object$prior) == length(object$levels) &&
    all(vapply(object$fits, inherits, NA, "kde_gpu"))
  if (!isTRUE(ok)) {
    stop_arg(arg, "is not an intact kde_classifier() fit; fit it again with kde_classifier().")
  }
  invisible(object)
}

# log(prior_g) + log f_g at `query` (m x G), or (query NULL) at the
# training points in the data's order, each point's own group density
# leaving it out when `leave_one_out`.
classifier_log_scores <- function(object, query = NULL, leave_one_out = FALSE) {
  lev <- object$levels
  at_training <- is.null(query)
  if (at_training) {
    # the groups' points stacked, and where each goes in the data's order
    query <- do.call(rbind, lapply(object$fits, function(f) f$x))
    own <- rep(seq_along(lev), vapply(object$fits, function(f) f$n, 0L))
    position <- unlist(lapply(lev, function(l) which(object$groups == l)))
  }
  scores <- vapply(seq_along(lev), function(g) {
    fit <- object$fits[[g]]
    s <- predict(fit, query, log = TRUE)
    if (leave_one_out) s[own == g] <- predict(fit, log = TRUE, leave_one_out = TRUE)
    s + log(object$prior[[g]])
  }, numeric(nrow(query)))
  scores <- matrix(scores, nrow(query), length(lev), dimnames = list(NULL, lev))
  if (at_training) scores[order(position), , drop = FALSE] else scores
}

# Posteriors from log scores by log-sum-exp; NaN for a point no group's
# kernels reach (compact kernels).
posterior_from_scores <- function(scores) {
  top <- apply(scores, 1L, max)
  reached <- is.finite(top)
  shifted <- exp(scores - ifelse(reached, top, 0))
  post <- shifted / rowSums(shifted)
  post[!reached, ] <- NaN
  post
}

#' Classify with a kernel discriminant
#'
#' @param object A [kde_classifier()] fit.
#' @param newdata Points to classify, with the training data's columns (as
#'   for [predict()][predict.kde_gpu]). Without it, the training points.
#' @param type `"class"` (a factor with the groups' levels: the group of
#'   largest prior times density, the first on ties, as ks) or
#'   `"posterior"` (an m x G matrix of posterior probabilities, columns
#'   named by the levels).
#' @param leave_one_out If `TRUE` (only without `newdata`), each training
#'   point is classified with its own group's density leaving it out (see
#'   [loo_error()]).
#' @param ... Not used: an argument given here is an error that names it.
#' @return A factor or a matrix, as `type` says, named by the points' row
#'   names. A point that no group's kernels reach (possible with compact
#'   kernels) gets class `NA` and posteriors `NaN`.
#' @examples
#' fit <- kde_classifier(iris[, 3:4], iris$Species, backend = "cpu")
#' predict(fit, data.frame(Petal.Length = c(1.5, 4.8, 6), Petal.Width = c(0.2, 1.6, 2)))
#' predict(fit, c(4.9, 1.6), type = "posterior")
#' # far from every group: still finite posteriors
#' predict(fit, c(50, 50), type = "posterior")
#' table(predict(fit, leave_one_out = TRUE), iris$Species)
#' @export
predict.kde_classifier <- function(object, newdata, type = c("class", "posterior"),
                                   leave_one_out = FALSE, ...) {
  check_dots_empty("predict()", c("object", "newdata", "type", "leave_one_out"),
                   predict_hints, ...)
  check_classifier(object)
  type <- match_choice(type, c("class", "posterior"), "type")
  check_flag(leave_one_out, "leave_one_out")
  at_training <- missing(newdata) || is.null(newdata)
  if (leave_one_out && !at_training) {
    stop_arg("leave_one_out", "applies to the training points only; drop `newdata`.")
  }
  if (at_training) {
    scores <- classifier_log_scores(object, NULL, leave_one_out)
    point_names <- object$rownames
  } else {
    query <- match_columns(as_point_matrix(newdata, "newdata", object$d), object$fits[[1L]]$x)
    scores <- classifier_log_scores(object, query)
    point_names <- query_names(newdata, object$d)
  }
  if (type == "posterior") {
    post <- posterior_from_scores(scores)
    rownames(post) <- point_names
    return(post)
  }
  best <- max.col(replace(scores, is.na(scores), -Inf), ties.method = "first")
  best[!is.finite(apply(scores, 1L, max))] <- NA_integer_
  stats::setNames(factor(object$levels[best], levels = object$levels), point_names)
}

#' Leave-one-out error rate of a kernel discriminant
#'
#' The share of the training points that a [kde_classifier()] fit
#' misclassifies when each point's own group density is computed without
#' it (the other groups' densities, the bandwidths and the priors are the
#' full fit's).
#'
#' @param fit A [kde_classifier()] fit.
#' @param ... `object`, the old name of `fit` (deprecated: it works, with a
#'   warning, until the next release).
#' @return One number in \[0, 1\].
#' @examples
#' fit <- kde_classifier(iris[, 1:4], iris$Species, backend = "cpu")
#' loo_error(fit)
#' @export
loo_error <- function(fit, ...) {
  old <- renamed_arguments("loo_error()", c(object = "fit"), "fit", names(match.call()), ...)
  if (!is.null(old$fit)) fit <- old$fit
  check_classifier(fit, "fit")
  predicted <- predict(fit, type = "class", leave_one_out = TRUE)
  mean(is.na(predicted) | predicted != fit$groups)
}

#' Print and summarise a kernel discriminant
#'
#' `print()` shows the groups, their sizes, priors and bandwidths;
#' `summary()` adds the leave-one-out confusion table and error rate
#' ([loo_error()]).
#'
#' @param x,object A [kde_classifier()] fit (or its summary, for `print`).
#' @param ... Not used: an argument given here is an error that names it.
#' @return `print()` returns `x` invisibly; `summary()` an object of class
#'   `"summary.kde_classifier"` with `fit`, `confusion` (true groups in
#'   rows, leave-one-out classes in columns) and `loo_error`.
#' @examples
#' fit <- kde_classifier(iris[, 1:2], iris$Species, backend = "cpu")
#' summary(fit)
#' @name kde_classifier-methods
NULL

#' @rdname kde_classifier-methods
#' @export
print.kde_classifier <- function(x, ...) {
  check_dots_empty("print()", "x", list(), ...)
  check_classifier(x, "x")
  fit1 <- x$fits[[1L]]
  cat("Kernel discriminant (kdegpu)\n")
  cat("  call:    ", paste(deparse(x$call), collapse = "\n"), "\n", sep = "")
  cat(sprintf("  data:    %s (%s points in %d dimension%s, %d groups)\n", x$data.name,
              format_count(sum(x$n)), x$d, if (x$d == 1L) "" else "s", length(x$levels)))
  cat("  kernel:  ", fit1$kernel, "\n", sep = "")
  cat("  backend: ", backend_label(fit1), "\n", sep = "")
  for (g in seq_along(x$levels)) {
    cat(sprintf("  %s: n = %s, prior %s, %s\n", x$levels[g], format_count(x$n[[g]]),
                format(signif(x$prior[[g]], 4)), bandwidth_label(x$fits[[g]])))
  }
  invisible(x)
}

#' @rdname kde_classifier-methods
#' @export
summary.kde_classifier <- function(object, ...) {
  check_dots_empty("summary()", "object", list(), ...)
  check_classifier(object)
  predicted <- predict(object, type = "class", leave_one_out = TRUE)
  confusion <- table(group = object$groups, predicted = predicted, useNA = "ifany")
  structure(list(fit = object, confusion = confusion,
                 loo_error = mean(is.na(predicted) | predicted != object$groups)),
            class = "summary.kde_classifier")
}

#' @rdname kde_classifier-methods
#' @export
print.summary.kde_classifier <- function(x, ...) {
  check_dots_empty("print()", "x", list(), ...)
  print(x$fit)
  cat("\nLeave-one-out classes (rows: true group):\n")
  print(x$confusion)
  cat(sprintf("Leave-one-out error rate: %.4g\n", x$loo_error))
  invisible(x)
}
