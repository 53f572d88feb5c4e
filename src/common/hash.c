/* XXH3-64 hashing and checksums (hash.h): one-shot and streaming, seed 0 unless given. Picks
 * the AVX2 build of XXH3 (hash_avx2.c) when the CPU has it, Debian's libxxhash otherwise; both
 * give the same values, so checksums stay comparable across hosts. */
#include "common/hash.h"

#include "common/hash_impl.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Which build of XXH3 runs. Debian's libxxhash is compiled for baseline x86-64 (SSE2): 15.5 GB/s
 * on 32 MiB here, while the same code built for AVX2 ran 35 GB/s (and the library's own
 * dispatcher picks its AVX-512 path, 16.5 GB/s on these VMs); every get and put hashes its
 * whole value, so the AVX2 build is used when the CPU has AVX2. Results are identical
 * (tests/common: test_hash_builds_agree). */
static bool use_avx2(void)
{
#if defined(__x86_64__)
    static _Atomic int cached = -1; /* threads may race to fill it: same answer for all */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") != 0; /* a feature bit, not 1 */
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v == 1;
#else
    return false;
#endif
}

const char *mc_hash_build(void)
{
    return use_avx2() ? "avx2" : "baseline";
}

uint64_t mc_hash64(const void *data, size_t len)
{
    return mc_hash64_seed(data, len, 0);
}

uint64_t mc_hash64_seed(const void *data, size_t len, uint64_t seed)
{
#if defined(__x86_64__)
    if (use_avx2())
        return mc_hash64_avx2(data, len, seed);
#endif
    return XXH3_64bits_withSeed(data, len, seed);
}

/* How much of the next copy's source mc_hash64_copy prefetches: 4 lines start the page walk
 * and the hardware's streaming of the page while this value is hashed. */
#define COPY_AHEAD 256

/* Values under MC_HASH_COPY_CHUNKED_MIN are copied whole (memcpy) and then hashed from dst, which
 * they still occupy in the first-level caches, larger ones by hash_avx2.c (by chunks in the same
 * way, or in one pass with streaming stores): the copy's loads run at memcpy's depth (a fused
 * loop, whose loads wait on the hash's arithmetic, ran 4 KiB values ~15 % slower from memory than
 * copy-then-hash when they lay apart, as a store's values do). The hash is arithmetic on cached
 * bytes; next's first lines, asked for before it, arrive meanwhile (4 KiB values at scattered
 * places in memory: 0.44 against 0.65 us a value copied and hashed, a copy alone 0.42). */
uint64_t mc_hash64_copy(void *dst, const void *src, size_t len, const void *next)
{
#if defined(__x86_64__)
    if (len >= MC_HASH_COPY_CHUNKED_MIN && use_avx2())
        return mc_hash64_copy_avx2(dst, src, len);
#endif
    memcpy(dst, src, len);
    for (size_t off = 0; next && off < COPY_AHEAD; off += 64)
        __builtin_prefetch((const char *)next + off);
    return mc_hash64(dst, len);
}

uint64_t mc_hash_str(const char *s)
{
    return mc_hash64(s, strlen(s));
}

int mc_hash_stream_init(mc_hash_stream_t *hs)
{
#if defined(__x86_64__)
    if (use_avx2()) {
        hs->state = mc_hash_state_new_avx2();
        return hs->state ? 0 : -1;
    }
#endif
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return -1;
    XXH3_64bits_reset(st);
    hs->state = st;
    return 0;
}

void mc_hash_stream_update(mc_hash_stream_t *hs, const void *data, size_t len)
{
#if defined(__x86_64__)
    if (use_avx2()) {
        mc_hash_state_update_avx2(hs->state, data, len);
        return;
    }
#endif
    XXH3_64bits_update(hs->state, data, len);
}

uint64_t mc_hash_stream_final(mc_hash_stream_t *hs)
{
    uint64_t h;
#if defined(__x86_64__)
    if (use_avx2()) {
        h = mc_hash_state_final_avx2(hs->state);
        hs->state = NULL;
        return h;
    }
#endif
    h = XXH3_64bits_digest(hs->state);
    XXH3_freeState(hs->state);
    hs->state = NULL;
    return h;
}

void mc_hash_stream_move(mc_hash_stream_t *dst, mc_hash_stream_t *src)
{
    XXH3_freeState(dst->state); /* both builds keep an XXH3_state_t; NULL: nothing to free */
    dst->state = src->state;
    src->state = NULL;
}

int mc_hash_stream_copy(mc_hash_stream_t *dst, const mc_hash_stream_t *src)
{
    /* both builds keep an XXH3_state_t (hash_avx2.c allocates it too) */
    if (mc_hash_stream_init(dst) != 0)
        return -1;
    XXH3_copyState(dst->state, src->state);
    return 0;
}
