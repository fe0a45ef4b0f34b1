/* tokenizer/tok_decode.c: decoding ids to text, and the incremental detokenizer
 * used for streaming.
 *
 * Full decode follows HF tokenizers: ids become token strings (added-token
 * content first, then the model vocab; special tokens dropped when
 * skip_special), and the decoder chain rewrites that list of strings:
 * Replace, ByteFallback (runs of "<0xNN>" tokens become bytes, or one U+FFFD
 * per byte when they are not valid UTF-8), Fuse, Strip, ByteLevel (GPT-2
 * alphabet back to bytes, then lossy UTF-8), Metaspace. Without a decoder the
 * tokens are joined with spaces.
 *
 * Streaming uses the prefix/read offset technique of HF's DecodeStream and
 * vLLM's detokenize_incrementally: decode a short window of recent ids
 * twice, without and with the new ids, and emit the difference once the
 * longer text no longer ends in U+FFFD (an incomplete character). Because
 * both decodes start at the same id, context-dependent decoders (Strip of
 * the first space, Metaspace's first token) treat them alike, so the deltas
 * concatenate to the full decode. The window start only advances to points
 * where the text was complete, and to ids whose own text is not empty (a
 * decoder that strips more than one leading space could otherwise reach
 * past the window's first text into new text).
 *
 * Threads: tok_decode is read-only on the tokenizer and safe from any
 * thread. A tok_stream belongs to one request and is used by one thread at
 * a time (the engine thread); it is not locked. Not done here: stop-string
 * matching (the engine's output stage) and the skipping of special tokens'
 * text at the API level (callers choose skip_special).
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"
#include "tokenizer/tok_internal.h"

/* Text of a token for decoding, or NULL when the id has none. */
static const char *id_text(const tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_ids)
        return NULL;
    if (t->added_of[id] >= 0) {
        const tok_added *a = &t->added[t->added_of[id]];
        *len = a->len;
        return a->content;
    }
    if (t->piece_len[id] < 0)
        return NULL;
    *len = (size_t)t->piece_len[id];
    return t->arena.data + t->piece_off[id];
}

/* Literal replace in each token string (non-overlapping, left to right).
 * A token stays one piece, so later steps still see token boundaries. */
static void dec_replace(const tok_step *st, const tok_list *in, tok_list *out)
{
    for (int i = 0; i < in->n; i++) {
        const char *s = tok_list_str(in, i);
        size_t n = in->v[i].len, pos = 0;
        tok_list_begin(out, -1, 0);
        while (st->pattern_len > 0 && pos < n) {
            const char *hit = memmem(s + pos, n - pos, st->pattern, st->pattern_len);
            if (!hit)
                break;
            inferd_buf_append(&out->buf, s + pos, (size_t)(hit - (s + pos)));
            inferd_buf_append(&out->buf, st->content, st->content_len);
            pos = (size_t)(hit - s) + st->pattern_len;
        }
        inferd_buf_append(&out->buf, s + pos, n - pos);
        tok_list_end(out);
    }
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Byte of a "<0xNN>" token, or -1. Hex digits of either case are
 * accepted; vocabularies use upper case. */
static int byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    int h = hexval(s[3]), l = hexval(s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

/* A run of byte tokens: one piece of its bytes when they form valid
 * UTF-8, else one U+FFFD piece per byte (HF's ByteFallback, which does not
 * salvage the valid part of a mixed run). */
static void flush_bytes(inferd_buf *bytes, tok_list *out)
{
    if (bytes->len == 0)
        return;
    if (util_utf8_valid(bytes->data, bytes->len)) {
        tok_list_push(out, bytes->data, bytes->len, -1, 0);
    } else {
        for (size_t k = 0; k < bytes->len; k++)
            tok_list_push(out, "\xEF\xBF\xBD", 3, -1, 0);
    }
    bytes->len = 0;
}

static void dec_bytefallback(const tok_list *in, tok_list *out)
{
    inferd_buf bytes = {0};
    for (int i = 0; i < in->n; i++) {
        const char *s = tok_list_str(in, i);
        int b = byte_token(s, in->v[i].len);
        if (b >= 0) {
            inferd_buf_append_char(&bytes, (char)b);
            continue;
        }
        flush_bytes(&bytes, out);
        tok_list_push(out, s, in->v[i].len, -1, 0);
    }
    flush_bytes(&bytes, out);
    inferd_buf_free(&bytes);
}

/* All pieces into one (so Strip after it strips the whole text once). */
static void dec_fuse(const tok_list *in, tok_list *out)
{
    tok_list_begin(out, -1, 0);
    for (int i = 0; i < in->n; i++)
        inferd_buf_append(&out->buf, tok_list_str(in, i), in->v[i].len);
    tok_list_end(out);
}

/* Up to start copies of content removed from each piece's front and stop
 * copies from its back (Llama-2 uses start 1 to drop the leading space). */
static void dec_strip(const tok_step *st, const tok_list *in, tok_list *out)
{
    const char *c = st->content;
    size_t cl = st->content_len;
    for (int i = 0; i < in->n; i++) {
        const char *s = tok_list_str(in, i);
        size_t b = 0, e = in->v[i].len;
        for (int k = 0; k < st->start && cl > 0 && e - b >= cl && memcmp(s + b, c, cl) == 0; k++)
            b += cl;
        for (int k = 0; k < st->stop && cl > 0 && e - b >= cl && memcmp(s + e - cl, c, cl) == 0; k++)
            e -= cl;
        tok_list_push(out, s + b, e - b, -1, 0);
    }
}

/* GPT-2 alphabet back to raw bytes, all pieces joined, then one lossy
 * UTF-8 pass over the whole, so a character split across tokens decodes
 * whole. A piece with a character outside the alphabet (an added token's
 * plain text) is copied as is, as HF does. */
static void dec_bytelevel(const tok_list *in, tok_list *out)
{
    inferd_buf bytes = {0};
    for (int i = 0; i < in->n; i++) {
        const char *s = tok_list_str(in, i);
        size_t n = in->v[i].len, start = bytes.len, p = 0;
        bool all = true;
        while (p < n) {
            int adv, byte = tok_bytelevel_byte(tok_utf8_decode(s + p, n - p, &adv));
            if (byte < 0) {
                all = false;
                break;
            }
            inferd_buf_append_char(&bytes, (char)byte);
            p += (size_t)adv;
        }
        if (!all) {
            bytes.len = start;
            inferd_buf_append(&bytes, s, n);
        }
    }
    tok_list_begin(out, -1, 0);
    tok_utf8_lossy(&out->buf, (const unsigned char *)(bytes.data ? bytes.data : ""), bytes.len);
    tok_list_end(out);
    inferd_buf_free(&bytes);
}

/* "▁" becomes a space, except in the first token when a prefix was
 * prepended at encode (HF drops every replacement in token 0 then, not
 * just the leading one). */
static void dec_metaspace(const tok_step *st, const tok_list *in, tok_list *out)
{
    const char *r = st->content;
    size_t rl = st->content_len;
    for (int i = 0; i < in->n; i++) {
        const char *s = tok_list_str(in, i);
        size_t n = in->v[i].len, p = 0;
        bool drop = i == 0 && st->prepend != TOK_PREPEND_NEVER;
        tok_list_begin(out, -1, 0);
        while (p < n) {
            if (rl > 0 && n - p >= rl && memcmp(s + p, r, rl) == 0) {
                if (!drop)
                    inferd_buf_append_char(&out->buf, ' ');
                p += rl;
            } else {
                inferd_buf_append_char(&out->buf, s[p]);
                p++;
            }
        }
        tok_list_end(out);
    }
}

/* Make out->data[start..len) valid UTF-8, invalid runs becoming U+FFFD.
 * NOTE: a decoder chain can cut a character (Strip counts bytes, a Replace
 * may split one, a vocab may hold partial byte sequences); HF's decoders
 * work on Rust Strings and always return valid text, so this does too. */
static void make_valid_utf8(inferd_buf *out, size_t start)
{
    if (out->len == start || util_utf8_valid(out->data + start, out->len - start))
        return;
    inferd_buf raw = {0};
    inferd_buf_append(&raw, out->data + start, out->len - start);
    out->len = start;
    tok_utf8_lossy(out, (const unsigned char *)raw.data, raw.len);
    inferd_buf_free(&raw);
}

/* Appends to out (which need not be empty). Every id is checked first, so
 * an error leaves out unchanged; an id with no text (a hole in the vocab)
 * is an error too, not a silent skip. The steps ping-pong between two
 * lists like the encode pipeline. */
inferd_status tok_decode_into(const tokenizer *t, const int32_t *ids, int n, bool skip_special, inferd_buf *out)
{
    tok_list a = {0}, b = {0};
    for (int i = 0; i < n; i++) {
        size_t len;
        const char *s = id_text(t, ids[i], &len);
        if (!s) {
            tok_list_free(&a);
            return inferd_set_error(INFERD_ERR_INVALID_ARG, "token id %d is not in the vocabulary (size %d)",
                                    (int)ids[i], t->n_ids);
        }
        if (skip_special && tok_is_special(t, ids[i]))
            continue;
        tok_list_push(&a, s, len, -1, 0);
    }
    size_t start = out->len;
    if (!t->has_decoder) {
        for (int i = 0; i < a.n; i++) {
            if (i)
                inferd_buf_append_char(out, ' ');
            inferd_buf_append(out, tok_list_str(&a, i), a.v[i].len);
        }
        tok_list_free(&a);
        make_valid_utf8(out, start);
        return INFERD_OK;
    }
    for (int k = 0; k < t->dec.n; k++) {
        const tok_step *st = &t->dec.v[k];
        tok_list_clear(&b);
        switch ((tok_dec_kind)st->kind) {
        case TOK_DEC_REPLACE: dec_replace(st, &a, &b); break;
        case TOK_DEC_BYTEFALLBACK: dec_bytefallback(&a, &b); break;
        case TOK_DEC_FUSE: dec_fuse(&a, &b); break;
        case TOK_DEC_STRIP: dec_strip(st, &a, &b); break;
        case TOK_DEC_BYTELEVEL: dec_bytelevel(&a, &b); break;
        case TOK_DEC_METASPACE: dec_metaspace(st, &a, &b); break;
        }
        tok_list swap = a;
        a = b;
        b = swap;
    }
    for (int i = 0; i < a.n; i++)
        inferd_buf_append(out, tok_list_str(&a, i), a.v[i].len);
    make_valid_utf8(out, start);
    tok_list_free(&a);
    tok_list_free(&b);
    return INFERD_OK;
}

/* *text is heap, NUL-terminated even when empty (the reserve guarantees a
 * byte for the NUL), and may contain U+FFFD for invalid byte runs. */
inferd_status tok_decode(const tokenizer *t, const int32_t *ids, int n, bool skip_special, char **text,
                         size_t *len)
{
    if (!t || !text || (!ids && n > 0) || n < 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tok_decode: bad argument");
    inferd_buf out = {0};
    inferd_buf_reserve(&out, 0);
    out.data[0] = '\0';
    inferd_status st = tok_decode_into(t, ids, n, skip_special, &out);
    if (st != INFERD_OK) {
        inferd_buf_free(&out);
        return st;
    }
    *text = out.data;
    if (len)
        *len = out.len;
    return INFERD_OK;
}

/* ---- incremental detokenizer ------------------------------------------- */

/* Ids kept before the window start are dropped once this many pile up.
 * Compaction keeps the id array bounded for long generations without a
 * memmove per token: only after 1024 final ids have piled up. */
#define TOK_STREAM_COMPACT 1024
/* Prompt ids kept as decode context by tok_stream_prefill (vLLM uses 5). */
#define TOK_STREAM_CONTEXT 5
/* How much further back prefill looks for a clean window start. */
#define TOK_STREAM_SCAN 64

struct tok_stream {
    const tokenizer *t;
    bool skip_special;
    int32_t *ids;
    int n, cap;
    int prefix; /* window start: text before it is final */
    int read;   /* ids before it have been emitted */
    inferd_buf a, b;
};

/* t must outlive the stream (borrowed). */
tok_stream *tok_stream_new(const tokenizer *t, bool skip_special)
{
    INFERD_CHECK(t != NULL);
    tok_stream *s = inferd_calloc(1, sizeof *s);
    s->t = t;
    s->skip_special = skip_special;
    return s;
}

void tok_stream_free(tok_stream *s)
{
    if (!s)
        return;
    inferd_free(s->ids);
    inferd_buf_free(&s->a);
    inferd_buf_free(&s->b);
    inferd_free(s);
}

static void stream_append(tok_stream *s, int32_t id)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->ids = inferd_realloc(s->ids, (size_t)s->cap * sizeof *s->ids);
    }
    s->ids[s->n++] = id;
}

static void stream_compact(tok_stream *s)
{
    if (s->prefix < TOK_STREAM_COMPACT)
        return;
    int drop = s->prefix;
    memmove(s->ids, s->ids + drop, (size_t)(s->n - drop) * sizeof *s->ids);
    s->n -= drop;
    s->prefix -= drop;
    s->read -= drop;
}

/* Whether ids[from..to) decode without U+FFFD (a clean window start).
 * Any U+FFFD counts, including one the text really contains: then the
 * window merely starts earlier, which is harmless. */
static bool window_clean(tok_stream *s, int from, int to)
{
    s->a.len = 0;
    if (tok_decode_into(s->t, s->ids + from, to - from, s->skip_special, &s->a) != INFERD_OK)
        return false;
    return memmem(s->a.data ? s->a.data : "", s->a.len, "\xEF\xBF\xBD", 3) == NULL;
}

/* The prompt: recorded as already emitted (read = n), with a short
 * context window so the first generated token decodes as it would after
 * the prompt (a Metaspace or Strip decoder treats a window's first token
 * specially). The scan goes back at most TOK_STREAM_SCAN ids. */
void tok_stream_prefill(tok_stream *s, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        stream_append(s, ids[i]);
    s->read = s->n;
    /* keep a few ids of context, starting on a character boundary: a window
     * that starts inside a byte-fallback run would decode as U+FFFD */
    int start = s->n > TOK_STREAM_CONTEXT ? s->n - TOK_STREAM_CONTEXT : 0;
    s->prefix = start;
    for (int j = start; j >= 0 && j >= start - TOK_STREAM_SCAN; j--) {
        if (window_clean(s, j, s->read)) {
            s->prefix = j;
            break;
        }
    }
    stream_compact(s);
}

/* A trailing U+FFFD: the last token may be the first bytes of a character
 * whose rest is still to come. */
static bool ends_incomplete(const inferd_buf *b)
{
    return b->len >= 3 && memcmp(b->data + b->len - 3, "\xEF\xBF\xBD", 3) == 0;
}

/* Emit window text beyond the prefix text; force emits even when the
 * text ends in U+FFFD.
 * Decodes [prefix, read) and [prefix, n); the delta is what the longer text
 * adds. When nothing is emitted (text incomplete, or a token with no text)
 * the ids wait and the next push retries with them. *delta is always heap
 * (possibly ""), the caller's to free. */
static inferd_status stream_emit(tok_stream *s, bool force, char **delta, size_t *delta_len)
{
    s->a.len = 0;
    s->b.len = 0;
    if (s->n == 0) { /* NOTE: no id yet (or only refused ones): s->ids may be NULL */
        *delta = inferd_calloc(1, 1);
        if (delta_len)
            *delta_len = 0;
        return INFERD_OK;
    }
    inferd_status st = tok_decode_into(s->t, s->ids + s->prefix, s->read - s->prefix, s->skip_special, &s->a);
    if (st == INFERD_OK)
        st = tok_decode_into(s->t, s->ids + s->prefix, s->n - s->prefix, s->skip_special, &s->b);
    if (st != INFERD_OK)
        return st;
    size_t cut = s->a.len;
    bool emit = s->b.len > s->a.len && (force || !ends_incomplete(&s->b));
    /* NOTE: a.len may be 0 with a.data still NULL: memcmp must not see it */
    if (emit && s->a.len > 0 && memcmp(s->a.data, s->b.data, s->a.len) != 0) {
        /* not a byte prefix (should not happen): cut at a char boundary */
        while (cut < s->b.len && ((unsigned char)s->b.data[cut] & 0xC0) == 0x80)
            cut++;
    }
    size_t dl = emit ? s->b.len - cut : 0;
    *delta = inferd_malloc(dl + 1);
    if (dl)
        memcpy(*delta, s->b.data + cut, dl);
    (*delta)[dl] = '\0';
    if (delta_len)
        *delta_len = dl;
    if (emit) {
        /* The next window starts at the ids just emitted only when their
         * own text is not empty: a window whose first text a context-
         * dependent decoder removes whole (a lone space under Strip with
         * start 2) could let it remove the next token's text too, which
         * the full decode keeps (a fuzz finding). Past TOK_STREAM_SCAN ids
         * the window moves anyway, so a run of empty tokens (skipped
         * specials) cannot make every push decode a growing window. */
        s->a.len = 0;
        if (s->n - s->prefix > TOK_STREAM_SCAN ||
            (tok_decode_into(s->t, s->ids + s->read, s->n - s->read, s->skip_special, &s->a) == INFERD_OK &&
             s->a.len > 0))
            s->prefix = s->read;
        s->read = s->n;
        stream_compact(s);
    }
    return INFERD_OK;
}

/* One generated id. An id outside the vocabulary is refused before it is
 * recorded, so the stream stays usable. */
inferd_status tok_stream_push(tok_stream *s, int32_t id, char **delta, size_t *delta_len)
{
    if (!s || !delta)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tok_stream_push: NULL argument");
    size_t len;
    if (!id_text(s->t, id, &len))
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "token id %d is not in the vocabulary (size %d)", (int)id,
                                s->t->n_ids);
    stream_append(s, id);
    return stream_emit(s, false, delta, delta_len);
}

/* At finish: emit whatever is pending even if it ends in U+FFFD (a
 * character cut by max_tokens), so the stream's text equals tok_decode's. */
inferd_status tok_stream_flush(tok_stream *s, char **delta, size_t *delta_len)
{
    if (!s || !delta)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "tok_stream_flush: NULL argument");
    return stream_emit(s, true, delta, delta_len);
}
