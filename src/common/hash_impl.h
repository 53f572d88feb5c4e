/* Private to hash.c / hash_avx2.c: the AVX2 build of XXH3 (x86-64 only). */
#ifndef MC_COMMON_HASH_IMPL_H
#define MC_COMMON_HASH_IMPL_H

#include <stddef.h>
#include <stdint.h>

uint64_t mc_hash64_avx2(const void *data, size_t len, uint64_t seed);
void *mc_hash_state_new_avx2(void);
void mc_hash_state_update_avx2(void *st, const void *data, size_t len);
uint64_t mc_hash_state_final_avx2(void *st); /* frees st */
/* mc_hash64_copy of len >= MC_HASH_COPY_CHUNKED_MIN */
uint64_t mc_hash64_copy_avx2(void *dst, const void *src, size_t len);

/* mc_hash64_copy copies the whole value, then hashes the copy, below this size (hash.c), and
 * copies and hashes chunk by chunk from it on */
#define MC_HASH_COPY_CHUNKED_MIN (64u << 10)
#define MC_HASH_COPY_CHUNK (16u << 10) /* fits the first-level data cache of x86-64 CPUs */
/* ... except from this size on into 32-byte aligned memory: one pass with streaming stores */
#define MC_HASH_COPY_NT_MIN (1u << 20)

#endif
