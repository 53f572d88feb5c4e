#include "common/hash.h"

#include <string.h>
#include <xxhash.h>

uint64_t mc_hash64(const void *data, size_t len)
{
    return XXH3_64bits(data, len);
}

uint64_t mc_hash64_seed(const void *data, size_t len, uint64_t seed)
{
    return XXH3_64bits_withSeed(data, len, seed);
}

uint64_t mc_hash_str(const char *s)
{
    return XXH3_64bits(s, strlen(s));
}

int mc_hash_stream_init(mc_hash_stream_t *hs)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return -1;
    XXH3_64bits_reset(st);
    hs->state = st;
    return 0;
}

void mc_hash_stream_update(mc_hash_stream_t *hs, const void *data, size_t len)
{
    XXH3_64bits_update(hs->state, data, len);
}

uint64_t mc_hash_stream_final(mc_hash_stream_t *hs)
{
    uint64_t h = XXH3_64bits_digest(hs->state);
    XXH3_freeState(hs->state);
    hs->state = NULL;
    return h;
}
