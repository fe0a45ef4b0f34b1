/* tests/server/test_server_attack.c: attacks from the hardening issue, as an
 * attacker would send them (raw sockets, bytes the HTTP client libraries
 * would refuse to produce), against a running `inferd serve` on the CPU
 * backend, plus unit tables of the defences they hit.
 *
 * Rows so far: log injection (a percent-encoded newline or ESC sequence in
 * the path must reach the access log escaped, never as a forged line or a
 * terminal control sequence). Each row must also leave the server serving.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/util.h"
#include "server/srv_log.h"
#include "test_util.h"
#include "ts_client.h"

/* ---- srv_log_escape: unit table ---------------------------------------- */

typedef struct {
    const char *in;
    size_t cap;
    const char *want;
} esc_row;

static const esc_row k_esc[] = {
    {"/v1/models", 64, "/v1/models"},
    {"/a\nb", 64, "/a\\x0ab"},
    {"\r\n", 64, "\\x0d\\x0a"},
    {"\x1b[2J", 64, "\\x1b[2J"},
    {"\x7f", 64, "\\x7f"},
    {"q\"uo\\te", 64, "q\\x22uo\\x5cte"},
    {"caf\xc3\xa9", 64, "caf\xc3\xa9"}, /* UTF-8 passes through */
    {"", 64, ""},
    {NULL, 64, ""},
    {"abcdefghij", 8, "abcd..."},      /* truncated with "..." inside cap */
    {"\n\n\n\n", 8, "\\x0a..."},
    {"abc", 1, ""},
    {"abcdef", 4, "..."},
    {"abcdef", 3, ""},
};

START_TEST(test_escape_table)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_esc); i++) {
        char out[64];
        memset(out, 'Z', sizeof out);
        size_t n = srv_log_escape(k_esc[i].in, out, k_esc[i].cap);
        ck_assert_msg(strcmp(out, k_esc[i].want) == 0, "row %zu: got '%s' want '%s'", i, out, k_esc[i].want);
        ck_assert_uint_eq(n, strlen(out));
        ck_assert_uint_lt(n, k_esc[i].cap);
        for (size_t k = 0; k < n; k++)
            ck_assert_msg((unsigned char)out[k] >= 0x20 && out[k] != 0x7f, "row %zu: control byte", i);
    }
    /* a long path is bounded by SRV_LOG_FIELD_MAX */
    char *big = inferd_malloc(100000);
    memset(big, '\n', 99999);
    big[99999] = '\0';
    char out[SRV_LOG_FIELD_MAX];
    ck_assert_uint_lt(srv_log_escape(big, out, sizeof out), SRV_LOG_FIELD_MAX);
    inferd_free(big);
}
END_TEST

/* ---- black box --------------------------------------------------------- */

/* Send one raw request and wait for the server to answer (or close). */
static void raw_exchange(const ts_server *s, const char *req)
{
    int fd = ts_raw_send(s, req, strlen(req));
    ck_assert_msg(fd >= 0, "connect failed");
    char *acc = NULL;
    size_t acc_len = 0;
    ts_raw_read_until(fd, "\r\n\r\n", 5000, &acc, &acc_len);
    ck_assert_msg(acc && strncmp(acc, "HTTP/1.1 ", 9) == 0, "no HTTP answer to: %s", req);
    free(acc);
    close(fd);
}

static char *read_log(const ts_server *s)
{
    char *text = NULL;
    size_t n = 0;
    ck_assert(util_read_file(s->log_path, 64u << 20, &text, &n) == INFERD_OK);
    return text;
}

START_TEST(test_log_injection)
{
    ts_server s;
    ck_assert(ts_start(&s, NULL));
    raw_exchange(&s, "GET /v1/models%0a2026-01-01T00:00:00 INFO FORGED-LINE HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    raw_exchange(&s, "GET /x%0d%0aFORGED-CRLF HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    raw_exchange(&s, "GET /%1b%5b2J%1b%5d0;pwned%07 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
    /* the server still serves */
    ts_resp r = ts_request(&s, "GET", "/health", NULL, 0, NULL);
    ck_assert_int_eq(r.status, 200);
    ts_resp_free(&r);
    /* access lines are written when a connection's request completes,
     * just after its response went out */
    for (int i = 0; i < 100 && !ts_log_contains(&s, "/health"); i++)
        ts_sleep_ms(50);
    char *log = read_log(&s);
    ck_assert_msg(strstr(log, "\n2026-01-01T00:00:00 INFO FORGED-LINE") == NULL, "forged log line");
    ck_assert_msg(strstr(log, "\nFORGED-CRLF") == NULL && strstr(log, "\rFORGED-CRLF") == NULL, "forged CRLF");
    ck_assert_msg(strchr(log, 0x1b) == NULL && strchr(log, 0x07) == NULL, "control bytes reached the log");
    ck_assert_msg(strstr(log, "\\x0a2026-01-01T00:00:00 INFO FORGED-LINE") != NULL, "escaped path not logged");
    ck_assert_msg(strstr(log, "\\x1b[2J") != NULL, "escaped ESC not logged");
    inferd_free(log);
    ck_assert_int_eq(ts_stop(&s, 30.0), 0);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("server_attack");
    TCase *tu = tcase_create("units");
    tcase_add_test(tu, test_escape_table);
    suite_add_tcase(su, tu);
    char *stories = test_fixture_path("models/stories260K/model.safetensors");
    if (test_inferd_bin() && stories && util_file_exists(stories)) {
        TCase *tc = tcase_create("blackbox");
        tcase_set_timeout(tc, 300);
        tcase_add_test(tc, test_log_injection);
        suite_add_tcase(su, tc);
    } else {
        fprintf(stderr, "test_server_attack: black-box rows skipped (no inferd binary or stories260K)\n");
    }
    inferd_free(stories);
    return test_run_suite(su);
}
