/* tests/bench/mock_openai.h: a tiny OpenAI-compatible server for the bench
 * tests (libmicrohttpd, 127.0.0.1, a free port chosen by the kernel). It
 * streams /v1/completions and /v1/chat/completions responses on a known
 * schedule (first token after first_delay_ms, then one token every
 * token_delay_ms), or answers every request with an error status, and counts
 * what it served so tests can compare the bench's report with the truth.
 */
#ifndef INFERD_TESTS_MOCK_OPENAI_H
#define INFERD_TESTS_MOCK_OPENAI_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int status;          /* 200: serve completions; else answer this status */
    int first_delay_ms;  /* response start -> first token */
    int token_delay_ms;  /* between tokens */
    int n_tokens;        /* tokens per response; 0: the request's max_tokens */
    bool no_usage;       /* omit the usage chunk */
    int usage_extra;     /* usage.completion_tokens = tokens sent + this */
    bool role_first;     /* chat: send the role chunk at once, before the delay */
    bool omit_done;      /* end the stream without data: [DONE] */
    bool malformed;      /* send a broken JSON event after the first token */
    bool split_writes;   /* deliver each event in two writes */
    const char *api_key; /* non-NULL: require "Authorization: Bearer <key>" (401) */
} mock_cfg;

typedef struct mock_server mock_server;

/* Start on 127.0.0.1 with a kernel-chosen port; NULL on failure. */
mock_server *mock_start(const mock_cfg *cfg);
int mock_port(const mock_server *m);
/* Stop (joins the connection threads) and free. */
void mock_stop(mock_server *m);

/* Counters (safe to read after the bench run returned). */
int mock_requests(const mock_server *m);        /* POSTs to a completion route */
int mock_bad_requests(const mock_server *m);    /* bodies failing validation */
int64_t mock_usage_completion(const mock_server *m); /* sum of usage sent */
int64_t mock_prompt_tokens(const mock_server *m);    /* sum of prompt lengths seen */
int mock_peak_active(const mock_server *m);     /* most responses in progress at once */
int mock_ignore_eos_seen(const mock_server *m); /* requests carrying ignore_eos: true */

/* A loopback port with nothing listening (bound, then closed). */
int mock_free_port(void);

#endif
