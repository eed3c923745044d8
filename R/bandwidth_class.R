# What every selector returns: a "kdegpu_bandwidth". Its value is the
# bandwidth as an R user reads it in its shape: the kernel's standard
# deviation ("scalar", as bw.SJ() and density()'s `bw`), one standard
# deviation per column ("diagonal"), or the kernel's covariance matrix H
# ("full", as ks::Hpi()). Attributes: `H` (always the matrix), `shape`,
# `method` (the name kde_gpu(bw = ) knows the selector by) and, from the
# cross-validation selectors, `criterion` and `trace`.
#
# kde_gpu() takes one as `bw` or as `H` alike and reads it through its value
# and shape, never through the attribute: a value the user edited or
# computed with is what the fit gets, and sds are never taken for variances.

#' Selected bandwidths
#'
#' Every bandwidth selector of kdegpu ([bw_sj()], [bw_plugin()], [bw_scv()],
#' [bw_lscv()], [bw_mlcv()]) returns a `kdegpu_bandwidth`: the bandwidth as
#' it is read in its shape, with the kernel's covariance matrix H beside it.
#'
#' * `shape = "scalar"`: the kernel's standard deviation (as
#'   [stats::bw.SJ()] and the `bw` of [stats::density()]); H = bw^2 I.
#' * `"diagonal"`: one standard deviation per column; H = diag(bw^2).
#' * `"full"`: the matrix H itself (as [ks::Hpi()]).
#'
#' A bandwidth of one-dimensional data is always a standard deviation.
#' Attributes: `H` (the d x d matrix), `shape`, `method` (the name that
#' gives the same selector in `kde_gpu(bw = )`), and from the
#' cross-validation selectors `criterion` and `trace`.
#'
#' [kde_gpu()] and [kde_classifier()] take a selection as `bw` or as `H`
#' alike, and [kde_test()] as `H1`/`H2`: they read its value and shape,
#' so a standard deviation is never taken for a variance, and an edited
#' value is what the fit gets. Arithmetic acts on the value as printed:
#' `2 * bw_sj(x)` doubles the standard deviation (H four times),
#' `H / 2` for a full selection halves H; a result of the same shape is
#' again a `kdegpu_bandwidth` (method `"derived from ..."`, the search's
#' record dropped), anything else (a comparison, a negative standard
#' deviation) a plain value. [as.numeric()] or [unclass()] give the plain
#' numbers, `attr(b, "H")` the matrix.
#'
#' The names `kde_gpu(bw = )` knows, each the selector with its default
#' arguments: `"SJ"` (`"sj-ste"`) and `"sj-dpi"` ([bw_sj()], 1-D);
#' `"plugin"`, `"plugin-diagonal"` ([bw_plugin()]); `"scv"`,
#' `"scv-diagonal"` ([bw_scv()], d >= 2); `"lscv"` (or `"ucv"`),
#' `"lscv-diagonal"`, `"lscv-scalar"` ([bw_lscv()]) and `"mlcv"`,
#' `"mlcv-diagonal"`, `"mlcv-scalar"` ([bw_mlcv()]). Without a shape the
#' selection is full in d > 1. The rules `"nrd0"`, `"nrd"`, `"scott"` and
#' `"silverman"` are names too (see [kde_gpu()]).
#'
#' @examples
#' b <- bw_sj(faithful$eruptions, backend = "cpu")
#' b
#' attr(b, "H")
#' fit <- kde_gpu(faithful$eruptions, bw = 2 * b, backend = "cpu")
#' fit$bw
#' D <- bw_plugin(faithful, shape = "diagonal", backend = "cpu")
#' D
#' all.equal(kde_gpu(faithful, H = D, backend = "cpu")$H,
#'           kde_gpu(faithful, bw = "plugin-diagonal", backend = "cpu")$H)
#' @name bandwidth
#' @aliases kdegpu_bandwidth
NULL

bandwidth_shapes <- c("scalar", "diagonal", "full")

# `H`: the d x d matrix; `shape`: how the value shows it (a 1-D bandwidth
# always shows as a standard deviation). `sd`: the standard deviations
# themselves where the selector has them, so that one whose square leaves
# double's range (an sd of 1e200) still shows as itself.
new_bandwidth <- function(H, shape, method, columns = NULL, sd = sqrt(diag(H)), ...) {
  d <- ncol(H)
  if (d == 1L) shape <- "scalar"
  H <- (H + t(H)) / 2
  dimnames(H) <- list(columns, columns)
  value <- switch(shape,
    scalar = sd[[1L]],
    diagonal = stats::setNames(sd, columns),
    full = H)
  structure(value, H = H, shape = shape, method = method, ...,
            class = c("kdegpu_bandwidth", class(value)))
}

# The name that reproduces a selector's choice through kde_gpu(bw = ):
# its base name, with the shape when it is not kde_gpu()'s ("full" in d > 1).
selector_name <- function(base, shape, d) {
  if (d == 1L || shape == "full") base else paste0(base, "-", shape)
}

# kde_gpu(bw = "<selector>[-<shape>]"): list(base, shape), or NULL for a
# name that is not a selector's (a rule's, or unknown). The shape defaults
# to "full" (d > 1); "scalar" exists for cross-validation only.
selector_bases <- c("lscv", "ucv", "mlcv", "plugin", "scv")

parse_selector <- function(name) {
  name <- tolower(name)
  if (name %in% c("sj", "sj-ste", "sj-dpi")) {
    return(list(base = if (name == "sj-dpi") "sj-dpi" else "sj-ste", shape = "scalar"))
  }
  parts <- regmatches(name, regexec("^([a-z]+)(-(scalar|diagonal|full))?$", name))[[1L]]
  if (length(parts) == 0L || !(parts[[2L]] %in% selector_bases)) return(NULL)
  base <- if (parts[[2L]] == "ucv") "lscv" else parts[[2L]]
  shape <- if (nzchar(parts[[4L]])) parts[[4L]] else "full"
  if (shape == "scalar" && base %in% c("plugin", "scv")) {
    stop_arg("bw", sprintf(paste0("= \"%s\" names no selector: \"%s\" chooses a full or ",
                                  "diagonal H (\"%s\" or \"%s-diagonal\")."),
                           name, base, base, base))
  }
  list(base = base, shape = shape)
}

# Every name kde_gpu(bw = ) accepts, for messages.
bandwidth_names <- function() {
  c(bandwidth_rules, "SJ", "sj-dpi", "plugin", "plugin-diagonal", "scv", "scv-diagonal",
    "lscv", "lscv-diagonal", "lscv-scalar", "mlcv", "mlcv-diagonal", "mlcv-scalar")
}

# A selection given as `bw` or `H` (`arg`), for data with d columns: the
# fit's list(H, type, method), from the value and shape.
bandwidth_from_selection <- function(b, d, arg) {
  shape <- attr(b, "shape", exact = TRUE)
  method <- attr(b, "method", exact = TRUE)
  if (!is.character(shape) || length(shape) != 1L || !(shape %in% bandwidth_shapes) ||
      !is.character(method) || length(method) != 1L) {
    stop_arg(arg, paste("is a damaged bandwidth selection (its `shape` or `method` attribute",
                        "is missing or edited); give a plain number or matrix instead."))
  }
  value <- bare_bandwidth(b)
  if (shape == "full") {
    out <- bandwidth_from_H(value, d, arg)
    out$method <- method
    return(out)
  }
  if (!is.numeric(value) || !is.null(dim(value)) ||
      length(value) != (if (shape == "scalar") 1L else d)) {
    stop_arg(arg, sprintf(paste0(
      "is a %s bandwidth selection of %d value%s, which does not fit data with %d ",
      "column%s; select it on these data."), shape, length(value),
      if (length(value) == 1L) "" else "s", d, if (d == 1L) "" else "s"))
  }
  bandwidth_from_sd(value, d, arg, shape, method)
}

# The bandwidth alone: its numbers, dim and names, without the class and
# the selector's attributes.
bare_bandwidth <- function(x) {
  if (!inherits(x, "kdegpu_bandwidth")) return(x)
  attributes(x) <- attributes(x)[intersect(names(attributes(x)), c("dim", "dimnames", "names"))]
  x
}

#' @export
print.kdegpu_bandwidth <- function(x, ...) {
  shape <- attr(x, "shape", exact = TRUE)
  what <- switch(if (is.null(shape)) "" else shape,
    scalar = "the kernel's standard deviation",
    diagonal = "the kernel's standard deviation per column",
    full = "the kernel's covariance matrix H",
    "")
  cat(sprintf("kdegpu bandwidth, %s%s\n", attr(x, "method", exact = TRUE),
              if (nzchar(what)) sprintf(" (%s: %s)", shape, what) else ""))
  print(bare_bandwidth(x), ...)
  criterion <- attr(x, "criterion", exact = TRUE)
  if (!is.null(criterion)) {
    cat(sprintf("criterion at the optimum: %.8g (%d evaluations)\n",
                criterion, nrow(attr(x, "trace"))))
  }
  lambda <- attr(x, "lambda", exact = TRUE)
  if (!is.null(lambda)) {
    kernels <- attr(x, "discrete_kernels", exact = TRUE)
    cat(sprintf("lambda: %s\n", paste(sprintf("%s = %s (%s)", names(lambda),
                                                format(signif(lambda, 4L)), kernels),
                                        collapse = ", ")))
  }
  given <- attr(x, "given", exact = TRUE)
  if (!is.null(given)) {
    cat(sprintf("for the conditional density given %s\n", paste(given, collapse = ", ")))
  }
  invisible(x)
}

# Arithmetic acts on the value as printed: 2 * bw_sj(x) doubles the
# standard deviation, 2 * bw_plugin(x) doubles H. A result of the same
# shape (positive standard deviations, or a matrix of H's size) is again a
# bandwidth, its H recomputed and the search's record dropped, so it can
# go to kde_gpu() as `bw` or `H`; anything else (a comparison, a negative
# sd) is a plain value.
#' @export
Ops.kdegpu_bandwidth <- function(e1, e2) {
  value <- if (missing(e2)) get(.Generic)(bare_bandwidth(e1)) else {
    get(.Generic)(bare_bandwidth(e1), bare_bandwidth(e2))
  }
  b <- if (inherits(e1, "kdegpu_bandwidth")) e1 else e2
  shape <- attr(b, "shape", exact = TRUE)
  H <- attr(b, "H", exact = TRUE)
  if (!(.Generic %in% c("+", "-", "*", "/", "^")) || !is.numeric(value) ||
      !identical(dim(value), dim(bare_bandwidth(b))) || length(value) != length(b) ||
      is.null(shape) || !is.matrix(H) || any(!is.finite(value))) {
    return(value)
  }
  method <- sprintf("derived from %s", attr(b, "method"))
  if (shape == "full") return(new_bandwidth(unname(value), shape, method, colnames(H)))
  if (any(value <= 0)) return(value)
  sd <- rep_len(as.vector(value), ncol(H))
  new_bandwidth(diag(sd^2, ncol(H)), shape, method, colnames(H), sd = sd)
}
