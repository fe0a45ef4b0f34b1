/* kernels/kernels.h: the op API the forward pass is written against.
 *
 * One API, two backends: kernels/cpu (fp32 reference, also the no-GPU
 * backend) and kernels/cuda (bf16 weights/activations/KV, fp32 accumulation).
 * A kern_ctx names the backend; every entry point below dispatches on it, so
 * model/forward.c is written once. All pointers passed to ops are "device"
 * pointers of the ctx's backend (plain host memory on the CPU backend),
 * obtained from kern_alloc. Ops are asynchronous on the ctx's stream; results
 * are visible after kern_sync or a d2h copy.
 *
 * Element types:
 *  - activations (hidden states, qkv, attention output, MLP intermediates) and
 *    the KV cache use kern_act_dtype(ctx): F32 on CPU, BF16 on CUDA; or the
 *    cache holds fp8 e4m3 (kv_fp8 in the rope and attention params, one
 *    byte an element on both backends; kern_fp8.h);
 *  - logits are always F32;
 *  - weights use kern_weight_dtype(ctx, file_dtype): the file dtype on CPU
 *    (matmul reads F32/F16/BF16 directly), BF16 on CUDA.
 *
 * KV cache layout per layer, separate K and V arrays:
 *   [n_blocks, n_kv_heads, block_size, head_dim]
 * A token with slot s = block_id * block_size + offset lives at
 *   ((block_id * n_kv_heads + h) * block_size + offset) * head_dim.
 * slot_mapping < 0 means "do not write" (padding).
 *
 * Batch layout (FlashInfer/vLLM varlen): the batch is a flat list of n_tokens
 * new tokens from n_seqs sequences; sequence i owns rows
 * [query_start_loc[i], query_start_loc[i+1]) and has seq_lens[i] tokens of
 * context in total (cached + new). Its new tokens sit at positions
 * seq_lens[i] - q_len .. seq_lens[i] - 1 and attend causally to every earlier
 * position, all read through the block table (rope_kv_write has already
 * stored the new K/V in the cache).
 */
#ifndef INFERD_KERNELS_H
#define INFERD_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* FP8_E4M3: only the KV cache's element (--kv-cache-dtype fp8, kern_fp8.h);
 * never a weight or activation dtype. */
typedef enum { KERN_DTYPE_F32 = 0, KERN_DTYPE_F16, KERN_DTYPE_BF16, KERN_DTYPE_FP8_E4M3 } kern_dtype;
typedef enum { KERN_BACKEND_CPU = 0, KERN_BACKEND_CUDA } kern_backend;

size_t kern_dtype_size(kern_dtype dt);
const char *kern_dtype_name(kern_dtype dt);
const char *kern_backend_name(kern_backend b);

typedef struct kern_ctx kern_ctx;

typedef struct {
    kern_backend backend;
    int n_threads;  /* CPU: worker threads (0 = all cores) */
    int device_id;  /* CUDA: device ordinal */
} kern_ctx_opts;

/* Create a backend context (CUDA: stream, cuBLASLt handle + workspace). */
inferd_status kern_ctx_create(const kern_ctx_opts *opts, kern_ctx **out);
void kern_ctx_free(kern_ctx *ctx);
kern_backend kern_ctx_backend(const kern_ctx *ctx);
/* True when this build has the CUDA backend and a device is present. */
bool kern_cuda_available(void);
/* CUDA devices visible to this process (0 without CUDA). */
int kern_cuda_device_count(void);
/* Device memory (bytes free, total). The CPU backend reports host RAM:
 * total, and as free the kernel's MemAvailable (/proc/meminfo: free memory
 * plus what page cache and reclaimable slabs would give back; MemFree is
 * far smaller on a machine that has read files), falling back to free pages
 * where /proc/meminfo is unreadable. INFERD_TEST_MEM_AVAILABLE=bytes
 * replaces the CPU's free figure (tests make the model's memory checks fire
 * with it without exhausting memory). */
inferd_status kern_mem_info(kern_ctx *ctx, size_t *free_b, size_t *total_b);

kern_dtype kern_act_dtype(const kern_ctx *ctx);
kern_dtype kern_weight_dtype(const kern_ctx *ctx, kern_dtype file_dtype);

/* --- capability check ------------------------------------------------------ */
/* What a model asks of a backend: its config's shape (the HF config.json
 * names, used in error messages, are in the comments) and the engine's
 * per-step limits. */
typedef struct {
    int64_t hidden;           /* hidden_size */
    int64_t intermediate;     /* intermediate_size */
    int64_t n_heads;          /* num_attention_heads */
    int64_t n_kv_heads;       /* num_key_value_heads */
    int64_t head_dim;         /* head_dim */
    int64_t vocab;            /* vocab_size */
    kern_dtype weight_dtype;  /* torch_dtype: the dtype of the weight files */
    int64_t block_size;       /* KV cache block size, tokens */
    int64_t max_model_len;    /* longest context, tokens */
    int64_t max_batch_tokens; /* tokens in one forward step (max_num_batched_tokens) */
} kern_model_shape;

/* Contract: INFERD_OK when backend b's kernels can run every batch of a model
 * of shape s within its limits; otherwise INFERD_ERR_UNSUPPORTED (a valid
 * model beyond this backend's kernels, e.g. head_dim 520 on the CPU) or
 * INFERD_ERR_INVALID_ARG (a shape no backend runs: a non-positive size,
 * num_attention_heads not a multiple of num_key_value_heads), with a message
 * naming the backend, the field, its value, the limit and the kernel that
 * sets it (kernels/kern_limits.h). Host logic only: the CUDA rules are
 * checked without a device and in builds without CUDA. */
inferd_status kern_check_model(kern_backend b, const kern_model_shape *s);
/* kern_check_model for ctx's backend plus the limits of its device (CUDA:
 * the opt-in shared memory per block that the prefill attention tile needs
 * at this head_dim). Call once at model load, after the context exists. */
inferd_status kern_ctx_check_model(const kern_ctx *ctx, const kern_model_shape *s);

/* --- memory --------------------------------------------------------------- */
/* Backend memory, 256-byte aligned. NULL on failure (never aborts). */
void *kern_alloc(kern_ctx *ctx, size_t bytes);
void kern_free(kern_ctx *ctx, void *p);
void kern_memcpy_h2d(kern_ctx *ctx, void *dst, const void *src, size_t bytes);
void kern_memcpy_d2h(kern_ctx *ctx, void *dst, const void *src, size_t bytes); /* synchronous */
/* Ordered on the ctx's stream without waiting: dst must be page-locked
 * (kern_host_alloc) and holds the bytes once a kern_timer_wait on a slot
 * recorded after the copy returns (or after kern_sync). CPU: memcpy. */
void kern_memcpy_d2h_async(kern_ctx *ctx, void *dst, const void *src, size_t bytes);
void kern_memset0(kern_ctx *ctx, void *dst, size_t bytes);
void kern_sync(kern_ctx *ctx);
/* Backend-to-backend copy of height rows of width bytes, rows dst_pitch and
 * src_pitch bytes apart (cudaMemcpy2DAsync on the ctx's stream: capturable;
 * memcpy per row on the CPU). Regions do not overlap. */
void kern_copy_2d(kern_ctx *ctx, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                  size_t height);

/* --- weights -------------------------------------------------------------- */
/* A row-major matrix [rows, cols] in backend memory (HF Linear: [out, in]). */
typedef struct {
    void *data;
    kern_dtype dtype;
    int64_t rows, cols;
} kern_weight;
/* Bytes of w's data (rows * cols elements of its dtype). */
int64_t kern_weight_bytes(const kern_weight *w);

/* Convert n_rows rows of a host matrix (src_dtype, row length w->cols) into
 * w at row_offset. Used to load and to fuse QKV / gate-up at load time. */
void kern_weight_upload(kern_ctx *ctx, kern_weight *w, int64_t row_offset, const void *src,
                        kern_dtype src_dtype, int64_t n_rows);
/* Fill w with uniform values in [-scale, scale] from a seed, on the device
 * (--load-format dummy). */
void kern_weight_fill_random(kern_ctx *ctx, kern_weight *w, uint64_t seed, float scale);
/* Rows [row, row + n_rows) of w get a window of a logical random matrix
 * with src_cols columns: w's element (row + i, j) becomes the logical
 * element (src_row + i, src_col + j), whose value is the one
 * kern_weight_fill_random(seed, scale) gives the flat index
 * (src_row + i) * src_cols + src_col + j. So a tensor-parallel shard
 * filled window by window holds exactly the values of the same rows and
 * columns of the whole dummy matrix (kern_weight_fill_random(w) is the
 * window row 0, n_rows w->rows, src (0, 0), src_cols w->cols). Requires
 * src_col + w->cols <= src_cols. */
void kern_weight_fill_random_part(kern_ctx *ctx, kern_weight *w, int64_t row, int64_t n_rows, uint64_t seed,
                                  float scale, int64_t src_row, int64_t src_col, int64_t src_cols);
/* Contract: counts[i] (host) = the number of elements of ws[i] (rows * cols
 * values of ws[i].dtype at ws[i].data, backend memory) that are NaN or
 * +-Inf, for i < n. Decided on the bits (exponent all ones), so it holds
 * under any floating-point mode and never converts. ws[i].data needs only
 * its element alignment (views into fused weights are fine). One read of
 * every element at memory bandwidth and one synchronization for the whole
 * list (model load checks the weight slab with it). INFERD_ERR_NOMEM when
 * the backend cannot allocate its counters (counts untouched). */
inferd_status kern_weights_count_nonfinite(kern_ctx *ctx, const kern_weight *ws, int n, int64_t *counts);
/* w[r, c] = w[r, c] * g[c] for every row r, in fp32, rounded to w's dtype
 * (nearest even): an RMSNorm weight g ([1, w->cols], any weight dtype)
 * folded into the columns of the product after the norm, so that
 * (rmsnorm(x) * g) @ w^T = (x @ (w diag g)^T) / rms(x) (model load's
 * norm fold, kern_fuse.rms). */
void kern_weight_scale_cols(kern_ctx *ctx, kern_weight *w, const kern_weight *g);

/* --- ops ------------------------------------------------------------------ */
/* out[n, d] = table[tokens[i], :]. tokens: [n] int32 (backend memory). */
void kern_embed(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *table);
/* The embedding of one tensor-parallel rank, which holds the vocabulary
 * rows [vocab_begin, vocab_begin + table->rows): out row i = table row
 * tokens[i] - vocab_begin when that is in [0, table->rows), else zeros (the
 * sum over ranks, an all-reduce, is then exactly the full lookup).
 * kern_embed is vocab_begin 0 with every token inside the table. */
void kern_embed_shard(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *table,
                      int64_t vocab_begin);

/* Fused residual add + RMSNorm (vLLM fused_add_rms_norm):
 *   if add != NULL: resid += add
 *   out = resid / sqrt(mean(resid^2) + eps) * w
 * out, resid, add: [n, d] act dtype; w: [1, d] weight (rows = 1, cols = d). */
void kern_add_rmsnorm(kern_ctx *ctx, void *out, void *resid, const void *add, const kern_weight *w,
                      int n, float eps);

/* out[count] (act dtype) = in[count] (F32) rounded to nearest even: a
 * copy where the act dtype is F32 (CPU). Tensor parallelism rounds the
 * fp32 sum of the ranks' partial products once, as one rank's product is
 * rounded (model/forward.c). out must not overlap in. */
void kern_f32_to_act(kern_ctx *ctx, void *out, const float *in, size_t count);

/* out[n, w->rows] = in[n, w->cols] @ w^T, act dtype in and out. */
void kern_matmul(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n);

/* logits[n, w->rows] (F32) = in[n, w->cols] @ w^T. */
void kern_logits(kern_ctx *ctx, float *logits, const void *in, const kern_weight *w, int n);

/* Small-batch products (CUDA): kern_matmul / kern_logits of n <= gemv_max_n
 * tokens with a weight of at least gemv_min_weight_bytes run the
 * weight-streaming GEMV kernel (kernels/cuda/gemv.cu) where it applies
 * (cols % 8 == 0, 16-byte aligned weight and input); the rest cuBLASLt.
 * gemv_max_n 0 = cuBLASLt always; at most 16. pdl: launch the GEMV with
 * programmatic dependent launch (its first weight loads overlap the previous
 * kernel). Defaults: n <= 16 (n <= 8 for weights of 200 MiB and more),
 * weights >= 1 MiB, PDL on, plain products of n >= 3 on the tensor-core
 * form; INFERD_GEMV_MAX_N, INFERD_GEMV_MIN_BYTES, INFERD_GEMV_PDL (0/1),
 * INFERD_GEMV_VARIANT, INFERD_FUSE (fuse_max_n: 0 = off),
 * INFERD_GEMV_TC_MIN_N (gemv_tc_min_n: plain products of n >= it on the
 * GEMV's tensor-core form, 0 = off), INFERD_GEMV_TC_RING (gemv_tc_ring),
 * INFERD_GEMV_TC_TRIGGER (gemv_tc_trigger, 0/1/2),
 * INFERD_GEMV_LT_MIN_BYTES (gemv_lt_min_bytes: products of 9..16 tokens
 * with weights of at least this size on cuBLASLt, 200 MiB; 0 = never),
 * INFERD_GEMM_ACCUM (accum, 0/1),
 * INFERD_GEMM_ACCUM_MIN_BYTES, INFERD_GEMM_SEARCH_MAX_N and
 * INFERD_GEMM_SEARCH_MIN_BYTES override them at kern_ctx_create. The
 * choice depends only on n and the weight, so a padded graph replay uses
 * the same kernel as the eager step when gemv_max_n and gemv_tc_min_n - 1
 * are sizes of the graph ladder (1, 2, 4, 8, 16; the gemv_lt_min_bytes
 * switch is at 8). Ignored by the CPU backend. Never while a graph is
 * being captured. */
typedef struct {
    int gemv_max_n;
    int64_t gemv_min_weight_bytes;
    bool pdl;
    int gemv_variant; /* 1 (default): n <= 2 use the more-warps tile of gemv.cu; 0: the same tile for all n <= 4 */
    int fuse_max_n;   /* kern_matmul_fusable up to this many tokens (0 = never, at most KCUDA_FUSE_MAX_N) */
    int gemv_tc_min_n; /* plain GEMV products of n >= this many tokens on tensor cores (0 = never) */
    int gemv_preload;  /* chunks a lane of the CUDA-core GEMV (1..2 tokens) copies into shared memory
                          before its PDL wait in the product after the decode attention
                          (kern_fuse.after_attention), which then triggers its dependents early
                          (0 = off; INFERD_GEMV_PRELOAD, default KCUDA_GEMV_DEFAULT_PRELOAD = 12,
                          kept within 0..KCUDA_GEMV_MAX_PRELOAD = 12) */
    int gemv_xs;       /* the CUDA-core GEMV at 1..2 tokens stages its input rows (and norm weight) in shared
                          memory: 0 never, 1 the preload form (the product after the attention) only, 2 every
                          such launch (INFERD_GEMV_XS, default 2; gemv.cu) */
    int gemv_tc_ring;  /* the tensor-core form's weights through a shared-memory ring: 0 never, 1 where gemv.cu's
                          rule says (INFERD_GEMV_TC_RING, default 1), 2 always (tests) */
    int64_t gemv_lt_min_bytes; /* products of 9..16 tokens with weights of at least this size run on cuBLASLt
                                  instead of the GEMV (0 = never; INFERD_GEMV_LT_MIN_BYTES) */
    int gemv_tc_trigger; /* 1 (default): the tensor-core form of 1..8 tokens (one n-tile) triggers its
                            programmatic dependents (the next GEMV, the decode attention) once its weights
                            are read, so their CTAs start during its sums and epilogue; 2: at every n;
                            0: at its end (INFERD_GEMV_TC_TRIGGER) */
    bool accum;        /* kern_matmul_accum_fast may hold (INFERD_GEMM_ACCUM=0: never, the forward adds in the norm) */
    int64_t accum_min_weight_bytes; /* ... for weights of at least this size (INFERD_GEMM_ACCUM_MIN_BYTES, 1 MiB) */
    int search_max_n; /* cuBLASLt products of at most this many tokens time the heuristic's first candidates
                         when their plan is first built inside kern_gemm_search_window, outside graph
                         capture, and keep the fastest (0 = never; INFERD_GEMM_SEARCH_MAX_N, 512) ... */
    int64_t search_min_weight_bytes; /* ... for weights of at least this size (-1: twice the device's L2, so
                                        the timed runs read the weight from HBM as the model does;
                                        INFERD_GEMM_SEARCH_MIN_BYTES) */
} kern_gemm_opts;
void kern_gemm_config(kern_ctx *ctx, const kern_gemm_opts *o);
/* CUDA: while the window is open, cuBLASLt plans first built for products
 * the search covers (kern_gemm_opts.search_max_n, search_min_weight_bytes)
 * time the heuristic's candidates (gemm.cu). model/graphs.c opens it
 * around each decode size's eager warm-up before its capture, so the decode
 * graph sizes are searched once at start-up and no step of another token
 * count waits on a search; an eager step of a searched size uses the
 * searched plan. Ignored by the CPU backend. */
void kern_gemm_search_window(kern_ctx *ctx, bool open);
void kern_gemm_config_get(const kern_ctx *ctx, kern_gemm_opts *o);

/* out[r, d] = in[idx[j], :] for j < r. idx: [r] int32 backend memory. */
void kern_gather_rows(kern_ctx *ctx, void *out, const void *in, const int32_t *idx, int r, int d);

/* A step's input tokens from the previous step's sampled ones, on the
 * device (the engine's async scheduling launches step N + 1 before the
 * host has seen step N's tokens): for i < n, tokens[i] = from[src[i]] where
 * src[i] >= 0, else tokens[i] is left as is. tokens: [n], src: [n], from:
 * [max src + 1], int32, backend memory; tokens must not overlap from. */
void kern_tokens_from(kern_ctx *ctx, int32_t *tokens, const int32_t *src, const int32_t *from, int n);

/* out[n, f] = silu(gate_up[:, :f]) * gate_up[:, f:]; gate_up: [n, 2f]. */
void kern_silu_mul(kern_ctx *ctx, void *out, const void *gate_up, int n, int f);
/* The same after a folded norm (kern_fuse.rms): each token's gate and up
 * values are first scaled by r = 1 / sqrt(mean(x^2) + eps) of its row of
 * x ([n, d], the residual stream the product read) and rounded to the act
 * dtype: out = silu(act(g r)) * act(u r), rounded. */
void kern_silu_mul_rms(kern_ctx *ctx, void *out, const void *gate_up, int n, int f, const void *x, int d, float eps);

/* RoPE (HF rotate_half: pairs (j, j + head_dim/2)) on q and k of a fused qkv
 * buffer, then K and V written to the paged cache through slot_mapping. */
typedef struct {
    void *qkv;                   /* [n_tokens, (n_heads + 2*n_kv_heads) * head_dim]: q | k | v; q, k roped in place */
    const int32_t *positions;    /* [n_tokens] */
    const int64_t *slot_mapping; /* [n_tokens], < 0 = skip */
    const float *inv_freq;       /* [head_dim / 2], already scaled (llama3, linear, dynamic, yarn) */
    void *k_cache;               /* [n_blocks, n_kv_heads, block_size, head_dim] */
    void *v_cache;               /* [n_blocks, n_kv_heads, block_size, head_dim] */
    int n_tokens, n_heads, n_kv_heads, head_dim, block_size;
    float mscale; /* cos and sin are multiplied by it (YaRN's attention factor, HF attention_scaling);
                     0 is taken as 1, so callers that leave it unset get plain RoPE */
    bool kv_fp8;  /* the caches hold fp8 e4m3 (kern_f32_to_e4m3 of the value the act dtype holds: on
                     CUDA the bf16 k / v of the qkv row), else the act dtype */
} kern_rope_kv_params;
void kern_rope_kv_write(kern_ctx *ctx, const kern_rope_kv_params *p);

/* What the QKV projection's output gets before RoPE, fused into the same
 * pass (kern_rope_kv_write_ex); every member is optional (NULL = none):
 *  - qkv_bias: the q | k | v projection biases (Qwen2), rows * cols =
 *    (n_heads + 2*n_kv_heads) * head_dim values in the fused row's order,
 *    added to every token's whole qkv row first and stored back (q and k
 *    then normed and roped as below; v stays biased in qkv, and the cache
 *    gets v + bias);
 *  - q_norm, k_norm: per-head RMSNorm weights (Qwen3), rows * cols =
 *    head_dim each, applied to every q head (q_norm) and k head (k_norm)
 *    after the bias and before RoPE: x = (x * rsqrt(mean(x^2) + norm_eps)) * w
 *    over the head's head_dim values (HF Qwen3RMSNorm). Both or neither.
 * Weights in the ctx's weight dtype (kern_weight_dtype), read-only. */
typedef struct {
    const kern_weight *qkv_bias;
    const kern_weight *q_norm, *k_norm;
    float norm_eps;    /* of the q/k norms and of rms_x */
    const void *rms_x; /* [n_tokens, rms_cols] act dtype, or NULL: a folded norm (kern_fuse.rms) -- before
                          everything else, each token's whole qkv row is scaled by 1 / sqrt(mean(x^2) +
                          norm_eps) of its row of rms_x and rounded to the act dtype */
    int rms_cols;
} kern_qkv_epilogue;
/* kern_rope_kv_write with the epilogue e applied first (e NULL or all
 * members NULL: exactly kern_rope_kv_write). The k values written to the
 * cache are the biased, normed, roped ones; the v values the biased ones. */
void kern_rope_kv_write_ex(kern_ctx *ctx, const kern_rope_kv_params *p, const kern_qkv_epilogue *e);

/* resid[n, R] = act(resid + in[n, C] @ w^T): a row-parallel product (O,
 * down) added into the residual stream in the product itself, so the next
 * norm reads one tensor instead of two (kern_add_rmsnorm with add NULL).
 * The product and the add are fp32 and rounded once to the activation
 * dtype (kern_matmul then kern_add_rmsnorm's add round twice on bf16).
 * CUDA: cuBLASLt with beta = 1 and C = D = resid, for every n (never the
 * GEMV). CPU (F32 activations): the product, then resid += it, the bits of
 * the two ops. resid must not overlap in. */
void kern_matmul_accum(kern_ctx *ctx, void *resid, const void *in, const kern_weight *w, int n);
/* Whether kern_matmul_accum of n tokens of w is the forward pass's choice:
 * CUDA, kern_gemm_opts.accum on (the default), weights of at least
 * accum_min_weight_bytes, and n where kern_matmul would run cuBLASLt for
 * them too (not the GEMV route; the add then costs the product a read of
 * resid, no kernel); never on the CPU (its forward keeps the two ops).
 * Depends only on n and w, so a padded graph replay folds as the eager
 * step does. */
bool kern_matmul_accum_fast(const kern_ctx *ctx, const kern_weight *w, int n);

/* --- fused small-batch products (decode) ------------------------------------ */
/* A product out = in @ w^T with the op before it and the op after it done
 * in the same kernel, so a decode step launches three kernels per layer
 * fewer (vLLM and TensorRT-LLM fuse the same pairs). Each epilogue is
 * defined by the unfused ops it replaces, rounding for rounding:
 *   STORE:    out[n, R] = bf16(product)                         (kern_matmul)
 *   RESID:    resid[n, R] = bf16(resid + bf16(product)); out unused
 *                                          (the add of kern_add_rmsnorm)
 *   SILU_MUL: out[n, R/2] = bf16(silu(g) * u), g and u the bf16 products of
 *             rows j and j + R/2                         (kern_silu_mul)
 *   ROPE_KV:  out = the qkv rows (bf16, + qkv_bias), RoPE'd, k and v
 *             written to the cache         (kern_rope_kv_write_ex, no q/k norm)
 * and the optional norm: the product's input is rmsnorm(in) * norm, in
 * left as it is (kern_add_rmsnorm with add NULL, but not rounded to bf16
 * before the product: the CUDA kernel folds the norm into the dot product,
 * see kernels/cuda/gemv.cu). Or rms, a norm whose weight is folded into w
 * (kern_weight_scale_cols): each token's products are scaled by 1 /
 * sqrt(mean(in^2) + eps) of its input row before the epilogue, rounded to
 * bf16 before and after the scale (act(act(product) r): the bits of the
 * unfused ops kern_silu_mul_rms and kern_rope_kv_write_ex with rms_x, up to
 * the order in which the squares are summed). SILU_MUL and ROPE_KV only. */
typedef enum {
    KERN_EPI_STORE = 0,
    KERN_EPI_RESID,
    KERN_EPI_SILU_MUL,
    KERN_EPI_ROPE_KV,
} kern_epilogue;
typedef struct {
    const kern_weight *norm;         /* [1, w->cols] or NULL: no prologue */
    bool rms;                        /* the folded norm (not with norm) */
    float eps;                       /* of the norm or of rms */
    kern_epilogue epi;
    void *resid;                     /* RESID: [n, w->rows] */
    const kern_rope_kv_params *rope; /* ROPE_KV: positions, slots, cache, heads (qkv and n_tokens: out and n) */
    const kern_weight *qkv_bias;     /* ROPE_KV: [w->rows] or NULL */
    bool after_attention;            /* a hint: the product right after the decode attention (O), whose
                                        kernels leave the HBM idle; the CUDA GEMV may copy the head of
                                        its weights into shared memory while they run (kcuda_gemv_preload).
                                        Never changes a result. */
} kern_fuse;
/* Whether kern_matmul_fused runs as one kernel for n tokens of w on ctx:
 * CUDA, n <= kern_gemm_opts.fuse_max_n, and the GEMV route of kern_matmul
 * (n and the weight's size and alignment, see kern_gemm_opts). Never on the
 * CPU. Callers run the unfused ops when it is false; the answer depends
 * only on n and w, so a padded graph replay fuses as the eager step does. */
bool kern_matmul_fusable(const kern_ctx *ctx, const kern_weight *w, int n);
/* Whether kern_matmul_fused with no norm (kern_fuse.norm NULL) runs as one
 * kernel: kern_matmul_fusable, or n from gemv_tc_min_n to gemv_max_n with
 * the GEMV route's weight (the GEMV's tensor-core form then runs the
 * epilogue; its norm stays a kernel of its own: a CTA holds 16 rows, not
 * the input row's squares). Its outputs are bitwise those of the plain
 * tensor-core product followed by the unfused op (the same roundings in
 * the same order). Never on the CPU; depends only on n and w. */
bool kern_matmul_epi_fusable(const kern_ctx *ctx, const kern_weight *w, int n);
/* The fused product (see above): kern_matmul_fusable, or
 * kern_matmul_epi_fusable with f->norm NULL, must hold on CUDA; with
 * f->rms the GEMV's tensor-core form runs it at every n of the GEMV route
 * (its CUDA-core form applies weighted norms only). in:
 * [n, w->cols], 16-byte aligned, not overlapping out. The CPU backend
 * composes the unfused ops (the twin). */
void kern_matmul_fused(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n, const kern_fuse *f);

/* Paged causal attention over the batch layout described at the top. Picks
 * the decode path (every q_len == 1, split-KV planned on the host) or the
 * prefill path (variable q_len, earlier context from the cache). */
typedef struct {
    void *out;                       /* [n_tokens, n_heads * head_dim] */
    const void *qkv;                 /* [n_tokens, (n_heads + 2*n_kv_heads) * head_dim]; q read from cols [0, n_heads*head_dim) */
    const void *k_cache;             /* [n_blocks, n_kv_heads, block_size, head_dim] */
    const void *v_cache;             /* [n_blocks, n_kv_heads, block_size, head_dim] */
    const int32_t *query_start_loc;  /* [n_seqs + 1] backend memory */
    const int32_t *seq_lens;         /* [n_seqs] backend memory */
    const int32_t *block_tables;     /* [n_seqs, max_blocks_per_seq] backend memory */
    const int32_t *h_query_start_loc;/* host mirrors, for planning */
    const int32_t *h_seq_lens;
    void *workspace;                 /* kern_attn_workspace_bytes() bytes, backend memory */
    int n_seqs, n_tokens, max_blocks_per_seq;
    int n_heads, n_kv_heads, head_dim, block_size;
    int max_query_len, max_seq_len;  /* over the batch */
    float scale;                     /* usually 1/sqrt(head_dim) */
    bool kv_fp8;                     /* the caches hold fp8 e4m3 (kern_rope_kv_params.kv_fp8) */
    void *kv_dequant;                /* kv_fp8 on CUDA: kern_attn_kv_dequant_bytes(n_blocks, ...) of
                                        backend memory, the act-dtype copy of the prefill sequences'
                                        blocks their attention reads (decode reads fp8 directly): K
                                        [n_blocks, n_kv_heads, block_size, head_dim], then V; else unused */
    int64_t n_blocks;                /* kv_fp8 on CUDA: blocks of the caches (and of kv_dequant's halves) */
} kern_attn_params;
void kern_attention(kern_ctx *ctx, const kern_attn_params *p);
/* Bytes of kern_attn_params.kv_dequant for a pool of n_blocks blocks
 * (one layer's K and V in the act dtype); 0 on the CPU, which reads fp8. */
size_t kern_attn_kv_dequant_bytes(const kern_ctx *ctx, int64_t n_blocks, int n_kv_heads, int block_size,
                                  int head_dim);
/* Workspace bound for any batch within these limits. */
size_t kern_attn_workspace_bytes(const kern_ctx *ctx, int max_tokens, int max_seqs, int n_heads,
                                 int head_dim, int max_seq_len);

/* One logit_bias entry: bias added to the logit of token. */
typedef struct {
    int32_t token;
    float bias;
} kern_logit_bias;

/* Per-row sampling parameters. temperature <= 0 means greedy (argmax; ties go
 * to the lowest id). Filters apply in the order top-k, top-p, min-p on the
 * temperature-scaled softmax; the draw is rng_uniform(seed, counter).
 * The penalty members are read by kern_penalty_apply only (kern_sample
 * ignores them); a zeroed tail (counts NULL, n_bias 0) leaves the row alone. */
typedef struct {
    float temperature;
    float top_p;   /* 1 = off */
    float min_p;   /* 0 = off */
    int32_t top_k; /* <= 0 = off */
    uint64_t seed;
    uint64_t counter; /* index of the token being sampled within its request */
    int32_t *counts;             /* [vocab] backend memory, the row's token counts (kern_penalty_init); NULL = no penalties */
    const kern_logit_bias *bias; /* [n_bias] backend memory, distinct tokens in [0, vocab) */
    int32_t n_bias;
    int32_t count_token;         /* >= 0: an output token counts gets before the penalties apply; < 0 none */
    float presence, frequency;   /* OpenAI presence / frequency penalties; 0 = off */
    float repetition;            /* HF/vLLM repetition penalty; 1 (or <= 0) = off */
} kern_sample_params;

/* tokens[r] = sample(logits[r, vocab]) for each row. params: [r] backend
 * memory. logits may be overwritten. workspace: kern_sample_workspace_bytes. */
void kern_sample(kern_ctx *ctx, int32_t *tokens, float *logits, const kern_sample_params *params,
                 int r, int vocab, void *workspace);
size_t kern_sample_workspace_bytes(const kern_ctx *ctx, int max_rows, int vocab);

/* --- penalties and logit bias (kernels/{cpu,cuda}/penalty.*) ---------------- */
/* A sequence's token counts live on the device, one int32 per vocabulary
 * entry: counts[v] = (occurrences of v among the generated tokens << 1) |
 * (1 if v occurs in the prompt). They are built once per admission by
 * kern_penalty_init and then grow by one token per step through
 * kern_sample_params.count_token, so no step reads them back to the host
 * and a captured decode graph keeps them current (the pointers travel in
 * the per-step params, not in the graph). */

/* counts[vocab] (backend memory) = the counts of tokens[n_tokens] (backend
 * memory, ids in [0, vocab)), whose first n_prompt entries are the prompt
 * and the rest generated tokens. Asynchronous, like any op. */
void kern_penalty_init(kern_ctx *ctx, int32_t *counts, const int32_t *tokens, int n_tokens, int n_prompt,
                       int vocab);

/* For each row j < r of logits[r, vocab] whose params[j] has counts:
 *  1. count_token >= 0: counts[count_token] += 2 (one more generated token);
 *  2. per token v with c = counts[v], out = c >> 1, x = logits[j, v]:
 *       repetition (if > 0 and != 1) where c != 0 (prompt or output):
 *         x = x > 0 ? x / repetition : x * repetition      (HF, vLLM)
 *       x = x - frequency * out        where out > 0          (OpenAI)
 *       x = x - presence               where out > 0          (OpenAI)
 *     each step rounded to fp32 on its own (no fused multiply-add), so
 *     every backend gives the same bits;
 * then, for every row, logits[j, bias[k].token] += bias[k].bias (k < n_bias).
 * Rows without counts and bias are not touched (not even read), so a batch
 * without penalties gives bitwise the logits it had. params: [r] backend
 * memory. */
void kern_penalty_apply(kern_ctx *ctx, float *logits, const kern_sample_params *params, int r, int vocab);

/* --- collectives (tensor parallelism) --------------------------------------- */
/* A communicator: one rank of a group of n ranks, each with its own
 * kern_ctx (on CUDA, each its own device), that run the same sequence of
 * collectives. CUDA: NCCL, loaded at run time (dlopen of INFERD_NCCL_LIB,
 * else libnccl.so.2), so builds and runs without tensor parallelism do not
 * need it; NVLink multicast is kept off (NCCL_NVLS_ENABLE=0 unless the
 * environment says otherwise). CPU: the ranks are threads of this process
 * and meet in shared memory (the reference backend, so tensor parallelism
 * is testable without GPUs).
 * Collectives are ops: enqueued on the ctx's stream (CUDA: capturable in a
 * graph), every rank calling the same collectives in the same order from
 * its own thread. The CPU ones return when every rank has arrived. */
typedef struct kern_comm kern_comm;
#define KERN_COMM_ID_BYTES 128
/* One communicator per context of this process: out[r] is rank r's, for
 * ctxs[r] (all one backend; CUDA: distinct devices). n = 1 is valid (every
 * collective is then a copy or nothing). INFERD_ERR_UNAVAILABLE naming the
 * library when NCCL cannot be loaded. */
inferd_status kern_comm_create_local(kern_ctx *const *ctxs, int n, kern_comm **out);
/* Multi-process groups (CUDA only; INFERD_ERR_UNSUPPORTED on the CPU):
 * rank 0 makes the id, every process gets it out of band (dist/), then each
 * creates its rank (blocks until all n ranks have joined). */
inferd_status kern_comm_make_id(kern_backend b, unsigned char id[KERN_COMM_ID_BYTES]);
inferd_status kern_comm_create_rank(kern_ctx *ctx, const unsigned char id[KERN_COMM_ID_BYTES], int n, int rank,
                                    kern_comm **out);
/* A rank whose collectives the caller carries out (the CPU backend across
 * processes: tensor parallelism over several hosts without GPUs, and the
 * test of the multi-process path; the transport is dist/'s, which the
 * kernel layer does not know). Each collective of this rank calls the hook
 * with the same arguments and returns when it returns; the hook must give
 * the results the contract below states (rank-ordered fp32 sums rounded
 * once, as the CPU backend's own). CPU contexts only (UNSUPPORTED on CUDA,
 * whose ops are asynchronous: NCCL there). */
typedef struct {
    void (*all_reduce_sum)(void *user, void *buf, size_t count, kern_dtype dtype);
    void (*all_gather)(void *user, void *dst, const void *src, size_t bytes);
    void *user;
} kern_comm_hooks;
inferd_status kern_comm_create_hosted(kern_ctx *ctx, int n, int rank, const kern_comm_hooks *h, kern_comm **out);
void kern_comm_free(kern_comm *c);
int kern_comm_size(const kern_comm *c);
int kern_comm_rank(const kern_comm *c);
/* buf[count] of dtype, in place = the sum over ranks of each rank's buf
 * (the same bits on every rank; CPU: summed in rank order). */
void kern_all_reduce_sum(kern_ctx *ctx, kern_comm *c, void *buf, size_t count, kern_dtype dtype);
/* dst[n * bytes] = the concatenation of every rank's src[bytes] in rank
 * order, on every rank. */
void kern_all_gather(kern_ctx *ctx, kern_comm *c, void *dst, const void *src, size_t bytes);

/* --- CUDA graphs (decode steps) -------------------------------------------- */
/* A captured and instantiated sequence of ops on the ctx's stream. Capture
 * records every op enqueued between begin and end without running it; the
 * ops' pointer and scalar arguments are frozen, so whatever changes from one
 * replay to the next must live in device buffers the ops read (DESIGN.md
 * 4). No allocation, synchronization or d2h copy may happen while capturing;
 * cuBLASLt plans must already be cached (run the same shapes once first).
 * The CPU backend has no graphs: kern_graphs_supported is false there and
 * kern_graph_begin returns INFERD_ERR_UNSUPPORTED. */
typedef struct kern_graph kern_graph;
bool kern_graphs_supported(const kern_ctx *ctx);
inferd_status kern_graph_begin(kern_ctx *ctx);
/* End the capture begun by kern_graph_begin and instantiate it. On failure
 * (an op that cannot be captured) *out is NULL, the stream is usable again
 * and the status says why. */
inferd_status kern_graph_end(kern_ctx *ctx, kern_graph **out);
/* Enqueue one replay on the ctx's stream (asynchronous, like any op). */
void kern_graph_launch(kern_ctx *ctx, kern_graph *g);
void kern_graph_free(kern_ctx *ctx, kern_graph *g);
/* Splits the decode attention plan of the last kern_attention call used
 * (1 = no split, 0 = no decode sequence; always 1 on the CPU). Graph
 * capture uses it to share one graph between context buckets whose plans
 * do not split. */
int kern_attn_last_splits(const kern_ctx *ctx);

/* Page-locked host memory (CUDA: cudaMallocHost; CPU: plain memory), for
 * inputs copied by kern_memcpy_h2d while the host goes on: a copy from it is
 * truly asynchronous, so the source must stay unchanged until the stream
 * has passed the copy (kern_sync or a kern_memcpy_d2h after it). NULL on
 * failure. */
void *kern_host_alloc(kern_ctx *ctx, size_t bytes);
void kern_host_free(kern_ctx *ctx, void *p);

/* --- timers (profiling) ---------------------------------------------------- */
/* n time stamps recorded in stream order (CUDA: events on the ctx's stream;
 * CPU: the host clock, ops being synchronous there). kern_timer_ms is the
 * time from slot i to slot j in ms, once both were recorded and the stream
 * has passed them (after kern_sync or a d2h copy); a negative value when
 * not available. Recording is capture-unsafe: never inside a graph capture.
 * kern_timer_create returns NULL on failure. Not for the hot path unless a
 * profile was asked for. */
typedef struct kern_timer kern_timer;
kern_timer *kern_timer_create(kern_ctx *ctx, int n);
void kern_timer_record(kern_ctx *ctx, kern_timer *t, int i);
double kern_timer_ms(kern_ctx *ctx, kern_timer *t, int i, int j);
/* Block the host until the stream has passed slot i's record (CUDA:
 * cudaEventSynchronize; CPU: returns at once). A fence for the work
 * enqueued before the record, e.g. a kern_memcpy_d2h_async. */
void kern_timer_wait(kern_ctx *ctx, kern_timer *t, int i);
void kern_timer_free(kern_ctx *ctx, kern_timer *t);

/* --- device ceilings (benchmarks) ------------------------------------------ */
/* What the device can do at best, measured in this process: the copy
 * bandwidth of a large device-to-device copy (bytes read + written per
 * second) and the rate of a large GEMM in the backend's compute type (CUDA:
 * bf16 cuBLASLt, fp32 accumulate; CPU: the fp32 kern_matmul), both timed
 * with the backend's clock (CUDA events on the ctx's stream). */
typedef struct {
    double copy_gbps;     /* GB/s, 1e9 bytes */
    double gemm_tflops;   /* TFLOP/s, 2 m n k per GEMM */
    int64_t copy_bytes;   /* bytes of one copy */
    int gemm_m, gemm_n, gemm_k;
    char device[128];     /* device name */
} kern_ceilings;
/* Allocates its scratch (CUDA: about 1 GiB; CPU: about 200 MiB) and frees it
 * before returning; INFERD_ERR_NOMEM when it does not fit. Not for the hot
 * path. */
inferd_status kern_measure_ceilings(kern_ctx *ctx, kern_ceilings *out);

#ifdef __cplusplus
}
#endif

#endif
