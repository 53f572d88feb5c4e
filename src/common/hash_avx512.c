/* XXH3 built for AVX-512 (F and BW); hash.c uses it when the CPU has both (see there). The same
 * header-only library as hash_avx2.c, compiled with -mavx512f -mavx512bw for this file only, so
 * the same algorithm and results. */
#include "common/hash_impl.h"

#if defined(__x86_64__)
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t mc_hash64_avx512(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

void *mc_hash_state_new_avx512(void)
{
    XXH3_state_t *st = XXH3_createState();
    if (st)
        XXH3_64bits_reset(st);
    return st;
}

void mc_hash_state_update_avx512(void *st, const void *data, size_t len)
{
    XXH3_64bits_update(st, data, len);
}

uint64_t mc_hash_state_final_avx512(void *st)
{
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}
#endif
