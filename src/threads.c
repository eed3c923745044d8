/*
 * The one owner of the CPU thread count, and what a fork changes about it.
 *
 * Thread count (data.table's rule): never more than the cores,
 * OMP_THREAD_LIMIT or OMP_NUM_THREADS allow, at least 1, and
 * omp_set_num_threads() is never called (it would change R's and other
 * packages' threads); every parallel region passes num_threads().
 *
 * Fork: once a process has run an OpenMP region, libgomp keeps a pool of
 * worker threads, and a child made by fork() (parallel::mclapply,
 * makeForkCluster) inherits the pool's bookkeeping but not its threads: the
 * child's next region with more than one thread waits forever for workers
 * that do not exist. A pthread_atfork child handler therefore drops a
 * forked child to one thread: its regions then run on the calling thread
 * only, which libgomp does without the pool. That is also the right amount
 * of work per process, since mclapply already runs one process per core.
 * The same handler records whether the parent had used CUDA: a CUDA
 * context does not survive fork, and any runtime call on it in the child
 * fails or hangs, so the glue refuses CUDA work there with a message that
 * points to a PSOCK cluster.
 */
#include "threads.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#if !defined(_WIN32)
#include <pthread.h>
#define KDE_HAVE_FORK 1
#endif

static volatile int forked_child = 0;
static volatile int cuda_used = 0;
static volatile int cuda_inherited = 0;

int kde_has_openmp(void)
{
#ifdef _OPENMP
  return 1;
#else
  return 0;
#endif
}

int kde_thread_index(void)
{
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

int kde_thread_count(int requested)
{
#ifdef _OPENMP
  if (forked_child) return 1;
  int limit = omp_get_num_procs();
  if (omp_get_thread_limit() < limit) limit = omp_get_thread_limit();
  if (omp_get_max_threads() < limit) limit = omp_get_max_threads();
  if (limit < 1) limit = 1;
  if (requested <= 0 || requested > limit) return limit;
  return requested;
#else
  (void) requested;
  return 1;
#endif
}

/* Work per thread below which another thread does not pay: a region's
 * start and barrier cost microseconds on idle cores, but a thread that
 * competes with other processes for a core waits for its time slice.
 * 1e7 pair-coordinates are about 10 ms on one core. On 2 loaded cores
 * (load 3.5), density evaluations of 2e5 to 1.6e7 units took 0.6 to 36 ms
 * on one thread and 2.4-10x that on two; on idle cores a job this size
 * loses at most a few ms on one thread. */
#define KDE_WORK_PER_THREAD 1.0e7

int kde_thread_count_for(int requested, double work)
{
  const int most = kde_thread_count(requested);
  const double by_work = work / KDE_WORK_PER_THREAD;
  if (!(by_work >= 1)) return 1; /* also NaN */
  return by_work < (double) most ? (int) by_work : most;
}

#ifdef KDE_HAVE_FORK
static void after_fork_in_child(void)
{
  forked_child = 1;
  cuda_inherited = cuda_used;
}
#endif

void kde_threads_install_fork_handler(void)
{
#ifdef KDE_HAVE_FORK
  static int installed = 0;
  if (!installed && pthread_atfork(NULL, NULL, after_fork_in_child) == 0)
    installed = 1;
#endif
}

int kde_in_forked_child(void) { return forked_child; }

void kde_note_cuda_used(void) { cuda_used = 1; }

int kde_cuda_inherited(void) { return cuda_inherited; }
