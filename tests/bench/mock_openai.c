/* tests/bench/mock_openai.c: see mock_openai.h.
 *
 * Thread per connection (MHD_USE_THREAD_PER_CONNECTION), so the content
 * reader simply sleeps until the next event is due, in a timed condition
 * wait that mock_stop() interrupts (no polling, so thousands of idle
 * streams cost no CPU). The first token is due first_delay_ms after the
 * request body is complete, each next one token_delay_ms after the previous
 * one was handed to MHD (relative, so a late thread does not send a burst of
 * overdue tokens), which makes the injected TTFT and TPOT exact up to
 * scheduling noise.
 */
#include "mock_openai.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <microhttpd.h>

struct mock_server {
    mock_cfg cfg;
    struct MHD_Daemon *d;
    int port;
    atomic_int stopping;
    atomic_int requests, bad, active, peak, ignore_eos;
    atomic_llong usage_completion, prompt_tokens;
    pthread_mutex_t mu; /* with cv: sleeps that mock_stop() cuts short */
    pthread_cond_t cv;
};

typedef struct {
    char *body;
    size_t len;
} req_ctx;

typedef struct {
    mock_server *m;
    bool chat, stream;
    int n_tokens, prompt_tokens;
    double t0;      /* request complete, seconds */
    double due;     /* next token: the previous one's send time + the gap */
    int step;       /* next event */
    char out[1024]; /* pending bytes */
    size_t out_len, out_pos;
} stream_state;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_until(mock_server *m, double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    pthread_mutex_lock(&m->mu);
    while (!atomic_load(&m->stopping) && now_s() < t)
        if (pthread_cond_timedwait(&m->cv, &m->mu, &ts) != 0 && now_s() >= t)
            break;
    pthread_mutex_unlock(&m->mu);
}

static int word_count(const char *s)
{
    int n = 0;
    bool in = false;
    for (; *s; s++) {
        bool sp = *s == ' ';
        n += !sp && !in;
        in = !sp;
    }
    return n;
}

/* Fill st->out with the event of `step`; false at the end of the stream. */
static bool next_event(stream_state *st)
{
    const mock_cfg *c = &st->m->cfg;
    int n = st->n_tokens, k = st->step++;
    int role = st->chat ? 1 : 0;
    size_t cap = sizeof st->out;
    st->out_pos = 0;
    if (role && k == 0) {
        if (!c->role_first)
            sleep_until(st->m, st->t0 + c->first_delay_ms / 1e3);
        st->out_len = (size_t)snprintf(st->out, cap, "data: {\"id\":\"m\",\"object\":\"chat.completion.chunk\","
                                       "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                                       "\"finish_reason\":null}]}\n\n");
        return true;
    }
    k -= role;
    if (k < n) {
        sleep_until(st->m, k == 0 ? st->t0 + c->first_delay_ms / 1e3 : st->due);
        st->due = now_s() + c->token_delay_ms / 1e3;
        if (st->chat)
            st->out_len = (size_t)snprintf(st->out, cap, "data: {\"id\":\"m\",\"object\":\"chat.completion.chunk\","
                                           "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"},"
                                           "\"finish_reason\":null}]}\n\n", k);
        else
            st->out_len = (size_t)snprintf(st->out, cap, "data: {\"id\":\"m\",\"object\":\"text_completion\","
                                           "\"choices\":[{\"index\":0,\"text\":\"tok%d \",\"logprobs\":null,"
                                           "\"finish_reason\":null}]}\n\n", k);
        if (c->malformed && k == 0)
            st->out_len += (size_t)snprintf(st->out + st->out_len, cap - st->out_len, "data: {\"choices\": [\n\n");
        return true;
    }
    k -= n;
    if (k == 0) {
        st->out_len = (size_t)snprintf(st->out, cap, st->chat
            ? "data: {\"id\":\"m\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\"}]}\n\n"
            : "data: {\"id\":\"m\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n");
        return true;
    }
    if (k == 1 && !c->no_usage) {
        int ct = n + c->usage_extra;
        atomic_fetch_add(&st->m->usage_completion, ct);
        st->out_len = (size_t)snprintf(st->out, cap, "data: {\"id\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,"
                                       "\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n",
                                       st->prompt_tokens, ct, st->prompt_tokens + ct);
        return true;
    }
    if (k <= 2 && !c->omit_done) {
        st->step = n + role + 3;
        st->out_len = (size_t)snprintf(st->out, cap, "data: [DONE]\n\n");
        return true;
    }
    return false;
}

/* Non-streaming: the whole completion once the last token is due. */
static bool plain_event(stream_state *st)
{
    const mock_cfg *c = &st->m->cfg;
    if (st->step++ > 0)
        return false;
    int n = st->n_tokens;
    sleep_until(st->m, st->t0 + (c->first_delay_ms + (double)(n > 0 ? n - 1 : 0) * c->token_delay_ms) / 1e3);
    int ct = n + c->usage_extra;
    atomic_fetch_add(&st->m->usage_completion, ct);
    st->out_pos = 0;
    st->out_len = (size_t)snprintf(st->out, sizeof st->out,
                                   "{\"id\":\"m\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,"
                                   "\"text\":\"x\",\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":%d,"
                                   "\"completion_tokens\":%d,\"total_tokens\":%d}}",
                                   st->prompt_tokens, ct, st->prompt_tokens + ct);
    return true;
}

static ssize_t reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_state *st = cls;
    if (atomic_load(&st->m->stopping))
        return MHD_CONTENT_READER_END_WITH_ERROR;
    if (st->out_pos >= st->out_len && !(st->stream ? next_event(st) : plain_event(st)))
        return MHD_CONTENT_READER_END_OF_STREAM;
    size_t left = st->out_len - st->out_pos;
    if (st->m->cfg.split_writes && st->out_pos == 0 && left > 1)
        left = left / 2;
    size_t take = left < max ? left : max;
    memcpy(buf, st->out + st->out_pos, take);
    st->out_pos += take;
    return (ssize_t)take;
}

static void stream_free(void *cls)
{
    stream_state *st = cls;
    atomic_fetch_sub(&st->m->active, 1);
    free(st);
}

static enum MHD_Result send_json(struct MHD_Connection *conn, int status, const char *json)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(json), (void *)json, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (status == 429)
        MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Validate the body the bench sent; fill the stream state. */
static bool parse_request(mock_server *m, const char *body, size_t len, stream_state *st)
{
    cJSON *root = cJSON_ParseWithLength(body, len);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    const cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    bool ok = cJSON_IsObject(root) && cJSON_IsNumber(mt) && mt->valuedouble >= 1 && cJSON_IsBool(stream);
    st->stream = cJSON_IsTrue(stream);
    if (st->stream && !cJSON_IsTrue(iu))
        ok = false;
    if (st->chat) {
        const cJSON *m0 = cJSON_GetArrayItem(msgs, 0);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m0, "content");
        ok = ok && cJSON_IsString(content);
        st->prompt_tokens = ok ? word_count(content->valuestring) : 0;
    } else if (cJSON_IsArray(prompt)) {
        st->prompt_tokens = cJSON_GetArraySize(prompt);
    } else if (cJSON_IsString(prompt)) {
        st->prompt_tokens = word_count(prompt->valuestring);
    } else {
        ok = false;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(root, "ignore_eos")))
        atomic_fetch_add(&m->ignore_eos, 1);
    st->n_tokens = m->cfg.n_tokens > 0 ? m->cfg.n_tokens : (ok ? (int)mt->valuedouble : 0);
    cJSON_Delete(root);
    return ok;
}

static enum MHD_Result respond(mock_server *m, struct MHD_Connection *conn, const char *url, req_ctx *rc)
{
    bool chat = strcmp(url, "/v1/chat/completions") == 0;
    if (!chat && strcmp(url, "/v1/completions") != 0)
        return send_json(conn, 404, "{\"error\":{\"message\":\"no such route\",\"type\":\"not_found\"}}");
    atomic_fetch_add(&m->requests, 1);
    if (m->cfg.api_key) {
        const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
        char want[256];
        snprintf(want, sizeof want, "Bearer %s", m->cfg.api_key);
        if (!auth || strcmp(auth, want) != 0)
            return send_json(conn, 401, "{\"error\":{\"message\":\"bad api key\",\"type\":\"auth\"}}");
    }
    if (m->cfg.status != 200) {
        char json[160];
        snprintf(json, sizeof json, "{\"error\":{\"message\":\"mock status %d\",\"type\":\"mock\",\"code\":%d}}",
                 m->cfg.status, m->cfg.status);
        return send_json(conn, m->cfg.status, json);
    }
    stream_state *st = calloc(1, sizeof *st);
    st->m = m;
    st->chat = chat;
    if (!parse_request(m, rc->body ? rc->body : "", rc->len, st)) {
        free(st);
        atomic_fetch_add(&m->bad, 1);
        return send_json(conn, 400, "{\"error\":{\"message\":\"bad request\",\"type\":\"invalid_request_error\"}}");
    }
    atomic_fetch_add(&m->prompt_tokens, st->prompt_tokens);
    st->t0 = now_s();
    int a = atomic_fetch_add(&m->active, 1) + 1;
    int p = atomic_load(&m->peak);
    while (a > p && !atomic_compare_exchange_weak(&m->peak, &p, a)) {
    }
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 1024, reader, st, stream_free);
    MHD_add_response_header(r, "Content-Type", st->stream ? "text/event-stream" : "application/json");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                               const char *version, const char *upload_data, size_t *upload_data_size,
                               void **con_cls)
{
    (void)version;
    mock_server *m = cls;
    if (strcmp(method, "GET") == 0 && strcmp(url, "/v1/models") == 0)
        return send_json(conn, 200, "{\"object\":\"list\",\"data\":[{\"id\":\"mock-model\",\"object\":\"model\"}]}");
    if (strcmp(method, "POST") != 0)
        return send_json(conn, 405, "{\"error\":{\"message\":\"method\",\"type\":\"invalid_request_error\"}}");
    req_ctx *rc = *con_cls;
    if (!rc) {
        *con_cls = calloc(1, sizeof(req_ctx));
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        rc->body = realloc(rc->body, rc->len + *upload_data_size + 1);
        memcpy(rc->body + rc->len, upload_data, *upload_data_size);
        rc->len += *upload_data_size;
        rc->body[rc->len] = '\0';
        *upload_data_size = 0;
        return MHD_YES;
    }
    return respond(m, conn, url, rc);
}

static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    req_ctx *rc = *con_cls;
    if (rc) {
        free(rc->body);
        free(rc);
        *con_cls = NULL;
    }
}

mock_server *mock_start(const mock_cfg *cfg)
{
    mock_server *m = calloc(1, sizeof *m);
    m->cfg = *cfg;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&m->mu, NULL);
    if (m->cfg.status == 0)
        m->cfg.status = 200;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    m->d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0,
                            NULL, NULL, handler, m, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
                            MHD_OPTION_NOTIFY_COMPLETED, completed, m, MHD_OPTION_CONNECTION_TIMEOUT,
                            (unsigned)30, MHD_OPTION_CONNECTION_LIMIT, (unsigned)8192,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, (unsigned)4096, MHD_OPTION_END);
    if (!m->d) {
        pthread_cond_destroy(&m->cv);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : 0;
    if (m->port == 0) {
        mock_stop(m);
        return NULL;
    }
    return m;
}

int mock_port(const mock_server *m)
{
    return m->port;
}

void mock_stop(mock_server *m)
{
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    atomic_store(&m->stopping, 1);
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    MHD_stop_daemon(m->d);
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

int mock_requests(const mock_server *m) { return atomic_load(&((mock_server *)m)->requests); }
int mock_bad_requests(const mock_server *m) { return atomic_load(&((mock_server *)m)->bad); }
int64_t mock_usage_completion(const mock_server *m) { return atomic_load(&((mock_server *)m)->usage_completion); }
int64_t mock_prompt_tokens(const mock_server *m) { return atomic_load(&((mock_server *)m)->prompt_tokens); }
int mock_peak_active(const mock_server *m) { return atomic_load(&((mock_server *)m)->peak); }
int mock_ignore_eos_seen(const mock_server *m) { return atomic_load(&((mock_server *)m)->ignore_eos); }

int mock_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) == 0 &&
        getsockname(fd, (struct sockaddr *)&addr, &len) == 0)
        port = ntohs(addr.sin_port);
    close(fd);
    return port;
}
