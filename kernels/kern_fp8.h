/* kernels/kern_fp8.h: the fp8 e4m3 KV cache element (--kv-cache-dtype fp8),
 * converted in software: the CPU backend's cache, the CPU twins of the CUDA
 * kernels and the host emulator use these; the CUDA kernels use the
 * hardware conversions (kernels/cuda/common.cuh), which give the same bits
 * (test_fp8 checks every input class here, test_cuda_kernels the device
 * against these).
 *
 * e4m3 (OCP FP8, NVIDIA's __NV_E4M3): 1 sign, 4 exponent (bias 7), 3
 * mantissa bits; no infinities, S.1111.111 is NaN; largest finite 448,
 * smallest normal 2^-6, smallest subnormal 2^-9. Encoding rounds to nearest,
 * ties to even, and saturates to +-448 (finite inputs beyond it and
 * infinities; __NV_SATFINITE); NaN stays NaN. The scale is 1 (vLLM's
 * default k_scale = v_scale = 1.0 for an uncalibrated fp8 cache): the
 * values stored are the keys and values themselves.
 */
#ifndef INFERD_KERNELS_FP8_H
#define INFERD_KERNELS_FP8_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#define KERN_FP8_E4M3_MAX 448.0f

/* The e4m3 code of x: round to nearest even, saturating. */
static inline uint8_t kern_f32_to_e4m3(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    if (isnan(x))
        return (uint8_t)(sign | 0x7Fu);
    const float a = fabsf(x);
    if (a >= 464.0f) /* rounds past 448 (to 480, not a finite e4m3): saturate */
        return (uint8_t)(sign | 0x7Eu);
    int e;
    (void)frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1): floor(log2 a) = e - 1 */
    int E = a > 0.0f ? e - 1 : -6;
    if (E < -6)
        E = -6; /* the subnormal range: steps of 2^-9 */
    /* a / 2^(E - 3), exact (a power-of-two scale), rounded to an integer:
     * [8, 16] for a normal binade, [0, 8] below 2^-6 */
    int q = (int)rintf(ldexpf(a, 3 - E));
    if (q >= 16) { /* rounded up into the next binade */
        E++;
        q = 8;
    }
    if (q < 8) /* subnormal (E == -6): exponent field 0 */
        return (uint8_t)(sign | q);
    return (uint8_t)(sign | ((E + 7) << 3) | (q - 8));
}

/* The value of e4m3 code b (exact in fp32). */
static inline float kern_e4m3_to_f32(uint8_t b)
{
    const int E = (b >> 3) & 15, m = b & 7;
    float v;
    if (E == 15 && m == 7)
        v = NAN;
    else if (E == 0)
        v = ldexpf((float)m, -9);
    else
        v = ldexpf((float)(8 + m), E - 10);
    return (b & 0x80u) ? -v : v;
}

#endif
