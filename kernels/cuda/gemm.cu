/* kernels/cuda/gemm.cu: matmul and logits through cuBLASLt.
 *
 * Row-major out[n, R] = in[n, C] @ W^T with W [R, C] row-major is, in
 * cuBLAS's column-major view, out^T [R, n] = W^T' [C, R]^T * in^T [C, n]:
 * A = W stored as a column-major C x R matrix (lda = C) used transposed,
 * B = in stored as C x n (ldb = C), D = out stored as R x n (ldd = R). Inputs
 * are bf16, compute and scale fp32, output bf16 (matmul) or fp32 (logits).
 *
 * A plan (descriptors + heuristic algorithm) is cached per (R, C, n, output
 * type, pointer alignments): the heuristic is slow (tens of microseconds) and
 * the forward pass repeats the same few shapes. Pointer alignments are part
 * of the key because cuBLASLt assumes 256-byte aligned buffers unless told
 * otherwise, and activations may be sub-buffers of an arena. When cuBLASLt
 * offers no algorithm (odd leading dimensions), cublasGemmEx computes the
 * same product. Both use the ctx's one workspace on the ctx's stream.
 *
 * Small batches (n <= 16 and weights >= 1 MiB by default,
 * kern_gemm_config) go to the weight-streaming GEMV of gemv.cu when it
 * takes the shape: measured on an H100 over the Llama-3-8B shapes
 * (docs/PERF.md), its CUDA-core form beats cuBLASLt per layer at n = 1..6
 * (at n = 1: 82-104% of the copy bandwidth against 67-95%) and loses from
 * n = 8 on, so from n = 3 (a graph-ladder size plus one, so padded graph
 * replays and eager steps choose alike) its tensor-core form takes the
 * plain products (decode steps of 4 / 8 / 16 tokens 7 / 6 / 3% faster than
 * with cuBLASLt beyond 4). The rule is fixed, not timed at start-up,
 * so two contexts (or a graph and an eager step) always make the same
 * choice.
 *
 * Search (kern_gemm_opts.search_max_n, INFERD_GEMM_SEARCH_MAX_N, and
 * search_min_weight_bytes): a plan first built inside the search window
 * (kern_gemm_search_window: the graph warm-ups of model/graphs.c, so the
 * decode graph sizes) for at most search_max_n (512) tokens and a weight
 * of at least twice the L2 (gate/up, down and lm_head of an 8B model;
 * QKV and O fit in the L2, where a timing loop would read them from it)
 * times the heuristic's first KCUDA_GEMM_PICKS candidates (a warm-up and
 * KCUDA_GEMM_SEARCH_REPS runs each into a scratch output, CUDA events)
 * and keeps the fastest unless it wins by less than 2% over an earlier
 * one; every other plan takes the heuristic's first. The window matters:
 * searching every new token count on first use (eager steps of any size)
 * cost offline throughput 4% on an H200 (docs/PERF.md, fifteenth session);
 * inside it, gate/up and lm_head at 48-64 tokens went from 84-92% to
 * 92-98% of the copy bandwidth. Never inside a capture. The choice is
 * timed, so two processes may choose differently (a product's bits can
 * then differ between runs, not within one: a graph and an eager step of
 * its size share the plan), and a process with graphs (searched sizes)
 * and one with --enforce-eager (none) may too, for models that large.
 *
 * NOTE: cuBLAS may pick a different kernel (tile shape, split-K) for a
 * different n, so a row's result can change in the last bits with the batch
 * size; the CPU backend is bitwise batch-invariant, this one is not (the
 * GEMV is invariant for every n it takes).
 */
#include "kernels/cuda/common.cuh"

/* Test hooks (test_cuda_kernels' GEMM bench): plans built while
 * kcuda_gemm_pick = k > 0 take the heuristic's k-th candidate instead of
 * its first (its first when it offers fewer); each plan build leaves the
 * count of candidates, and the chosen one's split-K count and tile id, in
 * kcuda_gemm_last_*. */
extern "C" int kcuda_gemm_pick, kcuda_gemm_last_n_res, kcuda_gemm_last_splitk, kcuda_gemm_last_tile,
    kcuda_gemm_last_searched;
int kcuda_gemm_pick, kcuda_gemm_last_n_res, kcuda_gemm_last_splitk, kcuda_gemm_last_tile;
/* ... and kcuda_gemm_last_searched: the candidates the last plan build
 * timed (0: no search) */
int kcuda_gemm_last_searched;
#define KCUDA_GEMM_PICKS 8       /* candidates a plan asks for under kcuda_gemm_pick or a search */
#define KCUDA_GEMM_SEARCH_REPS 5 /* timed runs a candidate */

struct kcuda_gemm_plan {
    int64_t rows, cols, n;
    int out_f32, pick;
    uint32_t al_a, al_b, al_d;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, ld;
    cublasLtMatmulAlgo_t algo;
    int has_algo; /* 0: use cublasGemmEx */
};

/* Largest power of two (<= 256) dividing the address. */
static uint32_t ptr_align(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a & (al - 1)))
        al >>= 1;
    return al;
}

static void plan_destroy(kcuda_gemm_plan *pl)
{
    if (pl->desc)
        cublasLtMatmulDescDestroy(pl->desc);
    if (pl->la)
        cublasLtMatrixLayoutDestroy(pl->la);
    if (pl->lb)
        cublasLtMatrixLayoutDestroy(pl->lb);
    if (pl->ld)
        cublasLtMatrixLayoutDestroy(pl->ld);
    memset(pl, 0, sizeof *pl);
}

void kcuda_gemm_release(kcuda_state *st)
{
    if (!st->plans)
        return;
    for (int i = 0; i < st->n_plans; i++)
        plan_destroy(&st->plans[i]);
    inferd_free(st->plans);
    st->plans = NULL;
    st->n_plans = st->next_plan = 0;
}

/* Whether the search applies to a product of n tokens with weight w. */
static bool search_wanted(const kern_ctx *ctx, const kern_weight *w, int n)
{
    const kcuda_state *st = kcuda_st(ctx);
    const int64_t floor = ctx->gemm.search_min_weight_bytes >= 0 ? ctx->gemm.search_min_weight_bytes
                                                                  : 2 * (int64_t)st->l2_bytes;
    return ctx->gemm_search_window && n <= ctx->gemm.search_max_n && kern_weight_bytes(w) >= floor;
}

#ifndef KEMU_H
/* Time the candidates c[0..n_c) of pl on the product's own operands into a
 * scratch output (beta 0: an accumulating product's destination is left
 * alone) and return the index of the fastest (an earlier one unless a
 * later runs 2% faster); 0 when anything fails or the stream is capturing. */
static int plan_search(kcuda_state *st, const kcuda_gemm_plan *pl, const cublasLtMatmulHeuristicResult_t *c,
                       int n_c, const void *w, const void *in)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (n_c < 2 || cudaStreamIsCapturing(st->stream, &cs) != cudaSuccess || cs != cudaStreamCaptureStatusNone)
        return 0;
    void *scratch = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (cudaMalloc(&scratch, (size_t)pl->n * (size_t)pl->rows * (pl->out_f32 ? 4 : 2)) != cudaSuccess ||
        cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess) {
        (void)cudaGetLastError(); /* an allocation failure is not sticky: no search */
        if (scratch)
            CUDA_CHECK(cudaFree(scratch));
        if (e0)
            CUDA_CHECK(cudaEventDestroy(e0));
        return 0;
    }
    const float alpha = 1.0f, beta = 0.0f;
    int best = 0, timed = 0;
    float best_ms = INFINITY, first_ms = INFINITY;
    for (int i = 0; i < n_c; i++) {
        if (c[i].state != CUBLAS_STATUS_SUCCESS || c[i].workspaceSize > st->gemm_ws_bytes)
            continue;
        bool ok = true;
        for (int r = -1; r < KCUDA_GEMM_SEARCH_REPS && ok; r++) {
            if (r == 0)
                CUDA_CHECK(cudaEventRecord(e0, st->stream));
            ok = cublasLtMatmul(st->lt, pl->desc, &alpha, w, pl->la, in, pl->lb, &beta, scratch, pl->ld, scratch,
                                pl->ld, &c[i].algo, st->gemm_ws, st->gemm_ws_bytes, st->stream) == CUBLAS_STATUS_SUCCESS;
        }
        CUDA_CHECK(cudaEventRecord(e1, st->stream));
        CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = INFINITY;
        if (!ok || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
            continue;
        timed++;
        if (timed == 1)
            first_ms = ms;
        if (ms < (timed == 1 ? INFINITY : 0.98f * best_ms)) {
            best = i;
            best_ms = ms;
        }
    }
    CUDA_CHECK(cudaEventDestroy(e0));
    CUDA_CHECK(cudaEventDestroy(e1));
    CUDA_CHECK(cudaFree(scratch));
    kcuda_gemm_last_searched = timed;
    if (best > 0)
        INFERD_LOG_INFO("cuda gemm: %lld x %lld at %lld tokens: cuBLASLt candidate %d of %d, %.1f us against %.1f",
                        (long long)pl->rows, (long long)pl->cols, (long long)pl->n, best + 1, timed,
                        1e3 * best_ms / KCUDA_GEMM_SEARCH_REPS, 1e3 * first_ms / KCUDA_GEMM_SEARCH_REPS);
    return best;
}
#endif

/* Build descriptors and ask the heuristic for an algorithm: its first, or
 * (search) the fastest of its first KCUDA_GEMM_PICKS on the product's
 * operands w and in. */
static void plan_build(kcuda_state *st, kcuda_gemm_plan *pl, bool search, const void *w, const void *in)
{
    const cudaDataType_t out_t = pl->out_f32 ? CUDA_R_32F : CUDA_R_16BF;
    const cublasOperation_t op_t = CUBLAS_OP_T, op_n = CUBLAS_OP_N;
    CUBLAS_CHECK(cublasLtMatmulDescCreate(&pl->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, sizeof op_t));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(pl->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_n, sizeof op_n));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl->la, CUDA_R_16BF, (uint64_t)pl->cols, (uint64_t)pl->rows, pl->cols));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl->lb, CUDA_R_16BF, (uint64_t)pl->cols, (uint64_t)pl->n, pl->cols));
    CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&pl->ld, out_t, (uint64_t)pl->rows, (uint64_t)pl->n, pl->rows));
    cublasLtMatmulPreference_t pref;
    CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t ws = st->gemm_ws_bytes;
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &pl->al_a, sizeof pl->al_a));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &pl->al_b, sizeof pl->al_b));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &pl->al_d, sizeof pl->al_d));
    CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &pl->al_d, sizeof pl->al_d));
    cublasLtMatmulHeuristicResult_t all[KCUDA_GEMM_PICKS];
    int n_res = 0;
    memset(all, 0, sizeof all);
    cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(st->lt, pl->desc, pl->la, pl->lb, pl->ld, pl->ld, pref,
                                                       pl->pick > 0 || search ? KCUDA_GEMM_PICKS : 1, all, &n_res);
    CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
    kcuda_gemm_last_searched = 0;
    int pick = pl->pick < n_res ? pl->pick : 0;
#ifndef KEMU_H
    if (search && pl->pick == 0 && hs == CUBLAS_STATUS_SUCCESS)
        pick = plan_search(st, pl, all, n_res, w, in);
#else
    (void)search;
    (void)w;
    (void)in;
#endif
    const cublasLtMatmulHeuristicResult_t &res = all[pick];
    pl->has_algo = hs == CUBLAS_STATUS_SUCCESS && n_res > 0 && res.state == CUBLAS_STATUS_SUCCESS &&
                   res.workspaceSize <= st->gemm_ws_bytes;
    kcuda_gemm_last_n_res = hs == CUBLAS_STATUS_SUCCESS ? n_res : 0;
    kcuda_gemm_last_splitk = kcuda_gemm_last_tile = -1;
    if (pl->has_algo) {
        pl->algo = res.algo;
        size_t sz;
        uint32_t v;
        if (cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &v, sizeof v, &sz) ==
            CUBLAS_STATUS_SUCCESS)
            kcuda_gemm_last_splitk = (int)v;
        if (cublasLtMatmulAlgoConfigGetAttribute(&pl->algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &v, sizeof v, &sz) ==
            CUBLAS_STATUS_SUCCESS)
            kcuda_gemm_last_tile = (int)v;
    } else
        INFERD_LOG_DEBUG("cuda gemm: no cuBLASLt algorithm for R=%lld C=%lld n=%lld, using cublasGemmEx",
                  (long long)pl->rows, (long long)pl->cols, (long long)pl->n);
}

/* The cached plan of this product, built on a miss (and searched when
 * search_wanted: the plan of a size is the same whoever asks next). */
static kcuda_gemm_plan *plan_get(kern_ctx *ctx, const kern_weight *w, int64_t n, int out_f32, const void *in,
                                 const void *out)
{
    kcuda_state *st = kcuda_st(ctx);
    const int64_t rows = w->rows, cols = w->cols;
    const uint32_t al_a = ptr_align(w->data), al_b = ptr_align(in), al_d = ptr_align(out);
    if (!st->plans)
        st->plans = (kcuda_gemm_plan *)inferd_calloc(KCUDA_GEMM_PLANS, sizeof(kcuda_gemm_plan));
    for (int i = 0; i < st->n_plans; i++) {
        kcuda_gemm_plan *pl = &st->plans[i];
        if (pl->rows == rows && pl->cols == cols && pl->n == n && pl->out_f32 == out_f32 &&
            pl->al_a == al_a && pl->al_b == al_b && pl->al_d == al_d && pl->pick == kcuda_gemm_pick)
            return pl;
    }
    kcuda_gemm_plan *pl;
    if (st->n_plans < KCUDA_GEMM_PLANS) {
        pl = &st->plans[st->n_plans++];
    } else {
        pl = &st->plans[st->next_plan];
        st->next_plan = (st->next_plan + 1) % KCUDA_GEMM_PLANS;
        plan_destroy(pl);
    }
    pl->rows = rows;
    pl->cols = cols;
    pl->n = n;
    pl->out_f32 = out_f32;
    pl->al_a = al_a;
    pl->al_b = al_b;
    pl->al_d = al_d;
    pl->pick = kcuda_gemm_pick;
    plan_build(st, pl, search_wanted(ctx, w, (int)n), w->data, in);
    return pl;
}

/* out[n, w->rows] (bf16 or fp32) = in[n, w->cols] (bf16) @ w^T (bf16) + beta
 * out (beta 0 or 1; 1: cuBLAS's C is out itself, in place, C and D one
 * layout). */
static void gemm_run(kern_ctx *ctx, void *out, int out_f32, const void *in, const kern_weight *w, int n,
                     float beta)
{
    kcuda_state *st = kcuda_st(ctx);
    INFERD_CHECK_MSG(w->dtype == KERN_DTYPE_BF16, "CUDA weights are BF16");
    INFERD_CHECK(w->rows > 0 && w->cols > 0 && w->rows <= INT32_MAX && w->cols <= INT32_MAX);
    if (n <= 0)
        return;
    const float alpha = 1.0f;
    kcuda_gemm_plan *pl = plan_get(ctx, w, n, out_f32, in, out);
    if (pl->has_algo) {
        CUBLAS_CHECK(cublasLtMatmul(st->lt, pl->desc, &alpha, w->data, pl->la, in, pl->lb, &beta, out, pl->ld,
                                    out, pl->ld, &pl->algo, st->gemm_ws, st->gemm_ws_bytes, st->stream));
    } else {
        CUBLAS_CHECK(cublasGemmEx(st->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)w->rows, n, (int)w->cols, &alpha,
                                  w->data, CUDA_R_16BF, (int)w->cols, in, CUDA_R_16BF, (int)w->cols, &beta, out,
                                  out_f32 ? CUDA_R_32F : CUDA_R_16BF, (int)w->rows, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
    }
    KCUDA_LAUNCH_CHECK();
}

/* Contract (kern_matmul): out[n, w->rows] = bf16(in[n, w->cols] @ w^T), fp32
 * accumulation. out must not overlap in. */
/* The run-time choice (kern_gemm_config): GEMV for n <= gemv_max_n tokens
 * and weights of at least gemv_min_weight_bytes, when the kernel takes the
 * shape. NOTE: the 1 MiB floor is not a speed rule (the GEMV is faster
 * there too: 3.9 vs 10 us at 512 x 512): it keeps small models on the
 * kernels their numerics were validated with. Mixing the GEMV (n <= 16)
 * and cuBLASLt (n > 16) in one model makes a row's bits depend on how many
 * tokens share its step; on stories260K that flipped greedy tokens in the
 * engine invariance tests (preemption, chunked prefill), which pass on
 * cuBLASLt alone. Large models were never batch-invariant on this backend
 * (cuBLASLt changes algorithm with n), see the NOTE at the top. */
static bool use_gemv(const kern_ctx *ctx, const void *in, const kern_weight *w, int n)
{
    return kcuda_gemv_route(ctx, w, n) && kcuda_aligned(in, 16);
}

void kcuda_matmul(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n)
{
    if (use_gemv(ctx, in, w, n))
        kcuda_gemv(ctx, out, 0, in, w, n, ctx->gemm.pdl);
    else
        gemm_run(ctx, out, 0, in, w, n, 0.0f);
}

/* Contract (kern_logits): logits[n, w->rows] (fp32) = in[n, w->cols] @ w^T. */
void kcuda_logits(kern_ctx *ctx, float *logits, const void *in, const kern_weight *w, int n)
{
    if (use_gemv(ctx, in, w, n))
        kcuda_gemv(ctx, logits, 1, in, w, n, ctx->gemm.pdl);
    else
        gemm_run(ctx, logits, 1, in, w, n, 0.0f);
}

/* Contract (kern_matmul_accum): resid = bf16(resid + in @ w^T), the fp32
 * sum rounded once: cuBLASLt's beta = 1 with C = D = resid (cuBLAS
 * computes alpha A B + beta C in fp32 before the output conversion). The
 * heuristic's algorithm for the shape is the plain product's (the plan
 * does not depend on beta). */
void kcuda_matmul_accum(kern_ctx *ctx, void *resid, const void *in, const kern_weight *w, int n)
{
    gemm_run(ctx, resid, 0, in, w, n, 1.0f);
}

/* Contract (kern_matmul_accum_fast): the products kern_matmul gives to
 * cuBLASLt whatever the input's alignment (not the GEMV route) of weights
 * of at least accum_min_weight_bytes (1 MiB, the GEMV's default floor, but
 * its own knob), unless kern_gemm_opts.accum is off. NOTE: the size floor,
 * like the GEMV's, keeps small models on the numerics they were validated
 * with: on stories260K the folded add made greedy and seeded tokens of a
 * request differ between batched and alone (after 11 to 111 tokens) in the
 * GPU engine tests, which pass with the add in the norm; large models were
 * never batch-invariant here (see the NOTE at the top). */
bool kcuda_matmul_accum_fast(const kern_ctx *ctx, const kern_weight *w, int n)
{
    return ctx->gemm.accum && kern_weight_bytes(w) >= ctx->gemm.accum_min_weight_bytes && !kcuda_gemv_route(ctx, w, n);
}
