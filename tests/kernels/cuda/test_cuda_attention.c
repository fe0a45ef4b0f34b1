/* tests/kernels/cuda/test_cuda_attention.c: RoPE + paged KV write and paged
 * attention, CUDA vs CPU.
 *
 * Attention scenarios are built on the host: each sequence gets random,
 * non-contiguous block ids (block 0 is never used), every cache slot that no
 * sequence owns (past a sequence's length in its last block, unused blocks)
 * holds NaN on both backends, and unused block-table entries are -1, so any
 * read outside a sequence's context turns the output NaN. Cases cover decode
 * without and with split-KV (checked through the kcuda_attn_last_splits
 * hook), GQA groups 1/3/4/8/12, head_dim 8/64/128/256, block sizes 1/16/32,
 * partly filled last blocks, prefill, chunked prefill after cached context,
 * mixed decode + prefill batches and padding rows. "Uniform" variants set
 * q = 0 (every key weighs the same) and V one-hot in (position mod head_dim),
 * so the output counts keys exactly: a dropped or repeated key shifts a
 * value by >= 1/(pos+1) relative to ~1/head_dim.
 *
 * Decode runs on one of two bodies (K/V to registers, or through a cp.async
 * ring in shared memory); "decode pipe" runs decode cases on both, forced
 * through kcuda_attn_decode_pipe_force, each against the CPU twin and the
 * two bitwise against each other. Split partials are merged by a second
 * kernel or by the last split CTA; "decode merge" runs split cases both
 * ways (kcuda_attn_merge_fused_force), bitwise alike.
 *
 * Prefill runs on one of two kernels (tensor cores for head_dim 64/128,
 * CUDA cores otherwise or with INFERD_PREFILL_ATTN=simt); the "tc" tests run
 * every case on both, forced through the kcuda_attn_prefill_force hook, and
 * check which one ran (kcuda_attn_last_prefill); the tensor-core kernel
 * runs each case in each of its forms (kcuda_attn_prefill_tc_form_force):
 * mma.sync with one and with two 16-row m-tiles a warp, whose outputs must
 * be bitwise equal, and, on a device of compute capability 9.0 (and the
 * host emulator), wgmma with key tiles of 64 and of 128; each form is
 * checked against the CPU twin (the two instruction families may round
 * differently). Their cases add odd and
 * tile-straddling lengths, chunks after cached context, block tables that
 * share prefix blocks between sequences (as prefix-cache hits do), GQA 1/4/8
 * and a head_dim the tensor-core kernel leaves to the fallback.
 *
 * "fp8" runs decode, prefill and mixed cases with an fp8 e4m3 cache (the
 * codes of the same values on both backends).
 *
 * Tolerance: bf16 output of an fp32 softmax over bf16-exact inputs:
 * atol 2e-3, rtol 1e-2 (random), rtol 5e-3 (uniform: exact mean, one bf16
 * rounding).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/half.h"
#include "common/rng.h"
#include "kernels/kern_fp8.h"
#include "kt_harness.h"

#ifdef INFERD_HAVE_CUDA
extern int kcuda_attn_last_splits; /* kernels/cuda/attention.cu test hooks */
extern int kcuda_attn_prefill_force; /* -1 env, 0 CUDA cores, 1 tensor cores */
extern int kcuda_attn_last_prefill;  /* 0 none, 1 CUDA cores, 2 tensor cores */
extern int kcuda_attn_decode_pipe_force; /* -1 env, 0 registers, 1 cp.async ring */
extern int kcuda_attn_last_decode_pipe;
extern int kcuda_attn_prefill_tc_form_force; /* 0 env, else KC_PTC_*: 1, 2 mma.sync, 3, 4 wgmma */
extern int kcuda_attn_last_prefill_form;
extern int kcuda_attn_prefill_wg_device(void); /* 1: this device runs the wgmma forms */
extern int kcuda_attn_merge_fused_force; /* -1 env, 0 merge kernel, 1 fused into the last split */
extern int kcuda_attn_last_merge_fused;
/* -1 env, 0 plain launches, 1 programmatic dependents, 2 the same triggering at exit */
extern int kcuda_attn_pdl_force;
extern int kcuda_attn_decode_tc_force; /* -1 env, 0 CUDA cores, 1 tensor cores (where supported) */
extern int kcuda_attn_last_decode_tc;
/* split plans folded into one CTA a sequence: -1 env, 0 never, 1 where it applies; a cap on
 * its warps (0 env, else 8 or 12); warps of the last fold */
extern int kcuda_attn_fold_force, kcuda_attn_fold_max_warps, kcuda_attn_last_fold;
/* K/V tiles gathered before the PDL wait: -1 env, 0 no, 1 yes; what the last decode launch did */
extern int kcuda_attn_early_kv_force, kcuda_attn_last_early_kv;
#else
static int kcuda_attn_early_kv_force;
static int kcuda_attn_last_early_kv;
static int kcuda_attn_fold_force;
static int kcuda_attn_fold_max_warps;
static int kcuda_attn_last_fold;
static int kcuda_attn_decode_tc_force;
static int kcuda_attn_last_decode_tc __attribute__((unused)); /* read only with INFERD_HAVE_CUDA */
static int kcuda_attn_pdl_force;
static int kcuda_attn_merge_fused_force;
static int kcuda_attn_last_merge_fused;
static int kcuda_attn_prefill_tc_form_force;
static int kcuda_attn_last_prefill_form;
static int kcuda_attn_prefill_wg_device(void)
{
    return 0;
}
static int kcuda_attn_decode_pipe_force;
static int kcuda_attn_last_decode_pipe;
static int kcuda_attn_last_splits;
static int kcuda_attn_prefill_force;
static int kcuda_attn_last_prefill;
#endif

static int64_t cache_off(int64_t slot, int h, int nkv, int bs, int hd)
{
    return ((slot / bs * nkv + h) * bs + slot % bs) * hd;
}

/* --- RoPE + KV write --------------------------------------------------------------- */

static int rope_case(int nh, int nkv, int hd, int bs, int n_tokens, uint64_t seed)
{
    const int row = (nh + 2 * nkv) * hd;
    const int n_blocks = n_tokens / bs + 4;
    const size_t nq = (size_t)n_tokens * row, nc = (size_t)n_blocks * nkv * bs * hd;
    float *qkv = inferd_malloc(nq * sizeof(float));
    kt_rand_bf16(qkv, nq, seed, -1.0f, 1.0f);
    int32_t *pos = inferd_malloc((size_t)n_tokens * sizeof(int32_t));
    int64_t *slot = inferd_malloc((size_t)n_tokens * sizeof(int64_t));
    const int n_slots = n_blocks * bs;
    int *perm = inferd_malloc((size_t)n_slots * sizeof(int));
    for (int i = 0; i < n_slots; i++)
        perm[i] = i;
    for (int i = n_slots - 1; i > 0; i--) { /* Fisher-Yates */
        int j = (int)(rng_uniform(seed + 1, (uint64_t)i) * (i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int t = 0; t < n_tokens; t++) {
        pos[t] = (int32_t)(rng_uniform(seed + 2, (uint64_t)t) * 5000);
        slot[t] = t % 5 == 3 ? -1 : perm[t]; /* some padding tokens */
    }
    pos[0] = 0;
    float *inv = inferd_malloc((size_t)(hd / 2) * sizeof(float));
    for (int j = 0; j < hd / 2; j++)
        inv[j] = (float)(1.0 / pow(500000.0, 2.0 * j / hd));

    /* CPU */
    float *cqkv = kt_cpu_f32(qkv, nq);
    float *ckc = inferd_malloc(nc * sizeof(float)), *cvc = inferd_malloc(nc * sizeof(float));
    for (size_t i = 0; i < nc; i++)
        ckc[i] = cvc[i] = NAN;
    kern_rope_kv_params pc = {cqkv, pos, slot, inv, ckc, cvc, n_tokens, nh, nkv, hd, bs, 1.0f, false}; /* mscale 1 */
    kern_rope_kv_write(kt_cpu, &pc);

    /* GPU */
    kt_gbuf gq, gk, gv;
    void *dqkv = kt_gbuf_alloc(&gq, nq * 2, 0);
    uint16_t *hq = kt_to_bf16(qkv, nq);
    kern_memcpy_h2d(kt_gpu, dqkv, hq, nq * 2);
    void *dkc = kt_gbuf_alloc(&gk, nc * 2, 0), *dvc = kt_gbuf_alloc(&gv, nc * 2, 0);
    void *dpos = kt_gpu_bytes(pos, (size_t)n_tokens * 4), *dslot = kt_gpu_bytes(slot, (size_t)n_tokens * 8);
    void *dinv = kt_gpu_bytes(inv, (size_t)(hd / 2) * 4);
    kern_rope_kv_params pg = {dqkv, dpos, dslot, dinv, dkc, dvc, n_tokens, nh, nkv, hd, bs, 1.0f, false};
    kern_rope_kv_write(kt_gpu, &pg);

    char what[80];
    snprintf(what, sizeof what, "nh=%d nkv=%d hd=%d bs=%d", nh, nkv, hd, bs);
    float *got = inferd_malloc((nq > nc ? nq : nc) * sizeof(float));
    uint16_t *h = inferd_malloc((nq > nc ? nq : nc) * 2);
    kt_gbuf_read(&gq, h);
    kt_from_bf16(h, got, nq);
    int bad = kt_compare("rope_kv_write", what, got, cqkv, nq, 1e-2, 1e-2);
    /* caches: written slots match the CPU, the rest keep the 0xFFFF fill */
    for (int c = 0; c < 2; c++) {
        kt_gbuf_read(c ? &gv : &gk, h);
        kt_from_bf16(h, got, nc);
        const float *ref = c ? cvc : ckc;
        int b = 0;
        for (size_t i = 0; i < nc; i++) {
            bool ok = isnan(ref[i]) ? h[i] == 0xFFFF : fabsf(got[i] - ref[i]) <= 1e-2f + 1e-2f * fabsf(ref[i]);
            if (!ok && b++ < 5)
                printf("  rope %s cache[%zu] got %g ref %g\n", c ? "v" : "k", i, got[i], ref[i]);
        }
        kt_record("rope_kv_write", b, 0, 0);
        bad += b;
    }
    bad += kt_gbuf_guards_bad(&gq, "rope qkv") + kt_gbuf_guards_bad(&gk, "k cache") + kt_gbuf_guards_bad(&gv, "v cache");
    kt_gbuf_free(&gq);
    kt_gbuf_free(&gk);
    kt_gbuf_free(&gv);
    kern_free(kt_gpu, dpos);
    kern_free(kt_gpu, dslot);
    kern_free(kt_gpu, dinv);
    kern_free(kt_cpu, cqkv);
    inferd_free(h);
    inferd_free(got);
    inferd_free(hq);
    inferd_free(ckc);
    inferd_free(cvc);
    inferd_free(inv);
    inferd_free(perm);
    inferd_free(slot);
    inferd_free(pos);
    inferd_free(qkv);
    return bad;
}

START_TEST(test_rope_kv_write)
{
    int bad = 0;
    bad += rope_case(8, 4, 8, 16, 13, 1);     /* stories260K shape */
    bad += rope_case(32, 8, 128, 16, 21, 2);  /* Llama-3-8B shape */
    bad += rope_case(16, 16, 64, 1, 9, 3);    /* MHA, block size 1 */
    bad += rope_case(12, 4, 64, 32, 40, 4);   /* GQA 3 */
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* --- attention ------------------------------------------------------------------------ */

typedef struct {
    int L, q_len; /* context length (cached + new), new tokens */
} kt_seq;

typedef struct {
    const char *name;
    int nh, nkv, hd, bs;
    const kt_seq *seqs;
    int n_seqs, pad_tokens;
    bool use_ws, uniform;
    int expect_split; /* -1: don't check, 0: must not split, 1: must split */
    int share_blocks; /* sequences i > 0 map their first full blocks (at most this many) to sequence 0's */
} kt_attn_case;

/* When non-zero, the attention scale of the next cases (else 1 / sqrt(hd)). */
static float g_scale;
/* When non-zero, the next cases' q values times this power of two (the
 * fp8 tensor-core body scales each head's q into f16's range itself). */
static float g_qmul;
/* When set, the next cases' caches hold fp8 e4m3: the codes of the scene's
 * values, read by both backends (kv_fp8; CUDA with its kv_dequant copy). */
static bool g_fp8;

/* The host side of one attention scenario (CPU layout, F32). */
typedef struct {
    int32_t *qsl, *lens, *bt; /* [ns + 1], [ns], [ns, max_blocks] */
    float *kc, *vc;           /* [total_blocks, nkv, bs, hd], NaN where no sequence owns the slot */
    float *qkv;               /* [n_tokens, (nh + 2 nkv) hd] */
    int n_tokens, max_blocks, total_blocks, max_q, max_L;
    size_t nc, nq, no;
} kt_scene;

/* Random non-contiguous block tables and cache contents for the case. */
static void scene_build(const kt_attn_case *c, uint64_t seed, kt_scene *sc)
{
    const int nh = c->nh, nkv = c->nkv, hd = c->hd, bs = c->bs, ns = c->n_seqs;
    memset(sc, 0, sizeof *sc);
    sc->qsl = inferd_malloc((size_t)(ns + 1) * 4);
    sc->lens = inferd_malloc((size_t)ns * 4);
    sc->max_blocks = 1;
    sc->total_blocks = 4;
    sc->qsl[0] = 0;
    for (int i = 0; i < ns; i++) {
        sc->qsl[i + 1] = sc->qsl[i] + c->seqs[i].q_len;
        sc->lens[i] = c->seqs[i].L;
        int nb = (c->seqs[i].L + bs - 1) / bs;
        sc->max_blocks = nb + 1 > sc->max_blocks ? nb + 1 : sc->max_blocks;
        sc->total_blocks += nb;
        sc->max_q = c->seqs[i].q_len > sc->max_q ? c->seqs[i].q_len : sc->max_q;
        sc->max_L = c->seqs[i].L > sc->max_L ? c->seqs[i].L : sc->max_L;
    }
    sc->n_tokens = sc->qsl[ns] + c->pad_tokens;
    /* block ids: a shuffled 1..total_blocks-1 (block 0 stays unused) */
    int *ids = inferd_malloc((size_t)sc->total_blocks * sizeof(int));
    for (int i = 0; i < sc->total_blocks - 1; i++)
        ids[i] = i + 1;
    for (int i = sc->total_blocks - 2; i > 0; i--) {
        int j = (int)(rng_uniform(seed, (uint64_t)i) * (i + 1));
        int t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
    sc->bt = inferd_malloc((size_t)ns * sc->max_blocks * 4);
    for (int i = 0; i < ns * sc->max_blocks; i++)
        sc->bt[i] = -1;
    sc->nc = (size_t)sc->total_blocks * nkv * bs * hd;
    sc->kc = inferd_malloc(sc->nc * sizeof(float));
    sc->vc = inferd_malloc(sc->nc * sizeof(float));
    for (size_t i = 0; i < sc->nc; i++)
        sc->kc[i] = sc->vc[i] = NAN;
    int next = 0;
    uint64_t rs = seed * 1000;
    for (int i = 0; i < ns; i++) {
        int32_t *bti = sc->bt + (size_t)i * sc->max_blocks;
        for (int b = 0; b * bs < sc->lens[i]; b++) {
            const bool shared = i > 0 && b < c->share_blocks && (b + 1) * bs <= sc->lens[0] &&
                                (b + 1) * bs <= sc->lens[i]; /* full blocks of both, as a prefix hit */
            bti[b] = shared ? sc->bt[b] : ids[next++];
        }
        for (int p = 0; p < sc->lens[i]; p++) {
            int64_t slot = (int64_t)bti[p / bs] * bs + p % bs;
            for (int h = 0; h < nkv; h++) {
                int64_t o = cache_off(slot, h, nkv, bs, hd);
                kt_rand_bf16(sc->kc + o, (size_t)hd, rs++, -2.0f, 2.0f);
                if (c->uniform) {
                    for (int d = 0; d < hd; d++)
                        sc->vc[o + d] = d == p % hd ? 1.0f : 0.0f;
                } else {
                    kt_rand_bf16(sc->vc + o, (size_t)hd, rs++, -1.0f, 1.0f);
                }
            }
        }
    }
    inferd_free(ids);
    sc->nq = (size_t)sc->n_tokens * (nh + 2 * nkv) * hd;
    sc->no = (size_t)sc->n_tokens * nh * hd;
    sc->qkv = inferd_malloc(sc->nq * sizeof(float));
    kt_rand_bf16(sc->qkv, sc->nq, seed + 7, -2.0f, 2.0f);
    if (g_qmul != 0.0f)
        for (size_t i = 0; i < sc->nq; i++)
            sc->qkv[i] *= g_qmul; /* a power of two: exact in bf16 */
    if (c->uniform)
        memset(sc->qkv, 0, sc->nq * sizeof(float));
}

static void scene_free(kt_scene *sc)
{
    inferd_free(sc->qkv);
    inferd_free(sc->kc);
    inferd_free(sc->vc);
    inferd_free(sc->bt);
    inferd_free(sc->lens);
    inferd_free(sc->qsl);
}

/* When set, attn_case copies the GPU output (n_tokens x nh x hd floats)
 * here (test_attention_decode_plan: bitwise comparisons between plans). */
static float *g_keep_out;
static int g_keep_splits;

/* Build the scenario, run both backends, compare. Returns violations. */
static int attn_case(const kt_attn_case *c, uint64_t seed)
{
    const int nh = c->nh, nkv = c->nkv, hd = c->hd, bs = c->bs, ns = c->n_seqs;
    kt_scene sc;
    scene_build(c, seed, &sc);
    const float scale = g_scale != 0.0f ? g_scale : 1.0f / sqrtf((float)hd);

    /* fp8 (g_fp8): both backends read the e4m3 codes (NaN slots: the NaN code) */
    uint8_t *k8 = NULL, *v8 = NULL;
    if (g_fp8) {
        k8 = inferd_malloc(sc.nc);
        v8 = inferd_malloc(sc.nc);
        for (size_t i = 0; i < sc.nc; i++) {
            k8[i] = kern_f32_to_e4m3(sc.kc[i]);
            v8[i] = kern_f32_to_e4m3(sc.vc[i]);
        }
    }

    /* CPU reference */
    float *ref = inferd_malloc(sc.no * sizeof(float));
    for (size_t i = 0; i < sc.no; i++)
        ref[i] = NAN;
    kern_attn_params pc = {ref, sc.qkv, sc.kc, sc.vc, sc.qsl, sc.lens, sc.bt, sc.qsl, sc.lens, NULL, ns,
                           sc.n_tokens, sc.max_blocks, nh, nkv, hd, bs, sc.max_q, sc.max_L, scale, false, NULL, 0};
    if (g_fp8) {
        pc.k_cache = k8;
        pc.v_cache = v8;
        pc.kv_fp8 = true;
    }
    kern_attention(kt_cpu, &pc);

    /* GPU */
    uint16_t *hk = kt_to_bf16(sc.kc, sc.nc), *hv = kt_to_bf16(sc.vc, sc.nc);
    void *dk = g_fp8 ? kt_gpu_bytes(k8, sc.nc) : kt_gpu_bytes(hk, sc.nc * 2);
    void *dv = g_fp8 ? kt_gpu_bytes(v8, sc.nc) : kt_gpu_bytes(hv, sc.nc * 2);
    kt_gbuf gd; /* fp8: the prefill's bf16 copy of the cache, guarded */
    const size_t dqb = kern_attn_kv_dequant_bytes(kt_gpu, sc.total_blocks, nkv, bs, hd);
    void *ddq = g_fp8 ? kt_gbuf_alloc(&gd, dqb, 0) : NULL;
    void *dq = kt_gpu_bf16(sc.qkv, sc.nq);
    void *dqsl = kt_gpu_bytes(sc.qsl, (size_t)(ns + 1) * 4), *dlens = kt_gpu_bytes(sc.lens, (size_t)ns * 4);
    void *dbt = kt_gpu_bytes(sc.bt, (size_t)ns * sc.max_blocks * 4);
    size_t wsb = kern_attn_workspace_bytes(kt_gpu, sc.n_tokens, ns, nh, hd, sc.max_L);
    void *ws = c->use_ws && wsb ? kern_alloc(kt_gpu, wsb) : NULL;
    kt_gbuf go;
    void *dout = kt_gbuf_alloc(&go, sc.no * 2, 0);
    kern_attn_params pg = {dout, dq, dk, dv, dqsl, dlens, dbt, sc.qsl, sc.lens, ws, ns, sc.n_tokens,
                           sc.max_blocks, nh, nkv, hd, bs, sc.max_q, sc.max_L, scale, false, NULL, 0};
    pg.kv_fp8 = g_fp8;
    pg.kv_dequant = ddq;
    pg.n_blocks = sc.total_blocks;
    kern_attention(kt_gpu, &pg);
    const int splits = kcuda_attn_last_splits;
    static const char *const paths[] = {"-", "simt", "tc"};
    const int pk = kcuda_attn_last_prefill;
    const char *path = paths[pk >= 0 && pk <= 2 ? pk : 0];
    uint16_t *h = inferd_malloc(sc.no * 2);
    float *got = inferd_malloc(sc.no * sizeof(float));
    kt_gbuf_read(&go, h);
    kt_from_bf16(h, got, sc.no);
    if (g_keep_out)
        memcpy(g_keep_out, got, sc.no * sizeof(float));
    g_keep_splits = splits;
    char what[96];
    snprintf(what, sizeof what, "%s (splits %d)", c->name, splits);
    int bad = kt_compare("attention", what, got, ref, sc.no, c->uniform ? 1e-4 : 2e-3, c->uniform ? 5e-3 : 1e-2);
    bad += kt_gbuf_guards_bad(&go, c->name);
    if (g_fp8) {
        bad += kt_gbuf_guards_bad(&gd, "kv_dequant");
        kt_gbuf_free(&gd);
        inferd_free(k8);
        inferd_free(v8);
    }
    if (c->expect_split >= 0 && (splits > 1) != (c->expect_split == 1)) {
        printf("  attention %s: planned %d splits, expected %s\n", c->name, splits,
               c->expect_split ? "a split" : "no split");
        kt_record("attention", 1, 0, 0);
        bad++;
    }
    printf("  attention %-28s nh=%-2d nkv=%-2d hd=%-3d bs=%-2d tokens=%-4d splits=%d ws=%zu prefill=%s%s %s\n",
           c->name, nh, nkv, hd, bs, sc.n_tokens, splits, ws ? wsb : (size_t)0, path, g_fp8 ? " fp8" : "",
           bad ? "FAIL" : "ok");
    kt_gbuf_free(&go);
    kern_free(kt_gpu, ws);
    kern_free(kt_gpu, dbt);
    kern_free(kt_gpu, dlens);
    kern_free(kt_gpu, dqsl);
    kern_free(kt_gpu, dq);
    kern_free(kt_gpu, dv);
    kern_free(kt_gpu, dk);
    inferd_free(got);
    inferd_free(h);
    inferd_free(hv);
    inferd_free(hk);
    inferd_free(ref);
    scene_free(&sc);
    return bad;
}

#define NSEQ(a) ((int)(sizeof(a) / sizeof((a)[0])))

START_TEST(test_attention_decode)
{
    static const kt_seq short3[] = {{1, 1}, {17, 1}, {100, 1}};
    static const kt_seq long3[] = {{1500, 1}, {3000, 1}, {5, 1}};
    static const kt_seq gqa1[] = {{300, 1}, {7, 1}};
    static const kt_seq mid[] = {{257, 1}, {64, 1}, {129, 1}, {33, 1}};
    static const kt_seq big[] = {{4100, 1}};
    const kt_attn_case cases[] = {
        /* contexts of at most KC_ATTN_SPLIT_MIN_LEN (256) keys never split */
        {"decode short gqa4", 8, 2, 64, 16, short3, NSEQ(short3), 0, true, false, 0, 0},
        {"decode split gqa8", 16, 2, 128, 32, long3, NSEQ(long3), 0, true, false, 1, 0},
        {"decode split uniform", 16, 2, 128, 32, long3, NSEQ(long3), 0, true, true, 1, 0},
        {"decode no-ws long", 16, 2, 128, 32, long3, NSEQ(long3), 0, false, false, 0, 0},
        {"decode gqa1 hd8 bs1", 4, 4, 8, 1, gqa1, NSEQ(gqa1), 0, true, false, 1, 0},
        {"decode gqa12 (2 chunks)", 24, 2, 64, 16, mid, NSEQ(mid), 0, true, false, -1, 0},
        {"decode gqa3 hd256", 6, 2, 256, 16, mid, NSEQ(mid), 0, true, false, -1, 0},
        {"decode gqa4 hd128 pad", 32, 8, 128, 16, short3, NSEQ(short3), 3, true, false, 0, 0},
        {"decode 1 seq 4100", 32, 8, 128, 16, big, NSEQ(big), 0, true, true, 1, 0},
        /* a block size that is not a power of two: the key offsets divide */
        {"decode split bs12", 16, 2, 128, 12, long3, NSEQ(long3), 0, true, false, 1, 0},
    };
    int bad = 0;
    for (int i = 0; i < NSEQ(cases); i++)
        bad += attn_case(&cases[i], 1000 + (uint64_t)i);
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The split plan's branches (attention.cu plan_make) at Llama-3-8B shapes
 * (32 heads, 8 kv heads, head_dim 128) and others, each vs the CPU twin:
 * batch 1 at 544 tokens (many short splits), batch 1 at 8k with one kv
 * head (splits capped at KC_ATTN_MAX_SPLITS), a batch large enough not to
 * split, batch 12 at ~1k, lane groups of 4 (head_dim 32) and 32 lanes x 8
 * heads (head_dim 256, GQA 8); without INFERD_TEST_QUICK also batch 1 at
 * 32k. Then the invariances CUDA graphs and the engine rely on: a sequence
 * gives bitwise the same output whatever the other sequences' lengths, a
 * batch padded with context-1 rows (as a graph pads 3 rows to 4) gives
 * bitwise the same rows as the unpadded batch, and a sequence alone gives
 * bitwise what it gives in a batch of 3. The plans of 2..4 splits are not
 * folded here (kcuda_attn_fold_force 0: batch 12 splits); the fold has its
 * own test. */
START_TEST(test_attention_decode_plan)
{
    kcuda_attn_fold_force = 0;
    static const kt_seq b1_544[] = {{544, 1}};
    static const kt_seq b1_8k[] = {{8000, 1}};
    static const kt_seq b1_32k[] = {{32768, 1}};
    static const kt_seq mid3[] = {{700, 1}, {33, 1}, {1024, 1}};
    kt_seq wide[40], b12[12];
    for (int i = 0; i < 40; i++)
        wide[i] = (kt_seq){20 + (i * 37) % 280, 1};
    for (int i = 0; i < 12; i++)
        b12[i] = (kt_seq){600 + (i * 131) % 500, 1};
    const kt_attn_case cases[] = {
        {"plan b1 544 llama3", 32, 8, 128, 16, b1_544, NSEQ(b1_544), 0, true, false, 1, 0},
        {"plan b1 8000 mqa (capped)", 4, 1, 64, 16, b1_8k, NSEQ(b1_8k), 0, true, false, 1, 0},
        {"plan b40 no split", 32, 8, 128, 16, wide, NSEQ(wide), 0, true, false, 0, 0},
        {"plan b12 ~1k", 32, 8, 128, 16, b12, NSEQ(b12), 0, true, false, 1, 0},
        {"plan hd32 gqa2 (tg 4)", 4, 2, 32, 8, mid3, NSEQ(mid3), 1, true, false, 1, 0},
        {"plan hd256 gqa8 (tg 32)", 16, 2, 256, 16, mid3, NSEQ(mid3), 0, true, false, 1, 0},
        {"plan b1 544 uniform", 32, 8, 128, 16, b1_544, NSEQ(b1_544), 0, true, true, 1, 0},
    };
    int bad = 0;
    for (int i = 0; i < NSEQ(cases); i++)
        bad += attn_case(&cases[i], 4000 + (uint64_t)i);
    if (!kt_quick) {
        const kt_attn_case big = {"plan b1 32768 llama3", 32, 8, 128, 16, b1_32k, NSEQ(b1_32k),
                                  0, true, false, 1, 0};
        bad += attn_case(&big, 4100);
        /* Llama-3.1's 128k context: 64 splits of 2048 keys, on both decode bodies */
        static const kt_seq b1_128k[] = {{131072, 1}};
        const kt_attn_case huge = {"plan b1 131072 llama3", 32, 8, 128, 16, b1_128k, NSEQ(b1_128k),
                                   0, true, false, 1, 0};
        for (int f = 0; f < 2; f++) {
            kcuda_attn_decode_pipe_force = f;
            bad += attn_case(&huge, 4101);
        }
        kcuda_attn_decode_pipe_force = -1;
    }
    /* seq 0 (544) beside 600 vs beside 1000: another grid, the same chunks for seq 0 */
    static const kt_seq pa[] = {{544, 1}, {600, 1}}, pb[] = {{544, 1}, {1000, 1}};
    /* graph padding: 3 rows vs the same 3 + one context-1 row (batch 4 both) */
    static const kt_seq g3[] = {{544, 1}, {300, 1}, {700, 1}}, g4[] = {{544, 1}, {300, 1}, {700, 1}, {1, 1}};
    const int nh = 32, nkv = 8, hd = 128;
    float *o1 = inferd_malloc((size_t)4 * nh * hd * sizeof(float));
    float *o2 = inferd_malloc((size_t)4 * nh * hd * sizeof(float));
    const kt_attn_case qa = {"plan beside 600", nh, nkv, hd, 16, pa, 2, 0, true, false, 1, 0};
    const kt_attn_case qb = {"plan beside 1000", nh, nkv, hd, 16, pb, 2, 0, true, false, 1, 0};
    const kt_attn_case ga = {"plan graph 3 rows", nh, nkv, hd, 16, g3, 3, 0, true, false, 1, 0};
    const kt_attn_case gb = {"plan graph 3+1 pad rows", nh, nkv, hd, 16, g4, 4, 0, true, false, 1, 0};
    g_keep_out = o1;
    bad += attn_case(&qa, 4200);
    const int s1 = g_keep_splits;
    g_keep_out = o2;
    bad += attn_case(&qb, 4200);
    if (memcmp(o1, o2, (size_t)nh * hd * sizeof(float)) != 0) {
        printf("  attention plan: sequence 0 differs beside 600 / 1000 (grid splits %d vs %d)\n", s1,
               g_keep_splits);
        kt_record("attention", 1, 0, 0);
        bad++;
    }
    g_keep_out = o1;
    bad += attn_case(&ga, 4300);
    const int s3 = g_keep_splits;
    g_keep_out = o2;
    bad += attn_case(&gb, 4300);
    if (memcmp(o1, o2, (size_t)3 * nh * hd * sizeof(float)) != 0 || s3 != g_keep_splits) {
        printf("  attention plan padding: rows 0-2 differ (splits %d vs %d)\n", s3, g_keep_splits);
        kt_record("attention", 1, 0, 0);
        bad++;
    }
    /* batch invariance: a context of at most KC_ATTN_SPLIT_MIN_LEN keys is
     * never split, so sequence 0 (200 keys) alone equals it in a batch of 3
     * that splits (same seed: the same q row 0 and K/V). Longer contexts are
     * invariant within a power-of-two batch class only (the checks above). */
    static const kt_seq h1[] = {{200, 1}}, h3[] = {{200, 1}, {300, 1}, {700, 1}};
    const kt_attn_case gc = {"plan alone 200", nh, nkv, hd, 16, h1, 1, 0, true, false, 0, 0};
    const kt_attn_case gd = {"plan 200 in a batch of 3", nh, nkv, hd, 16, h3, 3, 0, true, false, 1, 0};
    g_keep_out = o2;
    bad += attn_case(&gd, 4400);
    memcpy(o1, o2, (size_t)nh * hd * sizeof(float));
    bad += attn_case(&gc, 4400);
    if (memcmp(o1, o2, (size_t)nh * hd * sizeof(float)) != 0) {
        printf("  attention plan batch invariance: a 200-key sequence alone differs from in a batch of 3\n");
        kt_record("attention", 1, 0, 0);
        bad++;
    }
    g_keep_out = NULL;
    inferd_free(o2);
    inferd_free(o1);
    kcuda_attn_fold_force = -1;
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Token rows of case c's scenario (scene_build): its queries plus padding. */
static int case_tokens(const kt_attn_case *c)
{
    int n = c->pad_tokens;
    for (int i = 0; i < c->n_seqs; i++)
        n += c->seqs[i].q_len;
    return n;
}

/* Case c with a test hook forced to 0, then to 1 (runs_1 times): each run
 * vs the CPU twin, the hook's report checked, every run's output bitwise
 * equal to the first. Restores the hook to -1 (the environment's choice).
 * Returns violations. */
static int attn_ab(const kt_attn_case *c, uint64_t seed, int *force, const int *last, const char *what, int runs_1)
{
    const size_t n = (size_t)case_tokens(c) * c->nh * c->hd;
    float *o0 = inferd_malloc(n * sizeof(float)), *o = inferd_malloc(n * sizeof(float));
    int bad = 0;
    for (int r = 0; r <= runs_1; r++) {
        const int f = r == 0 ? 0 : 1;
        *force = f;
        g_keep_out = r == 0 ? o0 : o;
        bad += attn_case(c, seed);
        if (*last != f) {
            printf("  attention %s: %s: form %d ran, forced %d\n", c->name, what, *last, f);
            kt_record("attention", 1, 0, 0);
            bad++;
        }
        if (r > 0 && memcmp(o0, o, n * sizeof(float)) != 0) {
            printf("  attention %s: %s differ (run %d)\n", c->name, what, r);
            kt_record("attention", 1, 0, 0);
            bad++;
        }
    }
    *force = -1;
    g_keep_out = NULL;
    inferd_free(o);
    inferd_free(o0);
    return bad;
}

/* The decode kernel's two bodies (registers / cp.async ring): every case on
 * both, each vs the CPU twin, the two outputs bitwise equal, and the hook
 * says which one ran. Cases: GQA 1/2/4/8/12, head_dim 8..256 (lane groups
 * 4..32), block sizes 1/16/32, split and unsplit, ranges shorter than one
 * iteration, longer than the ring, and ending inside an iteration, padding
 * rows, a batch of 40. */
START_TEST(test_attention_decode_pipe)
{
    static const kt_seq short3[] = {{1, 1}, {17, 1}, {100, 1}};
    static const kt_seq long3[] = {{1500, 1}, {3000, 1}, {5, 1}};
    static const kt_seq gqa1[] = {{300, 1}, {7, 1}};
    static const kt_seq mid[] = {{257, 1}, {64, 1}, {129, 1}, {33, 1}};
    static const kt_seq b1_544[] = {{544, 1}};
    static const kt_seq odd[] = {{1001, 1}, {97, 1}, {2049, 1}};
    kt_seq wide[40];
    for (int i = 0; i < 40; i++)
        wide[i] = (kt_seq){20 + (i * 53) % 900, 1};
    const kt_attn_case cases[] = {
        {"pipe short gqa4 hd64", 8, 2, 64, 16, short3, NSEQ(short3), 0, true, false, 0, 0},
        {"pipe split gqa8 hd128 bs32", 16, 2, 128, 32, long3, NSEQ(long3), 0, true, false, 1, 0},
        {"pipe no-ws long uniform", 16, 2, 128, 32, long3, NSEQ(long3), 0, false, true, 0, 0},
        {"pipe gqa1 hd8 bs1", 4, 4, 8, 1, gqa1, NSEQ(gqa1), 0, true, false, 1, 0},
        {"pipe gqa12 (2 chunks)", 24, 2, 64, 16, mid, NSEQ(mid), 0, true, false, -1, 0},
        {"pipe gqa3 hd256", 6, 2, 256, 16, mid, NSEQ(mid), 0, true, false, -1, 0},
        {"pipe gqa2 hd32 odd pad", 4, 2, 32, 8, odd, NSEQ(odd), 1, true, false, -1, 0},
        {"pipe b1 544 llama3", 32, 8, 128, 16, b1_544, NSEQ(b1_544), 0, true, false, 1, 0},
        {"pipe b40 llama3 no split", 32, 8, 128, 16, wide, NSEQ(wide), 0, true, false, 0, 0},
    };
    int bad = 0;
    kcuda_attn_decode_tc_force = 0; /* the CUDA-core bodies (test_attention_decode_tc has the other) */
    for (int i = 0; i < NSEQ(cases); i++)
        bad += attn_ab(&cases[i], 5000 + (uint64_t)i, &kcuda_attn_decode_pipe_force, &kcuda_attn_last_decode_pipe,
                       "decode bodies (registers / ring)", 1);
    kcuda_attn_decode_tc_force = -1;
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The tensor-core decode body (GQA groups of 3+ heads, head_dim 64 / 128):
 * every case vs the CPU twin with the body forced on, the hook's report
 * checked (on exactly where supported; the other cases run the CUDA-core
 * bodies). Cases: GQA 3/4/8/12 (two head chunks) and 1/2 (not supported),
 * block sizes 1/12/16/32, splits and none, tiles cut by the split and the
 * sequence end at odd lengths, padding rows, a warp with no tile (short
 * splits), batch 1 at 544 and 4,100 keys, 40 sequences without a split,
 * plain launches and programmatic-dependent ones (the CTAs triggering
 * their dependents at their start, and at their end). */
START_TEST(test_attention_decode_tc)
{
    static const kt_seq short3[] = {{1, 1}, {17, 1}, {100, 1}};
    static const kt_seq long3[] = {{1500, 1}, {3000, 1}, {5, 1}};
    static const kt_seq mid[] = {{257, 1}, {64, 1}, {129, 1}, {33, 1}};
    static const kt_seq b1_544[] = {{544, 1}};
    static const kt_seq b1_4100[] = {{4100, 1}};
    static const kt_seq odd[] = {{1001, 1}, {97, 1}, {2049, 1}};
    kt_seq wide[40];
    for (int i = 0; i < 40; i++)
        wide[i] = (kt_seq){20 + (i * 53) % 900, 1};
    const kt_attn_case cases[] = {
        {"dec tc short gqa4 hd64", 8, 2, 64, 16, short3, NSEQ(short3), 0, true, false, 0, 0},
        {"dec tc split gqa8 hd128 bs32", 16, 2, 128, 32, long3, NSEQ(long3), 0, true, false, 1, 0},
        {"dec tc no-ws long gqa8", 16, 2, 128, 32, long3, NSEQ(long3), 0, false, true, 0, 0},
        {"dec tc gqa12 (2 chunks)", 24, 2, 64, 16, mid, NSEQ(mid), 0, true, false, -1, 0},
        {"dec tc gqa3 hd128 bs1", 6, 2, 128, 1, mid, NSEQ(mid), 0, true, false, -1, 0},
        {"dec tc gqa4 hd128 bs12 odd pad", 8, 2, 128, 12, odd, NSEQ(odd), 1, true, false, -1, 0},
        {"dec tc gqa2 hd64 (CUDA cores)", 4, 2, 64, 16, odd, NSEQ(odd), 0, true, false, -1, 0},
        {"dec tc gqa4 hd256 (CUDA cores)", 8, 2, 256, 16, mid, NSEQ(mid), 0, true, false, -1, 0},
        {"dec tc b1 544 llama3", 32, 8, 128, 16, b1_544, NSEQ(b1_544), 0, true, false, 1, 0},
        {"dec tc b1 4100 llama3", 32, 8, 128, 16, b1_4100, NSEQ(b1_4100), 0, true, false, 1, 0},
        {"dec tc b40 llama3 no split", 32, 8, 128, 16, wide, NSEQ(wide), 0, true, false, 0, 0},
    };
    int bad = 0;
    for (int pdl = 0; pdl < 3; pdl++) {
        kcuda_attn_pdl_force = pdl;
        kcuda_attn_decode_tc_force = 1;
        for (int i = 0; i < NSEQ(cases); i++) {
            const kt_attn_case *c = &cases[i];
            bad += attn_case(c, 5300 + (uint64_t)i);
#ifdef INFERD_HAVE_CUDA
            const int want = c->nh / c->nkv >= 3 && (c->hd == 64 || c->hd == 128);
            if (kcuda_attn_last_decode_tc != want) {
                printf("  attention %s: tensor-core body %d ran, expected %d\n", c->name, kcuda_attn_last_decode_tc,
                       want);
                kt_record("attention", 1, 0, 0);
                bad++;
            }
#endif
        }
    }
    kcuda_attn_decode_tc_force = -1;
    kcuda_attn_pdl_force = -1;
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Split partials merged by the merge kernel and by the decode kernel's last
 * split CTA (kcuda_attn_merge_fused_force): every case both ways, each vs
 * the CPU twin, the two outputs bitwise equal, and the fused form twice in
 * a row (its counters must be back at 0 after a launch). Cases: GQA
 * 1/3/4/8/12 (two head chunks), head_dim 8..256, block sizes 1/16/32,
 * a short sequence that does not split beside long ones, odd lengths,
 * padding rows, batch 1 at 544 and at 8,000 keys (capped splits), both
 * decode bodies, and the decode + merge kernels launched as programmatic
 * dependents (kcuda_attn_pdl_force; its wait placement shows on a GPU),
 * and the tensor-core body (kcuda_attn_decode_tc_force) both ways. */
START_TEST(test_attention_decode_merge)
{
    static const kt_seq long3[] = {{1500, 1}, {3000, 1}, {5, 1}};
    static const kt_seq gqa1[] = {{300, 1}, {7, 1}};
    static const kt_seq mid[] = {{257, 1}, {64, 1}, {129, 1}, {33, 1}};
    static const kt_seq b1_544[] = {{544, 1}};
    static const kt_seq b1_8k[] = {{8000, 1}};
    static const kt_seq odd[] = {{1001, 1}, {97, 1}, {2049, 1}};
    const kt_attn_case cases[] = {
        {"merge split gqa8 hd128 bs32", 16, 2, 128, 32, long3, NSEQ(long3), 0, true, false, 1, 0},
        {"merge gqa1 hd8 bs1", 4, 4, 8, 1, gqa1, NSEQ(gqa1), 0, true, false, 1, 0},
        {"merge gqa12 (2 chunks)", 24, 2, 64, 16, mid, NSEQ(mid), 0, true, false, 1, 0},
        {"merge gqa3 hd256", 6, 2, 256, 16, mid, NSEQ(mid), 0, true, false, 1, 0},
        {"merge gqa2 hd32 odd pad", 4, 2, 32, 8, odd, NSEQ(odd), 1, true, false, 1, 0},
        {"merge b1 544 llama3", 32, 8, 128, 16, b1_544, NSEQ(b1_544), 0, true, false, 1, 0},
        {"merge b1 544 uniform", 32, 8, 128, 16, b1_544, NSEQ(b1_544), 0, true, true, 1, 0},
        {"merge b1 8000 mqa (capped)", 4, 1, 64, 16, b1_8k, NSEQ(b1_8k), 0, true, false, 1, 0},
    };
    /* (CUDA-core body, PDL launches, tensor-core body where supported): the
     * ring and the registers, plain; the ring as programmatic dependents;
     * the tensor-core body plain and as programmatic dependents (triggering
     * at their start, and at their end) */
    static const int k_runs[][3] = {{1, 0, 0}, {0, 0, 0}, {1, 1, 0}, {1, 0, 1}, {1, 1, 1}, {1, 2, 1}};
    int bad = 0;
    for (int r = 0; r < NSEQ(k_runs); r++) {
        kcuda_attn_decode_pipe_force = k_runs[r][0];
        kcuda_attn_pdl_force = k_runs[r][1];
        kcuda_attn_decode_tc_force = k_runs[r][2];
        for (int i = 0; i < NSEQ(cases); i++)
            bad += attn_ab(&cases[i], 5100 + (uint64_t)i, &kcuda_attn_merge_fused_force, &kcuda_attn_last_merge_fused,
                           "split merges (kernel / fused)", 2);
    }
    kcuda_attn_decode_pipe_force = -1;
    kcuda_attn_pdl_force = -1;
    kcuda_attn_decode_tc_force = -1;
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Whether the last decode launch folded into want warps (0: not at all)
 * and, folded, left no split; cap: the warp cap it ran under (0: none),
 * for the message. 1 and a recorded failure if not; 0 without CUDA. */
static int fold_check(const kt_attn_case *c, int cap, int want, int s0)
{
#ifdef INFERD_HAVE_CUDA
    const int f = kcuda_attn_last_fold;
    if (f == want && (f == 0 || kcuda_attn_last_splits == 1))
        return 0;
    printf("  attention %s (%s, cap %d): folded into %d warps with %d splits (plan: %d splits)\n", c->name,
           g_fp8 ? "fp8" : "bf16", cap, f, kcuda_attn_last_splits, s0);
    kt_record("attention", 1, 0, 0);
    return 1;
#else
    (void)c, (void)cap, (void)want, (void)s0;
    return 0;
#endif
}

/* The warps attention.cu's attn_fold_warps gives a plan of s0 splits
 * under a warp cap (0: none): 4 a split, at most cap, and no fold past
 * the warps an SM holds under the body's register bound
 * (attention_decode.cu, dtc_warps_max: 16 on fp8, 12 on bf16); 0 for a
 * plan of 1 or more than 4 splits. */
static int fold_want(int s0, int cap, bool fp8)
{
    if (s0 < 2 || s0 > 4)
        return 0;
    const int w = cap > 0 && 4 * s0 > cap ? cap : 4 * s0;
    return w <= (fp8 ? 16 : 12) ? w : 0;
}

/* A split plan of 2..4 splits folded into one CTA a sequence (the
 * tensor-core bodies with 8, 12 or 16 warps, kcuda_attn_fold_force), on a
 * bf16 and on an fp8 cache: every case vs the CPU twin, the plan without
 * the fold first, then with it; the fold must run where the plan had 2..4
 * splits, with 4 warps a split and no split left, and not where it had
 * more. Cases: Llama-3 shapes at 16 and 11 sequences (on 132 SMs 4
 * splits on fp8: 12 warps under the default cap, 16 at cap 16; 3 on
 * bf16: 12; lengths from 5 to 1,030, tiles
 * cut by the end), 32 sequences (fp8: 2 splits, 8 warps; bf16: no split),
 * GQA 8 at head_dim 64 (a merge area larger than the tiles), block size
 * 12, and batch 1 at 4,100 keys (more splits: no fold). */
START_TEST(test_attention_decode_fold)
{
    kt_seq b16[16], b11[11], b32[32], g8[40];
    for (int i = 0; i < 16; i++)
        b16[i] = (kt_seq){1030 - 61 * i, 1};
    for (int i = 0; i < 11; i++)
        b11[i] = (kt_seq){i == 3 ? 5 : 200 + 83 * i, 1};
    for (int i = 0; i < 32; i++)
        b32[i] = (kt_seq){100 + 29 * i, 1};
    for (int i = 0; i < 40; i++)
        g8[i] = (kt_seq){40 + 13 * i, 1};
    static const kt_seq b1_4100[] = {{4100, 1}};
    const kt_attn_case cases[] = {
        {"fold b16 llama3", 32, 8, 128, 16, b16, NSEQ(b16), 0, true, false, -1, 0},
        {"fold b11 llama3 pad", 32, 8, 128, 16, b11, NSEQ(b11), 1, true, false, -1, 0},
        {"fold b32 llama3", 32, 8, 128, 16, b32, NSEQ(b32), 0, true, false, -1, 0},
        {"fold gqa8 hd64 b40", 32, 4, 64, 16, g8, NSEQ(g8), 0, true, false, -1, 0},
        {"fold b16 bs12", 32, 8, 128, 12, b16, NSEQ(b16), 0, true, false, -1, 0},
        {"fold b1 4100 (no fold)", 32, 8, 128, 16, b1_4100, NSEQ(b1_4100), 0, true, false, -1, 0},
    };
    int bad = 0, folded[2] = {0, 0}; /* [fp8] */
    kcuda_attn_decode_tc_force = 1;
    for (int run = 0; run < 2 * NSEQ(cases); run++) {
        const int i = run % NSEQ(cases);
        const kt_attn_case *c = &cases[i];
        g_fp8 = run >= NSEQ(cases);
        kcuda_attn_fold_force = 0;
        bad += attn_case(c, 9300 + (uint64_t)i);
        const int s0 = kcuda_attn_last_splits;
        kcuda_attn_fold_force = 1;
        bad += attn_case(c, 9300 + (uint64_t)i);
        /* the plan's 2..4 splits (these contexts reach its target) fold into 4 warps each; more do
         * not; under the default cap (attention.cu, attn_fold_cap: 12 on fp8, none on bf16) */
        const int f = kcuda_attn_last_fold;
        folded[g_fp8] += f > 0;
        bad += fold_check(c, 0, s0 <= 1 ? f : fold_want(s0, g_fp8 ? 12 : 0, g_fp8), s0);
    }
#ifdef INFERD_HAVE_CUDA
    /* the cases above reach the fold on either cache (on 96..160 SMs) */
    ck_assert_int_ge(folded[0], 3);
    ck_assert_int_ge(folded[1], 3);
#endif
    /* a cap on the warps (kcuda_attn_fold_max_warps): a plan of more splits
     * than the cap holds runs as one CTA of the cap's warps over the whole
     * context; the first two cases at cap 8 on both caches, at 12 on fp8,
     * and at 16 on fp8 (no cap: the 16-warp form of a 4-split plan) */
    static const int caps[][2] = {{8, 0}, {8, 1}, {12, 1}, {16, 1}}; /* {cap, fp8} */
    int capped = 0;
    for (int k = 0; k < 2 * NSEQ(caps); k++) {
        const kt_attn_case *c = &cases[k % 2];
        const int cap = caps[k / 2][0];
        g_fp8 = caps[k / 2][1];
        kcuda_attn_fold_force = 0;
        bad += attn_case(c, 9400 + (uint64_t)k);
        const int s0 = kcuda_attn_last_splits;
        kcuda_attn_fold_force = 1;
        kcuda_attn_fold_max_warps = cap;
        bad += attn_case(c, 9400 + (uint64_t)k);
        kcuda_attn_fold_max_warps = 0;
        capped += kcuda_attn_last_fold > 0 && kcuda_attn_last_fold < 4 * s0;
        bad += fold_check(c, cap, fold_want(s0, cap, g_fp8), s0);
    }
#ifdef INFERD_HAVE_CUDA
    ck_assert_int_ge(capped, 2); /* b16 on fp8 (4 splits on 132 SMs) at caps 8 and 12, and more */
#endif
    (void)capped;
    (void)folded;
    kcuda_attn_fold_force = -1;
    kcuda_attn_decode_tc_force = -1;
    g_fp8 = false;
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* K/V tiles gathered before the PDL wait (kcuda_attn_early_kv_force: the
 * tiles of keys before the step's own): the tensor-core bodies on fp8 and
 * bf16 caches, every case both ways, each vs the CPU twin, bitwise alike,
 * the hook's report checked. Cases: batch 1 at 544 and 4,100 keys (split:
 * every split but the last gathers all its first tiles early), 16
 * sequences of ~1k (folded on either cache), contexts of 1, 17 and 100 keys (no
 * early tile, or one), GQA 12 (two head chunks) and block size 12 with
 * odd lengths and a padding row. */
START_TEST(test_attention_decode_early_kv)
{
    static const kt_seq short3[] = {{1, 1}, {17, 1}, {100, 1}};
    static const kt_seq mid[] = {{257, 1}, {64, 1}, {129, 1}, {33, 1}};
    static const kt_seq b1_544[] = {{544, 1}};
    static const kt_seq b1_4100[] = {{4100, 1}};
    static const kt_seq odd[] = {{1001, 1}, {97, 1}, {2049, 1}};
    kt_seq b16[16];
    for (int i = 0; i < 16; i++)
        b16[i] = (kt_seq){1030 - 61 * i, 1};
    const kt_attn_case cases[] = {
        {"early b1 544 llama3", 32, 8, 128, 16, b1_544, NSEQ(b1_544), 0, true, false, 1, 0},
        {"early b1 4100 llama3", 32, 8, 128, 16, b1_4100, NSEQ(b1_4100), 0, true, false, 1, 0},
        {"early b16 llama3", 32, 8, 128, 16, b16, NSEQ(b16), 0, true, false, -1, 0},
        {"early short gqa4 hd64", 8, 2, 64, 16, short3, NSEQ(short3), 0, true, false, 0, 0},
        {"early gqa12 (2 chunks)", 24, 2, 64, 16, mid, NSEQ(mid), 0, true, false, -1, 0},
        {"early gqa4 bs12 odd pad", 8, 2, 128, 12, odd, NSEQ(odd), 1, true, false, -1, 0},
    };
    int bad = 0;
    kcuda_attn_decode_tc_force = 1;
    for (int f8 = 1; f8 >= 0; f8--) {
        g_fp8 = f8 == 1;
        for (int i = 0; i < NSEQ(cases); i++)
            bad += attn_ab(&cases[i], 9700 + (uint64_t)i, &kcuda_attn_early_kv_force,
                           &kcuda_attn_last_early_kv, "K/V before the PDL wait", 1);
    }
    g_fp8 = false;
    kcuda_attn_decode_tc_force = -1;
    ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_attention_prefill)
{
    static const kt_seq one[] = {{77, 77}};
    static const kt_seq chunked[] = {{200, 45}, {64, 64}};
    static const kt_seq mixed[] = {{200, 45}, {50, 1}, {64, 64}, {1200, 1}, {33, 2}};
    static const kt_seq tiny[] = {{37, 37}, {90, 20}};
    static const kt_seq wide[] = {{40, 40}, {600, 1}, {70, 35}};
    static const kt_seq big[] = {{1000, 300}};
    const kt_attn_case cases[] = {
        {"prefill 77 gqa4", 8, 2, 64, 16, one, NSEQ(one), 0, true, false, -1, 0},
        {"chunked gqa8 hd128", 8, 1, 128, 32, chunked, NSEQ(chunked), 0, true, false, -1, 0},
        {"chunked uniform", 8, 1, 128, 32, chunked, NSEQ(chunked), 0, true, true, -1, 0},
        {"mixed decode+prefill", 8, 2, 64, 16, mixed, NSEQ(mixed), 2, true, false, -1, 0},
        {"mixed uniform bs1", 4, 1, 64, 1, mixed, NSEQ(mixed), 0, true, true, -1, 0},
        {"prefill hd8 (stories)", 8, 4, 8, 16, tiny, NSEQ(tiny), 0, true, false, -1, 0},
        {"prefill hd256 opt-in smem", 2, 1, 256, 16, wide, NSEQ(wide), 0, true, false, -1, 0},
        {"prefill gqa1 hd64 bs32", 4, 4, 64, 32, tiny, NSEQ(tiny), 1, true, false, -1, 0},
    };
    int bad = 0;
    for (int i = 0; i < NSEQ(cases); i++)
        bad += attn_case(&cases[i], 2000 + (uint64_t)i);
    if (!kt_quick) {
        const kt_attn_case large = {"chunk 300 after 700", 32, 8, 128, 16, big, NSEQ(big), 0, true, false, -1, 0};
        bad += attn_case(&large, 2100);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Random scenarios from a fresh seed (INFERD_TEST_SEED to replay one):
 * head_dim 8..256 (incl. 72/80/96: partial lane groups), GQA 1..12, block
 * sizes 1/8/16/32, 1-5 sequences mixing decode and (chunked) prefill, a
 * third of them on an fp8 e4m3 cache. */
START_TEST(test_attention_random)
{
    const uint64_t seed = kt_seed();
    printf("  attention random: INFERD_TEST_SEED=%llu\n", (unsigned long long)seed);
    static const int hds[] = {8, 16, 64, 72, 80, 96, 128, 256}, groups[] = {1, 2, 3, 4, 5, 7, 8, 12},
                     bss[] = {1, 8, 16, 32};
    int bad = 0;
    const int n_cases = kt_quick ? 4 : 12;
    for (int c = 0; c < n_cases; c++) {
        uint64_t r = seed * 7919 + (uint64_t)c * 104729, k = 0;
#define RND(n) ((int)(rng_uniform(r, k++) * (n)))
        kt_seq seqs[5];
        const int ns = 1 + RND(5);
        for (int i = 0; i < ns; i++) {
            seqs[i].q_len = RND(2) ? 1 : 2 + RND(70);
            seqs[i].L = seqs[i].q_len + (RND(6) ? RND(600) : 1500 + RND(500));
        }
        const int nkv = 1 + RND(4);
        const int nh = nkv * groups[RND(8)];
        const int hd = hds[RND(8)];
        const int bs = bss[RND(4)];
        const int pad = RND(3);
        const bool use_ws = RND(5) != 0;
        const bool uniform = RND(4) == 0;
        g_fp8 = RND(3) == 0;
#undef RND
        kt_attn_case ac = {g_fp8 ? "random fp8" : "random", nh, nkv, hd, bs, seqs, ns, pad, use_ws, uniform, -1, 0};
        bad += attn_case(&ac, seed + (uint64_t)c);
        g_fp8 = false;
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* The fp8 e4m3 cache (kv_fp8): decode on each body (the two CUDA-core
 * ones, and the tensor-core one where it applies: GQA 3+, head_dim 64 /
 * 128), splits, prefill and chunked prefill through the bf16 copy (kv_dequant,
 * guarded), mixed batches, prefix blocks two sequences share, GQA 1..8,
 * head_dim 8..256, block sizes 1/12/16/32, padding rows; each against the
 * CPU twin reading the same codes. */
START_TEST(test_attention_fp8)
{
    static const kt_seq short3[] = {{1, 1}, {17, 1}, {100, 1}};
    static const kt_seq long3[] = {{1500, 1}, {3000, 1}, {5, 1}};
    static const kt_seq gqa1[] = {{300, 1}, {7, 1}};
    static const kt_seq b1_544[] = {{544, 1}};
    static const kt_seq mixed[] = {{200, 45}, {50, 1}, {64, 64}, {1200, 1}, {33, 2}};
    static const kt_seq chunked[] = {{200, 45}, {64, 64}};
    static const kt_seq shared[] = {{160, 160}, {200, 40}, {170, 1}};
    static const kt_seq wide[] = {{40, 40}, {600, 1}, {70, 35}};
    const kt_attn_case cases[] = {
        {"fp8 decode short gqa4", 8, 2, 64, 16, short3, NSEQ(short3), 0, true, false, 0, 0},
        {"fp8 decode split gqa8", 16, 2, 128, 32, long3, NSEQ(long3), 0, true, false, 1, 0},
        {"fp8 decode split uniform", 16, 2, 128, 32, long3, NSEQ(long3), 0, true, true, 1, 0},
        {"fp8 decode gqa1 hd8 bs1", 4, 4, 8, 1, gqa1, NSEQ(gqa1), 0, true, false, 1, 0},
        {"fp8 decode b1 544 llama3", 32, 8, 128, 16, b1_544, NSEQ(b1_544), 0, true, false, 1, 0},
        {"fp8 decode split bs12", 16, 2, 128, 12, long3, NSEQ(long3), 2, true, false, 1, 0},
        {"fp8 mixed decode+prefill", 8, 2, 64, 16, mixed, NSEQ(mixed), 2, true, false, -1, 0},
        {"fp8 chunked gqa8 hd128", 8, 1, 128, 32, chunked, NSEQ(chunked), 0, true, false, -1, 0},
        {"fp8 shared prefix blocks", 32, 8, 128, 16, shared, NSEQ(shared), 1, true, false, -1, 8},
        {"fp8 prefill hd256", 2, 1, 256, 16, wide, NSEQ(wide), 0, true, false, -1, 0},
    };
    /* q far past f16's range and far below its normals, the score scale
     * the inverse (the tensor-core body's per-row q scaling) */
    static const float qmul[] = {1048576.0f, 1.0f / 1048576.0f};
    int bad = 0;
    g_fp8 = true;
    for (int body = 0; body < 3; body++) { /* registers, the cp.async ring, tensor cores */
        kcuda_attn_decode_tc_force = body == 2;
        kcuda_attn_decode_pipe_force = body == 1;
        for (int i = 0; i < NSEQ(cases); i++)
            bad += attn_case(&cases[i], 9000 + (uint64_t)i);
        for (int i = 0; i < 2; i++) {
            g_qmul = qmul[i];
            g_scale = 1.0f / (qmul[i] * sqrtf(128.0f));
            bad += attn_case(&cases[4], 9100 + (uint64_t)i); /* b1 x 544, GQA 4, head_dim 128 */
            bad += attn_case(&cases[0], 9110 + (uint64_t)i); /* GQA 4, head_dim 64 */
        }
        g_qmul = 0.0f;
        g_scale = 0.0f;
    }
    kcuda_attn_decode_tc_force = -1;
    kcuda_attn_decode_pipe_force = -1;
    g_fp8 = false;
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Runs case c with the prefill kernel forced to tensor cores (force 1) or
 * CUDA cores (force 0), then checks that the dispatcher ran the expected
 * one: tensor cores only for head_dim 64/128, nothing without a prefill
 * sequence. Returns violations. */
static int attn_case_forced(const kt_attn_case *c, uint64_t seed, int force)
{
    kcuda_attn_prefill_force = force;
    int bad = attn_case(c, seed);
    kcuda_attn_prefill_force = -1;
    bool prefill = false;
    for (int i = 0; i < c->n_seqs; i++)
        prefill |= c->seqs[i].q_len > 1;
    /* the tensor-core kernel takes head_dim 64 / 128 and a positive scale */
    const int expect = !prefill ? 0 : force == 1 && (c->hd == 64 || c->hd == 128) && g_scale >= 0.0f ? 2 : 1;
    if (kcuda_attn_last_prefill != expect) {
        printf("  attention %s: prefill kernel %d ran, expected %d (force %d)\n", c->name,
               kcuda_attn_last_prefill, expect, force);
        kt_record("attention", 1, 0, 0);
        bad++;
    }
    return bad;
}

/* Case c on the tensor-core kernel in each form this device runs (each vs
 * the CPU twin, the hook saying which ran; forms 1 and 2 bitwise equal),
 * then on the CUDA-core kernel. Returns violations. */
static int attn_case_all_prefill(const kt_attn_case *c, uint64_t seed)
{
    const size_t n = (size_t)case_tokens(c) * c->nh * c->hd;
    const int n_forms = kcuda_attn_prefill_wg_device() ? 4 : 2;
    float *o[4] = {NULL, NULL, NULL, NULL};
    int bad = 0;
    bool prefill = false;
    for (int i = 0; i < c->n_seqs; i++)
        prefill |= c->seqs[i].q_len > 1;
    const bool tc = prefill && (c->hd == 64 || c->hd == 128);
    for (int f = 1; f <= n_forms; f++) {
        o[f - 1] = inferd_malloc(n * sizeof(float));
        g_keep_out = o[f - 1];
        kcuda_attn_prefill_tc_form_force = f;
        bad += attn_case_forced(c, seed, 1);
        if (tc && kcuda_attn_last_prefill_form != f) {
            printf("  attention %s: tensor-core kernel ran form %d, forced %d\n", c->name,
                   kcuda_attn_last_prefill_form, f);
            kt_record("attention", 1, 0, 0);
            bad++;
        }
    }
    kcuda_attn_prefill_tc_form_force = 0;
    g_keep_out = NULL;
    if (memcmp(o[0], o[1], n * sizeof(float)) != 0) {
        printf("  attention %s: 1 and 2 m-tiles a warp differ\n", c->name);
        kt_record("attention", 1, 0, 0);
        bad++;
    }
    for (int f = 3; f <= n_forms && tc; f++)
        if (memcmp(o[1], o[f - 1], n * sizeof(float)) != 0)
            printf("  attention %s: wgmma form %d and mma.sync not bitwise equal (each checked against the CPU twin)\n",
                   c->name, f);
    for (int f = 0; f < 4; f++)
        inferd_free(o[f]);
    return bad + attn_case_forced(c, seed, 0);
}

/* Tensor-core prefill and its fallback, each case on both kernels. */
START_TEST(test_attention_prefill_tc)
{
    static const kt_seq p200[] = {{200, 200}};                          /* 3 full + 1 partial tile */
    static const kt_seq odd3[] = {{77, 77}, {129, 129}, {2, 2}};        /* odd, 64 + 1, shortest prefill */
    static const kt_seq chunk3[] = {{300, 45}, {130, 67}, {65, 64}};    /* chunks after 255, 63, 1 cached */
    static const kt_seq mixed6[] = {{200, 45}, {50, 1}, {64, 64}, {1200, 1}, {33, 2}, {190, 3}};
    static const kt_seq uni2[] = {{500, 131}, {70, 70}};
    static const kt_seq prefix3[] = {{160, 160}, {180, 20}, {170, 65}}; /* prefix hits on seq 0's blocks */
    static const kt_seq bs1[] = {{100, 33}};
    static const kt_seq fb[] = {{150, 90}, {40, 1}};
    static const kt_seq big[] = {{1000, 300}};
    static const kt_seq full[] = {{700, 700}, {129, 128}};
    static const kt_seq ctx128k[] = {{131072, 64}};
    const kt_attn_case cases[] = {
        {"tc prefill 200 gqa4 hd128", 8, 2, 128, 16, p200, NSEQ(p200), 0, true, false, -1, 0},
        {"tc odd lens gqa1 hd64 pad", 4, 4, 64, 16, odd3, NSEQ(odd3), 1, true, false, -1, 0},
        {"tc chunked gqa8 hd128 bs32", 8, 1, 128, 32, chunk3, NSEQ(chunk3), 0, true, false, -1, 0},
        {"tc mixed+decode gqa4 hd64", 16, 4, 64, 16, mixed6, NSEQ(mixed6), 2, true, false, -1, 0},
        {"tc uniform chunked hd128", 4, 1, 128, 16, uni2, NSEQ(uni2), 0, true, true, -1, 0},
        {"tc uniform gqa8 hd64 bs8", 8, 1, 64, 8, chunk3, NSEQ(chunk3), 0, true, true, -1, 0},
        {"tc prefix-shared gqa4 hd128", 8, 2, 128, 16, prefix3, NSEQ(prefix3), 0, true, false, -1, 8},
        {"tc prefix-shared uni hd64", 4, 1, 64, 32, prefix3, NSEQ(prefix3), 0, true, true, -1, 4},
        {"tc bs1 gqa8 hd64", 8, 1, 64, 1, bs1, NSEQ(bs1), 0, true, false, -1, 0},
        {"tc fallback hd96 gqa4", 8, 2, 96, 16, fb, NSEQ(fb), 0, true, false, -1, 0},
        {"tc fallback hd256", 2, 1, 256, 16, chunk3, NSEQ(chunk3), 0, true, false, -1, 0},
    };
    int bad = 0;
    for (int i = 0; i < NSEQ(cases); i++)
        bad += attn_case_all_prefill(&cases[i], 3000 + (uint64_t)i);
    /* a negative scale: the tensor-core softmax keeps the max of the raw
     * scores, so the dispatcher leaves it to the CUDA-core kernel */
    const kt_attn_case neg = {"tc fallback scale < 0", 8, 2, 128, 16, chunk3, NSEQ(chunk3), 0, true, false, -1, 0};
    g_scale = -0.05f;
    bad += attn_case_forced(&neg, 3050, 1);
    g_scale = 0.0f;
    if (!kt_quick) {
        const kt_attn_case large[] = {
            {"tc chunk 300 after 700", 32, 8, 128, 16, big, NSEQ(big), 0, true, false, -1, 0},
            {"tc full 700 gqa4 hd64", 16, 4, 64, 16, full, NSEQ(full), 0, true, false, -1, 0},
            {"tc full 700 uniform hd128", 8, 8, 128, 32, full, NSEQ(full), 0, true, true, -1, 0},
            /* a chunk at the end of a 128k context (Llama-3.1's limit) */
            {"tc chunk 64 after 131008", 4, 1, 128, 16, ctx128k, NSEQ(ctx128k), 0, true, false, -1, 0},
        };
        for (int i = 0; i < NSEQ(large); i++)
            bad += attn_case_all_prefill(&large[i], 3100 + (uint64_t)i);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

/* Random prefill scenarios for the tensor-core kernel from a fresh seed
 * (INFERD_TEST_SEED to replay), each on both kernels: head_dim 64/128 (80:
 * fallback), GQA 1/4/8, block sizes 1/8/16/32, 1-4 sequences with 0..700
 * cached tokens, some decode rows, some shared prefix blocks. */
START_TEST(test_attention_prefill_tc_random)
{
    const uint64_t seed = kt_seed();
    printf("  attention tc random: INFERD_TEST_SEED=%llu\n", (unsigned long long)seed);
    static const int hds[] = {64, 128, 64, 128, 80}, groups[] = {1, 4, 8}, bss[] = {1, 8, 16, 32};
    int bad = 0;
    const int n_cases = kt_quick ? 3 : 10;
    const int max_q = kt_quick ? 100 : 260, max_ctx = kt_quick ? 200 : 700;
    for (int c = 0; c < n_cases; c++) {
        uint64_t r = seed * 6151 + (uint64_t)c * 92821, k = 0;
#define RND(n) ((int)(rng_uniform(r, k++) * (n)))
        kt_seq seqs[4];
        const int ns = 1 + RND(4);
        for (int i = 0; i < ns; i++) {
            seqs[i].q_len = i > 0 && RND(4) == 0 ? 1 : 2 + RND(max_q - 1);
            seqs[i].L = seqs[i].q_len + (RND(3) == 0 ? 0 : RND(max_ctx + 1));
        }
        const int nkv = 1 + RND(2);
        const int nh = nkv * groups[RND(3)];
        const int hd = hds[RND(5)];
        const int bs = bss[RND(4)];
        const int pad = RND(3);
        const bool uniform = RND(4) == 0;
        const int share = RND(2) ? RND(8) : 0;
#undef RND
        kt_attn_case ac = {"tc random", nh, nkv, hd, bs, seqs, ns, pad, true, uniform, -1, share};
        bad += attn_case_all_prefill(&ac, seed + (uint64_t)c);
    }
    ck_assert_int_eq(bad, 0);
}
END_TEST

START_TEST(test_attention_workspace)
{
    /* The bound covers every plan (attention.cu; exercised under memcheck
     * by the cases above, which allocate exactly this): it grows with the
     * context only up to the split cap, and with the batch only up to the
     * largest batch that splits (below 2 CTAs per SM). */
    const size_t row = (size_t)32 * (128 + 1) * 4; /* one (sequence, split) of 32 heads */
    size_t b = kern_attn_workspace_bytes(kt_gpu, 64, 8, 32, 128, 2048);
    ck_assert_uint_ge(b, row * 8); /* batch 1 at 2048 tokens: at least 8 splits */
    ck_assert_uint_eq(kern_attn_workspace_bytes(kt_gpu, 64, 8, 32, 128, 256), 0); /* nothing splits */
    size_t b8k = kern_attn_workspace_bytes(kt_gpu, 64, 8, 32, 128, 8192);
    size_t b1m = kern_attn_workspace_bytes(kt_gpu, 64, 8, 32, 128, 1 << 20);
    ck_assert_uint_ge(b8k, b);
    ck_assert_uint_ge(b1m, b8k);
    ck_assert_uint_le(b1m, row * 8 * 64);
    size_t bmany = kern_attn_workspace_bytes(kt_gpu, 8192, 256, 32, 128, 131072);
    ck_assert_uint_le(bmany, (size_t)80 << 20); /* 64 sequences x 64 splits on 132 SMs */
    printf("  attention workspace: %zu / %zu / %zu / %zu bytes\n", b, b8k, b1m, bmany);
    kt_record("attn_workspace", 0, 0, 0);
}
END_TEST

TCase *kt_tcase_attention(void)
{
    TCase *tc = tcase_create("attention");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_rope_kv_write);
    tcase_add_test(tc, test_attention_decode);
    tcase_add_test(tc, test_attention_decode_plan);
    tcase_add_test(tc, test_attention_decode_pipe);
    tcase_add_test(tc, test_attention_decode_tc);
    tcase_add_test(tc, test_attention_decode_merge);
    tcase_add_test(tc, test_attention_decode_fold);
    tcase_add_test(tc, test_attention_decode_early_kv);
    tcase_add_test(tc, test_attention_prefill);
    tcase_add_test(tc, test_attention_random);
    tcase_add_test(tc, test_attention_fp8);
    tcase_add_test(tc, test_attention_prefill_tc);
    tcase_add_test(tc, test_attention_prefill_tc_random);
    tcase_add_test(tc, test_attention_workspace);
    return tc;
}
