# A fit answers only as it was made. The fields that decide its values are
# kept, as fitted, in the fit's private environment (object$device, which
# every copy of the fit shares), and check_fit() compares them with
# identical() before each evaluation: an unedited field is the same object
# in memory, so the comparison costs nothing until a field was replaced.
# An edited field is refused with what changed and how to refit, never
# answered from evaluation state (whitened points, constants, a GPU copy)
# made for the old value.

# User-facing fields first, so that the message names what the user edited
# rather than the state derived from it.
fitted_fields <- c("x", "weights", "n", "d", "H", "bw", "kernel", "lower", "upper",
                   "adaptive", "debias", "backend", "precision",
                   "images", "center", "transform", "chol_H", "log_const", "z", "order",
                   "tile_size", "tile_weights", "tile_scale")

# What to give kde_gpu() instead of editing each user-facing field.
refit_arguments <- c(
  x = "the new data as `x`", n = "the new data as `x`", d = "the new data as `x`",
  weights = "`weights = `", H = "`H = `", bw = "`bw = `", kernel = "`kernel = `",
  lower = "`lower = ` and `upper = `", upper = "`lower = ` and `upper = `",
  adaptive = "`adaptive = TRUE` and `alpha = ` (the local factors come from the pilot)",
  debias = "`debias = `", backend = "`backend = `", precision = "`precision = `"
)

# Records the fit's fields as fitted; the last step of kde_gpu().
seal_fit <- function(object) {
  object$device$fitted <- lapply(stats::setNames(nm = fitted_fields), function(f) object[[f]])
  object
}

# Stops when a field differs from its fitted value. Fits without a record
# (made inside kdegpu from another fit's parts, e.g. a margin) pass.
check_unedited <- function(object, arg) {
  fitted <- if (is.environment(object$device)) object$device$fitted
  if (!is.list(fitted)) return(invisible(object))
  for (field in names(fitted)) {
    if (identical(object[[field]], fitted[[field]])) next
    advice <- refit_arguments[field]
    stop(sprintf(paste0(
      "`%s$%s` was changed after fitting; a fit is evaluated as it was made, so ",
      "refit with kde_gpu(), %s."), arg, field,
      if (is.na(advice)) "not by editing its evaluation state" else paste("giving", advice)),
      call. = FALSE)
  }
  invisible(object)
}
