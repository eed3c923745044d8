/* The one owner of the CPU thread count (see threads.c). */
#ifndef KDEGPU_THREADS_H
#define KDEGPU_THREADS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Threads for a parallel region: `requested` (the user's
 * options(kdegpu.threads); <= 0 means all that are allowed) capped by the
 * cores, OMP_THREAD_LIMIT and OMP_NUM_THREADS; 1 in a forked child. Every
 * `#pragma omp parallel` takes its num_threads() from here. */
int kde_thread_count(int requested);

/* Threads for a region of `work` units (pairs times coordinates, or as
 * near as the loop has): kde_thread_count(requested), but one thread per
 * KDE_WORK_PER_THREAD units at most, so that a small job does not wake
 * threads that cost more than they save (data.table's throttle). */
int kde_thread_count_for(int requested, double work);

/* 1 when the CPU backend was built with OpenMP. */
int kde_has_openmp(void);

/* The calling thread's number in its parallel region (0 outside one, or
 * without OpenMP): which per-thread scratch it uses. */
int kde_thread_index(void);

/* Registers the fork handler (from R_init_kdegpu, once). */
void kde_threads_install_fork_handler(void);

/* 1 in a process forked from the one that loaded kdegpu after that
 * process had run parallel or CUDA work (see threads.c). */
int kde_in_forked_child(void);

/* Called by the glue before its first CUDA runtime call, so that a child
 * forked later knows it inherited a CUDA context it must not touch. */
void kde_note_cuda_used(void);

/* 1 in a forked child whose parent had used CUDA. */
int kde_cuda_inherited(void);

#ifdef __cplusplus
}
#endif

#endif
