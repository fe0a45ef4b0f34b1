/* kernels/cuda/mma.cuh: the warp-level tensor-core product both tensor-core
 * kernels use (attention_prefill_tc.cu, the tensor-core GEMV in gemv.cu):
 * kc_mma_16816, d += A B for one mma.sync m16n8k16 tile, bf16 in, fp32
 * accumulators; the ldmatrix loads and bf16 packing of the attention kernels
 * (kc_ldsm_x4, kc_pack_bf16).
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 .bf16, lane l, g = l / 4, c = l % 4):
 *   A (16 x 16, row major) a[0] = A[g][2c..2c+1], a[1] = A[g+8][2c..], a[2] = A[g][2c+8..],
 *                          a[3] = A[g+8][2c+8..]
 *   B (16 x 8, k x n)      b0 = B[2c..2c+1][g], b1 = B[2c+8..2c+9][g]
 *   C/D (16 x 8, fp32)     d[0] = C[g][2c], d[1] = C[g][2c+1], d[2] = C[g+8][2c], d[3] = C[g+8][2c+1]
 * The lower 16 bits of a b32 register hold the element with the smaller
 * column (A, C) or row (B) index.
 *
 * Host emulator (tests/kernels/cuda/emu): a second body reproduces the
 * fragment layout exactly through a per-warp scratch and __syncwarp (the
 * dot product of each output summed in k order, then added).
 */
#ifndef INFERD_KERNELS_CUDA_MMA_CUH
#define INFERD_KERNELS_CUDA_MMA_CUH

#include "kernels/cuda/common.cuh"

#if defined(KEMU_H)
#define KC_MMA_EMU_WARPS 8 /* warps a CTA of the emulated kernels may have */
/* NOTE: blocks run one at a time in the emulator, so a static per-warp
 * scratch is the warp's private exchange area. */
static uint32_t kc_mma_emu_a[KC_MMA_EMU_WARPS][32][4], kc_mma_emu_b[KC_MMA_EMU_WARPS][32][2];

static inline float kc_mma_emu_half(uint32_t u, int hi)
{
    return kc_bf2f((uint16_t)(hi ? u >> 16 : u & 0xFFFFu));
}

static inline void kc_mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, c = l & 3;
    assert(w < KC_MMA_EMU_WARPS);
    for (int i = 0; i < 4; i++)
        kc_mma_emu_a[w][l][i] = a[i];
    kc_mma_emu_b[w][l][0] = b0;
    kc_mma_emu_b[w][l][1] = b1;
    __syncwarp();
    for (int e = 0; e < 4; e++) {
        const int row = g + (e >> 1) * 8, col = 2 * c + (e & 1);
        float s = 0.0f;
        for (int k = 0; k < 16; k++) {
            const uint32_t ar = kc_mma_emu_a[w][4 * (row & 7) + (k & 7) / 2][(row >> 3) + 2 * (k >> 3)];
            const uint32_t br = kc_mma_emu_b[w][4 * col + (k & 7) / 2][k >> 3];
            s += kc_mma_emu_half(ar, k & 1) * kc_mma_emu_half(br, k & 1);
        }
        d[e] += s;
    }
    __syncwarp();
}
#else
/* d += A B, one m16n8k16 bf16 tile with fp32 accumulators. */
__device__ __forceinline__ void kc_mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
                 "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif

/* ldmatrix .x4 (shared memory, b16): lane l gives the address of row l % 8
 * of matrix l / 8; register i gets matrix i's (row g, elements 2c, 2c+1),
 * with .trans (elements (2c, g), (2c+1, g)). */
#if defined(KEMU_H)
static const uint16_t *kc_ldsm_emu_p[KC_MMA_EMU_WARPS][32] __attribute__((unused));

static inline void kc_ldsm_x4(uint32_t r[4], const uint16_t *p, bool trans)
{
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, c = l & 3;
    kc_ldsm_emu_p[w][l] = p;
    __syncwarp();
    for (int i = 0; i < 4; i++) {
        if (!trans) {
            memcpy(&r[i], kc_ldsm_emu_p[w][i * 8 + g] + 2 * c, 4);
        } else {
            const uint32_t lo = kc_ldsm_emu_p[w][i * 8 + 2 * c][g], hi = kc_ldsm_emu_p[w][i * 8 + 2 * c + 1][g];
            r[i] = lo | hi << 16;
        }
    }
    __syncwarp();
}
#else
__device__ __forceinline__ void kc_ldsm_x4(uint32_t r[4], const uint16_t *p, bool trans)
{
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    if (trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(s));
}
#endif

/* Two floats -> packed bf16 pair (x in the low half), round to nearest even
 * (on the device one F2FP instruction; the same bits as two kc_f2bf). */
__device__ __forceinline__ uint32_t kc_pack_bf16(float x, float y)
{
#if defined(KEMU_H)
    return (uint32_t)kc_f2bf(x) | ((uint32_t)kc_f2bf(y) << 16);
#else
    const __nv_bfloat162 v = __floats2bfloat162_rn(x, y);
    return *(const uint32_t *)&v;
#endif
}

#endif
