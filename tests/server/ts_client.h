/* tests/server/ts_client.h: helpers for the black-box server tests: start
 * the built `inferd serve` on a free loopback port, talk to it with libcurl
 * (or a raw socket when a test must hang up mid-request), read /metrics,
 * stop it with SIGTERM and report its exit status.
 */
#ifndef INFERD_TESTS_TS_CLIENT_H
#define INFERD_TESTS_TS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include <cjson/cJSON.h>

typedef struct {
    pid_t pid;
    int port;
    char base[64]; /* http://127.0.0.1:PORT */
    char log_path[256];
    const char *api_key;
} ts_server;

/* Start `inferd serve` with the fixed test flags (stories260K unless the
 * args give --model, --device cpu, --threads 1, --host 127.0.0.1, a free
 * --port, --log-level info) plus args (NULL-terminated). Waits for /health
 * 200 (30 s). Skips the test (exit 77) when the binary or fixtures are
 * absent; returns false when the server did not come up. */
bool ts_start(ts_server *s, const char *const *args);
/* SIGTERM, wait up to timeout_s; returns the exit code, 128+signal when
 * killed by one, or -1 when it had to be SIGKILLed. The log file is removed
 * after a clean exit (0) and kept otherwise. */
int ts_stop(ts_server *s, double timeout_s);
/* ts_stop that fails the running Check test unless the exit status is 0
 * (the log is printed first when it is not). */
void ts_stop_ok(ts_server *s);

/* Whether the server's log (stdout + stderr) contains needle. */
bool ts_log_contains(const ts_server *s, const char *needle);
/* Print the server log's tail (for failure diagnosis). */
void ts_dump_log(const ts_server *s);

typedef struct {
    long status;
    char *body; /* heap, NUL-terminated */
    size_t len;
    char retry_after[32]; /* Retry-After header or "" */
    char allow[64];       /* Allow header or "" */
    char ctype[128];      /* Content-Type */
    char error[256];      /* libcurl error when status is 0 */
} ts_resp;

/* One request. body may be NULL; body_len < 0 means strlen. auth: the
 * Authorization header value, NULL = "Bearer <s->api_key>" when a key is
 * set, "" = no header. */
ts_resp ts_request(const ts_server *s, const char *method, const char *path, const char *body, long body_len,
                   const char *auth);
void ts_resp_free(ts_resp *r);

/* POST JSON and parse the response body (NULL when not JSON). */
cJSON *ts_post_json(const ts_server *s, const char *path, const char *body, long *status);
/* ts_post_json that fails the running Check test unless the answer is a
 * 200 with a JSON body. */
cJSON *ts_post_ok(const ts_server *s, const char *path, const char *body);

/* Parse an SSE body: concatenated text of the choices (completions "text"
 * or chat "delta.content"), the number of events, and the last JSON event
 * before [DONE] (heap cJSON, or NULL). Returns false when the stream is not
 * well formed (no [DONE], non-JSON data). */
bool ts_sse_parse(const char *body, char **text, int *n_events, cJSON **last, cJSON **first);

/* An SSE body's data events as a JSON array, in order, without the final
 * [DONE]; NULL (and *why set) when an event is not JSON, data follows
 * [DONE] or [DONE] is missing. cJSON_Delete the array. */
cJSON *ts_sse_events(const char *body, const char **why);
/* The same, failing the test (Check) when the stream is malformed. */
cJSON *ts_sse_events_ok(const char *body);

/* GET /metrics text (heap). */
char *ts_metrics(const ts_server *s);
/* Value of one series in /metrics (NAN when absent). */
double ts_metric(const ts_server *s, const char *series);
/* Poll /metrics until running+waiting == want_active and, when
 * want_kv_zero, kv blocks used == 0; false after timeout_s. */
bool ts_wait_engine(const ts_server *s, int want_running, int want_waiting, bool want_kv_zero,
                    double timeout_s);

/* Poll /metrics until `series` has value `want`; false after timeout_s.
 * (Engine gauges and counters are published after each engine step, so a
 * client can see its response a moment before the counters move.) */
bool ts_wait_metric(const ts_server *s, const char *series, double want, double timeout_s);

/* stories260K's greedy continuation of "Once upon a time" (60 tokens) from
 * the llama2.c golden file (heap); skips the test when absent. */
char *ts_golden_text(void);

/* Connect to the server and write bytes[0..n) as they are (any request,
 * well formed or not); returns the fd (-1 on error). */
int ts_raw_send(const ts_server *s, const char *bytes, size_t n);
/* Connect to the server from source address src_ip (NULL = any; any
 * 127.x.y.z works on Linux loopback); returns the fd (-1 on error). */
int ts_raw_connect(const ts_server *s, const char *src_ip);
/* Send one raw request (Connection: close expected in it) and read the
 * whole answer until the server closes or timeout_ms; returns the status
 * (0 when none) and the answer in *out (heap, free()) when out is not NULL. */
int ts_raw_exchange(const ts_server *s, const char *req, int timeout_ms, char **out);
/* Raw HTTP/1.1 POST over a socket; returns the connected fd (-1 on error).
 * The caller reads with ts_raw_read_until and hangs up with close(). */
int ts_raw_post(const ts_server *s, const char *path, const char *json);
/* Read into *acc (heap, appended) until it contains needle or timeout_ms
 * passes or the peer closes; true when found. */
bool ts_raw_read_until(int fd, const char *needle, int timeout_ms, char **acc, size_t *acc_len);

/* A temporary HF directory (name tagged with tag) holding stories260K's
 * config.json, model.safetensors and tokenizer.json (symlinks) and, when
 * tokenizer_config is not NULL, that object as tokenizer_config.json
 * (heap path). Fails the running Check test on an error. */
char *ts_stories_dir(const char *tag, const cJSON *tokenizer_config);

/* Monotonic seconds. */
double ts_now(void);
void ts_sleep_ms(int ms);

/* Whether the black-box suites can run here: the inferd binary (INFERD_BIN,
 * set by ctest) and the stories260K fixture. */
bool ts_have_server(void);
/* Skip the whole test program (exit 77, with the reason) unless they can. */
void ts_require_server(void);

#endif
