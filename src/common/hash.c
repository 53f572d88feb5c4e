/* XXH3-64 hashing and checksums (hash.h): one-shot and streaming, seed 0 unless given. Picks
 * the AVX-512 (hash_avx512.c) or AVX2 (hash_avx2.c) build of XXH3 when the CPU has it, Debian's
 * libxxhash otherwise; all give the same values, so checksums stay comparable across hosts. */
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
 * whole value, so the AVX2 build is used when the CPU has AVX2, and the AVX-512 build when it
 * also has AVX-512 F and BW: 89 ns against 104 ns for a 4 KiB value in the first-level cache,
 * 47 against 40 GB/s on 64 KiB, here. The AVX2 file keeps the fused copy of large values
 * (mc_hash64_copy). Results are identical (tests/common: test_hash_builds_agree). */
enum { BUILD_BASE, BUILD_AVX2, BUILD_AVX512 };

static int build(void)
{
#if defined(__x86_64__)
    static _Atomic int cached = -1; /* threads may race to fill it: same answer for all */
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        __builtin_cpu_init();
        /* feature bits, not 1 */
        bool avx2 = __builtin_cpu_supports("avx2") != 0;
        bool avx512 = avx2 && __builtin_cpu_supports("avx512f") != 0 &&
                      __builtin_cpu_supports("avx512bw") != 0;
        v = avx512 ? BUILD_AVX512 : avx2 ? BUILD_AVX2 : BUILD_BASE;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
#else
    return BUILD_BASE;
#endif
}

const char *mc_hash_build(void)
{
    static const char *const names[] = {"baseline", "avx2", "avx512"};
    return names[build()];
}

uint64_t mc_hash64(const void *data, size_t len)
{
    return mc_hash64_seed(data, len, 0);
}

uint64_t mc_hash64_seed(const void *data, size_t len, uint64_t seed)
{
#if defined(__x86_64__)
    switch (build()) {
    case BUILD_AVX512:
        return mc_hash64_avx512(data, len, seed);
    case BUILD_AVX2:
        return mc_hash64_avx2(data, len, seed);
    }
#endif
    return XXH3_64bits_withSeed(data, len, seed);
}

uint64_t mc_hash64_copy(void *dst, const void *src, size_t len)
{
#if defined(__x86_64__)
    if (build() == BUILD_AVX512 && len < MC_HASH_COPY_FUSED_MIN) {
        memcpy(dst, src, len); /* as mc_hash64_copy_avx2 below this size, hashed faster */
        return mc_hash64_avx512(dst, len, 0);
    }
    if (build() != BUILD_BASE)
        return mc_hash64_copy_avx2(dst, src, len);
#endif
    memcpy(dst, src, len);
    return XXH3_64bits(dst, len);
}

uint64_t mc_hash_str(const char *s)
{
    return mc_hash64(s, strlen(s));
}

int mc_hash_stream_init(mc_hash_stream_t *hs)
{
#if defined(__x86_64__)
    if (build() != BUILD_BASE) {
        hs->state = build() == BUILD_AVX512 ? mc_hash_state_new_avx512() : mc_hash_state_new_avx2();
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
    switch (build()) {
    case BUILD_AVX512:
        mc_hash_state_update_avx512(hs->state, data, len);
        return;
    case BUILD_AVX2:
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
    if (build() != BUILD_BASE) {
        h = build() == BUILD_AVX512 ? mc_hash_state_final_avx512(hs->state)
                                    : mc_hash_state_final_avx2(hs->state);
        hs->state = NULL;
        return h;
    }
#endif
    h = XXH3_64bits_digest(hs->state);
    XXH3_freeState(hs->state);
    hs->state = NULL;
    return h;
}
