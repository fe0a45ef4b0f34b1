/* kvcache/kv_pool.h: the paged KV block pool with prefix caching.
 *
 * A fixed set of n_blocks block ids (block 0 is reserved as the null block:
 * never handed out, never freed, never cached). Every other block is either
 * referenced (ref > 0, owned by one or more sequences) or free (ref == 0, in
 * an intrusive doubly-linked LRU free list). Allocation pops from the LRU
 * head; releasing a block whose count drops to zero appends it to the tail.
 *
 * Prefix caching (vLLM v1 design): a FULL block may be registered under the
 * 128-bit chain hash hash(parent hash, its block_size token ids). A freed
 * block keeps its hash (and stays findable) until it reaches the LRU head and
 * is reused, at which point its hash is dropped ("evicted"). A lookup walks a
 * token sequence block by block and returns the longest run of cached blocks;
 * each hit takes a reference (leaving the free list when it was there).
 * Collision safety: every registered block stores its tokens and parent hash,
 * and a hit must match all three (hash, parent, tokens), so a hash collision
 * can only cost a miss, never wrong KV. At most one block is registered per
 * hash ("no duplicate live hashes"): registering a second block with the
 * same contents is refused and that block simply stays uncached.
 *
 * Every operation either succeeds or changes nothing. Not thread-safe: one
 * thread (the engine) owns the pool.
 */
#ifndef INFERD_KVCACHE_POOL_H
#define INFERD_KVCACHE_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#define KV_NULL_BLOCK 0

/* 128-bit block hash. {0, 0} is the parent hash of a sequence's first block. */
typedef struct {
    uint64_t lo, hi;
} kv_hash;

typedef struct kv_pool kv_pool;

typedef struct {
    int n_blocks;        /* including the null block */
    int n_free;          /* blocks in the free list (cached ones included) */
    int n_cached;        /* blocks registered under a hash (free or not) */
    uint64_t evictions;  /* cached blocks whose hash was dropped on reuse */
    uint64_t hit_blocks; /* blocks returned by lookups */
    uint64_t allocs;     /* blocks handed out by kv_pool_alloc (fresh KV to compute) */
    uint64_t shares;     /* references added by kv_pool_ref (KV reused, e.g. forked sequences) */
} kv_pool_stats;

/* Create a pool of n_blocks (>= 2: the null block + at least one) blocks of
 * block_size tokens. enable_caching = false makes cache/lookup no-ops. */
inferd_status kv_pool_init(int n_blocks, int block_size, bool enable_caching, kv_pool **out);
void kv_pool_free(kv_pool *p);

int kv_pool_num_blocks(const kv_pool *p); /* including the null block */
int kv_pool_num_usable(const kv_pool *p); /* n_blocks - 1 */
int kv_pool_num_free(const kv_pool *p);
int kv_pool_block_size(const kv_pool *p);
bool kv_pool_caching(const kv_pool *p);
int kv_pool_ref_count(const kv_pool *p, int32_t id);
bool kv_pool_is_cached(const kv_pool *p, int32_t id);
void kv_pool_get_stats(const kv_pool *p, kv_pool_stats *st);

/* The chain hash of one full block. parent is {0,0} for the first block. */
kv_hash kv_hash_block(kv_hash parent, const int32_t *tokens, int block_size);
static inline bool kv_hash_eq(kv_hash a, kv_hash b)
{
    return a.lo == b.lo && a.hi == b.hi;
}

/* Take n blocks from the LRU head (evicting their cached hashes), each with
 * ref = 1, ids written to out[n]. INFERD_ERR_NO_BLOCKS (nothing changed)
 * when fewer than n are free. n == 0 succeeds. */
inferd_status kv_pool_alloc(kv_pool *p, int n, int32_t *out);

/* Drop one reference from each of ids[n] (in order). Blocks reaching zero are
 * appended to the LRU tail in that order, so pass a sequence's blocks last
 * first: its tail blocks are then evicted before the shared prefix. The null
 * block is ignored. Releasing an unreferenced block is a bug (INFERD_CHECK). */
void kv_pool_release(kv_pool *p, const int32_t *ids, int n);

/* Take one more reference on a referenced block (sharing). CHECKs ref > 0. */
void kv_pool_ref(kv_pool *p, int32_t id);

/* Register referenced full block `id` as holding `tokens` [block_size] after
 * a prefix whose last block hash is `parent`; `h` must be
 * kv_hash_block(parent, tokens). Returns true when the block is now (or
 * already was, with the same hash) registered; false when caching is off or
 * another block already holds this hash (the block stays uncached). */
bool kv_pool_cache_block(kv_pool *p, int32_t id, kv_hash parent, kv_hash h, const int32_t *tokens);

/* Longest cached prefix of tokens[n_tokens], in full blocks, at most
 * max_blocks. hashes[] (may be NULL) caches the chain hashes of the
 * sequence: entries [0, *n_hashes) are trusted, more are computed and
 * *n_hashes is advanced (hashes must have room for n_tokens / block_size).
 * Each hit takes a reference; ids written to out[]. Returns the hit count. */
int kv_pool_lookup(kv_pool *p, const int32_t *tokens, int n_tokens, int max_blocks, kv_hash *hashes,
                   int *n_hashes, int32_t *out);

/* Drop every cached hash of free blocks (e.g. after a weight reload). */
void kv_pool_reset_cache(kv_pool *p);

/* Check every invariant: each block free xor referenced, the free list is a
 * well-linked list of exactly the free blocks, counts agree, every cached
 * block is in the hash table once and no hash is registered twice, the null
 * block is untouched. On failure returns false and describes the first
 * violation in msg. */
bool kv_pool_check(const kv_pool *p, char *msg, size_t msg_len);

#endif
