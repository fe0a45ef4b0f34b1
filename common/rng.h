/* common/rng.h: counter-based random numbers for sampling.
 *
 * A request's draw for its n-th generated token is a pure function of
 * (seed, n): the same seed gives the same tokens whether the request runs
 * alone or batched, on any backend, after preemption and recompute. The mixer
 * is splitmix64 applied twice; usable from host and CUDA device code.
 */
#ifndef INFERD_COMMON_RNG_H
#define INFERD_COMMON_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define RNG_FN static inline __host__ __device__
#else
#define RNG_FN static inline
#endif

RNG_FN uint64_t rng_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Uniform double in [0, 1) for draw `counter` of stream `seed`. */
RNG_FN double rng_uniform(uint64_t seed, uint64_t counter)
{
    uint64_t x = rng_mix64(rng_mix64(seed) ^ (counter * 0xD1B54A32D192ED03ull));
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

#endif
