/* tokenizer/tok_added.c: added tokens (special or not), matched in the input
 * before normalization and BPE, like HF's AddedVocabulary.
 *
 * Tokens whose `normalized` flag is false are matched in the raw input;
 * tokens with `normalized` true are matched in each normalized piece, using
 * the normalized form of their content. Matching is leftmost-longest over a
 * byte trie (the Aho-Corasick MatchKind HF uses), scanning left to right
 * without overlaps. A match honours `single_word` (no word character
 * touching it), `lstrip` / `rstrip` (swallow the whitespace around it). With
 * parse_special false, special tokens are found but left in the text, which
 * is what HF's `split_special_tokens` does. Protected spans (tok_span)
 * refuse special matches that overlap them; the scan then resumes one byte
 * after the refused match's start, so a special token that begins inside
 * the refused text but outside the span is still found.
 *
 * A third trie holds the raw text of every special token, for
 * tok_find_special / tok_special_edges (finding special-token text in
 * client content before it is put into a chat prompt).
 *
 * Design choice: a plain byte trie with sibling lists, tried at every input
 * position, instead of a real Aho-Corasick automaton: a few hundred added
 * tokens make the trie small, and the cost, O(input x longest token) with
 * a fan-out scan per byte, is far below BPE's. Tries are built once at
 * load; every function here is read-only on the tokenizer and thread-safe
 * (match data is allocated per call).
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "tokenizer/tok_internal.h"

/* A new node (grown by doubling; the four arrays move together). Node 0 is
 * the root, created by the first insert. */
static int32_t trie_node(tok_trie *tr, uint8_t byte)
{
    if (tr->n == tr->cap) {
        tr->cap = tr->cap ? tr->cap * 2 : 64;
        tr->first_child = inferd_realloc(tr->first_child, (size_t)tr->cap * sizeof *tr->first_child);
        tr->next_sib = inferd_realloc(tr->next_sib, (size_t)tr->cap * sizeof *tr->next_sib);
        tr->byte = inferd_realloc(tr->byte, (size_t)tr->cap * sizeof *tr->byte);
        tr->term = inferd_realloc(tr->term, (size_t)tr->cap * sizeof *tr->term);
    }
    int32_t i = tr->n++;
    tr->first_child[i] = -1;
    tr->next_sib[i] = -1;
    tr->byte[i] = byte;
    tr->term[i] = -1;
    return i;
}

/* Linear over the siblings: fan-out is small except at the root. */
static int32_t trie_child(const tok_trie *tr, int32_t node, uint8_t byte)
{
    for (int32_t c = tr->first_child[node]; c >= 0; c = tr->next_sib[c])
        if (tr->byte[c] == byte)
            return c;
    return -1;
}

/* A content inserted twice keeps the later index (HF: the last definition
 * wins). Empty contents are never inserted (they would match everywhere). */
static void trie_insert(tok_trie *tr, const char *s, size_t n, int32_t idx)
{
    if (tr->n == 0)
        trie_node(tr, 0);
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t c = trie_child(tr, node, (uint8_t)s[i]);
        if (c < 0) {
            c = trie_node(tr, (uint8_t)s[i]);
            tr->next_sib[c] = tr->first_child[node];
            tr->first_child[node] = c;
        }
        node = c;
    }
    tr->term[node] = idx;
}

static void trie_free(tok_trie *tr)
{
    inferd_free(tr->first_child);
    inferd_free(tr->next_sib);
    inferd_free(tr->byte);
    inferd_free(tr->term);
    memset(tr, 0, sizeof *tr);
}

/* Longest token starting at s[0]; returns its added[] index or -1. */
static int32_t trie_longest(const tok_trie *tr, const char *s, size_t n, size_t *len)
{
    if (tr->n == 0)
        return -1;
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n; i++) {
        node = trie_child(tr, node, (uint8_t)s[i]);
        if (node < 0)
            break;
        if (tr->term[node] >= 0) {
            best = tr->term[node];
            *len = i + 1;
        }
    }
    return best;
}

/* Load time, after the normalizer is parsed: normalized tokens are
 * inserted in their normalized form, because they are matched inside
 * normalized text. The \w regex is compiled only when some token is
 * single_word. Fails only if normalization of a content fails. */
inferd_status tok_added_build(tokenizer *t)
{
    bool need_word = false;
    inferd_buf norm = {0};
    for (int i = 0; i < t->n_added; i++) {
        const tok_added *a = &t->added[i];
        if (a->len == 0)
            continue;
        if (a->special) {
            trie_insert(&t->trie_special, a->content, a->len, i);
            if (a->len > t->special_max_len)
                t->special_max_len = a->len;
        }
        need_word |= a->single_word;
        if (!a->normalized) {
            trie_insert(&t->trie_raw, a->content, a->len, i);
            continue;
        }
        inferd_status st = tok_normalize(t, &t->norm, a->content, a->len, &norm);
        if (st != INFERD_OK) {
            inferd_buf_free(&norm);
            return st;
        }
        if (norm.len)
            trie_insert(&t->trie_norm, norm.data, norm.len, i);
    }
    inferd_buf_free(&norm);
    if (need_word)
        return tok_regex_compile(&t->word_re, "\\w", 2, "single_word boundary");
    return INFERD_OK;
}

void tok_added_free(tokenizer *t)
{
    trie_free(&t->trie_raw);
    trie_free(&t->trie_norm);
    trie_free(&t->trie_special);
    tok_regex_free(&t->word_re);
}

/* Whether the character at s[pos..] (pos < n) is a \w character.
 * \w with PCRE2_UCP is Unicode-aware, matching the regex crate's \w that
 * HF uses. NO_UTF_CHECK: the input was validated once at tok_encode. */
static bool is_word_at(const tokenizer *t, pcre2_match_data *md, const char *s, size_t n, size_t pos)
{
    size_t end = pos + (size_t)tok_utf8_len((unsigned char)s[pos]);
    if (end > n)
        end = n;
    int rc = pcre2_match(t->word_re.code, (PCRE2_SPTR)(s + pos), end - pos, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                         md, NULL);
    return rc >= 0;
}

/* Neither the character before the match nor the one after is a word
 * character. The step back skips UTF-8 continuation bytes to the lead. */
static bool single_word_ok(const tokenizer *t, pcre2_match_data *md, const char *s, size_t n, size_t ms,
                           size_t me)
{
    if (ms > 0) {
        size_t p = ms - 1;
        while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80)
            p--;
        if (is_word_at(t, md, s, n, p))
            return false;
    }
    return me >= n || !is_word_at(t, md, s, n, me);
}

/* Start of the whitespace run that ends at `end` (>= floor).
 * Walks back one code point at a time; floor stops it at the end of the
 * previous piece so an lstrip never eats text already emitted. */
static size_t ws_run_before(const char *s, size_t end, size_t floor)
{
    size_t b = end;
    while (b > floor) {
        size_t p = b - 1;
        while (p > floor && ((unsigned char)s[p] & 0xC0) == 0x80)
            p--;
        int adv;
        if (!tok_is_whitespace(tok_utf8_decode(s + p, b - p, &adv)))
            break;
        b = p;
    }
    return b;
}

/* End of the whitespace run that starts at `start`. */
static size_t ws_run_after(const char *s, size_t n, size_t start)
{
    size_t e = start;
    while (e < n) {
        int adv;
        if (!tok_is_whitespace(tok_utf8_decode(s + e, n - e, &adv)))
            break;
        e += (size_t)adv;
    }
    return e;
}

bool tok_span_hit(const tok_span *protect, int n_protect, size_t a, size_t b)
{
    /* spans are sorted and disjoint, so their ends do not decrease: find
     * the first span ending after a, then it is the only candidate */
    int lo = 0, hi = n_protect;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (protect[mid].end > a)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo < n_protect && protect[lo].start < b;
}

/* `done` is the end of what was emitted, `i` the scan position. A refused
 * match (special left as text, single_word failure) skips past itself, as
 * HF's non-overlapping match iterator does; only a protected-span refusal
 * rescans from ms + 1 (see the file comment). NOTE: a non-special added
 * token inside the text of a special one left as text is therefore not
 * matched either. protect offsets are in original-input coordinates,
 * hence base_orig. */
void tok_added_split(const tokenizer *t, const tok_trie *trie, bool parse_special, const tok_span *protect,
                     int n_protect, const char *s, size_t n, int64_t base_orig, tok_list *out)
{
    pcre2_match_data *md = NULL;
    size_t done = 0, i = 0;
    while (i < n && trie->n > 0) {
        size_t len = 0;
        int32_t idx = trie_longest(trie, s + i, n - i, &len);
        if (idx < 0) {
            i++;
            continue;
        }
        const tok_added *a = &t->added[idx];
        size_t ms = i, me = i + len;
        i = me;
        if (a->special && !parse_special)
            continue;
        if (a->special && n_protect > 0 &&
            tok_span_hit(protect, n_protect, (size_t)base_orig + ms, (size_t)base_orig + me)) {
            i = ms + 1;
            continue;
        }
        if (a->single_word) {
            if (!md)
                md = pcre2_match_data_create(1, NULL);
            if (!single_word_ok(t, md, s, n, ms, me))
                continue;
        }
        if (a->lstrip)
            ms = ws_run_before(s, ms, done);
        if (a->rstrip)
            me = ws_run_after(s, n, me);
        if (ms < done)
            ms = done;
        if (done < ms)
            tok_list_push(out, s + done, ms - done, -1, base_orig + (int64_t)done);
        tok_list_push(out, s + ms, me - ms, a->id, base_orig + (int64_t)ms);
        done = me;
        if (i < me)
            i = me;
    }
    if (done < n)
        tok_list_push(out, s + done, n - done, -1, base_orig + (int64_t)done);
    if (md)
        pcre2_match_data_free(md);
}

/* The leftmost (then longest) special-token text in s[from..n); false when
 * none. Used by srv_chat_encode to fence such text in client content. */
bool tok_find_special(const tokenizer *t, const char *s, size_t n, size_t from, size_t *ms, size_t *me)
{
    for (size_t i = from; i < n && t->trie_special.n > 0; i++) {
        size_t len = 0;
        if (trie_longest(&t->trie_special, s + i, n - i, &len) >= 0) {
            *ms = i;
            *me = i + len;
            return true;
        }
    }
    return false;
}

/* Whether s[p..n) walks the special trie to a node that has children.
 * True when s[p..n) is a proper prefix of some special token (template text
 * appended after it could complete the token). */
static bool walks_to_inner_node(const tok_trie *tr, const char *s, size_t p, size_t n)
{
    int32_t node = 0;
    for (size_t i = p; i < n && node >= 0; i++)
        node = trie_child(tr, node, (uint8_t)s[i]);
    return node >= 0 && tr->first_child[node] >= 0;
}

/* Whether s ends with a proper prefix (head) or starts with a proper
 * suffix (tail) of a special token: text the template puts next to s could
 * then complete a special token across the boundary. Only the last
 * special_max_len - 1 start positions can hold a head. The tail test is
 * linear over added tokens (called per message, not per byte). */
void tok_special_edges(const tokenizer *t, const char *s, size_t n, bool *ends_with_head, bool *starts_with_tail)
{
    *ends_with_head = *starts_with_tail = false;
    if (t->trie_special.n == 0 || n == 0)
        return;
    size_t span = t->special_max_len > 1 ? t->special_max_len - 1 : 0;
    for (size_t p = n > span ? n - span : 0; p < n && !*ends_with_head; p++)
        *ends_with_head = walks_to_inner_node(&t->trie_special, s, p, n);
    for (int i = 0; i < t->n_added && !*starts_with_tail; i++) {
        const tok_added *a = &t->added[i];
        if (!a->special)
            continue;
        for (size_t k = 1; k < a->len && k <= n; k++) {
            const char *tail = a->content + a->len - k;
            if (tail[0] == s[0] && memcmp(tail, s, k) == 0) {
                *starts_with_tail = true;
                break;
            }
        }
    }
}
