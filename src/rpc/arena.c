/* Bump arena for per-request protobuf memory (arena.h). Allocations are 16-byte aligned and
 * carved from a chain of chunks: each new chunk is twice the last until that would pass
 * 256 MiB, then 64 MiB, and never smaller than the request. Nothing is freed one by one: reset
 * frees every chunk but the first, so a loop that resets after each request settles at one
 * allocation. */
#include "rpc/arena.h"

#include "common/alloc.h"

#include <stdint.h>
#include <string.h>

struct mc_rpc_arena_chunk {
    mc_rpc_arena_chunk_t *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

static void *arena_pb_alloc(void *ad, size_t size) { return mc_rpc_arena_alloc(ad, size); }
static void arena_pb_free(void *ad, void *p)
{
    (void)ad;
    (void)p;
}

void mc_rpc_arena_init(mc_rpc_arena_t *a, size_t first_size)
{
    memset(a, 0, sizeof(*a));
    a->first_size = first_size < 4096 ? 4096 : first_size;
    a->pb.alloc = arena_pb_alloc;
    a->pb.free = arena_pb_free;
    a->pb.allocator_data = a;
}

void *mc_rpc_arena_alloc(mc_rpc_arena_t *a, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    if (size == 0)
        size = 16;
    mc_rpc_arena_chunk_t *c = a->head;
    if (!c || c->size - c->used < size) {
        size_t want = a->head ? a->head->size * 2 : a->first_size;
        if (want < size)
            want = size;
        if (want > (256u << 20) && size <= (256u << 20))
            want = size < (64u << 20) ? (64u << 20) : size;
        c = mc_malloc(sizeof(*c) + want);
        if (!c)
            return NULL;
        c->size = want;
        c->used = 0;
        c->next = a->head;
        a->head = c;
    }
    void *p = c->data + c->used;
    c->used += size;
    return p;
}

void *mc_rpc_arena_calloc(mc_rpc_arena_t *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    void *p = mc_rpc_arena_alloc(a, n * size);
    if (p)
        memset(p, 0, n * size);
    return p;
}

void mc_rpc_arena_reset(mc_rpc_arena_t *a)
{
    /* Keep only the oldest chunk if it has the first size; free the rest. */
    mc_rpc_arena_chunk_t *c = a->head, *keep = NULL;
    while (c) {
        mc_rpc_arena_chunk_t *n = c->next;
        if (!n && c->size == a->first_size)
            keep = c;
        else
            mc_free(c);
        c = n;
    }
    if (keep)
        keep->used = 0;
    a->head = keep;
}

void mc_rpc_arena_destroy(mc_rpc_arena_t *a)
{
    mc_rpc_arena_chunk_t *c = a->head;
    while (c) {
        mc_rpc_arena_chunk_t *n = c->next;
        mc_free(c);
        c = n;
    }
    a->head = NULL;
}
