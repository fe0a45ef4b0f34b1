/* kernels/cuda/tma.cuh: Hopper's tensor memory accelerator (TMA) and the
 * shared-memory barriers (mbarrier) its copies complete on, for kernels
 * whose loads come from one producer thread (the warpgroup GEMM,
 * gemm_wg.cu).
 *
 * Host: kc_tmap (a CUtensorMap) describes a bf16 tensor of up to three
 * dimensions in global memory (dims innermost first, byte strides of the
 * outer two) and the box one copy moves, stored in shared memory in the
 * 128-byte swizzle the wgmma descriptors read (mma.cuh: the 16-byte chunk
 * c of 128-byte row r at chunk c ^ (r % 8), from a 1024-byte aligned
 * start); elements outside the tensor arrive as zeros, and the box's
 * whole size counts toward the barrier's bytes. kc_tmap_encode fills one
 * (false where the driver refuses the shape); the driver's encoder is
 * looked up once by kc_tmap_init.
 *
 * Device: kc_mbar_init (count arrivals a phase), kc_mbar_arrive,
 * kc_mbar_arrive_tx (an arrival that also expects `bytes` of copies),
 * kc_mbar_wait (until the phase of the given parity has completed),
 * kc_tma_load (one box to shared memory, completing on a barrier; with
 * an L2 policy such as kc_l2_evict_first's as a hint).
 * kc_globaltimer reads the device's nanosecond clock (a kernel's phase
 * trace). Clusters (a launch with a cluster dimension, kc_launch_cluster): the
 * CTA's rank in its cluster (kc_cluster_rank), a barrier of every thread
 * of the cluster's CTAs whose shared-memory writes before it are visible
 * to every CTA of the cluster after it (kc_cluster_sync), and reads of a
 * peer CTA's shared memory at the address of the same variable in this
 * CTA's (kc_dsmem_ld4, kc_dsmem_ld: distributed shared memory; the peer
 * must not exit before the reads are done).
 * A barrier's phase completes when its arrivals and its expected bytes
 * are all in; waiting on parity p returns once the barrier's current
 * phase parity is not p (so a fresh barrier's "previous" phase, parity
 * 1, reads as complete: the producer's first pass through a ring waits on
 * nothing).
 *
 * Host emulator (kemu.h): the copy is made at once (swizzle and zero fill
 * included) and the barrier is a counter word in shared memory; a wait
 * yields to the other threads' fibers, and aborts after a million yields
 * (a deadlock). A cluster's CTAs run together as fibers (kemu_launch's
 * cluster size), each with its own shared memory.
 */
#ifndef INFERD_KERNELS_CUDA_TMA_CUH
#define INFERD_KERNELS_CUDA_TMA_CUH

#include "kernels/cuda/common.cuh"

#if defined(KEMU_H)
/* What the emulated copy needs of a tensor map. */
typedef struct {
    const char *base;
    uint64_t dims[3], strides[2]; /* elements; bytes of dims 1 and 2 */
    uint32_t box[3];
} kc_tmap;

static inline bool kc_tmap_init(void)
{
    return true;
}

static inline bool kc_tmap_encode(kc_tmap *m, const void *base, const uint64_t dims[3], const uint64_t strides[2],
                                  const uint32_t box[3])
{
    m->base = (const char *)base;
    for (int i = 0; i < 3; i++) {
        m->dims[i] = dims[i];
        m->box[i] = box[i];
    }
    m->strides[0] = strides[0];
    m->strides[1] = strides[1];
    return box[0] * 2 == 128 && ((uintptr_t)base & 15) == 0 && strides[0] % 16 == 0 && strides[1] % 16 == 0;
}

/* The barrier word: phase (bit 31), arrivals a phase (bits 16..30),
 * arrivals still due (bits 0..15); then the bytes still due. */
typedef struct {
    uint32_t state;
    int32_t tx;
} kc_mbar_emu;

static inline void kc_mbar_init(uint64_t *bar, uint32_t count)
{
    kc_mbar_emu *b = (kc_mbar_emu *)bar;
    b->state = count << 16 | count;
    b->tx = 0;
}
static inline void kc_mbar_fence_init(void)
{
}
/* The phase completes when nothing is due: the next starts with every arrival due. */
static inline void kc_mbar_emu_step(kc_mbar_emu *b)
{
    const uint32_t count = (b->state >> 16) & 0x7FFFu;
    if ((b->state & 0xFFFFu) == 0 && b->tx == 0)
        b->state = ((b->state & 0x80000000u) ^ 0x80000000u) | count << 16 | count;
}
static inline void kc_mbar_arrive(uint64_t *bar)
{
    kc_mbar_emu *b = (kc_mbar_emu *)bar;
    assert((b->state & 0xFFFFu) > 0);
    b->state--;
    kc_mbar_emu_step(b);
}
static inline void kc_mbar_arrive_tx(uint64_t *bar, uint32_t bytes)
{
    ((kc_mbar_emu *)bar)->tx += (int32_t)bytes;
    kc_mbar_arrive(bar);
}
static inline void kc_mbar_wait(uint64_t *bar, uint32_t parity)
{
    for (long spins = 0; (((kc_mbar_emu *)bar)->state >> 31) == parity; spins++) {
        if (spins > 1000000) {
            fprintf(stderr, "KEMU: mbarrier wait never completes (block %u thread %d)\n", blockIdx.x, kemu_tid);
            abort();
        }
        kemu_yield();
    }
}
static inline uint64_t kc_l2_evict_first(void)
{
    return 0;
}
static inline void kc_tma_load(void *dst, const kc_tmap *m, int c0, int c1, int c2, uint64_t *bar,
                               uint64_t policy = 0, bool hint = false)
{
    (void)policy;
    (void)hint;
    const size_t base = (size_t)((char *)dst - (char *)kemu_dyn_smem);
    size_t o = 0;
    for (uint32_t z = 0; z < m->box[2]; z++)
        for (uint32_t y = 0; y < m->box[1]; y++)
            for (uint32_t x = 0; x < m->box[0]; x++, o += 2) {
                const int64_t gx = (int64_t)c0 + x, gy = (int64_t)c1 + y, gz = (int64_t)c2 + z;
                uint16_t v = 0;
                if (gx >= 0 && gy >= 0 && gz >= 0 && (uint64_t)gx < m->dims[0] && (uint64_t)gy < m->dims[1] &&
                    (uint64_t)gz < m->dims[2])
                    memcpy(&v, m->base + gz * m->strides[1] + gy * m->strides[0] + gx * 2, 2);
                size_t a = base + o;
                a ^= ((a >> 7) & 7) << 4; /* the 128-byte swizzle */
                memcpy((char *)kemu_dyn_smem + a, &v, 2);
            }
    kc_mbar_emu *b = (kc_mbar_emu *)bar;
    b->tx -= (int32_t)o;
    kc_mbar_emu_step(b);
}

/* A stand-in for the global nanosecond timer: it only increases. */
static inline unsigned long long kc_globaltimer(void)
{
    static unsigned long long t;
    return ++t;
}
static inline uint32_t kc_cluster_rank(void)
{
    return (uint32_t)kemu_cluster_rank;
}
static inline void kc_cluster_sync(void)
{
    kemu_cluster_sync(__LINE__);
}
/* p: in this CTA's dynamic shared memory; the same offset in CTA rank's */
static inline const char *kc_dsmem_emu(const void *p, uint32_t rank)
{
    const size_t o = (size_t)((const char *)p - (const char *)kemu_dyn_smem);
    assert(rank < (uint32_t)kemu_cluster_n);
    return (const char *)kemu_cluster_smem[rank] + o;
}
static inline float4 kc_dsmem_ld4(const void *p, uint32_t rank)
{
    float4 v;
    memcpy(&v, kc_dsmem_emu(p, rank), sizeof v);
    return v;
}
static inline float kc_dsmem_ld(const float *p, uint32_t rank)
{
    float v;
    memcpy(&v, kc_dsmem_emu(p, rank), sizeof v);
    return v;
}
#else
#include <cuda.h>
#include <cudaTypedefs.h>

typedef CUtensorMap kc_tmap;

/* The driver's encoder, looked up by kc_tmap_init (through the runtime, so
 * the backend does not link the driver library itself). */
static PFN_cuTensorMapEncodeTiled_v12000 kc_tmap_encoder;

static inline bool kc_tmap_init(void)
{
    if (kc_tmap_encoder)
        return true;
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess || !fn) {
        (void)cudaGetLastError();
        return false;
    }
    kc_tmap_encoder = (PFN_cuTensorMapEncodeTiled_v12000)fn;
    return true;
}

static inline bool kc_tmap_encode(kc_tmap *m, const void *base, const uint64_t dims[3], const uint64_t strides[2],
                                  const uint32_t box[3])
{
    const cuuint64_t gd[3] = {dims[0], dims[1], dims[2]}, gs[2] = {strides[0], strides[1]};
    const cuuint32_t bx[3] = {box[0], box[1], box[2]}, es[3] = {1, 1, 1};
    return kc_tmap_encoder &&
           kc_tmap_encoder(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void *>(base), gd, gs, bx, es,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

__device__ __forceinline__ uint32_t kc_smem_addr(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void kc_mbar_init(uint64_t *bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(kc_smem_addr(bar)), "r"(count) : "memory");
}
/* After the inits, before the barrier that publishes them: the barriers
 * visible to the copy engine too. */
__device__ __forceinline__ void kc_mbar_fence_init(void)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void kc_mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(kc_smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void kc_mbar_arrive_tx(uint64_t *bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(kc_smem_addr(bar)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void kc_mbar_wait(uint64_t *bar, uint32_t parity)
{
    const uint32_t a = kc_smem_addr(bar);
    uint32_t done;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(a), "r"(parity)
                     : "memory");
    } while (!done);
}
/* An L2 policy for kc_tma_load's hint: lines read under it are evicted
 * first (data streamed once, as a product's weights). */
__device__ __forceinline__ uint64_t kc_l2_evict_first(void)
{
    uint64_t p;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(p));
    return p;
}
/* m: the address of a __grid_constant__ kernel parameter (the copy engine
 * reads the map from there); with hint, the read goes through the L2
 * under policy. */
__device__ __forceinline__ void kc_tma_load(void *dst, const kc_tmap *m, int c0, int c1, int c2, uint64_t *bar,
                                            uint64_t policy = 0, bool hint = false)
{
    if (hint)
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
                     "[%0], [%1, {%2, %3, %4}], [%5], %6;\n" ::"r"(kc_smem_addr(dst)),
                     "l"(m), "r"(c0), "r"(c1), "r"(c2), "r"(kc_smem_addr(bar)), "l"(policy)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, "
                     "%4}], [%5];\n" ::"r"(kc_smem_addr(dst)),
                     "l"(m), "r"(c0), "r"(c1), "r"(c2), "r"(kc_smem_addr(bar))
                     : "memory");
}

/* The device's global nanosecond timer (the same clock on every SM). */
__device__ __forceinline__ unsigned long long kc_globaltimer(void)
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
    return t;
}
__device__ __forceinline__ uint32_t kc_cluster_rank(void)
{
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
    return r;
}
/* Every thread of every CTA of the cluster (warp-uniform: .aligned). */
__device__ __forceinline__ void kc_cluster_sync(void)
{
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t kc_dsmem_addr(const void *p, uint32_t rank)
{
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(r) : "r"(kc_smem_addr(p)), "r"(rank));
    return r;
}
__device__ __forceinline__ float4 kc_dsmem_ld4(const void *p, uint32_t rank)
{
    float4 v;
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                 : "r"(kc_dsmem_addr(p, rank))
                 : "memory");
    return v;
}
__device__ __forceinline__ float kc_dsmem_ld(const float *p, uint32_t rank)
{
    float v;
    asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(kc_dsmem_addr(p, rank)) : "memory");
    return v;
}
#endif

#endif
