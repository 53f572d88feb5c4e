/* XXH3 built for AVX2; hash.c uses it when the CPU has AVX2 (see there). Debian's libxxhash
 * (header-only mode of the same library, so the same algorithm and results) compiled with
 * -mavx2 for this file only. */
#include "common/hash_impl.h"

#if defined(__x86_64__)
#define XXH_INLINE_ALL
#include <xxhash.h>

uint64_t mc_hash64_avx2(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

void *mc_hash_state_new_avx2(void)
{
    XXH3_state_t *st = XXH3_createState();
    if (st)
        XXH3_64bits_reset(st);
    return st;
}

void mc_hash_state_update_avx2(void *st, const void *data, size_t len)
{
    XXH3_64bits_update(st, data, len);
}

uint64_t mc_hash_state_final_avx2(void *st)
{
    uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}
#endif
