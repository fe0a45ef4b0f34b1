/* tests/server/test_srv_unit.c: unit tables for the server's pure modules,
 * no engine or model involved: request parsing/validation (srv_openai),
 * response shapes, chat templates byte for byte per family (srv_chat), the
 * error mapping (srv_errors), metrics exposition (srv_metrics, checked with
 * the strict parser), and the helpers (constant-time compare, UTF-8
 * sanitizing). The options/config-file test moved with the parser to
 * tests/cli/test_serve_opts.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/util.h"
#include "prom_check.h"
#include "server/srv_chat.h"
#include "server/srv_errors.h"
#include "server/srv_metrics.h"
#include "server/srv_openai.h"
#include "server/srv_opts.h"
#include "server/srv_util.h"
#include "test_util.h"

static const srv_parse_limits k_lim = {"m", 512, NULL};

/* ---- request parsing ------------------------------------------------------ */

typedef struct {
    srv_api api;
    const char *body;
    srv_err_kind kind; /* SRV_ERR_NONE = accepted */
    const char *param;
} parse_row;

#define C SRV_API_COMPLETIONS
#define H SRV_API_CHAT
#define OK SRV_ERR_NONE
#define INV SRV_ERR_INVALID

static const parse_row k_parse[] = {
    {C, "{\"prompt\":\"hi\"}", OK, NULL},
    {C, "{\"prompt\":[1,2,3],\"model\":\"m\"}", OK, NULL},
    {C, "{\"prompt\":[\"hi\"]}", OK, NULL},
    {C, "{\"prompt\":[[1,2]]}", OK, NULL},
    {C, "{\"prompt\":[\"a\",\"b\",\"c\"]}", OK, NULL}, /* batched prompts */
    {C, "{\"prompt\":[[1,2],[3],[4,5,6]]}", OK, NULL},
    {C, "{\"prompt\":[\"a\",[1,2]]}", OK, NULL}, /* strings and id arrays may mix */
    {C, "{\"prompt\":\"hi\",\"echo\":true}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"echo\":true,\"logprobs\":null,\"suffix\":\"\"}", OK, NULL},
    {C, "  {\"prompt\":\"hi\",\"unknown_field\":{\"x\":[1]}}  ", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"max_tokens\":null,\"temperature\":null,\"stop\":null,\"n\":1,\"echo\":false}",
     OK, NULL},
    {C,
     "{\"prompt\":\"hi\",\"temperature\":0,\"top_p\":1,\"top_k\":-1,\"min_p\":0,\"seed\":-5,\"logprobs\":0}",
     OK, NULL},
    {C, "{\"prompt\":\"hi\",\"stop\":\"x\",\"stop_token_ids\":[1,2],\"ignore_eos\":true,\"min_tokens\":2}",
     OK, NULL},
    {C, "{\"prompt\":\"hi\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"presence_penalty\":0,\"frequency_penalty\":0,\"logit_bias\":{}}", OK, NULL},
    {H, "{\"messages\":[{\"role\":\"system\",\"content\":\"s\"},{\"role\":\"user\",\"content\":\"u\"}]}", OK,
     NULL},
    {H,
     "{\"messages\":[{\"role\":\"developer\",\"content\":[{\"type\":\"text\",\"text\":\"a\"}]},"
     "{\"role\":\"assistant\",\"content\":null}],\"logprobs\":true,\"top_logprobs\":5,"
     "\"max_completion_tokens\":3,\"response_format\":{\"type\":\"text\"},\"tools\":[]}",
     OK, NULL},
    {C, "", INV, NULL},
    {C, "   ", INV, NULL},
    {C, "{", INV, NULL},
    {C, "{\"prompt\":\"a\\u0000b\"}", INV, NULL},  /* would truncate to "a" */
    {C, "{\"prompt\":\"a\\\\u0000b\"}", OK, NULL}, /* an escaped backslash, then text */
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\\u0000\"}]}", INV, NULL},
    {C, "{} {}", INV, NULL},
    {C, "\"str\"", INV, NULL},
    {C, "{\"prompt\":null}", INV, "prompt"},
    {C, "{\"prompt\":true}", INV, "prompt"},
    {C, "{\"prompt\":\"\"}", INV, "prompt"},
    {C, "{\"prompt\":\"\\t\\n \"}", INV, "prompt"},
    {C, "{\"prompt\":[1,512]}", INV, "prompt"},
    {C, "{\"prompt\":[1,\"a\"]}", INV, "prompt"},
    {C, "{\"prompt\":[\"a\",\"\"]}", INV, "prompt"}, /* one bad element refuses the batch */
    {C, "{\"prompt\":[\"a\",\" \"]}", INV, "prompt"},
    {C, "{\"prompt\":[\"a\",5]}", INV, "prompt"},
    {C, "{\"prompt\":[[1],[]]}", INV, "prompt"},
    {C, "{\"prompt\":[[1],[512]]}", INV, "prompt"},
    {C, "{\"prompt\":[[1],[1.5]]}", INV, "prompt"},
    {C, "{\"prompt\":[[\"a\"]]}", INV, "prompt"},
    {C, "{\"prompt\":[[[1]]]}", INV, "prompt"}, /* nested one level too deep */
    {C, "{\"prompt\":[\"a\",null]}", INV, "prompt"},
    {C, "{\"prompt\":[\"a\",{}]}", INV, "prompt"},
    {C, "{\"prompt\":\"hi\",\"model\":\"other\"}", SRV_ERR_MODEL_NOT_FOUND, "model"},
    {C, "{\"prompt\":\"hi\",\"max_tokens\":true}", INV, "max_tokens"},
    {C, "{\"prompt\":\"hi\",\"max_tokens\":0}", INV, "max_tokens"},
    {C, "{\"prompt\":\"hi\",\"temperature\":2.01}", INV, "temperature"},
    {C, "{\"prompt\":\"hi\",\"top_p\":0}", INV, "top_p"},
    {C, "{\"prompt\":\"hi\",\"top_k\":1.5}", INV, "top_k"},
    {C, "{\"prompt\":\"hi\",\"min_p\":-0.1}", INV, "min_p"},
    /* n and best_of: the rows' edges [1, 16], types, best_of >= n, the
     * request's 128 sequences, chat has no best_of, best_of > n unstreamed */
    {C, "{\"prompt\":\"hi\",\"n\":3}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"best_of\":2}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"n\":16,\"best_of\":16}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"n\":2,\"best_of\":5}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"n\":null,\"best_of\":null}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"n\":2,\"best_of\":2,\"stream\":true}", OK, NULL},
    {C, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\"],\"n\":16}", OK, NULL}, /* 128 */
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":16,\"best_of\":1}", INV, "best_of"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":4,\"stream\":true}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"n\":0}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"n\":-1}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"n\":17}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"n\":\"2\"}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"n\":2.5}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"n\":true}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"n\":[2]}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"n\":1e300}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"best_of\":0}", INV, "best_of"},
    {C, "{\"prompt\":\"hi\",\"best_of\":17}", INV, "best_of"},
    {C, "{\"prompt\":\"hi\",\"best_of\":\"3\"}", INV, "best_of"},
    {C, "{\"prompt\":\"hi\",\"n\":3,\"best_of\":2}", INV, "best_of"}, /* best_of < n */
    {C, "{\"prompt\":\"hi\",\"n\":1,\"best_of\":3,\"stream\":true}", INV, "best_of"},
    {C, "{\"prompt\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"],\"n\":15}", INV,
     "prompt"}, /* 9 x 15 = 135 > 128 */
    {C, "{\"prompt\":[\"a\",\"b\"],\"n\":2,\"best_of\":16}", OK, NULL},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"best_of\":2}", INV, "best_of"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"n\":17}", INV, "n"},
    {C, "{\"prompt\":\"hi\",\"echo\":true,\"logprobs\":0}", OK, NULL}, /* prompt logprobs too */
    {C, "{\"prompt\":\"hi\",\"echo\":true,\"logprobs\":20}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"echo\":true,\"logprobs\":21}", INV, "logprobs"},
    {C, "{\"prompt\":\"hi\",\"echo\":1}", INV, "echo"},
    {C, "{\"prompt\":\"hi\",\"echo\":\"true\"}", INV, "echo"},
    {C, "{\"prompt\":\"hi\",\"suffix\":5}", INV, "suffix"},
    {C, "{\"prompt\":\"hi\",\"suffix\":\"x\"}", INV, "suffix"},
    {C, "{\"prompt\":\"hi\",\"logprobs\":21}", INV, "logprobs"},
    {C, "{\"prompt\":\"hi\",\"logprobs\":true}", INV, "logprobs"},
    {C, "{\"prompt\":\"hi\",\"stop\":[1]}", INV, "stop"},
    {C, "{\"prompt\":\"hi\",\"stop_token_ids\":[-1]}", INV, "stop_token_ids"},
    {C, "{\"prompt\":\"hi\",\"stop_token_ids\":\"1\"}", INV, "stop_token_ids"},
    {C, "{\"prompt\":\"hi\",\"min_tokens\":9,\"max_tokens\":8}", INV, "min_tokens"},
    {C, "{\"prompt\":\"hi\",\"stream_options\":{}}", INV, "stream_options"},
    {C, "{\"prompt\":\"hi\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}", INV,
     "stream_options"},
    {C, "{\"prompt\":\"hi\",\"presence_penalty\":-2,\"frequency_penalty\":2,\"repetition_penalty\":2}", OK,
     NULL},
    {C, "{\"prompt\":\"hi\",\"logit_bias\":{\"0\":-100,\"511\":100,\"7\":0.5}}", OK, NULL},
    {C, "{\"prompt\":\"hi\",\"presence_penalty\":-2.01}", INV, "presence_penalty"},
    {C, "{\"prompt\":\"hi\",\"presence_penalty\":\"1\"}", INV, "presence_penalty"},
    {C, "{\"prompt\":\"hi\",\"frequency_penalty\":2.01}", INV, "frequency_penalty"},
    {C, "{\"prompt\":\"hi\",\"repetition_penalty\":0}", INV, "repetition_penalty"},
    {C, "{\"prompt\":\"hi\",\"repetition_penalty\":2.01}", INV, "repetition_penalty"},
    {C, "{\"prompt\":\"hi\",\"logit_bias\":{\"512\":1}}", INV, "logit_bias"},
    {C, "{\"prompt\":\"hi\",\"logit_bias\":{\"-1\":1}}", INV, "logit_bias"},
    {C, "{\"prompt\":\"hi\",\"logit_bias\":{\"x\":1}}", INV, "logit_bias"},
    {C, "{\"prompt\":\"hi\",\"logit_bias\":{\"5\":100.5}}", INV, "logit_bias"},
    {C, "{\"prompt\":\"hi\",\"logit_bias\":{\"5\":\"1\"}}", INV, "logit_bias"},
    {C, "{\"prompt\":\"hi\",\"logit_bias\":[1]}", INV, "logit_bias"},
    {H, "{}", INV, "messages"},
    {H, "{\"messages\":{}}", INV, "messages"},
    {H, "{\"messages\":[1]}", INV, "messages"},
    {H, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", INV, "messages"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", INV, "messages"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", INV, "messages"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"logprobs\":false,\"top_logprobs\":2}", INV,
     "top_logprobs"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"top_logprobs\":21,\"logprobs\":true}", INV,
     "top_logprobs"},
    {H,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
     INV, "response_format"},
    {H, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":-1}", INV,
     "max_completion_tokens"},
};

START_TEST(test_parse_table)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_parse); i++) {
        const parse_row *r = &k_parse[i];
        srv_request req;
        srv_error err;
        memset(&err, 0, sizeof err);
        bool ok = srv_request_parse(r->api, r->body, strlen(r->body), &k_lim, &req, &err);
        ck_assert_msg(ok == (r->kind == OK), "row %zu '%s': %s", i, r->body, ok ? "accepted" : err.message);
        if (ok) {
            srv_request_free(&req);
            continue;
        }
        ck_assert_msg(err.kind == r->kind, "row %zu: kind %d want %d (%s)", i, err.kind, r->kind,
                      err.message);
        ck_assert_msg(strlen(err.message) > 0, "row %zu: no message", i);
        if (r->param)
            ck_assert_msg(!strcmp(err.param, r->param), "row %zu: param '%s' want '%s'", i, err.param,
                          r->param);
    }
}
END_TEST

START_TEST(test_parse_values)
{
    const char *b =
        "{\"prompt\":[5,6],\"max_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.1,"
        "\"seed\":42,\"stop\":[\"a\",\"bc\"],\"stop_token_ids\":[9],\"ignore_eos\":true,\"min_tokens\":2,"
        "\"logprobs\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
    srv_request r;
    srv_error e;
    ck_assert(srv_request_parse(C, b, strlen(b), &k_lim, &r, &e));
    ck_assert_int_eq(r.n_prompts, 1);
    ck_assert_int_eq(r.prompts[0].n_ids, 2);
    ck_assert_int_eq(r.prompts[0].ids[1], 6);
    ck_assert(r.prompts[0].text == NULL && !r.echo);
    ck_assert_int_eq(r.max_tokens, 7);
    ck_assert_float_eq(r.sp.temperature, 0.5f);
    ck_assert_int_eq(r.sp.top_k, 40);
    ck_assert(r.sp.has_seed && r.sp.seed == 42);
    ck_assert_int_eq(r.sp.n_stop, 2);
    ck_assert_str_eq(r.sp.stop[1], "bc");
    ck_assert_int_eq(r.sp.n_stop_token_ids, 1);
    ck_assert(r.sp.ignore_eos && r.sp.min_tokens == 2 && r.sp.logprobs == 3);
    ck_assert(r.stream && r.include_usage);
    srv_request_free(&r);
    /* defaults; chat logprobs; max_completion_tokens wins over max_tokens */
    b = "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":"
        "\"text\","
        "\"text\":\"b\"}]}],\"logprobs\":true,\"max_tokens\":5,\"max_completion_tokens\":9}";
    ck_assert(srv_request_parse(H, b, strlen(b), &k_lim, &r, &e));
    ck_assert_str_eq(r.msgs[0].content, "a\nb");
    ck_assert_int_eq(r.sp.logprobs, 0);
    ck_assert_int_eq(r.max_tokens, 9);
    ck_assert_float_eq(r.sp.temperature, 1.0f);
    ck_assert(!r.stream);
    srv_request_free(&r);
    /* n and best_of: best_of defaults to n; responses-like defaults 1 */
    b = "{\"prompt\":\"hi\",\"n\":4}";
    ck_assert(srv_request_parse(C, b, strlen(b), &k_lim, &r, &e));
    ck_assert(r.seqs.n == 4 && r.seqs.best_of == 4);
    srv_request_free(&r);
    b = "{\"prompt\":\"hi\",\"n\":2,\"best_of\":7}";
    ck_assert(srv_request_parse(C, b, strlen(b), &k_lim, &r, &e));
    ck_assert(r.seqs.n == 2 && r.seqs.best_of == 7);
    srv_request_free(&r);
    b = "{\"prompt\":\"hi\"}";
    ck_assert(srv_request_parse(C, b, strlen(b), &k_lim, &r, &e));
    ck_assert(r.seqs.n == 1 && r.seqs.best_of == 1);
    srv_request_free(&r);
    b = "{\"prompt\":\"hi\",\"n\":17}";
    ck_assert(!srv_request_parse(C, b, strlen(b), &k_lim, &r, &e));
    ck_assert_msg(strstr(e.message, "[1, 16]") != NULL, "%s", e.message);
    /* invalid UTF-8 anywhere in strings that matter */
    const char bad[] = "{\"prompt\":\"a\xc3(\"}";
    ck_assert(!srv_request_parse(C, bad, sizeof bad - 1, &k_lim, &r, &e));
    ck_assert_str_eq(e.param, "prompt");
    const char bad2[] = "{\"prompt\":\"a\",\"stop\":\"\xed\xa0\x80\"}";
    ck_assert(!srv_request_parse(C, bad2, sizeof bad2 - 1, &k_lim, &r, &e));
    ck_assert_str_eq(e.param, "stop");
    /* nesting beyond cJSON's limit is a parse error, not a crash */
    size_t depth = 100000;
    char *deep = inferd_malloc(depth + 32);
    memset(deep, '[', depth);
    deep[depth] = '\0';
    ck_assert(!srv_request_parse(C, deep, depth, &k_lim, &r, &e));
    ck_assert_int_eq(e.kind, SRV_ERR_INVALID);
    inferd_free(deep);
}
END_TEST

/* A prompt array of n copies of elem ("\"a\"" or "[1,2]"). Heap. */
static char *batch_body(int n, const char *elem)
{
    inferd_buf b = {0};
    inferd_buf_append_str(&b, "{\"prompt\":[");
    for (int i = 0; i < n; i++)
        inferd_buf_printf(&b, "%s%s", i ? "," : "", elem);
    inferd_buf_append_str(&b, "]}");
    return inferd_buf_steal(&b, NULL);
}

/* Batched prompts: order kept, each element's kind kept, the count bound
 * at its edges (0 / 1 / max / max+1 and a huge array), and an error that
 * names the bad element. */
START_TEST(test_parse_batch)
{
    srv_request r;
    srv_error e;
    const char *b = "{\"prompt\":[\"one\",[7,8,9],\"three\"],\"echo\":true}";
    ck_assert(srv_request_parse(C, b, strlen(b), &k_lim, &r, &e));
    ck_assert_int_eq(r.n_prompts, 3);
    ck_assert_str_eq(r.prompts[0].text, "one");
    ck_assert(r.prompts[1].text == NULL && r.prompts[1].n_ids == 3 && r.prompts[1].ids[2] == 9);
    ck_assert_str_eq(r.prompts[2].text, "three");
    ck_assert(r.echo);
    srv_request_free(&r);
    const struct {
        int n;
        const char *elem;
        bool ok;
    } k_counts[] = {{0, "\"a\"", false},
                    {1, "\"a\"", true},
                    {SRV_MAX_PROMPTS, "\"a\"", true},
                    {SRV_MAX_PROMPTS, "[1,2]", true},
                    {SRV_MAX_PROMPTS + 1, "\"a\"", false},
                    {SRV_MAX_PROMPTS + 1, "[1]", false},
                    {100000, "\"a\"", false}};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_counts); i++) {
        char *body = batch_body(k_counts[i].n, k_counts[i].elem);
        memset(&e, 0, sizeof e);
        bool ok = srv_request_parse(C, body, strlen(body), &k_lim, &r, &e);
        ck_assert_msg(ok == k_counts[i].ok, "%d x %s: %s", k_counts[i].n, k_counts[i].elem, e.message);
        if (ok) {
            ck_assert_int_eq(r.n_prompts, k_counts[i].n);
            srv_request_free(&r);
        } else {
            ck_assert_str_eq(e.param, "prompt");
            ck_assert_msg(strstr(e.message, k_counts[i].n ? "at most 128" : "empty"), "%s", e.message);
        }
        inferd_free(body);
    }
    /* the message names the element at fault, and its position inside it */
    const struct {
        const char *body, *needle;
    } k_named[] = {{"{\"prompt\":[\"a\",\"b\",\"\"]}", "'prompt'[2] must not be empty"},
                   {"{\"prompt\":[[1],[2,600]]}", "'prompt'[1][1]: token id 600"},
                   {"{\"prompt\":[\"a\",true]}", "'prompt'[1] must be a string or an array of token ids"},
                   {"{\"prompt\":[\"a\",\"\xff\"]}", "'prompt'[1] is not valid UTF-8"}};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_named); i++) {
        ck_assert(!srv_request_parse(C, k_named[i].body, strlen(k_named[i].body), &k_lim, &r, &e));
        ck_assert_msg(strstr(e.message, k_named[i].needle), "'%s': %s", k_named[i].body, e.message);
    }
}
END_TEST

START_TEST(test_tokenize_parse)
{
    srv_tokenize_req t;
    srv_detokenize_req d;
    srv_error e;
    const char *b = "{\"prompt\":\"hello\",\"add_special_tokens\":false}";
    ck_assert(srv_tokenize_parse(b, strlen(b), &k_lim, &t, &e));
    ck_assert(!t.add_special_tokens && !strcmp(t.prompt, "hello"));
    srv_tokenize_free(&t);
    b = "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]}";
    ck_assert(srv_tokenize_parse(b, strlen(b), &k_lim, &t, &e));
    ck_assert_int_eq(t.n_msgs, 1);
    srv_tokenize_free(&t);
    b = "{\"prompt\":\"a\",\"messages\":[]}";
    ck_assert(!srv_tokenize_parse(b, strlen(b), &k_lim, &t, &e));
    b = "{}";
    ck_assert(!srv_tokenize_parse(b, strlen(b), &k_lim, &t, &e));
    b = "{\"tokens\":[1,2,511]}";
    ck_assert(srv_detokenize_parse(b, strlen(b), &k_lim, &d, &e));
    ck_assert_int_eq(d.n_ids, 3);
    srv_detokenize_free(&d);
    b = "{\"tokens\":[512]}";
    ck_assert(!srv_detokenize_parse(b, strlen(b), &k_lim, &d, &e));
    ck_assert_str_eq(e.param, "tokens");
}
END_TEST

/* ---- responses ------------------------------------------------------------ */

static char *tok_text(void *user, int32_t id)
{
    (void)user;
    char buf[16];
    snprintf(buf, sizeof buf, "t%d", id);
    return inferd_strdup(buf);
}

START_TEST(test_response_shapes)
{
    srv_resp_meta m = {"cmpl-1", 1700000000, "m"};
    srv_usage u = {5, 3, 2};
    srv_timings t = {1.5, 10.25, 2, 30, 41.0004};
    const char bad_text[] = "ok\xff";
    srv_choice_body one = {bad_text, 3, "stop", NULL};
    char *s = srv_resp_full(C, &m, &one, 1, &u, &t);
    cJSON *j = cJSON_Parse(s);
    ck_assert_msg(j != NULL, "%s", s);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    ck_assert_str_eq(cJSON_GetObjectItem(ch, "text")->valuestring, "ok\xef\xbf\xbd");
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(ch, "logprobs")));
    ck_assert_int_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "total_tokens")->valueint, 8);
    ck_assert_double_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "timings"), "total_ms")->valuedouble,
                        41.0);
    cJSON_Delete(j);
    inferd_free(s);
    /* several choices: index by position, logprobs taken from each */
    srv_choice_body two[2] = {{"a", 1, "stop", NULL}, {"bc", 2, "length", srv_lp_new(C)}};
    s = srv_resp_full(C, &m, two, 2, &u, &t);
    j = cJSON_Parse(s);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 2);
    ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 1);
    ck_assert_int_eq(cJSON_GetObjectItem(ch, "index")->valueint, 1);
    ck_assert_str_eq(cJSON_GetObjectItem(ch, "text")->valuestring, "bc");
    ck_assert_str_eq(cJSON_GetObjectItem(ch, "finish_reason")->valuestring, "length");
    ck_assert(cJSON_IsObject(cJSON_GetObjectItem(ch, "logprobs")) && two[1].logprobs == NULL);
    cJSON_Delete(j);
    inferd_free(s);
    s = srv_chunk_delta(C, &m, 5, NULL, "x", 1, "stop", NULL, false, NULL);
    j = cJSON_Parse(s);
    ck_assert_int_eq(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0), "index")->valueint, 5);
    cJSON_Delete(j);
    inferd_free(s);
    /* chat chunk with role only, then a usage chunk */
    s = srv_chunk_delta(H, &m, 0, "assistant", "", 0, NULL, NULL, true, NULL);
    ck_assert_str_eq(
        s, "{\"id\":\"cmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\","
           "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
           "\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}");
    inferd_free(s);
    s = srv_chunk_usage(H, &m, &u, &t);
    j = cJSON_Parse(s);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "choices")), 0);
    ck_assert_int_eq(
        cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "usage"), "prompt_tokens_details"),
                            "cached_tokens")
            ->valueint,
        2);
    cJSON_Delete(j);
    inferd_free(s);
    /* logprobs in both shapes */
    engine_logprob lp = {
        .token = 7, .logprob = -0.5f, .n_top = 2, .top_ids = {7, 8}, .top_logprobs = {-0.5f, -1.5f}};
    size_t off = 0;
    cJSON *lc = srv_lp_new(C);
    srv_lp_append(C, lc, &lp, 1, tok_text, NULL, &off);
    srv_lp_append(C, lc, &lp, 1, tok_text, NULL, &off);
    ck_assert_int_eq(off, 4);
    ck_assert_int_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(lc, "text_offset"), 1)->valueint, 2);
    ck_assert_double_eq(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(lc, "top_logprobs"), 0), "t8")
            ->valuedouble,
        -1.5);
    cJSON_Delete(lc);
    cJSON *lh = srv_lp_new(H);
    srv_lp_append(H, lh, &lp, 1, tok_text, NULL, &off);
    const cJSON *e0 = cJSON_GetArrayItem(cJSON_GetObjectItem(lh, "content"), 0);
    ck_assert_str_eq(cJSON_GetObjectItem(e0, "token")->valuestring, "t7");
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(e0, "bytes")), 2);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(e0, "top_logprobs")), 2);
    cJSON_Delete(lh);
    s = srv_resp_models("m", 5, 512, false);
    ck_assert_str_eq(s, "{\"object\":\"list\",\"data\":[{\"id\":\"m\",\"object\":\"model\",\"created\":5,"
                        "\"owned_by\":\"inferd\",\"max_model_len\":512}]}");
    inferd_free(s);
}
END_TEST

/* ---- chat templates --------------------------------------------------------- */

static srv_chat_msg msg(srv_chat_role r, const char *c)
{
    srv_chat_msg m = {r, (char *)c};
    return m;
}

static char *render(srv_chat_family f, const srv_chat_msg *m, int n)
{
    char *out = NULL;
    srv_error e;
    bool ok = srv_chat_render(f, m, n,
                              f == SRV_CHAT_CHATML                              ? ""
                              : (f == SRV_CHAT_LLAMA3 || f == SRV_CHAT_LLAMA31) ? "<|begin_of_text|>"
                                                                                : "<s>",
                              "</s>", &out, &e);
    ck_assert_msg(ok, "render failed: %s", e.message);
    return out;
}

START_TEST(test_chat_templates)
{
    srv_chat_msg conv[] = {msg(SRV_ROLE_SYSTEM, "Be brief."), msg(SRV_ROLE_USER, " Hi there \n"),
                           msg(SRV_ROLE_ASSISTANT, "Hello!"), msg(SRV_ROLE_USER, "Bye")};
    static const struct {
        srv_chat_family f;
        const char *want;
    } k[] = {
        {SRV_CHAT_LLAMA2,
         "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\n Hi there [/INST] Hello! </s><s>[INST] Bye [/INST]"},
        {SRV_CHAT_LLAMA3, "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
                          "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
                          "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {SRV_CHAT_LLAMA31,
         "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
         "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\nBe brief.<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
         "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
         "<|start_header_id|>assistant<|end_header_id|>\n\n"},
        {SRV_CHAT_CHATML,
         "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n Hi there \n<|im_end|>\n"
         "<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
         "<|im_start|>assistant\n"},
        {SRV_CHAT_MISTRAL, "<s>[INST] Be brief.\n\n Hi there \n [/INST]Hello!</s>[INST] Bye [/INST]"},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k); i++) {
        char *out = render(k[i].f, conv, 4);
        ck_assert_msg(!strcmp(out, k[i].want), "%s:\n got  '%s'\n want '%s'", srv_chat_name(k[i].f), out,
                      k[i].want);
        inferd_free(out);
    }
    /* no system message */
    char *out = render(SRV_CHAT_LLAMA2, conv + 1, 1);
    ck_assert_str_eq(out, "<s>[INST] Hi there [/INST]");
    inferd_free(out);
    out = render(SRV_CHAT_LLAMA31, conv + 3, 1);
    ck_assert(strstr(out, "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user") != NULL);
    inferd_free(out);
    /* families that need alternation reject other orders */
    srv_chat_msg bad1[] = {msg(SRV_ROLE_USER, "a"), msg(SRV_ROLE_USER, "b")};
    srv_chat_msg bad2[] = {msg(SRV_ROLE_USER, "a"), msg(SRV_ROLE_ASSISTANT, "b")};
    srv_chat_msg bad3[] = {msg(SRV_ROLE_SYSTEM, "a")};
    srv_chat_msg bad4[] = {msg(SRV_ROLE_USER, "a"), msg(SRV_ROLE_ASSISTANT, "b"), msg(SRV_ROLE_SYSTEM, "c"),
                           msg(SRV_ROLE_USER, "d")};
    srv_error e;
    const srv_chat_msg *bads[] = {bad1, bad2, bad3, bad4};
    const int nb[] = {2, 2, 1, 4};
    for (int f = SRV_CHAT_LLAMA2; f <= SRV_CHAT_MISTRAL; f += SRV_CHAT_MISTRAL - SRV_CHAT_LLAMA2) {
        for (int b = 0; b < 4; b++) {
            char *o = NULL;
            ck_assert_msg(!srv_chat_render((srv_chat_family)f, bads[b], nb[b], "<s>", "</s>", &o, &e),
                          "%d/%d", f, b);
            ck_assert_int_eq(e.kind, SRV_ERR_INVALID);
        }
    }
    char *o = NULL;
    ck_assert(!srv_chat_render(SRV_CHAT_CHATML, bad3, 1, "", "", &o, &e));
    ck_assert(!srv_chat_render(SRV_CHAT_NONE, conv, 2, "", "", &o, &e));
    ck_assert_int_eq(e.kind, SRV_ERR_NO_CHAT_TEMPLATE);
}
END_TEST

START_TEST(test_chat_detect)
{
    ck_assert_int_eq(srv_chat_detect(NULL), SRV_CHAT_NONE);
    ck_assert_int_eq(srv_chat_detect("{{ messages }}"), SRV_CHAT_NONE);
    ck_assert_int_eq(srv_chat_detect("{% if x %}<<SYS>>\\n{% endif %}[INST]"), SRV_CHAT_LLAMA2);
    ck_assert_int_eq(srv_chat_detect("{{ bos_token }}[INST] {{ m }} [/INST]"), SRV_CHAT_MISTRAL);
    ck_assert_int_eq(srv_chat_detect("<|im_start|>{{ role }}"), SRV_CHAT_CHATML);
    ck_assert_int_eq(srv_chat_detect("<|start_header_id|>system"), SRV_CHAT_LLAMA3);
    ck_assert_int_eq(srv_chat_detect("Cutting Knowledge Date <|start_header_id|>"), SRV_CHAT_LLAMA31);
    srv_chat_family f;
    ck_assert(srv_chat_from_name("llama-3.1", &f) && f == SRV_CHAT_LLAMA31);
    ck_assert(srv_chat_from_name("chatml", &f) && f == SRV_CHAT_CHATML);
    ck_assert(!srv_chat_from_name("jinja", &f));
    ck_assert_str_eq(srv_chat_end_marker(SRV_CHAT_LLAMA3), "<|eot_id|>");
    ck_assert(srv_chat_end_marker(SRV_CHAT_LLAMA2) == NULL);
    /* the real Llama-3 tokenizer_config.json template, when the fixture is here */
    char *p = test_fixture_path("tokenizers/llama3/tokenizer_config.json");
    char *text;
    size_t len;
    if (p && util_read_file(p, 0, &text, &len) == INFERD_OK) {
        cJSON *j = cJSON_Parse(text);
        const cJSON *t = cJSON_GetObjectItem(j, "chat_template");
        ck_assert_int_eq(srv_chat_detect(cJSON_GetStringValue(t)), SRV_CHAT_LLAMA3);
        cJSON_Delete(j);
        inferd_free(text);
    }
    inferd_free(p);
}
END_TEST

/* ---- errors ---------------------------------------------------------------- */

START_TEST(test_error_mapping)
{
    static const struct {
        srv_err_kind k;
        int http;
        const char *type, *code;
    } k[] = {
        {SRV_ERR_INVALID, 400, "invalid_request_error", "invalid_request"},
        {SRV_ERR_CONTEXT_LENGTH, 400, "invalid_request_error", "context_length_exceeded"},
        {SRV_ERR_NO_CHAT_TEMPLATE, 400, "invalid_request_error", "chat_template_missing"},
        {SRV_ERR_AUTH, 401, "authentication_error", "invalid_api_key"},
        {SRV_ERR_NOT_FOUND, 404, "not_found_error", "not_found"},
        {SRV_ERR_MODEL_NOT_FOUND, 404, "not_found_error", "model_not_found"},
        {SRV_ERR_METHOD, 405, "invalid_request_error", "method_not_allowed"},
        {SRV_ERR_TOO_LARGE, 413, "invalid_request_error", "request_too_large"},
        {SRV_ERR_QUEUE_FULL, 429, "rate_limit_error", "queue_full"},
        {SRV_ERR_INTERNAL, 500, "server_error", "internal_error"},
        {SRV_ERR_UNAVAILABLE, 503, "service_unavailable", "unavailable"},
        {SRV_ERR_TIMEOUT, 503, "timeout_error", "request_timeout"},
        {SRV_ERR_FORBIDDEN, 403, "permission_error", "origin_not_allowed"},
        {SRV_ERR_URI_TOO_LONG, 414, "invalid_request_error", "uri_too_long"},
        {SRV_ERR_MEDIA_TYPE, 415, "invalid_request_error", "unsupported_media_type"},
        {SRV_ERR_HEADERS_TOO_LARGE, 431, "invalid_request_error", "headers_too_large"},
        {SRV_ERR_NOT_IMPLEMENTED, 501, "invalid_request_error", "not_implemented"},
        {SRV_ERR_BUSY, 503, "service_unavailable", "server_busy"},
        {SRV_ERR_HTTP_VERSION, 505, "invalid_request_error", "http_version_not_supported"},
    };
    ck_assert_int_eq((int)INFERD_ARRAY_LEN(k), SRV_ERR_KIND_COUNT - 1);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k); i++) {
        srv_error e;
        srv_error_set(&e, k[i].k, i % 2 ? "field" : NULL, "msg %zu", i);
        int http;
        char *body = srv_error_render(&e, &http);
        ck_assert_int_eq(http, k[i].http);
        ck_assert_int_eq(srv_error_http_status(k[i].k), k[i].http);
        cJSON *j = cJSON_Parse(body);
        const cJSON *o = cJSON_GetObjectItem(j, "error");
        ck_assert_int_eq(cJSON_GetArraySize(o), 4);
        ck_assert_str_eq(cJSON_GetObjectItem(o, "type")->valuestring, k[i].type);
        ck_assert_str_eq(cJSON_GetObjectItem(o, "code")->valuestring, k[i].code);
        if (i % 2)
            ck_assert_str_eq(cJSON_GetObjectItem(o, "param")->valuestring, "field");
        else
            ck_assert(cJSON_IsNull(cJSON_GetObjectItem(o, "param")));
        cJSON_Delete(j);
        inferd_free(body);
    }
    static const struct {
        inferd_status st;
        srv_err_kind k;
    } m[] = {{INFERD_ERR_INVALID_ARG, SRV_ERR_INVALID},   {INFERD_ERR_TOO_LONG, SRV_ERR_CONTEXT_LENGTH},
             {INFERD_ERR_QUEUE_FULL, SRV_ERR_QUEUE_FULL}, {INFERD_ERR_UNAVAILABLE, SRV_ERR_UNAVAILABLE},
             {INFERD_ERR_TIMEOUT, SRV_ERR_TIMEOUT},       {INFERD_ERR_NOMEM, SRV_ERR_INTERNAL},
             {INFERD_ERR_DEVICE, SRV_ERR_INTERNAL}};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(m); i++)
        ck_assert_int_eq(srv_err_kind_from_status(m[i].st), m[i].k);
    srv_error e;
    inferd_set_error(INFERD_ERR_TOO_LONG, "prompt has 9 tokens");
    srv_error_from_status(&e, INFERD_ERR_TOO_LONG, "prompt");
    ck_assert_str_eq(e.message, "prompt has 9 tokens");
    /* a message carrying invalid UTF-8 still renders valid JSON */
    srv_error_set(&e, SRV_ERR_MODEL_NOT_FOUND, "model", "model '%s'", "bad\xff\xfe");
    char *body = srv_error_render(&e, NULL);
    cJSON *j = cJSON_Parse(body);
    ck_assert(util_utf8_valid(body, strlen(body)));
    ck_assert(j != NULL);
    cJSON_Delete(j);
    inferd_free(body);
}
END_TEST

/* ---- metrics ----------------------------------------------------------------- */

START_TEST(test_metrics_render)
{
    srv_metrics *m = srv_metrics_new();
    char err[512];
    size_t len;
    char *t = srv_metrics_render(m, NULL, &len);
    ck_assert_msg(prom_validate(t, err, sizeof err), "%s", err);
    ck_assert_int_eq(len, strlen(t));
    inferd_free(t);
    srv_metrics_observe(m, SRV_HIST_TTFT, 0.003, 1);
    srv_metrics_observe(m, SRV_HIST_TTFT, 0.3, 2);
    srv_metrics_observe(m, SRV_HIST_TTFT, 1000.0, 1);
    srv_metrics_observe(m, SRV_HIST_GEN_LEN, 10, 1);
    srv_metrics_observe(m, SRV_HIST_ITL, NAN, 1);
    srv_metrics_http(m, 200);
    srv_metrics_http(m, 200);
    srv_metrics_http(m, 429);
    srv_metrics_http(m, 1000);
    engine_stats st;
    memset(&st, 0, sizeof st);
    st.running = 3;
    st.waiting = 2;
    st.kv_usage = 0.25;
    st.generation_tokens = 77;
    st.finished[FINISH_ABORT] = 4;
    t = srv_metrics_render(m, &st, &len);
    ck_assert_msg(prom_validate(t, err, sizeof err), "%s\n%s", err, t);
    double v;
    ck_assert(prom_value(t, "inferd:time_to_first_token_seconds_bucket{le=\"0.001\"}", &v) && v == 0);
    ck_assert(prom_value(t, "inferd:time_to_first_token_seconds_bucket{le=\"0.005\"}", &v) && v == 1);
    ck_assert(prom_value(t, "inferd:time_to_first_token_seconds_bucket{le=\"0.5\"}", &v) && v == 3);
    ck_assert(prom_value(t, "inferd:time_to_first_token_seconds_bucket{le=\"80.0\"}", &v) && v == 3);
    ck_assert(prom_value(t, "inferd:time_to_first_token_seconds_bucket{le=\"+Inf\"}", &v) && v == 4);
    ck_assert(prom_value(t, "inferd:time_to_first_token_seconds_count", &v) && v == 4);
    ck_assert(prom_value(t, "inferd:time_to_first_token_seconds_sum", &v) && fabs(v - 1000.603) < 1e-9);
    ck_assert(prom_value(t, "inferd:request_generation_tokens_bucket{le=\"10.0\"}", &v) && v == 1);
    ck_assert(prom_value(t, "inferd:inter_token_latency_seconds_count", &v) && v == 0);
    ck_assert(prom_value(t, "inferd:http_requests_total{code=\"200\"}", &v) && v == 2);
    ck_assert(prom_value(t, "inferd:http_requests_total{code=\"429\"}", &v) && v == 1);
    ck_assert(prom_value(t, "inferd:num_requests_running", &v) && v == 3);
    ck_assert(prom_value(t, "inferd:kv_cache_usage_perc", &v) && v == 0.25);
    ck_assert(prom_value(t, "inferd:request_success_total{finished_reason=\"abort\"}", &v) && v == 4);
    inferd_free(t);
    srv_metrics_free(m);
}
END_TEST

START_TEST(test_prom_validator_rejects)
{
    static const char *const bad[] = {
        "a 1",                                   /* no final newline */
        "a{b=\"1\" 2\n",                         /* unterminated labels */
        "9a 1\n",                                /* bad name */
        "a{__x=\"1\"} 1\n",                      /* reserved label */
        "a{b=\"\\q\"} 1\n",                      /* bad escape */
        "a one\n",                               /* bad value */
        "# TYPE a counter\na -1\n",              /* negative counter */
        "# TYPE a gauge\n# TYPE a gauge\na 1\n", /* double TYPE */
        "a 1\n# TYPE a gauge\n",                 /* TYPE after samples */
        "a 1\nb 1\na{x=\"1\"} 2\n",              /* not contiguous */
        "a 1\na 2\n",                            /* duplicate series */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count "
        "1\n",                                                               /* not
                                                                                cumulative
                                                                              */
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\nh_count 1\n",    /* no +Inf */
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 1\n", /* count mismatch
                                                                              */
        "# TYPE h histogram\nh_bucket{le=\"2\"} 1\nh_bucket{le=\"1\"} "
        "1\nh_bucket{le=\"+Inf\"} 1\nh_sum "
        "1\nh_count 1\n",
        "# TYPE a bogus\na 1\n",
    };
    char err[256];
    for (size_t i = 0; i < INFERD_ARRAY_LEN(bad); i++)
        ck_assert_msg(!prom_validate(bad[i], err, sizeof err), "accepted bad exposition %zu", i);
    ck_assert(
        prom_validate("# HELP a x\n# TYPE a gauge\na{b=\"q\\\"\\n\"} NaN 123\nb +Inf\n", err, sizeof err));
}
END_TEST

START_TEST(test_util)
{
    ck_assert(srv_ct_equal("secret", 6, "secret", 6));
    ck_assert(!srv_ct_equal("secreT", 6, "secret", 6));
    ck_assert(!srv_ct_equal("secre", 5, "secret", 6));
    ck_assert(!srv_ct_equal("secrets", 7, "secret", 6));
    ck_assert(!srv_ct_equal("", 0, "secret", 6));
    char *s = srv_utf8_sanitize("a\xc3\xa9\xff\xe2\x82", 6);
    ck_assert_str_eq(s, "a\xc3\xa9\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    inferd_free(s);
    size_t a, n;
    srv_strip("  x y \n", 7, &a, &n);
    ck_assert(a == 2 && n == 3);
    ck_assert(srv_is_blank(" \t\r\n", 4));
    ck_assert(!srv_is_blank(" a", 2));
    inferd_buf b = {0};
    inferd_buf_printf(&b, "%d-%s", 12, "ab");
    inferd_buf_consume(&b, 2);
    ck_assert_str_eq(b.data, "-ab");
    inferd_buf_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("srv_unit");
    TCase *tc = tcase_create("unit");
    tcase_add_test(tc, test_parse_table);
    tcase_add_test(tc, test_parse_values);
    tcase_add_test(tc, test_parse_batch);
    tcase_add_test(tc, test_tokenize_parse);
    tcase_add_test(tc, test_response_shapes);
    tcase_add_test(tc, test_chat_templates);
    tcase_add_test(tc, test_chat_detect);
    tcase_add_test(tc, test_error_mapping);
    tcase_add_test(tc, test_metrics_render);
    tcase_add_test(tc, test_prom_validator_rejects);
    tcase_add_test(tc, test_util);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
