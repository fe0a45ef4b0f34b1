/* tokenizer/tok_pretok.c: normalizers and pre-tokenizers, with HF tokenizers
 * semantics.
 *
 * Normalizers (Prepend, Replace with a literal or a regex, Strip, NFC/NFD
 * through tok_nfc.c) map one
 * string to another; a Sequence is flattened at load time into a step list.
 * Pre-tokenizers (Split, ByteLevel, Metaspace) map a list of pieces to a list
 * of words: each step rewrites and splits every piece that is not an added
 * token. Splitting follows NormalizedString::split: the pattern's matches
 * and the gaps between them are turned into pieces according to the
 * delimiter behavior (Removed, Isolated, MergedWithPrevious,
 * MergedWithNext, Contiguous), and empty pieces are dropped.
 *
 * Design choice: every step is a full pass producing a new buffer or list
 * (ping-pong between two), not a streaming pipeline: the steps' semantics
 * are defined on whole strings in HF, and whole-string passes make each one
 * a direct transcription. The cost is a copy of the input per step, linear
 * and small next to BPE. Offsets (tok_piece.orig) track only what
 * Metaspace's "first" scheme needs, not HF's full alignment maps.
 * Thread-safe: all state is per call (match data, scratch buffers).
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tok_nfc.h"

/* GPT-2's pre-tokenizer regex, used by ByteLevel with use_regex.
 * NOTE: HF's pattern is \s+(?!\S)|\s+ in the regex crate's dialect, which
 * has the same meaning in PCRE2 with UCP (\p{L}, \p{N}, Unicode \s); the
 * lookahead makes a run of spaces leave its last space to the next word. */
const char tok_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* A zeroed step appended to s (load time). The pointer is valid until the
 * next push (the array may move). */
tok_step *tok_steps_push(tok_steps *s)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 4;
        s->v = inferd_realloc(s->v, (size_t)s->cap * sizeof *s->v);
    }
    tok_step *st = &s->v[s->n++];
    memset(st, 0, sizeof *st);
    return st;
}

/* Frees every step's strings and regex; s is left empty and reusable. */
void tok_steps_free(tok_steps *s)
{
    for (int i = 0; i < s->n; i++) {
        inferd_free(s->v[i].pattern);
        inferd_free(s->v[i].content);
        tok_regex_free(&s->v[i].re);
    }
    inferd_free(s->v);
    s->v = NULL;
    s->n = s->cap = 0;
}

/* A match or a gap between matches. */
typedef struct {
    size_t s, e;
    bool m;
} span;

typedef struct {
    span *v;
    int n, cap;
} span_vec;

static void span_push(span_vec *sv, size_t s, size_t e, bool m)
{
    if (sv->n == sv->cap) {
        sv->cap = sv->cap ? sv->cap * 2 : 32;
        sv->v = inferd_realloc(sv->v, (size_t)sv->cap * sizeof *sv->v);
    }
    sv->v[sv->n++] = (span){s, e, m};
}

/* Matches of a literal or regex pattern in s[0..n), with the gaps between
 * them, in order (HF Pattern::find_matches).
 * Returns 0, or -1 on a matcher error (message set by tok_regex_find).
 * The spans cover s exactly, in order. An empty match advances by one
 * whole character (not one byte), as the regex crate's iterator does, so
 * the scan neither loops nor lands inside a character. An empty input
 * yields one empty gap, so behaviors see a piece to drop. */
static int find_matches(const tok_step *st, const tok_regex *re, pcre2_match_data *md, const char *s, size_t n,
                        span_vec *out)
{
    out->n = 0;
    if (n == 0) {
        span_push(out, 0, 0, false);
        return 0;
    }
    size_t prev = 0, pos = 0;
    while (pos <= n) {
        size_t ms, me;
        if (re) {
            int rc = tok_regex_find(re, md, s, n, pos, &ms, &me);
            if (rc < 0)
                return -1;
            if (rc == 0)
                break;
        } else {
            const char *hit = st->pattern_len ? memmem(s + pos, n - pos, st->pattern, st->pattern_len) : NULL;
            if (!hit)
                break;
            ms = (size_t)(hit - s);
            me = ms + st->pattern_len;
        }
        if (prev != ms)
            span_push(out, prev, ms, false);
        span_push(out, ms, me, true);
        prev = me;
        if (me == ms) {
            if (ms >= n)
                break;
            pos = ms + (size_t)tok_utf8_len((unsigned char)s[ms]);
        } else {
            pos = me;
        }
    }
    if (prev != n)
        span_push(out, prev, n, false);
    return 0;
}

/* Turn matches into kept ranges per the delimiter behavior; in place.
 * HF SplitDelimiterBehavior on the span list; results are all marked as
 * gaps (m false) since after this step a span is just a piece. Isolated
 * keeps matches and gaps as separate pieces; Removed drops matches;
 * MergedWithPrevious appends each match to the piece before it;
 * MergedWithNext prepends it to the piece after; Contiguous joins
 * consecutive matches into one piece. */
static void apply_behavior(tok_split_behavior b, span_vec *sv)
{
    int k = 0;
    bool prev_match = false;
    switch (b) {
    case TOK_SPLIT_ISOLATED:
        return;
    case TOK_SPLIT_REMOVED:
        for (int i = 0; i < sv->n; i++)
            if (!sv->v[i].m)
                sv->v[k++] = sv->v[i];
        break;
    case TOK_SPLIT_CONTIGUOUS:
    case TOK_SPLIT_MERGED_PREV:
        for (int i = 0; i < sv->n; i++) {
            span c = sv->v[i];
            bool extend = b == TOK_SPLIT_CONTIGUOUS ? c.m == prev_match : (c.m && !prev_match);
            if (extend && k > 0)
                sv->v[k - 1].e = c.e;
            else
                sv->v[k++] = (span){c.s, c.e, false};
            prev_match = c.m;
        }
        break;
    case TOK_SPLIT_MERGED_NEXT: {
        /* walk backwards; a delimiter followed by a gap joins that gap */
        int w = sv->n;
        for (int i = sv->n - 1; i >= 0; i--) {
            span c = sv->v[i];
            if (c.m && !prev_match && w < sv->n)
                sv->v[w].s = c.s;
            else
                sv->v[--w] = (span){c.s, c.e, false};
            prev_match = c.m;
        }
        for (int i = w; i < sv->n; i++)
            sv->v[k++] = sv->v[i];
        break;
    }
    }
    sv->n = k;
}

/* Normalizer Replace: every match becomes the content, gaps are copied. */
static void replace_all(const tok_step *st, const char *s, size_t n, const span_vec *sv, inferd_buf *out)
{
    for (int i = 0; i < sv->n; i++) {
        if (sv->v[i].m)
            inferd_buf_append(out, st->content, st->content_len);
        else
            inferd_buf_append(out, s + sv->v[i].s, sv->v[i].e - sv->v[i].s);
    }
    (void)n;
}

/* Unicode whitespace (Rust's char::is_whitespace), one code point at a
 * time; the right side steps back over continuation bytes to the lead. */
static void strip_ws(const char *s, size_t n, bool left, bool right, inferd_buf *out)
{
    size_t b = 0, e = n;
    while (left && b < e) {
        int adv;
        uint32_t cp = tok_utf8_decode(s + b, e - b, &adv);
        if (!tok_is_whitespace(cp))
            break;
        b += (size_t)adv;
    }
    while (right && e > b) {
        size_t p = e - 1;
        while (p > b && ((unsigned char)s[p] & 0xC0) == 0x80)
            p--;
        int adv;
        if (!tok_is_whitespace(tok_utf8_decode(s + p, e - p, &adv)))
            break;
        e = p;
    }
    inferd_buf_append(out, s + b, e - b);
}

/* Runs the steps over a copy, swapping two buffers between steps. out is
 * overwritten (not appended to) and left empty on error. Prepend does
 * nothing to an empty string, as in HF. s must be valid UTF-8 (the regex
 * runs with NO_UTF_CHECK). */
inferd_status tok_normalize(const tokenizer *t, const tok_steps *steps, const char *s, size_t n, inferd_buf *out)
{
    (void)t;
    inferd_buf a = {0}, b = {0};
    span_vec sv = {0};
    pcre2_match_data *md = NULL;
    inferd_status st = INFERD_OK;
    inferd_buf_append(&a, s, n);
    for (int i = 0; i < steps->n && st == INFERD_OK; i++) {
        const tok_step *step = &steps->v[i];
        b.len = 0;
        inferd_buf_reserve(&b, a.len);
        switch ((tok_norm_kind)step->kind) {
        case TOK_NORM_PREPEND:
            if (a.len > 0)
                inferd_buf_append(&b, step->content, step->content_len);
            inferd_buf_append(&b, a.data, a.len);
            break;
        case TOK_NORM_REPLACE:
            if (step->re.code && !md)
                md = pcre2_match_data_create(1, NULL);
            if (find_matches(step, step->re.code ? &step->re : NULL, md, a.data, a.len, &sv) < 0) {
                st = INFERD_ERR_INTERNAL;
                break;
            }
            replace_all(step, a.data, a.len, &sv, &b);
            break;
        case TOK_NORM_STRIP:
            strip_ws(a.data, a.len, step->start != 0, step->stop != 0, &b);
            break;
        case TOK_NORM_NFC:
        case TOK_NORM_NFD:
            tok_unicode_normalize(a.data, a.len, step->kind == TOK_NORM_NFC, &b);
            break;
        }
        inferd_buf t2 = a;
        a = b;
        b = t2;
    }
    out->len = 0;
    if (st == INFERD_OK)
        inferd_buf_append(out, a.data, a.len);
    inferd_buf_free(&a);
    inferd_buf_free(&b);
    inferd_free(sv.v);
    if (md)
        pcre2_match_data_free(md);
    return st;
}

/* Push the pieces of s[0..n) kept by sv (non-empty only).
 * orig of each piece = the input piece's orig + its offset in s. */
static void push_spans(tok_list *out, const char *s, const span_vec *sv, int64_t orig)
{
    for (int i = 0; i < sv->n; i++)
        if (sv->v[i].e > sv->v[i].s)
            tok_list_push(out, s + sv->v[i].s, sv->v[i].e - sv->v[i].s, -1, orig + (int64_t)sv->v[i].s);
}

/* Each byte becomes its GPT-2 alphabet character (1 or 2 UTF-8 bytes),
 * written straight into the list's buffer as one piece. */
static void bytelevel_map(tok_list *out, const char *s, size_t n, int64_t orig)
{
    if (n == 0)
        return;
    tok_list_begin(out, -1, orig);
    inferd_buf_reserve(&out->buf, 2 * n);
    for (size_t i = 0; i < n; i++) {
        int len;
        const char *c = tok_bytelevel_char((uint8_t)s[i], &len);
        inferd_buf_append(&out->buf, c, (size_t)len);
    }
    tok_list_end(out);
}

typedef struct {
    span_vec sv;
    inferd_buf tmp;
    pcre2_match_data *md;
/* Scratch shared by the steps of one tok_pretokenize call. */
} pre_ctx;

/* invert: the pattern describes the pieces, not the delimiters (flip
 * match and gap before the behavior applies). */
static inferd_status pre_split(const tok_step *st, pre_ctx *c, const char *s, size_t n, int64_t orig,
                               tok_list *out)
{
    if (find_matches(st, st->re.code ? &st->re : NULL, c->md, s, n, &c->sv) < 0)
        return INFERD_ERR_INTERNAL;
    if (st->invert)
        for (int i = 0; i < c->sv.n; i++)
            c->sv.v[i].m = !c->sv.v[i].m;
    apply_behavior(st->behavior, &c->sv);
    push_spans(out, s, &c->sv, orig);
    return INFERD_OK;
}

/* add_prefix_space makes "Hello" encode like " Hello" (the GPT-2 habit).
 * The regex split runs on the raw bytes and only then is each word mapped
 * to the byte alphabet, as HF does. */
static inferd_status pre_bytelevel(const tok_step *st, pre_ctx *c, const char *s, size_t n, int64_t orig,
                                   tok_list *out)
{
    if (st->add_prefix_space && (n == 0 || s[0] != ' ')) {
        c->tmp.len = 0;
        inferd_buf_append_char(&c->tmp, ' ');
        inferd_buf_append(&c->tmp, s, n);
        s = c->tmp.data;
        n = c->tmp.len;
    }
    if (!st->use_regex) {
        bytelevel_map(out, s, n, orig);
        return INFERD_OK;
    }
    if (find_matches(st, &st->re, c->md, s, n, &c->sv) < 0)
        return INFERD_ERR_INTERNAL;
    for (int i = 0; i < c->sv.n; i++)
        bytelevel_map(out, s + c->sv.v[i].s, c->sv.v[i].e - c->sv.v[i].s, orig + (int64_t)c->sv.v[i].s);
    return INFERD_OK;
}

/* Spaces become the replacement ("▁"); the replacement is prepended per
 * the scheme (always, or only to the piece at input offset 0 for "first",
 * unless it already starts with one); then, with split, each "▁" starts a
 * new word (MergedWithNext). NOTE: the literal find cannot fail, hence its
 * result is not checked. */
static void pre_metaspace(const tok_step *st, pre_ctx *c, const char *s, size_t n, int64_t orig, tok_list *out)
{
    const char *rep = st->content;
    size_t rl = st->content_len;
    inferd_buf *b = &c->tmp;
    b->len = 0;
    inferd_buf_reserve(b, n + rl);
    bool starts = n > 0 && (s[0] == ' ' || (n >= rl && memcmp(s, rep, rl) == 0));
    bool prepend = st->prepend == TOK_PREPEND_ALWAYS || (st->prepend == TOK_PREPEND_FIRST && orig == 0);
    if (prepend && !starts)
        inferd_buf_append(b, rep, rl);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ')
            inferd_buf_append(b, rep, rl);
        else
            inferd_buf_append_char(b, s[i]);
    }
    if (!st->split) {
        if (b->len)
            tok_list_push(out, b->data, b->len, -1, orig);
        return;
    }
    tok_step lit = {.pattern = (char *)rep, .pattern_len = rl};
    find_matches(&lit, NULL, NULL, b->data, b->len, &c->sv);
    apply_behavior(TOK_SPLIT_MERGED_NEXT, &c->sv);
    push_spans(out, b->data, &c->sv, orig);
}

/* Each step maps every piece of io into tmp, then the lists swap; added
 * tokens pass through untouched. On return io holds the words (the
 * caller's tmp holds garbage it may reuse). */
inferd_status tok_pretokenize(const tokenizer *t, tok_list *io, tok_list *tmp)
{
    pre_ctx c = {0};
    inferd_status st = INFERD_OK;
    c.md = pcre2_match_data_create(1, NULL);
    for (int k = 0; k < t->pre.n && st == INFERD_OK; k++) {
        const tok_step *step = &t->pre.v[k];
        tok_list_clear(tmp);
        for (int i = 0; i < io->n && st == INFERD_OK; i++) {
            const tok_piece *p = &io->v[i];
            const char *s = tok_list_str(io, i);
            if (p->added >= 0) {
                tok_list_push(tmp, s, p->len, p->added, p->orig);
                continue;
            }
            switch ((tok_pre_kind)step->kind) {
            case TOK_PRE_SPLIT: st = pre_split(step, &c, s, p->len, p->orig, tmp); break;
            case TOK_PRE_BYTELEVEL: st = pre_bytelevel(step, &c, s, p->len, p->orig, tmp); break;
            case TOK_PRE_METASPACE: pre_metaspace(step, &c, s, p->len, p->orig, tmp); break;
            }
        }
        tok_list swap = *io;
        *io = *tmp;
        *tmp = swap;
    }
    inferd_free(c.sv.v);
    inferd_buf_free(&c.tmp);
    pcre2_match_data_free(c.md);
    return st;
}
