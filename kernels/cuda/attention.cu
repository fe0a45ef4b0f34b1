/* kernels/cuda/attention.cu: kcuda_attention, the host side of paged
 * attention: validates the shapes, splits the batch between the decode
 * kernel (sequences with one new token) and the prefill kernel (several new
 * tokens), plans split-KV for the decode part from the host mirror of
 * seq_lens, and zeroes output rows that belong to no sequence (as the CPU
 * twin does).
 *
 * Split plan: a decode CTA covers one (sequence, kv head, head chunk); when
 * those CTAs cannot fill the GPU (fewer than 2 per SM), each sequence's keys
 * are cut into chunks of at least KC_ATTN_MIN_CHUNK tokens so that
 * n_decode_seqs * ctas_per_seq * splits reaches 2 * SMs, at most
 * KC_ATTN_MAX_SPLITS splits. All decode sequences of the launch share the
 * chunk length; a short one simply has a single split. The plan only needs
 * the workspace when it splits, and kcuda_attn_workspace_bytes bounds every
 * plan: n_seqs * n_heads * S * (head_dim + 1) floats with
 * S = min(KC_ATTN_MAX_SPLITS, ceil(max_seq_len / KC_ATTN_MIN_CHUNK)).
 *
 * NOTE: the plan (grid size) depends on the batch's lengths; CUDA graph
 * capture of decode steps will need a fixed plan per captured batch size.
 *
 * Prefill kernel: the tensor-core kernel (attention_prefill_tc.cu) where it
 * supports the head_dim (64, 128), else the CUDA-core one
 * (attention_prefill.cu); INFERD_PREFILL_ATTN=simt forces the CUDA-core
 * kernel. The variable is read once per process, at the first call.
 */
#include "kernels/cuda/attention.cuh"

/* Test hook: the number of splits the last kcuda_attention call planned for
 * its decode sequences (1 = no split, 0 = no decode sequence). */
extern "C" int kcuda_attn_last_splits;
int kcuda_attn_last_splits = 0;

/* Test hooks: kcuda_attn_prefill_force picks the prefill kernel (-1: as
 * INFERD_PREFILL_ATTN says, 0: CUDA cores, 1: tensor cores where supported);
 * kcuda_attn_last_prefill tells which one the last call ran (0: none, 1: CUDA
 * cores, 2: tensor cores). */
extern "C" int kcuda_attn_prefill_force;
extern "C" int kcuda_attn_last_prefill;
int kcuda_attn_prefill_force = -1;
int kcuda_attn_last_prefill = 0;

static bool prefill_env_simt(void)
{
    const char *e = getenv("INFERD_PREFILL_ATTN");
    const bool simt = e && strcmp(e, "simt") == 0;
    if (simt)
        INFERD_LOG_INFO("cuda: INFERD_PREFILL_ATTN=simt: prefill attention on CUDA cores");
    return simt;
}

/* True when the prefill part of this launch runs on tensor cores. */
static bool prefill_use_tc(const kcuda_state *st, int hd)
{
    static const bool env_simt = prefill_env_simt(); /* thread-safe, once per process */
    const bool want = kcuda_attn_prefill_force >= 0 ? kcuda_attn_prefill_force == 1 : !env_simt;
    return want && kcuda_attn_prefill_tc_supported(st, hd);
}

static int attn_max_splits(int max_seq_len)
{
    int64_t s = ((int64_t)max_seq_len + KC_ATTN_MIN_CHUNK - 1) / KC_ATTN_MIN_CHUNK;
    return (int)(s > KC_ATTN_MAX_SPLITS ? KC_ATTN_MAX_SPLITS : s < 1 ? 1 : s);
}

/* Contract (kern_attn_workspace_bytes): bytes of decode split partials for
 * any batch of at most max_seqs sequences (max_tokens when max_seqs <= 0) and
 * contexts of at most max_seq_len tokens; 0 when no plan can split. */
size_t kcuda_attn_workspace_bytes(const kern_ctx *ctx, int max_tokens, int max_seqs, int n_heads,
                                  int head_dim, int max_seq_len)
{
    const int64_t rows = max_seqs > 0 ? max_seqs : max_tokens;
    const int s = attn_max_splits(max_seq_len);
    if (s <= 1 || rows <= 0 || n_heads <= 0 || head_dim <= 0)
        return 0;
    return (size_t)rows * (size_t)n_heads * (size_t)s * ((size_t)head_dim + 1) * sizeof(float);
}

/* Chunk length for the decode sequences, or 0 for no split. */
static int plan_chunk(const kcuda_state *st, int n_dec, int ctas_per_seq, int max_len, int *max_splits)
{
    *max_splits = 1;
    if (n_dec <= 0 || max_len <= KC_ATTN_MIN_CHUNK)
        return 0;
    const int64_t target = 2 * (int64_t)st->n_sms, base = (int64_t)n_dec * ctas_per_seq;
    if (base >= target)
        return 0;
    const int64_t want = (target + base - 1) / base;
    int64_t chunk = ((int64_t)max_len + want - 1) / want;
    if (chunk < KC_ATTN_MIN_CHUNK)
        chunk = KC_ATTN_MIN_CHUNK;
    int64_t splits = ((int64_t)max_len + chunk - 1) / chunk;
    if (splits > KC_ATTN_MAX_SPLITS) {
        chunk = ((int64_t)max_len + KC_ATTN_MAX_SPLITS - 1) / KC_ATTN_MAX_SPLITS;
        splits = ((int64_t)max_len + chunk - 1) / chunk;
    }
    if (splits <= 1)
        return 0;
    *max_splits = (int)splits;
    return (int)chunk;
}

/* Zero the output rows [t0, t1). */
static void zero_rows(const kcuda_state *st, const kern_attn_params *p, int t0, int t1)
{
    if (t1 <= t0)
        return;
    const size_t row = (size_t)p->n_heads * (size_t)p->head_dim * 2;
    CUDA_CHECK(cudaMemsetAsync((char *)p->out + (size_t)t0 * row, 0, (size_t)(t1 - t0) * row, st->stream));
}

/* Contract (kern_attention): for each token t of sequence i at position
 * pos = seq_lens[i] - q_len + (t - query_start_loc[i]) and each head h,
 * out[t, h] = softmax_j(scale * q . k_j) v_j over positions j <= pos of kv head
 * h / (n_heads / n_kv_heads), read through block_tables; bf16 in and out, fp32
 * softmax. Rows outside every sequence are zeroed. Needs the host mirrors
 * h_query_start_loc / h_seq_lens (they must equal the device arrays), and
 * head_dim a multiple of 8, at most 256. workspace may be NULL (no split). */
void kcuda_attention(kern_ctx *ctx, const kern_attn_params *p)
{
    kcuda_state *st = kcuda_st(ctx);
    const int hd = p->head_dim, nh = p->n_heads, nkv = p->n_kv_heads;
    INFERD_CHECK_MSG(hd > 0 && hd % KERN_CUDA_ATTN_DIM_MULTIPLE == 0 && hd <= KC_ATTN_MAX_HD,
                     "CUDA attention needs head_dim % 8 == 0, <= 256");
    INFERD_CHECK(nkv > 0 && nh % nkv == 0 && p->block_size > 0 && p->n_seqs >= 0 && p->n_tokens >= 0);
    INFERD_CHECK(p->h_query_start_loc && p->h_seq_lens);
    INFERD_CHECK(kcuda_aligned(p->qkv, 16) && kcuda_aligned(p->out, 16) && kcuda_aligned(p->k_cache, 16) &&
          kcuda_aligned(p->v_cache, 16));
    kcuda_attn_last_splits = 0;
    kcuda_attn_last_prefill = 0;
    if (p->n_seqs == 0) {
        zero_rows(st, p, 0, p->n_tokens);
        return;
    }
    const int32_t *hq = p->h_query_start_loc;
    int n_dec = 0, n_pre = 0, max_dec_len = 0, max_q = 0;
    for (int i = 0; i < p->n_seqs; i++) {
        const int q_len = hq[i + 1] - hq[i];
        INFERD_CHECK(q_len >= 0 && p->h_seq_lens[i] >= q_len);
        if (q_len == 1) {
            n_dec++;
            if (p->h_seq_lens[i] > max_dec_len)
                max_dec_len = p->h_seq_lens[i];
        } else if (q_len > 1) {
            n_pre++;
            if (q_len > max_q)
                max_q = q_len;
        }
    }
    INFERD_CHECK(hq[0] >= 0 && hq[p->n_seqs] <= p->n_tokens);
    kc_attn_args a;
    memset(&a, 0, sizeof a);
    a.out = (uint16_t *)p->out;
    a.qkv = (const uint16_t *)p->qkv;
    a.k_cache = (const uint16_t *)p->k_cache;
    a.v_cache = (const uint16_t *)p->v_cache;
    a.qsl = p->query_start_loc;
    a.seq_lens = p->seq_lens;
    a.block_tables = p->block_tables;
    a.qkv_stride = (int64_t)(nh + 2 * nkv) * hd;
    a.out_stride = (int64_t)nh * hd;
    a.n_seqs = p->n_seqs;
    a.max_blocks = p->max_blocks_per_seq;
    a.nh = nh;
    a.nkv = nkv;
    a.hd = hd;
    a.bs = p->block_size;
    a.group = nh / nkv;
    a.scale = p->scale;
    a.tg = 1;
    while (a.tg * 8 < hd)
        a.tg *= 2;
    if (n_dec > 0) {
        const int gmax = a.group <= 1 ? 1 : a.group <= 2 ? 2 : a.group <= 4 ? 4 : 8;
        const int ctas_per_seq = nkv * ((a.group + gmax - 1) / gmax);
        int max_splits = 1;
        const int chunk = p->workspace ? plan_chunk(st, n_dec, ctas_per_seq, max_dec_len, &max_splits) : 0;
        if (chunk > 0) {
            a.chunk = chunk;
            a.max_splits = max_splits;
            a.part_o = (float *)p->workspace;
            a.part_lse = a.part_o + (size_t)p->n_seqs * nh * max_splits * hd;
        }
        kcuda_attn_last_splits = max_splits;
        kcuda_attn_decode_launch(st, &a);
    }
    if (n_pre > 0) {
        const bool tc = prefill_use_tc(st, hd);
        kcuda_attn_last_prefill = tc ? 2 : 1;
        if (tc)
            kcuda_attn_prefill_tc_launch(st, &a, max_q);
        else
            kcuda_attn_prefill_launch(st, &a, max_q);
    }
    zero_rows(st, p, 0, hq[0]);
    zero_rows(st, p, hq[p->n_seqs], p->n_tokens);
}
