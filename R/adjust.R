# `adjust` of kde_gpu(), as in stats::density(): the bandwidth actually
# used is adjust times the selected one (H times adjust^2), whichever rule,
# selector or number chose it.

check_adjust <- function(adjust) {
  if (!is.numeric(adjust) || is.complex(adjust) || length(adjust) != 1L || is.na(adjust) ||
      !is.finite(adjust) || adjust <= 0) {
    stop_arg("adjust", "must be one positive number (the factor applied to the bandwidth).")
  }
  as.double(adjust)
}

adjust_bandwidth <- function(bandwidth, adjust) {
  H <- bandwidth$H * adjust^2
  if (any(!is.finite(H)) || any(diag(H) < .Machine$double.xmin)) {
    stop_arg("adjust", sprintf(paste0(
      "= %s times the bandwidth takes the kernel variance H beyond double precision; ",
      "choose a `bw` or `H` of the size wanted instead."), format(adjust, digits = 3L)))
  }
  bandwidth$H <- H
  bandwidth
}
