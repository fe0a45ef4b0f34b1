/* kernels/cuda/attention.cu: kcuda_attention, the host side of paged
 * attention: validates the shapes, splits the batch between the decode
 * kernel (sequences with one new token) and the prefill kernel (several new
 * tokens), plans split-KV for the decode part from the host mirrors
 * (no device read, no sync), and zeroes output rows that belong to no
 * sequence (as the CPU twin does).
 *
 * Split plan (plan_make): a decode CTA covers one (sequence, kv head, head
 * chunk, split). Whether a launch splits depends on the batch: when its
 * unsplit CTAs cannot fill the GPU (n_plan * CTAs per sequence below
 * KC_ATTN_SPLIT_BELOW per SM, n_plan = n_seqs rounded up to a power of two)
 * every decode sequence longer than KC_ATTN_SPLIT_MIN_LEN keys is split,
 * else none. A sequence of length L gets chunks of dec_chunk(L) =
 * ceil(L / split_target) keys (rounded up to KC_ATTN_CHUNK_ALIGN, at least
 * min_chunk, attention_decode.cu), split_target = the splits per sequence
 * that fill one wave of KC_ATTN_DEC_CTAS_PER_SM CTAs per SM
 * (KC_ATTN_DEC_TC_CTAS_PER_SM for the tensor-core body, ..._TC8_... for its
 * fp8 form) at n_plan
 * sequences (at most KC_ATTN_MAX_SPLITS; INFERD_ATTN_SPLIT_WAVES=W sizes
 * it for W waves instead, for measurements), min_chunk = KC_ATTN_MIN_CHUNK
 * keys (INFERD_ATTN_MIN_CHUNK, read once per process, overrides it for
 * measurements). So, for Llama-3-8B (8 CTAs per sequence) on 132 SMs:
 *  - batch 1 at 544 tokens: 17 splits of 32 keys; at 32k: 64 of 512;
 *  - batch 16 at 544 tokens: 4 splits of 160 keys (32-key chunks at every
 *    batch ran batch 16 at 8.09 ms/step instead of 7.60: the splits must
 *    shrink as the batch fills the GPU);
 *  - NOTE: a context of at most KC_ATTN_SPLIT_MIN_LEN (256) keys is never
 *    split, in any batch, so its output is the same alone or in any batch
 *    (the engine's invariance tests, e.g. abort-half, failed on an H100
 *    when 32-key splits applied to every length: a greedy token flipped
 *    when the batch shrank). That length is separate from the shortest
 *    split: with 256-key minimum splits batch 1 at 544 tokens ran
 *    6.59 ms/step, with 32-key splits 6.09. Longer sequences round
 *    differently in batches of different power-of-two classes; a plan whose
 *    split count depends on the length alone would remove that, at a cost
 *    in large batches;
 *  - within a power-of-two class a sequence's output is bitwise the same
 *    whichever other sequences share its batch, and whatever the context
 *    bucket a CUDA graph was captured for (model/graphs.c): the captured
 *    plan fixes only the grid (max_splits, from the bucket's length), and
 *    splits past a sequence's own count exit at once. Graph batches pad to
 *    the next ladder size, and every power of two is on the ladder, so a
 *    padded batch rounds to the same n_plan as the unpadded one: eager
 *    steps and replays split alike.
 * Before this plan (min chunk 256, target 2 CTAs per SM, plan from the
 * batch's longest length), batch 1 x 544 tokens of Llama-3-8B ran 8 kv
 * heads x 3 splits = 24 CTAs on 132 SMs, each a serial chain of 16
 * dependent load round trips: 61 us per layer for 2.2 MB.
 *
 * Workspace: the plan needs it only when it splits;
 * kcuda_attn_workspace_bytes is the largest n_seqs * n_heads * max_splits *
 * (head_dim + 1) floats over every plan those limits allow (a few MiB: only
 * batches below 2 CTAs per SM split), whatever the kv heads.
 *
 * Decode kernel body: the cp.async ring unless INFERD_ATTN_DEC_PIPE=0
 * (attention_decode.cu; bitwise the same output either way). Split
 * partials: merged by a second launch, or with INFERD_ATTN_MERGE=fused by
 * the last split CTA of each group through the context's counters (no
 * launch; bitwise the same output). The decode and merge kernels launch
 * as programmatic dependents (attn_use_pdl: where and how they trigger
 * theirs; INFERD_ATTN_PDL=0|1 for the other forms).
 *
 * Prefill kernel: the tensor-core kernel (attention_prefill_tc.cu; its
 * form by INFERD_PREFILL_TC=mma1|mma2|wg|wgk128, default wg: wgmma on
 * compute capability 9.0, else mma2) where it
 * supports the head_dim (64, 128), else the CUDA-core one
 * (attention_prefill.cu); INFERD_PREFILL_ATTN=simt forces the CUDA-core
 * kernel. The variable is read once per process, at the first call.
 *
 * fp8 e4m3 cache (kern_attn_params.kv_fp8): the decode kernel reads it
 * (every body); the prefill kernels read a bf16 copy of the
 * prefill sequences' blocks made first (kv_dequant_kernel, into
 * kv_dequant: one layer's worth, reused by every layer), so their tiles
 * and tensor-core paths stay as they are; the copy costs a prefill step a
 * read of its context's fp8 bytes and a write of twice as many.
 */
#include "kernels/cuda/attention.cuh"

/* True when environment variable name is set to value; then logs what it
 * selects (`what`). Each knob below reads it once per process. */
static bool env_is(const char *name, const char *value, const char *what)
{
    const char *e = getenv(name);
    const bool on = e && strcmp(e, value) == 0;
    if (on)
        INFERD_LOG_INFO("cuda: %s=%s: %s", name, value, what);
    return on;
}

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

/* Test hooks: kcuda_attn_decode_pipe_force picks the decode body (-1: as
 * INFERD_ATTN_DEC_PIPE says, 0: registers, 1: the cp.async ring);
 * kcuda_attn_last_decode_pipe tells which one the last decode launch ran. */
extern "C" int kcuda_attn_decode_pipe_force;
extern "C" int kcuda_attn_last_decode_pipe;
int kcuda_attn_decode_pipe_force = -1;
int kcuda_attn_last_decode_pipe = 0;

/* INFERD_ATTN_DEC_PIPE=0 turns the decode kernel's cp.async ring off (read
 * once per process; the two bodies give bitwise the same output). */
static int decode_use_pipe(void)
{
    /* thread-safe, once per process */
    static const int env_pipe = !env_is("INFERD_ATTN_DEC_PIPE", "0", "decode attention loads to registers");
    return kcuda_attn_decode_pipe_force >= 0 ? kcuda_attn_decode_pipe_force == 1 : env_pipe;
}

/* Test hooks: kcuda_attn_decode_tc_force picks the decode body for GQA
 * groups of 3+ heads at head_dim 64 / 128 (-1: as INFERD_ATTN_DEC_TC says,
 * 0: the CUDA-core bodies, 1: the tensor-core one); kcuda_attn_last_decode_tc
 * tells whether the last decode launch ran the tensor-core body. */
extern "C" int kcuda_attn_decode_tc_force;
extern "C" int kcuda_attn_last_decode_tc;
int kcuda_attn_decode_tc_force = -1;
int kcuda_attn_last_decode_tc = 0;

/* The tensor-core decode body where it applies (kcuda_attn_decode_tc_supported)
 * unless INFERD_ATTN_DEC_TC=0 (read once per process). */
static int decode_use_tc(int group, int hd)
{
    /* thread-safe, once per process */
    static const int env_tc = !env_is("INFERD_ATTN_DEC_TC", "0", "decode attention on CUDA cores");
    const int want = kcuda_attn_decode_tc_force >= 0 ? kcuda_attn_decode_tc_force == 1 : env_tc;
    return want && kcuda_attn_decode_tc_supported(group, hd);
}

/* Test hooks: kcuda_attn_merge_fused_force picks how split partials are
 * merged (-1: as INFERD_ATTN_MERGE says, 0: the merge kernel, 1: fused into
 * the decode kernel's last split); kcuda_attn_last_merge_fused tells which
 * the last split launch used. */
extern "C" int kcuda_attn_merge_fused_force;
extern "C" int kcuda_attn_last_merge_fused;
int kcuda_attn_merge_fused_force = -1;
int kcuda_attn_last_merge_fused = 0;

/* INFERD_ATTN_MERGE=fused (read once): the last split CTA of each
 * (sequence, CTA group) merges, no merge launch; anything else: the merge
 * kernel (the default until the fused form is measured on a GPU; the two
 * give bitwise the same output). */
static bool merge_use_fused(void)
{
    static const bool env_fused =
        env_is("INFERD_ATTN_MERGE", "fused", "split-KV partials merged by the last split CTA");
    return kcuda_attn_merge_fused_force >= 0 ? kcuda_attn_merge_fused_force == 1 : env_fused;
}

/* Test hooks: kcuda_attn_pdl_force picks whether the decode and merge
 * kernels are launched as programmatic dependents (-1: as INFERD_ATTN_PDL
 * says, 0: no, 1: yes); kcuda_attn_last_pdl tells what the last decode
 * launch did. */
extern "C" int kcuda_attn_pdl_force;
extern "C" int kcuda_attn_last_pdl;
int kcuda_attn_pdl_force = -1;
int kcuda_attn_last_pdl = 0;

/* How the decode attention of an n-token step launches (kc_attn_args.pdl):
 * as a programmatic dependent always; its CTAs trigger their own
 * dependents (the merge, then the product behind it) at their start where
 * the other small kernels do (1: kcuda_ops_pdl, n > gemv_max_n), else at
 * their end (2), so only the attention's launch overlaps the GEMV before
 * it and no later kernel takes SM slots while it runs (the early trigger
 * behind the GEMVs cost batch 16 6%; the late one took 0.5-0.8% off
 * batch 1 and 0.2% off batch 16 on an H200, docs/PERF.md, nineteenth
 * session). Where the O product behind it preloads its weights
 * (kcuda_gemv_preload: 1..2 tokens) the trigger is at the start too, so
 * the merge and O launch while the attention runs (twentieth session).
 * INFERD_ATTN_PDL (read once): 1 = the early trigger at every n, 0 = the
 * plain launch at n <= gemv_max_n (the earlier default). The output is the
 * same either way. */
static int attn_use_pdl(const kern_ctx *ctx, int n)
{
    static const bool env_early =
        env_is("INFERD_ATTN_PDL", "1", "decode attention triggering its dependents early");
    static const bool env_plain =
        env_is("INFERD_ATTN_PDL", "0", "decode attention launched plainly behind the GEMVs");
    if (kcuda_attn_pdl_force >= 0)
        return kcuda_attn_pdl_force;
    if (env_early || kcuda_ops_pdl(ctx, n))
        return 1;
    if (env_plain)
        return 0;
    return kcuda_gemv_preload(ctx, n) > 0 ? 1 : 2;
}

/* Test hooks: kcuda_attn_prefill_tc_form_force picks the tensor-core
 * kernel's form (0: as INFERD_PREFILL_TC says, else a KC_PTC_* value);
 * kcuda_attn_last_prefill_form tells the form the last tensor-core launch
 * ran (the device may not run the one asked for: tc_form_fit). */
extern "C" int kcuda_attn_prefill_tc_form_force;
extern "C" int kcuda_attn_last_prefill_form;
int kcuda_attn_prefill_tc_form_force = 0;
int kcuda_attn_last_prefill_form = 0;

/* Test hook: 1 when the current device runs the tensor-core prefill's
 * wgmma forms (kcuda_wgmma_cc, as tc_form_fit decides). */
extern "C" int kcuda_attn_prefill_wg_device(void);
int kcuda_attn_prefill_wg_device(void)
{
    int dev = 0;
    cudaDeviceProp prop;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess)
        return 0;
    return kcuda_wgmma_cc(prop.major * 10 + prop.minor);
}

/* INFERD_PREFILL_TC=mma1|mma2|wg|wgk128 (read once): the tensor-core
 * prefill kernel's form (attention.cuh KC_PTC_*); default wg (64-key
 * tiles), which a device other than compute capability 9.0 runs as mma2
 * (tc_form_fit). */
static int prefill_tc_form(void)
{
    /* thread-safe, once per process */
    static const int env_form =
        env_is("INFERD_PREFILL_TC", "mma1", "tensor-core prefill, mma.sync, 16 query rows a warp")   ? KC_PTC_MMA1
        : env_is("INFERD_PREFILL_TC", "mma2", "tensor-core prefill, mma.sync, 32 query rows a warp") ? KC_PTC_MMA2
        : env_is("INFERD_PREFILL_TC", "wgk128", "tensor-core prefill, wgmma, 128-key tiles")          ? KC_PTC_WG128
                                                                                                       : KC_PTC_WG;
    return kcuda_attn_prefill_tc_form_force > 0 ? kcuda_attn_prefill_tc_form_force : env_form;
}

/* True when the prefill part of this launch runs on tensor cores (its
 * softmax keeps the max of the unscaled scores: the scale must be > 0). */
static bool prefill_use_tc(const kcuda_state *st, int hd, float scale)
{
    /* thread-safe, once per process */
    static const bool env_simt = env_is("INFERD_PREFILL_ATTN", "simt", "prefill attention on CUDA cores");
    const bool want = kcuda_attn_prefill_force >= 0 ? kcuda_attn_prefill_force == 1 : !env_simt;
    return want && scale > 0.0f && kcuda_attn_prefill_tc_supported(st, hd);
}

static int64_t pow2_at_least(int64_t x)
{
    int64_t p = 1;
    while (p < x)
        p *= 2;
    return p;
}

/* GMAX of the decode kernel (heads per CTA) for GQA group size group. */
static int dec_gmax(int group)
{
    return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8;
}

/* Environment variable name as an integer in [lo, hi] and a multiple of
 * step, else def (a value that is set but not one of those is ignored
 * with a warning naming the range). The knobs below read it once per
 * process. */
static int env_int_in(const char *name, int def, long lo, long hi, long step)
{
    const char *e = getenv(name);
    if (!e || !*e)
        return def;
    char *end = NULL;
    const long x = strtol(e, &end, 10);
    if (*end == '\0' && x >= lo && x <= hi && x % step == 0)
        return (int)x;
    INFERD_LOG_WARN("cuda: %s=%.32s ignored (%ld..%ld, a multiple of %ld, wanted)", name, e, lo, hi, step);
    return def;
}

/* The shortest decode split: INFERD_ATTN_MIN_CHUNK (a multiple of
 * KC_ATTN_CHUNK_ALIGN), else KC_ATTN_MIN_CHUNK. */
static int attn_min_chunk(void)
{
    static const int v =
        env_int_in("INFERD_ATTN_MIN_CHUNK", KC_ATTN_MIN_CHUNK, KC_ATTN_CHUNK_ALIGN, 1 << 20, KC_ATTN_CHUNK_ALIGN);
    return v;
}

/* Waves of the decode grid the split plan fills: INFERD_ATTN_SPLIT_WAVES
 * (1..4), else 1. Both the launch's plan and the workspace bound
 * (kcuda_attn_workspace_bytes) count per_sm times this, so the partials
 * always fit. For measurements: more, shorter splits a sequence. */
static int attn_split_waves(void)
{
    static const int v = env_int_in("INFERD_ATTN_SPLIT_WAVES", 1, 1, 4, 1);
    return v;
}

/* Decode CTAs per sequence: kv heads x head chunks of GMAX heads (as
 * kcuda_attn_decode_launch). */
static int ctas_per_seq(int nh, int nkv)
{
    const int group = nh / nkv, gmax = dec_gmax(group);
    return nkv * ((group + gmax - 1) / gmax);
}

/* The plan for n_plan sequences (a power of two) whose longest decode
 * context is max_len, cps CTAs each, per_sm CTAs resident per SM: returns
 * max_splits (1: no split; the grid's z and the workspace stride) and sets
 * *split_target (see the top). Every sequence of length L <= max_len has
 * ceil(L / dec_chunk(L)) <= min(split_target, ceil(L / MIN_CHUNK)) <=
 * max_splits splits. max_splits grows with max_len and with per_sm, and
 * shrinks as cps grows (the workspace bound relies on it). */
static int plan_make(int n_sms, int per_sm, int64_t n_plan, int64_t cps, int64_t max_len, int min_chunk,
                     int *split_target)
{
    *split_target = 0;
    if (n_plan * cps >= (int64_t)KC_ATTN_SPLIT_BELOW * n_sms || max_len <= KC_ATTN_SPLIT_MIN_LEN)
        return 1;
    int64_t st = (int64_t)per_sm * n_sms / (cps * n_plan);
    if (st > KC_ATTN_MAX_SPLITS)
        st = KC_ATTN_MAX_SPLITS;
    if (st <= 1)
        return 1;
    int64_t s = (max_len + min_chunk - 1) / min_chunk;
    if (s > st)
        s = st;
    if (s <= 1)
        return 1;
    *split_target = (int)st;
    return (int)s;
}

/* Test hooks: kcuda_attn_fold_force folds split plans into one CTA a
 * sequence (-1: as INFERD_ATTN_FOLD says, 0: never, 1: where it applies);
 * kcuda_attn_fold_max_warps caps a folded CTA's warps (0: as
 * attn_fold_cap says, else 8, 12 or 16); kcuda_attn_last_fold
 * tells the warps a CTA of the last decode launch that folded (0: none). */
extern "C" int kcuda_attn_fold_force, kcuda_attn_fold_max_warps, kcuda_attn_last_fold;
int kcuda_attn_fold_force = -1, kcuda_attn_fold_max_warps = 0, kcuda_attn_last_fold = 0;

/* The most warps a folded CTA gets: the test hook, else
 * INFERD_ATTN_FOLD_MAX_WARPS (8, 12 or 16, read once; 16 = no cap), else
 * 12 on an fp8 cache and no cap (4 a split) on bf16. A plan of more
 * splits than the cap's warps hold runs as a CTA of the cap's warps over
 * the whole context (the body deals tile t to warp t % W for any W). On
 * fp8 batch 9..16 plans 4 splits on 132 SMs: 12 warps at the body's
 * 128-register bound leave an SM the registers of one product CTA beside
 * it, where 16 take them all (b16 x 1k 0.6% faster on an H100, batch 32
 * and 64 unchanged: their plans have 2 splits or none; docs/PERF.md,
 * twenty-seventh session). The bf16 body's own bound is 12 warps. */
static int attn_fold_cap(bool kv_fp8)
{
    static const int env = env_int_in("INFERD_ATTN_FOLD_MAX_WARPS", 0, 8, 16, 4);
    return kcuda_attn_fold_max_warps > 0 ? kcuda_attn_fold_max_warps : env > 0 ? env : kv_fp8 ? 12 : 0;
}

/* Warps a CTA when a tensor-core body runs the split plan of n_plan
 * sequences (cps CTAs each, per_sm CTAs an SM) as one CTA a sequence of 4
 * warps a split over the whole context: where the plan targets 2..4
 * splits a sequence (its split_target, a function of n_plan alone, never
 * of the batch's lengths: graphs and eager steps of a size fold alike, and
 * a sequence's warps do not depend on its neighbours) and the device has
 * the registers and shared memory, else 0. One wave of the plan's CTAs
 * then holds the same warps an SM, each warp the same tiles, but the warps
 * merge in shared memory: no partials, no merge kernel. On by default on
 * both caches (fp8: batch 16 and 32 decode steps 3-4% faster on an H200;
 * bf16: batch 16 and 64 x 512 steps 0.6-1.1% faster on an H100,
 * docs/PERF.md); INFERD_ATTN_FOLD=0 (read once) folds nothing; a cap
 * (attn_fold_cap) gives a CTA fewer warps than 4 a split. */
static int attn_fold_warps(const kcuda_state *st, const kc_attn_args *a, int64_t n_plan, int64_t cps,
                           int per_sm)
{
    static const bool env_none = env_is("INFERD_ATTN_FOLD", "0", "split plans of 2..4 kept as split CTAs");
    const bool want = kcuda_attn_fold_force >= 0 ? kcuda_attn_fold_force == 1 : !env_none;
    if (!want || !a->tc)
        return 0;
    int target;
    const int splits = plan_make(st->n_sms, per_sm, n_plan, cps, (int64_t)1 << 30, a->min_chunk, &target);
    if (splits < 2 || splits > 4)
        return 0;
    const int cap = attn_fold_cap(a->kv_fp8), w = cap > 0 && 4 * splits > cap ? cap : 4 * splits;
    return kcuda_attn_dec_warps_fit(st, a->kv_fp8, a->hd, w) ? w : 0;
}

/* Test hooks: kcuda_attn_early_kv_force picks whether the tensor-core
 * decode bodies gather the tiles of keys before the step's own ahead of
 * their PDL wait (-1: as INFERD_ATTN_EARLY_KV says, 0: no, 1: yes);
 * kcuda_attn_last_early_kv tells what the last decode launch did. */
extern "C" int kcuda_attn_early_kv_force, kcuda_attn_last_early_kv;
int kcuda_attn_early_kv_force = -1, kcuda_attn_last_early_kv = 0;

/* Whether the tensor-core decode bodies gather K/V tiles before their PDL
 * wait (kc_attn_args.early_kv): the keys before the step's own were
 * written by earlier steps, so their loads may overlap the kernel before
 * (at batch 1, 63 of 64 split CTAs then wait only for q and their last
 * tile). On by default (batch 1 0.4-1.3% faster on an H200, batch 16
 * within noise, docs/PERF.md); INFERD_ATTN_EARLY_KV=0 (read once) gathers
 * every tile after the wait. The output is the same either way. */
static int attn_early_kv(void)
{
    static const bool env_off = env_is("INFERD_ATTN_EARLY_KV", "0", "K/V tiles gathered after the PDL wait");
    return kcuda_attn_early_kv_force >= 0 ? kcuda_attn_early_kv_force == 1 : !env_off;
}

/* Contract (kern_attn_workspace_bytes): bytes of decode split partials for
 * any batch of at most max_seqs sequences (max_tokens when max_seqs <= 0) and
 * contexts of at most max_seq_len tokens; 0 when no plan can split. The
 * bound is the largest n_seqs * splits over every n_plan the limits
 * allow, with the fewest CTAs per sequence any kv-head count gives for
 * n_heads (ceil(n_heads / 8): more CTAs per sequence never mean more
 * splits). */
size_t kcuda_attn_workspace_bytes(const kern_ctx *ctx, int max_tokens, int max_seqs, int n_heads,
                                  int head_dim, int max_seq_len)
{
    const int64_t rows = max_seqs > 0 ? max_seqs : max_tokens;
    if (rows <= 0 || n_heads <= 0 || head_dim <= 0 || max_seq_len <= 0)
        return 0;
    const kcuda_state *st = kcuda_st(ctx);
    const int64_t cps_min = (n_heads + 7) / 8;
    const int per_sm = KC_ATTN_TARGET_PER_SM * attn_split_waves();
    int64_t worst = 0;
    for (int64_t n = 1; n < 2 * rows; n *= 2) {
        int target;
        const int64_t s = plan_make(st->n_sms, per_sm, n, cps_min, max_seq_len, KC_ATTN_CHUNK_ALIGN, &target);
        const int64_t r = (n < rows ? n : rows) * s;
        if (s > 1 && r > worst)
            worst = r;
    }
    if (worst == 0)
        return 0;
    return (size_t)worst * (size_t)n_heads * ((size_t)head_dim + 1) * sizeof(float);
}

bool kcuda_attn_init(kcuda_state *st)
{
    kcuda_attn_decode_init(st);
    kcuda_attn_prefill_tc_init(st);
    const size_t bytes = KC_ATTN_MERGE_COUNTERS(st->n_sms) * sizeof(int);
    if (cudaMalloc(&st->attn_merge_cnt, bytes) != cudaSuccess) {
        st->attn_merge_cnt = NULL;
        (void)cudaGetLastError();
        return false;
    }
    CUDA_CHECK(cudaMemsetAsync(st->attn_merge_cnt, 0, bytes, st->stream));
    CUDA_CHECK(cudaStreamSynchronize(st->stream));
    return true;
}

/* The prefill sequences' blocks of an fp8 cache, converted to bf16 at the
 * same block ids of the dequant copy dk, dv ([n_blocks, nkv, bs, hd]), so
 * the prefill kernels read it as a bf16 cache through the same block
 * tables. Grid (sequence, y): CTA y converts the sequence's blocks y,
 * y + gridDim.y, ... up to its length; a decode sequence (q_len 1)
 * converts nothing. A block two
 * sequences share (a prefix hit) is converted by both, to the same bytes.
 * e4m3 values are exact in bf16, so the prefill attention over the copy
 * sees the values the decode kernel reads from the fp8 cache. */
static __global__ void kv_dequant_kernel(const kc_attn_args a, uint16_t *dk, uint16_t *dv)
{
    const int seq = blockIdx.x, L = a.seq_lens[seq];
    if (a.qsl[seq + 1] - a.qsl[seq] <= 1)
        return;
    const int64_t blk = (int64_t)a.nkv * a.bs * a.hd; /* elements a block (a multiple of 8) */
    for (int64_t i = blockIdx.y; i * a.bs < L; i += gridDim.y) {
        const int64_t base = (int64_t)a.block_tables[(int64_t)seq * a.max_blocks + i] * blk;
        const uint8_t *k8 = (const uint8_t *)a.k_cache + base, *v8 = (const uint8_t *)a.v_cache + base;
        for (int64_t e = (int64_t)threadIdx.x * 8; e < blk; e += (int64_t)blockDim.x * 8) {
            float f[8];
            kc_unpack8_e4m3(*(const uint2 *)(k8 + e), f);
            *(uint4 *)(dk + base + e) = kc_pack8(f);
            kc_unpack8_e4m3(*(const uint2 *)(v8 + e), f);
            *(uint4 *)(dv + base + e) = kc_pack8(f);
        }
    }
}

/* The prefill kernels' view of an fp8 cache: its prefill sequences'
 * blocks converted into p->kv_dequant (kv_dequant_kernel); *ap then reads
 * that copy. max_blocks: the most blocks a prefill sequence covers. */
static void kv_dequant_prefill(const kcuda_state *st, const kern_attn_params *p, kc_attn_args *ap, int max_blocks)
{
    INFERD_CHECK_MSG(p->kv_dequant && p->n_blocks > 0 && kcuda_aligned(p->kv_dequant, 16),
                     "an fp8 KV cache needs kern_attn_params.kv_dequant and n_blocks for prefill");
    uint16_t *dk = (uint16_t *)p->kv_dequant;
    uint16_t *dv = dk + p->n_blocks * p->n_kv_heads * p->block_size * p->head_dim;
    const unsigned gy = (unsigned)(max_blocks < 65535 ? max_blocks : 65535);
    kv_dequant_kernel<<<dim3((unsigned)p->n_seqs, gy), 256, 0, st->stream>>>(*ap, dk, dv);
    KCUDA_LAUNCH_CHECK();
    ap->k_cache = dk;
    ap->v_cache = dv;
    ap->kv_fp8 = 0;
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
    kcuda_attn_last_merge_fused = 0;
    kcuda_attn_last_fold = 0;
    if (p->n_seqs == 0) {
        zero_rows(st, p, 0, p->n_tokens);
        return;
    }
    const int32_t *hq = p->h_query_start_loc;
    int n_dec = 0, n_pre = 0, max_dec_len = 0, max_q = 0, max_pre_len = 0;
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
            if (p->h_seq_lens[i] > max_pre_len)
                max_pre_len = p->h_seq_lens[i];
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
    a.bs_log = -1; /* the decode and tensor-core prefill kernels shift instead of dividing */
    if (a.bs > 0 && (a.bs & (a.bs - 1)) == 0) {
        a.bs_log = 0;
        while ((1 << a.bs_log) < a.bs)
            a.bs_log++;
    }
    a.group = nh / nkv;
    a.scale = p->scale;
    a.kv_fp8 = p->kv_fp8;
    a.min_chunk = attn_min_chunk();
    a.tg = 4; /* the decode kernel's lane groups: 4, 8, 16 or 32 lanes */
    while (a.tg * 8 < hd)
        a.tg *= 2;
    if (n_dec > 0) {
        /* n_plan, not n_seqs: graph and eager steps split alike (see the top) */
        const int64_t n_plan = pow2_at_least(p->n_seqs);
        int target = 0, max_splits = 1;
        a.tc = decode_use_tc(a.group, hd); /* the body first: the plan counts its CTAs a SM */
        kcuda_attn_last_decode_tc = a.tc;
        const int per_sm = (a.tc ? (a.kv_fp8 ? KC_ATTN_DEC_TC8_CTAS_PER_SM : KC_ATTN_DEC_TC_CTAS_PER_SM)
                                 : KC_ATTN_DEC_CTAS_PER_SM(dec_gmax(a.group))) *
                           attn_split_waves();
        a.warps = attn_fold_warps(st, &a, n_plan, ctas_per_seq(nh, nkv), per_sm);
        kcuda_attn_last_fold = a.warps;
        if (p->workspace && a.warps == 0) /* folded: the plan's splits are the CTA's warps */
            max_splits =
                plan_make(st->n_sms, per_sm, n_plan, ctas_per_seq(nh, nkv), max_dec_len, a.min_chunk, &target);
        if (max_splits > 1) {
            a.split_target = target;
            a.max_splits = max_splits;
            a.part_o = (float *)p->workspace;
            a.part_lse = a.part_o + (size_t)p->n_seqs * nh * max_splits * hd;
            if (merge_use_fused()) {
                /* splits happen below KC_ATTN_SPLIT_BELOW unsplit CTAs a SM (plan_make) */
                INFERD_CHECK((size_t)p->n_seqs * ctas_per_seq(nh, nkv) <= KC_ATTN_MERGE_COUNTERS(st->n_sms));
                a.merge_cnt = st->attn_merge_cnt;
            }
            kcuda_attn_last_merge_fused = a.merge_cnt != NULL;
        }
        kcuda_attn_last_splits = max_splits;
        a.pipe = decode_use_pipe();
        kcuda_attn_last_decode_pipe = a.pipe;
        a.pdl = attn_use_pdl(ctx, p->n_tokens);
        kcuda_attn_last_pdl = a.pdl;
        a.early_kv = a.tc && attn_early_kv();
        kcuda_attn_last_early_kv = a.early_kv;
        kcuda_attn_decode_launch(st, &a);
    }
    if (n_pre > 0) {
        kc_attn_args ap = a;
        if (a.kv_fp8)
            kv_dequant_prefill(st, p, &ap, (max_pre_len + a.bs - 1) / a.bs);
        const bool tc = prefill_use_tc(st, hd, p->scale);
        kcuda_attn_last_prefill = tc ? 2 : 1;
        if (tc)
            kcuda_attn_last_prefill_form = kcuda_attn_prefill_tc_launch(st, &ap, max_q, prefill_tc_form());
        else
            kcuda_attn_prefill_launch(st, &ap, max_q);
    }
    zero_rows(st, p, 0, hq[0]);
    zero_rows(st, p, hq[p->n_seqs], p->n_tokens);
}
