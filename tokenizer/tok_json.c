/* tokenizer/tok_json.c: parsing the pipeline sections of tokenizer.json
 * (normalizer, pre_tokenizer, post_processor, decoder) into step lists.
 *
 * Sequences are flattened. Field defaults follow HF tokenizers' serde
 * defaults (ByteLevel: add_prefix_space and use_regex true; Metaspace:
 * prepend_scheme "always", split true; legacy add_prefix_space maps to
 * always/never). Normalizers: Sequence, Prepend, Replace, Strip, NFC, NFD.
 * Pre-tokenizers: Sequence, Split, ByteLevel, Metaspace. Post-processors:
 * Sequence, TemplateProcessing, ByteLevel. Decoders: Sequence, Replace
 * (literal), ByteFallback, Fuse, Strip, ByteLevel, Metaspace. A type we do not implement is an INFERD_ERR_UNSUPPORTED
 * error that names it, never a silent approximation.
 *
 * Design choice: each section becomes a flat array of tok_step (kind +
 * the union of every step's fields) that tok_pretok.c and tok_decode.c run
 * with a switch, instead of a tree of polymorphic objects: Sequences nest
 * only to group, so flattening loses nothing, and the run loop stays one
 * function. Every string and compiled regex in a step is owned by the step
 * list (tok_steps_free). Load time only, single-threaded. On error, steps
 * already pushed stay in the list and are freed with the tokenizer.
 */
#include <cjson/cJSON.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_json.h"

/* The GPT-2 split pattern ByteLevel uses when use_regex is true
 * (defined in tok_pretok.c next to the code that runs it). */
extern const char tok_gpt2_regex[];

/* Max nesting of Sequence steps (guards recursion on hostile files).
 * Real files nest one or two levels; 16 is generous and keeps a crafted
 * file from exhausting the stack (cJSON bounds JSON depth, not this). */
#define TOK_MAX_SEQ_DEPTH 16

/* The "type" tag every HF pipeline object carries, or NULL. */
static const char *type_of(const cJSON *o)
{
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(o, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

/* A boolean field, dflt when absent or not a boolean (lenient like serde's
 * #[serde(default)] fields; a wrong type is not worth refusing a model). */
bool tok_json_bool(const cJSON *o, const char *key, bool dflt)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* A string field borrowed from the tree, NULL when absent or not a string. */
const char *tok_json_str(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A required string field; its absence is a FORMAT error naming the step. */
static inferd_status need_str(const cJSON *o, const char *key, const char *what, const char **out)
{
    *out = tok_json_str(o, key);
    if (!*out)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: missing string field \"%s\"", what, key);
    return INFERD_OK;
}

/* The step owns a heap copy; the cJSON tree is freed after loading. */
static void set_content(tok_step *st, const char *s)
{
    st->content = inferd_strdup(s);
    st->content_len = strlen(s);
}

/* {"String": "x"} or {"Regex": "..."} into st->pattern / st->re.
 * A literal pattern is kept as bytes (matched with memmem-style search, no
 * regex escaping needed); an empty one would match everywhere, so it is a
 * format error. Regex patterns are compiled now so a bad one fails at
 * load. */
static inferd_status parse_pattern(const cJSON *o, tok_step *st, bool allow_regex, const char *what)
{
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "pattern");
    const char *lit = cJSON_IsObject(p) ? tok_json_str(p, "String") : NULL;
    const char *rx = cJSON_IsObject(p) ? tok_json_str(p, "Regex") : NULL;
    if (lit) {
        st->pattern = inferd_strdup(lit);
        st->pattern_len = strlen(lit);
        if (st->pattern_len == 0)
            return inferd_set_error(INFERD_ERR_FORMAT, "%s: empty pattern", what);
        return INFERD_OK;
    }
    if (rx) {
        if (!allow_regex)
            return inferd_set_error(INFERD_ERR_UNSUPPORTED, "%s with a Regex pattern is not supported", what);
        return tok_regex_compile(&st->re, rx, strlen(rx), what);
    }
    return inferd_set_error(INFERD_ERR_FORMAT, "%s: \"pattern\" must be {\"String\": ...} or {\"Regex\": ...}",
                            what);
}

/* Files from before prepend_scheme existed carry add_prefix_space instead:
 * true maps to "always", false to "never", as HF's deserializer does. */
static inferd_status parse_prepend_scheme(const cJSON *o, tok_step *st, const char *what)
{
    const char *ps = tok_json_str(o, "prepend_scheme");
    st->prepend = TOK_PREPEND_ALWAYS;
    if (!ps) {
        if (!tok_json_bool(o, "add_prefix_space", true))
            st->prepend = TOK_PREPEND_NEVER;
        return INFERD_OK;
    }
    if (strcmp(ps, "always") == 0)
        st->prepend = TOK_PREPEND_ALWAYS;
    else if (strcmp(ps, "first") == 0)
        st->prepend = TOK_PREPEND_FIRST;
    else if (strcmp(ps, "never") == 0)
        st->prepend = TOK_PREPEND_NEVER;
    else
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: unknown prepend_scheme '%s'", what, ps);
    return INFERD_OK;
}

/* Shared by the Metaspace pre-tokenizer and decoder (same fields). The
 * replacement defaults to "▁". */
static inferd_status parse_metaspace(const cJSON *o, tok_step *st, const char *what)
{
    const char *rep = tok_json_str(o, "replacement");
    set_content(st, rep ? rep : "\xE2\x96\x81");
    if (st->content_len == 0)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: empty replacement", what);
    st->split = tok_json_bool(o, "split", true);
    return parse_prepend_scheme(o, st, what);
}

/* ---- normalizer ---------------------------------------------------------- */

/* One normalizer object, appended to out in order (a Sequence appends its
 * members recursively, up to TOK_MAX_SEQ_DEPTH). Lowercase, NFKC and the
 * other HF normalizers are refused: no supported model family uses them,
 * and approximating one would silently change token ids. */
static inferd_status norm_one(const cJSON *o, tok_steps *out, int depth)
{
    const char *ty = type_of(o);
    if (!cJSON_IsObject(o) || !ty)
        return inferd_set_error(INFERD_ERR_FORMAT, "normalizer: missing \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "normalizers");
        if (!cJSON_IsArray(list))
            return inferd_set_error(INFERD_ERR_FORMAT, "normalizer Sequence: \"normalizers\" is not an array");
        if (depth >= TOK_MAX_SEQ_DEPTH)
            return inferd_set_error(INFERD_ERR_FORMAT, "normalizer: Sequence nested too deep");
        const cJSON *it;
        cJSON_ArrayForEach(it, list)
        {
            inferd_status st = norm_one(it, out, depth + 1);
            if (st != INFERD_OK)
                return st;
        }
        return INFERD_OK;
    }
    if (strcmp(ty, "Prepend") == 0) {
        const char *s;
        inferd_status st = need_str(o, "prepend", "normalizer Prepend", &s);
        if (st == INFERD_OK) {
            tok_step *step = tok_steps_push(out);
            step->kind = TOK_NORM_PREPEND;
            set_content(step, s);
        }
        return st;
    }
    if (strcmp(ty, "Replace") == 0) {
        const char *s;
        inferd_status st = need_str(o, "content", "normalizer Replace", &s);
        if (st != INFERD_OK)
            return st;
        tok_step *step = tok_steps_push(out);
        step->kind = TOK_NORM_REPLACE;
        set_content(step, s);
        return parse_pattern(o, step, true, "normalizer Replace");
    }
    if (strcmp(ty, "Strip") == 0) {
        tok_step *step = tok_steps_push(out);
        step->kind = TOK_NORM_STRIP;
        step->start = tok_json_bool(o, "strip_left", true);
        step->stop = tok_json_bool(o, "strip_right", true);
        return INFERD_OK;
    }
    if (strcmp(ty, "NFC") == 0 || strcmp(ty, "NFD") == 0) {
        tok_step *step = tok_steps_push(out);
        step->kind = ty[2] == 'C' ? TOK_NORM_NFC : TOK_NORM_NFD;
        return INFERD_OK;
    }
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "unsupported normalizer type '%s'", ty);
}

/* Absent or null: no normalizer (an empty list). */
inferd_status tok_json_normalizer(const cJSON *o, tok_steps *out)
{
    return cJSON_IsNull(o) || !o ? INFERD_OK : norm_one(o, out, 0);
}

/* ---- pre-tokenizer ------------------------------------------------------- */

/* Split's behavior: what happens to the matched delimiter (HF's
 * SplitDelimiterBehavior). */
static inferd_status parse_behavior(const cJSON *o, tok_step *st)
{
    static const struct {
        const char *name;
        tok_split_behavior b;
    } k_names[] = {
        {"Removed", TOK_SPLIT_REMOVED},           {"Isolated", TOK_SPLIT_ISOLATED},
        {"MergedWithPrevious", TOK_SPLIT_MERGED_PREV}, {"MergedWithNext", TOK_SPLIT_MERGED_NEXT},
        {"Contiguous", TOK_SPLIT_CONTIGUOUS},
    };
    const char *b = tok_json_str(o, "behavior");
    if (!b)
        return inferd_set_error(INFERD_ERR_FORMAT, "pre_tokenizer Split: missing \"behavior\"");
    for (size_t i = 0; i < sizeof k_names / sizeof k_names[0]; i++) {
        if (strcmp(b, k_names[i].name) == 0) {
            st->behavior = k_names[i].b;
            return INFERD_OK;
        }
    }
    return inferd_set_error(INFERD_ERR_FORMAT, "pre_tokenizer Split: unknown behavior '%s'", b);
}

/* One pre-tokenizer object (Sequence flattened). ByteLevel's GPT-2 regex
 * is compiled into its own step (one copy per step, not shared: steps own
 * their regexes and free them). */
static inferd_status pre_one(const cJSON *o, tok_steps *out, int depth)
{
    const char *ty = type_of(o);
    if (!cJSON_IsObject(o) || !ty)
        return inferd_set_error(INFERD_ERR_FORMAT, "pre_tokenizer: missing \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "pretokenizers");
        if (!cJSON_IsArray(list))
            return inferd_set_error(INFERD_ERR_FORMAT, "pre_tokenizer Sequence: \"pretokenizers\" is not an array");
        if (depth >= TOK_MAX_SEQ_DEPTH)
            return inferd_set_error(INFERD_ERR_FORMAT, "pre_tokenizer: Sequence nested too deep");
        const cJSON *it;
        cJSON_ArrayForEach(it, list)
        {
            inferd_status st = pre_one(it, out, depth + 1);
            if (st != INFERD_OK)
                return st;
        }
        return INFERD_OK;
    }
    if (strcmp(ty, "Split") == 0) {
        tok_step *step = tok_steps_push(out);
        step->kind = TOK_PRE_SPLIT;
        step->invert = tok_json_bool(o, "invert", false);
        inferd_status st = parse_behavior(o, step);
        return st != INFERD_OK ? st : parse_pattern(o, step, true, "pre_tokenizer Split");
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        tok_step *step = tok_steps_push(out);
        step->kind = TOK_PRE_BYTELEVEL;
        step->add_prefix_space = tok_json_bool(o, "add_prefix_space", true);
        step->use_regex = tok_json_bool(o, "use_regex", true);
        if (step->use_regex)
            return tok_regex_compile(&step->re, tok_gpt2_regex, strlen(tok_gpt2_regex), "ByteLevel regex");
        return INFERD_OK;
    }
    if (strcmp(ty, "Metaspace") == 0) {
        tok_step *step = tok_steps_push(out);
        step->kind = TOK_PRE_METASPACE;
        return parse_metaspace(o, step, "pre_tokenizer Metaspace");
    }
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "unsupported pre_tokenizer type '%s'", ty);
}

inferd_status tok_json_pre_tokenizer(const cJSON *o, tok_steps *out)
{
    return cJSON_IsNull(o) || !o ? INFERD_OK : pre_one(o, out, 0);
}

/* ---- decoder ------------------------------------------------------------- */

/* One decoder object (Sequence flattened). Replace takes only a literal
 * pattern: every known decoder uses "▁" -> " ", and regex replacement on
 * token strings has no user. */
static inferd_status dec_one(const cJSON *o, tok_steps *out, int depth)
{
    const char *ty = type_of(o);
    if (!cJSON_IsObject(o) || !ty)
        return inferd_set_error(INFERD_ERR_FORMAT, "decoder: missing \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "decoders");
        if (!cJSON_IsArray(list))
            return inferd_set_error(INFERD_ERR_FORMAT, "decoder Sequence: \"decoders\" is not an array");
        if (depth >= TOK_MAX_SEQ_DEPTH)
            return inferd_set_error(INFERD_ERR_FORMAT, "decoder: Sequence nested too deep");
        const cJSON *it;
        cJSON_ArrayForEach(it, list)
        {
            inferd_status st = dec_one(it, out, depth + 1);
            if (st != INFERD_OK)
                return st;
        }
        return INFERD_OK;
    }
    tok_step *step = tok_steps_push(out);
    if (strcmp(ty, "Replace") == 0) {
        const char *s;
        step->kind = TOK_DEC_REPLACE;
        inferd_status st = need_str(o, "content", "decoder Replace", &s);
        if (st != INFERD_OK)
            return st;
        set_content(step, s);
        return parse_pattern(o, step, false, "decoder Replace");
    }
    if (strcmp(ty, "ByteFallback") == 0) {
        step->kind = TOK_DEC_BYTEFALLBACK;
        return INFERD_OK;
    }
    if (strcmp(ty, "Fuse") == 0) {
        step->kind = TOK_DEC_FUSE;
        return INFERD_OK;
    }
    if (strcmp(ty, "Strip") == 0) {
        const char *s;
        step->kind = TOK_DEC_STRIP;
        inferd_status st = need_str(o, "content", "decoder Strip", &s);
        if (st != INFERD_OK)
            return st;
        set_content(step, s);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, "start");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "stop");
        if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < 0 ||
            a->valuedouble > 1e6 || b->valuedouble > 1e6)
            return inferd_set_error(INFERD_ERR_FORMAT, "decoder Strip: \"start\"/\"stop\" must be counts");
        step->start = (int)a->valuedouble;
        step->stop = (int)b->valuedouble;
        return INFERD_OK;
    }
    if (strcmp(ty, "ByteLevel") == 0) {
        step->kind = TOK_DEC_BYTELEVEL;
        return INFERD_OK;
    }
    if (strcmp(ty, "Metaspace") == 0) {
        step->kind = TOK_DEC_METASPACE;
        return parse_metaspace(o, step, "decoder Metaspace");
    }
    out->n--; /* drop the unused step */
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "unsupported decoder type '%s'", ty);
}

/* *has_decoder false means "concatenate the token strings" at decode. */
inferd_status tok_json_decoder(const cJSON *o, tok_steps *out, bool *has_decoder)
{
    *has_decoder = o && !cJSON_IsNull(o);
    return *has_decoder ? dec_one(o, out, 0) : INFERD_OK;
}

/* ---- post-processor ------------------------------------------------------ */

/* One item of the "single" template: the input sequence ($A), or a special
 * token whose ids come from "special_tokens" (one entry may carry several
 * ids). out->ids is heap (owned by t->tmpl once counted). Type ids are not
 * kept: we never return them. */
static inferd_status template_item(tokenizer *t, const cJSON *item, const cJSON *specials, tok_tmpl_item *out)
{
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(item, "Sequence");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(item, "SpecialToken");
    memset(out, 0, sizeof *out);
    if (cJSON_IsObject(seq)) {
        out->is_sequence = true;
        return INFERD_OK;
    }
    const char *name = cJSON_IsObject(sp) ? tok_json_str(sp, "id") : NULL;
    if (!name)
        return inferd_set_error(INFERD_ERR_FORMAT, "post_processor TemplateProcessing: bad template item");
    const cJSON *def = cJSON_GetObjectItemCaseSensitive(specials, name);
    const cJSON *ids = cJSON_IsObject(def) ? cJSON_GetObjectItemCaseSensitive(def, "ids") : NULL;
    if (!cJSON_IsArray(ids))
        return inferd_set_error(INFERD_ERR_FORMAT,
                                "post_processor TemplateProcessing: special token '%s' has no \"ids\"", name);
    int n = cJSON_GetArraySize(ids);
    out->ids = inferd_malloc((size_t)(n > 0 ? n : 1) * sizeof *out->ids);
    const cJSON *v;
    cJSON_ArrayForEach(v, ids)
    {
        double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
        if (d < 0 || d >= t->n_ids || d != (double)(int32_t)d)
            return inferd_set_error(INFERD_ERR_FORMAT,
                                    "post_processor TemplateProcessing: special token '%s' has an id outside the "
                                    "vocabulary",
                                    name);
        out->ids[out->n_ids++] = (int32_t)d;
    }
    return INFERD_OK;
}

/* Only the "single" template is used (we encode one sequence, never
 * pairs). A second TemplateProcessing replaces the first. n_tmpl counts a
 * failed item too, so tok_free releases what it allocated. */
static inferd_status post_template(tokenizer *t, const cJSON *o)
{
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(o, "single");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(o, "special_tokens");
    if (!cJSON_IsArray(single))
        return inferd_set_error(INFERD_ERR_FORMAT, "post_processor TemplateProcessing: \"single\" is not an array");
    for (int i = 0; i < t->n_tmpl; i++)
        inferd_free(t->tmpl[i].ids);
    inferd_free(t->tmpl);
    int n = cJSON_GetArraySize(single);
    t->tmpl = inferd_calloc((size_t)(n > 0 ? n : 1), sizeof *t->tmpl);
    t->n_tmpl = 0;
    const cJSON *item;
    cJSON_ArrayForEach(item, single)
    {
        inferd_status st = template_item(t, item, specials, &t->tmpl[t->n_tmpl]);
        t->n_tmpl++;
        if (st != INFERD_OK)
            return st;
    }
    return INFERD_OK;
}

/* ByteLevel only adjusts offsets, which we do not expose: accepted as a
 * no-op. Anything else unknown (Roberta, Bert) is refused. */
static inferd_status post_one(tokenizer *t, const cJSON *o, int depth)
{
    const char *ty = type_of(o);
    if (!cJSON_IsObject(o) || !ty)
        return inferd_set_error(INFERD_ERR_FORMAT, "post_processor: missing \"type\"");
    if (strcmp(ty, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(o, "processors");
        if (!cJSON_IsArray(list))
            return inferd_set_error(INFERD_ERR_FORMAT, "post_processor Sequence: \"processors\" is not an array");
        if (depth >= TOK_MAX_SEQ_DEPTH)
            return inferd_set_error(INFERD_ERR_FORMAT, "post_processor: Sequence nested too deep");
        const cJSON *it;
        cJSON_ArrayForEach(it, list)
        {
            inferd_status st = post_one(t, it, depth + 1);
            if (st != INFERD_OK)
                return st;
        }
        return INFERD_OK;
    }
    if (strcmp(ty, "ByteLevel") == 0)
        return INFERD_OK; /* only trims offsets; ids unchanged */
    if (strcmp(ty, "TemplateProcessing") == 0)
        return post_template(t, o);
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "unsupported post_processor type '%s'", ty);
}

inferd_status tok_json_post_processor(tokenizer *t, const cJSON *o)
{
    return cJSON_IsNull(o) || !o ? INFERD_OK : post_one(t, o, 0);
}
