/* tests/server/test_srv_responses.c: unit tables for /v1/responses
 * (server/srv_responses.c), no engine: the request parser (accepted shapes,
 * every refused field with its param, wrong types, ranges at their edges,
 * huge and deeply nested input), the values it produces (messages in order
 * with instructions first, sampling rows, max_output_tokens), and the
 * output: the Response object in each state and the stream's event
 * sequence with the shapes the openai and AI SDK clients parse.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/util.h"
#include "server/srv_responses.h"
#include "test_util.h"

static const srv_parse_limits k_lim = {"m", 512, NULL};

typedef struct {
    const char *body;
    srv_err_kind kind; /* SRV_ERR_NONE = accepted */
    const char *param;
} row;

#define OK SRV_ERR_NONE
#define INV SRV_ERR_INVALID
#define MSG "\"input\":[{\"role\":\"user\",\"content\":\"hi\"}]"

static const row k_rows[] = {
    {"{\"input\":\"hi\"}", OK, NULL},
    {"{\"input\":\"\"}", OK, NULL}, /* an empty turn renders like chat's empty content */
    {"{" MSG ",\"model\":\"m\",\"instructions\":\"be brief\"}", OK, NULL},
    {"{\"input\":[{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\","
     "\"text\":\"a\"}]},{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"b\"}]},"
     "{\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"c\"},{\"type\":\"text\",\"text\":"
     "\"d\"}]}]}",
     OK, NULL},
    /* neutral values of refused features, and ignored fields */
    {"{" MSG
     ",\"tools\":[],\"tool_choice\":\"auto\",\"include\":[],\"store\":true,\"truncation\":\"disabled\","
     "\"reasoning\":{\"effort\":null},\"text\":{\"format\":{\"type\":\"text\"},\"verbosity\":\"low\"},"
     "\"parallel_tool_calls\":false,\"metadata\":{\"k\":\"v\"},\"user\":\"u\",\"background\":false,"
     "\"top_logprobs\":0,\"previous_response_id\":null,\"service_tier\":\"auto\",\"unknown\":[1]}",
     OK, NULL},
    {"{" MSG ",\"temperature\":0,\"top_p\":1,\"max_output_tokens\":1,\"top_k\":5,\"min_p\":0.1,\"seed\":3}",
     OK, NULL},
    {"{" MSG ",\"temperature\":2,\"max_output_tokens\":2147483647,\"stream\":true,\"stream_options\":{}}", OK,
     NULL},
    {"{" MSG ",\"tool_choice\":\"none\",\"store\":false}", OK, NULL},
    /* the body */
    {"", INV, NULL},
    {"[]", INV, NULL},
    {"{" MSG "} x", INV, NULL},
    {"{\"input\":\"a\\u0000b\"}", INV, NULL},
    {"{" MSG ",\"model\":\"other\"}", SRV_ERR_MODEL_NOT_FOUND, "model"},
    {"{" MSG ",\"model\":5}", INV, "model"},
    /* input */
    {"{}", INV, "input"},
    {"{\"input\":null}", INV, "input"},
    {"{\"input\":5}", INV, "input"},
    {"{\"input\":{}}", INV, "input"},
    {"{\"input\":[]}", INV, "input"},
    {"{\"input\":[\"hi\"]}", INV, "input"},
    {"{\"input\":[{\"content\":\"x\"}]}", INV, "input"},
    {"{\"input\":[{\"role\":\"tool\",\"content\":\"x\"}]}", INV, "input"},
    {"{\"input\":[{\"role\":5,\"content\":\"x\"}]}", INV, "input"},
    {"{\"input\":[{\"role\":\"user\"}]}", INV, "input"},
    {"{\"input\":[{\"role\":\"user\",\"content\":5}]}", INV, "input"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_url\":\"x\"}]}]}", INV,
     "input"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_text\"}]}]}", INV, "input"},
    {"{\"input\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", INV, "input"},
    {"{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"o\"}]}", INV, "input"},
    {"{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_1\"}]}", INV, "input"},
    {"{\"input\":[{\"type\":5,\"role\":\"user\",\"content\":\"x\"}]}", INV, "input"},
    {"{\"input\":[[[[\"deep\"]]]]}", INV, "input"},
    {"{" MSG ",\"instructions\":5}", INV, "instructions"},
    /* refused features */
    {"{" MSG ",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]}", INV, "tools"},
    {"{" MSG ",\"tools\":{}}", INV, "tools"},
    {"{" MSG ",\"tool_choice\":\"required\"}", INV, "tool_choice"},
    {"{" MSG ",\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"}}", INV, "tool_choice"},
    {"{" MSG ",\"reasoning\":{\"effort\":\"high\"}}", INV, "reasoning"},
    {"{" MSG ",\"reasoning\":\"high\"}", INV, "reasoning"},
    {"{" MSG ",\"previous_response_id\":\"resp_1\"}", INV, "previous_response_id"},
    {"{" MSG ",\"previous_response_id\":\"resp_1\",\"store\":true}", INV, "previous_response_id"},
    {"{" MSG ",\"conversation\":\"conv_1\"}", INV, "conversation"},
    {"{" MSG ",\"prompt\":{\"id\":\"pmpt_1\"}}", INV, "prompt"},
    {"{" MSG ",\"background\":true}", INV, "background"},
    {"{" MSG ",\"background\":\"no\"}", INV, "background"},
    {"{" MSG ",\"store\":1}", INV, "store"},
    {"{" MSG ",\"include\":[\"message.output_text.logprobs\"]}", INV, "include"},
    {"{" MSG ",\"include\":\"x\"}", INV, "include"},
    {"{" MSG ",\"text\":{\"format\":{\"type\":\"json_object\"}}}", INV, "text"},
    {"{" MSG ",\"text\":{\"format\":\"text\"}}", INV, "text"},
    {"{" MSG ",\"text\":5}", INV, "text"},
    {"{" MSG ",\"truncation\":\"auto\"}", INV, "truncation"},
    {"{" MSG ",\"truncation\":1}", INV, "truncation"},
    {"{" MSG ",\"top_logprobs\":5}", INV, "top_logprobs"},
    {"{" MSG ",\"top_logprobs\":21}", INV, "top_logprobs"},
    {"{" MSG ",\"top_logprobs\":-1}", INV, "top_logprobs"},
    {"{" MSG ",\"metadata\":[]}", INV, "metadata"},
    {"{" MSG ",\"parallel_tool_calls\":\"yes\"}", INV, "parallel_tool_calls"},
    /* sampling: the rows' ranges, named as this API spells them */
    {"{" MSG ",\"max_output_tokens\":0}", INV, "max_output_tokens"},
    {"{" MSG ",\"max_output_tokens\":2147483648}", INV, "max_output_tokens"},
    {"{" MSG ",\"max_output_tokens\":1.5}", INV, "max_output_tokens"},
    {"{" MSG ",\"max_output_tokens\":\"8\"}", INV, "max_output_tokens"},
    {"{" MSG ",\"temperature\":-0.01}", INV, "temperature"},
    {"{" MSG ",\"temperature\":2.01}", INV, "temperature"},
    {"{" MSG ",\"temperature\":\"hot\"}", INV, "temperature"},
    {"{" MSG ",\"top_p\":0}", INV, "top_p"},
    {"{" MSG ",\"top_p\":1.01}", INV, "top_p"},
    {"{" MSG ",\"seed\":0.5}", INV, "seed"},
    {"{" MSG ",\"stream\":\"yes\"}", INV, "stream"},
    {"{" MSG ",\"stream_options\":{}}", INV, "stream_options"},
    {"{" MSG ",\"stream\":true,\"stream_options\":5}", INV, "stream_options"},
};

START_TEST(test_parse_table)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rows); i++) {
        const row *w = &k_rows[i];
        srv_request r;
        srv_error err;
        memset(&err, 0, sizeof err);
        bool ok = srv_responses_parse(w->body, strlen(w->body), &k_lim, &r, &err);
        ck_assert_msg(ok == (w->kind == OK), "row %zu '%s': %s", i, w->body, ok ? "accepted" : err.message);
        if (ok) {
            ck_assert(r.api == SRV_API_RESPONSES && r.n_msgs >= 1);
            srv_request_free(&r);
            continue;
        }
        ck_assert_msg(err.kind == w->kind, "row %zu: kind %d want %d (%s)", i, err.kind, w->kind,
                      err.message);
        ck_assert_msg(strlen(err.message) > 0, "row %zu: no message", i);
        if (w->param)
            ck_assert_msg(!strcmp(err.param, w->param), "row %zu: param '%s' want '%s' (%s)", i, err.param,
                          w->param, err.message);
    }
}
END_TEST

/* Deep nesting fails as malformed JSON; a huge input list parses (it is
 * bounded by the body size, as chat messages are) with one bad item at
 * its end refusing the whole request, named by index. */
START_TEST(test_parse_huge)
{
    srv_request r;
    srv_error e;
    size_t depth = 100000;
    char *deep = inferd_malloc(depth + 16);
    memcpy(deep, "{\"input\":", 9);
    memset(deep + 9, '[', depth);
    ck_assert(!srv_responses_parse(deep, depth + 9, &k_lim, &r, &e));
    ck_assert_int_eq(e.kind, SRV_ERR_INVALID);
    ck_assert_msg(strstr(e.message, "nesting") != NULL, "%s", e.message);
    inferd_free(deep);
    inferd_buf b = {0};
    int n = 20000;
    inferd_buf_append_str(&b, "{\"input\":[");
    for (int i = 0; i < n; i++)
        inferd_buf_printf(&b, "%s{\"role\":\"user\",\"content\":\"m%d\"}", i ? "," : "", i);
    inferd_buf_append_str(&b, "]}");
    ck_assert(srv_responses_parse(b.data, b.len, &k_lim, &r, &e));
    ck_assert_int_eq(r.n_msgs, n);
    ck_assert_str_eq(r.msgs[n - 1].content, "m19999");
    srv_request_free(&r);
    b.len -= 2; /* replace the closing "]}" */
    inferd_buf_append_str(&b, ",{\"role\":\"user\",\"content\":[{\"type\":\"input_file\"}]}]}");
    ck_assert(!srv_responses_parse(b.data, b.len, &k_lim, &r, &e));
    ck_assert_msg(strstr(e.message, "'input'[20000].content[0]") != NULL, "%s", e.message);
    inferd_buf_free(&b);
}
END_TEST

START_TEST(test_parse_values)
{
    srv_request r;
    srv_error e;
    const char *b =
        "{\"instructions\":\"Be brief.\",\"input\":[{\"role\":\"user\",\"content\":\"a\"},"
        "{\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"b\"}]},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"c\"},"
        "{\"type\":\"input_text\",\"text\":\"d\"}]}],"
        "\"max_output_tokens\":9,\"temperature\":0.7,\"top_p\":0.5,\"seed\":11,\"stream\":true}";
    ck_assert(srv_responses_parse(b, strlen(b), &k_lim, &r, &e));
    ck_assert_int_eq(r.n_msgs, 4);
    ck_assert(r.msgs[0].role == SRV_ROLE_SYSTEM && !strcmp(r.msgs[0].content, "Be brief."));
    ck_assert(r.msgs[1].role == SRV_ROLE_USER && !strcmp(r.msgs[1].content, "a"));
    ck_assert(r.msgs[2].role == SRV_ROLE_ASSISTANT && !strcmp(r.msgs[2].content, "b"));
    ck_assert(r.msgs[3].role == SRV_ROLE_USER && !strcmp(r.msgs[3].content, "c\nd"));
    ck_assert_str_eq(r.instructions, "Be brief.");
    ck_assert_int_eq(r.max_tokens, 9);
    ck_assert_float_eq(r.sp.temperature, 0.7f);
    ck_assert_float_eq(r.sp.top_p, 0.5f);
    ck_assert(r.sp.has_seed && r.sp.seed == 11);
    ck_assert(r.stream && r.sp.logprobs < 0);
    srv_request_free(&r);
    /* a string input is one user turn; defaults when nothing is given */
    b = "{\"input\":\"Hello\"}";
    ck_assert(srv_responses_parse(b, strlen(b), &k_lim, &r, &e));
    ck_assert(r.n_msgs == 1 && r.msgs[0].role == SRV_ROLE_USER && !strcmp(r.msgs[0].content, "Hello"));
    ck_assert(r.instructions == NULL && r.max_tokens == 0 && !r.stream);
    ck_assert_float_eq(r.sp.temperature, 1.0f);
    srv_request_free(&r);
    /* generation_config.json defaults apply as they do for chat */
    sampling_params d;
    sampling_params_default(&d);
    d.temperature = 0.25f;
    srv_parse_limits lim = {"m", 512, &d};
    ck_assert(srv_responses_parse(b, strlen(b), &lim, &r, &e));
    ck_assert_float_eq(r.sp.temperature, 0.25f);
    srv_request_free(&r);
    const char bad[] = "{\"input\":[{\"role\":\"user\",\"content\":\"\xc3(\"}]}";
    ck_assert(!srv_responses_parse(bad, sizeof bad - 1, &k_lim, &r, &e));
    ck_assert_str_eq(e.param, "input");
    ck_assert_msg(strstr(e.message, "UTF-8") != NULL, "%s", e.message);
}
END_TEST

/* ---- output -------------------------------------------------------------------- */

static cJSON *item(const cJSON *o, const char *k)
{
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

static const char *str(const cJSON *o, const char *k)
{
    const cJSON *v = item(o, k);
    ck_assert_msg(cJSON_IsString(v), "'%s' is not a string", k);
    return v->valuestring;
}

static srv_request *fixture_request(void)
{
    static srv_request r;
    srv_error e;
    const char *b = "{\"instructions\":\"I\",\"input\":\"x\",\"max_output_tokens\":4,\"temperature\":0.7}";
    ck_assert(srv_responses_parse(b, strlen(b), &k_lim, &r, &e));
    return &r;
}

START_TEST(test_body)
{
    srv_request *r = fixture_request();
    srv_responses_meta m = {"resp_1", "msg_1", 1700000000, "m", r};
    srv_usage u = {5, 3, 2};
    srv_timings t = {1, 2, 3, 4, 10};
    const char bad_text[] = "ok\xff";
    srv_responses_state st = {bad_text, 3, FINISH_STOP, &u, NULL, &t};
    char *s = srv_responses_body(&m, &st);
    cJSON *j = cJSON_Parse(s);
    ck_assert_msg(j != NULL, "%s", s);
    ck_assert_str_eq(str(j, "id"), "resp_1");
    ck_assert_str_eq(str(j, "object"), "response");
    ck_assert_str_eq(str(j, "status"), "completed");
    ck_assert_int_eq((int64_t)item(j, "created_at")->valuedouble, 1700000000);
    ck_assert(cJSON_IsNull(item(j, "error")) && cJSON_IsNull(item(j, "incomplete_details")));
    ck_assert_str_eq(str(j, "instructions"), "I");
    ck_assert_int_eq(item(j, "max_output_tokens")->valueint, 4);
    ck_assert_double_eq(item(j, "temperature")->valuedouble, 0.7); /* as sent, not 0.699999988 */
    ck_assert(cJSON_IsFalse(item(j, "store")));
    const cJSON *out = item(j, "output");
    ck_assert_int_eq(cJSON_GetArraySize(out), 1);
    const cJSON *msg = cJSON_GetArrayItem(out, 0);
    ck_assert_str_eq(str(msg, "type"), "message");
    ck_assert_str_eq(str(msg, "id"), "msg_1");
    ck_assert_str_eq(str(msg, "role"), "assistant");
    ck_assert_str_eq(str(msg, "status"), "completed");
    const cJSON *part = cJSON_GetArrayItem(item(msg, "content"), 0);
    ck_assert_str_eq(str(part, "type"), "output_text");
    ck_assert_str_eq(str(part, "text"), "ok\xef\xbf\xbd");
    ck_assert(cJSON_IsArray(item(part, "annotations")));
    const cJSON *us = item(j, "usage");
    ck_assert_int_eq(item(us, "input_tokens")->valueint, 5);
    ck_assert_int_eq(item(us, "output_tokens")->valueint, 3);
    ck_assert_int_eq(item(us, "total_tokens")->valueint, 8);
    ck_assert_int_eq(item(item(us, "input_tokens_details"), "cached_tokens")->valueint, 2);
    ck_assert_int_eq(item(item(us, "output_tokens_details"), "reasoning_tokens")->valueint, 0);
    ck_assert(cJSON_IsObject(item(j, "timings")));
    cJSON_Delete(j);
    inferd_free(s);
    /* cut by max_output_tokens: incomplete, with the reason clients map to "length" */
    st.finish = FINISH_LENGTH;
    s = srv_responses_body(&m, &st);
    j = cJSON_Parse(s);
    ck_assert_str_eq(str(j, "status"), "incomplete");
    ck_assert_str_eq(str(item(j, "incomplete_details"), "reason"), "max_output_tokens");
    ck_assert_str_eq(str(cJSON_GetArrayItem(item(j, "output"), 0), "status"), "incomplete");
    cJSON_Delete(j);
    inferd_free(s);
    srv_request_free(r);
}
END_TEST

/* Split an SSE body into its events: each must be "event: T\ndata: J"
 * with J's "type" == T and sequence numbers 0, 1, 2, ... Returns the
 * events as a JSON array (caller deletes). */
static cJSON *events_of(const char *sse)
{
    cJSON *arr = cJSON_CreateArray();
    const char *p = sse;
    int seq = 0;
    while (*p) {
        ck_assert_msg(!strncmp(p, "event: ", 7), "no event line at '%.40s'", p);
        const char *nl = strchr(p, '\n');
        ck_assert(nl && !strncmp(nl + 1, "data: ", 6));
        char type[64];
        snprintf(type, sizeof type, "%.*s", (int)(nl - p - 7), p + 7);
        const char *data = nl + 7;
        const char *end = strstr(data, "\n\n");
        ck_assert(end != NULL);
        cJSON *e = cJSON_ParseWithLength(data, (size_t)(end - data));
        ck_assert_msg(e != NULL, "bad JSON %.60s", data);
        ck_assert_str_eq(str(e, "type"), type);
        ck_assert_int_eq(item(e, "sequence_number")->valueint, seq++);
        cJSON_AddItemToArray(arr, e);
        p = end + 2;
    }
    return arr;
}

START_TEST(test_stream_events)
{
    srv_request *r = fixture_request();
    srv_responses_meta m = {"resp_1", "msg_1", 1700000000, "m", r};
    srv_usage u = {5, 2, 0};
    inferd_buf b = {0};
    int seq = 0;
    srv_responses_stream_begin(&b, &m, &seq);
    srv_responses_stream_delta(&b, &m, &seq, "He", 2);
    srv_responses_stream_delta(&b, &m, &seq, "llo", 3);
    srv_responses_state st = {"Hello", 5, FINISH_STOP, &u, NULL, NULL};
    srv_responses_stream_end(&b, &m, &seq, &st);
    inferd_buf_append_char(&b, '\0');
    cJSON *ev = events_of(b.data);
    static const char *const k_types[] = {"response.created",           "response.in_progress",
                                          "response.output_item.added", "response.content_part.added",
                                          "response.output_text.delta", "response.output_text.delta",
                                          "response.output_text.done",  "response.content_part.done",
                                          "response.output_item.done",  "response.completed"};
    ck_assert_int_eq(cJSON_GetArraySize(ev), (int)INFERD_ARRAY_LEN(k_types));
    ck_assert_int_eq(seq, (int)INFERD_ARRAY_LEN(k_types));
    for (int i = 0; i < cJSON_GetArraySize(ev); i++)
        ck_assert_str_eq(str(cJSON_GetArrayItem(ev, i), "type"), k_types[i]);
    const cJSON *created = item(cJSON_GetArrayItem(ev, 0), "response");
    ck_assert_str_eq(str(created, "status"), "in_progress");
    ck_assert(cJSON_GetArraySize(item(created, "output")) == 0 && cJSON_IsNull(item(created, "usage")));
    ck_assert_str_eq(str(created, "id"), "resp_1");
    const cJSON *added = cJSON_GetArrayItem(ev, 2);
    ck_assert_int_eq(item(added, "output_index")->valueint, 0);
    ck_assert_str_eq(str(item(added, "item"), "id"), "msg_1");
    ck_assert_str_eq(str(item(added, "item"), "status"), "in_progress");
    const cJSON *d = cJSON_GetArrayItem(ev, 5);
    ck_assert_str_eq(str(d, "delta"), "llo");
    ck_assert_str_eq(str(d, "item_id"), "msg_1");
    ck_assert(item(d, "output_index")->valueint == 0 && item(d, "content_index")->valueint == 0);
    ck_assert_str_eq(str(cJSON_GetArrayItem(ev, 6), "text"), "Hello");
    ck_assert_str_eq(str(item(cJSON_GetArrayItem(ev, 7), "part"), "text"), "Hello");
    const cJSON *done = item(cJSON_GetArrayItem(ev, 9), "response");
    ck_assert_str_eq(str(done, "status"), "completed");
    ck_assert_int_eq(item(item(done, "usage"), "total_tokens")->valueint, 7);
    ck_assert_str_eq(
        str(cJSON_GetArrayItem(item(cJSON_GetArrayItem(item(done, "output"), 0), "content"), 0), "text"),
        "Hello");
    cJSON_Delete(ev);
    /* length-cut: the last event is response.incomplete */
    inferd_buf_reset(&b);
    seq = 0;
    st.finish = FINISH_LENGTH;
    srv_responses_stream_end(&b, &m, &seq, &st);
    inferd_buf_append_char(&b, '\0');
    ev = events_of(b.data);
    ck_assert_str_eq(str(cJSON_GetArrayItem(ev, 3), "type"), "response.incomplete");
    cJSON_Delete(ev);
    /* failure: response.failed alone, with the error object */
    inferd_buf_reset(&b);
    seq = 0;
    srv_error fail = {0};
    srv_error_set(&fail, SRV_ERR_TIMEOUT, NULL, "too slow");
    st.fail = &fail;
    srv_responses_stream_end(&b, &m, &seq, &st);
    inferd_buf_append_char(&b, '\0');
    ev = events_of(b.data);
    ck_assert_int_eq(cJSON_GetArraySize(ev), 1);
    const cJSON *fr = item(cJSON_GetArrayItem(ev, 0), "response");
    ck_assert_str_eq(str(cJSON_GetArrayItem(ev, 0), "type"), "response.failed");
    ck_assert_str_eq(str(fr, "status"), "failed");
    ck_assert_str_eq(str(item(fr, "error"), "code"), "request_timeout");
    ck_assert_str_eq(str(item(fr, "error"), "message"), "too slow");
    cJSON_Delete(ev);
    inferd_buf_free(&b);
    srv_request_free(r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("srv_responses");
    TCase *tc = tcase_create("unit");
    tcase_add_test(tc, test_parse_table);
    tcase_add_test(tc, test_parse_huge);
    tcase_add_test(tc, test_parse_values);
    tcase_add_test(tc, test_body);
    tcase_add_test(tc, test_stream_events);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
