/* Deterministic data pattern for programs that verify what they moved (contract in
 * pattern.h). */
#include "pattern.h"

#include <string.h>

static inline uint64_t pattern_word(uint64_t seed, uint64_t i)
{
    return (seed ^ (i * 0x9E3779B97F4A7C15ull)) + i;
}

static inline uint8_t pattern_tail_byte(uint64_t seed, uint64_t off, size_t i)
{
    return (uint8_t)(seed + off + i);
}

void mc_tool_pattern_fill(void *dst, size_t len, uint64_t seed, uint64_t off)
{
    uint8_t *p = dst;
    uint64_t base = off / 8;
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t w = pattern_word(seed, base + i);
        memcpy(p + i * 8, &w, 8); /* dst may be unaligned */
    }
    for (size_t i = words * 8; i < len; i++)
        p[i] = pattern_tail_byte(seed, off, i);
}

int64_t mc_tool_pattern_check(const void *src, size_t len, uint64_t seed, uint64_t off)
{
    const uint8_t *p = src;
    uint64_t base = off / 8;
    size_t words = len / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t want = pattern_word(seed, base + i), got;
        memcpy(&got, p + i * 8, 8);
        if (got != want) {
            for (size_t b = 0; b < 8; b++) /* the first differing byte of the word */
                if (((const uint8_t *)&got)[b] != ((const uint8_t *)&want)[b])
                    return (int64_t)(i * 8 + b);
        }
    }
    for (size_t i = words * 8; i < len; i++)
        if (p[i] != pattern_tail_byte(seed, off, i))
            return (int64_t)i;
    return -1;
}
