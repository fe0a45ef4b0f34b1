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
#define KC_MMA_EMU_WARPS 16 /* warps a CTA of the emulated kernels may have (the folded decode plan: 16) */
/* NOTE: blocks run one at a time in the emulator, so a static per-warp
 * scratch is the warp's private exchange area. */
static uint32_t kc_mma_emu_a[KC_MMA_EMU_WARPS][32][4], kc_mma_emu_b[KC_MMA_EMU_WARPS][32][2];

static inline float kc_mma_emu_half(uint32_t u, int hi, bool f16)
{
    const uint16_t h = (uint16_t)(hi ? u >> 16 : u & 0xFFFFu);
    return f16 ? half_f16_to_f32(h) : kc_bf2f(h);
}

static inline void kc_mma_emu(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1, bool f16)
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
            s += kc_mma_emu_half(ar, k & 1, f16) * kc_mma_emu_half(br, k & 1, f16);
        }
        d[e] += s;
    }
    __syncwarp();
}
static inline void kc_mma_16816(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    kc_mma_emu(d, a, b0, b1, false);
}
static inline void kc_mma_16816_f16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    kc_mma_emu(d, a, b0, b1, true);
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
/* The same with f16 operands (the fp8 decode body: e4m3 converts to f16 in
 * one instruction). */
__device__ __forceinline__ void kc_mma_16816_f16(float d[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
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

/* 2^x with one MUFU.EX2 (ex2.approx.ftz: relative error ~2^-22, results
 * below 2^-126 flushed to 0, 2^-inf = 0), for softmax probabilities that
 * are rounded to bf16 next; exp2f adds a range check and two multiplies per
 * call to keep fp32 denormals (on the host emulator: exp2f). */
__device__ __forceinline__ float kc_ex2(float x)
{
#if defined(KEMU_H)
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}

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

/* Two floats -> packed f16 pair (x in the low half), round to nearest even. */
__device__ __forceinline__ uint32_t kc_pack_f16(float x, float y)
{
#if defined(KEMU_H)
    return (uint32_t)half_f32_to_f16(x) | ((uint32_t)half_f32_to_f16(y) << 16);
#else
    const __half2 v = __floats2half2_rn(x, y);
    return *(const uint32_t *)&v;
#endif
}

/* The warp's 8 x 8 matrix of b16 pairs, transposed: lane (g, c) gives
 * row g, columns 2c and 2c + 1 (low half first) and gets row g of the
 * transpose, i.e. elements (2c, g) and (2c + 1, g) (movmatrix.trans: a C
 * fragment's 8 x 8 block becomes a B fragment's). */
#if defined(KEMU_H)
static uint32_t kc_movm_emu[KC_MMA_EMU_WARPS][32];
static inline uint32_t kc_movmatrix_trans(uint32_t x)
{
    const int w = threadIdx.x >> 5, l = threadIdx.x & 31, g = l >> 2, c = l & 3;
    kc_movm_emu[w][l] = x;
    __syncwarp();
    /* element (r, col) sits in lane 4 r + col / 2, half col % 2 */
    const uint32_t lo = kc_movm_emu[w][4 * (2 * c) + g / 2] >> (16 * (g & 1)) & 0xFFFFu;
    const uint32_t hi = kc_movm_emu[w][4 * (2 * c + 1) + g / 2] >> (16 * (g & 1)) & 0xFFFFu;
    __syncwarp();
    return lo | hi << 16;
}
#else
__device__ __forceinline__ uint32_t kc_movmatrix_trans(uint32_t x)
{
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}
#endif

/* Bytes of a and b picked by the selector's nibbles (prmt, __byte_perm):
 * nibble i (0..7) of sel names byte i of the result among a's bytes 0..3
 * and b's 4..7. */
__device__ __forceinline__ uint32_t kc_prmt(uint32_t a, uint32_t b, uint32_t sel)
{
#if defined(KEMU_H)
    const uint64_t v = (uint64_t)a | (uint64_t)b << 32;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++)
        r |= (uint32_t)(v >> (8 * ((sel >> (4 * i)) & 7)) & 0xFFu) << (8 * i);
    return r;
#else
    return __byte_perm(a, b, sel);
#endif
}

/* --- warpgroup products (wgmma, sm_90a) -------------------------------------------
 * kc_wgmma<N, TB>: d (64 x N, fp32) = (scale_d ? d : 0) + A B for one
 * wgmma.mma_async m64nNk16 bf16 of the calling warpgroup (4 warps, 128
 * threads, all calling), A (64 x 16) from registers, B (16 x N) from shared
 * memory through a matrix descriptor. The caller brackets a run of them:
 * kc_wg_fence (accumulators and A written by ordinary instructions are
 * ready), the products, kc_wg_commit, kc_wg_wait<0> (the results are in d,
 * the shared operands free), then kc_wg_fence_regs on d so the compiler keeps
 * its uses after the wait. d is the C fragment array d[N / 8][4] of the
 * mma.sync kernels. Shared memory written by ordinary stores or
 * cp.async needs kc_fence_proxy_async in each writing thread, then a
 * barrier, before a product reads it.
 *
 * Fragments (PTX ISA, wgmma .m64nNk16; warp w of the warpgroup, lane l,
 * g = l / 4, c = l % 4): A as mma.m16n8k16's A for rows [16 w, +16); d[j][2 h
 * + e] = D[16 w + g + 8 h][8 j + 2 c + e], i.e. mma's C fragment for each
 * 8-column tile j.
 *
 * B in shared memory, 128-byte swizzle (the layout the tensor cores read
 * without bank conflicts): rows of 64 bf16 (128 bytes), 8-row atoms of
 * 1024 bytes aligned to 1024, the 16-byte chunk c of row r stored at chunk
 * c ^ (r % 8) (the hardware XORs address bits 4-6 with bits 7-9).
 * kc_wg_desc(p, lbo, sbo): start p (an atom's start plus, K-major, the
 * k-step's 32-byte offset within the row), byte strides LBO and SBO.
 * TB = 0 (K-major: B's rows are its n, 64 k a row): element (k, n) at
 * p + (n % 8) 128 + (n / 8) SBO + 2 k before the swizzle; LBO unused.
 * TB = 1 (N-major, the transposed B: rows are its k, 64 n a row): element
 * (k, n) at p + 2 (n % 64) + (n / 64) LBO + (k % 8) 128 + (k / 8) SBO
 * before the swizzle.
 *
 * Host emulator: the product is computed from the fragments and the
 * descriptor's reading of shared memory above (per-warpgroup scratch and a
 * warpgroup barrier, kemu.h), so the kernels' tiling, fragment indexing and
 * descriptor arithmetic run there; whether the hardware reads the layout the
 * same way only a GPU run of the kernel tests can tell. */
__host__ __device__ __forceinline__ uint64_t kc_wg_desc_bits(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr >> 4) & 0x3FFFu) | (uint64_t)((lbo >> 4) & 0x3FFFu) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFFu) << 32 | (uint64_t)1 << 62; /* base offset 0, 128-byte swizzle */
}
/* The descriptor of the operand `bytes` further on (16-byte multiple; the
 * start field cannot carry: shared addresses stay below 256 KiB). */
__host__ __device__ __forceinline__ uint64_t kc_wg_desc_add(uint64_t desc, uint32_t bytes)
{
    return desc + (bytes >> 4);
}
#if defined(KEMU_H)
#define KC_WG_EMU_GROUPS 2 /* warpgroups a CTA of the emulated kernels may have */
static uint32_t kc_wg_emu_a[KC_WG_EMU_GROUPS][128][4];

static inline uint64_t kc_wg_desc(const void *p, uint32_t lbo, uint32_t sbo)
{
    /* the emulator's dynamic shared memory stands for the shared window */
    return kc_wg_desc_bits((uint32_t)((const char *)p - (const char *)kemu_dyn_smem), lbo, sbo);
}
static inline void kc_wg_fence(void)
{
}
static inline void kc_wg_commit(void)
{
}
template <int N> static inline void kc_wg_wait(void)
{
}
template <int T> static inline void kc_wg_fence_regs(float (&)[T][4])
{
}
static inline void kc_fence_proxy_async(void)
{
}
template <int N, int TB>
static inline void kc_wgmma(float (&d)[N / 8][4], const uint32_t (&a)[4], uint64_t desc, int scale_d)
{
    const int wg = threadIdx.x / 128, t = threadIdx.x % 128, w = t / 32, l = t % 32, g = l / 4, c = l % 4;
    assert(wg < KC_WG_EMU_GROUPS);
    for (int i = 0; i < 4; i++)
        kc_wg_emu_a[wg][t][i] = a[i];
    kemu_syncwg(__LINE__);
    const size_t start = (size_t)(desc & 0x3FFFu) << 4; /* from the shared window's start */
    const uint32_t lbo = (uint32_t)((desc >> 16) & 0x3FFFu) << 4, sbo = (uint32_t)((desc >> 32) & 0x3FFFu) << 4;
    assert((desc >> 62) == 1); /* 128-byte swizzle */
    for (int j = 0; j < N / 8; j++)
        for (int h = 0; h < 2; h++)
            for (int e = 0; e < 2; e++) {
                const int row = g + 8 * h, col = 8 * j + 2 * c + e; /* row within warp w's 16 */
                float s = 0.0f;
                for (int k = 0; k < 16; k++) {
                    const int src = 32 * w + 4 * (row & 7) + (k & 7) / 2; /* the thread holding A[row][k] */
                    const uint32_t ar = kc_wg_emu_a[wg][src][(row >> 3) + 2 * (k >> 3)];
                    size_t addr = start + (TB == 0 ? (size_t)(col % 8) * 128 + (size_t)(col / 8) * sbo + (size_t)k * 2
                                                   : (size_t)(col % 64) * 2 + (size_t)(col / 64) * lbo +
                                                         (size_t)(k % 8) * 128 + (size_t)(k / 8) * sbo);
                    addr ^= ((addr >> 7) & 7) << 4; /* the 128-byte swizzle */
                    uint16_t b;
                    memcpy(&b, (const char *)kemu_dyn_smem + addr, 2);
                    s += kc_mma_emu_half(ar, k & 1, false) * kc_bf2f(b);
                }
                float &dst = d[j][2 * h + e];
                dst = (scale_d ? dst : 0.0f) + s;
            }
    kemu_syncwg(__LINE__);
}
#else
__device__ __forceinline__ uint64_t kc_wg_desc(const void *p, uint32_t lbo, uint32_t sbo)
{
    return kc_wg_desc_bits((uint32_t)__cvta_generic_to_shared(p), lbo, sbo);
}
__device__ __forceinline__ void kc_wg_fence(void)
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void kc_wg_commit(void)
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void kc_wg_wait(void)
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Ties the accumulator registers to this point, so the compiler neither
 * reads nor moves them across an asynchronous product's issue or wait. */
template <int T> __device__ __forceinline__ void kc_wg_fence_regs(float (&d)[T][4])
{
#pragma unroll
    for (int j = 0; j < T; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            asm volatile("" : "+f"(d[j][e])::"memory");
}
__device__ __forceinline__ void kc_fence_proxy_async(void)
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
#define KC_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define KC_F16(d, i) KC_F4(d, i), KC_F4(d, i + 4), KC_F4(d, i + 8), KC_F4(d, i + 12)
#define KC_F32(d, i) KC_F16(d, i), KC_F16(d, i + 16)
template <int N, int TB>
__device__ __forceinline__ void kc_wgmma(float (&c)[N / 8][4], const uint32_t (&a)[4], uint64_t desc, int scale_d)
{
    static_assert(N == 64 || N == 128, "kc_wgmma: N 64 or 128");
    float *d = &c[0][0]; /* the fragment's registers in order, d[4 j + e] = c[j][e] */
    if constexpr (N == 64) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                     "{%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : KC_F32(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(TB));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
                     "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
                     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
                     "{%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                     : KC_F32(d, 0), KC_F32(d, 32)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc), "r"(scale_d), "n"(TB));
    }
}
#undef KC_F32
#undef KC_F16
#undef KC_F4
#endif

#endif
