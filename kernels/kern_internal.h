/* kernels/kern_internal.h: backend-private view of kern_ctx and the two
 * backends' entry points. kernels/dispatch.c routes each public kern_* call
 * to kcpu_* or kcuda_* with identical arguments. */
#ifndef INFERD_KERN_INTERNAL_H
#define INFERD_KERN_INTERNAL_H

#include "kernels/kern_limits.h"
#include "kernels/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

struct kern_ctx {
    kern_backend backend;
    int n_threads;  /* CPU backend */
    void *cuda;     /* CUDA backend state (kernels/cuda), NULL on CPU */
    kern_gemm_opts gemm; /* CUDA: small-batch GEMV choice (kern_gemm_config) */
    bool gemm_search_window; /* CUDA: kern_gemm_search_window */
};

/* The most tokens the CUDA GEMV kernel (kernels/cuda/gemv.cu) takes, and
 * the default of kern_ctx::gemv_max_n (INFERD_GEMV_MAX_N overrides it). */
#define KCUDA_GEMV_MAX_N 16
#define KCUDA_GEMV_DEFAULT_MAX_N 16
/* The default of kern_ctx::gemv_tc_min_n (INFERD_GEMV_TC_MIN_N overrides
 * it): plain products of 3..16 tokens on the GEMV's tensor-core form. On an
 * H100 (docs/PERF.md, tenth session) it ran Llama-3-8B decode steps at
 * batch 4 / 8 / 16 x 1k 7% / 6% / 3% faster than the CUDA-core GEMV to 4
 * tokens and cuBLASLt beyond; batch 1 and 2 stay on the CUDA-core GEMV
 * (fused layers). 3 - 1 = 2 is a graph ladder size, so a padded replay
 * picks the eager step's kernel. */
#define KCUDA_GEMV_DEFAULT_TC_MIN_N 3
/* The default of kern_ctx::gemv_lt_min_bytes (INFERD_GEMV_LT_MIN_BYTES
 * overrides it): products of 9..16 tokens (the tensor-core form's two
 * n-tiles) with weights of 200 MiB and more run on cuBLASLt. On an H200
 * (docs/PERF.md, seventeenth session) the form reads 16 tokens' inputs
 * for every 16 weight rows and its L2 traffic caps it at 77-83% of the
 * copy bandwidth on Llama-3-8B's gate/up, down and lm_head (cuBLASLt: 85-
 * 102%): batch 16 decode steps 5-6% faster with gate/up and lm_head on
 * cuBLASLt and the SiLU kernel beside it. Down (112 MiB) stays on the
 * form, as QKV and O (48 and 32 MiB) do: on an H100 (twenty-seventh
 * session) b16 x 1k was 1.1% faster that way than with down on cuBLASLt
 * (a 64 MiB switch), on the H200 even. 8 is a graph ladder size, so a
 * padded replay picks the eager step's kernel. */
#define KCUDA_GEMV_DEFAULT_LT_MIN_BYTES ((int64_t)200 << 20)
/* The default of kern_ctx::gemv_preload (INFERD_GEMV_PRELOAD overrides
 * it): at 1..2 tokens the O product copies 12 of each lane's 16 chunks of
 * Llama-3-8B's 4096-column rows (48 KiB a CTA) into shared memory while
 * the decode attention and its merge run, and the attention triggers its
 * dependents at its start. On an H200 (docs/PERF.md, twentieth session)
 * batch 1 decode steps 0.7-0.9% faster than without, batch 2 within noise
 * (4 and 8 chunks: within noise). */
#define KCUDA_GEMV_DEFAULT_PRELOAD 12
#define KCUDA_GEMV_MAX_PRELOAD 12 /* its bound: 48 KiB of shared memory a CTA at two rows a warp */
/* The most tokens of a fused GEMV (kern_matmul_fused), a size of the graph
 * ladder; larger batches run the unfused ops. Measured on an H100
 * (docs/PERF.md): fusing saves 4% of a step at batch 1 and 2, but costs 7%
 * at batch 4, where the GEMV's inner loop is no longer memory-bound. */
#define KCUDA_FUSE_MAX_N 2
/* Weights smaller than this stay on cuBLASLt at every n: not for speed,
 * to keep small models' numerics (see use_gemv in gemm.cu). */
#define KCUDA_GEMV_MIN_WEIGHT_BYTES ((int64_t)1 << 20)

/* Event timers (kern_timer_*): n slots, each a CUDA event (ev) or a host
 * time in seconds (host_s: CPU backend and the kernel emulator). */
struct kern_timer {
    int n;
    void **ev;      /* [n] cudaEvent_t, NULL on the CPU */
    double *host_s; /* [n] */
};

/* Declares one backend's op table with a given prefix. */
#define KERN_DECLARE_BACKEND(P)                                                                   \
    void P##_weight_upload(kern_ctx *ctx, kern_weight *w, int64_t row_offset, const void *src,    \
                           kern_dtype src_dtype, int64_t n_rows);                                 \
    void P##_weight_fill_random_part(kern_ctx *ctx, kern_weight *w, int64_t row, int64_t n_rows,  \
                                     uint64_t seed, float scale, int64_t src_row, int64_t src_col, \
                                     int64_t src_cols);                                           \
    inferd_status P##_weights_count_nonfinite(kern_ctx *ctx, const kern_weight *ws, int n,        \
                                              int64_t *counts);                                   \
    void P##_weight_scale_cols(kern_ctx *ctx, kern_weight *w, const kern_weight *g);              \
    void P##_embed(kern_ctx *ctx, void *out, const int32_t *tokens, int n, const kern_weight *t); \
    void P##_embed_shard(kern_ctx *ctx, void *out, const int32_t *tokens, int n,                  \
                         const kern_weight *t, int64_t vocab_begin);                              \
    void P##_add_rmsnorm(kern_ctx *ctx, void *out, void *resid, const void *add,                  \
                         const kern_weight *w, int n, float eps);                                 \
    void P##_matmul(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n);       \
    void P##_logits(kern_ctx *ctx, float *logits, const void *in, const kern_weight *w, int n);   \
    void P##_matmul_accum(kern_ctx *ctx, void *resid, const void *in, const kern_weight *w, int n); \
    bool P##_matmul_accum_fast(const kern_ctx *ctx, const kern_weight *w, int n);                 \
    bool P##_matmul_fusable(const kern_ctx *ctx, const kern_weight *w, int n);                    \
    bool P##_matmul_epi_fusable(const kern_ctx *ctx, const kern_weight *w, int n);                \
    void P##_matmul_fused(kern_ctx *ctx, void *out, const void *in, const kern_weight *w, int n,  \
                          const kern_fuse *f);                                                    \
    void P##_gather_rows(kern_ctx *ctx, void *out, const void *in, const int32_t *idx, int r,     \
                         int d);                                                                  \
    void P##_tokens_from(kern_ctx *ctx, int32_t *tokens, const int32_t *src, const int32_t *from, \
                         int n);                                                                  \
    void P##_silu_mul(kern_ctx *ctx, void *out, const void *gate_up, int n, int f);               \
    void P##_silu_mul_rms(kern_ctx *ctx, void *out, const void *gate_up, int n, int f,            \
                          const void *x, int d, float eps);                                       \
    void P##_f32_to_act(kern_ctx *ctx, void *out, const float *in, size_t count);                 \
    void P##_rope_kv_write(kern_ctx *ctx, const kern_rope_kv_params *p,                           \
                           const kern_qkv_epilogue *e);                                           \
    void P##_attention(kern_ctx *ctx, const kern_attn_params *p);                                 \
    size_t P##_attn_workspace_bytes(const kern_ctx *ctx, int max_tokens, int max_seqs,            \
                                    int n_heads, int head_dim, int max_seq_len);                  \
    void P##_sample(kern_ctx *ctx, int32_t *tokens, float *logits,                                \
                    const kern_sample_params *params, int r, int vocab, void *workspace);         \
    size_t P##_sample_workspace_bytes(const kern_ctx *ctx, int max_rows, int vocab);              \
    void P##_penalty_init(kern_ctx *ctx, int32_t *counts, const int32_t *tokens, int n_tokens,    \
                          int n_prompt, int vocab);                                               \
    void P##_penalty_apply(kern_ctx *ctx, float *logits, const kern_sample_params *params, int r, \
                           int vocab);

KERN_DECLARE_BACKEND(kcpu)

/* The device rules of kern_ctx_check_model (kernels/limits.c), apart so
 * that tests can give any device's limits: smem_per_block is the opt-in
 * dynamic shared memory per block in bytes (CUDA; ignored on the CPU). */
inferd_status kern_check_model_device(kern_backend b, const kern_model_shape *s, size_t smem_per_block);

/* CUDA backend lifecycle and memory (kernels/cuda). */
inferd_status kcuda_ctx_init(kern_ctx *ctx, int device_id);
void kcuda_ctx_free(kern_ctx *ctx);
bool kcuda_available(void);
int kcuda_device_count(void);
inferd_status kcuda_mem_info(kern_ctx *ctx, size_t *free_b, size_t *total_b);
void *kcuda_alloc(kern_ctx *ctx, size_t bytes);
void kcuda_free(kern_ctx *ctx, void *p);
void kcuda_memcpy_h2d(kern_ctx *ctx, void *dst, const void *src, size_t bytes);
void kcuda_memcpy_d2h(kern_ctx *ctx, void *dst, const void *src, size_t bytes);
void kcuda_memcpy_d2h_async(kern_ctx *ctx, void *dst, const void *src, size_t bytes);
void kcuda_memset0(kern_ctx *ctx, void *dst, size_t bytes);
void kcuda_sync(kern_ctx *ctx);
void kcuda_copy_2d(kern_ctx *ctx, void *dst, size_t dst_pitch, const void *src, size_t src_pitch, size_t width,
                   size_t height);
/* Opt-in dynamic shared memory per block of the ctx's device, bytes. */
size_t kcuda_smem_per_block(const kern_ctx *ctx);
KERN_DECLARE_BACKEND(kcuda)

/* Graphs, pinned memory and ceilings: kernels/cuda/graph.cu, ceilings.cu;
 * kernels/cpu/ceilings.c (the CPU backend has no graphs). */
inferd_status kcuda_graph_begin(kern_ctx *ctx);
inferd_status kcuda_graph_end(kern_ctx *ctx, kern_graph **out);
void kcuda_graph_launch(kern_ctx *ctx, kern_graph *g);
void kcuda_graph_free(kern_ctx *ctx, kern_graph *g);
int kcuda_attn_planned_splits(void);
void *kcuda_host_alloc(kern_ctx *ctx, size_t bytes);
void kcuda_host_free(kern_ctx *ctx, void *p);
inferd_status kcuda_measure_ceilings(kern_ctx *ctx, kern_ceilings *out);
inferd_status kcpu_measure_ceilings(kern_ctx *ctx, kern_ceilings *out);

/* Collectives (kern_comm_*; kernels/comm.c checks the arguments and
 * dispatches). impl: the CPU backend's shared group (kernels/cpu/comm.c) or
 * the CUDA backend's ncclComm_t (kernels/cuda/comm.cu). */
struct kern_comm {
    kern_backend backend;
    int rank, size;
    int device; /* CUDA: the device of the rank's ctx */
    void *impl;
    kern_comm_hooks hooks; /* hosted (kern_comm_create_hosted): the caller's collectives; impl NULL */
    bool hosted;
};
inferd_status kcpu_comm_create_local(kern_ctx *const *ctxs, int n, kern_comm **out);
void kcpu_comm_free(kern_comm *c);
void kcpu_all_reduce_sum(kern_ctx *ctx, kern_comm *c, void *buf, size_t count, kern_dtype dtype);
void kcpu_all_gather(kern_ctx *ctx, kern_comm *c, void *dst, const void *src, size_t bytes);
inferd_status kcuda_comm_create_local(kern_ctx *const *ctxs, int n, kern_comm **out);
inferd_status kcuda_comm_make_id(unsigned char id[KERN_COMM_ID_BYTES]);
inferd_status kcuda_comm_create_rank(kern_ctx *ctx, const unsigned char id[KERN_COMM_ID_BYTES], int n, int rank,
                                     kern_comm **out);
void kcuda_comm_free(kern_comm *c);
void kcuda_all_reduce_sum(kern_ctx *ctx, kern_comm *c, void *buf, size_t count, kern_dtype dtype);
void kcuda_all_gather(kern_ctx *ctx, kern_comm *c, void *dst, const void *src, size_t bytes);

/* Small-batch GEMV (kernels/cuda/gemv.cu): kcuda_gemv_fits says whether the
 * kernel takes the product, kcuda_gemv_route whether the ctx's options send
 * n tokens of w there (less the input's alignment); kcuda_gemv runs it
 * (out_f32: fp32 logits). */
bool kcuda_gemv_fits(const void *in, const kern_weight *w, int n);
bool kcuda_gemv_route(const kern_ctx *ctx, const kern_weight *w, int n);
void kcuda_gemv(kern_ctx *ctx, void *out, int out_f32, const void *in, const kern_weight *w, int n, bool pdl);
/* Chunks a lane the GEMV of an n-token product after the decode attention
 * copies into shared memory before its PDL wait (kern_gemm_opts.gemv_preload;
 * 0: none); the attention then triggers its dependents at its start. */
int kcuda_gemv_preload(const kern_ctx *ctx, int n);
/* Event timers on the ctx's stream (kernels/cuda/timer.cu). */
bool kcuda_timer_init(kern_ctx *ctx, kern_timer *t);
void kcuda_timer_record(kern_ctx *ctx, kern_timer *t, int i);
double kcuda_timer_ms(kern_ctx *ctx, kern_timer *t, int i, int j);
void kcuda_timer_wait(kern_ctx *ctx, kern_timer *t, int i);
void kcuda_timer_release(kern_ctx *ctx, kern_timer *t);

#ifdef __cplusplus
}
#endif

#endif
