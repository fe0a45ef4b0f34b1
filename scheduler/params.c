/* scheduler/params.c: the sampling-parameter table, its validator, the
 * n / best_of rows of an API request (their own two rows: they size a
 * request, they do not steer a sequence), and defaults/names for the
 * engine's public types (the "does this request fit" check is
 * sched_fit_check, in sched.c).
 *
 * Every front end (the `inferd generate` flags, prompts-file lines, the
 * OpenAI adapter) only extracts a value with its type and hands it to
 * sampling_row_set_number/_text; engine_submit runs sampling_params_validate
 * over the same rows. The ranges are therefore written once, here, and the
 * three faces accept and reject exactly the same values (tests/cli/
 * test_sampling_table.c walks min-1, min, max, max+1 of every row through
 * all three).
 *
 * Numbers arrive as doubles from JSON and as text from the command line.
 * Integer rows reject non-integral values; the seed row takes the whole
 * int64 range (the text path parses it exactly, the JSON path is limited to
 * what a double holds, as for any JSON client) and keeps negative seeds'
 * two's-complement bits as the uint64 seed, so seed -1 and seed 2^64-1
 * sample alike.
 *
 * Not done here: cross-checks that need the model other than the vocabulary
 * size (the engine adds the tokenizer and fit checks at submit), and
 * parsing of JSON or flag syntax (the callers own that; they pass a number
 * or the flag's text).
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "common/util.h"
#include "scheduler/engine.h"

#define SP_OFF(f) offsetof(sampling_params, f)
#define I32_MAX 2147483647.0
#define I64_LO (-9223372036854775808.0) /* -2^63, exact in a double */
/* I32_MAX is exact in a double, so `v <= max` tests int32 range exactly. */
#define I64_HI 9223372036854775808.0    /* 2^63: first value above int64 */

/* One row: flag name, API key, kind, field, [min, max], default, --help
 * value placeholder, opt flags, open minimum, help. */
#define ROW(name_, key_, kind_, field_, min_, max_, def_, meta_, flags_, open_, help_)                          \
    {.opt = {.name = name_, .kind = kind_, .off = SP_OFF(field_), .min = min_, .max = max_, .def = def_,         \
             .help = help_, .meta = meta_, .flags = flags_},                                                      \
     .key = key_, .min_open = open_}

static const sampling_row k_rows[] = {
    ROW("temperature", "temperature", OPT_FLOAT, temperature, 0, 2, 1, "T", 0, false,
        "sampling temperature; 0 = greedy"),
    ROW("top-p", "top_p", OPT_FLOAT, top_p, 0, 1, 1, "P", 0, true, "nucleus sampling mass; 1 = off"),
    /* top_k -1 is accepted (OpenAI/vLLM clients send it for "off"), and so
     * is 0; -2 and below are rejected */
    ROW("top-k", "top_k", OPT_INT, top_k, -1, I32_MAX, 0, "K", 0, false,
        "keep the K most likely tokens; <= 0 = off"),
    ROW("min-p", "min_p", OPT_FLOAT, min_p, 0, 1, 0, "P", 0, false,
        "drop tokens below min_p times the top probability"),
    /* max is the largest double below 2^63; text (flags) reaches 2^63-1 exactly */
    ROW("seed", "seed", OPT_INT64, seed, I64_LO, I64_HI - 1024.0, 0, "S", OPT_F_NO_DEFAULT, false,
        "sampling seed, any int64 (default: a fresh one per request)"),
    ROW("max-tokens", "max_tokens", OPT_INT, max_tokens, 1, I32_MAX, 16, "N", 0, false,
        "tokens to generate at most"),
    ROW("min-tokens", "min_tokens", OPT_INT, min_tokens, 0, I32_MAX, 0, "N", 0, false,
        "EOS and stop tokens are ignored before this many (<= max_tokens)"),
    ROW("stop-token-ids", "stop_token_ids", OPT_CUSTOM, n_stop_token_ids, 0, SAMPLING_MAX_STOP, 0, "LIST", 0,
        false, "stop when one of these token ids is sampled"),
    ROW("stop", "stop", OPT_CUSTOM, n_stop, 0, SAMPLING_MAX_STOP, 0, "STRING", 0, false,
        "stop before this text (1..256 bytes of UTF-8)"),
    ROW("ignore-eos", "ignore_eos", OPT_BOOL, ignore_eos, 0, 1, 0, NULL, OPT_F_NO_NEGATE, false,
        "do not stop at the model's EOS ids"),
    /* logprobs: the default -1 (off) is outside [0, 20] on purpose: a
     * request cannot ask for "off" explicitly, it just omits the field;
     * sampling_params_validate lets -1 through */
    ROW("logprobs", "logprobs", OPT_INT, logprobs, 0, SAMPLING_MAX_LOGPROBS, -1, "N", OPT_F_NO_DEFAULT, false,
        "log-probability of each token and of its top N alternatives"),
    /* penalties: OpenAI's ranges for presence/frequency, vLLM's for
     * repetition (0 would zero every seen logit's scale, hence open) */
    ROW("presence-penalty", "presence_penalty", OPT_FLOAT, presence_penalty, -2, 2, 0, "X", 0, false,
        "subtract X from the logit of every token already generated"),
    ROW("frequency-penalty", "frequency_penalty", OPT_FLOAT, frequency_penalty, -2, 2, 0, "X", 0, false,
        "subtract X times a token's count among the generated tokens"),
    ROW("repetition-penalty", "repetition_penalty", OPT_FLOAT, repetition_penalty, 0, 2, 1, "X", 0, true,
        "divide positive (multiply negative) logits of prompt and generated tokens by X; 1 = off"),
};

/* The table, for the generic parser and --help; rows are static. */
const sampling_row *sampling_rows(size_t *n)
{
    *n = INFERD_ARRAY_LEN(k_rows);
    return k_rows;
}

/* Name equality where '_' and '-' are interchangeable, so both the API key
 * (top_p) and the flag name (top-p) find the row. Exact otherwise (case
 * matters, as in OpenAI's API). */
static bool name_eq(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (*a != *b && !((*a == '_' || *a == '-') && (*b == '_' || *b == '-')))
            return false;
    return *a == *b;
}

const sampling_row *sampling_row_find(const char *name)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rows); i++)
        if (name_eq(name, k_rows[i].opt.name))
            return &k_rows[i];
    return NULL;
}

/* List rows (stop, stop_token_ids) are OPT_CUSTOM: the generic parser
 * cannot fill them, the caller appends entries and the row bounds the
 * count. */
static bool is_list(const sampling_row *r)
{
    return r->opt.kind == OPT_CUSTOM;
}

static bool is_integer(const sampling_row *r)
{
    return r->opt.kind == OPT_INT || r->opt.kind == OPT_INT64 || is_list(r);
}

/* The range as shown by --help and error messages; the int64 row prints
 * its true range, not the double bounds it is stored with. Returns buf. */
const char *sampling_row_range(const sampling_row *r, char *buf, size_t len)
{
    if (r->opt.kind == OPT_INT64)
        snprintf(buf, len, "[-2^63, 2^63-1]");
    else if (r->opt.kind == OPT_BOOL)
        snprintf(buf, len, "true|false");
    else
        snprintf(buf, len, "%c%.10g, %.10g]%s", r->min_open ? '(' : '[', r->opt.min, r->opt.max,
                 is_list(r) ? " entries" : "");
    return buf;
}

/* NOTE: NaN fails every comparison, so it is rejected by construction; the
 * int64 row ignores opt.max (I64_HI - 1024) and tests the half-open double
 * range, which is what the (int64_t) cast in set_number needs to be
 * defined behaviour. */
inferd_status sampling_row_check(const sampling_row *r, double v)
{
    bool ok = r->min_open ? v > r->opt.min : v >= r->opt.min;
    if (r->opt.kind == OPT_INT64)
        ok = v >= I64_LO && v < I64_HI; /* what a double can say of int64 */
    else
        ok = ok && v <= r->opt.max;
    if (ok && is_integer(r) && v != floor(v))
        ok = false;
    if (ok)
        return INFERD_OK;
    char range[64];
    sampling_row_range(r, range, sizeof range);
    if (is_list(r))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' has %.0f entries; at most %.0f are allowed", r->key,
                                v, r->opt.max);
    return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' must be %s in %s, got %.17g", r->key,
                            is_integer(r) ? "an integer" : "a number", range, v);
}

/* Store v (already checked) into the row's field. */
/* `exact` carries the int64 seed (a double cannot hold every int64); every
 * other kind stores from v. Lists are never stored (the caller fills
 * them), hence the silent default. */
static void store(const sampling_row *r, sampling_params *sp, double v, int64_t exact)
{
    char *f = (char *)sp + r->opt.off;
    switch (r->opt.kind) {
    case OPT_FLOAT: *(float *)f = (float)v; break;
    case OPT_INT: *(int32_t *)f = (int32_t)v; break;
    case OPT_BOOL: *(bool *)f = v != 0; break;
    case OPT_INT64:
        *(uint64_t *)f = (uint64_t)exact; /* negatives keep their bits */
        sp->has_seed = true;
        break;
    default: break;
    }
}

/* The JSON path (prompts-file lines, the OpenAI body): check v against the
 * row and store it; *sp is untouched on error. BOOL rows take exactly 0/1
 * (both JSON readers pass true/false as 1/0). */
inferd_status sampling_row_set_number(const sampling_row *r, sampling_params *sp, double v)
{
    if (is_list(r))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' is a list", r->key);
    if (r->opt.kind == OPT_BOOL && v != 0 && v != 1)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' must be true or false", r->key);
    inferd_status st = r->opt.kind == OPT_BOOL ? INFERD_OK : sampling_row_check(r, v);
    if (st == INFERD_OK)
        store(r, sp, v, r->opt.kind == OPT_INT64 ? (int64_t)v : 0);
    return st;
}

/* The command-line path: parse text with the row's kind, then the same
 * checks as set_number. Integers are parsed as int64 first, so "1e3" and
 * "1.5" are refused for integer rows (a flag is typed by a person: a
 * strict parse beats a silent truncation). */
inferd_status sampling_row_set_text(const sampling_row *r, sampling_params *sp, const char *text)
{
    long long x;
    double d;
    /* the seed skips sampling_row_check: every int64 is valid and its
     * double conversion could round up to 2^63 */
    if (r->opt.kind == OPT_INT64) {
        if (!util_parse_int(text, INT64_MIN, INT64_MAX, &x))
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' must be an integer in [-2^63, 2^63-1], got '%s'",
                                    r->key, text);
        store(r, sp, 0, (int64_t)x);
        return INFERD_OK;
    }
    if (is_integer(r) && !is_list(r)) {
        if (!util_parse_int(text, INT64_MIN, INT64_MAX, &x)) {
            char range[64];
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' must be an integer in %s, got '%s'", r->key,
                                    sampling_row_range(r, range, sizeof range), text);
        }
        return sampling_row_set_number(r, sp, (double)x);
    }
    if (r->opt.kind == OPT_FLOAT) {
        if (!util_parse_double(text, &d) || !isfinite(d))
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' must be a number, got '%s'", r->key, text);
        return sampling_row_set_number(r, sp, d);
    }
    if (r->opt.kind == OPT_BOOL) {
        bool t = strcmp(text, "true") == 0 || strcmp(text, "1") == 0;
        if (!t && strcmp(text, "false") != 0 && strcmp(text, "0") != 0)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' must be true or false, got '%s'", r->key, text);
        return sampling_row_set_number(r, sp, t);
    }
    return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' is a list", r->key);
}

/* The field of row r in sp as a double (lists: the count). */
static double field_value(const sampling_row *r, const sampling_params *sp)
{
    const char *f = (const char *)sp + r->opt.off;
    switch (r->opt.kind) {
    case OPT_FLOAT: return *(const float *)f;
    case OPT_BOOL: return *(const bool *)f;
    case OPT_CUSTOM:
    case OPT_INT: return *(const int32_t *)f; /* int and int32_t counts alike */
    default: return 0;
    }
}

/* Report which field failed through *param (the OpenAI adapter names it in
 * the error's `param`); passes st through. */
static inferd_status fail_param(inferd_status st, const sampling_row *r, const char **param)
{
    if (param)
        *param = r->key;
    return st;
}

/* stop_token_ids and stop: each entry. */
/* The counts were checked by the row loop before this runs, so the loops
 * stay inside the fixed arrays. A NULL stop entry counts as empty. */
static inferd_status check_lists(const sampling_params *sp, int vocab_size, const char **param)
{
    const sampling_row *ids = sampling_row_find("stop_token_ids"), *stop = sampling_row_find("stop");
    for (int i = 0; i < sp->n_stop_token_ids; i++)
        if (sp->stop_token_ids[i] < 0 || (vocab_size > 0 && sp->stop_token_ids[i] >= vocab_size))
            return fail_param(inferd_set_error(INFERD_ERR_INVALID_ARG,
                                               "'stop_token_ids'[%d]: token id %d is outside the vocabulary "
                                               "[0, %d)",
                                               i, sp->stop_token_ids[i], vocab_size),
                              ids, param);
    for (int i = 0; i < sp->n_stop; i++) {
        size_t n = sp->stop[i] ? strlen(sp->stop[i]) : 0;
        if (n == 0 || n > SAMPLING_MAX_STOP_LEN)
            return fail_param(inferd_set_error(INFERD_ERR_INVALID_ARG,
                                               "'stop'[%d] must have 1 to %d bytes (has %zu)", i,
                                               SAMPLING_MAX_STOP_LEN, n),
                              stop, param);
        if (!util_utf8_valid(sp->stop[i], n))
            return fail_param(inferd_set_error(INFERD_ERR_INVALID_ARG, "'stop'[%d] is not valid UTF-8", i),
                              stop, param);
    }
    return INFERD_OK;
}

/* One entry's rules without the vocabulary (which only validate knows). */
static inferd_status bias_entry_check(int64_t token, double bias)
{
    if (token < 0 || token > INT32_MAX)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "'logit_bias': token id %lld is not a valid id",
                                (long long)token);
    if (!(bias >= -SAMPLING_LOGIT_BIAS_MAX && bias <= SAMPLING_LOGIT_BIAS_MAX))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "'logit_bias'[%lld] must be a number in [%g, %g], got %.17g",
                                (long long)token, -SAMPLING_LOGIT_BIAS_MAX, SAMPLING_LOGIT_BIAS_MAX, bias);
    return INFERD_OK;
}

/* NOTE: duplicates are refused rather than summed: OpenAI's map cannot
 * hold two equal keys, and "5" / "05" naming one token is a client bug
 * worth a clear error. Linear search: at most 300 entries per request. */
inferd_status sampling_logit_bias_add(sampling_params *sp, int64_t token, double bias)
{
    if (sp->n_logit_bias >= SAMPLING_MAX_LOGIT_BIAS)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "'logit_bias' has more than %d entries",
                                SAMPLING_MAX_LOGIT_BIAS);
    inferd_status st = bias_entry_check(token, bias);
    if (st != INFERD_OK)
        return st;
    for (int i = 0; i < sp->n_logit_bias; i++)
        if (sp->logit_bias[i].token == token)
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "'logit_bias' names token %lld twice",
                                    (long long)token);
    sp->logit_bias[sp->n_logit_bias].token = (int32_t)token;
    sp->logit_bias[sp->n_logit_bias].bias = (float)bias;
    sp->n_logit_bias++;
    return INFERD_OK;
}

/* Every logit_bias entry again (callers may fill the array directly), with
 * the vocabulary bound. O(n^2) duplicate check over <= 300 entries. */
static inferd_status check_logit_bias(const sampling_params *sp, int vocab_size, const char **param)
{
    inferd_status st = INFERD_OK;
    if (sp->n_logit_bias < 0 || sp->n_logit_bias > SAMPLING_MAX_LOGIT_BIAS)
        st = inferd_set_error(INFERD_ERR_INVALID_ARG, "'logit_bias' has %d entries; at most %d are allowed",
                              sp->n_logit_bias, SAMPLING_MAX_LOGIT_BIAS);
    for (int i = 0; st == INFERD_OK && i < sp->n_logit_bias; i++) {
        const sampling_logit_bias *b = &sp->logit_bias[i];
        st = bias_entry_check(b->token, b->bias);
        if (st == INFERD_OK && vocab_size > 0 && b->token >= vocab_size)
            st = inferd_set_error(INFERD_ERR_INVALID_ARG,
                                  "'logit_bias': token id %d is outside the vocabulary [0, %d)", b->token,
                                  vocab_size);
        for (int k = 0; st == INFERD_OK && k < i; k++)
            if (sp->logit_bias[k].token == b->token)
                st = inferd_set_error(INFERD_ERR_INVALID_ARG, "'logit_bias' names token %d twice", b->token);
    }
    if (st != INFERD_OK && param)
        *param = "logit_bias";
    return st;
}

/* NOTE: this is the check engine_submit relies on; callers that built sp
 * field by field (tests, bench) get the same verdict as the front ends,
 * because the loop walks the same rows. Runs on any thread, no state. */
inferd_status sampling_params_validate(const sampling_params *sp, int vocab_size, const char **param)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rows); i++) {
        const sampling_row *r = &k_rows[i];
        if (r->opt.kind == OPT_INT64 || r->opt.kind == OPT_BOOL)
            continue; /* every value of the type is valid */
        double v = field_value(r, sp);
        if (r->opt.off == SP_OFF(logprobs) && v == -1)
            continue; /* -1 = off */
        if (!isfinite(v) && r->opt.kind == OPT_FLOAT)
            return fail_param(inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' must be a finite number", r->key), r,
                              param);
        inferd_status st = sampling_row_check(r, v);
        if (st != INFERD_OK)
            return fail_param(st, r, param);
    }
    if (sp->min_tokens > sp->max_tokens)
        return fail_param(inferd_set_error(INFERD_ERR_INVALID_ARG,
                                           "'min_tokens' (%d) must not exceed 'max_tokens' (%d)", sp->min_tokens,
                                           sp->max_tokens),
                          sampling_row_find("min_tokens"), param);
    /* prompt_logprobs: the logprobs row's range (it is set from that field) */
    if (sp->prompt_logprobs != -1 && (sp->prompt_logprobs < 0 || sp->prompt_logprobs > SAMPLING_MAX_LOGPROBS))
        return fail_param(inferd_set_error(INFERD_ERR_INVALID_ARG,
                                           "'prompt_logprobs' must be -1 (off) or an integer in [0, %d], got %d",
                                           SAMPLING_MAX_LOGPROBS, sp->prompt_logprobs),
                          sampling_row_find("logprobs"), param);
    inferd_status st = check_lists(sp, vocab_size, param);
    return st != INFERD_OK ? st : check_logit_bias(sp, vocab_size, param);
}

/* Row defaults; the seed stays unset (has_seed false: a fresh seed per
 * request) and the lists empty. */
void sampling_params_default(sampling_params *sp)
{
    memset(sp, 0, sizeof *sp);
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_rows); i++)
        if (k_rows[i].opt.kind != OPT_INT64 && !is_list(&k_rows[i]))
            store(&k_rows[i], sp, k_rows[i].opt.def, 0);
    sp->prompt_logprobs = -1;
}

/* ---- n and best_of ----------------------------------------------------------
 *
 * Two integer rows of the table's type, over sampling_seqs instead of
 * sampling_params (see engine.h for why they are not table rows), so their
 * range text and messages are the table's ("'n' must be an integer in
 * [1, 16], got 17"). */
#define SEQ_ROW(key_, field_, help_)                                                                   \
    {.opt = {.name = key_, .kind = OPT_INT, .off = offsetof(sampling_seqs, field_), .min = 1,          \
             .max = SAMPLING_MAX_SEQS, .def = 1, .help = help_, .meta = "N"},                           \
     .key = key_}

static const sampling_row k_seq_rows[] = {
    SEQ_ROW("n", n, "choices returned per prompt"),
    SEQ_ROW("best_of", best_of, "sequences generated per prompt; the n most likely are returned"),
};

void sampling_seqs_default(sampling_seqs *q)
{
    q->n = 1;
    q->best_of = 1;
}

const sampling_row *sampling_seqs_row_find(const char *key)
{
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_seq_rows); i++)
        if (strcmp(key, k_seq_rows[i].key) == 0)
            return &k_seq_rows[i];
    return NULL;
}

inferd_status sampling_seqs_set(sampling_seqs *q, const char *key, double v)
{
    const sampling_row *r = sampling_seqs_row_find(key);
    if (!r)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "'%s' is not a sequence-count field", key);
    inferd_status st = sampling_row_check(r, v);
    if (st == INFERD_OK)
        *(int32_t *)((char *)q + r->opt.off) = (int32_t)v;
    return st;
}

/* NOTE: the product is checked after both rows, so it multiplies numbers
 * <= SAMPLING_MAX_SEQS and a request-sized count: no overflow. */
inferd_status sampling_seqs_validate(const sampling_seqs *q, int n_prompts, const char **param)
{
    const double v[] = {q->n, q->best_of};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(k_seq_rows); i++) {
        inferd_status st = sampling_row_check(&k_seq_rows[i], v[i]);
        if (st != INFERD_OK) {
            if (param)
                *param = k_seq_rows[i].key;
            return st;
        }
    }
    if (q->best_of < q->n) {
        if (param)
            *param = "best_of";
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "'best_of' (%d) must be greater than or equal to 'n' (%d)", q->best_of, q->n);
    }
    if ((int64_t)n_prompts * q->best_of > SAMPLING_MAX_REQUEST_SEQS) {
        if (param)
            *param = n_prompts > 1 ? "prompt" : "n";
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "%d prompts x %d sequences each is %lld sequences; at most %d per request",
                                n_prompts, q->best_of, (long long)n_prompts * q->best_of,
                                SAMPLING_MAX_REQUEST_SEQS);
    }
    return INFERD_OK;
}

/* ---- names ------------------------------------------------------------------ */

const char *finish_reason_str(finish_reason r)
{
    switch (r) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_ABORT: return "abort";
    case FINISH_ERROR: return "error";
    case FINISH_NONE: break;
    }
    return "none";
}

