/* tests/model/test_qwen.c: Qwen2ForCausalLM and Qwen3ForCausalLM on the CPU
 * backend.
 *
 *  (a) the forward pass against a naive dense reference written here in
 *      double precision: a 2-layer model with known random weights, saved as
 *      an F32 safetensors HF directory (config.json + model.safetensors) and
 *      loaded through model_load: Qwen2 (q/k/v biases, tied embeddings,
 *      head_dim = hidden / heads, transformers-4 config) and Qwen3 (per-head
 *      q/k RMSNorm before RoPE, head_dim independent of hidden / heads,
 *      untied lm_head, transformers-5 config); the logits of every prompt
 *      position must agree within 2e-4 relative (fp32 accumulation vs
 *      double); a missing bias / q_norm tensor is refused naming it;
 *  (b) configs/models/test-qwen2-small and test-qwen3-small load with
 *      --load-format dummy and generate greedily (finite logits, ids in the
 *      vocabulary, the same tokens when the prompt is replayed).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/buf.h"
#include "common/util.h"
#include "model/model.h"
#include "test_util.h"

/* --- a tiny HF directory ------------------------------------------------------ */

typedef struct {
    bool qwen3;
    int d, ffn, layers, nh, nkv, hd, vocab;
    float eps, theta;
} tiny_cfg;

typedef struct {
    char name[96];
    int64_t shape[2];
    int n_dims;
    float *data;
} tiny_tensor;

typedef struct {
    tiny_tensor t[64];
    int n;
} tiny_model;

static float *tiny_add(tiny_model *m, const char *name, int64_t r, int64_t c, int n_dims, uint64_t seed, float lo,
                       float hi)
{
    ck_assert_int_lt(m->n, 64);
    tiny_tensor *t = &m->t[m->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->shape[0] = r;
    t->shape[1] = c;
    t->n_dims = n_dims;
    t->data = inferd_malloc((size_t)(r * c) * sizeof(float));
    test_fill_uniform(t->data, (size_t)(r * c), seed, lo, hi);
    return t->data;
}

/* Tensor `suffix` of layer l (l < 0: the top-level tensor named suffix). */
static const float *tiny_get(const tiny_model *m, int l, const char *suffix)
{
    char name[96];
    if (l >= 0)
        snprintf(name, sizeof name, "model.layers.%d.%s", l, suffix);
    else
        snprintf(name, sizeof name, "%s", suffix);
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->t[i].name, name) == 0)
            return m->t[i].data;
    ck_abort_msg("no tensor %s", name);
    return NULL;
}

static void tiny_build(tiny_model *m, const tiny_cfg *c)
{
    memset(m, 0, sizeof *m);
    const int64_t q = (int64_t)c->nh * c->hd, kv = (int64_t)c->nkv * c->hd;
    uint64_t s = 100;
    tiny_add(m, "model.embed_tokens.weight", c->vocab, c->d, 2, s++, -1.0f, 1.0f);
    for (int l = 0; l < c->layers; l++) {
        char n[96];
#define ADD(suffix, r, cc, nd, lo, hi)                                           \
    do {                                                                         \
        snprintf(n, sizeof n, "model.layers.%d.%s", l, suffix);                  \
        tiny_add(m, n, r, cc, nd, s++, lo, hi);                                  \
    } while (0)
        const float wd = 1.0f / sqrtf((float)c->d);
        ADD("input_layernorm.weight", 1, c->d, 1, 0.8f, 1.2f);
        ADD("self_attn.q_proj.weight", q, c->d, 2, -wd, wd);
        ADD("self_attn.k_proj.weight", kv, c->d, 2, -wd, wd);
        ADD("self_attn.v_proj.weight", kv, c->d, 2, -wd, wd);
        if (!c->qwen3) {
            ADD("self_attn.q_proj.bias", 1, q, 1, -0.5f, 0.5f);
            ADD("self_attn.k_proj.bias", 1, kv, 1, -0.5f, 0.5f);
            ADD("self_attn.v_proj.bias", 1, kv, 1, -0.5f, 0.5f);
        } else {
            ADD("self_attn.q_norm.weight", 1, c->hd, 1, 0.5f, 1.5f);
            ADD("self_attn.k_norm.weight", 1, c->hd, 1, 0.5f, 1.5f);
        }
        ADD("self_attn.o_proj.weight", c->d, q, 2, -1.0f / sqrtf((float)q), 1.0f / sqrtf((float)q));
        ADD("post_attention_layernorm.weight", 1, c->d, 1, 0.8f, 1.2f);
        ADD("mlp.gate_proj.weight", c->ffn, c->d, 2, -wd, wd);
        ADD("mlp.up_proj.weight", c->ffn, c->d, 2, -wd, wd);
        ADD("mlp.down_proj.weight", c->d, c->ffn, 2, -1.0f / sqrtf((float)c->ffn), 1.0f / sqrtf((float)c->ffn));
#undef ADD
    }
    tiny_add(m, "model.norm.weight", 1, c->d, 1, s++, 0.8f, 1.2f);
    if (c->qwen3) /* untied */
        tiny_add(m, "lm_head.weight", c->vocab, c->d, 2, s++, -1.0f / sqrtf((float)c->d), 1.0f / sqrtf((float)c->d));
}

static void tiny_free(tiny_model *m)
{
    for (int i = 0; i < m->n; i++)
        inferd_free(m->t[i].data);
}

static void write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char *p = util_path_join(dir, name);
    FILE *f = fopen(p, "wb");
    ck_assert_msg(f != NULL, "cannot write %s", p);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    fclose(f);
    inferd_free(p);
}

/* config.json (Qwen2: transformers 4 keys; Qwen3: transformers 5 keys) and an
 * F32 model.safetensors of m, leaving out the tensor named `skip` (or NULL). */
static void tiny_write(const char *dir, const tiny_cfg *c, const tiny_model *m, const char *skip)
{
    char cfg[2048];
    if (c->qwen3)
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"hidden_size\": %d,"
                 " \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
                 " \"num_key_value_heads\": %d, \"head_dim\": %d, \"vocab_size\": %d,"
                 " \"max_position_embeddings\": 64, \"rms_norm_eps\": %g, \"attention_bias\": false,"
                 " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": %g},"
                 " \"layer_types\": [\"full_attention\", \"full_attention\"], \"use_sliding_window\": false,"
                 " \"sliding_window\": null, \"tie_word_embeddings\": false, \"dtype\": \"float32\"}",
                 c->d, c->ffn, c->layers, c->nh, c->nkv, c->hd, c->vocab, c->eps, c->theta);
    else
        snprintf(cfg, sizeof cfg,
                 "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"hidden_size\": %d,"
                 " \"intermediate_size\": %d, \"num_hidden_layers\": %d, \"num_attention_heads\": %d,"
                 " \"num_key_value_heads\": %d, \"vocab_size\": %d, \"max_position_embeddings\": 64,"
                 " \"rms_norm_eps\": %g, \"rope_theta\": %g, \"use_sliding_window\": false, \"sliding_window\": 32,"
                 " \"max_window_layers\": 1, \"tie_word_embeddings\": true, \"torch_dtype\": \"float32\"}",
                 c->d, c->ffn, c->layers, c->nh, c->nkv, c->vocab, c->eps, c->theta);
    write_file(dir, "config.json", cfg, strlen(cfg));

    inferd_buf hdr = INFERD_BUF_INIT;
    inferd_buf_append_str(&hdr, "{");
    size_t off = 0;
    bool first = true;
    for (int i = 0; i < m->n; i++) {
        const tiny_tensor *t = &m->t[i];
        if (skip && strcmp(skip, t->name) == 0)
            continue;
        size_t bytes = (size_t)(t->shape[0] * t->shape[1]) * sizeof(float);
        char e[256];
        if (t->n_dims == 1)
            snprintf(e, sizeof e, "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%lld], \"data_offsets\": [%zu, %zu]}",
                     first ? "" : ", ", t->name, (long long)(t->shape[0] * t->shape[1]), off, off + bytes);
        else
            snprintf(e, sizeof e,
                     "%s\"%s\": {\"dtype\": \"F32\", \"shape\": [%lld, %lld], \"data_offsets\": [%zu, %zu]}",
                     first ? "" : ", ", t->name, (long long)t->shape[0], (long long)t->shape[1], off, off + bytes);
        inferd_buf_append_str(&hdr, e);
        off += bytes;
        first = false;
    }
    inferd_buf_append_str(&hdr, "}");
    while (hdr.len % 8)
        inferd_buf_append_str(&hdr, " ");
    size_t total = 8 + hdr.len + off;
    char *file = inferd_malloc(total);
    uint64_t hl = hdr.len;
    memcpy(file, &hl, 8); /* little-endian host */
    memcpy(file + 8, hdr.data, hdr.len);
    char *p = file + 8 + hdr.len;
    for (int i = 0; i < m->n; i++) {
        const tiny_tensor *t = &m->t[i];
        if (skip && strcmp(skip, t->name) == 0)
            continue;
        size_t bytes = (size_t)(t->shape[0] * t->shape[1]) * sizeof(float);
        memcpy(p, t->data, bytes);
        p += bytes;
    }
    write_file(dir, "model.safetensors", file, total);
    inferd_free(file);
    inferd_buf_free(&hdr);
}

/* --- the naive reference ------------------------------------------------------ */

static void ref_rmsnorm(double *y, const double *x, const float *w, int n, double eps)
{
    double ss = 0;
    for (int i = 0; i < n; i++)
        ss += x[i] * x[i];
    double inv = 1.0 / sqrt(ss / n + eps);
    for (int i = 0; i < n; i++)
        y[i] = x[i] * inv * w[i];
}

/* y[r] = sum_c W[r, c] x[c] (+ b[r]) */
static void ref_linear(double *y, const float *W, const float *b, const double *x, int rows, int cols)
{
    for (int r = 0; r < rows; r++) {
        double s = b ? b[r] : 0.0;
        for (int c = 0; c < cols; c++)
            s += (double)W[(size_t)r * cols + c] * x[c];
        y[r] = s;
    }
}

static void ref_rope(double *v, int hd, int pos, double theta)
{
    const int half = hd / 2;
    for (int j = 0; j < half; j++) {
        double inv = 1.0 / pow(theta, 2.0 * j / hd), a = pos * inv;
        double x1 = v[j], x2 = v[j + half];
        v[j] = x1 * cos(a) - x2 * sin(a);
        v[j + half] = x2 * cos(a) + x1 * sin(a);
    }
}

/* logits[T, vocab] of the prompt toks[T], every position. */
static void ref_forward(const tiny_cfg *c, const tiny_model *m, const int32_t *toks, int T, double *logits)
{
    const int d = c->d, hd = c->hd, nh = c->nh, nkv = c->nkv, q = nh * hd, kv = nkv * hd;
    double *x = calloc((size_t)T * d, sizeof(double)), *h = calloc((size_t)d, sizeof(double));
    double *Q = calloc((size_t)T * q, sizeof(double)), *K = calloc((size_t)T * kv, sizeof(double));
    double *V = calloc((size_t)T * kv, sizeof(double)), *att = calloc((size_t)q, sizeof(double));
    double *o = calloc((size_t)d, sizeof(double)), *g = calloc((size_t)c->ffn, sizeof(double));
    double *u = calloc((size_t)c->ffn, sizeof(double)), *sc = calloc((size_t)T, sizeof(double));
    const float *emb = tiny_get(m, -1, "model.embed_tokens.weight");
    for (int t = 0; t < T; t++)
        for (int i = 0; i < d; i++)
            x[(size_t)t * d + i] = emb[(size_t)toks[t] * d + i];
    for (int l = 0; l < c->layers; l++) {
        const float *qb = c->qwen3 ? NULL : tiny_get(m, l, "self_attn.q_proj.bias");
        const float *kb = c->qwen3 ? NULL : tiny_get(m, l, "self_attn.k_proj.bias");
        const float *vb = c->qwen3 ? NULL : tiny_get(m, l, "self_attn.v_proj.bias");
        const float *qn = c->qwen3 ? tiny_get(m, l, "self_attn.q_norm.weight") : NULL;
        const float *kn = c->qwen3 ? tiny_get(m, l, "self_attn.k_norm.weight") : NULL;
        for (int t = 0; t < T; t++) {
            ref_rmsnorm(h, x + (size_t)t * d, tiny_get(m, l, "input_layernorm.weight"), d, c->eps);
            ref_linear(Q + (size_t)t * q, tiny_get(m, l, "self_attn.q_proj.weight"), qb, h, q, d);
            ref_linear(K + (size_t)t * kv, tiny_get(m, l, "self_attn.k_proj.weight"), kb, h, kv, d);
            ref_linear(V + (size_t)t * kv, tiny_get(m, l, "self_attn.v_proj.weight"), vb, h, kv, d);
            for (int hh = 0; hh < nh; hh++) {
                double *v = Q + (size_t)t * q + (size_t)hh * hd;
                if (qn)
                    ref_rmsnorm(v, v, qn, hd, c->eps);
                ref_rope(v, hd, t, c->theta);
            }
            for (int hh = 0; hh < nkv; hh++) {
                double *v = K + (size_t)t * kv + (size_t)hh * hd;
                if (kn)
                    ref_rmsnorm(v, v, kn, hd, c->eps);
                ref_rope(v, hd, t, c->theta);
            }
        }
        for (int t = 0; t < T; t++) {
            for (int hh = 0; hh < nh; hh++) {
                const int kh = hh / (nh / nkv);
                const double *qv = Q + (size_t)t * q + (size_t)hh * hd;
                double mx = -INFINITY, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double dot = 0;
                    for (int j = 0; j < hd; j++)
                        dot += qv[j] * K[(size_t)s * kv + (size_t)kh * hd + j];
                    sc[s] = dot / sqrt((double)hd);
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s <= t; s++)
                    sum += (sc[s] = exp(sc[s] - mx));
                for (int j = 0; j < hd; j++) {
                    double a = 0;
                    for (int s = 0; s <= t; s++)
                        a += sc[s] * V[(size_t)s * kv + (size_t)kh * hd + j];
                    att[(size_t)hh * hd + j] = a / sum;
                }
            }
            ref_linear(o, tiny_get(m, l, "self_attn.o_proj.weight"), NULL, att, d, q);
            double *xt = x + (size_t)t * d;
            for (int i = 0; i < d; i++)
                xt[i] += o[i];
        }
        for (int t = 0; t < T; t++) {
            double *xt = x + (size_t)t * d;
            ref_rmsnorm(h, xt, tiny_get(m, l, "post_attention_layernorm.weight"), d, c->eps);
            ref_linear(g, tiny_get(m, l, "mlp.gate_proj.weight"), NULL, h, c->ffn, d);
            ref_linear(u, tiny_get(m, l, "mlp.up_proj.weight"), NULL, h, c->ffn, d);
            for (int i = 0; i < c->ffn; i++)
                g[i] = g[i] / (1.0 + exp(-g[i])) * u[i];
            ref_linear(o, tiny_get(m, l, "mlp.down_proj.weight"), NULL, g, d, c->ffn);
            for (int i = 0; i < d; i++)
                xt[i] += o[i];
        }
    }
    const float *head = tiny_get(m, -1, c->qwen3 ? "lm_head.weight" : "model.embed_tokens.weight");
    for (int t = 0; t < T; t++) {
        ref_rmsnorm(h, x + (size_t)t * d, tiny_get(m, -1, "model.norm.weight"), d, c->eps);
        ref_linear(logits + (size_t)t * c->vocab, head, NULL, h, c->vocab, d);
    }
    free(x), free(h), free(Q), free(K), free(V), free(att), free(o), free(g), free(u), free(sc);
}

/* --- (a) forward vs the reference ------------------------------------------- */

static void opts_cpu(model_opts *o, const char *dir, model_load_format fmt)
{
    model_opts_default(o);
    o->model_dir = dir;
    o->load_format = fmt;
    o->backend = KERN_BACKEND_CPU;
    o->n_threads = 2;
    o->max_num_seqs = 16; /* logits rows per step: the whole 9-token prompt */
    o->max_num_batched_tokens = 32;
    o->block_size = 4;
    o->max_model_len = 32;
    o->kv_cache_bytes = 4 << 20;
}

static void forward_case(const tiny_cfg *c)
{
    tiny_model tm;
    tiny_build(&tm, c);
    char *dir = test_make_temp_dir("inferd-qwen");
    tiny_write(dir, c, &tm, NULL);
    model_opts o;
    opts_cpu(&o, dir, MODEL_LOAD_SAFETENSORS);
    model *m = NULL;
    ck_assert_msg(model_load(&o, &m) == INFERD_OK, "%s", inferd_last_error());
    const model_config *mc = model_get_config(m);
    ck_assert_int_eq(mc->head_dim, c->hd);
    ck_assert(mc->qkv_bias == !c->qwen3 && mc->qk_norm == c->qwen3);

    enum { T = 9 };
    const int32_t toks[T] = {3, 17, 5, 60, 1, 42, 42, 7, 88};
    int32_t table[64];
    ck_assert_int_le(model_max_blocks_per_seq(m), 64);
    for (int i = 0; i < model_max_blocks_per_seq(m); i++)
        table[i] = 1 + i;
    /* the prompt in two chunks (5 + 4 tokens), so the second reads K/V from the cache */
    float *got = inferd_malloc((size_t)T * c->vocab * sizeof(float));
    ck_assert_msg(model_forward_seq(m, table, toks, 0, 5, 0) == INFERD_OK, "%s", inferd_last_error());
    model_logits_to_host(m, got);
    ck_assert_msg(model_forward_seq(m, table, toks + 5, 5, T - 5, 0) == INFERD_OK, "%s", inferd_last_error());
    model_logits_to_host(m, got + (size_t)5 * c->vocab);
    double *ref = inferd_malloc((size_t)T * c->vocab * sizeof(double));
    ref_forward(c, &tm, toks, T, ref);
    double max_err = 0, max_ref = 0;
    for (int i = 0; i < T * c->vocab; i++) {
        max_err = fmax(max_err, fabs(got[i] - ref[i]));
        max_ref = fmax(max_ref, fabs(ref[i]));
    }
    printf("%s: max |logit| %.3f, max |err| %.2e\n", c->qwen3 ? "qwen3" : "qwen2", max_ref, max_err);
    ck_assert_msg(max_ref > 0.5, "degenerate reference logits");
    ck_assert_msg(max_err <= 2e-4 * fmax(1.0, max_ref), "%s: logits differ from the reference by %g",
                  c->qwen3 ? "qwen3" : "qwen2", max_err);
    model_free(m);

    /* a checkpoint without one of the architecture's extra tensors is refused, naming it */
    const char *miss = c->qwen3 ? "model.layers.1.self_attn.k_norm.weight" : "model.layers.0.self_attn.v_proj.bias";
    tiny_write(dir, c, &tm, miss);
    m = NULL;
    ck_assert(model_load(&o, &m) != INFERD_OK);
    ck_assert_msg(strstr(inferd_last_error(), miss), "message '%s' lacks %s", inferd_last_error(), miss);

    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    inferd_free(dir);
    inferd_free(ref);
    inferd_free(got);
    tiny_free(&tm);
}

START_TEST(test_qwen2_forward_vs_reference)
{
    tiny_cfg c = {.qwen3 = false, .d = 48, .ffn = 64, .layers = 2, .nh = 4, .nkv = 2, .hd = 12, .vocab = 97,
                  .eps = 1e-6f, .theta = 1000000.0f};
    forward_case(&c);
}
END_TEST

START_TEST(test_qwen3_forward_vs_reference)
{
    tiny_cfg c = {.qwen3 = true, .d = 40, .ffn = 64, .layers = 2, .nh = 4, .nkv = 2, .hd = 16, .vocab = 97,
                  .eps = 1e-6f, .theta = 1000000.0f};
    forward_case(&c);
}
END_TEST

/* --- (b) the shipped test presets with dummy weights -------------------------- */

static void greedy(model *m, const int32_t *prompt, int n, int steps, int32_t *out)
{
    const int vocab = model_get_config(m)->vocab_size;
    int32_t table[512], toks[64];
    ck_assert_int_le(model_max_blocks_per_seq(m), 512);
    for (int i = 0; i < model_max_blocks_per_seq(m); i++)
        table[i] = 1 + i;
    memcpy(toks, prompt, (size_t)n * sizeof(int32_t));
    float *logits = inferd_malloc((size_t)vocab * sizeof(float));
    int len = n;
    for (int s = 0; s < steps; s++) {
        int start = s == 0 ? 0 : len - 1, cnt = s == 0 ? n : 1;
        ck_assert_msg(model_forward_seq(m, table, toks + start, start, cnt, cnt - 1) == INFERD_OK, "%s",
                      inferd_last_error());
        model_logits_to_host(m, logits);
        int best = 0;
        for (int v = 0; v < vocab; v++) {
            ck_assert_msg(isfinite(logits[v]), "step %d: logit %d not finite", s, v);
            if (logits[v] > logits[best])
                best = v;
        }
        out[s] = best;
        toks[len++] = best;
    }
    inferd_free(logits);
}

static void preset_case(const char *name, bool qwen3)
{
    const char *src = getenv("INFERD_SOURCE_DIR");
    if (!src || !*src)
        src = INFERD_TEST_SOURCE_DIR;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/configs/models/%s", src, name);
    model_opts o;
    opts_cpu(&o, dir, MODEL_LOAD_DUMMY);
    o.max_model_len = 64;
    o.kv_cache_bytes = 64 << 20;
    model *m = NULL;
    ck_assert_msg(model_load(&o, &m) == INFERD_OK, "%s: %s", name, inferd_last_error());
    const model_config *c = model_get_config(m);
    ck_assert(c->qk_norm == qwen3 && c->qkv_bias == !qwen3);
    const int32_t prompt[6] = {1, 15043, 3186, 29892, 920, 526};
    int32_t a[12], b[12];
    greedy(m, prompt, 6, 12, a);
    greedy(m, prompt, 6, 12, b); /* the same blocks again: same tokens */
    printf("%s (dummy):", name);
    for (int i = 0; i < 12; i++) {
        ck_assert(a[i] >= 0 && a[i] < c->vocab_size);
        ck_assert_int_eq(a[i], b[i]);
        printf(" %d", a[i]);
    }
    printf("\n");
    model_free(m);
}

START_TEST(test_qwen_presets_dummy)
{
    preset_case("test-qwen2-small", false);
    preset_case("test-qwen3-small", true);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model_qwen");
    TCase *tc = tcase_create("qwen");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_qwen2_forward_vs_reference);
    tcase_add_test(tc, test_qwen3_forward_vs_reference);
    tcase_add_test(tc, test_qwen_presets_dummy);
    suite_add_tcase(s, tc);
    return test_run_suite(s);
}
