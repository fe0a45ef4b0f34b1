/* kernels/cpu/attention.c: varlen causal paged attention for the CPU
 * backend (fp32 activations; fp32 KV cache, or fp8 e4m3 with kv_fp8); twin
 * of kernels/cuda/attention.cu (+ attention_decode.cu, attention_prefill.cu).
 * RoPE and the paged KV write that fill the cache are in cpu/ops.c, as in
 * cuda/ops.cu.
 *
 * Attention: one independent task per (token, query head), parallel with
 * OpenMP. Each task walks its sequence's block table from position 0 to its
 * own position, in runs of at most 64 keys (never crossing a block), with an
 * online softmax in fp32: scores of a run, new running max, rescale of the
 * running sum and output accumulator, accumulate exp(s - max) * v. The
 * result for a token depends only on its sequence's cache contents, its
 * position and block_size, not on the rest of the batch, the chunking of the
 * prompt or the thread count: chunked prefill, decode and batching give
 * bitwise identical outputs. No workspace is needed.
 *
 * An fp8 cache (kv_fp8, kernels/kern_fp8.h, scale 1) is read directly: each
 * run's K and V bytes are decoded (exactly) into float buffers on the stack,
 * then scored as above, so the output is bitwise that of the fp32 path over
 * an fp32 cache holding the decoded values.
 */
#include <math.h>
#include <string.h>

#include "common/check.h"
#include "kernels/cpu/kcpu.h"
#include "kernels/kern_fp8.h"

#define ATTN_RUN 64 /* keys scored per online-softmax step */

/* Index of the sequence that owns token t (query_start_loc[i] <= t <
 * query_start_loc[i+1]), or -1 when t lies outside every sequence. */
static int seq_of_token(const int32_t *qsl, int n_seqs, int t)
{
    if (n_seqs <= 0 || t < qsl[0] || t >= qsl[n_seqs])
        return -1;
    int lo = 0, hi = n_seqs - 1; /* answer in [lo, hi] */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (qsl[mid] <= t)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

/* Online-softmax state of one (token, head) task. */
typedef struct {
    float m;                        /* running max of scores */
    float l;                        /* running sum of exp(score - m) */
    float acc[KCPU_MAX_HEAD_DIM];   /* running sum of exp(score - m) * v */
} attn_state;

/* Fold n keys/values (contiguous rows of hd) into the state. */
static void attn_run(attn_state *st, const float *q, const float *k, const float *v, int n, int hd,
                     float scale)
{
    float s[ATTN_RUN];
    float mx = -INFINITY;
    for (int c = 0; c < n; c++) {
        s[c] = scale * kcpu_dot(q, k + (int64_t)c * hd, hd);
        if (s[c] > mx)
            mx = s[c];
    }
    if (mx > st->m) {
        float corr = expf(st->m - mx); /* 0 on the first run (m = -inf) */
        st->l *= corr;
        for (int d = 0; d < hd; d++)
            st->acc[d] *= corr;
        st->m = mx;
    }
    for (int c = 0; c < n; c++) {
        float e = expf(s[c] - st->m);
        const float *vr = v + (int64_t)c * hd;
        st->l += e;
        for (int d = 0; d < hd; d++)
            st->acc[d] += e * vr[d];
    }
}

/* attn_run over n fp8 e4m3 keys/values, decoded to fp32 first through
 * lut (the 256 codes' values, kern_e4m3_to_f32).
 * NOTE: 2 * ATTN_RUN * KCPU_MAX_HEAD_DIM floats (256 KiB) of stack. */
static void attn_run_fp8(attn_state *st, const float *q, const uint8_t *k, const uint8_t *v, int n, int hd,
                         float scale, const float *lut)
{
    float kf[ATTN_RUN * KCPU_MAX_HEAD_DIM], vf[ATTN_RUN * KCPU_MAX_HEAD_DIM];
    const int64_t cnt = (int64_t)n * hd;
    for (int64_t i = 0; i < cnt; i++) {
        kf[i] = lut[k[i]];
        vf[i] = lut[v[i]];
    }
    attn_run(st, q, kf, vf, n, hd, scale);
}

/* Attention output of query q (token at position pos of sequence seq) over
 * positions 0..pos of kv head kvh, into out[hd]. */
static void attn_one(const kern_attn_params *p, int seq, int pos, int kvh, const float *q,
                     float *out, const float *lut)
{
    const int hd = p->head_dim, bs = p->block_size;
    const int32_t *bt = p->block_tables + (int64_t)seq * p->max_blocks_per_seq;
    attn_state st;
    st.m = -INFINITY;
    st.l = 0.0f;
    memset(st.acc, 0, (size_t)hd * sizeof(float));
    const int n_ctx = pos + 1;
    for (int b = 0; b * bs < n_ctx; b++) {
        INFERD_CHECK(b < p->max_blocks_per_seq && bt[b] >= 0);
        int64_t base = (((int64_t)bt[b] * p->n_kv_heads + kvh) * bs) * hd;
        int in_block = n_ctx - b * bs < bs ? n_ctx - b * bs : bs;
        for (int c0 = 0; c0 < in_block; c0 += ATTN_RUN) {
            int n = in_block - c0 < ATTN_RUN ? in_block - c0 : ATTN_RUN;
            int64_t off = base + (int64_t)c0 * hd; /* element index in [n_blocks, n_kv_heads, bs, hd] */
            if (p->kv_fp8)
                attn_run_fp8(&st, q, (const uint8_t *)p->k_cache + off, (const uint8_t *)p->v_cache + off, n,
                             hd, p->scale, lut);
            else
                attn_run(&st, q, (const float *)p->k_cache + off, (const float *)p->v_cache + off, n, hd,
                         p->scale);
        }
    }
    float inv = 1.0f / st.l;
    for (int d = 0; d < hd; d++)
        out[d] = st.acc[d] * inv;
}

/* Contract (kern_attention): for each token t of sequence i (rows
 * [query_start_loc[i], query_start_loc[i+1])) at position
 * pos = seq_lens[i] - q_len + (t - query_start_loc[i]) and each head h,
 * out[t, h] = softmax_j(scale * q . k_j) . v_j over positions j = 0..pos of kv
 * head h / (n_heads / n_kv_heads), K/V read through block_tables (fp8
 * e4m3 bytes decoded with kern_e4m3_to_f32 when kv_fp8). Rows of
 * tokens outside every sequence are set to 0. Reads the host-memory arrays
 * query_start_loc / seq_lens / block_tables directly (CPU backend). */
void kcpu_attention(kern_ctx *ctx, const kern_attn_params *p)
{
    const int hd = p->head_dim, nh = p->n_heads, nkv = p->n_kv_heads;
    INFERD_CHECK(hd > 0 && hd <= KCPU_MAX_HEAD_DIM && nkv > 0 && nh % nkv == 0 && p->block_size > 0);
    for (int i = 0; i < p->n_seqs; i++) {
        int q_len = p->query_start_loc[i + 1] - p->query_start_loc[i];
        INFERD_CHECK(q_len >= 0 && p->seq_lens[i] >= q_len);
    }
    const int group = nh / nkv;
    const int64_t qkv_row = (int64_t)(nh + 2 * nkv) * hd;
    const float *qkv = p->qkv; /* [n_tokens, (nh + 2*nkv) * hd] */
    float *out = p->out;       /* [n_tokens, nh * hd] */
    float lut[256]; /* fp8: every code's value, decoded once a call */
    for (int c = 0; p->kv_fp8 && c < 256; c++)
        lut[c] = kern_e4m3_to_f32((uint8_t)c);
    const int64_t n_tasks = (int64_t)p->n_tokens * nh;
    int64_t work = n_tasks * (int64_t)(p->max_seq_len > 0 ? p->max_seq_len : 1) * hd * 2;
    int nt = kcpu_threads(ctx, work);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 4)
    for (int64_t task = 0; task < n_tasks; task++) {
        int t = (int)(task / nh), h = (int)(task % nh);
        float *o = out + (int64_t)t * nh * hd + (int64_t)h * hd;
        int seq = seq_of_token(p->query_start_loc, p->n_seqs, t);
        if (seq < 0) {
            memset(o, 0, (size_t)hd * sizeof(float));
            continue;
        }
        int q_len = p->query_start_loc[seq + 1] - p->query_start_loc[seq];
        int pos = p->seq_lens[seq] - q_len + (t - p->query_start_loc[seq]);
        attn_one(p, seq, pos, h / group, qkv + (int64_t)t * qkv_row + (int64_t)h * hd, o, lut);
    }
}

/* Contract (kern_attn_workspace_bytes): the CPU attention needs no workspace. */
size_t kcpu_attn_workspace_bytes(const kern_ctx *ctx, int max_tokens, int max_seqs, int n_heads,
                                 int head_dim, int max_seq_len)
{
    return 0;
}
