/* server/srv_routes.c: see srv_routes.h. These run on the HTTP threads and
 * touch only thread-safe state: the tokenizer (read-only after load), the
 * engine's stats call and the metrics registry.
 *
 * Each route returns a heap JSON body, or NULL with err set; srv_http.c
 * turns that into the response. Generation routes are not here (srv_gen.c):
 * these answer at once and never wait on the engine.
 */
#include "server/srv_routes.h"

#include <string.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "server/srv_openai.h"

/* 200 only when ready and not draining: load balancers take the server out
 * of rotation as soon as a drain begins, before it stops accepting. */
char *srv_routes_health(srv_server *s, srv_error *err)
{
    if (atomic_load(&s->draining)) {
        srv_error_set(err, SRV_ERR_UNAVAILABLE, NULL, "the server is shutting down");
        return NULL;
    }
    if (!atomic_load(&s->ready)) {
        srv_error_set(err, SRV_ERR_UNAVAILABLE, NULL, "the model is loading");
        return NULL;
    }
    return inferd_strdup("{\"status\":\"ok\"}");
}

/* model_id NULL: the list (GET /v1/models); else the one model, or 404.
 * The id is compared exactly: it is whatever --served-model-name says. */
char *srv_routes_models(srv_server *s, const char *model_id, srv_error *err)
{
    const char *name = s->opts.served_model_name;
    if (model_id && strcmp(model_id, name) != 0) {
        srv_error_set(err, SRV_ERR_MODEL_NOT_FOUND, "model", "The model '%.128s' does not exist", model_id);
        return NULL;
    }
    return srv_resp_models(name, s->created, s->max_model_len, model_id != NULL);
}

/* Always answers (no 503 while loading): a scraper should see the server
 * is up. NOTE: s->eng is read only after `ready`, which srv_run sets once
 * the engine exists, so the pointer is never seen half-published. */
char *srv_routes_metrics(srv_server *s, size_t *len)
{
    engine_stats st;
    bool have = atomic_load(&s->ready) && s->eng;
    if (have)
        engine_get_stats(s->eng, &st);
    return srv_metrics_render(s->metrics, have ? &st : NULL, len);
}

/* The chat prompt of a /tokenize body exactly as chat completions builds
 * it, from the same template inputs (add_generation_prompt,
 * continue_final_message, chat_template_kwargs, documents) plus tools,
 * which chat completions refuse until tool calls are parsed. Renders on
 * this HTTP thread, never on the engine's. */
static bool tokenize_chat(srv_server *s, const srv_tokenize_req *r, int32_t **ids, int *n, srv_error *err)
{
    srv_chat_inputs in;
    srv_chat_req_inputs(&r->chat, &in);
    in.add_special_tokens = r->add_special_tokens;
    return srv_chat_encode_json(s->chat, r->chat.messages, &in, ids, n, err);
}

/* vLLM's /tokenize: {"count", "max_model_len", "tokens"}. Text prompts use
 * the same tok_encode call as /v1/completions, so the counts agree with
 * what a completion request would be charged. */
char *srv_routes_tokenize(srv_server *s, const char *body, size_t len, srv_error *err)
{
    srv_parse_limits lim = {s->opts.served_model_name, s->vocab_size, NULL};
    srv_tokenize_req r;
    if (!srv_tokenize_parse(body, len, &lim, &r, err))
        return NULL;
    int32_t *ids = NULL;
    int n = 0;
    if (r.msgs) {
        /* the chat prompt exactly as chat completions builds it */
        bool ok = tokenize_chat(s, &r, &ids, &n, err);
        srv_tokenize_free(&r);
        if (!ok)
            return NULL;
    } else {
        inferd_status st = tok_encode(s->tok, r.prompt, r.prompt_len, r.add_special_tokens, true, &ids, &n);
        srv_tokenize_free(&r);
        if (st != INFERD_OK) {
            srv_error_from_status(err, st, "prompt");
            return NULL;
        }
    }
    char *out = srv_resp_tokenize(ids, n, s->max_model_len);
    inferd_free(ids);
    return out;
}

/* Special tokens are rendered as their text (skip_special false), which
 * is what a client inspecting ids wants to see. */
char *srv_routes_detokenize(srv_server *s, const char *body, size_t len, srv_error *err)
{
    srv_parse_limits lim = {s->opts.served_model_name, s->vocab_size, NULL};
    srv_detokenize_req r;
    if (!srv_detokenize_parse(body, len, &lim, &r, err))
        return NULL;
    char *text = NULL;
    size_t tlen = 0;
    inferd_status st = r.n_ids ? tok_decode(s->tok, r.ids, r.n_ids, false, &text, &tlen) : INFERD_OK;
    srv_detokenize_free(&r);
    if (st != INFERD_OK) {
        srv_error_from_status(err, st, "tokens");
        return NULL;
    }
    char *out = srv_resp_detokenize(text ? text : "", tlen);
    inferd_free(text);
    return out;
}
