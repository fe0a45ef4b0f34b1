/* tokenizer/tok_load.c: loading a tokenizer from HF tokenizer.json (+
 * tokenizer_config.json), and the small accessors of the public API.
 *
 * The model must be BPE (other model types are refused with an error naming
 * the type). Its vocab becomes an arena of strings with an open-addressing
 * map; merges, in either the "l r" string form or the ["l", "r"] list form,
 * become a (left id, right id) -> (rank, merged id) map, and every merge is
 * checked against the vocab so a bad file fails at load, not mid-request.
 * Ids are bounded by TOK_MAX_IDS so a hostile file cannot make us allocate
 * gigabytes. Every failure is a status with a message naming the file and
 * the field at fault; a partially built tokenizer is freed on error.
 *
 * Design choice: the whole file is parsed with cJSON and converted to our
 * own compact tables, then the cJSON tree is dropped: a 10 MB tokenizer.json
 * becomes a few MB of arena and maps, and encode never touches JSON. The
 * cost is a parse of the full file at start-up (a fraction of a second).
 * A loaded tokenizer is immutable and safe to share between threads.
 * Not done here: the normalizer/pre-tokenizer/decoder step parsing
 * (tok_json.c) and the added-token tries (tok_added.c).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/log.h"
#include "common/util.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_json.h"

/* Largest tokenizer.json / tokenizer_config.json we read.
 * Real files are under 20 MB; the cap only refuses a wrong path (a weights
 * file) before it is read into memory. */
#define TOK_MAX_FILE_BYTES (512u << 20)

/* An id field: a JSON integer in [0, TOK_MAX_IDS). The range test runs
 * before the int32 cast, so the cast is always defined. */
static inferd_status json_id(const cJSON *v, const char *what, const char *name, int32_t *out)
{
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1.0;
    if (!cJSON_IsNumber(v) || d < 0 || d >= TOK_MAX_IDS || d != (double)(int32_t)d)
        return inferd_set_error(INFERD_ERR_FORMAT, "%s '%s': id must be an integer in [0, %d)", what, name,
                                TOK_MAX_IDS);
    *out = (int32_t)d;
    return INFERD_OK;
}

/* Max id + 1 over the model vocab and the added tokens.
 * Also validates every id and every added-token entry's shape, so the
 * loaders after it may read ids and contents without checks. Ids need not
 * be dense: holes get piece_len -1 (no text). */
static inferd_status count_ids(const cJSON *vocab, const cJSON *added, int *n_ids)
{
    int32_t max_id = -1, id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab)
    {
        inferd_status st = json_id(it, "vocab entry", it->string, &id);
        if (st != INFERD_OK)
            return st;
        max_id = INFERD_MAX(max_id, id);
    }
    cJSON_ArrayForEach(it, added)
    {
        const char *content = tok_json_str(it, "content");
        if (!cJSON_IsObject(it) || !content)
            return inferd_set_error(INFERD_ERR_FORMAT, "added_tokens: entry without a \"content\" string");
        inferd_status st = json_id(cJSON_GetObjectItemCaseSensitive(it, "id"), "added token", content, &id);
        if (st != INFERD_OK)
            return st;
        max_id = INFERD_MAX(max_id, id);
    }
    if (max_id < 0)
        return inferd_set_error(INFERD_ERR_FORMAT, "model.vocab is empty");
    *n_ids = max_id + 1;
    return INFERD_OK;
}

/* Fills the id-indexed tables and the string -> id map. The map stores
 * ids and reads strings through piece_off, never pointers, so the arena
 * may move while it grows. NOTE: offsets are 32-bit to halve the table;
 * the UINT32_MAX test keeps them exact. */
static inferd_status load_vocab(tokenizer *t, const cJSON *vocab, const cJSON *added)
{
    if (!cJSON_IsObject(vocab))
        return inferd_set_error(INFERD_ERR_FORMAT, "model.vocab is missing or not an object");
    if (added && !cJSON_IsArray(added) && !cJSON_IsNull(added))
        return inferd_set_error(INFERD_ERR_FORMAT, "added_tokens is not an array");
    inferd_status st = count_ids(vocab, added, &t->n_ids);
    if (st != INFERD_OK)
        return st;
    t->piece_off = inferd_calloc((size_t)t->n_ids, sizeof *t->piece_off);
    t->piece_len = inferd_malloc((size_t)t->n_ids * sizeof *t->piece_len);
    t->added_of = inferd_malloc((size_t)t->n_ids * sizeof *t->added_of);
    for (int i = 0; i < t->n_ids; i++)
        t->piece_len[i] = t->added_of[i] = -1;
    int n_vocab = cJSON_GetArraySize(vocab);
    tok_vocab_init(&t->vocab, n_vocab);
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab)
    {
        int32_t id = (int32_t)it->valuedouble;
        size_t len = strlen(it->string);
        if (t->piece_len[id] >= 0)
            return inferd_set_error(INFERD_ERR_FORMAT, "model.vocab: id %d is used twice ('%s')", (int)id,
                                    it->string);
        if (t->arena.len + len >= UINT32_MAX)
            return inferd_set_error(INFERD_ERR_FORMAT, "model.vocab is too large");
        t->piece_off[id] = (uint32_t)t->arena.len;
        t->piece_len[id] = (int32_t)len;
        inferd_buf_append(&t->arena, it->string, len + 1); /* keep the NUL: tok_id_to_piece */
    }
    for (int32_t id = 0; id < t->n_ids; id++)
        if (t->piece_len[id] >= 0)
            tok_vocab_insert(t, id);
    return INFERD_OK;
}

/* Cannot fail: count_ids already checked every entry. Flags default as in
 * HF: normalized is true for non-special tokens, false for special ones.
 * A later entry with the same id takes over added_of (HF: the last wins). */
static void load_added(tokenizer *t, const cJSON *added)
{
    int n = cJSON_IsArray(added) ? cJSON_GetArraySize(added) : 0;
    t->added = inferd_calloc((size_t)(n > 0 ? n : 1), sizeof *t->added);
    const cJSON *it, *list = n > 0 ? added : NULL;
    cJSON_ArrayForEach(it, list)
    {
        tok_added *a = &t->added[t->n_added];
        const char *content = tok_json_str(it, "content");
        a->content = inferd_strdup(content);
        a->len = strlen(content);
        a->id = (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        a->special = tok_json_bool(it, "special", false);
        a->lstrip = tok_json_bool(it, "lstrip", false);
        a->rstrip = tok_json_bool(it, "rstrip", false);
        a->single_word = tok_json_bool(it, "single_word", false);
        a->normalized = tok_json_bool(it, "normalized", !a->special);
        t->added_of[a->id] = t->n_added;
        t->n_added++;
    }
}

/* Left and right strings of merge #rank, in "l r" or ["l", "r"] form.
 * The string form cannot express tokens that contain a space (HF's newer
 * list form exists for that); a second space is therefore an error, not a
 * guess. *l and *r point into tmp or into the JSON tree, valid until the
 * next call. */
static inferd_status merge_parts(const cJSON *m, int rank, inferd_buf *tmp, const char **l, size_t *ll, const char **r,
                                 size_t *rl)
{
    if (cJSON_IsString(m)) {
        const char *s = m->valuestring;
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return inferd_set_error(INFERD_ERR_FORMAT, "model.merges[%d] '%s' is not two tokens separated by one space",
                                    rank, s);
        tmp->len = 0;
        inferd_buf_append(tmp, s, strlen(s));
        *l = tmp->data;
        *ll = (size_t)(sp - s);
        *r = tmp->data + *ll + 1;
        *rl = strlen(sp + 1);
        return INFERD_OK;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
        cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
        *l = cJSON_GetArrayItem(m, 0)->valuestring;
        *r = cJSON_GetArrayItem(m, 1)->valuestring;
        *ll = strlen(*l);
        *rl = strlen(*r);
        return INFERD_OK;
    }
    return inferd_set_error(INFERD_ERR_FORMAT, "model.merges[%d] is neither \"l r\" nor [\"l\", \"r\"]", rank);
}

/* Rank = position in the list (lower merges first). The merged token is
 * l + r with r's continuing_subword_prefix removed, as HF's BPE builds it;
 * all three must be in the vocab, so tok_bpe_word can never produce an id
 * that has no text. */
static inferd_status load_merges(tokenizer *t, const cJSON *merges)
{
    if (!cJSON_IsArray(merges))
        return inferd_set_error(INFERD_ERR_FORMAT, "model.merges is missing or not an array");
    tok_merges_init(&t->merges, cJSON_GetArraySize(merges));
    inferd_buf tmp = {0}, joined = {0};
    size_t pl = t->cont_prefix ? strlen(t->cont_prefix) : 0;
    inferd_status st = INFERD_OK;
    int rank = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges)
    {
        const char *l = NULL, *r = NULL;
        size_t ll = 0, rl = 0;
        if ((st = merge_parts(m, rank, &tmp, &l, &ll, &r, &rl)) != INFERD_OK)
            break;
        int32_t a = tok_vocab_find(t, l, ll), b = tok_vocab_find(t, r, rl);
        joined.len = 0;
        inferd_buf_append(&joined, l, ll);
        if (pl && rl >= pl && memcmp(r, t->cont_prefix, pl) == 0)
            inferd_buf_append(&joined, r + pl, rl - pl);
        else
            inferd_buf_append(&joined, r, rl);
        int32_t c = tok_vocab_find(t, joined.data, joined.len);
        if (a < 0 || b < 0 || c < 0) {
            const char *miss = a < 0 ? "left" : b < 0 ? "right" : "merged";
            int ml = (int)(a < 0 ? ll : b < 0 ? rl : joined.len);
            const char *ms = a < 0 ? l : b < 0 ? r : joined.data;
            st = inferd_set_error(INFERD_ERR_FORMAT, "model.merges[%d]: %s token '%.*s' is not in the vocabulary",
                                  rank, miss, ml, ms);
            break;
        }
        tok_merges_insert(&t->merges, a, b, (uint32_t)rank, c);
        rank++;
    }
    inferd_buf_free(&tmp);
    inferd_buf_free(&joined);
    return st;
}

/* The BPE model's flags. A missing unk_token is only a warning: HF loads
 * such files too, and characters with no token are then dropped. The byte
 * tokens "<0xNN>" are looked up once for byte_fallback (Llama-2, Mistral). */
static inferd_status load_bpe_options(tokenizer *t, const cJSON *model)
{
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    t->unk_id = -1;
    if (cJSON_IsString(unk)) {
        t->unk_id = tok_vocab_find(t, unk->valuestring, strlen(unk->valuestring));
        if (t->unk_id < 0)
            INFERD_LOG_WARN("tokenizer: unk_token '%s' is not in the vocabulary; unknown characters are dropped",
                     unk->valuestring);
    }
    t->fuse_unk = tok_json_bool(model, "fuse_unk", false);
    t->byte_fallback = tok_json_bool(model, "byte_fallback", false);
    t->ignore_merges = tok_json_bool(model, "ignore_merges", false);
    const char *p = tok_json_str(model, "continuing_subword_prefix");
    const char *s = tok_json_str(model, "end_of_word_suffix");
    t->cont_prefix = p && *p ? inferd_strdup(p) : NULL;
    t->end_suffix = s && *s ? inferd_strdup(s) : NULL;
    const cJSON *dropout = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(dropout) && dropout->valuedouble > 0)
        INFERD_LOG_WARN("tokenizer: BPE dropout %g ignored (inference encodes deterministically)", dropout->valuedouble);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_ids[b] = tok_vocab_find(t, name, 6);
    }
    return INFERD_OK;
}

/* A model object without "type" but with merges is BPE (old files omit the
 * type); any other type is UNSUPPORTED, not FORMAT: the file is valid, we
 * just do not implement WordPiece/Unigram. */
static inferd_status load_model(tokenizer *t, const cJSON *root)
{
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!cJSON_IsObject(model))
        return inferd_set_error(INFERD_ERR_FORMAT, "missing \"model\" object");
    const char *ty = tok_json_str(model, "type");
    if (!ty && !cJSON_GetObjectItemCaseSensitive(model, "merges"))
        return inferd_set_error(INFERD_ERR_FORMAT, "model has no \"type\" (and no merges: not BPE)");
    if (ty && strcmp(ty, "BPE") != 0)
        return inferd_set_error(INFERD_ERR_UNSUPPORTED,
                                "unsupported tokenizer model type '%s' (only BPE is supported)", ty);
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    inferd_status st = load_vocab(t, cJSON_GetObjectItemCaseSensitive(model, "vocab"), added);
    if (st != INFERD_OK)
        return st;
    load_added(t, added);
    if ((st = load_bpe_options(t, model)) != INFERD_OK)
        return st;
    st = load_merges(t, cJSON_GetObjectItemCaseSensitive(model, "merges"));
    if (st == INFERD_OK)
        tok_bpe_check_chunking(t);
    return st;
}

/* A token named in tokenizer_config.json: "text" or {"content": "text"}.
 * The id of that token's text, -1 when unset or unknown (warned: a config
 * naming a token the vocabulary lacks is a broken model directory). */
static int32_t config_token(const tokenizer *t, const cJSON *cfg, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *s = cJSON_IsString(v) ? v->valuestring : cJSON_IsObject(v) ? tok_json_str(v, "content") : NULL;
    if (!s)
        return -1;
    int32_t id = tok_piece_to_id(t, s);
    if (id < 0)
        INFERD_LOG_WARN("tokenizer_config.json: %s '%s' is not in the vocabulary", key, s);
    return id;
}

static const char *const k_config_token_keys[TOK_CONFIG_TOKENS] = {
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
};

/* Keep the special-token texts of tokenizer_config.json (chat templates
 * see them as bos_token, eos_token, ...). */
static void config_token_texts(tokenizer *t, const cJSON *cfg)
{
    for (int k = 0; k < TOK_CONFIG_TOKENS; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(cfg, k_config_token_keys[k]);
        const char *s = cJSON_IsString(v) ? v->valuestring : cJSON_IsObject(v) ? tok_json_str(v, "content") : NULL;
        if (s && s[0])
            t->config_tokens[k] = inferd_strdup(s);
    }
}

/* The list form picks the entry named "default", else the first one with
 * a template (transformers' choice when no name is requested). */
static void config_chat_template(tokenizer *t, const cJSON *cfg)
{
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(ct)) {
        t->chat_template = inferd_strdup(ct->valuestring);
        return;
    }
    /* list form: [{"name": "default", "template": "..."}, ...] */
    const cJSON *it, *pick = NULL, *list = cJSON_IsArray(ct) ? ct : NULL;
    cJSON_ArrayForEach(it, list)
    {
        const char *name = tok_json_str(it, "name");
        if (tok_json_str(it, "template") && (!pick || (name && strcmp(name, "default") == 0)))
            pick = it;
    }
    if (pick)
        t->chat_template = inferd_strdup(tok_json_str(pick, "template"));
}

/* tokenizer_config.json is optional. Without it (or without the keys), BOS
 * is the first special id of the post-processor template and EOS the first
 * of the usual end-of-text pieces present, so generation still stops. */
static inferd_status load_config(tokenizer *t, const char *config_json)
{
    t->bos_id = t->eos_id = -1;
    t->add_bos_token = true;
    if (config_json) {
        cJSON *cfg = cJSON_Parse(config_json);
        if (!cJSON_IsObject(cfg)) {
            cJSON_Delete(cfg);
            return inferd_set_error(INFERD_ERR_FORMAT, "tokenizer_config.json: invalid JSON (expected an object)");
        }
        t->bos_id = config_token(t, cfg, "bos_token");
        t->eos_id = config_token(t, cfg, "eos_token");
        t->add_bos_token = tok_json_bool(cfg, "add_bos_token", true);
        t->has_config = true;
        config_token_texts(t, cfg);
        config_chat_template(t, cfg);
        cJSON_Delete(cfg);
    }
    for (int i = 0; t->bos_id < 0 && i < t->n_tmpl && !t->tmpl[i].is_sequence; i++)
        if (t->tmpl[i].n_ids > 0)
            t->bos_id = t->tmpl[i].ids[0];
    static const char *const k_eos[] = {"</s>", "<|end_of_text|>", "<|endoftext|>"};
    for (size_t i = 0; t->eos_id < 0 && i < INFERD_ARRAY_LEN(k_eos); i++)
        t->eos_id = tok_piece_to_id(t, k_eos[i]);
    return INFERD_OK;
}

/* Order matters: the vocab before everything that names tokens, the
 * post-processor before load_config (BOS fallback), the added-token tries
 * after the normalizer (they are built per normalized/raw content). */
static inferd_status load_root(tokenizer *t, const cJSON *root, const char *config_json)
{
    if (!cJSON_IsObject(root))
        return inferd_set_error(INFERD_ERR_FORMAT, "top level is not a JSON object");
    inferd_status st = load_model(t, root);
    if (st == INFERD_OK)
        st = tok_json_normalizer(cJSON_GetObjectItemCaseSensitive(root, "normalizer"), &t->norm);
    if (st == INFERD_OK)
        st = tok_json_pre_tokenizer(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), &t->pre);
    if (st == INFERD_OK)
        st = tok_json_post_processor(t, cJSON_GetObjectItemCaseSensitive(root, "post_processor"));
    if (st == INFERD_OK)
        st = tok_json_decoder(cJSON_GetObjectItemCaseSensitive(root, "decoder"), &t->dec, &t->has_decoder);
    if (st == INFERD_OK)
        st = tok_added_build(t);
    if (st == INFERD_OK)
        st = load_config(t, config_json);
    return st;
}

/* Parse and load; on error the message is prefixed with `name`. */
/* The longest token text in bytes: model pieces (their vocab spelling, which
 * is never shorter than the input bytes the token stands for: byte-level
 * BPE spells a byte with 1-2 UTF-8 bytes, SentencePiece a space with the
 * 3-byte U+2581, a fallback byte with 6) and added-token contents. */
static size_t longest_token(const tokenizer *t)
{
    size_t m = 1;
    for (int id = 0; id < t->n_ids; id++)
        if (t->piece_len[id] > 0 && (size_t)t->piece_len[id] > m)
            m = (size_t)t->piece_len[id];
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].content && strlen(t->added[i].content) > m)
            m = strlen(t->added[i].content);
    return m;
}

static inferd_status load_text(const char *json, size_t len, const char *config_json, const char *name,
                               tokenizer **out)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, false);
    if (!root) {
        size_t at = end && end >= json ? (size_t)(end - json) : 0;
        return inferd_set_error(INFERD_ERR_FORMAT, "%s: invalid JSON near byte %zu", name, at);
    }
    tokenizer *t = inferd_calloc(1, sizeof *t);
    inferd_status st = load_root(t, root, config_json);
    cJSON_Delete(root);
    if (st != INFERD_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", inferd_last_error());
        tok_free(t);
        return inferd_set_error(st, "%s: %s", name, msg);
    }
    t->max_token_bytes = longest_token(t);
    *out = t;
    return INFERD_OK;
}

inferd_status tok_load_json(const char *tokenizer_json, const char *config_json, tokenizer **out)
{
    if (!tokenizer_json || !out)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tok_load_json: NULL argument");
    *out = NULL;
    return load_text(tokenizer_json, strlen(tokenizer_json), config_json, "tokenizer.json", out);
}

/* dir/tokenizer.json, plus dir/tokenizer_config.json when present. A model
 * whose config has no chat_template may ship it as chat_template.jinja
 * (newer transformers); that file is best effort: unreadable means "no
 * template", never a load failure. */
inferd_status tok_load(const char *dir, tokenizer **out)
{
    if (!dir || !out)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tok_load: NULL argument");
    *out = NULL;
    char *path = util_path_join(dir, "tokenizer.json");
    char *cfg_path = util_path_join(dir, "tokenizer_config.json");
    char *json = NULL, *cfg = NULL;
    size_t len = 0, cfg_len = 0;
    inferd_status st;
    if (!util_file_exists(path)) {
        st = inferd_set_error(INFERD_ERR_NOT_FOUND, "%s: no tokenizer.json in this directory", dir);
        goto done;
    }
    if ((st = util_read_file(path, TOK_MAX_FILE_BYTES, &json, &len)) != INFERD_OK)
        goto done;
    if (util_file_exists(cfg_path) && (st = util_read_file(cfg_path, TOK_MAX_FILE_BYTES, &cfg, &cfg_len)) != INFERD_OK)
        goto done;
    st = load_text(json, len, cfg, path, out);
    if (st == INFERD_OK && !(*out)->chat_template) {
        char *jinja_path = util_path_join(dir, "chat_template.jinja");
        char *jinja = NULL;
        size_t jl;
        if (util_file_exists(jinja_path) && util_read_file(jinja_path, TOK_MAX_FILE_BYTES, &jinja, &jl) == INFERD_OK)
            (*out)->chat_template = jinja;
        inferd_free(jinja_path);
    }
done:
    inferd_free(path);
    inferd_free(cfg_path);
    inferd_free(json);
    inferd_free(cfg);
    return st;
}

/* Safe on a partially loaded tokenizer (every field starts zeroed). */
void tok_free(tokenizer *t)
{
    if (!t)
        return;
    inferd_buf_free(&t->arena);
    inferd_free(t->piece_off);
    inferd_free(t->piece_len);
    inferd_free(t->added_of);
    tok_vocab_free(&t->vocab);
    tok_merges_free(&t->merges);
    inferd_free(t->cont_prefix);
    inferd_free(t->end_suffix);
    tok_steps_free(&t->norm);
    tok_steps_free(&t->pre);
    tok_steps_free(&t->dec);
    tok_added_free(t);
    for (int i = 0; i < t->n_added; i++)
        inferd_free(t->added[i].content);
    inferd_free(t->added);
    for (int i = 0; i < t->n_tmpl; i++)
        inferd_free(t->tmpl[i].ids);
    inferd_free(t->tmpl);
    inferd_free(t->chat_template);
    for (int k = 0; k < TOK_CONFIG_TOKENS; k++)
        inferd_free(t->config_tokens[k]);
    inferd_free(t);
}

/* Accessors of the public API: read-only, any thread. The vocab size is
 * max id + 1 over the model vocab and added tokens (holes included), the
 * bound the engine checks ids against. */
int tok_vocab_size(const tokenizer *t) { return t->n_ids; }
size_t tok_max_token_bytes(const tokenizer *t) { return t->max_token_bytes; }
int32_t tok_bos_id(const tokenizer *t) { return t->bos_id; }
int32_t tok_eos_id(const tokenizer *t) { return t->eos_id; }
const char *tok_chat_template(const tokenizer *t) { return t->chat_template; }
bool tok_add_bos_token(const tokenizer *t) { return t->add_bos_token; }
bool tok_has_config(const tokenizer *t) { return t->has_config; }

/* The text of a tokenizer_config.json special token ("bos_token", ...), or
 * NULL when unset or the key is not one of the seven kept. */
const char *tok_config_token(const tokenizer *t, const char *key)
{
    for (int k = 0; k < TOK_CONFIG_TOKENS; k++)
        if (strcmp(key, k_config_token_keys[k]) == 0)
            return t->config_tokens[k];
    return NULL;
}

/* Special = an added token flagged special (what skip_special drops and
 * what chat content protection fences). */
bool tok_is_special(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_ids && t->added_of[id] >= 0 && t->added[t->added_of[id]].special;
}

/* The raw vocabulary string (byte-level or "▁" form, not decoded text);
 * an added token's content wins over a model piece with the same id.
 * Valid while t lives; NULL for ids out of range or holes. */
const char *tok_id_to_piece(const tokenizer *t, int32_t id)
{
    if (id < 0 || id >= t->n_ids)
        return NULL;
    if (t->added_of[id] >= 0)
        return t->added[t->added_of[id]].content;
    if (t->piece_len[id] < 0)
        return NULL;
    return t->arena.data + t->piece_off[id];
}

/* Added tokens first, newest first (the last definition wins, as in HF),
 * then the model vocab. Linear over added tokens: called at load and for
 * single lookups, never per input byte. */
int32_t tok_piece_to_id(const tokenizer *t, const char *piece)
{
    size_t n = strlen(piece);
    for (int i = t->n_added - 1; i >= 0; i--)
        if (t->added[i].len == n && memcmp(t->added[i].content, piece, n) == 0)
            return t->added[i].id;
    return tok_vocab_find(t, piece, n);
}
