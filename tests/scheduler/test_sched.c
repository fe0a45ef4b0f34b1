/* tests/scheduler/test_sched.c: the scheduling policy driven by a fake
 * model. The fake model keeps a host "KV cache" of token ids: each step it
 * writes the scheduled tokens through the block tables (like rope_kv_write)
 * and, for rows that sample, reads the whole context back through the block
 * table and returns a hash of it as the next token. Any wrong block table,
 * bad prefix-cache hit or broken recompute after preemption therefore
 * changes the output, which is compared with each request run alone.
 *
 * Covers: rejection of impossible requests, the token budget and chunked
 * prefill, max_num_seqs, FCFS admission, preemption order, abort in every
 * state, prefix-cache hits, no starvation under a steady arrival stream, a
 * randomized stress run; sched_check after every step and every block back
 * in the free list at the end of each test. */
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "common/util.h"
#include "scheduler/sched.h"
#include "test_util.h"

#define MAX_REQ 256

typedef struct {
    kv_pool *pool;
    sched *s;
    int bs;
    int32_t *kv;              /* [n_blocks, bs] fake KV: token ids */
    sched_req *live[MAX_REQ]; /* by request index */
    int32_t *out[MAX_REQ];    /* generated tokens per request index */
    int n_out[MAX_REQ];
    int finish_step[MAX_REQ];
    int admit_order[MAX_REQ], n_admitted;
    int n_steps, n_preempted, max_step_tokens;
    sched_opts o;
} harness;

static void assert_inv(const harness *h)
{
    char msg[256];
    ck_assert_msg(sched_check(h->s, msg, sizeof msg), "invariant: %s", msg);
}

static void h_init(harness *h, int n_blocks, int bs, bool caching, int max_seqs, int max_tokens, int max_len)
{
    memset(h, 0, sizeof *h);
    h->bs = bs;
    ck_assert_int_eq(kv_pool_init(n_blocks, bs, caching, &h->pool), INFERD_OK);
    h->o.max_num_seqs = max_seqs;
    h->o.max_num_batched_tokens = max_tokens;
    h->o.max_model_len = max_len;
    ck_assert_int_eq(sched_init(&h->o, h->pool, &h->s), INFERD_OK);
    h->kv = inferd_calloc((size_t)n_blocks * bs, sizeof *h->kv);
    for (int i = 0; i < MAX_REQ; i++)
        h->finish_step[i] = -1;
}

/* Everything must be back in the free list. */
static void h_free(harness *h)
{
    ck_assert(!sched_has_work(h->s));
    assert_inv(h);
    ck_assert_int_eq(kv_pool_num_free(h->pool), kv_pool_num_usable(h->pool));
    sched_free(h->s);
    kv_pool_free(h->pool);
    inferd_free(h->kv);
    for (int i = 0; i < MAX_REQ; i++)
        inferd_free(h->out[i]);
}

static intptr_t req_index(const sched_req *r)
{
    return (intptr_t)r->user;
}

static sched_req *h_add(harness *h, int idx, const int32_t *prompt, int n, int max_tokens)
{
    sched_req *r = NULL;
    ck_assert_int_eq(sched_add(h->s, (uint64_t)idx, prompt, n, max_tokens, (void *)(intptr_t)idx, &r),
                     INFERD_OK);
    h->live[idx] = r;
    h->out[idx] = inferd_calloc((size_t)max_tokens, sizeof(int32_t));
    return r;
}

/* The fake forward + sample for one item. */
static int32_t fake_model(harness *h, const sched_item *it)
{
    const sched_req *r = it->req;
    for (int pos = it->start; pos < it->start + it->n_new; pos++)
        h->kv[(size_t)r->blocks[pos / h->bs] * h->bs + pos % h->bs] = r->tokens[pos];
    uint64_t x = 0x1234;
    int n_ctx = it->start + it->n_new;
    for (int pos = 0; pos < n_ctx; pos++) {
        int32_t t = h->kv[(size_t)r->blocks[pos / h->bs] * h->bs + pos % h->bs];
        ck_assert_msg(t == r->tokens[pos], "req %llu pos %d: KV holds %d, token is %d",
                      (unsigned long long)r->id, pos, t, r->tokens[pos]);
        x = rng_mix64(x ^ (uint64_t)t);
    }
    return (int32_t)(3 + x % 50);
}

/* Commit out, then append each sampled row's token tok[i]; a request at
 * its cap finishes (removed; its item in `ahead`, the step planned after
 * out if any, is cleared first, as the engine does). */
static void h_accept(harness *h, const sched_output *out, const int32_t *tok, sched_output *ahead)
{
    sched_commit(h->s, out);
    for (int i = 0; i < out->n_items; i++) {
        sched_req *r = out->items[i].req;
        if (!r || !out->items[i].sample)
            continue;
        int idx = (int)req_index(r);
        sched_append_token(h->s, r, tok[i]);
        h->out[idx][h->n_out[idx]++] = tok[i];
        if (r->n_total == r->cap) {
            for (int j = 0; ahead && j < ahead->n_items; j++)
                if (ahead->items[j].req == r)
                    ahead->items[j].req = NULL;
            h->finish_step[idx] = h->n_steps;
            h->live[idx] = NULL;
            sched_remove(h->s, r);
        }
    }
    assert_inv(h);
}

/* One engine-like step; returns the number of items. */
static int h_step(harness *h)
{
    sched_output out;
    sched_step(h->s, &out);
    assert_inv(h);
    ck_assert_int_le(out.n_tokens, h->o.max_num_batched_tokens);
    ck_assert_int_le(out.n_items, h->o.max_num_seqs);
    h->n_preempted += out.n_preempted;
    h->max_step_tokens = INFERD_MAX(h->max_step_tokens, out.n_tokens);
    int32_t next[MAX_REQ];
    for (int i = 0; i < out.n_items; i++) {
        const sched_item *it = &out.items[i];
        ck_assert_int_eq(it->start, it->req->n_computed);
        ck_assert(it->n_new >= 1);
        if (out.items[i].req->n_computed == 0 && !it->req->admitted_once)
            ck_abort_msg("scheduled but never admitted");
        next[i] = fake_model(h, it);
    }
    for (int i = 0; i < out.n_admitted; i++) {
        sched_req *r = out.items[out.n_items - out.n_admitted + i].req;
        if (r->n_preemptions == 0 && h->n_admitted < MAX_REQ)
            h->admit_order[h->n_admitted++] = (int)req_index(r);
    }
    h_accept(h, &out, next, NULL);
    h->n_steps++;
    return out.n_items;
}

static void h_run(harness *h, int max_steps)
{
    for (int i = 0; i < max_steps && sched_has_work(h->s); i++)
        h_step(h);
    ck_assert_msg(!sched_has_work(h->s), "still busy after %d steps", max_steps);
}

static void make_prompt(int32_t *p, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++)
        p[i] = (int32_t)(60 + rng_mix64(seed * 1000 + (uint64_t)i) % 400);
}

/* Tokens a request gets when it runs alone in a roomy engine. */
static void solo(const int32_t *prompt, int n, int max_tokens, int32_t *out)
{
    harness h;
    h_init(&h, 256, 4, false, 4, 4096, 4096);
    h_add(&h, 0, prompt, n, max_tokens);
    h_run(&h, 10000);
    ck_assert_int_eq(h.n_out[0], max_tokens);
    memcpy(out, h.out[0], sizeof(int32_t) * max_tokens);
    h_free(&h);
}

START_TEST(test_reject_table)
{
    harness h;
    h_init(&h, 11, 4, true, 4, 64, 50); /* 10 usable blocks = 40 tokens */
    int32_t p[64] = {0};
    static const struct {
        int n_prompt, max_tokens;
        inferd_status st;
        const char *needle1, *needle2;
    } rows[] = {
        {0, 5, INFERD_ERR_INVALID_ARG, "empty", NULL},
        {-1, 5, INFERD_ERR_INVALID_ARG, "empty", NULL},
        {5, 0, INFERD_ERR_INVALID_ARG, "max_tokens", NULL},
        {5, -3, INFERD_ERR_INVALID_ARG, "max_tokens", NULL},
        {40, 11, INFERD_ERR_TOO_LONG, "51", "50"},                  /* beyond max_model_len */
        {30, 12, INFERD_ERR_TOO_LONG, "11 KV blocks", "10 blocks"}, /* 41 KV tokens > 40 */
        {30, 11, INFERD_OK, NULL, NULL},                            /* 40 KV tokens: exactly fits */
        {1, 1, INFERD_OK, NULL, NULL},
    };
    for (size_t i = 0; i < INFERD_ARRAY_LEN(rows); i++) {
        sched_req *r = (sched_req *)1;
        inferd_status st = sched_add(h.s, i, p, rows[i].n_prompt, rows[i].max_tokens, NULL, &r);
        ck_assert_msg(st == rows[i].st, "row %zu: status %d (%s)", i, st, inferd_last_error());
        if (st != INFERD_OK) {
            ck_assert_ptr_null(r);
            if (rows[i].needle1)
                ck_assert_msg(strstr(inferd_last_error(), rows[i].needle1), "row %zu: '%s'", i,
                              inferd_last_error());
            if (rows[i].needle2)
                ck_assert_msg(strstr(inferd_last_error(), rows[i].needle2), "row %zu: '%s'", i,
                              inferd_last_error());
        } else {
            sched_remove(h.s, r);
        }
    }
    assert_inv(&h);
    h_free(&h);
}
END_TEST

START_TEST(test_budget_and_chunking)
{
    harness h;
    h_init(&h, 64, 4, false, 8, 8, 1000);
    int32_t p[20];
    make_prompt(p, 20, 1);
    sched_req *r = h_add(&h, 0, p, 20, 3);
    int expect[] = {8, 8, 4, 1, 1};
    for (size_t i = 0; i < INFERD_ARRAY_LEN(expect); i++) {
        int before = r->n_computed;
        h_step(&h);
        if (h.live[0])
            ck_assert_int_eq(r->n_computed - before, expect[i]);
    }
    ck_assert_int_eq(h.n_out[0], 3);
    int32_t ref[3];
    solo(p, 20, 3, ref);
    ck_assert_mem_eq(h.out[0], ref, sizeof ref);

    /* decodes go first; a new prompt gets the remaining budget */
    int32_t q[30];
    make_prompt(q, 30, 2);
    h_add(&h, 1, q, 5, 10);
    h_step(&h); /* prompt of 5 */
    h_step(&h); /* decode */
    h_add(&h, 2, q, 30, 2);
    sched_output out;
    sched_step(h.s, &out);
    ck_assert_int_eq(out.n_items, 2);
    ck_assert_int_eq((int)req_index(out.items[0].req), 1);
    ck_assert_int_eq(out.items[0].n_new, 1);
    ck_assert_int_eq((int)req_index(out.items[1].req), 2);
    ck_assert_int_eq(out.items[1].n_new, 7);
    ck_assert(!out.items[1].sample);
    /* finish this step by hand, then run to the end */
    int32_t t0 = fake_model(&h, &out.items[0]);
    fake_model(&h, &out.items[1]); /* writes its KV; no sample */
    sched_commit(h.s, &out);
    sched_append_token(h.s, out.items[0].req, t0);
    h.out[1][h.n_out[1]++] = out.items[0].req->tokens[out.items[0].req->n_total - 1];
    h_run(&h, 1000);
    int32_t ref1[10], ref2[2];
    solo(q, 5, 10, ref1);
    solo(q, 30, 2, ref2);
    ck_assert_mem_eq(h.out[1], ref1, sizeof ref1);
    ck_assert_mem_eq(h.out[2], ref2, sizeof ref2);
    ck_assert_int_le(h.max_step_tokens, 8);
    h_free(&h);
}
END_TEST

START_TEST(test_fcfs_and_max_seqs)
{
    harness h;
    h_init(&h, 128, 4, false, 2, 64, 1000);
    int32_t p[8];
    for (int i = 0; i < 6; i++) {
        make_prompt(p, 8, 10 + i);
        h_add(&h, i, p, 8, 4 + i);
    }
    h_run(&h, 1000);
    ck_assert_int_eq(h.n_admitted, 6);
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(h.admit_order[i], i);
    /* with 2 seats, request 2 starts only after 0 finishes */
    ck_assert_int_lt(h.finish_step[0], h.finish_step[2]);
    ck_assert_int_lt(h.finish_step[0], h.finish_step[1]);
    h_free(&h);
}
END_TEST

START_TEST(test_preemption_order)
{
    /* 12 usable blocks of 4 tokens. Three requests of 8-token prompts, 16 new
     * tokens each (24 tokens = 6 blocks at the end) cannot all fit. */
    harness h;
    h_init(&h, 13, 4, false, 8, 64, 1000);
    int32_t p[3][8];
    for (int i = 0; i < 3; i++) {
        make_prompt(p[i], 8, 20 + i);
        h_add(&h, i, p[i], 8, 17);
    }
    bool saw_victim = false;
    while (sched_has_work(h.s)) {
        int before = h.n_preempted;
        h_step(&h);
        if (h.n_preempted > before && !saw_victim) {
            /* the first victim is the newest admitted: request 2, at the front */
            sched_req *w = sched_waiting_head(h.s);
            ck_assert_ptr_nonnull(w);
            ck_assert_int_eq((int)req_index(w), 2);
            ck_assert_int_eq(w->state, REQ_STATE_PREEMPTED);
            ck_assert_int_eq(w->n_blocks, 0);
            ck_assert_int_gt(w->n_total, w->n_prompt); /* keeps its tokens */
            saw_victim = true;
        }
        ck_assert_int_lt(h.n_steps, 2000);
    }
    printf("preemption test: %d preemptions in %d steps\n", h.n_preempted, h.n_steps);
    ck_assert(saw_victim);
    for (int i = 0; i < 3; i++) {
        int32_t ref[17];
        solo(p[i], 8, 17, ref);
        ck_assert_mem_eq(h.out[i], ref, sizeof ref);
    }
    ck_assert_int_lt(h.finish_step[0], h.finish_step[2]);
    h_free(&h);
}
END_TEST

START_TEST(test_abort_every_state)
{
    harness h;
    h_init(&h, 13, 4, true, 2, 6, 1000);
    int32_t p[4][12];
    for (int i = 0; i < 4; i++)
        make_prompt(p[i], 12, 30 + i);
    /* waiting, never admitted */
    sched_req *r0 = h_add(&h, 0, p[0], 12, 4);
    sched_remove(h.s, r0);
    h.live[0] = NULL;
    assert_inv(&h);
    ck_assert_int_eq(kv_pool_num_free(h.pool), 12);
    /* running mid-prefill (budget 6 < prompt 12) */
    sched_req *r1 = h_add(&h, 1, p[1], 12, 4);
    h_step(&h);
    ck_assert_int_eq(r1->state, REQ_STATE_RUNNING);
    ck_assert_int_eq(r1->n_computed, 6);
    sched_remove(h.s, r1);
    h.live[1] = NULL;
    assert_inv(&h);
    ck_assert_int_eq(kv_pool_num_free(h.pool), 12);
    /* running in decode */
    sched_req *r2 = h_add(&h, 2, p[2], 4, 20);
    h_step(&h);
    h_step(&h);
    ck_assert_int_gt(r2->n_total, r2->n_prompt);
    sched_remove(h.s, r2);
    h.live[2] = NULL;
    ck_assert_int_eq(kv_pool_num_free(h.pool), 12);
    assert_inv(&h);
    /* preempted: fill the pool with two long requests until one is preempted */
    sched_req *a = h_add(&h, 3, p[3], 12, 30);
    sched_req *b = h_add(&h, 4, p[2], 12, 30);
    while (b->state != REQ_STATE_PREEMPTED && a->state != REQ_STATE_PREEMPTED)
        h_step(&h);
    sched_req *victim = b->state == REQ_STATE_PREEMPTED ? b : a;
    ck_assert_ptr_eq(victim, b); /* the newest */
    sched_remove(h.s, victim);
    h.live[4] = NULL;
    assert_inv(&h);
    h_run(&h, 1000);
    int32_t ref[30];
    solo(p[3], 12, 30, ref);
    ck_assert_mem_eq(h.out[3], ref, sizeof ref);
    h_free(&h);
}
END_TEST

START_TEST(test_prefix_cache_hits)
{
    const int n = 8, plen = 37;
    int32_t prompts[8][40];
    int32_t base[40];
    make_prompt(base, plen, 99);
    for (int i = 0; i < n; i++) {
        memcpy(prompts[i], base, sizeof base);
        prompts[i][plen - 1 - i % 3] = 500 + i; /* differ near the end */
    }
    int32_t outs[2][8][6];
    uint64_t hits = 0;
    for (int caching = 0; caching < 2; caching++) {
        harness h;
        h_init(&h, 200, 4, caching, 4, 64, 1000);
        for (int i = 0; i < n; i++)
            h_add(&h, i, prompts[i], plen, 6);
        h_run(&h, 1000);
        for (int i = 0; i < n; i++)
            memcpy(outs[caching][i], h.out[i], sizeof outs[0][0]);
        sched_stats st;
        sched_get_stats(h.s, &st);
        if (caching)
            hits = st.prefix_hits;
        h_free(&h);
    }
    printf("prefix cache test: %llu tokens served from the cache\n", (unsigned long long)hits);
    ck_assert_int_gt((int)hits, 0);
    ck_assert_mem_eq(outs[0], outs[1], sizeof outs[0]);

    /* an identical prompt of whole blocks: all but the last block hit */
    harness h;
    h_init(&h, 64, 4, true, 4, 64, 1000);
    h_add(&h, 0, base, 16, 2);
    h_run(&h, 100);
    sched_req *r = h_add(&h, 1, base, 16, 2);
    sched_output out;
    sched_step(h.s, &out);
    ck_assert_int_eq(r->cached_tokens, 12);
    ck_assert_int_eq(out.items[0].start, 12);
    ck_assert_int_eq(out.items[0].n_new, 4);
    sched_remove(h.s, r);
    h_free(&h);
}
END_TEST

START_TEST(test_no_starvation)
{
    /* a steady stream: a new request every step; every request must finish,
     * in arrival order for equal lengths, within a bounded delay */
    harness h;
    h_init(&h, 41, 4, true, 4, 16, 1000);
    const int n_req = 200;
    int arrival[MAX_REQ];
    for (int i = 0; i < n_req; i++) {
        int32_t p[10];
        make_prompt(p, 10, 500 + i);
        arrival[i] = h.n_steps;
        h_add(&h, i, p, 10, 8);
        h_step(&h);
    }
    h_run(&h, 100000);
    int max_delay = 0;
    for (int i = 0; i < n_req; i++) {
        ck_assert_int_ge(h.finish_step[i], 0);
        if (i > 0)
            ck_assert_int_ge(h.finish_step[i], h.finish_step[i - 1]);
        max_delay = INFERD_MAX(max_delay, h.finish_step[i] - arrival[i]);
    }
    printf("no-starvation test: %d requests, %d steps, max delay %d steps, %d preemptions\n", n_req,
           h.n_steps, max_delay, h.n_preempted);
    h_free(&h);

    /* one long request amid a stream of short ones in a tight pool: being
     * the oldest it is never preempted and gets a token every step */
    h_init(&h, 41, 4, false, 4, 16, 1000);
    int32_t lp[10];
    make_prompt(lp, 10, 7);
    sched_req *lr = h_add(&h, 0, lp, 10, 100);
    for (int i = 1; i < 150; i++) {
        int32_t p[10];
        make_prompt(p, 10, 900 + i);
        h_add(&h, i, p, 10, 3 + i % 20);
        h_step(&h);
        if (h.live[0])
            ck_assert_int_eq(lr->n_preemptions, 0);
    }
    h_run(&h, 100000);
    printf("no-starvation test (long + stream): long request done at step %d, %d preemptions of "
           "newer requests\n",
           h.finish_step[0], h.n_preempted);
    ck_assert_int_le(h.finish_step[0], 100 + 1);
    ck_assert_int_gt(h.n_preempted, 0);
    h_free(&h);
}
END_TEST

/* Random prompts (some sharing prefixes), random limits, random aborts;
 * every finished request must match its solo run. */
static void stress(uint64_t seed)
{
    harness h;
    int bs = 1 + (int)(rng_uniform(seed, 1) * 6);
    int max_len = 64;
    int min_blocks = INFERD_CEIL_DIV(max_len, bs) + 1;
    int n_blocks = min_blocks + (int)(rng_uniform(seed, 2) * 3 * min_blocks);
    int max_seqs = 1 + (int)(rng_uniform(seed, 3) * 8);
    int max_tok = 1 + (int)(rng_uniform(seed, 4) * 40);
    bool caching = rng_uniform(seed, 5) < 0.7;
    h_init(&h, n_blocks, bs, caching, max_seqs, max_tok, max_len);
    const int n_req = 40;
    int32_t prompts[40][64];
    int plen[40], mt[40];
    bool aborted[40] = {0};
    uint64_t c = 100;
    for (int i = 0; i < n_req; i++) {
        plen[i] = 1 + (int)(rng_uniform(seed, c++) * 40);
        mt[i] = 1 + (int)(rng_uniform(seed, c++) * (max_len - plen[i]));
        make_prompt(prompts[i], plen[i], seed * 7 + (uint64_t)(i % 5));
    }
    int next = 0;
    while (next < n_req || sched_has_work(h.s)) {
        while (next < n_req && rng_uniform(seed, c++) < 0.4) {
            h_add(&h, next, prompts[next], plen[next], mt[next]);
            next++;
        }
        if (next < n_req && !sched_has_work(h.s)) {
            h_add(&h, next, prompts[next], plen[next], mt[next]);
            next++;
        }
        if (rng_uniform(seed, c++) < 0.05) {
            int k = (int)(rng_uniform(seed, c++) * next);
            if (h.live[k]) {
                sched_remove(h.s, h.live[k]);
                h.live[k] = NULL;
                aborted[k] = true;
                assert_inv(&h);
            }
        }
        if (sched_has_work(h.s))
            h_step(&h);
        ck_assert_int_lt(h.n_steps, 100000);
    }
    int n_checked = 0;
    for (int i = 0; i < n_req; i++) {
        if (aborted[i])
            continue;
        int32_t ref[64];
        solo(prompts[i], plen[i], mt[i], ref);
        ck_assert_int_eq(h.n_out[i], mt[i]);
        ck_assert_msg(memcmp(h.out[i], ref, sizeof(int32_t) * mt[i]) == 0, "seed %llu req %d differs",
                      (unsigned long long)seed, i);
        n_checked++;
    }
    sched_stats st;
    sched_get_stats(h.s, &st);
    printf("stress seed %llu: bs %d blocks %d seqs %d budget %d caching %d: %d steps, %llu "
           "preemptions, %llu/%llu prefix tokens hit, %d checked\n",
           (unsigned long long)seed, bs, n_blocks, max_seqs, max_tok, caching, h.n_steps,
           (unsigned long long)st.preemptions, (unsigned long long)st.prefix_hits,
           (unsigned long long)st.prefix_queries, n_checked);
    h_free(&h);
}

/* Any request may join a step planned ahead; or those of even index only. */
static bool admit_any(const sched_req *r, void *user)
{
    (void)r;
    (void)user;
    return true;
}

static bool admit_even(const sched_req *r, void *user)
{
    (void)user;
    return req_index(r) % 2 == 0;
}

/* One engine-like run with async scheduling (sched_step_ahead): each step
 * is planned before the previous one's commit, the tokens it samples not
 * yet appended (the fake model computes them first, as the device would),
 * admitting waiting requests (those admit takes; a waiting head it refuses
 * breaks the chain, as the engine's can_chain does); a request that
 * finishes has its item in the step ahead cleared before it is removed.
 * Returns the steps planned ahead; *refused counts the plans that ran out
 * of blocks. */
static int ahead_run(harness *h, int max_steps, sched_admit_fn admit, int *refused)
{
    sched_output prev, next;
    bool have = false;
    int ahead = 0;
    int32_t tok[MAX_REQ];
    *refused = 0;
    for (int n = 0; n < max_steps && (have || sched_has_work(h->s)); n++) {
        if (!have)
            sched_step(h->s, &prev);
        for (int i = 0; i < prev.n_items; i++)
            if (prev.items[i].req)
                tok[i] = fake_model(h, &prev.items[i]);
        const sched_req *head = sched_waiting_head(h->s);
        bool ok = !(head && admit && !admit(head, NULL)) && sched_step_ahead(h->s, &prev, &next, admit, NULL);
        if (!ok && !(head && admit && !admit(head, NULL))) {
            ck_assert_int_eq(next.n_items, 0);
            (*refused)++;
        }
        assert_inv(h); /* a block one token past n_total is allowed */
        for (int j = 0; ok && j < next.n_items; j++) {
            const sched_item *it = &next.items[j];
            if (it->from < 0)
                continue;
            const sched_item *p = &prev.items[it->from];
            ck_assert(it->req == p->req && p->sample && it->start == p->start + p->n_new && it->n_new == 1 &&
                      it->sample);
            ck_assert_int_ge(it->req->n_blocks * h->bs, it->start + 1);
        }
        h_accept(h, &prev, tok, ok ? &next : NULL);
        have = ok && next.n_items > 0;
        ahead += have;
        if (have)
            prev = next;
    }
    ck_assert_msg(!have && !sched_has_work(h->s), "still busy after %d steps", max_steps);
    return ahead;
}

/* sched_step_ahead: every request's tokens equal its run alone: with
 * requests admitted into steps planned ahead (a budget of 20 tokens, so
 * their prompts come in chunks, some planned ahead too), with only some
 * admitted ahead, and with a pool so small that planning ahead runs out
 * of blocks (it then returns false and the next step is planned normally,
 * preempting); requests whose next token is their last get no item. */
START_TEST(test_step_ahead)
{
    enum { N = 12 };
    static int32_t prompts[N][40], alone[N][64];
    int lens[N], maxt[N];
    for (int i = 0; i < N; i++) {
        lens[i] = 3 + (i * 7) % 30;
        maxt[i] = 1 + (i * 11) % 40;
        make_prompt(prompts[i], lens[i], 70 + (uint64_t)i);
        solo(prompts[i], lens[i], maxt[i], alone[i]);
    }
    const struct {
        int blocks, budget, late;
        sched_admit_fn admit;
    } cases[] = {{256, 64, 0, NULL}, {256, 20, 4, admit_any}, {256, 20, 4, admit_even}, {24, 64, 0, NULL}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        harness h;
        h_init(&h, cases[c].blocks, 4, c < 2, 8, cases[c].budget, 4096);
        /* the first N - late requests now, the rest after the run starts */
        for (int i = 0; i < N - cases[c].late; i++)
            h_add(&h, i, prompts[i], lens[i], maxt[i]);
        int refused = 0, ahead = 0;
        if (cases[c].late) {
            sched_output o;
            sched_step(h.s, &o); /* one step alone, then the late ones join the queue */
            int32_t tok[MAX_REQ];
            for (int i = 0; i < o.n_items; i++)
                tok[i] = fake_model(&h, &o.items[i]);
            h_accept(&h, &o, tok, NULL);
            for (int i = N - cases[c].late; i < N; i++)
                h_add(&h, i, prompts[i], lens[i], maxt[i]);
        }
        ahead = ahead_run(&h, 100000, cases[c].admit, &refused);
        ck_assert_int_gt(ahead, 10);
        if (cases[c].blocks < 100)
            ck_assert_msg(refused > 0, "small pool: %d refusals", refused);
        for (int i = 0; i < N; i++) {
            ck_assert_int_eq(h.n_out[i], maxt[i]);
            for (int k = 0; k < maxt[i]; k++)
                ck_assert_msg(h.out[i][k] == alone[i][k], "case %zu req %d token %d: %d vs %d alone", c, i, k,
                              h.out[i][k], alone[i][k]);
        }
        printf("step ahead, case %zu: %d steps planned ahead, %d refused\n", c, ahead, refused);
        h_free(&h);
    }
}
END_TEST

START_TEST(test_random_stress)
{
    for (uint64_t seed = 1; seed <= 30; seed++)
        stress(seed);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_reject_table);
    tcase_add_test(tc, test_budget_and_chunking);
    tcase_add_test(tc, test_fcfs_and_max_seqs);
    tcase_add_test(tc, test_preemption_order);
    tcase_add_test(tc, test_abort_every_state);
    tcase_add_test(tc, test_prefix_cache_hits);
    tcase_add_test(tc, test_no_starvation);
    tcase_add_test(tc, test_random_stress);
    tcase_add_test(tc, test_step_ahead);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
