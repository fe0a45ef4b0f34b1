/* tokenizer/tok_bpe.c: the BPE model: the vocab map (token string -> id), the
 * merge map ((left id, right id) -> (rank, merged id)) and the per-word
 * merge loop.
 *
 * A word starts as one symbol per character (or per byte through
 * "<0xNN>" tokens when byte_fallback is on, or an unknown token, fused when
 * fuse_unk). Merging follows HF tokenizers' Word::merge_all exactly: a binary
 * min-heap of candidate merges keyed by (rank, position); each pop checks
 * the pair is still current, merges into the left symbol of a doubly linked
 * list and pushes the two new neighbour pairs. That is O(n log n) per word,
 * which matters for SentencePiece-style tokenizers without a pre-tokenizer,
 * where a whole prompt (100 KB) is a single word.
 *
 * Such a word is also cut into chunks before each "▁" (U+2581) that follows
 * another character, when no merge result contains "▁" after a different
 * character (true for SentencePiece vocabularies, checked at load): then no
 * merge can ever join symbols across the cut, so the chunks merge
 * independently to exactly the same ids, and the heap stays small (the
 * 100 KB llama2 encode drops from ~50 ms to ~10 ms).
 *
 * Both maps are open addressing with linear probing at load factor <= 1/2
 * and power-of-two capacity: one cache line per probe in the common case,
 * no per-entry allocation. They are filled at load and read-only after,
 * so lookups need no lock; the per-call scratch (tok_bpe_scratch) is what
 * keeps the encode path itself allocation-free once warm.
 */
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "tokenizer/tok_internal.h"

/* FNV-1a with a final xor-shift: FNV's low bits, which the mask keeps, are
 * weak for short keys that differ only in their last byte. */
static uint64_t hash_bytes(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h ^ (h >> 29);
}

/* NOTE: n is twice an entry count bounded by the file size cap (512 MB:
 * under 10^8 entries), far below 2^31, so the uint32 doubling cannot
 * overflow. */
static uint32_t pow2_at_least(uint64_t n)
{
    uint32_t c = 16;
    while (c < n)
        c *= 2;
    return c;
}

/* Sized for n_expected at load factor 1/2, so loading never rehashes. */
void tok_vocab_init(tok_vocab_map *m, int n_expected)
{
    uint32_t cap = pow2_at_least((uint64_t)n_expected * 2);
    m->slots = inferd_calloc(cap, sizeof *m->slots);
    m->mask = cap - 1;
    m->n = 0;
}

void tok_vocab_free(tok_vocab_map *m)
{
    inferd_free(m->slots);
    m->slots = NULL;
}

/* The model piece of id (arena bytes, not NUL-terminated for our use);
 * only called for ids the map holds, which all have a piece. */
static const char *piece_of(const tokenizer *t, int32_t id, size_t *len)
{
    *len = (size_t)t->piece_len[id];
    return t->arena.data + t->piece_off[id];
}

/* Place id in slots (slot value id + 1, 0 = empty). An equal string
 * already present is replaced: the later id wins. The probe terminates
 * because the load factor stays <= 1/2. */
static void vocab_place(tokenizer *t, uint32_t *slots, uint32_t mask, int32_t id, bool *replaced)
{
    size_t n;
    const char *s = piece_of(t, id, &n);
    uint32_t i = (uint32_t)hash_bytes(s, n) & mask;
    *replaced = false;
    for (;;) {
        uint32_t v = slots[i];
        if (v == 0) {
            slots[i] = (uint32_t)id + 1;
            return;
        }
        size_t on;
        const char *o = piece_of(t, (int32_t)(v - 1), &on);
        if (on == n && memcmp(o, s, n) == 0) {
            slots[i] = (uint32_t)id + 1;
            *replaced = true;
            return;
        }
        i = (i + 1) & mask;
    }
}

/* Load time only (not thread-safe). Doubles the table before it would pass
 * half full. */
void tok_vocab_insert(tokenizer *t, int32_t id)
{
    tok_vocab_map *m = &t->vocab;
    if ((uint64_t)(m->n + 1) * 2 > (uint64_t)m->mask + 1) {
        uint32_t cap = (m->mask + 1) * 2;
        uint32_t *slots = inferd_calloc(cap, sizeof *slots);
        bool rep;
        for (uint32_t i = 0; i <= m->mask; i++)
            if (m->slots[i])
                vocab_place(t, slots, cap - 1, (int32_t)(m->slots[i] - 1), &rep);
        inferd_free(m->slots);
        m->slots = slots;
        m->mask = cap - 1;
    }
    bool replaced;
    vocab_place(t, m->slots, m->mask, id, &replaced);
    if (!replaced)
        m->n++;
}

/* s need not be NUL-terminated. Thread-safe (read-only). */
int32_t tok_vocab_find(const tokenizer *t, const char *s, size_t n)
{
    const tok_vocab_map *m = &t->vocab;
    uint32_t i = (uint32_t)hash_bytes(s, n) & m->mask;
    for (;;) {
        uint32_t v = m->slots[i];
        if (v == 0)
            return -1;
        size_t on;
        const char *o = piece_of(t, (int32_t)(v - 1), &on);
        if (on == n && memcmp(o, s, n) == 0)
            return (int32_t)(v - 1);
        i = (i + 1) & m->mask;
    }
}

/* Fibonacci hashing of the packed pair: the high half of the product mixes
 * both ids; the key is stored +1 so that 0 can mean "empty". */
static inline uint32_t merge_slot(uint64_t key, uint32_t mask)
{
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & mask;
}

/* rank and merged need no zeroing: a slot is read only when its key is
 * set, and the key array starts zeroed (empty). */
void tok_merges_init(tok_merge_map *m, int n_expected)
{
    uint32_t cap = pow2_at_least((uint64_t)n_expected * 2);
    m->keys = inferd_calloc(cap, sizeof *m->keys);
    m->rank = inferd_malloc(cap * sizeof *m->rank);
    m->merged = inferd_malloc(cap * sizeof *m->merged);
    m->mask = cap - 1;
    m->n = 0;
}

void tok_merges_free(tok_merge_map *m)
{
    inferd_free(m->keys);
    inferd_free(m->rank);
    inferd_free(m->merged);
    m->keys = NULL;
    m->rank = NULL;
    m->merged = NULL;
}

/* Rehash into a table twice the size (keys are unique, so no compare). */
static void merges_grow(tok_merge_map *m)
{
    tok_merge_map g;
    tok_merges_init(&g, (int)(m->mask + 1));
    for (uint32_t i = 0; i <= m->mask; i++) {
        if (!m->keys[i])
            continue;
        uint32_t j = merge_slot(m->keys[i], g.mask);
        while (g.keys[j])
            j = (j + 1) & g.mask;
        g.keys[j] = m->keys[i];
        g.rank[j] = m->rank[i];
        g.merged[j] = m->merged[i];
    }
    g.n = m->n;
    tok_merges_free(m);
    *m = g;
}

/* A pair listed twice keeps the later rank and result (HF builds a map
 * from the list, where the later entry overwrites). */
void tok_merges_insert(tok_merge_map *m, int32_t a, int32_t b, uint32_t rank, int32_t merged)
{
    if ((uint64_t)(m->n + 1) * 2 > (uint64_t)m->mask + 1)
        merges_grow(m);
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = merge_slot(key, m->mask);
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) & m->mask;
    if (!m->keys[i])
        m->n++;
    m->keys[i] = key;
    m->rank[i] = rank;
    m->merged[i] = merged;
}

/* Rank and merged id of pair (a, b); false when the pair never merges. */
static inline bool merges_find(const tok_merge_map *m, int32_t a, int32_t b, uint32_t *rank, int32_t *merged)
{
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    uint32_t i = merge_slot(key, m->mask);
    for (;;) {
        uint64_t k = m->keys[i];
        if (k == key) {
            *rank = m->rank[i];
            *merged = m->merged[i];
            return true;
        }
        if (k == 0)
            return false;
        i = (i + 1) & m->mask;
    }
}

/* One symbol of a word being merged: a doubly linked list threaded through
 * the array (indices, so the array may grow), and its byte length; a
 * symbol merged into its left neighbour keeps len 0 as a tombstone. */
typedef struct {
    int32_t id;
    int32_t prev, next;
    uint32_t len; /* bytes covered; 0 = merged away */
} bpe_sym;

/* A candidate merge of symbol pos with its right neighbour, keyed by
 * (rank, pos): lower rank first, leftmost among equal ranks (HF's order). */
typedef struct {
    uint32_t rank;
    int32_t pos;
    int32_t merged;
} bpe_cand;

struct tok_bpe_scratch {
    bpe_sym *sym;
    int n_sym, cap_sym;
    bpe_cand *heap;
    int n_heap, cap_heap;
    inferd_buf key; /* a character plus prefix/suffix */
};

/* One per encode call (or per thread); never shared between threads. */
tok_bpe_scratch *tok_bpe_scratch_new(void)
{
    return inferd_calloc(1, sizeof(tok_bpe_scratch));
}

void tok_bpe_scratch_free(tok_bpe_scratch *s)
{
    if (!s)
        return;
    inferd_free(s->sym);
    inferd_free(s->heap);
    inferd_buf_free(&s->key);
    inferd_free(s);
}

/* The heap order: (rank, pos) lexicographic. */
static inline bool cand_less(const bpe_cand *a, const bpe_cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(tok_bpe_scratch *s, bpe_cand c)
{
    if (s->n_heap == s->cap_heap) {
        s->cap_heap = s->cap_heap ? s->cap_heap * 2 : 64;
        s->heap = inferd_realloc(s->heap, (size_t)s->cap_heap * sizeof *s->heap);
    }
    int i = s->n_heap++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_less(&c, &s->heap[p]))
            break;
        s->heap[i] = s->heap[p];
        i = p;
    }
    s->heap[i] = c;
}

/* Remove the minimum: sift `last` down from the root. Caller ensures the
 * heap is not empty. */
static bpe_cand heap_pop(tok_bpe_scratch *s)
{
    bpe_cand top = s->heap[0];
    bpe_cand last = s->heap[--s->n_heap];
    int i = 0, n = s->n_heap;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const bpe_cand *best = &last;
        if (l < n && cand_less(&s->heap[l], best)) {
            m = l;
            best = &s->heap[l];
        }
        if (r < n && cand_less(&s->heap[r], best))
            m = r;
        if (m == i)
            break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (n > 0)
        s->heap[i] = last;
    return top;
}

/* Append a symbol linked after the previous one. */
static void sym_add(tok_bpe_scratch *s, int32_t id, uint32_t len)
{
    if (s->n_sym == s->cap_sym) {
        s->cap_sym = s->cap_sym ? s->cap_sym * 2 : 64;
        s->sym = inferd_realloc(s->sym, (size_t)s->cap_sym * sizeof *s->sym);
    }
    int i = s->n_sym++;
    s->sym[i] = (bpe_sym){.id = id, .prev = i - 1, .next = -1, .len = len};
    if (i > 0)
        s->sym[i - 1].next = i;
}

/* Vocab id of one character of a word, with the continuing-subword prefix
 * (not first) and end-of-word suffix (last) when the model has them.
 * *key is the string looked up (c itself, or s->key with the affixes),
 * which byte fallback then spells byte by byte, as HF does. */
static int32_t char_id(const tokenizer *t, tok_bpe_scratch *s, const char *c, size_t n, bool first, bool last,
                       const char **key, size_t *key_len)
{
    if ((!t->cont_prefix || first) && (!t->end_suffix || !last)) {
        *key = c;
        *key_len = n;
        return tok_vocab_find(t, c, n);
    }
    s->key.len = 0;
    if (t->cont_prefix && !first)
        inferd_buf_append(&s->key, t->cont_prefix, strlen(t->cont_prefix));
    inferd_buf_append(&s->key, c, n);
    if (t->end_suffix && last)
        inferd_buf_append(&s->key, t->end_suffix, strlen(t->end_suffix));
    *key = s->key.data;
    *key_len = s->key.len;
    return tok_vocab_find(t, s->key.data, s->key.len);
}

/* Initial symbols of word w: characters, byte fallback, (fused) unknowns.
 * Per character: its vocab id, else its bytes as "<0xNN>" tokens when
 * every byte has one, else the unknown token (consecutive unknowns fused
 * into one when fuse_unk), else nothing: without an unk_token the
 * character is dropped, as in HF. A truncated character at the end of w is
 * taken as it is rather than read past the end. */
static void word_symbols(const tokenizer *t, tok_bpe_scratch *s, const char *w, size_t n)
{
    int32_t unk_len = -1; /* pending unknown span, -1 = none */
    size_t i = 0;
    s->n_sym = 0;
    while (i < n) {
        size_t cl = (size_t)tok_utf8_len((unsigned char)w[i]);
        if (i + cl > n)
            cl = n - i;
        const char *key;
        size_t key_len;
        int32_t id = char_id(t, s, w + i, cl, i == 0, i + cl == n, &key, &key_len);
        if (id >= 0) {
            if (unk_len >= 0)
                sym_add(s, t->unk_id, (uint32_t)unk_len);
            unk_len = -1;
            sym_add(s, id, (uint32_t)cl);
        } else {
            bool done = false;
            if (t->byte_fallback) {
                size_t k = 0;
                while (k < key_len && t->byte_ids[(unsigned char)key[k]] >= 0)
                    k++;
                if (k == key_len) {
                    for (k = 0; k < key_len; k++)
                        sym_add(s, t->byte_ids[(unsigned char)key[k]], 1);
                    done = true;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (unk_len >= 0 && t->fuse_unk) {
                    unk_len += (int32_t)cl;
                } else {
                    if (unk_len >= 0)
                        sym_add(s, t->unk_id, (uint32_t)unk_len);
                    unk_len = (int32_t)cl;
                }
            }
        }
        i += cl;
    }
    if (unk_len >= 0)
        sym_add(s, t->unk_id, (uint32_t)unk_len);
}

/* HF's Word::merge_all. A popped candidate is stale when its left symbol
 * was merged away, has no right neighbour any more, or the current pair no
 * longer produces the same token; stale entries are skipped rather than
 * removed from the heap (lazy deletion). */
static void word_merge(const tokenizer *t, tok_bpe_scratch *s)
{
    const tok_merge_map *mm = &t->merges;
    bpe_sym *sym = s->sym;
    uint32_t rank;
    int32_t merged;
    s->n_heap = 0;
    for (int i = 0; i + 1 < s->n_sym; i++)
        if (merges_find(mm, sym[i].id, sym[i + 1].id, &rank, &merged))
            heap_push(s, (bpe_cand){rank, i, merged});
    while (s->n_heap > 0) {
        bpe_cand top = heap_pop(s);
        bpe_sym *cur = &sym[top.pos];
        if (cur->len == 0 || cur->next < 0)
            continue;
        int32_t nx = cur->next;
        if (!merges_find(mm, cur->id, sym[nx].id, &rank, &merged) || merged != top.merged)
            continue;
        cur->id = top.merged;
        cur->len += sym[nx].len;
        cur->next = sym[nx].next;
        sym[nx].len = 0;
        if (cur->next >= 0)
            sym[cur->next].prev = top.pos;
        if (cur->prev >= 0 && merges_find(mm, sym[cur->prev].id, cur->id, &rank, &merged))
            heap_push(s, (bpe_cand){rank, cur->prev, merged});
        if (cur->next >= 0 && merges_find(mm, cur->id, sym[cur->next].id, &rank, &merged))
            heap_push(s, (bpe_cand){rank, top.pos, merged});
    }
}

/* Grow the caller's id array by doubling. */
static void ids_push(int32_t **ids, int *n_ids, int *cap, int32_t id)
{
    if (*n_ids == *cap) {
        *cap = *cap ? *cap * 2 : 64;
        *ids = inferd_realloc(*ids, (size_t)*cap * sizeof **ids);
    }
    (*ids)[(*n_ids)++] = id;
}

/* SentencePiece's word-boundary marker "▁" (U+2581, 3 bytes in UTF-8). */
static const char k_meta[] = "\xE2\x96\x81"; /* U+2581 */

/* Whether s has "▁" right after a character that is not "▁". */
static bool meta_after_other(const char *s, size_t n)
{
    for (size_t i = 1; i + 3 <= n; i++) {
        if (memcmp(s + i, k_meta, 3) != 0 || ((unsigned char)s[i] & 0xC0) == 0x80)
            continue;
        if (i < 3 || memcmp(s + i - 3, k_meta, 3) != 0)
            return true;
    }
    return false;
}

/* Load time. Chunking is off for models whose merges could span a cut:
 * ignore_merges (whole-word lookup), affixes (a chunk would get the wrong
 * prefix/suffix), no "▁" in the vocab (nothing to cut at), or any merge
 * result with "▁" after another character. */
void tok_bpe_check_chunking(tokenizer *t)
{
    t->chunk_meta = false;
    if (t->ignore_merges || t->cont_prefix || t->end_suffix || tok_vocab_find(t, k_meta, 3) < 0)
        return;
    const tok_merge_map *m = &t->merges;
    for (uint32_t i = 0; i <= m->mask; i++) {
        if (!m->keys[i])
            continue;
        int32_t id = m->merged[i];
        if (meta_after_other(t->arena.data + t->piece_off[id], (size_t)t->piece_len[id]))
            return;
    }
    t->chunk_meta = true;
}

/* Symbols, merges, then the surviving symbols' ids in order. */
static void bpe_chunk(const tokenizer *t, tok_bpe_scratch *s, const char *w, size_t n, int32_t **ids, int *n_ids,
                      int *cap)
{
    word_symbols(t, s, w, n);
    word_merge(t, s);
    for (int i = 0; i < s->n_sym; i++)
        if (s->sym[i].len != 0)
            ids_push(ids, n_ids, cap, s->sym[i].id);
}

/* ignore_merges (Llama 3): a word that is itself a vocab entry is one
 * token, before any merging. Cuts fall before a "▁" that follows another
 * character; a run of "▁" stays together, since "▁▁" merges exist. The
 * memcmp on 3 bytes cannot match inside a character: E2 is a lead byte. */
void tok_bpe_word(const tokenizer *t, tok_bpe_scratch *s, const char *w, size_t n, int32_t **ids, int *n_ids,
                  int *cap)
{
    if (n == 0)
        return;
    if (t->ignore_merges) {
        int32_t id = tok_vocab_find(t, w, n);
        if (id >= 0) {
            ids_push(ids, n_ids, cap, id);
            return;
        }
    }
    if (!t->chunk_meta) {
        bpe_chunk(t, s, w, n, ids, n_ids, cap);
        return;
    }
    size_t start = 0;
    for (size_t i = 1; i + 3 <= n; i++) {
        if (memcmp(w + i, k_meta, 3) == 0 && (i < 3 || memcmp(w + i - 3, k_meta, 3) != 0)) {
            bpe_chunk(t, s, w + start, i - start, ids, n_ids, cap);
            start = i;
        }
    }
    bpe_chunk(t, s, w + start, n - start, ids, n_ids, cap);
}
