/* common/usage.c: usage JSON (see usage.h). */
#include "common/usage.h"

#include "common/check.h"

void inferd_usage_add_counts(cJSON *obj, const inferd_usage *u)
{
    cJSON_AddNumberToObject(obj, "prompt_tokens", u->prompt_tokens);
    cJSON_AddNumberToObject(obj, "completion_tokens", u->completion_tokens);
}

cJSON *inferd_usage_json(const inferd_usage *u)
{
    cJSON *o = cJSON_CreateObject();
    INFERD_CHECK(o != NULL);
    inferd_usage_add_counts(o, u);
    cJSON_AddNumberToObject(o, "total_tokens", u->prompt_tokens + u->completion_tokens);
    cJSON *d = cJSON_AddObjectToObject(o, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", u->cached_tokens);
    return o;
}

/* Store obj[key] into *out when it is a number >= 0. */
static bool take_count(const cJSON *obj, const char *key, int *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v) || !(v->valuedouble >= 0) || v->valuedouble > 2147483647.0)
        return false;
    *out = (int)v->valuedouble;
    return true;
}

bool inferd_usage_parse(const cJSON *usage, inferd_usage *u)
{
    if (!cJSON_IsObject(usage))
        return false;
    take_count(usage, "prompt_tokens", &u->prompt_tokens);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens_details");
    if (cJSON_IsObject(d))
        take_count(d, "cached_tokens", &u->cached_tokens);
    return take_count(usage, "completion_tokens", &u->completion_tokens);
}
