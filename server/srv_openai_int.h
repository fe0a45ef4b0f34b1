/* server/srv_openai_int.h: the JSON field readers of srv_openai.c, the
 * chat parsing of srv_openai_chat.c and the body helpers of
 * srv_openai_resp.c, shared by those files and srv_responses.c so that
 * every endpoint reads and writes fields with the same rules and messages.
 * Private to server/.
 */
#ifndef INFERD_SERVER_SRV_OPENAI_INT_H
#define INFERD_SERVER_SRV_OPENAI_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "server/srv_openai.h"

/* ---- request side (srv_openai.c) ------------------------------------------- */

/* obj[name], NULL when absent or JSON null. */
const cJSON *srv_oa_field(const cJSON *obj, const char *name);
/* body (len bytes, no NUL needed) into a JSON object: no trailing data, no
 * \u0000, cJSON's nesting limit. *root is the caller's on success. */
bool srv_oa_parse_root(const char *body, size_t len, cJSON **root, srv_error *err);
/* "model", when given, must name the served model (404 otherwise);
 * *model_out gets a heap copy. */
bool srv_oa_check_model(const cJSON *root, const srv_parse_limits *lim, char **model_out, srv_error *err);
/* A valid UTF-8 string field; *out borrowed from the tree, NULL when absent. */
bool srv_oa_get_str(const cJSON *obj, const char *name, const char **out, srv_error *err);
/* A JSON boolean (0 and 1 refused); *out untouched when absent. */
bool srv_oa_get_bool(const cJSON *obj, const char *name, bool *out, srv_error *err);
/* An integer in [lo, hi]; *present tells whether it was given. */
bool srv_oa_get_int(const cJSON *obj, const char *name, int64_t lo, int64_t hi, int64_t *out, bool *present,
                    srv_error *err);
/* A request field through its sampling-table row `key` (range and type are
 * the row's); json_name is the spelling errors name. */
bool srv_oa_get_row(const cJSON *root, const char *json_name, const char *key, sampling_params *sp,
                    bool *present, srv_error *err);
/* The sampling table's cross-field rules on r->sp (r->max_tokens standing
 * in for max_tokens); errors name the field as the API spells it. */
bool srv_oa_validate_sampling(const cJSON *root, const srv_parse_limits *lim, srv_request *r, srv_error *err);

/* ---- chat template inputs (srv_openai_chat.c) ------------------------------ */

/* "messages" into c->messages (the template's view) and *msgs (the flat
 * view, heap, *n_msgs entries), then the flags, chat_template_kwargs,
 * documents and, with_tools (/tokenize), tools into c. On failure *err is
 * set, and what c and *msgs already hold is still the caller's to free
 * (srv_chat_req_free, srv_oa_msgs_free). */
bool srv_oa_parse_chat(const cJSON *root, bool with_tools, srv_chat_req *c, srv_chat_msg **msgs, int *n_msgs,
                       srv_error *err);
/* Frees msgs[0..n) and the array; safe on NULL. */
void srv_oa_msgs_free(srv_chat_msg *msgs, int n);

/* ---- response side (srv_openai_resp.c) -------------------------------------- */

/* obj[key] = text[0..len) sanitized to UTF-8 (text NULL = ""). */
void srv_oa_add_text(cJSON *obj, const char *key, const char *text, size_t len);
/* Print root unformatted into a heap string (inferd_free) and delete it. */
char *srv_oa_print_take(cJSON *root);
/* {"queue_ms", "ttft_ms", "prefill_ms", "decode_ms", "total_ms"}; a
 * negative time (not reached) prints null. */
cJSON *srv_oa_timings_json(const srv_timings *t);

#endif
