/* kernels/dispatch.c: the public kern_* API. Each call forwards to the CPU
 * or CUDA backend named by the context. Builds without CUDA reject
 * KERN_BACKEND_CUDA at kern_ctx_create, so the kcuda_* symbols are only
 * referenced when INFERD_HAVE_CUDA is defined. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/check.h"
#include "common/util.h"
#include "kernels/kern_internal.h"

#ifdef INFERD_HAVE_CUDA
#define DISPATCH(ctx, call)                                                                                  \
    do {                                                                                                     \
        if ((ctx)->backend == KERN_BACKEND_CUDA)                                                             \
            kcuda_##call;                                                                                    \
        else                                                                                                 \
            kcpu_##call;                                                                                     \
    } while (0)
#define DISPATCH_RET(ctx, call) ((ctx)->backend == KERN_BACKEND_CUDA ? kcuda_##call : kcpu_##call)
#else
#define DISPATCH(ctx, call) kcpu_##call
#define DISPATCH_RET(ctx, call) kcpu_##call
#endif

size_t kern_dtype_size(kern_dtype dt)
{
    return dt == KERN_DTYPE_F32 ? 4 : dt == KERN_DTYPE_FP8_E4M3 ? 1 : 2;
}

int64_t kern_weight_bytes(const kern_weight *w)
{
    return w->rows * w->cols * (int64_t)kern_dtype_size(w->dtype);
}

const char *kern_dtype_name(kern_dtype dt)
{
    switch (dt) {
    case KERN_DTYPE_F32: return "F32";
    case KERN_DTYPE_F16: return "F16";
    case KERN_DTYPE_BF16: return "BF16";
    case KERN_DTYPE_FP8_E4M3: return "FP8_E4M3";
    }
    return "?";
}

const char *kern_backend_name(kern_backend b)
{
    return b == KERN_BACKEND_CUDA ? "cuda" : "cpu";
}

int kern_cuda_device_count(void)
{
#ifdef INFERD_HAVE_CUDA
    return kcuda_device_count();
#else
    return 0;
#endif
}

bool kern_cuda_available(void)
{
#ifdef INFERD_HAVE_CUDA
    return kcuda_available();
#else
    return false;
#endif
}

/* An integer from the environment, or def when unset or malformed. */
static int env_int(const char *name, int def)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return def;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    return end && *end == '\0' ? (int)x : def;
}

inferd_status kern_ctx_create(const kern_ctx_opts *opts, kern_ctx **out)
{
    kern_ctx *ctx = inferd_calloc(1, sizeof *ctx);
    ctx->backend = opts->backend;
    kern_gemm_opts go = {.gemv_max_n = env_int("INFERD_GEMV_MAX_N", KCUDA_GEMV_DEFAULT_MAX_N),
                         .gemv_min_weight_bytes = env_int("INFERD_GEMV_MIN_BYTES", (int)KCUDA_GEMV_MIN_WEIGHT_BYTES),
                         .pdl = env_int("INFERD_GEMV_PDL", 1) != 0,
                         .gemv_variant = env_int("INFERD_GEMV_VARIANT", 1),
                         .fuse_max_n = env_int("INFERD_FUSE", KCUDA_FUSE_MAX_N),
                         .gemv_tc_min_n = env_int("INFERD_GEMV_TC_MIN_N", KCUDA_GEMV_DEFAULT_TC_MIN_N),
                         .gemv_tc_ring = env_int("INFERD_GEMV_TC_RING", 1),
                         .gemv_preload = env_int("INFERD_GEMV_PRELOAD", KCUDA_GEMV_DEFAULT_PRELOAD),
                         .gemv_xs = env_int("INFERD_GEMV_XS", 2),
                         .gemv_lt_min_bytes = env_int("INFERD_GEMV_LT_MIN_BYTES", (int)KCUDA_GEMV_DEFAULT_LT_MIN_BYTES),
                         .gemv_tc_trigger = env_int("INFERD_GEMV_TC_TRIGGER", 1),
                         .accum = env_int("INFERD_GEMM_ACCUM", 1) != 0,
                         .accum_min_weight_bytes = env_int("INFERD_GEMM_ACCUM_MIN_BYTES", (int)KCUDA_GEMV_MIN_WEIGHT_BYTES),
                         .search_max_n = env_int("INFERD_GEMM_SEARCH_MAX_N", 512),
                         .search_min_weight_bytes = env_int("INFERD_GEMM_SEARCH_MIN_BYTES", -1)};
    kern_gemm_config(ctx, &go);
    if (opts->backend == KERN_BACKEND_CPU) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        ctx->n_threads = opts->n_threads > 0 ? opts->n_threads : (int)(nc > 0 ? nc : 1);
        *out = ctx;
        return INFERD_OK;
    }
#ifdef INFERD_HAVE_CUDA
    inferd_status st = kcuda_ctx_init(ctx, opts->device_id);
    if (st != INFERD_OK) {
        inferd_free(ctx);
        return st;
    }
    *out = ctx;
    return INFERD_OK;
#else
    inferd_free(ctx);
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "this build of inferd has no CUDA backend");
#endif
}

void kern_ctx_free(kern_ctx *ctx)
{
    if (!ctx)
        return;
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        kcuda_ctx_free(ctx);
#endif
    inferd_free(ctx);
}

kern_backend kern_ctx_backend(const kern_ctx *ctx)
{
    return ctx->backend;
}

/* MemAvailable of /proc/meminfo in bytes; false when the file or the line
 * is missing (not Linux, or a kernel before 3.14). */
static bool meminfo_available(size_t *out)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f)
        return false;
    char line[256];
    bool found = false;
    unsigned long long kb = 0;
    while (!found && fgets(line, sizeof line, f))
        found = sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    fclose(f);
    if (found)
        *out = (size_t)kb * 1024;
    return found;
}

inferd_status kern_mem_info(kern_ctx *ctx, size_t *free_b, size_t *total_b)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kcuda_mem_info(ctx, free_b, total_b);
#endif
    long pages = sysconf(_SC_PHYS_PAGES), avail = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    *total_b = (size_t)pages * (size_t)psz;
    if (!meminfo_available(free_b))
        *free_b = (size_t)avail * (size_t)psz;
    const char *ov = getenv("INFERD_TEST_MEM_AVAILABLE");
    if (ov && *ov) {
        char *end = NULL;
        unsigned long long v = strtoull(ov, &end, 10);
        if (end && *end == '\0')
            *free_b = (size_t)v;
    }
    return INFERD_OK;
}

kern_dtype kern_act_dtype(const kern_ctx *ctx)
{
    return ctx->backend == KERN_BACKEND_CUDA ? KERN_DTYPE_BF16 : KERN_DTYPE_F32;
}

kern_dtype kern_weight_dtype(const kern_ctx *ctx, kern_dtype file_dtype)
{
    return ctx->backend == KERN_BACKEND_CUDA ? KERN_DTYPE_BF16 : file_dtype;
}

void *kern_alloc(kern_ctx *ctx, size_t bytes)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kcuda_alloc(ctx, bytes);
#endif
    void *p = NULL;
    size_t n = (bytes + 255) & ~(size_t)255;
    if (posix_memalign(&p, 256, n ? n : 256) != 0)
        return NULL;
    return p;
}

void kern_free(kern_ctx *ctx, void *p)
{
    if (!p)
        return;
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_free(ctx, p);
        return;
    }
#endif
    free(p);
}

void kern_memcpy_h2d(kern_ctx *ctx, void *dst, const void *src, size_t bytes)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_memcpy_h2d(ctx, dst, src, bytes);
        return;
    }
#endif
    if (bytes)
        memcpy(dst, src, bytes);
}

void kern_memcpy_d2h(kern_ctx *ctx, void *dst, const void *src, size_t bytes)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_memcpy_d2h(ctx, dst, src, bytes);
        return;
    }
#endif
    if (bytes)
        memcpy(dst, src, bytes);
}

void kern_memcpy_d2h_async(kern_ctx *ctx, void *dst, const void *src, size_t bytes)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_memcpy_d2h_async(ctx, dst, src, bytes);
        return;
    }
#endif
    if (bytes)
        memcpy(dst, src, bytes);
}

void kern_memset0(kern_ctx *ctx, void *dst, size_t bytes)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_memset0(ctx, dst, bytes);
        return;
    }
#endif
    memset(dst, 0, bytes);
}

void kern_sync(kern_ctx *ctx)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        kcuda_sync(ctx);
#endif
    (void)ctx;
}

void kern_copy_2d(kern_ctx *ctx, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                  size_t height)
{
    if (width == 0 || height == 0)
        return;
    INFERD_CHECK_MSG(width <= dst_pitch && width <= src_pitch, "copy_2d: a row is wider than its pitch");
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_copy_2d(ctx, dst, dst_pitch, src, src_pitch, width, height);
        return;
    }
#endif
    for (size_t r = 0; r < height; r++)
        memcpy((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, width);
}

void kern_weight_upload(kern_ctx *ctx, kern_weight *w, int64_t row_offset, const void *src,
                        kern_dtype src_dtype, int64_t n_rows)
{
    INFERD_CHECK(row_offset >= 0 && n_rows >= 0 && row_offset + n_rows <= w->rows);
    DISPATCH(ctx, weight_upload(ctx, w, row_offset, src, src_dtype, n_rows));
}

void kern_weight_fill_random(kern_ctx *ctx, kern_weight *w, uint64_t seed, float scale)
{
    kern_weight_fill_random_part(ctx, w, 0, w->rows, seed, scale, 0, 0, w->cols);
}

void kern_weight_fill_random_part(kern_ctx *ctx, kern_weight *w, int64_t row, int64_t n_rows, uint64_t seed,
                                  float scale, int64_t src_row, int64_t src_col, int64_t src_cols)
{
    INFERD_CHECK_MSG(row >= 0 && n_rows >= 0 && row + n_rows <= w->rows, "fill window rows outside the weight");
    INFERD_CHECK_MSG(src_row >= 0 && src_col >= 0 && src_col + w->cols <= src_cols,
                     "fill window columns outside the logical matrix");
    DISPATCH(ctx, weight_fill_random_part(ctx, w, row, n_rows, seed, scale, src_row, src_col, src_cols));
}

inferd_status kern_weights_count_nonfinite(kern_ctx *ctx, const kern_weight *ws, int n, int64_t *counts)
{
    INFERD_CHECK(n >= 0 && (n == 0 || (ws != NULL && counts != NULL)));
    for (int i = 0; i < n; i++)
        INFERD_CHECK(ws[i].rows >= 0 && ws[i].cols >= 0 && (ws[i].data != NULL || ws[i].rows * ws[i].cols == 0));
    return DISPATCH_RET(ctx, weights_count_nonfinite(ctx, ws, n, counts));
}

void kern_weight_scale_cols(kern_ctx *ctx, kern_weight *w, const kern_weight *g)
{
    INFERD_CHECK_MSG(g->rows * g->cols == w->cols, "norm fold: the norm's size differs from the columns'");
    if (w->rows > 0 && w->cols > 0)
        DISPATCH(ctx, weight_scale_cols(ctx, w, g));
}

void kern_embed(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *table)
{
    DISPATCH(ctx, embed(ctx, out, tokens, n, table));
}

void kern_embed_shard(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *table,
                      int64_t vocab_begin)
{
    INFERD_CHECK(vocab_begin >= 0 && table->rows >= 0 && table->cols > 0);
    if (n <= 0)
        return;
    DISPATCH(ctx, embed_shard(ctx, out, tokens, n, table, vocab_begin));
}

void kern_add_rmsnorm(kern_ctx *ctx, void *out, void *resid, const void *add, const kern_weight *w, int n,
                      float eps)
{
    DISPATCH(ctx, add_rmsnorm(ctx, out, resid, add, w, n, eps));
}

void kern_matmul(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n)
{
    DISPATCH(ctx, matmul(ctx, out, in, w, n));
}

void kern_logits(kern_ctx *ctx, float *logits, const void *in, const kern_weight *w, int n)
{
    DISPATCH(ctx, logits(ctx, logits, in, w, n));
}

void kern_matmul_accum(kern_ctx *ctx, void *resid, const void *in, const kern_weight *w, int n)
{
    if (n <= 0)
        return;
    DISPATCH(ctx, matmul_accum(ctx, resid, in, w, n));
}

bool kern_matmul_accum_fast(const kern_ctx *ctx, const kern_weight *w, int n)
{
    return DISPATCH_RET(ctx, matmul_accum_fast(ctx, w, n));
}

bool kern_matmul_fusable(const kern_ctx *ctx, const kern_weight *w, int n)
{
    return DISPATCH_RET(ctx, matmul_fusable(ctx, w, n));
}

bool kern_matmul_epi_fusable(const kern_ctx *ctx, const kern_weight *w, int n)
{
    return DISPATCH_RET(ctx, matmul_epi_fusable(ctx, w, n));
}

void kern_matmul_fused(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n, const kern_fuse *f)
{
    INFERD_CHECK_MSG(f->epi != KERN_EPI_RESID || f->resid, "fused product: RESID needs resid");
    INFERD_CHECK_MSG(f->epi != KERN_EPI_SILU_MUL || w->rows % 2 == 0, "fused product: SILU_MUL needs an even row count");
    if (f->epi == KERN_EPI_ROPE_KV) {
        const kern_rope_kv_params *r = f->rope;
        INFERD_CHECK_MSG(r && r->head_dim > 0 && r->head_dim % 2 == 0 &&
                             w->rows == (int64_t)(r->n_heads + 2 * r->n_kv_heads) * r->head_dim,
                         "fused product: ROPE_KV needs rows = (n_heads + 2 n_kv_heads) * even head_dim");
        INFERD_CHECK_MSG(!f->qkv_bias || f->qkv_bias->rows * f->qkv_bias->cols == w->rows, "qkv bias size != rows");
    }
    INFERD_CHECK_MSG(!f->norm || (f->norm->rows == 1 && f->norm->cols == w->cols && f->eps > 0.0f),
                     "fused product: the norm weight must be [1, cols] with eps > 0");
    INFERD_CHECK_MSG(!f->rms || (!f->norm && f->eps > 0.0f && (f->epi == KERN_EPI_SILU_MUL || f->epi == KERN_EPI_ROPE_KV)),
                     "fused product: rms takes eps > 0, no norm weight, and a SILU_MUL or ROPE_KV epilogue");
    if (n <= 0)
        return;
    DISPATCH(ctx, matmul_fused(ctx, out, in, w, n, f));
}

void kern_gemm_config(kern_ctx *ctx, const kern_gemm_opts *o)
{
    ctx->gemm = *o;
    ctx->gemm.gemv_max_n = INFERD_MAX(0, INFERD_MIN(o->gemv_max_n, KCUDA_GEMV_MAX_N));
    ctx->gemm.fuse_max_n = INFERD_MAX(0, INFERD_MIN(o->fuse_max_n, KCUDA_FUSE_MAX_N));
    ctx->gemm.gemv_tc_min_n = INFERD_MAX(0, INFERD_MIN(o->gemv_tc_min_n, KCUDA_GEMV_MAX_N));
    ctx->gemm.gemv_preload = INFERD_MAX(0, INFERD_MIN(o->gemv_preload, KCUDA_GEMV_MAX_PRELOAD));
    ctx->gemm.gemv_xs = INFERD_MAX(0, INFERD_MIN(o->gemv_xs, 2));
    ctx->gemm.search_max_n = INFERD_MAX(0, o->search_max_n);
}

void kern_gemm_search_window(kern_ctx *ctx, bool open)
{
    ctx->gemm_search_window = open;
}

void kern_gemm_config_get(const kern_ctx *ctx, kern_gemm_opts *o)
{
    *o = ctx->gemm;
}

void kern_gather_rows(kern_ctx *ctx, void *out, const void *in, const int32_t *idx, int r, int d)
{
    DISPATCH(ctx, gather_rows(ctx, out, in, idx, r, d));
}

void kern_tokens_from(kern_ctx *ctx, int32_t *tokens, const int32_t *src, const int32_t *from, int n)
{
    if (n > 0)
        DISPATCH(ctx, tokens_from(ctx, tokens, src, from, n));
}

void kern_silu_mul(kern_ctx *ctx, void *out, const void *gate_up, int n, int f)
{
    DISPATCH(ctx, silu_mul(ctx, out, gate_up, n, f));
}

void kern_silu_mul_rms(kern_ctx *ctx, void *out, const void *gate_up, int n, int f, const void *x, int d, float eps)
{
    INFERD_CHECK_MSG(x && d > 0 && eps > 0.0f, "silu_mul_rms: needs x, d > 0 and eps > 0");
    if (n > 0 && f > 0)
        DISPATCH(ctx, silu_mul_rms(ctx, out, gate_up, n, f, x, d, eps));
}

void kern_f32_to_act(kern_ctx *ctx, void *out, const float *in, size_t count)
{
    DISPATCH(ctx, f32_to_act(ctx, out, in, count));
}

void kern_rope_kv_write(kern_ctx *ctx, const kern_rope_kv_params *p)
{
    DISPATCH(ctx, rope_kv_write(ctx, p, NULL));
}

void kern_rope_kv_write_ex(kern_ctx *ctx, const kern_rope_kv_params *p, const kern_qkv_epilogue *e)
{
    if (e && !e->qkv_bias && !e->q_norm && !e->k_norm && !e->rms_x)
        e = NULL;
    if (e) {
        const int64_t hd = p->head_dim, row = (int64_t)(p->n_heads + 2 * p->n_kv_heads) * hd;
        const kern_weight *b = e->qkv_bias, *qn = e->q_norm, *kn = e->k_norm;
        INFERD_CHECK_MSG(!b || (b->data && b->rows * b->cols == row), "qkv bias size != fused qkv row");
        INFERD_CHECK_MSG(!qn == !kn, "q_norm and k_norm come together");
        INFERD_CHECK_MSG(!qn || (qn->data && kn->data && qn->rows * qn->cols == hd && kn->rows * kn->cols == hd &&
                                 qn->dtype == kn->dtype),
                         "q/k norm weights must have head_dim values");
        INFERD_CHECK_MSG(!qn || e->norm_eps > 0.0f, "q/k norm eps must be > 0");
        INFERD_CHECK_MSG(!e->rms_x || (e->rms_cols > 0 && e->norm_eps > 0.0f), "rms_x needs rms_cols and eps > 0");
    }
    DISPATCH(ctx, rope_kv_write(ctx, p, e));
}

void kern_attention(kern_ctx *ctx, const kern_attn_params *p)
{
    DISPATCH(ctx, attention(ctx, p));
}

size_t kern_attn_workspace_bytes(const kern_ctx *ctx, int max_tokens, int max_seqs, int n_heads, int head_dim,
                                 int max_seq_len)
{
    return DISPATCH_RET(ctx, attn_workspace_bytes(ctx, max_tokens, max_seqs, n_heads, head_dim, max_seq_len));
}

/* Contract (kern_attn_kv_dequant_bytes): one layer's K and V of n_blocks
 * blocks in the act dtype on CUDA (the prefill attention reads that copy of
 * an fp8 cache, kernels/cuda/attention.cu); 0 on the CPU. */
size_t kern_attn_kv_dequant_bytes(const kern_ctx *ctx, int64_t n_blocks, int n_kv_heads, int block_size,
                                  int head_dim)
{
    if (kern_ctx_backend(ctx) != KERN_BACKEND_CUDA || n_blocks <= 0)
        return 0;
    return (size_t)2 * (size_t)n_blocks * (size_t)n_kv_heads * (size_t)block_size * (size_t)head_dim *
           kern_dtype_size(kern_act_dtype(ctx));
}

void kern_sample(kern_ctx *ctx, int32_t *tokens, float *logits, const kern_sample_params *params, int r,
                 int vocab, void *workspace)
{
    DISPATCH(ctx, sample(ctx, tokens, logits, params, r, vocab, workspace));
}

size_t kern_sample_workspace_bytes(const kern_ctx *ctx, int max_rows, int vocab)
{
    return DISPATCH_RET(ctx, sample_workspace_bytes(ctx, max_rows, vocab));
}

void kern_penalty_init(kern_ctx *ctx, int32_t *counts, const int32_t *tokens, int n_tokens, int n_prompt,
                       int vocab)
{
    INFERD_CHECK(vocab > 0 && n_tokens >= 0 && n_prompt >= 0 && n_prompt <= n_tokens);
    DISPATCH(ctx, penalty_init(ctx, counts, tokens, n_tokens, n_prompt, vocab));
}

void kern_penalty_apply(kern_ctx *ctx, float *logits, const kern_sample_params *params, int r, int vocab)
{
    if (r <= 0)
        return;
    INFERD_CHECK(vocab > 0);
    DISPATCH(ctx, penalty_apply(ctx, logits, params, r, vocab));
}

/* --- graphs, pinned memory, ceilings ------------------------------------------ */

bool kern_graphs_supported(const kern_ctx *ctx)
{
    return ctx->backend == KERN_BACKEND_CUDA;
}

inferd_status kern_graph_begin(kern_ctx *ctx)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kcuda_graph_begin(ctx);
#endif
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "the %s backend has no graphs", kern_backend_name(ctx->backend));
}

inferd_status kern_graph_end(kern_ctx *ctx, kern_graph **out)
{
    *out = NULL;
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kcuda_graph_end(ctx, out);
#endif
    return inferd_set_error(INFERD_ERR_UNSUPPORTED, "the %s backend has no graphs", kern_backend_name(ctx->backend));
}

void kern_graph_launch(kern_ctx *ctx, kern_graph *g)
{
    INFERD_CHECK(g != NULL);
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_graph_launch(ctx, g);
        return;
    }
#endif
    INFERD_CHECK_MSG(false, "graph launch on a backend without graphs");
}

void kern_graph_free(kern_ctx *ctx, kern_graph *g)
{
    if (!g)
        return;
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        kcuda_graph_free(ctx, g);
#endif
}

int kern_attn_last_splits(const kern_ctx *ctx)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kcuda_attn_planned_splits();
#endif
    return 1;
}

void *kern_host_alloc(kern_ctx *ctx, size_t bytes)
{
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kcuda_host_alloc(ctx, bytes);
#endif
    return kern_alloc(ctx, bytes);
}

void kern_host_free(kern_ctx *ctx, void *p)
{
    if (!p)
        return;
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_host_free(ctx, p);
        return;
    }
#endif
    kern_free(ctx, p);
}

/* --- timers ------------------------------------------------------------------- */

kern_timer *kern_timer_create(kern_ctx *ctx, int n)
{
    INFERD_CHECK(n > 0);
    kern_timer *t = inferd_calloc(1, sizeof *t);
    t->n = n;
    t->host_s = inferd_calloc((size_t)n, sizeof *t->host_s);
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA && !kcuda_timer_init(ctx, t)) {
        inferd_free(t->host_s);
        inferd_free(t);
        return NULL;
    }
#endif
    (void)ctx;
    return t;
}

void kern_timer_record(kern_ctx *ctx, kern_timer *t, int i)
{
    INFERD_CHECK(i >= 0 && i < t->n);
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA) {
        kcuda_timer_record(ctx, t, i);
        return;
    }
#endif
    t->host_s[i] = util_now_s(); /* CPU ops are synchronous */
}

double kern_timer_ms(kern_ctx *ctx, kern_timer *t, int i, int j)
{
    INFERD_CHECK(i >= 0 && i < t->n && j >= 0 && j < t->n);
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        return kcuda_timer_ms(ctx, t, i, j);
#endif
    return (t->host_s[j] - t->host_s[i]) * 1e3;
}

void kern_timer_wait(kern_ctx *ctx, kern_timer *t, int i)
{
    INFERD_CHECK(i >= 0 && i < t->n);
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        kcuda_timer_wait(ctx, t, i);
#endif
    (void)ctx;
}

void kern_timer_free(kern_ctx *ctx, kern_timer *t)
{
    if (!t)
        return;
#ifdef INFERD_HAVE_CUDA
    if (ctx->backend == KERN_BACKEND_CUDA)
        kcuda_timer_release(ctx, t);
#endif
    inferd_free(t->host_s);
    inferd_free(t);
}

inferd_status kern_measure_ceilings(kern_ctx *ctx, kern_ceilings *out)
{
    memset(out, 0, sizeof *out);
    return DISPATCH_RET(ctx, measure_ceilings(ctx, out));
}
