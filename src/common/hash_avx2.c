/* XXH3 built for AVX2; hash.c uses it when the CPU has AVX2 (see there). Debian's libxxhash
 * (header-only mode of the same library, so the same algorithm and results) compiled with
 * -mavx2 for this file only. */
#include "common/hash_impl.h"

#if defined(__x86_64__)
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <immintrin.h>
#include <string.h>

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

/* One 64-byte stripe: copied from src to dst (32-byte aligned) with streaming stores and
 * accumulated from the very registers that were stored (XXH3_accumulate_512_avx2 on data
 * already loaded). */
static inline void copy_acc_stripe(__m256i *acc, uint8_t *dst, const uint8_t *src,
                                   const uint8_t *secret)
{
    for (int i = 0; i < 2; i++) {
        __m256i const data_vec = _mm256_loadu_si256((const __m256i *)src + i);
        _mm256_stream_si256((__m256i *)dst + i, data_vec);
        __m256i const key_vec = _mm256_loadu_si256((const __m256i *)secret + i);
        __m256i const data_key = _mm256_xor_si256(data_vec, key_vec);
        __m256i const data_key_lo = _mm256_shuffle_epi32(data_key, _MM_SHUFFLE(0, 3, 0, 1));
        __m256i const product = _mm256_mul_epu32(data_key, data_key_lo);
        __m256i const data_swap = _mm256_shuffle_epi32(data_vec, _MM_SHUFFLE(1, 0, 3, 2));
        acc[i] = _mm256_add_epi64(product, _mm256_add_epi64(acc[i], data_swap));
    }
}

/* XXH3-64 (seed 0) of len (>= MC_HASH_COPY_NT_MIN) bytes copied from src to dst (32-byte
 * aligned) with streaming stores: the whole 1 KiB blocks in one pass over src, each stripe
 * hashed from the registers that were stored (XXH3's long-input loop with its default secret,
 * as XXH3_hashLong_64b_internal); the last block and the final stripe are copied first and
 * hashed from dst. */
static uint64_t copy_hash_streaming(void *dst, const void *src, size_t len)
{
    enum { STRIPE = 64, RATE = 8, SECRET = XXH_SECRET_DEFAULT_SIZE };
    enum { PER_BLOCK = (SECRET - STRIPE) / RATE, BLOCK = STRIPE * PER_BLOCK };
    uint8_t *d = dst;
    const uint8_t *s = src;
    const uint8_t *secret = XXH3_kSecret;
    XXH_ALIGN(32) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;
    size_t nb_blocks = (len - 1) / BLOCK;
    for (size_t n = 0; n < nb_blocks; n++) {
        __m256i a[2] = {_mm256_load_si256((__m256i *)acc), _mm256_load_si256((__m256i *)acc + 1)};
        for (size_t k = 0; k < PER_BLOCK; k++) {
            size_t off = n * BLOCK + k * STRIPE;
            _mm_prefetch((const char *)s + off + 512, _MM_HINT_T0);
            copy_acc_stripe(a, d + off, s + off, secret + k * RATE);
        }
        _mm256_store_si256((__m256i *)acc, a[0]);
        _mm256_store_si256((__m256i *)acc + 1, a[1]);
        XXH3_scrambleAcc_avx2(acc, secret + SECRET - STRIPE);
    }
    _mm_sfence();
    size_t tail = nb_blocks * BLOCK;
    memcpy(d + tail, s + tail, len - tail);
    /* the last partial block and the last stripe, as XXH3_hashLong_internal_loop, from dst */
    XXH3_accumulate(acc, d + tail, secret, ((len - 1) - tail) / STRIPE, XXH3_accumulate_512_avx2);
    XXH3_accumulate_512_avx2(acc, d + len - STRIPE, secret + SECRET - STRIPE - 7);
    return XXH3_mergeAccs(acc, secret + 11, (xxh_u64)len * XXH_PRIME64_1);
}

/* XXH3-64 (seed 0) of len bytes copied from src to dst, MC_HASH_COPY_CHUNK bytes at a time:
 * each chunk is copied (memcpy), then fed to the hash from dst while it sits in the first-level
 * cache: the copy runs at memcpy's depth, and the hash reads cached bytes, not memory. */
static uint64_t copy_hash_chunked(void *dst, const void *src, size_t len)
{
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    for (size_t off = 0; off < len; off += MC_HASH_COPY_CHUNK) {
        size_t k = len - off < MC_HASH_COPY_CHUNK ? len - off : MC_HASH_COPY_CHUNK;
        memcpy((uint8_t *)dst + off, (const uint8_t *)src + off, k);
        XXH3_64bits_update(&st, (const uint8_t *)dst + off, k);
    }
    return XXH3_64bits_digest(&st);
}

/* Copies from 1 MiB into aligned memory go past the caches in one pass (the caller does not
 * read the bytes right after, and the stores skip reading the destination's lines first);
 * smaller ones are cached anyway and go by chunks. Same-host hashed reads by the engine on an
 * AMD EPYC VM (mc_te_bench --wait hashed, docs/benchmarks.md): 64 KiB to 512 KiB values
 * 19-24 GiB/s by chunks against 15.1-15.9 for the one-pass loop with cached stores, 2 to 8 MiB
 * 15.9-16.3 with streaming stores against 14.6-15.4 by chunks, 1 MiB level. */
uint64_t mc_hash64_copy_avx2(void *dst, const void *src, size_t len)
{
    if (len >= MC_HASH_COPY_NT_MIN && ((uintptr_t)dst & 31) == 0)
        return copy_hash_streaming(dst, src, len);
    return copy_hash_chunked(dst, src, len);
}
#endif
