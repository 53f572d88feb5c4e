/* Deterministic byte patterns shared by te_peer and the TE tests: byte at offset `off` of
 * buffer `buf` with seed `seed`. Header-only. */
#ifndef MC_TESTS_TE_PATTERN_H
#define MC_TESTS_TE_PATTERN_H

#include <stddef.h>
#include <stdint.h>

static inline uint8_t te_pattern_byte(unsigned buf, uint64_t off, unsigned seed)
{
    uint64_t x = off * 0x9E3779B97F4A7C15ull + ((uint64_t)buf << 32) + seed * 0x632BE59BD9B4E019ull;
    x ^= x >> 29;
    return (uint8_t)(x ^ (x >> 8) ^ (off >> 12));
}

static inline void te_pattern_fill(uint8_t *p, size_t len, unsigned buf, uint64_t off,
                                   unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        p[i] = te_pattern_byte(buf, off + i, seed);
}

/* Index of the first mismatching byte, or -1. */
static inline long te_pattern_check(const uint8_t *p, size_t len, unsigned buf, uint64_t off,
                                    unsigned seed)
{
    for (size_t i = 0; i < len; i++)
        if (p[i] != te_pattern_byte(buf, off + i, seed))
            return (long)i;
    return -1;
}

#endif
