/* Bump arena for per-request memory (decoded requests, response messages built by handlers).
 * Not thread-safe: one arena per thread/loop. Memory returned stays valid until the next
 * mc_rpc_arena_reset() or mc_rpc_arena_destroy(); nothing is freed individually. */
#ifndef MC_RPC_ARENA_H
#define MC_RPC_ARENA_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>

typedef struct mc_rpc_arena_chunk mc_rpc_arena_chunk_t;

typedef struct mc_rpc_arena {
    mc_rpc_arena_chunk_t *head;   /* current chunk; older chunks follow */
    size_t first_size;            /* the first chunk is kept across resets */
    ProtobufCAllocator pb;        /* protobuf-c allocator drawing from this arena */
} mc_rpc_arena_t;

void mc_rpc_arena_init(mc_rpc_arena_t *a, size_t first_size);
/* 16-byte aligned; NULL on allocation failure (logged). */
void *mc_rpc_arena_alloc(mc_rpc_arena_t *a, size_t size);
/* Like alloc, zeroed. */
void *mc_rpc_arena_calloc(mc_rpc_arena_t *a, size_t n, size_t size);
void mc_rpc_arena_reset(mc_rpc_arena_t *a);
void mc_rpc_arena_destroy(mc_rpc_arena_t *a);

#endif
