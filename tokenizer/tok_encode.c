/* tokenizer/tok_encode.c: tok_encode, the encode pipeline in HF order:
 *
 *   1. cut added tokens with normalized=false out of the raw text;
 *   2. normalize each remaining piece on its own (so a Prepend normalizer
 *      prepends to every piece between special tokens, as HF does), then
 *      cut added tokens with normalized=true out of the normalized piece;
 *   3. pre-tokenize the pieces into words;
 *   4. BPE each word (added pieces map straight to their id);
 *   5. apply the post-processor template (BOS) when add_special.
 *
 * All scratch is local to the call, so one tokenizer serves many threads.
 * Protected spans (tok_encode_ex) act in steps 1 and 2: in step 1 they are
 * exact (raw offsets); in step 2 a normalizer may move offsets, so special
 * tokens are not parsed at all in a normalized piece that overlaps one.
 *
 * Trade-off: the HF order costs one normalize call per piece between added
 * tokens instead of one per text; inputs have few added tokens, and any
 * other order would change ids for tokenizers with a Prepend normalizer.
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"
#include "tokenizer/tok_internal.h"

typedef struct {
    tok_list segs, pieces, tmp;
    inferd_buf norm;
    tok_bpe_scratch *bpe;
/* The per-call scratch: segs (after step 1), pieces (after step 2, then
 * words after step 3, pre-tokenization swapping with tmp), the normalize
 * buffer, and the BPE heap and symbol arrays. Freed before returning. */
} enc_ctx;

static void enc_ctx_free(enc_ctx *c)
{
    tok_list_free(&c->segs);
    tok_list_free(&c->pieces);
    tok_list_free(&c->tmp);
    inferd_buf_free(&c->norm);
    tok_bpe_scratch_free(c->bpe);
}

/* Steps 1-3: text -> words and added-token pieces in c->pieces.
 * Protected spans apply only when special tokens are parsed at all (with
 * parse_special false nothing special is matched anyway). Without a
 * normalizer the raw piece is searched for normalized=true tokens directly
 * (the normalized form equals the raw one), skipping a copy. */
static inferd_status enc_split(const tokenizer *t, enc_ctx *c, const char *text, size_t len,
                               const tok_encode_opts *o)
{
    bool ps = o->parse_special;
    const tok_span *pr = o->protect;
    int npr = ps ? o->n_protect : 0;
    tok_added_split(t, &t->trie_raw, ps, pr, npr, text, len, 0, &c->segs);
    for (int i = 0; i < c->segs.n; i++) {
        const tok_piece *p = &c->segs.v[i];
        const char *s = tok_list_str(&c->segs, i);
        if (p->added >= 0) {
            tok_list_push(&c->pieces, s, p->len, p->added, p->orig);
            continue;
        }
        if (t->norm.n == 0) {
            tok_added_split(t, &t->trie_norm, ps, pr, npr, s, p->len, p->orig, &c->pieces);
            continue;
        }
        inferd_status st = tok_normalize(t, &t->norm, s, p->len, &c->norm);
        if (st != INFERD_OK)
            return st;
        bool piece_ps = ps && !(npr > 0 && tok_span_hit(pr, npr, (size_t)p->orig, (size_t)p->orig + p->len));
        tok_added_split(t, &t->trie_norm, piece_ps, NULL, 0, c->norm.data, c->norm.len, p->orig, &c->pieces);
    }
    if (t->pre.n > 0)
        return tok_pretokenize(t, &c->pieces, &c->tmp);
    return INFERD_OK;
}

static void push_id(int32_t **ids, int *n, int *cap, int32_t id)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *ids = inferd_realloc(*ids, (size_t)*cap * sizeof **ids);
    }
    (*ids)[(*n)++] = id;
}

/* The common case: no protected spans. */
inferd_status tok_encode(const tokenizer *t, const char *text, size_t len, bool add_special, bool parse_special,
                         int32_t **ids, int *n_ids)
{
    tok_encode_opts o = {.add_special = add_special, .parse_special = parse_special};
    return tok_encode_ex(t, text, len, &o, ids, n_ids);
}

/* Any thread. On success *ids is heap (never NULL, even for zero ids, so
 * callers may free it unconditionally); on error *ids is NULL. Invalid
 * UTF-8 is refused up front: every later stage runs PCRE2 with
 * NO_UTF_CHECK and decodes characters without re-validating. NOTE: the
 * length cap is loose. It bounds the id count (an int) only while each
 * input byte yields at most two ids; byte fallback on text a normalizer
 * expanded (' ' -> "▁", 3 bytes) could exceed that, so a 1 GiB input of
 * spaces could overflow. Request bodies are capped far lower. */
inferd_status tok_encode_ex(const tokenizer *t, const char *text, size_t len, const tok_encode_opts *o,
                            int32_t **ids, int *n_ids)
{
    if (!t || !o || !ids || !n_ids || (!text && len > 0) || (o->n_protect > 0 && !o->protect))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tok_encode: NULL argument");
    *ids = NULL;
    *n_ids = 0;
    if (len > (size_t)INT32_MAX / 2)
        return inferd_set_error(INFERD_ERR_TOO_LONG, "tok_encode: text of %zu bytes is too long", len);
    if (len > 0 && !util_utf8_valid(text, len))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tok_encode: text is not valid UTF-8");

    enc_ctx c = {0};
    c.bpe = tok_bpe_scratch_new();
    inferd_status st = enc_split(t, &c, len ? text : "", len, o);
    if (st != INFERD_OK) {
        enc_ctx_free(&c);
        return st;
    }
    int32_t *body = NULL;
    int n_body = 0, cap_body = 0;
    for (int i = 0; i < c.pieces.n; i++) {
        const tok_piece *p = &c.pieces.v[i];
        if (p->added >= 0)
            push_id(&body, &n_body, &cap_body, p->added);
        else
            tok_bpe_word(t, c.bpe, tok_list_str(&c.pieces, i), p->len, &body, &n_body, &cap_body);
    }
    enc_ctx_free(&c);

    if (!o->add_special || !t->tmpl) {
        if (!body)
            body = inferd_malloc(sizeof *body);
        *ids = body;
        *n_ids = n_body;
        return INFERD_OK;
    }
    /* The single template: its special ids around the sequence ($A). The
     * "+ 8" covers BOS/EOS items without a regrowth. */
    int32_t *out = NULL;
    int n_out = 0, cap_out = n_body + 8;
    out = inferd_malloc((size_t)cap_out * sizeof *out);
    for (int k = 0; k < t->n_tmpl; k++) {
        const tok_tmpl_item *it = &t->tmpl[k];
        if (it->is_sequence) {
            for (int i = 0; i < n_body; i++)
                push_id(&out, &n_out, &cap_out, body[i]);
        } else {
            for (int i = 0; i < it->n_ids; i++)
                push_id(&out, &n_out, &cap_out, it->ids[i]);
        }
    }
    inferd_free(body);
    *ids = out;
    *n_ids = n_out;
    return INFERD_OK;
}
