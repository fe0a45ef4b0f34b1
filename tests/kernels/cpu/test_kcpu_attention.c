/* tests/kernels/cpu/test_kcpu_attention.c: RoPE + paged KV write against the
 * direct formula, and paged attention against dense attention computed here
 * in fp64.
 *
 * The paged test runs several sequences (97, 33, 1 and 50 tokens) in one
 * batch through a shuffled, non-contiguous block pool, in steps: a first
 * prefill chunk, a second chunk appended after the cached context, then a
 * decode token (one sequence joins only at the second step, one is empty in
 * the first). Every step writes K/V with rope_kv_write and compares each new
 * token's attention output with dense causal attention over the whole
 * sequence, for head_dim 8/64/128, GQA ratios 1/2/4/8 and block sizes 1, 16
 * and 32 (last block partly filled). Blocks not owned by any sequence, a
 * padding token and guard regions must stay untouched.
 */
#include <math.h>
#include <stdlib.h>

#include "common/alloc.h"
#include "kt_util.h"

/* HF-style inverse frequencies in fp32. */
static void make_inv_freq(float *inv, int hd, float theta)
{
    for (int j = 0; j < hd / 2; j++)
        inv[j] = (float)(1.0 / pow((double)theta, (double)(2 * j) / (double)hd));
}

/* Direct RoPE in fp64 on one head x[hd] at position pos into y[hd]; the angle
 * is the fp32 product pos * inv_freq[j], as HF computes it. */
static void ref_rope(const float *x, int hd, int pos, const float *inv, double *y)
{
    const int half = hd / 2;
    for (int j = 0; j < half; j++) {
        double a = (double)((float)pos * inv[j]);
        double c = cos(a), s = sin(a);
        y[j] = (double)x[j] * c - (double)x[j + half] * s;
        y[j + half] = (double)x[j + half] * c + (double)x[j] * s;
    }
}

START_TEST(test_rope_kv_write)
{
    kern_ctx *ctx = kt_ctx(2);
    const int nh = 6, nkv = 2, hd = 64, bs = 16, n_blocks = 5, n = 7;
    const int row = (nh + 2 * nkv) * hd;
    const int32_t pos[] = {0, 1, 5, 17, 100, 4095, 3};
    const int64_t slots[] = {0, 33, -1, 79, 16, 47, -5};
    float inv[32];
    make_inv_freq(inv, hd, 500000.0f);
    inv[3] = 0.37f; /* arbitrary (llama3-scaled values are arbitrary too) */
    float *qkv = kt_galloc(ctx, (size_t)(n * row));
    float *orig = inferd_malloc((size_t)(n * row) * sizeof(float));
    const size_t cache_n = (size_t)n_blocks * nkv * bs * hd;
    float *kc = kt_galloc(ctx, cache_n), *vc = kt_galloc(ctx, cache_n);
    test_fill_uniform(qkv, (size_t)(n * row), 3, -1.0f, 1.0f);
    memcpy(orig, qkv, (size_t)(n * row) * sizeof(float));
    kern_rope_kv_params p = {.qkv = qkv, .positions = pos, .slot_mapping = slots, .inv_freq = inv,
                             .k_cache = kc, .v_cache = vc, .n_tokens = n, .n_heads = nh,
                             .n_kv_heads = nkv, .head_dim = hd, .block_size = bs};
    kern_rope_kv_write(ctx, &p);
    double y[64];
    bool written[5 * 16] = {false};
    for (int t = 0; t < n; t++) {
        for (int h = 0; h < nh + nkv; h++) { /* q heads then k heads are roped */
            ref_rope(orig + t * row + h * hd, hd, pos[t], inv, y);
            for (int d = 0; d < hd; d++)
                KT_MSG(fabs(qkv[t * row + h * hd + d] - y[d]) <= 2e-6,
                              "token %d head %d dim %d: %g vs %g", t, h, d,
                              qkv[t * row + h * hd + d], y[d]);
        }
        /* v untouched */
        KT_CHECK(memcmp(qkv + t * row + (nh + nkv) * hd, orig + t * row + (nh + nkv) * hd,
                         (size_t)(nkv * hd) * sizeof(float)) == 0);
        if (slots[t] < 0)
            continue;
        written[slots[t]] = true;
        int64_t blk = slots[t] / bs, off = slots[t] % bs;
        for (int h = 0; h < nkv; h++) {
            const float *kd = kc + ((blk * nkv + h) * bs + off) * hd;
            const float *vd = vc + ((blk * nkv + h) * bs + off) * hd;
            KT_CHECK(memcmp(kd, qkv + t * row + (nh + h) * hd, (size_t)hd * sizeof(float)) == 0);
            KT_CHECK(memcmp(vd, qkv + t * row + (nh + nkv + h) * hd, (size_t)hd * sizeof(float)) == 0);
        }
    }
    /* every other cache slot is untouched */
    for (int s = 0; s < n_blocks * bs; s++) {
        if (written[s])
            continue;
        for (int h = 0; h < nkv; h++)
            for (int d = 0; d < hd; d++) {
                size_t i = (size_t)((((s / bs) * nkv + h) * bs + s % bs) * hd + d);
                KT_CHECK(kt_bits(kc[i]) == KT_SENTINEL && kt_bits(vc[i]) == KT_SENTINEL);
            }
    }
    kt_gcheck(qkv, (size_t)(n * row), "qkv");
    kt_gcheck(kc, cache_n, "k cache");
    kt_gcheck(vc, cache_n, "v cache");
    kt_gfree(ctx, qkv);
    kt_gfree(ctx, kc);
    kt_gfree(ctx, vc);
    inferd_free(orig);
    kern_ctx_free(ctx);
}
END_TEST

/* --- paged vs dense ------------------------------------------------------- */

#define N_SEQS 4
#define N_STEPS 3
static const int seq_total[N_SEQS] = {97, 33, 1, 50};
/* new tokens of each sequence at each step (0 = absent or empty) */
static const int seq_chunks[N_SEQS][N_STEPS] = {{60, 36, 1}, {17, 15, 1}, {1, 0, 0}, {0, 49, 1}};

typedef struct {
    int hd, nh, nkv, bs;
    int n_blocks, max_blocks;
    float inv[64];            /* [hd / 2], hd <= 128 */
    float *q[N_SEQS];         /* [L, nh, hd] pre-rope */
    float *k[N_SEQS];         /* [L, nkv, hd] pre-rope */
    float *v[N_SEQS];         /* [L, nkv, hd] */
    double *qr[N_SEQS];       /* [L, nh, hd] roped (fp64 reference) */
    double *kr[N_SEQS];       /* [L, nkv, hd] roped */
    int32_t *bt;              /* [N_SEQS, max_blocks] */
    bool *used;               /* [n_blocks] */
    float *kc, *vc;           /* [n_blocks, nkv, bs, hd] guarded */
    size_t cache_n;
} paged_case;

static void case_init(kern_ctx *ctx, paged_case *c, int hd, int group, int bs, uint64_t seed)
{
    memset(c, 0, sizeof *c);
    c->hd = hd;
    c->nkv = 2;
    c->nh = 2 * group;
    c->bs = bs;
    make_inv_freq(c->inv, hd, 10000.0f);
    int need = 0;
    for (int i = 0; i < N_SEQS; i++) {
        int nb = (seq_total[i] + bs - 1) / bs;
        need += nb;
        if (nb + 1 > c->max_blocks)
            c->max_blocks = nb + 1;
    }
    c->n_blocks = need + 4; /* block 0 and 3 others stay unused */
    /* shuffled block ids 1..n_blocks-1 */
    int *perm = inferd_malloc((size_t)c->n_blocks * sizeof(int));
    for (int b = 0; b < c->n_blocks; b++)
        perm[b] = b;
    for (int b = c->n_blocks - 1; b > 1; b--) {
        int j = 1 + (int)(rng_uniform(seed, (uint64_t)b) * (double)b);
        int tmp = perm[b];
        perm[b] = perm[j];
        perm[j] = tmp;
    }
    c->bt = inferd_malloc((size_t)(N_SEQS * c->max_blocks) * sizeof(int32_t));
    c->used = inferd_calloc((size_t)c->n_blocks, sizeof(bool));
    int next = 1;
    for (int i = 0; i < N_SEQS; i++) {
        int nb = (seq_total[i] + bs - 1) / bs;
        for (int b = 0; b < c->max_blocks; b++) {
            c->bt[i * c->max_blocks + b] = b < nb ? perm[next++] : -1;
            if (b < nb)
                c->used[c->bt[i * c->max_blocks + b]] = true;
        }
    }
    inferd_free(perm);
    for (int i = 0; i < N_SEQS; i++) {
        int L = seq_total[i];
        c->q[i] = inferd_malloc((size_t)(L * c->nh * hd) * sizeof(float));
        c->k[i] = inferd_malloc((size_t)(L * c->nkv * hd) * sizeof(float));
        c->v[i] = inferd_malloc((size_t)(L * c->nkv * hd) * sizeof(float));
        c->qr[i] = inferd_malloc((size_t)(L * c->nh * hd) * sizeof(double));
        c->kr[i] = inferd_malloc((size_t)(L * c->nkv * hd) * sizeof(double));
        test_fill_uniform(c->q[i], (size_t)(L * c->nh * hd), seed * 10 + (uint64_t)i, -1.5f, 1.5f);
        test_fill_uniform(c->k[i], (size_t)(L * c->nkv * hd), seed * 20 + (uint64_t)i, -1.5f, 1.5f);
        test_fill_uniform(c->v[i], (size_t)(L * c->nkv * hd), seed * 30 + (uint64_t)i, -1.0f, 1.0f);
        for (int p = 0; p < L; p++) {
            for (int h = 0; h < c->nh; h++)
                ref_rope(c->q[i] + (p * c->nh + h) * hd, hd, p, c->inv, c->qr[i] + (p * c->nh + h) * hd);
            for (int h = 0; h < c->nkv; h++)
                ref_rope(c->k[i] + (p * c->nkv + h) * hd, hd, p, c->inv, c->kr[i] + (p * c->nkv + h) * hd);
        }
    }
    c->cache_n = (size_t)c->n_blocks * c->nkv * bs * hd;
    c->kc = kt_galloc(ctx, c->cache_n);
    c->vc = kt_galloc(ctx, c->cache_n);
}

static void case_free(kern_ctx *ctx, paged_case *c)
{
    for (int i = 0; i < N_SEQS; i++) {
        inferd_free(c->q[i]);
        inferd_free(c->k[i]);
        inferd_free(c->v[i]);
        inferd_free(c->qr[i]);
        inferd_free(c->kr[i]);
    }
    inferd_free(c->bt);
    inferd_free(c->used);
    kt_gfree(ctx, c->kc);
    kt_gfree(ctx, c->vc);
}

/* Dense causal attention in fp64 for sequence i, position p, head h. */
static void ref_attention(const paged_case *c, int i, int p, int h, double scale, double *out)
{
    const int hd = c->hd, kvh = h / (c->nh / c->nkv);
    const double *q = c->qr[i] + (p * c->nh + h) * hd;
    double *s = inferd_malloc((size_t)(p + 1) * sizeof(double));
    double mx = -INFINITY, sum = 0.0;
    for (int j = 0; j <= p; j++) {
        const double *k = c->kr[i] + (j * c->nkv + kvh) * hd;
        double d = 0.0;
        for (int e = 0; e < hd; e++)
            d += q[e] * k[e];
        s[j] = scale * d;
        mx = fmax(mx, s[j]);
    }
    for (int e = 0; e < hd; e++)
        out[e] = 0.0;
    for (int j = 0; j <= p; j++) {
        double w = exp(s[j] - mx);
        sum += w;
        const float *v = c->v[i] + (j * c->nkv + kvh) * hd;
        for (int e = 0; e < hd; e++)
            out[e] += w * v[e];
    }
    for (int e = 0; e < hd; e++)
        out[e] /= sum;
    inferd_free(s);
}

/* One step's batch: host arrays (the CPU backend's memory is host memory). */
typedef struct {
    int n_tokens;    /* real tokens + 1 padding token at the end */
    int n_real;
    float *qkv;      /* [n_tokens, (nh + 2 nkv) hd] guarded */
    float *out;      /* [n_tokens, nh hd] guarded */
    int32_t pos[256], qsl[N_SEQS + 1], seq_lens[N_SEQS], tok_seq[256];
    int64_t slots[256];
    int max_q, max_len;
} step_batch;

static void batch_build(kern_ctx *ctx, const paged_case *c, int step, step_batch *b)
{
    const int hd = c->hd, row = (c->nh + 2 * c->nkv) * hd;
    memset(b, 0, sizeof *b);
    int t = 0;
    for (int i = 0; i < N_SEQS; i++) {
        int cached = 0;
        for (int s = 0; s < step; s++)
            cached += seq_chunks[i][s];
        int q_len = seq_chunks[i][step];
        b->qsl[i] = t;
        b->seq_lens[i] = cached + q_len;
        b->max_q = q_len > b->max_q ? q_len : b->max_q;
        b->max_len = cached + q_len > b->max_len ? cached + q_len : b->max_len;
        for (int j = 0; j < q_len; j++, t++) {
            int p = cached + j;
            b->pos[t] = p;
            b->tok_seq[t] = i;
            b->slots[t] = (int64_t)c->bt[i * c->max_blocks + p / c->bs] * c->bs + p % c->bs;
        }
    }
    b->qsl[N_SEQS] = t;
    b->n_real = t;
    b->n_tokens = t + 1;
    b->pos[t] = 0;
    b->slots[t] = -1;
    b->tok_seq[t] = -1;
    b->qkv = kt_galloc(ctx, (size_t)(b->n_tokens * row));
    b->out = kt_galloc(ctx, (size_t)(b->n_tokens * c->nh * hd));
    for (int r = 0; r < b->n_tokens; r++) {
        float *x = b->qkv + r * row;
        if (r == b->n_real) { /* padding row */
            test_fill_uniform(x, (size_t)row, 999, -1.0f, 1.0f);
            continue;
        }
        int i = b->tok_seq[r], p = b->pos[r];
        memcpy(x, c->q[i] + p * c->nh * hd, (size_t)(c->nh * hd) * sizeof(float));
        memcpy(x + c->nh * hd, c->k[i] + p * c->nkv * hd, (size_t)(c->nkv * hd) * sizeof(float));
        memcpy(x + (c->nh + c->nkv) * hd, c->v[i] + p * c->nkv * hd, (size_t)(c->nkv * hd) * sizeof(float));
    }
}

static kern_attn_params attn_params(const paged_case *c, step_batch *b)
{
    kern_attn_params a = {
        .out = b->out, .qkv = b->qkv, .k_cache = c->kc, .v_cache = c->vc,
        .query_start_loc = b->qsl, .seq_lens = b->seq_lens, .block_tables = c->bt,
        .h_query_start_loc = b->qsl, .h_seq_lens = b->seq_lens, .workspace = NULL,
        .n_seqs = N_SEQS, .n_tokens = b->n_tokens, .max_blocks_per_seq = c->max_blocks,
        .n_heads = c->nh, .n_kv_heads = c->nkv, .head_dim = c->hd, .block_size = c->bs,
        .max_query_len = b->max_q, .max_seq_len = b->max_len, .scale = 1.0f / sqrtf((float)c->hd)};
    return a;
}

/* Each sequence alone (1 thread) must give bitwise the batched rows. */
static void check_batch_invariance(const paged_case *c, step_batch *b, const kern_attn_params *a)
{
    kern_ctx *c1 = kt_ctx(1);
    const int hd = c->hd, row = (c->nh + 2 * c->nkv) * hd;
    for (int i = 0; i < N_SEQS; i++) {
        int q_len = b->qsl[i + 1] - b->qsl[i];
        if (q_len == 0)
            continue;
        float *o = inferd_malloc((size_t)(q_len * c->nh * hd) * sizeof(float));
        int32_t qsl[2] = {0, q_len}, sl[1] = {b->seq_lens[i]};
        kern_attn_params s = *a;
        s.out = o;
        s.qkv = b->qkv + b->qsl[i] * row;
        s.query_start_loc = s.h_query_start_loc = qsl;
        s.seq_lens = s.h_seq_lens = sl;
        s.block_tables = c->bt + i * c->max_blocks;
        s.n_seqs = 1;
        s.n_tokens = q_len;
        kern_attention(c1, &s);
        KT_MSG(memcmp(o, b->out + b->qsl[i] * c->nh * hd,
                             (size_t)(q_len * c->nh * hd) * sizeof(float)) == 0,
                      "sequence %d alone differs from the batch", i);
        inferd_free(o);
    }
    kern_ctx_free(c1);
}

static void run_step(kern_ctx *ctx, paged_case *c, int step, bool check_invariance)
{
    step_batch b;
    batch_build(ctx, c, step, &b);
    const int hd = c->hd, nh = c->nh;
    kern_rope_kv_params rp = {.qkv = b.qkv, .positions = b.pos, .slot_mapping = b.slots,
                              .inv_freq = c->inv, .k_cache = c->kc, .v_cache = c->vc,
                              .n_tokens = b.n_tokens, .n_heads = nh, .n_kv_heads = c->nkv,
                              .head_dim = hd, .block_size = c->bs};
    kern_rope_kv_write(ctx, &rp);
    kern_attn_params a = attn_params(c, &b);
    kern_attention(ctx, &a);
    double ref[128];
    for (int t = 0; t < b.n_tokens; t++) {
        for (int h = 0; h < nh; h++) {
            const float *o = b.out + (t * nh + h) * hd;
            if (t == b.n_real) { /* padding token: zeros */
                for (int e = 0; e < hd; e++)
                    KT_CHECK(o[e] == 0.0f);
                continue;
            }
            ref_attention(c, b.tok_seq[t], b.pos[t], h, 1.0 / sqrt((double)hd), ref);
            for (int e = 0; e < hd; e++)
                KT_MSG(fabs(o[e] - ref[e]) <= 2e-5 + 1e-4 * fabs(ref[e]),
                              "hd %d nh %d bs %d step %d seq %d pos %d head %d dim %d: %.7g vs %.7g",
                              hd, nh, c->bs, step, b.tok_seq[t], b.pos[t], h, e, o[e], ref[e]);
        }
    }
    if (check_invariance)
        check_batch_invariance(c, &b, &a);
    kt_gcheck(b.out, (size_t)(b.n_tokens * nh * hd), "attention out");
    kt_gcheck(b.qkv, (size_t)(b.n_tokens * (nh + 2 * c->nkv) * hd), "qkv");
    kt_gfree(ctx, b.qkv);
    kt_gfree(ctx, b.out);
}

/* Blocks owned by no sequence (block 0 included) hold only sentinels. */
static void check_unused_blocks(const paged_case *c)
{
    const size_t per_block = (size_t)c->nkv * c->bs * c->hd;
    for (int blk = 0; blk < c->n_blocks; blk++) {
        if (c->used[blk])
            continue;
        for (size_t e = 0; e < per_block; e++) {
            KT_CHECK(kt_bits(c->kc[blk * per_block + e]) == KT_SENTINEL);
            KT_CHECK(kt_bits(c->vc[blk * per_block + e]) == KT_SENTINEL);
        }
    }
    kt_gcheck(c->kc, c->cache_n, "k cache");
    kt_gcheck(c->vc, c->cache_n, "v cache");
}

START_TEST(test_paged_vs_dense)
{
    kern_ctx *ctx = kt_ctx(3);
    static const int hds[] = {8, 64, 128};
    static const int groups[] = {1, 2, 4, 8};
    static const int bss[] = {1, 16, 32};
    int n_cases = 0;
    for (size_t a = 0; a < 3; a++)
        for (size_t g = 0; g < 4; g++)
            for (size_t s = 0; s < 3; s++) {
                paged_case c;
                case_init(ctx, &c, hds[a], groups[g], bss[s], 1 + a * 100 + g * 10 + s);
                for (int step = 0; step < N_STEPS; step++)
                    run_step(ctx, &c, step, step == 1 && (s == 1 || a == 0));
                check_unused_blocks(&c);
                case_free(ctx, &c);
                n_cases++;
            }
    KT_INT_EQ(n_cases, 36);
    kern_ctx_free(ctx);
}
END_TEST

/* A whole prompt in one step equals the same prompt fed in chunks (bitwise:
 * the CPU attention of a token depends only on its context). */
START_TEST(test_chunked_equals_whole)
{
    kern_ctx *ctx = kt_ctx(2);
    paged_case c;
    case_init(ctx, &c, 64, 4, 16, 77);
    /* whole sequence 0 in one step */
    const int hd = c.hd, nh = c.nh, row = (nh + 2 * c.nkv) * hd, L = seq_total[0];
    float *qkv = inferd_malloc((size_t)(L * row) * sizeof(float));
    float *whole = inferd_malloc((size_t)(L * nh * hd) * sizeof(float));
    float *chunk = inferd_malloc((size_t)(L * nh * hd) * sizeof(float));
    int32_t pos[97];
    int64_t slots[97];
    for (int p = 0; p < L; p++) {
        pos[p] = p;
        slots[p] = (int64_t)c.bt[p / c.bs] * c.bs + p % c.bs;
        memcpy(qkv + p * row, c.q[0] + p * nh * hd, (size_t)(nh * hd) * sizeof(float));
        memcpy(qkv + p * row + nh * hd, c.k[0] + p * c.nkv * hd, (size_t)(c.nkv * hd) * sizeof(float));
        memcpy(qkv + p * row + (nh + c.nkv) * hd, c.v[0] + p * c.nkv * hd, (size_t)(c.nkv * hd) * sizeof(float));
    }
    kern_rope_kv_params rp = {.qkv = qkv, .positions = pos, .slot_mapping = slots,
                              .inv_freq = c.inv, .k_cache = c.kc, .v_cache = c.vc, .n_tokens = L,
                              .n_heads = nh, .n_kv_heads = c.nkv, .head_dim = hd, .block_size = c.bs};
    kern_rope_kv_write(ctx, &rp);
    static const int cuts[] = {0, 1, 16, 40, 41, 96, 97};
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        /* k == 0: the whole prompt; then chunk [cuts[k-1], cuts[k]) */
        int lo = k == 0 ? 0 : cuts[k - 1], hi = k == 0 ? L : cuts[k];
        if (k > 0 && lo == hi)
            continue;
        int32_t qsl[2] = {0, hi - lo}, sl[1] = {hi};
        kern_attn_params a = {
            .out = (k == 0 ? whole : chunk) + lo * nh * hd, .qkv = qkv + lo * row,
            .k_cache = c.kc, .v_cache = c.vc, .query_start_loc = qsl, .seq_lens = sl,
            .block_tables = c.bt, /* row 0 */ .h_query_start_loc = qsl, .h_seq_lens = sl,
            .n_seqs = 1, .n_tokens = hi - lo, .max_blocks_per_seq = c.max_blocks,
            .n_heads = nh, .n_kv_heads = c.nkv, .head_dim = hd, .block_size = c.bs,
            .max_query_len = hi - lo, .max_seq_len = hi, .scale = 1.0f / sqrtf((float)hd)};
        kern_attention(ctx, &a);
    }
    KT_CHECK(memcmp(whole, chunk, (size_t)(L * nh * hd) * sizeof(float)) == 0);
    inferd_free(qkv);
    inferd_free(whole);
    inferd_free(chunk);
    case_free(ctx, &c);
    kern_ctx_free(ctx);
}
END_TEST

START_TEST(test_workspace_bytes)
{
    kern_ctx *ctx = kt_ctx(2);
    ck_assert_uint_eq(kern_attn_workspace_bytes(ctx, 512, 64, 32, 128, 4096), 0);
    kern_ctx_free(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kernels_cpu_attention");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_rope_kv_write);
    tcase_add_test(tc, test_paged_vs_dense);
    tcase_add_test(tc, test_chunked_equals_whole);
    tcase_add_test(tc, test_workspace_bytes);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
