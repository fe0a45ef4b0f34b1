/* tests/fuzz/fuzz_util.h: helpers shared by the libFuzzer harnesses.
 *
 * Harnesses run in one process for millions of inputs, so every helper
 * here reuses its resources (one memfd, one temp directory) instead of
 * creating files per input, and aborts on setup failures (a broken harness
 * must not look like a clean run).
 */
#ifndef INFERD_TESTS_FUZZ_UTIL_H
#define INFERD_TESTS_FUZZ_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fixtures root: $INFERD_FIXTURES, else the path configured in CMake. */
const char *fuzz_fixtures(void);

/* Silence the project's log (errors on bad input are expected by the
 * million); FUZZ_LOG=1 in the environment keeps it. */
void fuzz_quiet(void);

/* A NUL-terminated heap copy of data[0..n) (free()). */
char *fuzz_cstr(const uint8_t *data, size_t n);

/* A private temp directory created once per process (removed at exit). */
const char *fuzz_tmpdir(void);

/* Write data to <fuzz_tmpdir()>/name (truncating); aborts on I/O errors. */
void fuzz_write(const char *name, const void *data, size_t n);
/* Remove <fuzz_tmpdir()>/name if present. */
void fuzz_unlink(const char *name);

/* true when s[0..n) is well-formed UTF-8 (no surrogates, no overlongs). */
bool fuzz_utf8_valid(const char *s, size_t n);
/* Replace every byte that does not start a well-formed UTF-8 sequence
 * with '?', in place. */
void fuzz_utf8_sanitize(char *s, size_t n);

/* Abort with a message (a harness-detected bug: libFuzzer saves the input). */
#define FUZZ_ASSERT(cond, ...)                                                                            \
    do {                                                                                                  \
        if (!(cond))                                                                                      \
            fuzz_fail(__FILE__, __LINE__, #cond, __VA_ARGS__);                                            \
    } while (0)
void fuzz_fail(const char *file, int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#endif
