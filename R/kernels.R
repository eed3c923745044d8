# Kernel names, in the order of the kde_kernel enum in
# inst/include/kdegpu/kernels.h (the index is what the C code receives).
kernel_names <- c(
  "gaussian", "epanechnikov", "rectangular", "triangular",
  "biweight", "cosine", "optcosine", "exponential"
)

kernel_aliases <- c(tophat = "rectangular", linear = "triangular")

# The canonical name of a kernel given by its name, an alias, or an
# unambiguous prefix (as stats::density() accepts).
resolve_kernel <- function(kernel) {
  if (!is.character(kernel) || length(kernel) != 1L || is.na(kernel)) {
    stop("`kernel` must be one string, e.g. \"gaussian\".", call. = FALSE)
  }
  choices <- c(kernel_names, names(kernel_aliases))
  hit <- pmatch(kernel, choices)
  if (is.na(hit)) {
    stop(sprintf(
      "`kernel` must be one of %s (or the aliases %s), not \"%s\".",
      paste0("\"", kernel_names, "\"", collapse = ", "),
      paste0("\"", names(kernel_aliases), "\"", collapse = ", "),
      kernel
    ), call. = FALSE)
  }
  name <- choices[hit]
  if (name %in% names(kernel_aliases)) kernel_aliases[[name]] else name
}

kernel_index <- function(kernel) match(kernel, kernel_names) - 1L

# The radius scale a and log normalising constant of the standardised
# kernel in d dimensions, from the same C code the backends use.
kernel_constants <- function(kernel, d) {
  constants <- .Call(C_kdegpu_kernel_constants, kernel_index(kernel), as.integer(d))
  list(scale = constants[[1L]], log_norm_const = constants[[2L]])
}
