/* A deterministic byte pattern for programs that check moved data (transfer_engine_bench
 * --verify): the content of a region is a function of a seed and of each byte's offset in the
 * buffer, so a reader can check any part without keeping a copy.
 *
 * Word i (8 bytes, native order) of a buffer is (seed ^ (i * 0x9E3779B97F4A7C15)) + i; this is
 * the formula bench/mc_te_bench.c and tools/mc_te_demo.c use, so patterns written by one can be
 * checked by another. Bytes past the last whole word of a region are (uint8_t)(seed + offset).
 * Uses only the C library: programs linked against libmooncake.so alone can link it. */
#ifndef MC_TOOLS_PATTERN_H
#define MC_TOOLS_PATTERN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Writes the pattern of bytes [off, off + len) of the buffer into dst[0, len). off must be a
 * multiple of 8 (dst need not be aligned). */
void mc_tool_pattern_fill(void *dst, size_t len, uint64_t seed, uint64_t off);

/* Checks src[0, len) against the same pattern: returns the index in src of the first byte that
 * differs, or -1 when all match. off must be a multiple of 8. */
int64_t mc_tool_pattern_check(const void *src, size_t len, uint64_t seed, uint64_t off);

#ifdef __cplusplus
}
#endif
#endif
