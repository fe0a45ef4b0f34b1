/* tests/kvcache/test_kv_pool.c: the KV block pool: allocation that fails
 * without side effects, LRU order, prefix-cache registration, lookup,
 * eviction, collision safety, and a randomized property test (tens of
 * thousands of operations against a shadow model, invariant checker after
 * every one). */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "common/util.h"
#include "kvcache/kv_pool.h"
#include "test_util.h"

static void assert_ok(const kv_pool *p)
{
    char msg[256];
    ck_assert_msg(kv_pool_check(p, msg, sizeof msg), "invariant: %s", msg);
}

static kv_pool *mk(int n, int bs, bool caching)
{
    kv_pool *p = NULL;
    ck_assert_int_eq(kv_pool_init(n, bs, caching, &p), INFERD_OK);
    assert_ok(p);
    return p;
}

START_TEST(test_init_errors)
{
    static const struct {
        int n, bs;
        inferd_status st;
    } rows[] = {
        {0, 16, INFERD_ERR_INVALID_ARG},
        {1, 16, INFERD_ERR_INVALID_ARG},
        {-5, 16, INFERD_ERR_INVALID_ARG},
        {8, 0, INFERD_ERR_INVALID_ARG},
        {8, -1, INFERD_ERR_INVALID_ARG},
        {8, 100000, INFERD_ERR_INVALID_ARG},
        {2, 1, INFERD_OK},
        {100, 16, INFERD_OK},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        kv_pool *p = (kv_pool *)1;
        inferd_status st = kv_pool_init(rows[i].n, rows[i].bs, true, &p);
        ck_assert_msg(st == rows[i].st, "row %zu: status %d", i, st);
        if (st == INFERD_OK) {
            assert_ok(p);
            kv_pool_free(p);
        } else {
            ck_assert_ptr_null(p);
            ck_assert(strlen(inferd_last_error()) > 0);
        }
    }
}
END_TEST

START_TEST(test_alloc_all_and_fail_cleanly)
{
    kv_pool *p = mk(9, 4, true);
    ck_assert_int_eq(kv_pool_num_free(p), 8);
    int32_t ids[8];
    ck_assert_int_eq(kv_pool_alloc(p, 3, ids), INFERD_OK);
    ck_assert_int_eq(kv_pool_alloc(p, 6, ids + 3), INFERD_ERR_NO_BLOCKS);
    ck_assert_int_eq(kv_pool_num_free(p), 5); /* nothing changed */
    assert_ok(p);
    ck_assert_int_eq(kv_pool_alloc(p, 5, ids + 3), INFERD_OK);
    ck_assert_int_eq(kv_pool_num_free(p), 0);
    bool seen[9] = {0};
    for (int i = 0; i < 8; i++) {
        ck_assert_int_ne(ids[i], KV_NULL_BLOCK);
        ck_assert(!seen[ids[i]]);
        seen[ids[i]] = true;
        ck_assert_int_eq(kv_pool_ref_count(p, ids[i]), 1);
    }
    int32_t one;
    ck_assert_int_eq(kv_pool_alloc(p, 1, &one), INFERD_ERR_NO_BLOCKS);
    ck_assert_int_eq(kv_pool_alloc(p, 0, &one), INFERD_OK);
    ck_assert_int_eq(kv_pool_alloc(p, -1, &one), INFERD_ERR_INVALID_ARG);
    int32_t null_id = KV_NULL_BLOCK;
    kv_pool_release(p, &null_id, 1); /* ignored */
    kv_pool_release(p, ids, 8);
    ck_assert_int_eq(kv_pool_num_free(p), 8);
    assert_ok(p);
    kv_pool_free(p);
}
END_TEST

START_TEST(test_lru_order)
{
    kv_pool *p = mk(5, 2, false);
    int32_t a[4], b[4];
    ck_assert_int_eq(kv_pool_alloc(p, 4, a), INFERD_OK);
    /* free in the order 3, 1, 4, 2 (ids a[2], a[0], a[3], a[1]) */
    int32_t order[4] = {a[2], a[0], a[3], a[1]};
    kv_pool_release(p, order, 4);
    ck_assert_int_eq(kv_pool_alloc(p, 4, b), INFERD_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(b[i], order[i]);
    /* shared block returns to the free list only at the last release */
    kv_pool_ref(p, b[0]);
    kv_pool_release(p, &b[0], 1);
    ck_assert_int_eq(kv_pool_num_free(p), 0);
    kv_pool_release(p, &b[0], 1);
    ck_assert_int_eq(kv_pool_num_free(p), 1);
    assert_ok(p);
    kv_pool_release(p, b + 1, 3);
    assert_ok(p);
    kv_pool_free(p);
}
END_TEST

/* Cache `n` full blocks of tokens held in ids[] (chain hashes). */
static void cache_chain(kv_pool *p, const int32_t *ids, const int32_t *tokens, int n, int bs)
{
    kv_hash parent = {0, 0};
    for (int i = 0; i < n; i++) {
        kv_hash h = kv_hash_block(parent, tokens + i * bs, bs);
        kv_pool_cache_block(p, ids[i], parent, h, tokens + i * bs);
        parent = h;
    }
}

START_TEST(test_prefix_cache_hit_evict)
{
    const int bs = 4;
    kv_pool *p = mk(7, bs, true);
    int32_t toks[14];
    for (int i = 0; i < 14; i++)
        toks[i] = 100 + i;
    int32_t ids[4];
    ck_assert_int_eq(kv_pool_alloc(p, 4, ids), INFERD_OK); /* 14 tokens -> 3 full + 1 partial */
    cache_chain(p, ids, toks, 3, bs);
    ck_assert(kv_pool_is_cached(p, ids[0]) && kv_pool_is_cached(p, ids[2]));
    ck_assert(!kv_pool_is_cached(p, ids[3]));
    assert_ok(p);

    /* a second sequence sharing 9 tokens: 2 full blocks hit while held */
    int32_t q[12];
    memcpy(q, toks, sizeof q);
    q[9] = 7;
    int32_t hit[3];
    kv_hash hashes[3];
    int n_hashes = 0;
    ck_assert_int_eq(kv_pool_lookup(p, q, 12, 3, hashes, &n_hashes, hit), 2);
    ck_assert_int_eq(n_hashes, 3); /* computed up to the first miss */
    ck_assert_int_eq(hit[0], ids[0]);
    ck_assert_int_eq(kv_pool_ref_count(p, ids[0]), 2);
    assert_ok(p);
    kv_pool_release(p, hit, 2);

    /* free the owner (last first): hashes survive in the free list */
    for (int i = 3; i >= 0; i--)
        kv_pool_release(p, &ids[i], 1);
    ck_assert_int_eq(kv_pool_num_free(p), 6);
    ck_assert(kv_pool_is_cached(p, ids[0]));
    ck_assert_int_eq(kv_pool_lookup(p, toks, 14, 100, NULL, NULL, hit), 3);
    ck_assert_int_eq(kv_pool_num_free(p), 3); /* hits left the free list */
    assert_ok(p);
    /* max_blocks bounds the lookup */
    kv_pool_release(p, hit, 3);
    ck_assert_int_eq(kv_pool_lookup(p, toks, 14, 1, NULL, NULL, hit), 1);
    kv_pool_release(p, hit, 1);

    /* allocate everything: cached blocks are evicted when reused */
    int32_t all[6];
    ck_assert_int_eq(kv_pool_alloc(p, 6, all), INFERD_OK);
    for (int i = 0; i < 6; i++)
        ck_assert(!kv_pool_is_cached(p, all[i]));
    kv_pool_stats st;
    kv_pool_get_stats(p, &st);
    ck_assert_int_eq(st.n_cached, 0);
    ck_assert_int_eq((int)st.evictions, 3);
    kv_pool_release(p, all, 6);
    ck_assert_int_eq(kv_pool_lookup(p, toks, 14, 100, NULL, NULL, hit), 0);
    assert_ok(p);
    kv_pool_free(p);
}
END_TEST

START_TEST(test_duplicate_and_disabled)
{
    const int bs = 2;
    kv_pool *p = mk(6, bs, true);
    int32_t toks[2] = {5, 6};
    int32_t a, b;
    ck_assert_int_eq(kv_pool_alloc(p, 1, &a), INFERD_OK);
    ck_assert_int_eq(kv_pool_alloc(p, 1, &b), INFERD_OK);
    kv_hash z = {0, 0};
    kv_hash h = kv_hash_block(z, toks, bs);
    ck_assert(kv_pool_cache_block(p, a, z, h, toks));
    ck_assert(kv_pool_cache_block(p, a, z, h, toks));  /* idempotent */
    ck_assert(!kv_pool_cache_block(p, b, z, h, toks)); /* duplicate refused */
    ck_assert(!kv_pool_is_cached(p, b));
    assert_ok(p);
    kv_pool_release(p, &a, 1);
    kv_pool_release(p, &b, 1);
    kv_pool_reset_cache(p);
    ck_assert(!kv_pool_is_cached(p, a));
    assert_ok(p);
    kv_pool_free(p);

    p = mk(6, bs, false);
    ck_assert_int_eq(kv_pool_alloc(p, 1, &a), INFERD_OK);
    ck_assert(!kv_pool_cache_block(p, a, z, h, toks));
    int32_t hit[1];
    ck_assert_int_eq(kv_pool_lookup(p, toks, 2, 1, NULL, NULL, hit), 0);
    kv_pool_release(p, &a, 1);
    assert_ok(p);
    kv_pool_free(p);
}
END_TEST

/* A forged registration (hash of other tokens) stands in for a hash
 * collision: the token comparison must turn it into a miss. */
START_TEST(test_collision_is_a_miss)
{
    const int bs = 3;
    kv_pool *p = mk(4, bs, true);
    int32_t t1[3] = {1, 2, 3}, t2[3] = {9, 9, 9};
    kv_hash z = {0, 0};
    int32_t a, hit[1];
    ck_assert_int_eq(kv_pool_alloc(p, 1, &a), INFERD_OK);
    ck_assert(kv_pool_cache_block(p, a, z, kv_hash_block(z, t2, bs), t1));
    ck_assert_int_eq(kv_pool_lookup(p, t2, 3, 1, NULL, NULL, hit), 0);
    ck_assert_int_eq(kv_pool_ref_count(p, a), 1);
    kv_pool_release(p, &a, 1);
    kv_pool_free(p);

    /* same tokens under a different parent: the parent check rejects */
    p = mk(4, bs, true);
    ck_assert_int_eq(kv_pool_alloc(p, 1, &a), INFERD_OK);
    kv_hash other = {1, 2};
    ck_assert(kv_pool_cache_block(p, a, other, kv_hash_block(z, t1, bs), t1));
    ck_assert_int_eq(kv_pool_lookup(p, t1, 3, 1, NULL, NULL, hit), 0);
    kv_pool_release(p, &a, 1);
    kv_pool_free(p);
}
END_TEST

START_TEST(test_hash_properties)
{
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    kv_hash z = {0, 0};
    kv_hash h1 = kv_hash_block(z, t, 8);
    ck_assert(kv_hash_eq(h1, kv_hash_block(z, t, 8)));
    t[7] = 9;
    ck_assert(!kv_hash_eq(h1, kv_hash_block(z, t, 8)));
    t[7] = 8;
    ck_assert(!kv_hash_eq(h1, kv_hash_block(h1, t, 8)));
    ck_assert(!kv_hash_eq(kv_hash_block(z, t, 4), kv_hash_block(z, t + 4, 4)));
    /* both lanes change with a single token */
    kv_hash a = kv_hash_block(z, t, 1);
    int32_t u = 2;
    kv_hash b = kv_hash_block(z, &u, 1);
    ck_assert(a.lo != b.lo && a.hi != b.hi);
}
END_TEST

/* --- randomized property test ------------------------------------------- */

#define P_BLOCKS 48
#define P_BS 4
#define P_SEQS 10
#define P_MAXB 12

typedef struct {
    bool live;
    int n_tokens, n_blocks, n_cached;
    int32_t tokens[P_MAXB * P_BS];
    int32_t blocks[P_MAXB];
} shadow_seq;

typedef struct {
    kv_pool *p;
    shadow_seq seq[P_SEQS];
    int32_t content[P_BLOCKS][P_BS]; /* what each block "holds" (written by its allocator) */
    uint64_t rng_ctr, seed;
    int n_hits, n_alloc_fail, n_evict_ops;
} world;

static uint32_t rnd(world *w, uint32_t n)
{
    return (uint32_t)(rng_uniform(w->seed, w->rng_ctr++) * n);
}

static void world_check(world *w)
{
    assert_ok(w->p);
    int refs[P_BLOCKS] = {0};
    for (int s = 0; s < P_SEQS; s++)
        for (int i = 0; w->seq[s].live && i < w->seq[s].n_blocks; i++)
            refs[w->seq[s].blocks[i]]++;
    int used = 0;
    for (int b = 1; b < P_BLOCKS; b++) {
        ck_assert_int_eq(refs[b], kv_pool_ref_count(w->p, b));
        used += refs[b] > 0;
    }
    ck_assert_int_eq(kv_pool_num_free(w->p), P_BLOCKS - 1 - used);
}

/* Write the seq's tokens into the shadow content of newly owned blocks. */
static void seq_write(world *w, shadow_seq *q, int from_block)
{
    for (int i = from_block; i < q->n_blocks; i++)
        for (int j = 0; j < P_BS; j++) {
            int t = i * P_BS + j;
            w->content[q->blocks[i]][j] = t < q->n_tokens ? q->tokens[t] : -1;
        }
}

static void op_new_seq(world *w, int s)
{
    shadow_seq *q = &w->seq[s];
    memset(q, 0, sizeof *q);
    /* tokens from a tiny alphabet with a common stem so prefixes are shared */
    q->n_tokens = 1 + (int)rnd(w, P_MAXB * P_BS);
    int stem = (int)rnd(w, 3), stem_len = 8 * (int)rnd(w, 4);
    for (int i = 0; i < q->n_tokens; i++)
        q->tokens[i] = i < stem_len ? stem * 10 + i : (int32_t)rnd(w, 3);
    int free_before = kv_pool_num_free(w->p);
    int hits = kv_pool_lookup(w->p, q->tokens, q->n_tokens, (q->n_tokens - 1) / P_BS, NULL, NULL, q->blocks);
    for (int i = 0; i < hits; i++)
        ck_assert_msg(memcmp(w->content[q->blocks[i]], q->tokens + i * P_BS, sizeof(int32_t) * P_BS) == 0,
                      "hit block %d holds other tokens", q->blocks[i]);
    w->n_hits += hits;
    q->n_blocks = hits;
    q->n_cached = hits;
    int want = INFERD_CEIL_DIV(q->n_tokens, P_BS);
    if (kv_pool_alloc(w->p, want - hits, q->blocks + hits) != INFERD_OK) {
        for (int i = hits - 1; i >= 0; i--)
            kv_pool_release(w->p, &q->blocks[i], 1);
        ck_assert_int_eq(kv_pool_num_free(w->p), free_before);
        w->n_alloc_fail++;
        return;
    }
    q->n_blocks = want;
    q->live = true;
    seq_write(w, q, hits);
}

static void op_cache(world *w, shadow_seq *q)
{
    int n_full = q->n_tokens / P_BS;
    kv_hash parent = {0, 0};
    for (int i = 0; i < n_full; i++) {
        kv_hash h = kv_hash_block(parent, q->tokens + i * P_BS, P_BS);
        if (i >= q->n_cached)
            kv_pool_cache_block(w->p, q->blocks[i], parent, h, q->tokens + i * P_BS);
        parent = h;
    }
    q->n_cached = n_full;
}

static void op_grow(world *w, shadow_seq *q)
{
    int add = 1 + (int)rnd(w, 6);
    if (q->n_tokens + add > P_MAXB * P_BS)
        return;
    int want = INFERD_CEIL_DIV(q->n_tokens + add, P_BS);
    int free_before = kv_pool_num_free(w->p);
    if (kv_pool_alloc(w->p, want - q->n_blocks, q->blocks + q->n_blocks) != INFERD_OK) {
        ck_assert_int_eq(kv_pool_num_free(w->p), free_before);
        w->n_alloc_fail++;
        return;
    }
    int old_blocks = q->n_blocks;
    for (int i = 0; i < add; i++)
        q->tokens[q->n_tokens + i] = (int32_t)rnd(w, 3);
    q->n_tokens += add;
    q->n_blocks = want;
    /* the partial last block was ours alone (never cached): rewrite it too */
    seq_write(w, q, old_blocks > 0 ? old_blocks - 1 : 0);
}

static void op_release(world *w, shadow_seq *q)
{
    for (int i = q->n_blocks - 1; i >= 0; i--)
        kv_pool_release(w->p, &q->blocks[i], 1);
    q->live = false;
}

static void op_fork(world *w, shadow_seq *src, shadow_seq *dst)
{
    /* share only full blocks (a partial block would be written by both) */
    int n = src->n_tokens / P_BS;
    if (n == 0)
        return;
    memset(dst, 0, sizeof *dst);
    for (int i = 0; i < n; i++) {
        kv_pool_ref(w->p, src->blocks[i]);
        dst->blocks[i] = src->blocks[i];
    }
    memcpy(dst->tokens, src->tokens, sizeof(int32_t) * n * P_BS);
    dst->n_tokens = n * P_BS;
    dst->n_blocks = n;
    dst->live = true;
}

static void run_property(uint64_t seed, int n_ops)
{
    world *w = inferd_calloc(1, sizeof *w);
    w->seed = seed;
    ck_assert_int_eq(kv_pool_init(P_BLOCKS, P_BS, true, &w->p), INFERD_OK);
    for (int op = 0; op < n_ops; op++) {
        int s = (int)rnd(w, P_SEQS);
        shadow_seq *q = &w->seq[s];
        uint32_t kind = rnd(w, 100);
        if (!q->live) {
            if (kind < 15) {
                int src = (int)rnd(w, P_SEQS);
                if (w->seq[src].live && src != s)
                    op_fork(w, &w->seq[src], q);
            } else {
                op_new_seq(w, s);
            }
        } else if (kind < 35) {
            op_cache(w, q);
        } else if (kind < 60) {
            op_grow(w, q);
        } else if (kind < 99) {
            op_release(w, q);
        } else {
            kv_pool_reset_cache(w->p);
            w->n_evict_ops++;
        }
        world_check(w);
    }
    for (int s = 0; s < P_SEQS; s++)
        if (w->seq[s].live)
            op_release(w, &w->seq[s]);
    world_check(w);
    ck_assert_int_eq(kv_pool_num_free(w->p), P_BLOCKS - 1);
    kv_pool_stats st;
    kv_pool_get_stats(w->p, &st);
    printf("property seed %llu: %d ops, %d hit blocks, %d failed allocs, %llu evictions, "
           "%d cached at end\n",
           (unsigned long long)seed, n_ops, w->n_hits, w->n_alloc_fail, (unsigned long long)st.evictions,
           st.n_cached);
    ck_assert_int_gt(w->n_hits, 0);
    ck_assert_int_gt(w->n_alloc_fail, 0);
    ck_assert_int_gt((int)st.evictions, 0);
    kv_pool_free(w->p);
    inferd_free(w);
}

START_TEST(test_property_random_ops)
{
    for (uint64_t seed = 1; seed <= 4; seed++)
        run_property(seed, 10000);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_pool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_init_errors);
    tcase_add_test(tc, test_alloc_all_and_fail_cleanly);
    tcase_add_test(tc, test_lru_order);
    tcase_add_test(tc, test_prefix_cache_hit_evict);
    tcase_add_test(tc, test_duplicate_and_disabled);
    tcase_add_test(tc, test_collision_is_a_miss);
    tcase_add_test(tc, test_hash_properties);
    tcase_add_test(tc, test_property_random_ops);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
