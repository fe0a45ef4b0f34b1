/* tests/test_util.h: helpers shared by the Check suites: locating fixtures,
 * running a Check suite with the skip convention, random data. */
#ifndef INFERD_TEST_UTIL_H
#define INFERD_TEST_UTIL_H

#include <check.h>
#include <stdbool.h>
#include <stdint.h>

/* Directory of the shared fixtures ($INFERD_FIXTURES or ../shared/fixtures),
 * or NULL when it does not exist. */
const char *test_fixtures_dir(void);
/* Heap path "<fixtures>/<rel>" or NULL when fixtures are absent. */
char *test_fixture_path(const char *rel);
/* Path of the built inferd binary ($INFERD_BIN) or NULL. */
const char *test_inferd_bin(void);
/* True when INFERD_TEST_DEVICE=cuda asks tests that support both backends to
 * run on the GPU (they skip when the build or machine has no CUDA device). */
bool test_use_cuda(void);
/* INFERD_TEST_TP=N: tests that load a model through their shared helper
 * split it over N tensor-parallel ranks (default 1). */
int test_tp_size(void);
/* INFERD_TEST_EAGER=1: the engine suites load with enforce_eager (no CUDA
 * graphs), to tell a graph-only failure from one of the ops. */
bool test_enforce_eager(void);
/* INFERD_TEST_KV_FP8=1: the engine suites load with an fp8 e4m3 KV cache
 * (--kv-cache-dtype fp8): their invariances must hold on it too. */
bool test_kv_fp8(void);
/* Print a skip message and exit 77 (ctest SKIP_RETURN_CODE); inside a
 * forked Check test the child exits 77 and test_run_suite counts it as a
 * skip. */
void test_skip(const char *why) __attribute__((noreturn));
/* The parsed golden/stories260K.json (llama2.c greedy cases; caller frees
 * with cJSON_Delete); skips the test (77) when the fixture is absent. */
struct cJSON *test_golden_stories(void);
/* Run a suite, return the process exit code: 0 when all passed, 1 when
 * any failed, 77 (skip) when none failed but some skipped (a forked test
 * that called test_skip, e.g. for want of a fixture on a fresh machine:
 * Check reports its exit 77 as an error). */
int test_run_suite(Suite *s);
/* Deterministic uniform floats in [lo, hi). */
void test_fill_uniform(float *x, size_t n, uint64_t seed, float lo, float hi);
/* Index of the largest of x[0..n) (the first of equal ones). */
int test_argmax(const float *x, int n);
/* Write `len` bytes to a fresh temp file; returns heap path. */
char *test_write_temp(const char *prefix, const void *data, size_t len);
/* Make a fresh temp directory; returns heap path. */
char *test_make_temp_dir(const char *prefix);


/* Run argv[0] with args (NULL-terminated), capture stdout and stderr (heap,
 * NUL-terminated) and the exit code (-signal when killed). Returns false when
 * the program could not be started. */
bool test_run_cmd(char *const argv[], char **out, char **err, int *exit_code);
/* test_run_cmd that fails the test when argv[0] cannot be started; returns
 * the exit code. */
int test_run_rc(char *const argv[], char **out, char **err);
/* A TCP port free on loopback now (bind port 0, read it, close): for
 * tests that start a listener in another process. */
int test_free_port(void);
/* Open descriptors of this process (/proc/self/fd entries): leak checks
 * for sockets, which ASan does not see. */
int test_open_fds(void);
/* How many bytes of s[0..n) are c (columns of a printed table row). */
int test_count_char(const char *s, size_t n, char c);

#endif
