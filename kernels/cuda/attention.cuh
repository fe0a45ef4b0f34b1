/* kernels/cuda/attention.cuh: private interface between the attention
 * dispatcher (attention.cu) and its two kernels families:
 * attention_decode.cu (one query per sequence, split-KV + log-sum-exp merge)
 * and attention_prefill.cu (variable query length, causal, tiled, CUDA
 * cores) or attention_prefill_tc.cu (the same on tensor cores, head_dim 64
 * and 128; the dispatcher prefers it unless INFERD_PREFILL_ATTN=simt).
 *
 * Both kernels take every sequence of the batch and skip, on the device, the
 * sequences that belong to the other path (decode: q_len == 1; prefill:
 * q_len > 1), so a mixed batch runs both launches over the same arguments.
 */
#ifndef INFERD_KERNELS_CUDA_ATTN_CUH
#define INFERD_KERNELS_CUDA_ATTN_CUH

#include "kernels/cuda/common.cuh"

#define KC_ATTN_MAX_HD KERN_CUDA_ATTN_MAX_HEAD_DIM /* largest head_dim (multiple of 8); kern_limits.h */
/* Decode split-KV plan (attention.cu plan_make). */
#define KC_ATTN_SPLIT_MIN_LEN 256 /* a decode context of at most this many keys never splits (NOTE in attention.cu) */
#define KC_ATTN_MIN_CHUNK 32      /* default shortest KV range of one split (INFERD_ATTN_MIN_CHUNK) */
#define KC_ATTN_CHUNK_ALIGN 32    /* a split's keys: a multiple of this */
#define KC_ATTN_MAX_SPLITS 64     /* most splits of one sequence (<= the merge CTA's threads) */
#define KC_ATTN_SPLIT_BELOW 2     /* split when the batch has fewer decode CTAs per SM than this */
/* ... then aim at one wave of batch-1 splits: this many CTAs per SM, the
 * decode kernel's occupancy for GMAX heads per CTA (its __launch_bounds__
 * minimum: 128 registers a thread up to GMAX 4, as the kernel before the
 * split rework, so an unsplit batch of 64 x 8 kv heads is one wave on 132
 * SMs; 255 at GMAX 8) */
#ifndef KC_DEC_CTAS_SMALL_GROUP /* -D...=N: A/B builds (device-wave.sh attnab) */
#define KC_DEC_CTAS_SMALL_GROUP 4
#endif
#define KC_ATTN_DEC_CTAS_PER_SM(gmax) ((gmax) <= 4 ? KC_DEC_CTAS_SMALL_GROUP : 2)
/* CTAs of the tensor-core decode body resident a SM (its K/V tiles: 68 KiB
 * at head_dim 128), the split plan's wave for it */
#define KC_ATTN_DEC_TC_CTAS_PER_SM 3
/* ... and of its fp8 form (attn_decode_tc8_kernel: half the accumulators,
 * 48 KiB of fp8 tiles at head_dim 128) */
#define KC_ATTN_DEC_TC8_CTAS_PER_SM 4
#define KC_ATTN_TARGET_PER_SM 4   /* the largest of those (workspace bound) */
#if KC_ATTN_DEC_TC8_CTAS_PER_SM > KC_ATTN_TARGET_PER_SM || KC_ATTN_DEC_TC_CTAS_PER_SM > KC_ATTN_TARGET_PER_SM
#error "KC_ATTN_TARGET_PER_SM bounds every decode body's CTAs a SM"
#endif
/* Fused-merge counters a device holds: a launch splits only below
 * KC_ATTN_SPLIT_BELOW CTAs a SM unsplit, so its (sequence, CTA group)
 * pairs number fewer than this. */
#define KC_ATTN_MERGE_COUNTERS(n_sms) ((size_t)KC_ATTN_SPLIT_BELOW * (size_t)(n_sms))

/* Kernel arguments, passed by value. */
typedef struct {
    uint16_t *out;                /* [n_tokens, nh * hd] */
    const uint16_t *qkv;          /* [n_tokens, (nh + 2 nkv) * hd], q in the first nh * hd columns */
    const uint16_t *k_cache;      /* [n_blocks, nkv, bs, hd] */
    const uint16_t *v_cache;      /* [n_blocks, nkv, bs, hd] */
    const int32_t *qsl;           /* [n_seqs + 1] */
    const int32_t *seq_lens;      /* [n_seqs] */
    const int32_t *block_tables;  /* [n_seqs, max_blocks] */
    float *part_o;                /* decode split: [n_seqs, nh, max_splits, hd], NULL = no split */
    float *part_lse;              /* decode split: [n_seqs, nh, max_splits] */
    int *merge_cnt;               /* decode split, fused merge: [n_seqs, nkv * head chunks] arrival
                                   * counters, 0 between launches (kcuda_state); NULL = merge kernel */
    int64_t qkv_stride, out_stride; /* elements per token row */
    int n_seqs, max_blocks, nh, nkv, hd, bs, group;
    int bs_log;                   /* log2(bs) when bs is a power of two, else -1 */
    int split_target, max_splits; /* decode split plan: a sequence of length L gets chunks of
                                   * dec_chunk(L) keys (attention_decode.cu), at most split_target
                                   * of them; max_splits = grid z and workspace stride */
    int min_chunk;                /* shortest split (a multiple of KC_ATTN_CHUNK_ALIGN) */
    int tg;                       /* decode: lanes per key (4, 8, 16 or 32, tg * 8 >= hd) */
    int pipe;                     /* decode: 1 = K/V through the cp.async ring (attention_decode.cu) */
    int tc;                       /* decode: 1 = the tensor-core body (kcuda_attn_decode_tc_supported) */
    int pdl;                      /* decode: 1 = launched as programmatic dependents (attention.cu),
                                   * 2 = the same, its CTAs triggering theirs at exit */
    int kv_fp8;                   /* decode: k_cache / v_cache hold fp8 e4m3 bytes (every decode body
                                   * reads them); the prefill kernels always read bf16 (attention.cu) */
    int warps;                    /* decode, the tensor-core bodies: warps a CTA, 8 / 12 (/ 16 fp8) where a
                                   * split plan of 2..4 splits is folded into one CTA a sequence
                                   * (attention.cu, INFERD_ATTN_FOLD), else 0 (4 warps) */
    int early_kv;                 /* decode, the tensor-core bodies: gather the tiles of keys before
                                   * the step's own ahead of the PDL wait (default; INFERD_ATTN_EARLY_KV=0
                                   * off, attention.cu; dec_tile_early) */
    float scale;
} kc_attn_args;

/* Keys [k0, k0 + ROWS) of kv head kvh, gathered through the sequence's
 * block-table row bt into sK / sV [ROWS][LD] (element offsets, 16-byte
 * aligned rows) by NT threads (this one is tid < NT), 16 bytes a copy:
 * copy i takes row i / CH, chunk i % CH (CH = the row's 16-byte chunks), so
 * a warp's 32 copies are consecutive chunks of consecutive rows. Keys at or
 * past kv_end are zero-filled without a read (k0 < kv_end: the tile has a
 * key). T: the cache's element, uint16_t (bf16, 8 a chunk) or uint8_t
 * (fp8 e4m3 bytes, 16 a chunk: the tensor-core decode body's fp8 ring).
 * Shared by the tensor-core prefill (a CTA, 64 keys) and the tensor-core
 * decode body (a warp, 16 keys). LAY: where a row's chunks go.
 * KC_TILE_ROWS: rows of LD elements, chunks in order. KC_TILE_SW128 (bf16
 * only): the wgmma prefill's layout (LD unused): 64-dim halves
 * [D / 64][ROWS][64], rows of 128 bytes whose 16-byte chunk c sits at
 * c ^ (row % 8) (the 128-byte swizzle, mma.cuh); 8 consecutive copies fill
 * one row. KC_TILE_DEC8 (fp8, D 64 or 128; LD unused): the fp8 decode
 * body's [ROWS][D] bytes with the 16-byte chunks of each 128-byte line
 * XORed by kc_dec8_swz(row) (kc_dec8_off). */
enum { KC_TILE_ROWS = 0, KC_TILE_SW128 = 1, KC_TILE_DEC8 = 2 };

/* The fp8 decode body's tile layout (attention_decode.cu): byte b of row r
 * of a [rows][D] byte tile (D = 64 or 128) lives at
 * (r D + b) ^ (kc_dec8_swz(r) << 4), i.e. the chunk index within its
 * 128-byte line is XORed with (r & 1) | ((r / 4) % 4) * 2. Its two reads
 * hit 32 distinct banks: a lane's 16-byte K pieces (rows 2n' and 2n' + 1 in
 * a quarter warp) and the 4-byte V words of rows 4 c + i (c = 0..3, i
 * fixed) at byte 32 Q + 4 g. */
__device__ __forceinline__ int kc_dec8_swz(int r)
{
    return (r & 1) | ((r >> 2) & 3) << 1;
}
template <int D> __device__ __forceinline__ int kc_dec8_off(int r, int b)
{
    static_assert(D == 64 || D == 128, "the fp8 decode tile's swizzle covers 64 and 128 dims");
    return (r * D + b) ^ (kc_dec8_swz(r) << 4);
}

template <int D, int LD, int ROWS, int NT, int LAY = KC_TILE_ROWS, class T = uint16_t>
__device__ __forceinline__ void kc_gather_kv(const kc_attn_args &a, const int32_t *bt, int kvh, int k0, int kv_end,
                                             int tid, T *sK, T *sV)
{
    constexpr int EPC = 16 / (int)sizeof(T), CH = D / EPC; /* elements a chunk, chunks a row */
    static_assert(ROWS * CH % NT == 0, "K/V tile chunks per thread");
    static_assert(LAY != KC_TILE_SW128 || sizeof(T) == 2, "the swizzled layout is bf16's");
    static_assert(LAY != KC_TILE_DEC8 || sizeof(T) == 1, "the fp8 decode layout is bytes");
    const int64_t blk = (int64_t)a.nkv * a.bs * D; /* elements a cache block */
    const T *kc = (const T *)a.k_cache, *vc = (const T *)a.v_cache;
#pragma unroll
    for (int j = 0; j < ROWS * CH / NT; j++) {
        const int i = tid + j * NT, r = i / CH, ch = i - r * CH, p = k0 + r;
        int dst;
        if constexpr (LAY == KC_TILE_SW128)
            dst = (ch >> 3) * ROWS * 64 + r * 64 + ((ch ^ r) & 7) * 8;
        else if constexpr (LAY == KC_TILE_DEC8)
            dst = kc_dec8_off<D>(r, ch * 16);
        else
            dst = r * LD + ch * EPC;
        const bool ok = p < kv_end;
        /* keys past kv_end: the address of the last key (valid), no read */
        const int pc = ok ? p : kv_end - 1;
        /* NOTE: a run-time division costs ~20 instructions per row;
         * block sizes are powers of two in practice. */
        const int bi = a.bs_log >= 0 ? pc >> a.bs_log : pc / a.bs;
        /* element offset into [n_blocks, nkv, bs, D] */
        const int64_t off = (int64_t)__ldg(bt + bi) * blk + ((kvh * a.bs + pc - bi * a.bs) * D + ch * EPC);
        kc_cp_async16(sK + dst, kc + off, ok);
        kc_cp_async16(sV + dst, vc + off, ok);
    }
}

/* Decode attention for every sequence with q_len == 1 (grid over all
 * n_seqs); with a.part_o set, per-split partials then the merge. */
void kcuda_attn_decode_launch(const kcuda_state *st, const kc_attn_args *a);
bool kcuda_attn_decode_tc_supported(int group, int hd);
/* Whether this device runs a tensor-core body (kv_fp8: the fp8 one) with w warps a CTA. */
bool kcuda_attn_dec_warps_fit(const kcuda_state *st, bool kv_fp8, int hd, int w);

/* Per-device set-up of the attention kernels' function attributes, so no
 * launch sets any: the decode ring's shared-memory carveout, the
 * tensor-core prefill's shared-memory opt-in. kcuda_attn_init (attention.cu)
 * runs both; the kcuda context calls it on its device at creation. */
void kcuda_attn_decode_init(const kcuda_state *st);
void kcuda_attn_prefill_tc_init(const kcuda_state *st);
/* Also allocates st->attn_merge_cnt (zeroed); false when it cannot. */
bool kcuda_attn_init(kcuda_state *st);

/* Prefill attention for every sequence with q_len > 1; max_q_len bounds the
 * query tiles. */
void kcuda_attn_prefill_launch(const kcuda_state *st, const kc_attn_args *a, int max_q_len);

/* The same on tensor cores (attention_prefill_tc.cu), for the head_dims and
 * devices where kcuda_attn_prefill_tc_supported holds (64 and 128). */
bool kcuda_attn_prefill_tc_supported(const kcuda_state *st, int hd);
/* Its forms: mma.sync with one or two 16-row m-tiles a warp (64 or 128
 * query rows a CTA), wgmma with two warpgroups (128 rows; compute
 * capability 9.0) and key tiles of 64 or 128. */
enum { KC_PTC_MMA1 = 1, KC_PTC_MMA2 = 2, KC_PTC_WG = 3, KC_PTC_WG128 = 4 };
/* Whether a device of compute capability cc (10 major + minor) runs the
 * wgmma forms: the build's sm_90a code runs on 9.0 only. */
static inline bool kcuda_wgmma_cc(int cc)
{
    return cc == 90;
}
int kcuda_attn_prefill_tc_launch(const kcuda_state *st, const kc_attn_args *a, int max_q_len, int form);

#endif
