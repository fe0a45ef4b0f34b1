/* kvcache/kv_pool.c: block pool, LRU free list and prefix-cache hash table
 * (see kv_pool.h for the contract).
 *
 * Layout: one array of block records indexed by block id. The free list is
 * an intrusive list (common/list.h) through the records, so removing a
 * cached block on a prefix hit is O(1); a record's id is its index in the
 * array (the array is never reallocated, so the links stay valid). The hash table chains through the records as well
 * (hnext), with a power-of-two bucket array of at least 2 * n_blocks heads,
 * so the pool allocates nothing after init. Registered blocks keep a copy of
 * their tokens ([n_blocks, block_size] int32) for the collision check.
 */
#include "kvcache/kv_pool.h"

#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/list.h"
#include "common/rng.h"

typedef struct {
    int32_t ref;
    inferd_list_node link; /* in the free list while in_free */
    int32_t hnext;         /* hash-bucket chain, -1 = end */
    bool in_free;
    bool cached; /* registered in the hash table */
    kv_hash hash, parent;
} kv_block;

struct kv_pool {
    int n_blocks, block_size;
    bool caching;
    kv_block *blocks;   /* [n_blocks] */
    int32_t *tokens;    /* [n_blocks, block_size] tokens of cached blocks */
    int32_t *buckets;   /* [n_buckets] chain heads, -1 = empty */
    uint32_t n_buckets; /* power of two */
    inferd_list free_list; /* of kv_block, LRU: the first is evicted first */
    int n_cached;
    uint64_t evictions, hit_blocks;
    uint64_t allocs, shares; /* blocks handed out by kv_pool_alloc; extra references by kv_pool_ref */
};

/* --- free list ------------------------------------------------------------ */

/* The id of the block whose free-list link is `n` (NULL gives -1). */
static int32_t fl_id(const kv_pool *p, const inferd_list_node *n)
{
    return n ? (int32_t)(INFERD_CONTAINER_OF(n, kv_block, link) - p->blocks) : -1;
}

static void fl_push_tail(kv_pool *p, int32_t id)
{
    kv_block *b = &p->blocks[id];
    INFERD_DCHECK(!b->in_free);
    inferd_list_push_back(&p->free_list, &b->link);
    b->in_free = true;
}

static void fl_remove(kv_pool *p, int32_t id)
{
    kv_block *b = &p->blocks[id];
    INFERD_DCHECK(b->in_free);
    inferd_list_unlink(&p->free_list, &b->link);
    b->in_free = false;
}

/* --- hash table ----------------------------------------------------------- */

static uint32_t bucket_of(const kv_pool *p, kv_hash h)
{
    return (uint32_t)(h.lo ^ (h.hi >> 7)) & (p->n_buckets - 1);
}

static int32_t ht_find(const kv_pool *p, kv_hash h)
{
    for (int32_t id = p->buckets[bucket_of(p, h)]; id >= 0; id = p->blocks[id].hnext)
        if (kv_hash_eq(p->blocks[id].hash, h))
            return id;
    return -1;
}

static void ht_insert(kv_pool *p, int32_t id)
{
    uint32_t bk = bucket_of(p, p->blocks[id].hash);
    p->blocks[id].hnext = p->buckets[bk];
    p->buckets[bk] = id;
    p->blocks[id].cached = true;
    p->n_cached++;
}

static void ht_remove(kv_pool *p, int32_t id)
{
    kv_block *b = &p->blocks[id];
    int32_t *link = &p->buckets[bucket_of(p, b->hash)];
    while (*link != id) {
        INFERD_CHECK(*link >= 0);
        link = &p->blocks[*link].hnext;
    }
    *link = b->hnext;
    b->hnext = -1;
    b->cached = false;
    memset(&b->hash, 0, sizeof b->hash);
    memset(&b->parent, 0, sizeof b->parent);
    p->n_cached--;
}

/* --- lifecycle ------------------------------------------------------------ */

inferd_status kv_pool_init(int n_blocks, int block_size, bool enable_caching, kv_pool **out)
{
    *out = NULL;
    if (n_blocks < 2 || n_blocks > (1 << 30))
        return inferd_set_error(INFERD_ERR_INVALID_ARG,
                                "kv pool: %d blocks (need at least 2: the null block + one)", n_blocks);
    if (block_size < 1 || block_size > 4096)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "kv pool: block size %d out of [1, 4096]",
                                block_size);
    kv_pool *p = inferd_calloc(1, sizeof *p);
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->caching = enable_caching;
    p->blocks = inferd_try_calloc((size_t)n_blocks, sizeof *p->blocks);
    p->n_buckets = 1;
    while (p->n_buckets < 2u * (uint32_t)n_blocks)
        p->n_buckets <<= 1;
    p->buckets = inferd_try_malloc((size_t)p->n_buckets * sizeof *p->buckets);
    if (enable_caching)
        p->tokens = inferd_try_malloc((size_t)n_blocks * (size_t)block_size * sizeof *p->tokens);
    if (!p->blocks || !p->buckets || (enable_caching && !p->tokens)) {
        kv_pool_free(p);
        return inferd_set_error(INFERD_ERR_NOMEM, "kv pool: out of memory for %d blocks", n_blocks);
    }
    memset(p->buckets, 0xff, (size_t)p->n_buckets * sizeof *p->buckets);
    inferd_list_init(&p->free_list);
    for (int32_t i = 0; i < n_blocks; i++) {
        p->blocks[i].hnext = -1;
        if (i != KV_NULL_BLOCK)
            fl_push_tail(p, i);
    }
    *out = p;
    return INFERD_OK;
}

void kv_pool_free(kv_pool *p)
{
    if (!p)
        return;
    inferd_free(p->blocks);
    inferd_free(p->buckets);
    inferd_free(p->tokens);
    inferd_free(p);
}

int kv_pool_num_blocks(const kv_pool *p)
{
    return p->n_blocks;
}
int kv_pool_num_usable(const kv_pool *p)
{
    return p->n_blocks - 1;
}
int kv_pool_num_free(const kv_pool *p)
{
    return (int)inferd_list_len(&p->free_list);
}
int kv_pool_block_size(const kv_pool *p)
{
    return p->block_size;
}
bool kv_pool_caching(const kv_pool *p)
{
    return p->caching;
}

int kv_pool_ref_count(const kv_pool *p, int32_t id)
{
    INFERD_CHECK(id >= 0 && id < p->n_blocks);
    return p->blocks[id].ref;
}

bool kv_pool_is_cached(const kv_pool *p, int32_t id)
{
    INFERD_CHECK(id >= 0 && id < p->n_blocks);
    return p->blocks[id].cached;
}

void kv_pool_get_stats(const kv_pool *p, kv_pool_stats *st)
{
    st->n_blocks = p->n_blocks;
    st->n_free = kv_pool_num_free(p);
    st->n_cached = p->n_cached;
    st->evictions = p->evictions;
    st->hit_blocks = p->hit_blocks;
    st->allocs = p->allocs;
    st->shares = p->shares;
}

/* --- hashing -------------------------------------------------------------- */

kv_hash kv_hash_block(kv_hash parent, const int32_t *tokens, int block_size)
{
    /* Two 64-bit lanes with different seeds and multipliers, each a chain of
     * splitmix64 finalizers; the lanes cross-feed once per token so neither
     * is a function of the other alone. Not cryptographic: hits are verified
     * against the stored tokens anyway. */
    uint64_t a = rng_mix64(parent.lo ^ 0x243F6A8885A308D3ull);
    uint64_t b = rng_mix64(parent.hi ^ 0x13198A2E03707344ull);
    for (int i = 0; i < block_size; i++) {
        uint64_t t = (uint64_t)(uint32_t)tokens[i];
        a = rng_mix64(a ^ (t * 0x9E3779B97F4A7C15ull));
        b = rng_mix64(b + (t + 0xA4093822299F31D0ull) * 0xC2B2AE3D27D4EB4Full) ^ (a >> 17);
    }
    kv_hash h = {rng_mix64(a ^ (uint64_t)block_size), rng_mix64(b ^ ((uint64_t)block_size << 32))};
    return h;
}

/* --- alloc / release ------------------------------------------------------ */

inferd_status kv_pool_alloc(kv_pool *p, int n, int32_t *out)
{
    if (n < 0)
        return inferd_set_error(INFERD_ERR_INVALID_ARG, "kv pool: alloc of %d blocks", n);
    if (n > kv_pool_num_free(p))
        return inferd_set_error(INFERD_ERR_NO_BLOCKS, "kv pool: %d blocks wanted, %d free", n,
                                kv_pool_num_free(p));
    for (int i = 0; i < n; i++) {
        int32_t id = fl_id(p, inferd_list_first(&p->free_list));
        fl_remove(p, id);
        kv_block *b = &p->blocks[id];
        if (b->cached) {
            ht_remove(p, id);
            p->evictions++;
        }
        INFERD_DCHECK(b->ref == 0);
        b->ref = 1;
        out[i] = id;
    }
    p->allocs += (uint64_t)n;
    return INFERD_OK;
}

void kv_pool_release(kv_pool *p, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++) {
        int32_t id = ids[i];
        INFERD_CHECK(id >= 0 && id < p->n_blocks);
        if (id == KV_NULL_BLOCK)
            continue;
        kv_block *b = &p->blocks[id];
        INFERD_CHECK_MSG(b->ref > 0, "kv pool: release of an unreferenced block");
        if (--b->ref == 0)
            fl_push_tail(p, id);
    }
}

void kv_pool_ref(kv_pool *p, int32_t id)
{
    INFERD_CHECK(id > KV_NULL_BLOCK && id < p->n_blocks);
    INFERD_CHECK_MSG(p->blocks[id].ref > 0, "kv pool: ref of a free block (use lookup)");
    p->blocks[id].ref++;
    p->shares++;
}

/* --- prefix cache --------------------------------------------------------- */

bool kv_pool_cache_block(kv_pool *p, int32_t id, kv_hash parent, kv_hash h, const int32_t *tokens)
{
    INFERD_CHECK(id > KV_NULL_BLOCK && id < p->n_blocks);
    kv_block *b = &p->blocks[id];
    INFERD_CHECK_MSG(b->ref > 0, "kv pool: caching an unreferenced block");
    if (!p->caching)
        return false;
    if (b->cached)
        return kv_hash_eq(b->hash, h);
    if (ht_find(p, h) >= 0)
        return false;
    b->hash = h;
    b->parent = parent;
    memcpy(p->tokens + (size_t)id * p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    ht_insert(p, id);
    return true;
}

/* The registered block matching (parent, h, tokens), or -1. */
static int32_t cache_match(const kv_pool *p, kv_hash parent, kv_hash h, const int32_t *tokens)
{
    int32_t id = ht_find(p, h);
    if (id < 0)
        return -1;
    const kv_block *b = &p->blocks[id];
    if (!kv_hash_eq(b->parent, parent))
        return -1;
    if (memcmp(p->tokens + (size_t)id * p->block_size, tokens, (size_t)p->block_size * sizeof *tokens) != 0)
        return -1;
    return id;
}

int kv_pool_lookup(kv_pool *p, const int32_t *tokens, int n_tokens, int max_blocks, kv_hash *hashes,
                   int *n_hashes, int32_t *out)
{
    if (!p->caching || n_tokens <= 0)
        return 0;
    int n_full = n_tokens / p->block_size;
    if (max_blocks < n_full)
        n_full = max_blocks;
    kv_hash parent = {0, 0};
    int hits = 0;
    for (int i = 0; i < n_full; i++) {
        const int32_t *blk = tokens + (size_t)i * p->block_size;
        kv_hash h;
        if (hashes && n_hashes && i < *n_hashes) {
            h = hashes[i];
        } else {
            h = kv_hash_block(parent, blk, p->block_size);
            if (hashes && n_hashes && i == *n_hashes) {
                hashes[i] = h;
                (*n_hashes)++;
            }
        }
        int32_t id = cache_match(p, parent, h, blk);
        if (id < 0)
            break;
        kv_block *b = &p->blocks[id];
        if (b->ref == 0)
            fl_remove(p, id);
        b->ref++;
        out[hits++] = id;
        parent = h;
    }
    p->hit_blocks += (uint64_t)hits;
    return hits;
}

void kv_pool_reset_cache(kv_pool *p)
{
    for (inferd_list_node *n = inferd_list_first(&p->free_list); n; n = inferd_list_next(&p->free_list, n)) {
        int32_t id = fl_id(p, n);
        if (p->blocks[id].cached)
            ht_remove(p, id);
    }
}

/* --- invariants ----------------------------------------------------------- */

#define FAIL(...)                                                                                            \
    do {                                                                                                     \
        if (msg && msg_len)                                                                                  \
            snprintf(msg, msg_len, __VA_ARGS__);                                                             \
        return false;                                                                                        \
    } while (0)

static bool check_free_list(const kv_pool *p, char *msg, size_t msg_len)
{
    if (inferd_list_len(&p->free_list) > (size_t)p->n_blocks || !inferd_list_check(&p->free_list))
        FAIL("free list: broken links or count %zu", inferd_list_len(&p->free_list));
    const inferd_list *l = &p->free_list;
    for (const inferd_list_node *n = inferd_list_first(l); n; n = inferd_list_next(l, n)) {
        int32_t id = fl_id(p, n);
        if (id < 0 || id >= p->n_blocks || id == KV_NULL_BLOCK)
            FAIL("free list holds invalid block %d", id);
        if (!p->blocks[id].in_free)
            FAIL("block %d is linked in the free list but not marked free", id);
    }
    return true;
}

static bool check_hash_table(const kv_pool *p, char *msg, size_t msg_len)
{
    int count = 0;
    for (uint32_t bk = 0; bk < p->n_buckets; bk++) {
        for (int32_t id = p->buckets[bk]; id >= 0; id = p->blocks[id].hnext) {
            if (id >= p->n_blocks || id == KV_NULL_BLOCK)
                FAIL("hash bucket %u holds invalid block %d", bk, id);
            if (++count > p->n_blocks)
                FAIL("hash chains have a cycle");
            const kv_block *b = &p->blocks[id];
            if (!b->cached)
                FAIL("block %d is in the hash table but not marked cached", id);
            if (bucket_of(p, b->hash) != bk)
                FAIL("block %d is in bucket %u, its hash says %u", id, bk, bucket_of(p, b->hash));
            for (int32_t o = b->hnext; o >= 0; o = p->blocks[o].hnext)
                if (kv_hash_eq(p->blocks[o].hash, b->hash))
                    FAIL("blocks %d and %d are registered under the same hash", id, o);
            kv_hash want = kv_hash_block(b->parent, p->tokens + (size_t)id * p->block_size, p->block_size);
            if (!kv_hash_eq(want, b->hash))
                FAIL("block %d: stored hash does not match its tokens", id);
        }
    }
    if (count != p->n_cached)
        FAIL("hash table holds %d blocks, n_cached says %d", count, p->n_cached);
    return true;
}

bool kv_pool_check(const kv_pool *p, char *msg, size_t msg_len)
{
    const kv_block *nb = &p->blocks[KV_NULL_BLOCK];
    if (nb->in_free || nb->cached || nb->ref != 0)
        FAIL("null block is in use (free %d cached %d ref %d)", nb->in_free, nb->cached, nb->ref);
    int n_free = 0, n_cached = 0;
    for (int32_t id = 1; id < p->n_blocks; id++) {
        const kv_block *b = &p->blocks[id];
        if (b->ref < 0)
            FAIL("block %d has ref %d", id, b->ref);
        if ((b->ref == 0) != b->in_free)
            FAIL("block %d: ref %d but in_free %d (must be free xor referenced)", id, b->ref, b->in_free);
        if (b->cached && !p->caching)
            FAIL("block %d cached while caching is off", id);
        n_free += b->in_free;
        n_cached += b->cached;
    }
    if (n_free != kv_pool_num_free(p))
        FAIL("%d blocks marked free, the free list holds %d", n_free, kv_pool_num_free(p));
    if (n_cached != p->n_cached)
        FAIL("%d blocks marked cached, n_cached says %d", n_cached, p->n_cached);
    if (!check_free_list(p, msg, msg_len))
        return false;
    return p->caching ? check_hash_table(p, msg, msg_len) : true;
}
