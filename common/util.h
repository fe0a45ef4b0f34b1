/* common/util.h: small helpers shared by every module: clocks, whole-file
 * reads, overflow-checked arithmetic, number-list parsing. */
#ifndef INFERD_COMMON_UTIL_H
#define INFERD_COMMON_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define INFERD_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define INFERD_MIN(a, b) ((a) < (b) ? (a) : (b))
#define INFERD_MAX(a, b) ((a) > (b) ? (a) : (b))
#define INFERD_CEIL_DIV(a, b) (((a) + (b)-1) / (b))

/* Monotonic clock in microseconds / seconds. */
int64_t util_now_us(void);
double util_now_s(void);
/* Wall clock (unix epoch) in seconds. */
int64_t util_unix_s(void);

/* Deadlines on the monotonic clock (util_now_s), one representation for
 * request timeouts, bounded waits and shutdown drains. `at` is the absolute
 * time in seconds; a deadline with `never` set does not expire. A negative
 * timeout means "no deadline"; a zero timeout is already expired (a poll). */
typedef struct {
    double at;
    bool never;
} inferd_deadline;

/* The deadline timeout_s seconds after start_s (a util_now_s() time); never
 * when timeout_s < 0. */
inferd_deadline inferd_deadline_from(double start_s, double timeout_s);
/* The deadline timeout_s seconds / timeout_ms milliseconds from now; never
 * when the timeout is negative. */
inferd_deadline inferd_deadline_in_s(double timeout_s);
inferd_deadline inferd_deadline_in_ms(int64_t timeout_ms);
inferd_deadline inferd_deadline_never(void);
/* True once the deadline has passed (never for a `never` deadline). */
bool inferd_deadline_expired(inferd_deadline d);
/* Seconds left, >= 0 (0 once expired); HUGE_VAL for never. */
double inferd_deadline_remaining_s(inferd_deadline d);
/* Milliseconds left, rounded up, clamped to [0, INT_MAX]; -1 for never (the
 * poll()/epoll convention). */
int inferd_deadline_remaining_ms(inferd_deadline d);
/* pthread_cond_wait until d on a condition variable whose clock is
 * CLOCK_MONOTONIC (plain wait for never). Returns false when the deadline
 * has passed, true on a wakeup (possibly spurious: re-check the predicate). */
bool inferd_deadline_cond_wait(inferd_deadline d, pthread_cond_t *cv, pthread_mutex_t *mu);

/* Read a whole file into a NUL-terminated heap buffer (inferd_free it).
 * max_bytes bounds the size (0 = 1 GiB). Errors name the path. */
inferd_status util_read_file(const char *path, size_t max_bytes, char **out, size_t *out_len);
bool util_file_exists(const char *path);
/* Write text and a final newline to path (created or truncated). False when
 * it cannot be opened, written or closed (fclose is checked: a full disk
 * often shows only there); errno tells why. */
bool util_write_text_file(const char *path, const char *text);
/* Join dir and name into a new heap string "dir/name". */
char *util_path_join(const char *dir, const char *name);

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool util_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool util_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}

/* Parse a comma-separated list of int32 ("1,2,3"). *out is heap (inferd_free).
 * Empty items, junk and out-of-range values are errors. */
inferd_status util_parse_int_list(const char *s, int32_t **out, int *n_out);
/* Strict number parsing of a whole string; false on junk or range error. */
bool util_parse_int(const char *s, long long lo, long long hi, long long *out);
bool util_parse_double(const char *s, double *out);

/* Validate UTF-8 (no overlongs, no surrogates, max U+10FFFF). */
bool util_utf8_valid(const char *s, size_t n);

#endif
