/* TLSF offset allocator of one segment (design in allocator.h and docs/internals/allocator.md).
 * Block records live in pages of 4096 that never move (only the page table grows), so a handle
 * stays valid for the block's life; a record is a block (free blocks carry F_FREE in size and
 * sit on the free list of their size class) or unused (chained through next_free). An
 * allocation searches from the size class rounded up, so any block found fits, falling back
 * to a scan of the request's own class, and splits the rest off as a new free block; free
 * coalesces with both physical neighbours. */
#include "master/allocator.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"

#include <string.h>

#define SL_BITS 4
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 64
#define PAGE_BITS 12
#define PAGE_SIZE_BLK (1u << PAGE_BITS)
#define F_FREE (1ull << 63)
#define SIZE_MASK (~F_FREE)

typedef struct blk {
    uint64_t off;   /* granules from the aligned base */
    uint64_t size;  /* granules | F_FREE; 0 = unused record */
    uint32_t prev_phys, next_phys;
    uint32_t prev_free, next_free; /* free-list links; next_free also chains unused records */
} blk_t;

struct mc_master_allocator {
    uint64_t base;        /* aligned base address */
    uint64_t granules;    /* usable granules */
    uint64_t used_g;
    uint64_t n_alloc, n_free;
    uint64_t fl_bitmap;
    uint32_t sl_bitmap[FL_COUNT];
    uint32_t heads[FL_COUNT][SL_COUNT];
    blk_t **pages;
    uint32_t n_pages;
    size_t cap_pages;
    uint32_t n_records;   /* records handed out so far (high-water mark) */
    uint32_t unused;      /* chain of unused records */
    uint32_t tail;        /* physically last block */
    int reserving_only;   /* 1 while only alloc_at has been used */
};

static inline blk_t *B(const mc_master_allocator_t *a, uint32_t i)
{
    return &a->pages[i >> PAGE_BITS][i & (PAGE_SIZE_BLK - 1)];
}

static inline int ilog2(uint64_t v) { return 63 - __builtin_clzll(v); }

static void mapping(uint64_t g, int *fl, int *sl)
{
    if (g < SL_COUNT) {
        *fl = 0;
        *sl = (int)g;
    } else {
        int l = ilog2(g);
        *fl = l - (SL_BITS - 1);
        *sl = (int)((g >> (l - SL_BITS)) & (SL_COUNT - 1));
    }
}

static uint32_t rec_new(mc_master_allocator_t *a)
{
    if (a->unused != MC_ALLOC_NONE) {
        uint32_t i = a->unused;
        a->unused = B(a, i)->next_free;
        return i;
    }
    if (a->n_records == MC_ALLOC_NONE - 1)
        return MC_ALLOC_NONE;
    if ((a->n_records >> PAGE_BITS) >= a->n_pages) {
        if (mc_array_reserve(&a->pages, &a->cap_pages, (size_t)a->n_pages + 1, 4) != MC_OK)
            return MC_ALLOC_NONE;
        blk_t *pg = mc_malloc(PAGE_SIZE_BLK * sizeof(blk_t));
        if (!pg)
            return MC_ALLOC_NONE;
        a->pages[a->n_pages++] = pg;
    }
    return a->n_records++;
}

static void rec_release(mc_master_allocator_t *a, uint32_t i)
{
    blk_t *b = B(a, i);
    b->size = 0;
    b->next_free = a->unused;
    a->unused = i;
}

static void free_insert(mc_master_allocator_t *a, uint32_t i)
{
    blk_t *b = B(a, i);
    int fl, sl;
    mapping(b->size & SIZE_MASK, &fl, &sl);
    b->size |= F_FREE;
    b->prev_free = MC_ALLOC_NONE;
    b->next_free = a->heads[fl][sl];
    if (b->next_free != MC_ALLOC_NONE)
        B(a, b->next_free)->prev_free = i;
    a->heads[fl][sl] = i;
    a->fl_bitmap |= 1ull << fl;
    a->sl_bitmap[fl] |= 1u << sl;
    a->n_free++;
}

static void free_remove(mc_master_allocator_t *a, uint32_t i)
{
    blk_t *b = B(a, i);
    int fl, sl;
    mapping(b->size & SIZE_MASK, &fl, &sl);
    if (b->prev_free != MC_ALLOC_NONE)
        B(a, b->prev_free)->next_free = b->next_free;
    else
        a->heads[fl][sl] = b->next_free;
    if (b->next_free != MC_ALLOC_NONE)
        B(a, b->next_free)->prev_free = b->prev_free;
    if (a->heads[fl][sl] == MC_ALLOC_NONE) {
        a->sl_bitmap[fl] &= ~(1u << sl);
        if (!a->sl_bitmap[fl])
            a->fl_bitmap &= ~(1ull << fl);
    }
    b->size &= SIZE_MASK;
    a->n_free--;
}

mc_status_t mc_master_allocator_create(uint64_t base, uint64_t size, mc_master_allocator_t **a_p)
{
    *a_p = NULL;
    uint64_t abase = (base + MC_ALLOC_ALIGN - 1) & ~(uint64_t)(MC_ALLOC_ALIGN - 1);
    if (abase < base || size < abase - base + MC_ALLOC_ALIGN)
        return MC_ERR_INVALID_PARAMS;
    mc_master_allocator_t *a = MC_NEW(mc_master_allocator_t);
    if (!a)
        return MC_ERR_NO_MEMORY;
    a->base = abase;
    a->granules = (size - (abase - base)) / MC_ALLOC_ALIGN;
    a->unused = MC_ALLOC_NONE;
    memset(a->heads, 0xff, sizeof(a->heads));
    uint32_t i = rec_new(a);
    if (i == MC_ALLOC_NONE) {
        mc_master_allocator_destroy(a);
        return MC_ERR_NO_MEMORY;
    }
    blk_t *b = B(a, i);
    b->off = 0;
    b->size = a->granules;
    b->prev_phys = b->next_phys = MC_ALLOC_NONE;
    free_insert(a, i);
    a->tail = i;
    a->reserving_only = 1;
    *a_p = a;
    return MC_OK;
}

void mc_master_allocator_destroy(mc_master_allocator_t *a)
{
    if (!a)
        return;
    for (uint32_t p = 0; p < a->n_pages; p++)
        mc_free(a->pages[p]);
    mc_free(a->pages);
    mc_free(a);
}

/* Splits allocated-or-detached block i so that it keeps g granules; the rest becomes a free
 * block right after it. Returns 0, or -1 if no record is available (block left whole). */
static int split_after(mc_master_allocator_t *a, uint32_t i, uint64_t g)
{
    blk_t *b = B(a, i);
    uint64_t have = b->size & SIZE_MASK;
    if (have <= g)
        return 0;
    uint32_t r = rec_new(a);
    if (r == MC_ALLOC_NONE)
        return -1;
    b = B(a, i); /* pages may have moved? no: pages are stable, but re-fetch for clarity */
    blk_t *rb = B(a, r);
    rb->off = b->off + g;
    rb->size = have - g;
    rb->prev_phys = i;
    rb->next_phys = b->next_phys;
    if (b->next_phys != MC_ALLOC_NONE)
        B(a, b->next_phys)->prev_phys = r;
    else
        a->tail = r;
    b->next_phys = r;
    b->size = g;
    free_insert(a, r);
    return 0;
}

mc_status_t mc_master_allocator_alloc(mc_master_allocator_t *a, uint64_t size, uint32_t *blk_p)
{
    *blk_p = MC_ALLOC_NONE;
    if (size == 0 || size > (UINT64_MAX >> 2))
        return MC_ERR_INVALID_PARAMS;
    uint64_t g = (size + MC_ALLOC_ALIGN - 1) / MC_ALLOC_ALIGN;
    if (g > a->granules)
        return MC_ERR_NO_AVAILABLE_HANDLE;
    uint64_t gs = g;
    if (gs >= SL_COUNT) /* round up to the next list so any block there fits */
        gs += (1ull << (ilog2(gs) - SL_BITS)) - 1;
    int fl, sl;
    mapping(gs, &fl, &sl);
    uint32_t i = MC_ALLOC_NONE;
    if (fl < FL_COUNT) {
        uint32_t slm = a->sl_bitmap[fl] & (~0u << sl);
        if (!slm) {
            uint64_t flm = fl + 1 < FL_COUNT ? a->fl_bitmap & (~0ull << (fl + 1)) : 0;
            if (flm) {
                fl = __builtin_ctzll(flm);
                slm = a->sl_bitmap[fl];
            }
        }
        if (slm) {
            sl = __builtin_ctz(slm);
            i = a->heads[fl][sl];
        }
    }
    if (i == MC_ALLOC_NONE) {
        /* The rounded-up search can miss a block in g's own list that is big enough. */
        mapping(g, &fl, &sl);
        for (uint32_t j = a->heads[fl][sl]; j != MC_ALLOC_NONE; j = B(a, j)->next_free) {
            if ((B(a, j)->size & SIZE_MASK) >= g) {
                i = j;
                break;
            }
        }
        if (i == MC_ALLOC_NONE)
            return MC_ERR_NO_AVAILABLE_HANDLE;
    }
    free_remove(a, i);
    if (split_after(a, i, g) != 0) {
        free_insert(a, i);
        return MC_ERR_NO_MEMORY;
    }
    a->used_g += g;
    a->n_alloc++;
    a->reserving_only = 0;
    *blk_p = i;
    return MC_OK;
}

mc_status_t mc_master_allocator_alloc_at(mc_master_allocator_t *a, uint64_t addr, uint64_t size,
                                         uint32_t *blk_p)
{
    *blk_p = MC_ALLOC_NONE;
    if (!a->reserving_only || size == 0 || addr < a->base || (addr - a->base) % MC_ALLOC_ALIGN)
        return MC_ERR_INVALID_PARAMS;
    uint64_t off = (addr - a->base) / MC_ALLOC_ALIGN;
    uint64_t g = (size + MC_ALLOC_ALIGN - 1) / MC_ALLOC_ALIGN;
    uint32_t t = a->tail;
    blk_t *tb = B(a, t);
    if (!(tb->size & F_FREE) || off < tb->off || off + g > tb->off + (tb->size & SIZE_MASK) ||
        off + g < off)
        return MC_ERR_INVALID_PARAMS;
    free_remove(a, t);
    uint32_t i = t;
    if (off > tb->off) {
        /* [tb->off, off) stays free as its own block; the reservation gets a new record. */
        uint32_t r = rec_new(a);
        if (r == MC_ALLOC_NONE) {
            free_insert(a, t);
            return MC_ERR_NO_MEMORY;
        }
        tb = B(a, t);
        blk_t *rb = B(a, r);
        rb->off = off;
        rb->size = (tb->size & SIZE_MASK) - (off - tb->off);
        rb->prev_phys = t;
        rb->next_phys = MC_ALLOC_NONE;
        tb->next_phys = r;
        tb->size = off - tb->off;
        a->tail = r;
        free_insert(a, t);
        i = r;
    }
    if (split_after(a, i, g) != 0)
        return MC_ERR_NO_MEMORY; /* leaves i over-sized but consistent: accounted below */
    a->used_g += B(a, i)->size & SIZE_MASK;
    a->n_alloc++;
    *blk_p = i;
    return MC_OK;
}

void mc_master_allocator_free(mc_master_allocator_t *a, uint32_t i)
{
    if (i >= a->n_records || B(a, i)->size == 0 || (B(a, i)->size & F_FREE)) {
        MC_LOG_ERROR("allocator: free of invalid block %u", i);
        return;
    }
    blk_t *b = B(a, i);
    a->used_g -= b->size;
    a->n_alloc--;
    uint32_t p = b->prev_phys;
    if (p != MC_ALLOC_NONE && (B(a, p)->size & F_FREE)) {
        free_remove(a, p);
        blk_t *pb = B(a, p);
        pb->size += b->size;
        pb->next_phys = b->next_phys;
        if (b->next_phys != MC_ALLOC_NONE)
            B(a, b->next_phys)->prev_phys = p;
        else
            a->tail = p;
        rec_release(a, i);
        i = p;
        b = pb;
    }
    uint32_t n = b->next_phys;
    if (n != MC_ALLOC_NONE && (B(a, n)->size & F_FREE)) {
        free_remove(a, n);
        blk_t *nb = B(a, n);
        b->size += nb->size;
        b->next_phys = nb->next_phys;
        if (nb->next_phys != MC_ALLOC_NONE)
            B(a, nb->next_phys)->prev_phys = i;
        else
            a->tail = i;
        rec_release(a, n);
    }
    free_insert(a, i);
}

uint64_t mc_master_allocator_addr(const mc_master_allocator_t *a, uint32_t blk)
{
    return a->base + B(a, blk)->off * MC_ALLOC_ALIGN;
}

void mc_master_allocator_prefetch(const mc_master_allocator_t *a, uint32_t blk)
{
    if (blk >> PAGE_BITS < a->n_pages)
        __builtin_prefetch(B(a, blk));
}

uint64_t mc_master_allocator_size(const mc_master_allocator_t *a, uint32_t blk)
{
    return (B(a, blk)->size & SIZE_MASK) * MC_ALLOC_ALIGN;
}

uint64_t mc_master_allocator_used(const mc_master_allocator_t *a) { return a->used_g * MC_ALLOC_ALIGN; }
uint64_t mc_master_allocator_capacity(const mc_master_allocator_t *a)
{
    return a->granules * MC_ALLOC_ALIGN;
}

void mc_master_allocator_stats(const mc_master_allocator_t *a, mc_master_allocator_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    s->capacity = a->granules * MC_ALLOC_ALIGN;
    s->used = a->used_g * MC_ALLOC_ALIGN;
    s->free_bytes = s->capacity - s->used;
    s->n_allocated = a->n_alloc;
    s->n_free = a->n_free;
    if (a->fl_bitmap) {
        int fl = ilog2(a->fl_bitmap);
        int sl = 31 - __builtin_clz(a->sl_bitmap[fl]);
        uint64_t best = 0;
        for (uint32_t j = a->heads[fl][sl]; j != MC_ALLOC_NONE; j = B(a, j)->next_free) {
            uint64_t g = B(a, j)->size & SIZE_MASK;
            if (g > best)
                best = g;
        }
        s->largest_free = best * MC_ALLOC_ALIGN;
    }
    s->fragmentation = s->free_bytes ? 1.0 - (double)s->largest_free / (double)s->free_bytes : 0.0;
}

int mc_master_allocator_check(const mc_master_allocator_t *a)
{
    /* Walk physically from the block at offset 0. */
    uint32_t i = a->tail;
    while (B(a, i)->prev_phys != MC_ALLOC_NONE)
        i = B(a, i)->prev_phys;
    uint64_t off = 0, used = 0, nfree = 0, nalloc = 0;
    int prev_free = 0;
    uint32_t last = MC_ALLOC_NONE;
    while (i != MC_ALLOC_NONE) {
        const blk_t *b = B(a, i);
        if (b->size == 0 || b->off != off || b->prev_phys != last)
            return -1;
        int f = (b->size & F_FREE) != 0;
        if (f && prev_free)
            return -2; /* two adjacent free blocks: missed coalescing */
        if (f) {
            nfree++;
            int fl, sl;
            mapping(b->size & SIZE_MASK, &fl, &sl);
            uint32_t j = a->heads[fl][sl];
            while (j != MC_ALLOC_NONE && j != i)
                j = B(a, j)->next_free;
            if (j != i)
                return -3; /* free block not in its list */
        } else {
            nalloc++;
            used += b->size;
        }
        prev_free = f;
        off += b->size & SIZE_MASK;
        last = i;
        i = b->next_phys;
    }
    if (off != a->granules || last != a->tail)
        return -4;
    if (used != a->used_g || nfree != a->n_free || nalloc != a->n_alloc)
        return -5;
    return 0;
}
