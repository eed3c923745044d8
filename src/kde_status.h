/*
 * kde_status.h: how every C and CUDA layer reports failure, in one place.
 *
 * A backend never calls R: it records a code and a message in a kde_status
 * and returns; only the glue (api_glue.c, raise_status) turns a status into an R condition.
 * The first error recorded wins, so a cleanup path that fails again does
 * not hide the cause. Valid C99 and C++.
 */
#ifndef KDEGPU_KDE_STATUS_H
#define KDEGPU_KDE_STATUS_H

#include <stdarg.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  KDE_OK = 0,
  KDE_ERR_INTERRUPTED = 1, /* the user pressed Ctrl-C between chunks */
  KDE_ERR_ALLOC = 2,       /* host or device out of memory */
  KDE_ERR_CUDA = 3,        /* any other CUDA runtime failure */
  KDE_ERR_ARGUMENT = 4,    /* a backend-level precondition failed */
  KDE_ERR_UNAVAILABLE = 5  /* backend not built or no usable device */
} kde_status_code;

typedef struct {
  int code;          /* a kde_status_code */
  char message[512]; /* what happened and what to do, for the R error */
} kde_status;

static inline void kde_status_clear(kde_status *status)
{
  if (status == NULL) return;
  status->code = KDE_OK;
  status->message[0] = '\0';
}

#if defined(__GNUC__) || defined(__clang__)
static inline void kde_status_set(kde_status *status, int code,
                                  const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#endif

/* Records `code` and the printf-formatted message, unless an error is
 * recorded already (the first error wins). */
static inline void kde_status_set(kde_status *status, int code,
                                  const char *fmt, ...)
{
  va_list ap;
  if (status == NULL || status->code != KDE_OK) return;
  status->code = code;
  va_start(ap, fmt);
  vsnprintf(status->message, sizeof status->message, fmt, ap);
  va_end(ap);
}

#ifdef __cplusplus
}
#endif

#endif /* KDEGPU_KDE_STATUS_H */
