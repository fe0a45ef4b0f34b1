/* tests/model/test_graphs_gpu.c: decode CUDA graphs (model/graphs.c) against
 * --enforce-eager on stories260K (label gpu; skips without a device).
 *
 *  - graphs vs eager: two models with the same weights, one capturing
 *    graphs and one enforce_eager, run the same multi-sequence prefill and
 *    then decode steps through model_step, for batch sizes on the capture
 *    ladder (1, 2, 4, 8, 16) and between them (3, 5, 11: padded rows).
 *    Sampled tokens must be equal in every step (greedy rows and seeded
 *    temperature rows); logits must be bitwise equal for ladder sizes
 *    (same GEMM shapes, same attention plan); for padded sizes the bitwise
 *    count is printed (cuBLAS may pick another kernel for the padded row
 *    count) and the logits must agree within bf16 noise. The graph model
 *    must have replayed graphs and the eager one none.
 *  - a mixed step (decodes plus a new prompt) runs eagerly on both and
 *    gives the same tokens (bitwise logits for ladder sizes); decoding then
 *    continues through graphs.
 *  - greedy generation of golden case 0 through model_step (graph path)
 *    equals llama2.c's tokens.
 *  - the same two checks on the fused decode layers (GEMV size threshold
 *    lowered so that stories260K takes them) and on the O and down products
 *    adding into the residual stream (size floor lowered, GEMV off).
 *  - on a Llama-3-shaped dummy whose weights the GEMV takes, graphs vs
 *    eager in the default decode forms (test_dummy_forms).
 *  - graphs vs eager again with the fp8 KV cache.
 *  - decode steps launched as continuations (async scheduling), graphs and
 *    eager, equal the same steps run one at a time, bitwise.
 *  - the device ceilings are measured and plausible (> 100 GB/s, > 10 TFLOP/s).
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/alloc.h"
#include "common/rng.h"
#include "common/util.h"
#include "kvcache/kv_layout.h"
#include "model/model.h"
#include "test_util.h"

#define MAX_SEQS 16
#define DECODE_STEPS 40

static cJSON *g_case0;
static char *g_model_dir;
static const char *g_dummy_dir; /* load(): this config with dummy weights instead of stories260K */
static int g_kv_cache_dtype; /* model_kv_cache_dtype of the models load() makes */

static model *load(bool eager)
{
    model_opts o;
    model_opts_default(&o);
    o.model_dir = g_model_dir;
    if (g_dummy_dir) { /* a config with dummy weights, 512 positions (the KV budget holds 17 sequences) */
        o.model_dir = g_dummy_dir;
        o.load_format = MODEL_LOAD_DUMMY;
        o.max_model_len = 512;
    }
    o.backend = KERN_BACKEND_CUDA;
    o.max_num_batched_tokens = 256;
    o.max_num_seqs = MAX_SEQS;
    o.kv_cache_bytes = 64 << 20;
    o.enforce_eager = eager;
    o.kv_cache_dtype = g_kv_cache_dtype;
    model *m = NULL;
    ck_assert_msg(model_load(&o, &m) == INFERD_OK, "load: %s", inferd_last_error());
    return m;
}

/* A multi-sequence batch under construction (host arrays). */
typedef struct {
    int32_t tok[256], pos[256], qsl[MAX_SEQS + 2], lens[MAX_SEQS + 1], idx[MAX_SEQS + 1];
    int64_t slots[256];
    int32_t *tables; /* [MAX_SEQS + 1, width] */
    int width, n_tok, n_seq;
} batch;

static void batch_begin(batch *b)
{
    b->n_tok = b->n_seq = 0;
    b->qsl[0] = 0;
}

/* Sequence s computes toks[0, n) at positions [start, start + n). */
static void batch_add(batch *b, int s, const int32_t *toks, int start, int n, int bs)
{
    const int32_t *table = b->tables + (size_t)s * b->width;
    for (int j = 0; j < n; j++) {
        b->tok[b->n_tok] = toks[j];
        b->pos[b->n_tok] = start + j;
        b->slots[b->n_tok] = kv_slot(table, start + j, bs);
        b->n_tok++;
    }
    b->lens[b->n_seq] = start + n;
    b->idx[b->n_seq] = b->n_tok - 1;
    b->n_seq++;
    b->qsl[b->n_seq] = b->n_tok;
}

/* The batch's rows in the order they were added use the tables of seq ids `ids`. */
static model_batch as_model_batch(batch *b, const int *ids, int32_t *rows)
{
    for (int i = 0; i < b->n_seq; i++)
        memcpy(rows + (size_t)i * b->width, b->tables + (size_t)ids[i] * b->width, sizeof(int32_t) * b->width);
    model_batch mb = {.n_tokens = b->n_tok, .tokens = b->tok, .positions = b->pos, .slot_mapping = b->slots,
                      .n_seqs = b->n_seq, .query_start_loc = b->qsl, .seq_lens = b->lens, .block_tables = rows,
                      .max_blocks_per_seq = b->width, .n_logits = b->n_seq, .logits_indices = b->idx};
    return mb;
}

/* B random prompts in a fresh batch, sequence s of len[s] tokens drawn
 * from salt, as sequence ids 0..B-1; sampling rows alternately greedy and
 * seeded with temperature 0.8 (seed0 + s). */
static void add_prompts(batch *b, int B, int V, int bs, uint64_t salt, const int *len, int *ids,
                        kern_sample_params *sp, uint64_t seed0)
{
    int32_t prompt[256];
    batch_begin(b);
    for (int s = 0; s < B; s++) {
        for (int j = 0; j < len[s]; j++)
            prompt[j] = 1 + (int32_t)(rng_uniform(salt, (uint64_t)(s * 256 + j)) * (V - 1));
        batch_add(b, s, prompt, 0, len[s], bs);
        ids[s] = s;
        sp[s] = (kern_sample_params){
            .temperature = s % 2 ? 0.8f : 0.0f, .top_p = 1.0f, .seed = seed0 + (uint64_t)s};
    }
}

typedef struct {
    long steps, bitwise_steps;
    double max_abs;
} cmp_stats;

/* Run mb on both models; tokens equal; logits compared. */
static void step_both(model *g, model *e, const model_batch *mb, const kern_sample_params *sp, int32_t *out,
                      bool want_bitwise, cmp_stats *cs, float *lg, float *le)
{
    int32_t tg[MAX_SEQS + 1], te[MAX_SEQS + 1];
    ck_assert_msg(model_step(g, mb, sp, tg) == INFERD_OK, "graph step: %s", inferd_last_error());
    ck_assert_msg(model_step(e, mb, sp, te) == INFERD_OK, "eager step: %s", inferd_last_error());
    int V = model_get_config(g)->vocab_size;
    model_logits_to_host(g, lg);
    model_logits_to_host(e, le);
    size_t n = (size_t)mb->n_logits * (size_t)V;
    bool same = memcmp(lg, le, n * sizeof(float)) == 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)lg[i] - le[i]);
        cs->max_abs = fmax(cs->max_abs, d);
        ck_assert_msg(d <= 0.05 + 0.01 * fabs(le[i]), "logit %zu: graph %f eager %f", i, lg[i], le[i]);
    }
    if (want_bitwise)
        ck_assert_msg(same, "batch %d: logits not bitwise equal (max |diff| %g)", mb->n_seqs, cs->max_abs);
    cs->steps++;
    cs->bitwise_steps += same;
    for (int i = 0; i < mb->n_logits; i++)
        ck_assert_msg(tg[i] == te[i], "batch %d row %d: graph token %d, eager %d", mb->n_seqs, i, tg[i], te[i]);
    memcpy(out, tg, sizeof(int32_t) * (size_t)mb->n_logits);
}

static bool on_ladder(int b)
{
    return b == 1 || b == 2 || b == 4 || b == 8 || b == 16;
}

/* B sequences: prefill together, then decode steps, half greedy and half seeded. */
static void run_batch(model *g, model *e, int B, cmp_stats *cs)
{
    int bs = model_block_size(g), width = model_max_blocks_per_seq(g), V = model_get_config(g)->vocab_size;
    ck_assert_int_ge(model_num_kv_blocks(g), 1 + (MAX_SEQS + 1) * width);
    batch b;
    b.width = width;
    b.tables = inferd_malloc(sizeof(int32_t) * (size_t)(MAX_SEQS + 1) * width);
    int32_t *rows = inferd_malloc(sizeof(int32_t) * (size_t)(MAX_SEQS + 1) * width);
    for (int s = 0; s <= MAX_SEQS; s++) /* interleaved, non-contiguous blocks */
        for (int j = 0; j < width; j++)
            b.tables[(size_t)s * width + j] = 1 + j * (MAX_SEQS + 1) + (MAX_SEQS - s);
    float *lg = inferd_malloc(sizeof(float) * (size_t)(MAX_SEQS + 1) * V);
    float *le = inferd_malloc(sizeof(float) * (size_t)(MAX_SEQS + 1) * V);
    kern_sample_params sp[MAX_SEQS + 1];
    int len[MAX_SEQS + 1], ids[MAX_SEQS + 1];
    int32_t next[MAX_SEQS + 1];
    for (int s = 0; s < B; s++) /* sequence 0 of small batches crosses 256 tokens while decoding:
                                   the split-KV plan of the 512-token bucket's graph is exercised */
        len[s] = s == 0 && B <= 4 ? 220 : 3 + (s * 5) % 11;
    add_prompts(&b, B, V, bs, 100 + (uint64_t)B, len, ids, sp, 7);
    model_batch mb = as_model_batch(&b, ids, rows);
    step_both(g, e, &mb, sp, next, true, cs, lg, le); /* prefill: eager on both */
    for (int t = 0; t < DECODE_STEPS; t++) {
        batch_begin(&b);
        for (int s = 0; s < B; s++) {
            sp[s].counter = (uint64_t)t + 1;
            batch_add(&b, s, &next[s], len[s], 1, bs);
            len[s]++;
        }
        bool mixed = t == DECODE_STEPS / 2 && B < MAX_SEQS;
        if (mixed) { /* a mixed step: a new prompt joins */
            int32_t p7[7] = {1, 5, 9, 13, 17, 21, 25};
            batch_add(&b, MAX_SEQS, p7, 0, 7, bs);
            ids[B] = MAX_SEQS;
            sp[B] = (kern_sample_params){.temperature = 0, .top_p = 1.0f};
        }
        mb = as_model_batch(&b, ids, rows);
        model_graph_info before, after;
        model_graph_info_get(g, &before);
        step_both(g, e, &mb, sp, next, on_ladder(B), cs, lg, le);
        model_graph_info_get(g, &after);
        ck_assert_int_eq(after.replays - before.replays, mixed ? 0 : 1);
    }
    inferd_free(b.tables);
    inferd_free(rows);
    inferd_free(lg);
    inferd_free(le);
}

START_TEST(test_graphs_equal_eager)
{
    model *g = load(false), *e = load(true);
    model_graph_info gi, ei;
    model_graph_info_get(g, &gi);
    model_graph_info_get(e, &ei);
    ck_assert(gi.enabled && gi.n_graphs > 0 && gi.max_batch == MAX_SEQS);
    ck_assert(!ei.enabled && ei.n_graphs == 0);
    printf("graphs: %d captured up to batch %d in %.3f s\n", gi.n_graphs, gi.max_batch, gi.capture_s);
    static const int k_batches[] = {1, 2, 3, 4, 5, 8, 11, 16};
    for (size_t k = 0; k < sizeof k_batches / sizeof k_batches[0]; k++) {
        cmp_stats cs = {0};
        run_batch(g, e, k_batches[k], &cs);
        printf("batch %2d (%s): %ld steps, logits bitwise equal in %ld, max |diff| %g, tokens equal in all\n",
               k_batches[k], on_ladder(k_batches[k]) ? "captured size" : "padded", cs.steps, cs.bitwise_steps,
               cs.max_abs);
    }
    model_graph_info_get(g, &gi);
    model_graph_info_get(e, &ei);
    ck_assert(gi.replays > 0 && ei.replays == 0);
    printf("graph model: %llu replays, %llu eager steps; eager model: %llu eager steps\n",
           (unsigned long long)gi.replays, (unsigned long long)gi.eager_steps, (unsigned long long)ei.eager_steps);
    model_free(g);
    model_free(e);
}
END_TEST

/* Decode steps launched as continuations (model_step_launch with
 * prev_rows: the engine's async scheduling) against the same steps run one
 * at a time with the tokens from the host: bitwise the same tokens in every
 * step and the same logits at the end, through graphs (model g) and eagerly
 * (model e). Half the rows sample with a seeded temperature; at half-time
 * sequence 0 leaves, so the rows shift (prev_rows not the identity) and a
 * smaller graph takes over. */
static void decode_run(model *m, int B, bool chain, int32_t (*out)[MAX_SEQS], float *logits)
{
    int bs = model_block_size(m), width = model_max_blocks_per_seq(m), V = model_get_config(m)->vocab_size;
    batch b;
    b.width = width;
    b.tables = inferd_malloc(sizeof(int32_t) * (size_t)(MAX_SEQS + 1) * width);
    int32_t *rows = inferd_malloc(sizeof(int32_t) * (size_t)(MAX_SEQS + 1) * width);
    for (int s = 0; s <= MAX_SEQS; s++)
        for (int j = 0; j < width; j++)
            b.tables[(size_t)s * width + j] = 1 + j * (MAX_SEQS + 1) + (MAX_SEQS - s);
    kern_sample_params sp[MAX_SEQS], spr[MAX_SEQS];
    int len[MAX_SEQS], ids[MAX_SEQS], prev_ids[MAX_SEQS], n_prev = 0;
    int32_t next[MAX_SEQS], got[MAX_SEQS], prev_rows[MAX_SEQS];
    for (int s = 0; s < B; s++)
        len[s] = 3 + (s * 5) % 11;
    add_prompts(&b, B, V, bs, 300 + (uint64_t)B, len, ids, sp, 11);
    model_batch mb = as_model_batch(&b, ids, rows);
    ck_assert_int_eq(model_step(m, &mb, sp, next), INFERD_OK);
    for (int t = 0; t < DECODE_STEPS; t++) {
        const int first = t >= DECODE_STEPS / 2 && B > 1 ? 1 : 0, n = B - first;
        batch_begin(&b);
        for (int s = first; s < B; s++) {
            int r = s - first;
            ids[r] = s;
            spr[r] = sp[s];
            spr[r].counter = (uint64_t)t + 1;
            int32_t tok = chain && t > 0 ? 0 : next[s];
            prev_rows[r] = -1;
            for (int k = 0; chain && t > 0 && k < n_prev; k++)
                if (prev_ids[k] == s)
                    prev_rows[r] = k;
            batch_add(&b, s, &tok, len[s], 1, bs);
            len[s]++;
        }
        mb = as_model_batch(&b, ids, rows);
        if (!chain) {
            ck_assert_int_eq(model_step(m, &mb, spr, got), INFERD_OK);
            for (int r = 0; r < n; r++)
                out[t][ids[r]] = next[ids[r]] = got[r];
        } else {
            ck_assert_msg(model_step_launch(m, &mb, spr, t > 0 ? prev_rows : NULL) == INFERD_OK, "launch: %s",
                          inferd_last_error());
            if (t > 0) { /* the step before: its tokens are this one's inputs */
                ck_assert_int_eq(model_step_wait(m, got), INFERD_OK);
                for (int k = 0; k < n_prev; k++)
                    out[t - 1][prev_ids[k]] = got[k];
            }
            memcpy(prev_ids, ids, sizeof(int) * (size_t)n);
            n_prev = n;
        }
    }
    if (chain) {
        ck_assert_int_eq(model_step_wait(m, got), INFERD_OK);
        for (int k = 0; k < n_prev; k++)
            out[DECODE_STEPS - 1][prev_ids[k]] = got[k];
    }
    model_logits_to_host(m, logits);
    inferd_free(b.tables);
    inferd_free(rows);
}

START_TEST(test_chained_steps)
{
    static int32_t a[DECODE_STEPS][MAX_SEQS], c[DECODE_STEPS][MAX_SEQS];
    static const int k_batches[] = {1, 3, 8, 16};
    for (int eager = 0; eager < 2; eager++) {
        model *m = load(eager);
        ck_assert(model_step_chainable(m));
        int V = model_get_config(m)->vocab_size;
        float *la = inferd_malloc(sizeof(float) * (size_t)MAX_SEQS * V);
        float *lc = inferd_malloc(sizeof(float) * (size_t)MAX_SEQS * V);
        for (size_t k = 0; k < sizeof k_batches / sizeof k_batches[0]; k++) {
            int B = k_batches[k];
            memset(a, 0xff, sizeof a);
            memset(c, 0xff, sizeof c);
            model_graph_info g0, g1;
            decode_run(m, B, false, a, la);
            model_graph_info_get(m, &g0);
            decode_run(m, B, true, c, lc);
            model_graph_info_get(m, &g1);
            for (int t = 0; t < DECODE_STEPS; t++)
                for (int s = t >= DECODE_STEPS / 2 && B > 1 ? 1 : 0; s < B; s++)
                    ck_assert_msg(a[t][s] >= 0 && a[t][s] == c[t][s],
                                  "%s batch %d step %d seq %d: %d one at a time, "
                                  "%d chained",
                                  eager ? "eager" : "graphs", B, t, s, a[t][s], c[t][s]);
            int rows = B > 1 ? B - 1 : 1;
            ck_assert_msg(memcmp(la, lc, sizeof(float) * (size_t)rows * V) == 0, "batch %d: logits differ",
                          B);
            if (!eager) /* the chained decode steps replayed graphs */
                ck_assert_int_ge((int)(g1.replays - g0.replays), DECODE_STEPS);
            printf("chained steps, %s, batch %d: %d steps, tokens and logits bitwise equal\n",
                   eager ? "eager" : "graphs", B, DECODE_STEPS);
        }
        /* misuse is refused before anything runs */
        int32_t bad = 5;
        batch b;
        int32_t tab[64], row[64];
        b.width = model_max_blocks_per_seq(m) < 64 ? model_max_blocks_per_seq(m) : 64;
        b.tables = tab;
        for (int j = 0; j < b.width; j++)
            tab[j] = 1 + j;
        batch_begin(&b);
        int32_t one = 3;
        batch_add(&b, 0, &one, 0, 1, model_block_size(m));
        int id0 = 0;
        model_batch mb = as_model_batch(&b, &id0, row);
        kern_sample_params sp0 = {.temperature = 0, .top_p = 1};
        ck_assert_int_eq(model_step_launch(m, &mb, &sp0, &bad),
                         INFERD_ERR_INVALID_ARG); /* nothing in flight */
        inferd_free(la);
        inferd_free(lc);
        model_free(m);
    }
}
END_TEST

static int ints(const char *key, int32_t *out)
{
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, cJSON_GetObjectItem(g_case0, key)) out[n++] = it->valueint;
    return n;
}

/* Greedy generation of golden case 0 through model_step on m (prompt
 * eagerly, then one decode step per token); returns the tokens matched. */
static void count_launch(void *user)
{
    (*(int *)user)++;
}

/* Greedy decode of golden case 0 through model_step (graphs when m has
 * them); each step calls its launched_fn exactly once. */
static int golden_through(model *m)
{
    int32_t toks[600], want[512];
    int np = ints("prompt_ids", toks), nw = ints("generated_ids", want);
    int steps = cJSON_GetObjectItem(g_case0, "steps")->valueint;
    int nb = model_max_blocks_per_seq(m);
    int32_t table[1024];
    for (int i = 0; i < nb; i++)
        table[i] = 2 * i + 3;
    ck_assert_int_eq(model_forward_seq(m, table, toks, 0, np, np - 1), INFERD_OK);
    kern_sample_params sp = {.temperature = 0, .top_p = 1};
    int32_t next;
    ck_assert_int_eq(model_sample(m, &sp, &next), INFERD_OK);
    int n = np, got = 0, bs = model_block_size(m), launched = 0, n_steps = 0;
    while (n <= steps && next != 1) {
        ck_assert_msg(got < nw && next == want[got], "token %d: got %d want %d", got, next, got < nw ? want[got] : -1);
        toks[n] = next;
        got++;
        int32_t qsl[2] = {0, 1}, len = n + 1, pos = n, idx = 0;
        int64_t slot = kv_slot(table, n, bs);
        model_batch mb = {.n_tokens = 1, .tokens = &toks[n], .positions = &pos, .slot_mapping = &slot, .n_seqs = 1,
                          .query_start_loc = qsl, .seq_lens = &len, .block_tables = table, .max_blocks_per_seq = nb,
                          .n_logits = 1, .logits_indices = &idx, .launched_fn = count_launch,
                          .launched_user = &launched};
        ck_assert_int_eq(model_step(m, &mb, &sp, &next), INFERD_OK);
        n_steps++;
        ck_assert_int_eq(launched, n_steps);
        n++;
    }
    ck_assert_int_eq(got, nw);
    return got;
}

START_TEST(test_golden_through_graphs)
{
    model *m = load(false);
    int got = golden_through(m);
    model_graph_info gi;
    model_graph_info_get(m, &gi);
    ck_assert_int_ge((int)gi.replays, got - 1);
    printf("golden case 0 through graphs: %d tokens, %llu replays\n", got, (unsigned long long)gi.replays);
    model_free(m);
}
END_TEST

/* A graph model and an eager one loaded with each variable of vars set to
 * "0" (read when a model's kernel context is made): graphs equal
 * eager for every batch size of batches (bitwise at captured sizes), then,
 * with golden, the golden tokens of case 0 through a fresh pair, graphs and
 * eager. */
static void forms_case(const char *what, const char *const *vars, int n_vars, const int *batches, int n_batches,
                       bool golden)
{
    for (int pass = 0; pass < (golden ? 2 : 1); pass++) {
        for (int v = 0; v < n_vars; v++)
            setenv(vars[v], "0", 1);
        model *g = load(false), *e = load(true);
        for (int v = 0; v < n_vars; v++)
            unsetenv(vars[v]);
        for (int k = 0; pass == 0 && k < n_batches; k++) {
            cmp_stats cs = {0};
            run_batch(g, e, batches[k], &cs);
            printf("%s, batch %d: %ld steps, logits bitwise equal in %ld, max |diff| %g\n", what, batches[k],
                   cs.steps, cs.bitwise_steps, cs.max_abs);
        }
        if (pass == 1) {
            int got_g = golden_through(g), got_e = golden_through(e);
            printf("golden case 0, %s: %d tokens through graphs, %d eager\n", what, got_g, got_e);
        }
        model_free(g);
        model_free(e);
    }
}

/* The fused products (kern_matmul_fused): stories260K's weights are below
 * the GEMV's size threshold, so it is lowered to 0 for these models; its
 * QKV and gate/up products then end with RoPE + K/V write and SiLU * up in
 * the GEMV's epilogue, on the CUDA-core form at 1 and 2 tokens and the
 * tensor-core form at 3 and 4 (kern_matmul_epi_fusable). (Its down weight,
 * 172 columns, is off the GEMV route, so its layers never run whole as
 * fused_layer: test_dummy_forms does.) Graphs equal eager bitwise on these
 * paths too (the choice depends on the row count only), and the golden
 * tokens come out of them, graphs and eager. */
START_TEST(test_fused_layers)
{
    static const char *const vars[] = {"INFERD_GEMV_MIN_BYTES"};
    static const int batches[] = {1, 2, 3, 4};
    forms_case("fused layers", vars, 1, batches, 4, true);
}
END_TEST

/* The O and down products adding into the residual stream (forward.c
 * use_accum, kern_matmul_accum: cuBLASLt with beta = 1): stories260K's
 * weights are below its size floor, so it is lowered to 0
 * (INFERD_GEMM_ACCUM_MIN_BYTES) and the GEMV turned off (every product
 * cuBLASLt's, every batch folds the add). Graphs equal eager (bitwise at
 * captured sizes, graphs captured with the folded add), and the golden
 * tokens come out of it, graphs and eager. */
START_TEST(test_accum_layers)
{
    static const char *const vars[] = {"INFERD_GEMM_ACCUM_MIN_BYTES", "INFERD_GEMV_MAX_N"};
    static const int batches[] = {1, 3, 16};
    forms_case("products into the residual stream", vars, 2, batches, 3, true);
}
END_TEST

/* The decode forms on a Llama-3-shaped dummy (configs/models/test-llama3-
 * small: every weight of 1 MiB and more, 8-aligned, so the GEMV takes them
 * at the default thresholds): graphs equal eager (bitwise at captured
 * sizes) at 1 token (the fused layers), 3 and 8 (the tensor-core form's
 * epilogues) and 16, as they are by default. No golden tokens: the
 * weights are random. */
START_TEST(test_dummy_forms)
{
    static const int batches[] = {1, 3, 8, 16};
    g_dummy_dir = INFERD_TEST_SOURCE_DIR "/configs/models/test-llama3-small";
    forms_case("dummy Llama-3 small, defaults", NULL, 0, batches, 4, false);
    g_dummy_dir = NULL;
}
END_TEST

/* The fp8 KV cache (--kv-cache-dtype fp8): graphs equal eager (bitwise at
 * captured sizes, the same tokens everywhere) with the cache in e4m3, the
 * decode kernel reading the bytes and the prefill attention their bf16
 * copy (mixed steps included). No golden tokens: e4m3 keys and values
 * move the logits of this tiny model by more than its token margins. */
START_TEST(test_fp8_kv_cache)
{
    g_kv_cache_dtype = MODEL_KV_CACHE_FP8_E4M3;
    model *g = load(false), *e = load(true);
    g_kv_cache_dtype = MODEL_KV_CACHE_AUTO;
    ck_assert(model_kv_dtype(g) == KERN_DTYPE_FP8_E4M3 && model_kv_dtype(e) == KERN_DTYPE_FP8_E4M3);
    static const int batches[] = {1, 3, 16};
    for (int k = 0; k < 3; k++) {
        cmp_stats cs = {0};
        run_batch(g, e, batches[k], &cs);
        printf("fp8 KV cache, batch %d: %ld steps, logits bitwise equal in %ld, max |diff| %g\n", batches[k],
               cs.steps, cs.bitwise_steps, cs.max_abs);
    }
    model_free(g);
    model_free(e);
}
END_TEST

START_TEST(test_ceilings)
{
    kern_ctx_opts ko = {.backend = KERN_BACKEND_CUDA};
    kern_ctx *kc = NULL;
    ck_assert_int_eq(kern_ctx_create(&ko, &kc), INFERD_OK);
    kern_ceilings c;
    ck_assert_msg(kern_measure_ceilings(kc, &c) == INFERD_OK, "%s", inferd_last_error());
    printf("ceilings on %s: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", c.device, c.copy_gbps, c.gemm_tflops);
    ck_assert(c.copy_gbps > 100 && c.gemm_tflops > 10);
    kern_ctx_free(kc);
}
END_TEST

int main(void)
{
    setenv("CK_FORK", "no", 1); /* CUDA cannot be used in a forked child */
    if (!kern_cuda_available())
        test_skip("no CUDA device");
    g_model_dir = test_fixture_path("models/stories260K");
    cJSON *root = test_golden_stories();
    g_case0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "cases"), 0);
    Suite *s = suite_create("graphs gpu");
    TCase *tc = tcase_create("gpu");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_graphs_equal_eager);
    tcase_add_test(tc, test_golden_through_graphs);
    tcase_add_test(tc, test_chained_steps);
    tcase_add_test(tc, test_fused_layers);
    tcase_add_test(tc, test_accum_layers);
    tcase_add_test(tc, test_fp8_kv_cache);
    if (!getenv("INFERD_TEST_QUICK")) { /* skipped under the sanitizer: 1 GiB of scratch; two 200 MiB models */
        tcase_add_test(tc, test_ceilings);
        tcase_add_test(tc, test_dummy_forms);
    }
    suite_add_tcase(s, tc);
    int rc = test_run_suite(s);
    cJSON_Delete(root);
    inferd_free(g_model_dir);
    return rc;
}
