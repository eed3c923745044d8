/*
 * Parallel loops cut into time slices, so that the calling thread polls for
 * Ctrl-C (kde_interrupt_probe) every KDE_SLICE_SECONDS of wall time, however
 * much a unit of work costs: a count of terms between polls is 10 ms on a
 * fast core with little pruning and seconds on a loaded one.
 *
 * In a region every thread claims `grain` units at a time from a shared
 * counter until the slice's time is up or the work is done; the thread
 * that claims a unit finishes it, so after the region the counter is the
 * first unit not done and the next slice starts there. Which thread does
 * which unit never changes a unit's result.
 */
#ifndef KDEGPU_SLICES_H
#define KDEGPU_SLICES_H

#include <stdint.h>
#include <time.h>

/* Wall time between polls: with one unit of work on top (a query, or a
 * block of them), Ctrl-C answers well within 0.2 s. */
#define KDE_SLICE_SECONDS 0.1

typedef struct {
  int64_t next;   /* first unit not claimed */
  int64_t end;    /* units in all */
  double stop_at; /* wall time after which no unit is claimed */
} kde_slice;

static inline double kde_wall_seconds(void)
{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double) t.tv_sec + 1e-9 * (double) t.tv_nsec;
}

/* Before each region: whether units remain, and if so the slice's end. */
static inline int kde_slice_next(kde_slice *s)
{
  if (s->next > s->end) s->next = s->end;
  s->stop_at = kde_wall_seconds() + KDE_SLICE_SECONDS;
  return s->next < s->end;
}

/* In the region, by every thread: units [*first, *last) to do, or 0 when
 * the slice's time is up or no units remain. */
static inline int kde_slice_claim(kde_slice *s, int64_t grain, int64_t *first,
                                  int64_t *last)
{
  int64_t begin;
  if (kde_wall_seconds() >= s->stop_at) return 0;
#pragma omp atomic capture
  {
    begin = s->next;
    s->next += grain;
  }
  if (begin >= s->end) return 0;
  *first = begin;
  *last = begin + grain < s->end ? begin + grain : s->end;
  return 1;
}

/* The share of the units done, for the progress bar. */
static inline double kde_slice_done(const kde_slice *s)
{
  return (double) (s->next < s->end ? s->next : s->end) / (double) s->end;
}

#endif
