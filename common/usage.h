/* common/usage.h: the token-usage record and its JSON, written once.
 *
 * OpenAI's "usage" object ({"prompt_tokens", "completion_tokens",
 * "total_tokens", "prompt_tokens_details": {"cached_tokens"}}) is produced
 * by the HTTP server, its flat counts by the prompts-file runner, and read
 * back by the load generator. Keeping the key names and the total in one
 * place keeps the three in step. It lives in common/ because the server and
 * the load generator share no other module (and common already links cJSON).
 */
#ifndef INFERD_COMMON_USAGE_H
#define INFERD_COMMON_USAGE_H

#include <cjson/cJSON.h>
#include <stdbool.h>

typedef struct {
    int prompt_tokens, completion_tokens, cached_tokens;
} inferd_usage;

/* Add "prompt_tokens" and "completion_tokens" to obj (flat, no total). */
void inferd_usage_add_counts(cJSON *obj, const inferd_usage *u);

/* A new OpenAI usage object (caller owns it, or adds it to a parent). */
cJSON *inferd_usage_json(const inferd_usage *u);

/* Read a usage object: each count that is present as a number >= 0 is
 * stored into *u (absent or malformed counts leave their field untouched).
 * Returns true when completion_tokens was present. */
bool inferd_usage_parse(const cJSON *usage, inferd_usage *u);

#endif
