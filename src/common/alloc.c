/* Allocation wrappers (alloc.h): malloc/calloc/realloc that log and return NULL on failure
 * (never abort; a zero size allocates one byte so NULL always means failure), calloc with an
 * n*size overflow check, page-granular memory (anonymous mmap, THP and write pre-faulting
 * through madvise, best effort) and shared memory on base or huge pages (memfd). */
#include "common/alloc.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/memfd.h> /* MFD_HUGE_2MB, MFD_HUGE_1GB */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

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

void *mc_pages_shared_alloc(const char *name, size_t len, size_t page_size, int quiet,
                            size_t *alen_p, int *fd_p)
{
    unsigned int flags = MFD_CLOEXEC | MFD_ALLOW_SEALING;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    if (page_size == MC_PAGES_HUGE_2MB)
        flags |= MFD_HUGETLB | MFD_HUGE_2MB;
    else if (page_size == MC_PAGES_HUGE_1GB)
        flags |= MFD_HUGETLB | MFD_HUGE_1GB;
    else if (page_size != 0) {
        if (!quiet)
            MC_LOG_ERROR("shared memory: huge page size %zu is not supported (2 MiB or 1 GiB)",
                         page_size);
        errno = EINVAL;
        return NULL;
    }
    if (page_size)
        pg = page_size;
    if (len == 0 || len > SIZE_MAX - pg) {
        errno = EINVAL;
        return NULL;
    }
    size_t alen = (len + pg - 1) / pg * pg;
    void *p = MAP_FAILED;
    int fd = memfd_create(name, flags);
    if (fd >= 0 && ftruncate(fd, (off_t)alen) == 0 &&
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, alen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int err = errno;
        if (!quiet && page_size)
            MC_LOG_ERROR("cannot allocate %zu bytes of shared memory on %s huge pages: %s "
                         "(too few free: reserve them in /sys/kernel/mm/hugepages/"
                         "hugepages-%zukB/nr_hugepages)",
                         alen, page_size == MC_PAGES_HUGE_2MB ? "2 MiB" : "1 GiB",
                         strerror(err), page_size >> 10);
        else if (!quiet)
            MC_LOG_ERROR("cannot allocate %zu bytes of shared memory: %s", alen, strerror(err));
        if (fd >= 0)
            close(fd);
        errno = err;
        return NULL;
    }
    /* MAP_POPULATE would only read-fault a shared mapping (see mc_pages_populate_write) */
    if (mc_pages_populate_write(p, alen) != 0)
        madvise(p, alen, MADV_WILLNEED);
    *alen_p = alen;
    *fd_p = fd;
    return p;
}
