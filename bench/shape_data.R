# The data of bench/shapes.R's rows (its header says what each is), also
# read by bench/plan_threshold.R.
normal <- function(n, d, seed) {
  set.seed(seed)
  matrix(rnorm(n * d), n, d)
}
# in d = 3 the grid's third coordinate is 0
cluster_centres <- function(d) {
  cbind(as.matrix(expand.grid(x = 200 * (0:4), y = 200 * (0:3))), matrix(0, 20, d - 2))
}
clustered <- function(n, d, seed) {
  set.seed(seed)
  cluster_centres(d)[sample.int(20L, n, replace = TRUE), ] + matrix(rnorm(d * n), n, d)
}
clustered_queries <- function(x, seed) {
  set.seed(seed)
  d <- ncol(x)
  centres <- cluster_centres(d)
  inside <- x[sample.int(nrow(x), 2000L), ] + matrix(rnorm(2000 * d, sd = 0.5), 2000, d)
  pairs <- sample.int(19L, 2000L, replace = TRUE)
  between <- (centres[pairs, ] + centres[pairs + 1L, ]) / 2 +
    matrix(rnorm(2000 * d, sd = 10), 2000, d)
  far <- cbind(runif(1300, -800, 1600), runif(1300, -600, 1200),
               matrix(runif(1300 * (d - 2), -600, 600), 1300, d - 2))
  rbind(inside, between, far)
}
gps <- function(n, seed) {
  set.seed(seed)
  matrix(runif(2 * n, 0, 4000), n, 2)
}
