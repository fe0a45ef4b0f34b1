/* bench/bench_dataset.c: prompt sets and arrival times for `inferd bench
 * serve` (contracts in bench_dataset.h).
 *
 * Random prompts draw from a pool of "plain" ids: not special, and decoding
 * on their own to non-empty printable valid UTF-8 (no NUL or control bytes), so that a decoded prompt is valid
 * JSON text and re-encodes close to its length. Sent as an id array (OpenAI's
 * /v1/completions accepts one) the server sees exactly the drawn length; sent
 * as text (chat) the length is corrected by re-encoding, and the server's
 * usage stays the authority for totals. All randomness comes from the
 * counter-based generator in common/rng.h, so a seed gives the same prompts
 * and arrival times on every machine.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "common/util.h"
#include "bench/bench_dataset.h"

/* Without a tokenizer, ids [3, 259): past the usual <unk>/<s>/</s> ids 0-2,
 * the 256 byte-fallback tokens of Llama-style vocabularies. 256 output
 * tokens is the JSONL default; ADJUST_TRIES bounds the re-encoding rounds
 * of text_of_len. */
enum { NOTOK_ID_LO = 3, NOTOK_ID_HI = 259, DEFAULT_OUTPUT_LEN = 256, ADJUST_TRIES = 10 };

/* A counter-based stream: (seed, ctr) -> value, so each draw is
 * reproducible from its position alone, independent of the platform's
 * rand(). */
typedef struct {
    uint64_t seed, ctr;
} rng_state;

static double rnd_u(rng_state *r)
{
    return rng_uniform(r->seed, r->ctr++);
}

/* Uniform integer in [lo, hi]. */
/* The MIN guards the u -> 1.0 edge (hi + 1 would be out of range). */
static int rnd_int(rng_state *r, int lo, int hi)
{
    if (hi <= lo)
        return lo;
    /* scaled uniform: bias at most (hi - lo + 1) / 2^53, negligible here */
    int v = lo + (int)(rnd_u(r) * (double)(hi - lo + 1));
    return INFERD_MIN(v, hi);
}

/* Index order of k_names must match bench_data_kind. */
bool bench_data_kind_parse(const char *s, bench_data_kind *out)
{
    static const char *const k_names[] = {"random", "sharegpt", "jsonl"};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_names); i++)
        if (strcmp(s, k_names[i]) == 0) {
            *out = (bench_data_kind)i;
            return true;
        }
    return false;
}

/* Frees all n slots, including ones a failed build left partly filled. */
void bench_dataset_free(bench_prompt *p, int n)
{
    if (!p)
        return;
    for (int i = 0; i < n; i++) {
        inferd_free(p[i].text);
        inferd_free(p[i].ids);
    }
    inferd_free(p);
}

/* ---- arrivals ------------------------------------------------------------ */

/* Box-Muller (one of the pair is used); u1 is shifted to (0, 1] so that
 * log(u1) is finite. */
static double rnd_normal(uint64_t seed, uint64_t *ctr)
{
    double u1 = 1.0 - rng_uniform(seed, (*ctr)++); /* (0, 1] */
    double u2 = rng_uniform(seed, (*ctr)++);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Marsaglia-Tsang for shape >= 1 (rejection rate under 5%), with the
 * standard boost for shape < 1. The loop ends with probability 1; the
 * number of counter values used varies, which is why every caller keeps
 * its own counter. */
double bench_gamma(double shape, uint64_t seed, uint64_t *ctr)
{
    if (shape < 1.0) { /* boost: G(a) = G(a + 1) * U^(1/a) */
        double g = bench_gamma(shape + 1.0, seed, ctr);
        double u = 1.0 - rng_uniform(seed, (*ctr)++);
        return g * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d); /* Marsaglia-Tsang */
    for (;;) {
        double x = rnd_normal(seed, ctr);
        double v = 1.0 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = 1.0 - rng_uniform(seed, (*ctr)++);
        if (u < 1.0 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + d * (1.0 - v + log(v)))
            return d * v;
    }
}

/* Gamma gaps with shape k and scale 1/(rate k) have mean 1/rate for every
 * k: burstiness changes the variance (k < 1 bursty, k > 1 regular), not
 * the average rate. The seed is perturbed so arrivals do not reuse the
 * prompt stream's values. */
void bench_arrivals(int n, double rate, double burstiness, uint64_t seed, double *out)
{
    uint64_t ctr = 0;
    bool all_at_once = !(rate > 0) || isinf(rate);
    double shape = burstiness > 0 ? burstiness : 1.0;
    /* rate <= 0 and NaN (the negated comparison) mean "all at once" too */
    double scale = all_at_once ? 0.0 : 1.0 / (rate * shape); /* mean gap = 1/rate */
    double t = 0;
    for (int i = 0; i < n; i++) {
        if (i > 0 && !all_at_once)
            t += bench_gamma(shape, seed ^ 0xA5A5A5A5ull, &ctr) * scale;
        out[i] = t;
    }
}

/* ---- random prompts -------------------------------------------------------- */

/* Printable text: no NUL (C strings), no control bytes but \t and \n, and
 * no U+FFFD (what a lone byte token decodes to; it re-encodes as 3 tokens). */
static bool printable(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        /* control bytes would be escaped in JSON and re-encode oddly */
        if ((c < 0x20 && c != '\t' && c != '\n') || c == 0x7f)
            return false;
        if (c == 0xEF && i + 2 < n && (unsigned char)s[i + 1] == 0xBF && (unsigned char)s[i + 2] == 0xBD)
            return false;
    }
    return true;
}

/* Ids that are not special and decode alone to non-empty, printable, valid
 * UTF-8. */
/* One decode per vocabulary entry: O(vocab) at start-up, paid once per
 * run, before the clock.
 * Ids without a piece (holes in the vocabulary) are skipped. The pool is
 * heap, sized for the whole vocabulary; the caller frees it. */
static int32_t *plain_ids(const tokenizer *tok, int *n_out)
{
    int v = tok_vocab_size(tok);
    int32_t *ids = inferd_malloc((size_t)INFERD_MAX(v, 1) * sizeof *ids);
    int n = 0;
    for (int32_t id = 0; id < v; id++) {
        if (tok_is_special(tok, id) || !tok_id_to_piece(tok, id))
            continue;
        char *text = NULL;
        size_t len = 0;
        if (tok_decode(tok, &id, 1, false, &text, &len) == INFERD_OK && len > 0 &&
            util_utf8_valid(text, len) && printable(text, len))
            ids[n++] = id;
        inferd_free(text);
    }
    *n_out = n;
    return ids;
}

static const char *const k_words[] = {
    "the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "big", "red", "ball",
    "in", "park", "with", "her", "friend", "tom", "saw", "bird", "fly", "over", "tree",
    "they", "were", "happy", "day", "sun", "was", "warm", "time",
};

/* Ids drawn uniformly from the plain-id pool, or from the fixed range when
 * there is no tokenizer. */
static void fill_ids(rng_state *r, const int32_t *pool, int n_pool, int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        ids[i] = pool ? pool[rnd_int(r, 0, n_pool - 1)] : rnd_int(r, NOTOK_ID_LO, NOTOK_ID_HI - 1);
}

/* Text of `target` tokens: decode random ids, re-encode, trim or extend.
 * Decoding and re-encoding rarely round-trips (adjacent ids merge or
 * split), so up to ADJUST_TRIES rounds keep the first min(n_enc, target)
 * re-encoded ids and refill the rest. *len_out is the true encoded length
 * of the returned text, which may still differ from target after the last
 * try; the request is then built with (and reported as) that length.
 * Specials are neither added nor parsed: the prompt is plain text. */
/* Text of `target` tokens: decode random ids, re-encode, trim or extend. */
static inferd_status text_of_len(const tokenizer *tok, rng_state *r, const int32_t *pool, int n_pool,
                                 int target, char **text_out, int *len_out)
{
    int32_t *ids = inferd_malloc((size_t)INFERD_MAX(target, 1) * sizeof *ids);
    fill_ids(r, pool, n_pool, ids, target);
    int n = target;
    char *text = NULL;
    int n_enc = 0;
    for (int t = 0; t < ADJUST_TRIES; t++) {
        size_t len = 0;
        inferd_free(text);
        text = NULL;
        inferd_status st = tok_decode(tok, ids, n, false, &text, &len);
        int32_t *enc = NULL;
        if (st == INFERD_OK)
            st = tok_encode(tok, text, len, false, false, &enc, &n_enc);
        if (st != INFERD_OK) {
            inferd_free(ids);
            inferd_free(text);
            return st;
        }
        /* exact length reached */
        if (n_enc == target) {
            inferd_free(enc);
            break;
        }
        ids = inferd_realloc(ids, (size_t)INFERD_MAX(target, 1) * sizeof *ids);
        /* keep the re-encoded prefix (the tokenizer's own split), redraw the tail */
        n = INFERD_MIN(n_enc, target);
        memcpy(ids, enc, (size_t)n * sizeof *ids);
        fill_ids(r, pool, n_pool, ids + n, target - n);
        n = target;
        inferd_free(enc);
    }
    inferd_free(ids);
    *text_out = text;
    *len_out = n_enc;
    return INFERD_OK;
}

/* Space-separated words from k_words; 8 bytes per word cover the longest
 * word (6 bytes) plus a space, so snprintf never truncates. */
static char *words_text(rng_state *r, int n_words)
{
    size_t cap = (size_t)n_words * 8 + 1, len = 0;
    char *s = inferd_malloc(cap);
    s[0] = '\0';
    for (int i = 0; i < n_words; i++) {
        const char *w = k_words[rnd_int(r, 0, (int)INFERD_ARRAY_LEN(k_words) - 1)];
        len += (size_t)snprintf(s + len, cap - len, "%s%s", i ? " " : "", w);
    }
    return s;
}

/* [floor(L(1-r)), ceil(L(1+r))], at least 1 token. */
static void len_range(int len, double ratio, int *lo, int *hi)
{
    *lo = INFERD_MAX((int)floor(len * (1.0 - ratio)), 1);
    *hi = INFERD_MAX((int)ceil(len * (1.0 + ratio)), *lo);
}

/* Draw order per prompt is fixed (input length, output length, ids), so a
 * seed gives the same prompts whatever the endpoint or tokenizer path. As
 * ids (completions) the length is exact; as text it is the tokenizer's
 * count, or an estimate without a tokenizer. */
static inferd_status build_random(const bench_dataset_opts *o, bench_prompt *p)
{
    rng_state r = {o->seed, 0};
    int n_pool = 0;
    int32_t *pool = o->tok ? plain_ids(o->tok, &n_pool) : NULL;
        /* a vocabulary of specials only: nothing can build a prompt */
    if (o->tok && n_pool == 0) {
        inferd_free(pool);
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tokenizer has no plain (non-special) ids");
    }
    int in_lo, in_hi, out_lo, out_hi;
    len_range(o->input_len, o->range_ratio, &in_lo, &in_hi);
    len_range(o->output_len, o->range_ratio, &out_lo, &out_hi);
    inferd_status st = INFERD_OK;
    for (int i = 0; i < o->num_prompts && st == INFERD_OK; i++) {
        int in_len = rnd_int(&r, in_lo, in_hi);
        p[i].output_len = rnd_int(&r, out_lo, out_hi);
        p[i].prompt_len = in_len;
            /* completions: ids as the prompt, exactly in_len tokens */
        if (!o->text_only) {
            p[i].ids = inferd_malloc((size_t)in_len * sizeof *p[i].ids);
            p[i].n_ids = in_len;
            p[i].exact = true;
            fill_ids(&r, pool, n_pool, p[i].ids, in_len);
        } else if (o->tok) {
            st = text_of_len(o->tok, &r, pool, n_pool, in_len, &p[i].text, &p[i].prompt_len);
        } else {
            p[i].text = words_text(&r, in_len);
        }
    }
    inferd_free(pool);
    return st;
}

/* ---- ShareGPT -------------------------------------------------------------- */

/* ShareGPT turns spell the text "value"; OpenAI-style dumps "content". */
static const char *turn_text(const cJSON *turn)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(turn, "value");
    if (!cJSON_IsString(v))
        v = cJSON_GetObjectItemCaseSensitive(turn, "content");
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Token count of text (estimate: bytes / 4 without a tokenizer). */
static int count_tokens(const tokenizer *tok, const char *text, bool add_special)
{
    size_t len = strlen(text);
    if (!tok)
        return (int)INFERD_MIN((len + 3) / 4, (size_t)1 << 30);
    int32_t *ids = NULL;
    int n = 0;
    if (tok_encode(tok, text, len, add_special, false, &ids, &n) != INFERD_OK)
        return -1;
    inferd_free(ids);
    return n;
}

/* Take one conversation into p when it passes the filters. */
/* vLLM's filters: prompt >= 4 tokens, completion >= 4 (unless the output
 * length is fixed by flag), prompt <= 1024, prompt + completion <= 2048.
 * The prompt is counted with specials (as the server will), the
 * completion without. Only the first two turns are used. */
static bool sharegpt_take(const bench_dataset_opts *o, const cJSON *item, bench_prompt *p)
{
    const cJSON *conv = cJSON_GetObjectItemCaseSensitive(item, "conversations");
    if (!conv)
        conv = cJSON_GetObjectItemCaseSensitive(item, "conversation");
    if (!cJSON_IsArray(conv) || cJSON_GetArraySize(conv) < 2)
        return false;
    const char *prompt = turn_text(cJSON_GetArrayItem(conv, 0));
    const char *completion = turn_text(cJSON_GetArrayItem(conv, 1));
    if (!prompt || !completion)
        return false;
    /* -1 (encode failure) fails the >= 4 filter below: the item is skipped */
    int in_len = count_tokens(o->tok, prompt, true);
    int out_len = o->fixed_output_len > 0 ? o->fixed_output_len : count_tokens(o->tok, completion, false);
    if (in_len < 4 || out_len < 1 || (o->fixed_output_len <= 0 && out_len < 4))
        return false;
    if (in_len > 1024 || in_len + out_len > 2048)
        return false;
    p->text = inferd_strdup(prompt);
    p->prompt_len = in_len;
    p->output_len = out_len;
    return true;
}

/* Fill p[n_have..] by repeating p[0..n_have). */
/* Deep copies: every slot owns its strings, so bench_dataset_free needs
 * no special case for repeats. */
static void cycle_fill(bench_prompt *p, int n_have, int n)
{
    for (int i = n_have; i < n; i++) {
        const bench_prompt *src = &p[i % n_have];
        p[i] = *src;
        p[i].text = src->text ? inferd_strdup(src->text) : NULL;
        p[i].ids = NULL;
        if (src->ids) {
            p[i].ids = inferd_malloc((size_t)INFERD_MAX(src->n_ids, 1) * sizeof *p[i].ids);
            memcpy(p[i].ids, src->ids, (size_t)src->n_ids * sizeof *p[i].ids);
        }
    }
}

/* Whole-file parse (ShareGPT dumps are a single JSON array), a seeded
 * Fisher-Yates shuffle of the items, then the first num_prompts that pass
 * the filters; fewer than requested are cycled. The order of the file does
 * not bias which conversations are used. */
static inferd_status build_sharegpt(const bench_dataset_opts *o, bench_prompt *p)
{
    char *data = NULL;
    size_t len = 0;
    inferd_status st = util_read_file(o->path, 0, &data, &len);
    if (st != INFERD_OK)
        return st;
    cJSON *root = cJSON_ParseWithLength(data, len);
    inferd_free(data);
    if (!cJSON_IsArray(root)) {
        cJSON_Delete(root);
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: not a JSON array of conversations", o->path);
    }
    int n_items = cJSON_GetArraySize(root);
    cJSON **items = inferd_malloc((size_t)INFERD_MAX(n_items, 1) * sizeof *items);
    int k = 0;
    /* direct child walk: cJSON_GetArrayItem would make this O(n^2) */
    for (cJSON *it = root->child; it; it = it->next)
        items[k++] = it;
    rng_state r = {o->seed, 0};
    for (int i = n_items - 1; i > 0; i--) { /* Fisher-Yates */
        int j = rnd_int(&r, 0, i);
        cJSON *t = items[i];
        items[i] = items[j];
        items[j] = t;
    }
    int got = 0;
    for (int i = 0; i < n_items && got < o->num_prompts; i++)
        if (sharegpt_take(o, items[i], &p[got]))
            got++;
    inferd_free(items);
    cJSON_Delete(root);
    if (got == 0)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: no conversation passed the length filters", o->path);
    cycle_fill(p, got, o->num_prompts);
    return INFERD_OK;
}

/* ---- JSONL ----------------------------------------------------------------- */

/* An id prompt is sent as ids (exact length) on /v1/completions; the chat
 * endpoint takes only text, so there the ids are decoded, which needs a
 * tokenizer, and the length becomes approximate (not marked exact). */
static inferd_status jsonl_prompt_ids(const bench_dataset_opts *o, const cJSON *arr, bench_prompt *p)
{
    int n = cJSON_GetArraySize(arr);
    int32_t *ids = inferd_malloc((size_t)INFERD_MAX(n, 1) * sizeof *ids);
    int k = 0;
    for (const cJSON *v = arr->child; v; v = v->next) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX ||
            v->valuedouble != floor(v->valuedouble)) {
            inferd_free(ids);
            return inferd_set_error(INFERD_ERR_FORMAT, "prompt ids must be non-negative integers");
        }
        ids[k++] = (int32_t)v->valuedouble;
    }
    if (n == 0) {
        inferd_free(ids);
        return inferd_set_error(INFERD_ERR_FORMAT, "empty prompt id array");
    }
    p->prompt_len = n;
    if (!o->text_only) {
        p->ids = ids;
        p->n_ids = n;
        p->exact = true;
        return INFERD_OK;
    }
    if (!o->tok) {
        inferd_free(ids);
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "id prompts on the chat endpoint need --tokenizer");
    }
    size_t len = 0;
    inferd_status st = tok_decode(o->tok, ids, n, false, &p->text, &len);
    inferd_free(ids);
    return st;
}

/* One line: "prompt" (text or ids), "output_len" or "max_tokens"
 * (default DEFAULT_OUTPUT_LEN), --output-len overriding both. The length
 * must be an integer in [1, 1e9]: 2.5 is an error, not 2 (a silently
 * truncated length would skew the benchmark's token totals). On error p
 * may hold a partial prompt; the caller frees every slot.
 * NOTE: a text prompt that fails to tokenize gets prompt_len -1
 * (count_tokens). */
static inferd_status jsonl_line(const bench_dataset_opts *o, const char *line, size_t n, bench_prompt *p)
{
    cJSON *root = cJSON_ParseWithLength(line, n);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return inferd_set_error(INFERD_ERR_FORMAT, "not a JSON object");
    }
    const cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    inferd_status st = INFERD_OK;
    if (cJSON_IsString(prompt) && prompt->valuestring[0]) {
        p->text = inferd_strdup(prompt->valuestring);
        p->prompt_len = count_tokens(o->tok, p->text, true);
    } else if (cJSON_IsArray(prompt)) {
        st = jsonl_prompt_ids(o, prompt, p);
    } else {
        st = inferd_set_error(INFERD_ERR_FORMAT, "\"prompt\" must be a non-empty string or an id array");
    }
    const cJSON *ol = cJSON_GetObjectItemCaseSensitive(root, "output_len");
    if (!ol)
        ol = cJSON_GetObjectItemCaseSensitive(root, "max_tokens");
    p->output_len = DEFAULT_OUTPUT_LEN;
    bool ol_ok = !ol || (cJSON_IsNumber(ol) && ol->valuedouble >= 1 && ol->valuedouble <= 1e9 &&
                         ol->valuedouble == floor(ol->valuedouble));
    if (!ol_ok && st == INFERD_OK)
        st = inferd_set_error(INFERD_ERR_FORMAT, "\"%s\" must be an integer in [1, 1e9]", ol->string);
    else if (ol && ol_ok) /* only a checked value is converted: (int) of 1e300 is undefined */
        p->output_len = (int)ol->valuedouble;
    if (o->fixed_output_len > 0)
        p->output_len = o->fixed_output_len;
    cJSON_Delete(root);
    return st;
}

/* Stops at num_prompts lines (a long file is not read to the end) and at
 * the first bad line, with an error naming it; blank lines are skipped. */
static inferd_status build_jsonl(const bench_dataset_opts *o, bench_prompt *p)
{
    char *data = NULL;
    size_t len = 0;
    inferd_status st = util_read_file(o->path, 0, &data, &len);
    if (st != INFERD_OK)
        return st;
    int got = 0, line_no = 0;
    for (char *s = data; s < data + len && got < o->num_prompts && st == INFERD_OK;) {
        char *nl = memchr(s, '\n', (size_t)(data + len - s));
        char *end = nl ? nl : data + len;
        line_no++;
        const char *q = s;
        /* whitespace-only lines (including a final CRLF) are skipped */
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < end) {
            st = jsonl_line(o, s, (size_t)(end - s), &p[got]);
            if (st != INFERD_OK) {
                char why[256];
                snprintf(why, sizeof why, "%s", inferd_last_error());
                st = inferd_set_error(st, "%s:%d: %s", o->path, line_no, why);
            } else {
                got++;
            }
        }
        s = end + 1;
    }
    inferd_free(data);
    if (st != INFERD_OK)
        return st;
    if (got == 0)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: no prompts", o->path);
    cycle_fill(p, got, o->num_prompts);
    return INFERD_OK;
}

/* The argument checks repeat bounds the option rows already enforce, for
 * callers that skip the flag parser (tests). INVALID_ARG for bad
 * options, FORMAT/IO for bad files; nothing is returned on error. */
inferd_status bench_dataset_build(const bench_dataset_opts *o, bench_prompt **out, int *n_out)
{
    if (o->num_prompts <= 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--num-prompts must be positive");
    if (o->kind != BENCH_DATA_RANDOM && (!o->path || !o->path[0]))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--dataset-path is required for this dataset");
    if (o->kind == BENCH_DATA_RANDOM && (o->input_len < 1 || o->output_len < 1))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "random lengths must be >= 1");
    if (!(o->range_ratio >= 0 && o->range_ratio < 1))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "--random-range-ratio must be in [0, 1)");
    bench_prompt *p = inferd_calloc((size_t)o->num_prompts, sizeof *p);
    inferd_status st;
    if (o->kind == BENCH_DATA_RANDOM)
        st = build_random(o, p);
    else if (o->kind == BENCH_DATA_SHAREGPT)
        st = build_sharegpt(o, p);
    else
        st = build_jsonl(o, p);
    if (st != INFERD_OK) {
        bench_dataset_free(p, o->num_prompts);
        return st;
    }
    *out = p;
    *n_out = o->num_prompts;
    return INFERD_OK;
}
