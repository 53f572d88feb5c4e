/* Offset allocator for one mounted segment (the master never touches the memory; it only
 * hands out [addr, addr+size) ranges inside the owner's segment).
 *
 * Design (docs/internals/allocator.md): TLSF-style two-level segregated free lists over 64-byte
 * granules (first level = log2, second level = 16 linear sub-ranges), bitmaps for O(1)
 * "find a free block at least this big", and boundary tags kept in a side table of 32-byte
 * block records (prev/next physical neighbour) so that free() coalesces in O(1). Block records
 * live in 4096-entry pages; a block handle is a u32 index, stable for the block's lifetime.
 *
 * Not thread-safe: owned by the master loop thread.
 */
#ifndef MC_MASTER_ALLOCATOR_H
#define MC_MASTER_ALLOCATOR_H

#include "mooncake/status.h"

#include <stdint.h>

#define MC_ALLOC_ALIGN 64u
#define MC_ALLOC_NONE UINT32_MAX

typedef struct mc_master_allocator mc_master_allocator_t;

typedef struct mc_master_allocator_stats {
    uint64_t capacity;      /* usable bytes (after aligning the base) */
    uint64_t used;          /* bytes in allocated blocks (sizes rounded up to 64) */
    uint64_t free_bytes;
    uint64_t largest_free;  /* largest single free block */
    uint64_t n_allocated;   /* allocated blocks */
    uint64_t n_free;        /* free blocks */
    double fragmentation;   /* 1 - largest_free / free_bytes (0 when nothing is free) */
} mc_master_allocator_stats_t;

/* [base, base+size) is the segment. MC_ERR_INVALID_PARAMS if fewer than 64 usable bytes. */
mc_status_t mc_master_allocator_create(uint64_t base, uint64_t size, mc_master_allocator_t **a_p);
void mc_master_allocator_destroy(mc_master_allocator_t *a);

/* Allocates size (> 0) bytes, 64-byte aligned. MC_ERR_NO_AVAILABLE_HANDLE if no free block
 * is big enough, MC_ERR_NO_MEMORY if the block table cannot grow. */
mc_status_t mc_master_allocator_alloc(mc_master_allocator_t *a, uint64_t size, uint32_t *blk_p);

/* Reserves exactly [addr, addr+size) (recovery). Only valid while every earlier reservation
 * lies below addr and nothing was allocated otherwise (ranges given in increasing order):
 * MC_ERR_INVALID_PARAMS otherwise, or if the range is unaligned or outside the segment. */
mc_status_t mc_master_allocator_alloc_at(mc_master_allocator_t *a, uint64_t addr, uint64_t size,
                                         uint32_t *blk_p);

/* Frees an allocated block (coalescing with free neighbours). Invalid handles are logged and
 * ignored. */
void mc_master_allocator_free(mc_master_allocator_t *a, uint32_t blk);

uint64_t mc_master_allocator_addr(const mc_master_allocator_t *a, uint32_t blk);
uint64_t mc_master_allocator_size(const mc_master_allocator_t *a, uint32_t blk);
/* Starts loading blk's record into the cache (batch lookups: mc_master_lookup_prepare). */
void mc_master_allocator_prefetch(const mc_master_allocator_t *a, uint32_t blk);

/* used, capacity and free are O(1); largest_free scans one free list. */
void mc_master_allocator_stats(const mc_master_allocator_t *a, mc_master_allocator_stats_t *s);
uint64_t mc_master_allocator_used(const mc_master_allocator_t *a);
uint64_t mc_master_allocator_capacity(const mc_master_allocator_t *a);

/* Consistency check for tests: walks all blocks; returns 0 if every invariant holds. */
int mc_master_allocator_check(const mc_master_allocator_t *a);

#endif
