/* model/model_weights.c: weights into one backend slab.
 *
 * Two passes over the same description of the model's matrices: the first
 * assigns each kern_weight its offset and dtype (so one allocation holds them
 * all), the second copies the tensors in from the mmapped safetensors, fusing
 * q/k/v into wqkv and gate/up into w_gate_up (and Qwen2's q/k/v biases into
 * one qkv_bias vector) as it goes, converting dtypes on
 * the way (kern_weight_upload). With --load-format dummy the second pass fills
 * random values on the device instead (norm weights, Qwen3's q/k norms
 * included, are set to 1 so the activations stay in a sane range; biases
 * are uniform in [-0.5, 0.5]). Shapes are checked against the config
 * before anything is copied; every error names the tensor.
 *
 * Between the passes, model_check_host_memory (model.c) refuses a CPU slab
 * that would not fit in available memory, before it is allocated (an
 * overcommitted malloc succeeds and the process is OOM-killed later, when the
 * pages are touched). After the second pass one reduction over the slab
 * (kern_weights_count_nonfinite) counts NaN/Inf values per source tensor: a
 * checkpoint with one NaN otherwise serves empty text without an error. The
 * count runs over every source tensor as a view into its fused weight (q, k
 * and v rows of wqkv separately), so the error names the file's tensor; the
 * dummy weights are checked too (one read of the slab at memory bandwidth).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/log.h"
#include "common/util.h"
#include "model/model_internal.h"
#include "model/safetensors.h"

#define WEIGHT_ALIGN 256

typedef struct {
    model *m;
    st_set *st;  /* NULL for dummy */
    bool assign; /* pass 1: assign offsets; pass 2: fill */
    size_t offset;
    uint64_t seed;
    int64_t done_bytes, total_bytes;
    bool tty;
    /* pass 2: one view per source tensor, for the non-finite check */
    kern_weight *views; /* [n_views] rows of a slab weight */
    char (*view_names)[128]; /* [n_views] the source tensor's name */
    int n_views, cap_views;
} weight_pass;

/* One source tensor feeding rows [row_off, row_off + rows) of a weight:
 * the window [row0, row0 + rows) x [col0, col0 + cols) of the file's
 * [file_rows, file_cols] tensor (a tensor-parallel rank's slice; the whole
 * tensor without tensor parallelism). */
typedef struct {
    char name[128];
    int64_t file_rows, file_cols;
    int64_t row0, rows, col0, cols;
    int n_dims; /* 1 for vectors (rows * cols values: norms [1, d], biases [n, 1]), 2 for matrices */
} weight_src;

static kern_dtype file_dtype_of(weight_pass *p, const char *name)
{
    if (p->st) {
        const st_tensor *t = st_find(p->st, name);
        if (t)
            return t->dtype;
    }
    const char *td = p->m->cfg.torch_dtype;
    if (strcmp(td, "float32") == 0)
        return KERN_DTYPE_F32;
    if (strcmp(td, "float16") == 0)
        return KERN_DTYPE_F16;
    return KERN_DTYPE_BF16;
}

static void progress(weight_pass *p, int64_t bytes)
{
    p->done_bytes += bytes;
    if (!p->tty || p->total_bytes <= 0)
        return;
    fprintf(stderr, "\rloading weights: %5.1f%% (%.0f / %.0f MiB)", 100.0 * p->done_bytes / p->total_bytes,
            p->done_bytes / 1048576.0, p->total_bytes / 1048576.0);
    if (p->done_bytes >= p->total_bytes)
        fputc('\n', stderr);
}

/* Remember rows [row, row + s->rows) of w as the source tensor s->name. */
static void add_view(weight_pass *p, const kern_weight *w, int64_t row, const weight_src *s)
{
    if (p->n_views == p->cap_views) {
        p->cap_views = p->cap_views ? 2 * p->cap_views : 64;
        p->views = inferd_realloc(p->views, (size_t)p->cap_views * sizeof *p->views);
        p->view_names = inferd_realloc(p->view_names, (size_t)p->cap_views * sizeof *p->view_names);
    }
    size_t off = (size_t)(row * w->cols) * kern_dtype_size(w->dtype);
    p->views[p->n_views] = (kern_weight){(char *)w->data + off, w->dtype, s->rows, w->cols};
    snprintf(p->view_names[p->n_views], sizeof p->view_names[0], "%.*s", (int)sizeof p->view_names[0] - 1, s->name);
    p->n_views++;
}

/* Rows of a column window go through a host buffer of at most this many
 * bytes (a rank's slice of O or down is not contiguous in the file). */
#define COL_SLICE_CHUNK_BYTES ((size_t)64 << 20)

/* Upload the column window of s (file tensor t) into w at row `row`, in
 * chunks of whole rows gathered on the host. */
static void upload_col_window(weight_pass *p, kern_weight *w, int64_t row, const weight_src *s, const st_tensor *t)
{
    const size_t es = kern_dtype_size(t->dtype), row_bytes = (size_t)s->cols * es;
    const int64_t chunk = INFERD_MAX((int64_t)1, (int64_t)(COL_SLICE_CHUNK_BYTES / row_bytes));
    char *buf = inferd_malloc((size_t)INFERD_MIN(chunk, s->rows) * row_bytes);
    for (int64_t r0 = 0; r0 < s->rows; r0 += chunk) {
        const int64_t n = INFERD_MIN(chunk, s->rows - r0);
        for (int64_t i = 0; i < n; i++)
            memcpy(buf + (size_t)i * row_bytes,
                   (const char *)t->data + ((size_t)(s->row0 + r0 + i) * (size_t)s->file_cols + (size_t)s->col0) * es,
                   row_bytes);
        kern_weight_upload(p->m->kc, w, row + r0, buf, t->dtype, n);
    }
    inferd_free(buf);
}

static inferd_status fill_from_file(weight_pass *p, kern_weight *w, const weight_src *src, int n_src)
{
    int64_t row = 0;
    for (int i = 0; i < n_src; i++) {
        const weight_src *s = &src[i];
        int64_t shape[2] = {s->file_rows, s->file_cols}, len = s->file_rows * s->file_cols;
        const int64_t *sh = s->n_dims == 1 ? &len : shape;
        const st_tensor *t;
        inferd_status st = st_expect(p->st, s->name, s->n_dims, sh, &t);
        if (st != INFERD_OK)
            return st;
        const size_t es = kern_dtype_size(t->dtype);
        if (s->col0 == 0 && s->cols == s->file_cols)
            kern_weight_upload(p->m->kc, w, row, (const char *)t->data + (size_t)(s->row0 * s->file_cols) * es,
                               t->dtype, s->rows);
        else
            upload_col_window(p, w, row, s, t);
        row += s->rows;
        progress(p, s->rows * s->cols * (int64_t)es);
    }
    return INFERD_OK;
}

/* A [1, cols] weight (a norm's) set to ones. */
static void fill_ones(kern_ctx *kc, kern_weight *w)
{
    float *ones = inferd_malloc(sizeof(float) * (size_t)w->cols);
    for (int64_t i = 0; i < w->cols; i++)
        ones[i] = 1.0f;
    kern_weight_upload(kc, w, 0, ones, KERN_DTYPE_F32, 1);
    inferd_free(ones);
}

/* Dummy values: norms 1; biases ([n, 1]) uniform(-0.5, 0.5), the size of a
 * projection's output; matrices uniform(-s, s) with s = 1/sqrt(in
 * features), which keeps activations O(1). Each source window is filled
 * with its place in the whole (fused) matrix, one seed per weight, so a
 * tensor-parallel rank holds the same values as those rows and columns of
 * the unsplit model. */
static void fill_dummy(weight_pass *p, kern_weight *w, const weight_src *src, int n_src)
{
    if (src[0].n_dims == 1 && src[0].cols > 1) {
        fill_ones(p->m->kc, w);
        return;
    }
    const uint64_t seed = p->seed++;
    int64_t row = 0, fused_row = 0;
    for (int i = 0; i < n_src; i++) {
        const weight_src *s = &src[i];
        const float scale = s->n_dims == 1 ? 0.5f : 1.0f / sqrtf((float)s->file_cols);
        kern_weight_fill_random_part(p->m->kc, w, row, s->rows, seed, scale, fused_row + s->row0, s->col0,
                                     s->file_cols);
        row += s->rows;
        fused_row += s->file_rows;
    }
}

/* Assign (pass 1) or fill (pass 2) the weight made of `src` rows. */
static inferd_status do_weight(weight_pass *p, kern_weight *w, const weight_src *src, int n_src)
{
    if (p->assign) {
        int64_t rows = 0;
        for (int i = 0; i < n_src; i++)
            rows += src[i].rows;
        w->rows = rows;
        w->cols = src[0].cols;
        w->dtype = kern_weight_dtype(p->m->kc, file_dtype_of(p, src[0].name));
        w->data = (void *)(uintptr_t)p->offset; /* relocated after allocation */
        size_t bytes = (size_t)rows * (size_t)w->cols * kern_dtype_size(w->dtype);
        p->offset += (bytes + WEIGHT_ALIGN - 1) & ~(size_t)(WEIGHT_ALIGN - 1);
        p->total_bytes += (int64_t)bytes;
        return INFERD_OK;
    }
    int64_t row = 0;
    for (int i = 0; i < n_src; i++) {
        add_view(p, w, row, &src[i]);
        row += src[i].rows;
    }
    if (!p->st) {
        fill_dummy(p, w, src, n_src);
        progress(p, kern_weight_bytes(w));
        return INFERD_OK;
    }
    return fill_from_file(p, w, src, n_src);
}

/* The whole tensor [rows, cols]. */
static weight_src src1(const char *name, int64_t rows, int64_t cols, int n_dims)
{
    weight_src s = {.file_rows = rows, .file_cols = cols, .rows = rows, .cols = cols, .n_dims = n_dims};
    snprintf(s.name, sizeof s.name, "%s", name);
    return s;
}

/* Rows [r.begin * unit, (r.begin + r.count) * unit) of a [rows, cols] tensor
 * (column-parallel weights, biases, vocabulary rows). */
static weight_src src_rows(const char *name, int64_t rows, int64_t cols, int n_dims, model_range r, int64_t unit)
{
    weight_src s = src1(name, rows, cols, n_dims);
    s.row0 = r.begin * unit;
    s.rows = r.count * unit;
    return s;
}

/* Columns [r.begin * unit, ...) of a [rows, cols] matrix (row-parallel). */
static weight_src src_cols(const char *name, int64_t rows, int64_t cols, model_range r, int64_t unit)
{
    weight_src s = src1(name, rows, cols, 2);
    s.col0 = r.begin * unit;
    s.cols = r.count * unit;
    return s;
}

static inferd_status do_layer(weight_pass *p, int l)
{
    const model_config *c = &p->m->cfg;
    const model_shard *sh = &p->m->sh;
    model_layer *L = &p->m->layers[l];
    int64_t d = c->hidden_size, hd = c->head_dim, f = c->intermediate_size;
    int64_t nq = c->n_heads * hd, nkv = c->n_kv_heads * hd;
    char pre[64];
    snprintf(pre, sizeof pre, "model.layers.%d.", l);
    char n[10][128];
    static const char *names[10] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                    "self_attn.v_proj.weight", "mlp.gate_proj.weight",
                                    "mlp.up_proj.weight",      "input_layernorm.weight",
                                    "self_attn.o_proj.weight", "post_attention_layernorm.weight",
                                    "mlp.down_proj.weight",    ""};
    for (int i = 0; i < 10; i++)
        snprintf(n[i], sizeof n[i], "%s%s", pre, names[i]);
    weight_src qkv[3] = {src_rows(n[0], nq, d, 2, sh->q_heads, hd), src_rows(n[1], nkv, d, 2, sh->kv_heads, hd),
                         src_rows(n[2], nkv, d, 2, sh->kv_heads, hd)};
    weight_src gu[2] = {src_rows(n[3], f, d, 2, sh->inter, 1), src_rows(n[4], f, d, 2, sh->inter, 1)};
    weight_src one;
    inferd_status st;
    one = src1(n[5], 1, d, 1);
    if ((st = do_weight(p, &L->attn_norm, &one, 1)) != INFERD_OK)
        return st;
    if ((st = do_weight(p, &L->wqkv, qkv, 3)) != INFERD_OK)
        return st;
    one = src_cols(n[6], d, nq, sh->q_heads, hd);
    if ((st = do_weight(p, &L->wo, &one, 1)) != INFERD_OK)
        return st;
    one = src1(n[7], 1, d, 1);
    if ((st = do_weight(p, &L->mlp_norm, &one, 1)) != INFERD_OK)
        return st;
    if ((st = do_weight(p, &L->w_gate_up, gu, 2)) != INFERD_OK)
        return st;
    one = src_cols(n[8], d, f, sh->inter, 1);
    if ((st = do_weight(p, &L->w_down, &one, 1)) != INFERD_OK)
        return st;
    if (c->qkv_bias) { /* Qwen2: q/k/v biases fused like wqkv, as one [q + k + v, 1] vector */
        char bn[3][128];
        static const char *const bnames[3] = {"self_attn.q_proj.bias", "self_attn.k_proj.bias",
                                              "self_attn.v_proj.bias"};
        for (int i = 0; i < 3; i++)
            snprintf(bn[i], sizeof bn[i], "%s%s", pre, bnames[i]);
        weight_src b[3] = {src_rows(bn[0], nq, 1, 1, sh->q_heads, hd), src_rows(bn[1], nkv, 1, 1, sh->kv_heads, hd),
                           src_rows(bn[2], nkv, 1, 1, sh->kv_heads, hd)};
        if ((st = do_weight(p, &L->qkv_bias, b, 3)) != INFERD_OK)
            return st;
    }
    if (c->qk_norm) { /* Qwen3: per-head RMSNorm weights [head_dim], replicated */
        snprintf(one.name, sizeof one.name, "%sself_attn.q_norm.weight", pre);
        one = src1(one.name, 1, hd, 1);
        if ((st = do_weight(p, &L->q_norm, &one, 1)) != INFERD_OK)
            return st;
        snprintf(one.name, sizeof one.name, "%sself_attn.k_norm.weight", pre);
        one = src1(one.name, 1, hd, 1);
        if ((st = do_weight(p, &L->k_norm, &one, 1)) != INFERD_OK)
            return st;
    }
    return INFERD_OK;
}

static inferd_status do_all(weight_pass *p)
{
    model *m = p->m;
    const model_config *c = &m->cfg;
    inferd_status st;
    weight_src s = src_rows("model.embed_tokens.weight", c->vocab_size, c->hidden_size, 2, m->sh.vocab, 1);
    if ((st = do_weight(p, &m->embed, &s, 1)) != INFERD_OK)
        return st;
    for (int l = 0; l < c->n_layers; l++)
        if ((st = do_layer(p, l)) != INFERD_OK)
            return st;
    s = src1("model.norm.weight", 1, c->hidden_size, 1);
    if ((st = do_weight(p, &m->final_norm, &s, 1)) != INFERD_OK)
        return st;
    /* Tied embeddings, or a checkpoint without lm_head: reuse the embedding. */
    bool has_head = p->st ? st_find(p->st, "lm_head.weight") != NULL : !c->tie_word_embeddings;
    if (c->tie_word_embeddings || !has_head) {
        if (!c->tie_word_embeddings && p->assign)
            INFERD_LOG_WARN("lm_head.weight absent: using model.embed_tokens.weight (tied)");
        m->lm_head = m->embed;
        return INFERD_OK;
    }
    s = src_rows("lm_head.weight", c->vocab_size, c->hidden_size, 2, m->sh.vocab, 1);
    return do_weight(p, &m->lm_head, &s, 1);
}

static void relocate(kern_weight *w, char *base)
{
    w->data = base + (uintptr_t)w->data;
}

static void relocate_all(model *m)
{
    char *base = m->weight_slab;
    bool tied = m->lm_head.data == m->embed.data;
    relocate(&m->embed, base);
    relocate(&m->final_norm, base);
    if (tied)
        m->lm_head = m->embed;
    else
        relocate(&m->lm_head, base);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        model_layer *L = &m->layers[l];
        kern_weight *ws[] = {&L->attn_norm, &L->wqkv,     &L->wo,     &L->mlp_norm, &L->w_gate_up,
                             &L->w_down,    &L->qkv_bias, &L->q_norm, &L->k_norm};
        for (size_t i = 0; i < INFERD_ARRAY_LEN(ws); i++)
            if (ws[i]->rows > 0) /* absent optional weights stay NULL */
                relocate(ws[i], base);
    }
}

/* One count over every source tensor of the filled slab; FORMAT naming the
 * first tensor with a NaN or Inf (its file, or the dummy seed). */
static inferd_status check_finite(weight_pass *p)
{
    int64_t *counts = inferd_calloc((size_t)(p->n_views > 0 ? p->n_views : 1), sizeof(int64_t));
    inferd_status st = kern_weights_count_nonfinite(p->m->kc, p->views, p->n_views, counts);
    int first = -1, n_bad = 0;
    for (int i = 0; st == INFERD_OK && i < p->n_views; i++) {
        if (counts[i] > 0 && n_bad++ == 0)
            first = i;
    }
    if (first >= 0) {
        const kern_weight *v = &p->views[first];
        const char *name = p->view_names[first];
        const st_tensor *t = p->st ? st_find(p->st, name) : NULL;
        char where[600];
        if (t)
            snprintf(where, sizeof where, "in %s (%s)", t->file, kern_dtype_name(t->dtype));
        else
            snprintf(where, sizeof where, "in the dummy weights (seed %llu)",
                     (unsigned long long)p->m->opts.dummy_seed);
        st = inferd_set_error(INFERD_ERR_FORMAT,
                              "weight %s %s: %lld of %lld values are NaN or Inf after loading as %s on %s "
                              "(%d of %d tensors have some); the model would generate garbage or nothing",
                              name, where, (long long)counts[first], (long long)(v->rows * v->cols),
                              kern_dtype_name(v->dtype), kern_backend_name(kern_ctx_backend(p->m->kc)), n_bad,
                              p->n_views);
    }
    inferd_free(counts);
    return st;
}

/* Whether the layer norms are folded (model->norm_fold): INFERD_NORM_FOLD=0
 * never, another value always; unset, where the kernels let a product add
 * into the residual stream (kern_gemm_opts.accum, INFERD_GEMM_ACCUM) and
 * the model's O and down products (bf16, unsharded, so every rank decides
 * alike) pass that add's weight floor (accum_min_weight_bytes, 1 MiB),
 * the rule use_accum (forward.c) applies per batch: the folded layers add
 * O and down into x at every batch size, and under the floor cuBLASLt's
 * beta = 1 product changes kernel with the batch (on stories260K a request
 * then decodes other tokens batched than alone, the GPU engine tests). */
static bool fold_wanted(const model *m)
{
    const char *e = getenv("INFERD_NORM_FOLD");
    if (e && *e)
        return strcmp(e, "0") != 0;
    kern_gemm_opts go;
    kern_gemm_config_get(m->kc, &go);
    const model_config *c = &m->cfg;
    const int64_t o_bytes = 2 * (int64_t)c->hidden_size * c->n_heads * c->head_dim;
    const int64_t down_bytes = 2 * (int64_t)c->hidden_size * c->intermediate_size;
    return go.accum && o_bytes >= go.accum_min_weight_bytes && down_bytes >= go.accum_min_weight_bytes;
}

/* The norm fold (model->norm_fold): each layer's attention and MLP norm
 * weights multiplied into the columns of wqkv and w_gate_up (rounded once,
 * to the weight dtype), the norm weights then all ones, which the fused
 * CUDA-core GEMV and the unfolded forms (a communicator) read; the folded
 * layers read neither (forward.c). */
static void fold_norms(model *m)
{
    for (int l = 0; l < m->cfg.n_layers; l++) {
        model_layer *L = &m->layers[l];
        kern_weight_scale_cols(m->kc, &L->wqkv, &L->attn_norm);
        kern_weight_scale_cols(m->kc, &L->w_gate_up, &L->mlp_norm);
        fill_ones(m->kc, &L->attn_norm); /* after the scaling, in stream order */
        fill_ones(m->kc, &L->mlp_norm);
    }
    kern_sync(m->kc);
}

inferd_status model_weights_load(model *m)
{
    weight_pass p = {.m = m, .assign = true, .seed = m->opts.dummy_seed, .tty = isatty(2)};
    inferd_status st;
    if (m->opts.load_format == MODEL_LOAD_SAFETENSORS) {
        st = st_open_dir(m->opts.model_dir, &p.st);
        if (st != INFERD_OK)
            return st;
    }
    m->layers = inferd_calloc((size_t)m->cfg.n_layers, sizeof(model_layer));
    st = do_all(&p); /* pass 1: layout (also checks presence of lm_head) */
    if (st == INFERD_OK)
        st = model_check_host_memory(m, p.offset); /* CPU: before the slab exists */
    if (st == INFERD_OK) {
        m->weight_bytes = p.offset;
        m->weight_slab = kern_alloc(m->kc, p.offset);
        if (!m->weight_slab)
            st = inferd_set_error(INFERD_ERR_NOMEM, "cannot allocate %.1f MiB for weights on %s",
                                  p.offset / 1048576.0, kern_backend_name(kern_ctx_backend(m->kc)));
    }
    if (st == INFERD_OK) {
        relocate_all(m);
        p.assign = false;
        p.offset = 0;
        st = do_all(&p); /* pass 2: fill */
        kern_sync(m->kc);
    }
    if (st == INFERD_OK)
        st = check_finite(&p);
    m->norm_fold = st == INFERD_OK && fold_wanted(m);
    if (m->norm_fold)
        fold_norms(m);
    if (p.st)
        st_close(p.st);
    inferd_free(p.views);
    inferd_free(p.view_names);
    return st;
}
