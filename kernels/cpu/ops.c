/* kernels/cpu/ops.c: the per-token ops of the CPU backend (twin:
 * kernels/cuda/ops.cu): embedding gather, fused residual add + RMSNorm, row
 * gather, SiLU(gate) * up, and RoPE fused with the paged K/V write.
 * The tensor-parallel embedding (kern_embed_shard) is the same gather with
 * zero rows for the ids another rank holds.
 * Activations are F32; the KV cache is F32, or fp8 e4m3 bytes when kv_fp8
 * (--kv-cache-dtype fp8: kern_f32_to_e4m3 of the F32 value, scale 1,
 * kernels/kern_fp8.h); weights (embedding table, norm weights) are read in
 * their file dtype, F32, F16 or BF16. Each row is computed on its own
 * (OpenMP over rows where the work is large enough), so results do not
 * depend on the batch or the thread count.
 *
 * RoPE follows HF rotate_half: for j < head_dim/2, x1 = x[j], x2 =
 * x[j + head_dim/2], angle = (float)pos * inv_freq[j] (one fp32 product, as
 * HF's fp32 matmul of inv_freq and positions), out[j] = x1*cos - x2*sin,
 * out[j + head_dim/2] = x2*cos + x1*sin, with cosf/sinf of the fp32 angle.
 * The cos/sin tables of a token live on the stack (KCPU_MAX_HEAD_DIM / 2
 * each). The optional QKV epilogue (kern_qkv_epilogue: Qwen2's q/k/v biases,
 * Qwen3's per-head q/k RMSNorm, and a folded norm's scale first: rms_x)
 * runs on the token's row just before RoPE. SiLU * up takes the same
 * scale (kern_silu_mul_rms) after a folded norm.
 */
#include <math.h>
#include <string.h>

#include "common/check.h"
#include "kernels/cpu/kcpu.h"
#include "kernels/kern_fp8.h"

/* out[n, t->cols] (F32): row i = table row tokens[i] - begin when that is
 * inside the table, else zeros. */
static void embed_rows(kern_ctx *ctx, float *out, const int32_t *tokens, int n, const kern_weight *t,
                       int64_t begin)
{
    const int64_t d = t->cols;
    int nt = kcpu_threads(ctx, (int64_t)n * d);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < n; i++) {
        const int64_t id = (int64_t)tokens[i] - begin;
        float *o = out + (int64_t)i * d; /* [d] */
        if (id >= 0 && id < t->rows)
            kcpu_weight_to_f32(t, id * d, d, o);
        else
            memset(o, 0, (size_t)d * sizeof(float));
    }
}

/* Contract (kern_embed): out[n, table->cols] (F32) = table row tokens[i].
 * Token ids outside [0, table->rows) are a caller bug (abort). */
void kcpu_embed(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *t)
{
    for (int i = 0; i < n; i++)
        INFERD_CHECK_MSG(tokens[i] >= 0 && tokens[i] < t->rows, "token id out of vocabulary");
    embed_rows(ctx, out, tokens, n, t, 0);
}

/* Contract (kern_embed_shard): out[n, table->cols] (F32) = table row
 * tokens[i] - vocab_begin, zeros for ids outside this rank's rows. */
void kcpu_embed_shard(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *t,
                      int64_t vocab_begin)
{
    embed_rows(ctx, out, tokens, n, t, vocab_begin);
}

/* 1 / sqrt(mean(x^2) + eps) over x[d], the mean of squares accumulated in
 * double (every norm of this backend). */
static float inv_rms(const float *x, int64_t d, float eps)
{
    double ss = 0.0;
    for (int64_t j = 0; j < d; j++)
        ss += (double)x[j] * (double)x[j];
    return (float)(1.0 / sqrt(ss / (double)d + (double)eps));
}

/* Contract (kern_add_rmsnorm): per row, resid += add (when add != NULL), then
 * out = (resid * (1 / sqrt(mean(resid^2) + eps))) * w, with the mean of
 * squares accumulated in double. out may alias add but not resid. */
void kcpu_add_rmsnorm(kern_ctx *ctx, void *out, void *resid, const void *add, const kern_weight *w,
                      int n, float eps)
{
    const int64_t d = w->cols;
    float *o = out;         /* [n, d] */
    float *res = resid;     /* [n, d] */
    const float *a = add;   /* [n, d] or NULL */
    INFERD_CHECK(w->rows == 1 && d > 0);
    int nt = kcpu_threads(ctx, (int64_t)n * d * 4);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < n; i++) {
        float *x = res + (int64_t)i * d;
        float *y = o + (int64_t)i * d;
        if (a) {
            const float *ai = a + (int64_t)i * d;
            for (int64_t j = 0; j < d; j++)
                x[j] += ai[j];
        }
        const float inv = inv_rms(x, d, eps);
        if (w->dtype == KERN_DTYPE_F32) {
            const float *wf = w->data;
            for (int64_t j = 0; j < d; j++)
                y[j] = (x[j] * inv) * wf[j];
        } else {
            for (int64_t j = 0; j < d; j++)
                y[j] = (x[j] * inv) * kcpu_weight_get(w, j);
        }
    }
}

/* Contract (kern_gather_rows): out[j, :] = in[idx[j], :] for j < r, rows of
 * d F32. out must not overlap in. */
void kcpu_gather_rows(kern_ctx *ctx, void *out, const void *in, const int32_t *idx, int r, int d)
{
    float *o = out;         /* [r, d] */
    const float *src = in;  /* [*, d] */
    for (int j = 0; j < r; j++) {
        INFERD_CHECK(idx[j] >= 0);
        memcpy(o + (int64_t)j * d, src + (int64_t)idx[j] * d, (size_t)d * sizeof(float));
    }
}

/* Contract (kern_tokens_from): tokens[i] = from[src[i]] where src[i] >= 0. */
void kcpu_tokens_from(kern_ctx *ctx, int32_t *tokens, const int32_t *src, const int32_t *from, int n)
{
    (void)ctx;
    for (int i = 0; i < n; i++)
        if (src[i] >= 0)
            tokens[i] = from[src[i]];
}

/* Contract (kern_f32_to_act): the act dtype is F32 here, so a copy. */
void kcpu_f32_to_act(kern_ctx *ctx, void *out, const float *in, size_t count)
{
    (void)ctx;
    memcpy(out, in, count * sizeof(float));
}

/* Contract (kern_silu_mul): out[n, f] = silu(g) * u with g = gate_up[:, :f],
 * u = gate_up[:, f:], silu(g) = g / (1 + exp(-g)) in fp32. */
void kcpu_silu_mul(kern_ctx *ctx, void *out, const void *gate_up, int n, int f)
{
    float *o = out;              /* [n, f] */
    const float *gu = gate_up;   /* [n, 2f] */
    int nt = kcpu_threads(ctx, (int64_t)n * f * 8);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < n; i++) {
        const float *g = gu + (int64_t)i * 2 * f;
        const float *u = g + f;
        float *y = o + (int64_t)i * f;
        for (int j = 0; j < f; j++)
            y[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
    }
}

/* Contract (kern_silu_mul_rms): kcpu_silu_mul of g r and u r, r the
 * inverse RMS of the token's row of x ([n, d] F32). */
void kcpu_silu_mul_rms(kern_ctx *ctx, void *out, const void *gate_up, int n, int f, const void *x, int d, float eps)
{
    float *o = out;            /* [n, f] */
    const float *gu = gate_up; /* [n, 2f] */
    const float *xs = x;       /* [n, d] */
    int nt = kcpu_threads(ctx, (int64_t)n * f * 8);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int i = 0; i < n; i++) {
        const float r = inv_rms(xs + (int64_t)i * d, d, eps);
        const float *g = gu + (int64_t)i * 2 * f;
        const float *u = g + f;
        float *y = o + (int64_t)i * f;
        for (int j = 0; j < f; j++) {
            const float gr = g[j] * r;
            y[j] = gr / (1.0f + expf(-gr)) * (u[j] * r);
        }
    }
}

/* --- RoPE + paged K/V write ----------------------------------------------- */

/* RoPE on n_rot heads of head_dim hd at x, with cos/sin tables of hd/2. */
static void rope_heads(float *x, int n_rot, int hd, const float *cs, const float *sn)
{
    const int half = hd / 2;
    for (int h = 0; h < n_rot; h++) {
        float *v = x + (int64_t)h * hd;
        for (int j = 0; j < half; j++) {
            float x1 = v[j], x2 = v[j + half];
            v[j] = x1 * cs[j] - x2 * sn[j];
            v[j + half] = x2 * cs[j] + x1 * sn[j];
        }
    }
}

/* Per-head RMSNorm in place on n heads of hd at x (Qwen3 q_norm / k_norm):
 * x = (x * (1 / sqrt(mean(x^2) + eps))) * w, the mean of squares
 * accumulated in double (as kcpu_add_rmsnorm). */
static void norm_heads(float *x, int n, int hd, const kern_weight *w, float eps)
{
    for (int h = 0; h < n; h++) {
        float *v = x + (int64_t)h * hd;
        const float inv = inv_rms(v, hd, eps);
        for (int j = 0; j < hd; j++)
            v[j] = (v[j] * inv) * kcpu_weight_get(w, j);
    }
}

/* Copy n floats to dst, as F32 or (fp8) as e4m3 codes. */
static void kv_store(void *dst, int64_t i, const float *src, int n, bool fp8)
{
    if (!fp8) {
        memcpy((float *)dst + i, src, (size_t)n * sizeof(float));
        return;
    }
    uint8_t *d = (uint8_t *)dst + i;
    for (int j = 0; j < n; j++)
        d[j] = kern_f32_to_e4m3(src[j]);
}

/* One token's K heads (k, then its V heads right after them) into the
 * caches at slot. */
static void kv_write_token(const kern_rope_kv_params *p, const float *k, int64_t slot)
{
    const int hd = p->head_dim, nkv = p->n_kv_heads, bs = p->block_size;
    const float *v = k + (int64_t)nkv * hd;
    const int64_t blk = slot / bs, off = slot % bs;
    for (int h = 0; h < nkv; h++) {
        int64_t dst = ((blk * nkv + h) * bs + off) * hd; /* element index in [n_blocks, nkv, bs, hd] */
        kv_store(p->k_cache, dst, k + (int64_t)h * hd, hd, p->kv_fp8);
        kv_store(p->v_cache, dst, v + (int64_t)h * hd, hd, p->kv_fp8);
    }
}

/* Contract (kern_rope_kv_write_ex): per token, the epilogue first (e may be
 * NULL): qkv row += qkv_bias over the whole row, then q heads normed with
 * q_norm and k heads with k_norm (per head over head_dim); then RoPE in
 * place on the q heads and k heads of every token's qkv row (cos and sin
 * times mscale, 0 = 1), then, for tokens
 * with slot_mapping >= 0, the (roped) K heads and the (biased) V heads are
 * copied to k_cache / v_cache at slot s = block * block_size + offset, head h
 * at ((block * n_kv_heads + h) * block_size + offset) * head_dim: as floats,
 * or with kv_fp8 as the bytes kern_f32_to_e4m3(value). */
void kcpu_rope_kv_write(kern_ctx *ctx, const kern_rope_kv_params *p, const kern_qkv_epilogue *e)
{
    const int hd = p->head_dim, nh = p->n_heads, nkv = p->n_kv_heads, bs = p->block_size;
    INFERD_CHECK(hd > 0 && hd % 2 == 0 && hd <= KCPU_MAX_HEAD_DIM && bs > 0);
    const int64_t row = (int64_t)(nh + 2 * nkv) * hd;
    float *qkv = p->qkv;          /* [n_tokens, (nh + 2*nkv) * hd] */
    int nt = kcpu_threads(ctx, (int64_t)p->n_tokens * row * 4);
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < p->n_tokens; t++) {
        float cs[KCPU_MAX_HEAD_DIM / 2], sn[KCPU_MAX_HEAD_DIM / 2];
        const float pos = (float)p->positions[t];
        const float ms = p->mscale != 0.0f ? p->mscale : 1.0f;
        for (int j = 0; j < hd / 2; j++) {
            float angle = pos * p->inv_freq[j];
            cs[j] = cosf(angle) * ms;
            sn[j] = sinf(angle) * ms;
        }
        float *x = qkv + (int64_t)t * row;
        if (e && e->rms_x) { /* a folded norm: the row times the inverse RMS of the token's input */
            const float r = inv_rms((const float *)e->rms_x + (int64_t)t * e->rms_cols, e->rms_cols, e->norm_eps);
            for (int64_t i = 0; i < row; i++)
                x[i] *= r;
        }
        if (e && e->qkv_bias) {
            for (int64_t i = 0; i < row; i++)
                x[i] += kcpu_weight_get(e->qkv_bias, i);
        }
        if (e && e->q_norm) {
            norm_heads(x, nh, hd, e->q_norm, e->norm_eps);
            norm_heads(x + (int64_t)nh * hd, nkv, hd, e->k_norm, e->norm_eps);
        }
        rope_heads(x, nh + nkv, hd, cs, sn); /* q heads then k heads, contiguous */
        int64_t slot = p->slot_mapping[t];
        if (slot < 0)
            continue;
        kv_write_token(p, x + (int64_t)nh * hd, slot);
    }
}
