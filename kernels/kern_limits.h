/* kernels/kern_limits.h: the shape limits of each backend's kernels, written
 * once. The kernels size their stack buffers, shared memory and launch grids
 * from these numbers, and kernels/limits.c (kern_check_model) checks a model
 * against the same numbers at load, so a model the kernels cannot run is an
 * error naming the field at load, never an abort at the first request.
 * Plain C: included by the CPU sources, the CUDA sources and limits.c (which
 * is compiled in every build, so the CUDA rules are testable without a GPU).
 */
#ifndef INFERD_KERN_LIMITS_H
#define INFERD_KERN_LIMITS_H

#include <stddef.h>
#include <stdint.h>

/* CPU attention keeps a head's output accumulator (acc[head_dim]) and RoPE
 * a token's cos/sin tables (head_dim / 2 each) in fixed-size stack buffers
 * (cpu/attention.c attn_state, cpu/ops.c kcpu_rope_kv_write). */
#define KERN_CPU_MAX_HEAD_DIM 512

/* CUDA attention, decode and prefill (cuda/attention_*.cu): a lane holds 8
 * consecutive dims of a head, read with one 16-byte load of 8 bf16, and
 * there is no scalar path, so head_dim must be a multiple of 8. Decode uses
 * tg lanes per key with tg * 8 >= head_dim, tg <= 32 (a warp), and a
 * [4 warps][8 heads][256] fp32 shared accumulator (32 KiB of the 48 KiB of
 * static shared memory): head_dim <= 256. */
#define KERN_CUDA_ATTN_DIM_MULTIPLE 8
#define KERN_CUDA_ATTN_MAX_HEAD_DIM 256

/* CUDA RoPE (cuda/ops.cu kcuda_rope_kv_write) checks head_dim <= 1024 (its
 * cos/sin tables are dynamic shared memory); attention's limit is tighter. */
#define KERN_CUDA_ROPE_MAX_HEAD_DIM 1024

/* CUDA prefill attention tile (cuda/attention_prefill.cu): 32 query rows x
 * 32 keys per step; Q, K, V, O tiles of 32 x (head_dim + 4) fp32 plus the
 * 32 x 33 probabilities in dynamic shared memory, which must fit the
 * device's opt-in limit per block (134 KiB at head_dim 256: fine on sm_80
 * and sm_90, too large on GPUs with 99 KiB or less). */
#define KERN_CUDA_PREFILL_BQ 32
#define KERN_CUDA_PREFILL_BK 32
static inline size_t kern_cuda_prefill_smem_bytes(int64_t head_dim)
{
    return ((size_t)4 * KERN_CUDA_PREFILL_BQ * (size_t)(head_dim + 4) +
            (size_t)KERN_CUDA_PREFILL_BQ * (KERN_CUDA_PREFILL_BK + 1)) *
           sizeof(float);
}

/* CUDA launch grids: dimensions y and z are at most 65535. The prefill and
 * split-merge attention grids put the query heads on y, the prefill grid
 * puts the step's query tiles (KERN_CUDA_PREFILL_BQ rows each) on z. */
#define KERN_CUDA_MAX_GRID_YZ 65535

/* CUDA sampler (cuda/sample.cu): one 1024-thread block per row whose loops
 * step an int index over the vocabulary by the block size. */
#define KERN_CUDA_SAMPLE_THREADS 1024

/* Both backends: RoPE turns the int32 position into an fp32 angle factor,
 * exact only up to 2^24. */
#define KERN_MAX_POSITION (1 << 24)

#endif
