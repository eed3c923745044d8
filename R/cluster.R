# Spreading evaluations over the workers of a `parallel` cluster or the
# current `future` plan. kdegpu writes no networking of its own: the engines
# move the data, and each worker evaluates with its own local backend (its
# GPUs or its CPU cores). Partial results over training shards meet in the
# same log-sum-exp merge the kernels use (C_kdegpu_lse_rows).
#
# Data reach each `parallel` worker once per fit (or per bandwidth search):
# workers keep their shard in `worker_store`, keyed by the data's id, and
# later calls send only the queries and the bandwidth. `future` cannot
# address a given worker, so there the shard travels with each call.

worker_store <- new.env(parent = emptyenv())

id_counter <- new.env(parent = emptyenv())
id_counter$n <- 0L

# An id for a data set, unique across processes, made without touching the
# user's random number stream.
new_data_id <- function() {
  id_counter$n <- id_counter$n + 1L
  sprintf("%s-%d-%.6f-%d", Sys.info()[["nodename"]], Sys.getpid(),
          as.numeric(Sys.time()), id_counter$n)
}

# The engine behind a `cluster` argument: NULL (none), a parallel cluster,
# or "future" for the current plan.
cluster_engine <- function(cluster) {
  if (is.null(cluster)) return(NULL)
  if (inherits(cluster, "cluster")) {
    return(list(kind = "parallel", cluster = cluster, size = length(cluster)))
  }
  if (identical(cluster, "future")) {
    if (!requireNamespace("future.apply", quietly = TRUE) ||
        !requireNamespace("future", quietly = TRUE)) {
      stop_arg("cluster", "= \"future\" needs the packages future and future.apply.")
    }
    return(list(kind = "future", size = max(1L, future::nbrOfWorkers())))
  }
  stop_arg("cluster", "must be NULL, a cluster from parallel::makeCluster(), or \"future\" ",
           "(the current future::plan()).")
}

# What the workers need to know of a data set: its points, weights, an
# adaptive fit's local factors (NULL otherwise), an id, and where it was
# sent already (an environment shared by copies of a fit).
cluster_data <- function(x, weights, id, sent, lambda = NULL) {
  list(x = x, weights = weights, lambda = lambda, id = id, sent = sent)
}

fit_cluster_data <- function(object) {
  cluster_data(object$x, object$weights, object$id, object$device, object$adaptive$lambda)
}

# Contiguous, ordered index chunks, at most `k`, none empty.
split_indices <- function(n, k) {
  k <- max(1L, min(as.integer(k), n))
  ends <- round(seq(0, n, length.out = k + 1L))
  lapply(seq_len(k), function(i) seq.int(ends[i] + 1, ends[i + 1L]))
}

# A worker's shard: its points, their weights renormalised, their local
# factors (adaptive fits; they stay the whole fit's), and the log of the
# weight share they carry (-Inf for a shard of zero weight).
make_shards <- function(data, k) {
  lapply(split_indices(nrow(data$x), k), function(index) {
    w <- data$weights[index]
    share <- sum(w)
    list(x = data$x[index, , drop = FALSE], index = index,
         weights = if (share > 0) w / share else w, log_share = log(share),
         lambda = data$lambda[index])
  })
}

# ---- on the workers ------------------------------------------------------

worker_keep_shard <- function(shard, id) {
  assign(id, shard, envir = worker_store)
  TRUE
}

# Runs one task; errors come back as values naming the worker, so the
# master can say which worker failed.
worker_run <- function(task, shard, id) {
  tryCatch({
    if (is.null(shard)) {
      shard <- get0(id, envir = worker_store, inherits = FALSE)
      if (is.null(shard)) return(structure(list(), class = "kdegpu_missing_shard"))
    }
    worker_evaluate(shard, task)
  }, error = function(e) {
    structure(list(message = conditionMessage(e), host = Sys.info()[["nodename"]],
                   pid = Sys.getpid()), class = "kdegpu_worker_error")
  })
}

# The log of the shard's weighted kernel sum at the task's points, with the
# shard's weight share: log sum_{j in shard} w_j K(q - x_j). A "loo" task
# evaluates at every training point and leaves out the shard's own points'
# self terms exactly.
worker_evaluate <- function(shard, task) {
  n_out <- nrow(task$points)
  if (!is.finite(shard$log_share)) return(rep(-Inf, n_out))
  backend <- switch(task$backend, cpu = "cpu", cuda = "cuda",
                    auto = if (.Call(C_kdegpu_cuda_device_count) > 0L) "cuda" else "cpu")
  fit <- new_kde_gpu(shard$x, shard$weights, list(H = task$H, type = "full", method = "given"),
                     task$kernel, backend, task$precision, NULL, "shard", lambda = shard$lambda,
                     tolerance = task$tolerance)
  on.exit(release_device_copy(fit))
  out <- evaluate_log_density(fit, task$points, tolerance = task$tolerance)
  if (task$leave_one_out) {
    # the shard's own points (or their images under task$image: a bounded
    # fit) leave out their own terms
    out[shard$index] <- if (is.null(task$image)) {
      log_density_at_training_points(fit, TRUE, task$tolerance)
    } else {
      training_image_log_density(fit, task$image$sign, task$image$shift, TRUE, task$tolerance)
    }
  }
  out + shard$log_share
}

# ---- on the master -------------------------------------------------------

# One task per shard, task i on worker i; results in order.
run_on_workers <- function(engine, data, key, shards, tasks) {
  results <- if (engine$kind == "parallel") {
    run_parallel(engine$cluster, data, key, shards, tasks)
  } else {
    tryCatch(
      future.apply::future_Map(worker_run, tasks, shards, list(key), future.seed = NULL,
                               future.packages = "kdegpu"),
      error = function(e) {
        stop(sprintf("kdegpu: a future worker failed: %s", conditionMessage(e)), call. = FALSE)
      })
  }
  for (i in seq_along(results)) {
    r <- results[[i]]
    if (inherits(r, "kdegpu_worker_error")) {
      stop(sprintf("kdegpu: worker %d (%s, pid %d) failed: %s", i, r$host, r$pid, r$message),
           call. = FALSE)
    }
    if (!is.numeric(r) || length(r) != nrow(tasks[[i]]$points)) {
      stop(sprintf("kdegpu: worker %d returned no valid result.", i), call. = FALSE)
    }
  }
  results
}

run_parallel <- function(cl, data, key, shards, tasks) {
  workers <- cl[seq_along(shards)]
  guard <- function(what, expr) {
    tryCatch(expr, error = function(e) {
      stop(sprintf(paste0("kdegpu: a worker of the cluster failed or disappeared while %s: %s. ",
                          "Check the workers (or restart the cluster) and try again."),
                   what, conditionMessage(e)), call. = FALSE)
    })
  }
  sent <- data$sent$sent_to
  if (is.null(sent)) sent <- list()
  if (!any(vapply(sent, function(s) identical(s, list(cl, key)), NA))) {
    guard("receiving the data", parallel::clusterMap(workers, worker_keep_shard, shards,
                                                     MoreArgs = list(id = key)))
    data$sent$sent_to <- c(sent, list(list(cl, key)))
  }
  results <- guard("evaluating", parallel::clusterMap(
    workers, worker_run, tasks, rep(list(NULL), length(tasks)),
    MoreArgs = list(id = key), SIMPLIFY = FALSE))
  missing <- vapply(results, inherits, NA, what = "kdegpu_missing_shard")
  if (any(missing)) {
    # A worker restarted since it got its shard: send it with the task.
    results[missing] <- guard("evaluating", parallel::clusterMap(
      cl[which(missing)], worker_run, tasks[missing], shards[missing],
      MoreArgs = list(id = key), SIMPLIFY = FALSE))
  }
  results
}

# log sum_j w_j K_H(q - x_j) (plus log_const: a log-density) at the rows of
# `points` over the cluster. split = "training" shards the training points
# across the workers and merges; "queries" gives each worker all training
# points and a chunk of the queries. leave_one_out: points are the training
# points (or with `image`, list(sign, shift), their images sign * x + shift:
# a bounded fit) and each leaves out its own term (training split only).
cluster_log_sum <- function(engine, data, points, H, kernel, precision, backend,
                            split = "training", leave_one_out = FALSE, tolerance = NULL,
                            image = NULL) {
  # The options of this process decide, not the workers' (NULL: each
  # worker's backend default).
  if (is.null(tolerance)) tolerance <- getOption("kdegpu.tolerance")
  base <- list(H = H, kernel = kernel, precision = precision, backend = backend,
               leave_one_out = leave_one_out, tolerance = tolerance, image = image)
  if (split == "queries") {
    chunks <- split_indices(nrow(points), engine$size)
    shard <- make_shards(data, 1L)
    tasks <- lapply(chunks, function(rows) c(base, list(points = points[rows, , drop = FALSE])))
    return(unlist(run_on_workers(engine, data, paste0(data$id, ":all"),
                                 rep(shard, length(tasks)), tasks), use.names = FALSE))
  }
  shards <- make_shards(data, engine$size)
  tasks <- rep(list(c(base, list(points = points))), length(shards))
  merge_log_sums(run_on_workers(engine, data, paste0(data$id, ":shards", length(shards)),
                                shards, tasks))
}

# Row-wise log-sum-exp of the shards' partial results, in C with the
# kernels' own merge.
merge_log_sums <- function(parts) {
  .Call(C_kdegpu_lse_rows, do.call(cbind, lapply(parts, as.double)))
}
