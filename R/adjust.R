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

# (kde_gpu() checks the adjusted bandwidth's scale: check_bandwidth_scale)
adjust_bandwidth <- function(bandwidth, adjust) {
  bandwidth$H <- bandwidth$H * adjust^2
  bandwidth
}
