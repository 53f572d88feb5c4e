/* Allocation wrappers (alloc.h): malloc/calloc/realloc that log and return NULL on failure
 * (never abort; a zero size allocates one byte so NULL always means failure), calloc with an
 * n*size overflow check, and page-granular memory (anonymous mmap, THP and write pre-faulting
 * through madvise, best effort). */
#include "common/alloc.h"

#include "common/log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

void *mc_malloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        MC_LOG_ERROR("malloc(%zu) failed", size);
    return p;
}

void *mc_calloc(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size) {
        MC_LOG_ERROR("calloc(%zu, %zu) overflows", n, size);
        return NULL;
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        MC_LOG_ERROR("calloc(%zu, %zu) failed", n, size);
    return p;
}

void *mc_realloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size ? size : 1);
    if (!p)
        MC_LOG_ERROR("realloc(%zu) failed", size);
    return p;
}

char *mc_strdup(const char *s)
{
    return mc_strndup(s, strlen(s));
}

char *mc_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = mc_malloc(len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

void mc_free(void *ptr)
{
    free(ptr);
}

void *mc_pages_alloc(size_t size, int prefault)
{
    int flags = MAP_PRIVATE | MAP_ANONYMOUS | (prefault ? MAP_POPULATE : 0);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
    if (p == MAP_FAILED) {
        MC_LOG_ERROR("mmap(%zu) failed: %m", size);
        return NULL;
    }
    return p;
}

void mc_pages_free(void *ptr, size_t size)
{
    if (ptr)
        munmap(ptr, size);
}

void mc_pages_prefault_huge(void *addr, size_t len)
{
#ifdef MADV_HUGEPAGE
    uintptr_t start = ((uintptr_t)addr + 4095) & ~(uintptr_t)4095;
    uintptr_t end = ((uintptr_t)addr + len) & ~(uintptr_t)4095;
    if (end > start)
        madvise((void *)start, end - start, MADV_HUGEPAGE);
#endif
    mc_pages_populate_write(addr, len);
}

int mc_pages_populate_write(void *addr, size_t len)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
    const uintptr_t page = 4096;
    uintptr_t start = ((uintptr_t)addr + page - 1) & ~(page - 1);
    uintptr_t end = ((uintptr_t)addr + len) & ~(page - 1);
    if (end <= start)
        return 0;
    return madvise((void *)start, end - start, MADV_POPULATE_WRITE) == 0 ? 0 : -1;
}
