/* Hashing and checksums: XXH3 from Debian's libxxhash. One place so that every component
 * computes the same checksum the same way (the store records XXH3-64 at PutEnd and verifies
 * it on every get). */
#ifndef MC_COMMON_HASH_H
#define MC_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>

uint64_t mc_hash64(const void *data, size_t len);              /* XXH3-64, seed 0 */
uint64_t mc_hash64_seed(const void *data, size_t len, uint64_t seed);
uint64_t mc_hash_str(const char *s);                           /* of strlen(s) bytes */
/* Copies len bytes from src to dst (not overlapping) and returns mc_hash64 of the bytes
 * written to dst, without a second pass over them from memory: below 64 KiB the whole copy,
 * then the hash of dst; from 64 KiB on with AVX2, chunks of 16 KiB, each hashed from dst right
 * after its copy while it is in the first-level cache; from 1 MiB on into 32-byte aligned
 * memory, one pass with stores that bypass the caches (as memcpy's do for large copies), each
 * 64-byte stripe hashed from the registers that were stored. next: NULL, or where the caller's
 * next copy will read from (any address: it is only prefetched): its first bytes are asked for
 * between this copy and its hash, so that they come from memory while the hash computes. */
uint64_t mc_hash64_copy(void *dst, const void *src, size_t len, const void *next);
/* Which build of XXH3 runs: "avx2" on a CPU with AVX2, else "baseline" (same values). */
const char *mc_hash_build(void);

/* Streaming checksum over several pieces: equal to mc_hash64 of their concatenation. */
typedef struct mc_hash_stream {
    void *state; /* XXH3_state_t*, owned */
} mc_hash_stream_t;
int mc_hash_stream_init(mc_hash_stream_t *hs);   /* 0 ok, -1 no memory */
void mc_hash_stream_update(mc_hash_stream_t *hs, const void *data, size_t len);
uint64_t mc_hash_stream_final(mc_hash_stream_t *hs); /* frees the state */
/* dst takes src's state (src then holds none); the state dst held, if any, is freed. */
void mc_hash_stream_move(mc_hash_stream_t *dst, mc_hash_stream_t *src);
/* dst = a new stream at the same point as src (updating one leaves the other as it was).
 * 0 ok, -1 no memory (dst then holds no state). */
int mc_hash_stream_copy(mc_hash_stream_t *dst, const mc_hash_stream_t *src);

#endif
