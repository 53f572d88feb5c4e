/* Allocation wrappers. They log and return NULL on failure (callers map that to
 * MC_ERR_NO_MEMORY); they never abort, since a cache process must survive a failed allocation.
 * mc_free(NULL) is a no-op. */
#ifndef MC_COMMON_ALLOC_H
#define MC_COMMON_ALLOC_H

#include <stddef.h>

void *mc_malloc(size_t size);
void *mc_calloc(size_t n, size_t size);      /* checks n*size overflow */
void *mc_realloc(void *ptr, size_t size);
char *mc_strdup(const char *s);
char *mc_strndup(const char *s, size_t n);
void mc_free(void *ptr);

/* Page-aligned anonymous memory, optionally pre-faulted (touch every page now so that the
 * first transfer does not pay page faults). Release with mc_pages_free(ptr, size). */
void *mc_pages_alloc(size_t size, int prefault);
void mc_pages_free(void *ptr, size_t size);

/* Fault in the whole pages inside [addr, addr+len) as writable, in one system call
 * (MADV_POPULATE_WRITE, Linux >= 5.14). Use it on shared mappings: MAP_POPULATE only
 * read-faults those, and every first write to a page then takes a write-protect fault, which
 * made copies into peer segments 10x slower than memcpy. Returns 0, or -1 if the kernel
 * cannot (pages are then faulted lazily, which is still correct). */
int mc_pages_populate_write(void *addr, size_t len);
/* Memory about to be written all over (heap buffers of large gets, the replica-hint table):
 * asks for transparent huge pages over the whole pages inside [addr, addr+len) and faults
 * them in now, in bulk: faulting 32 MiB one 4 KiB page at a time on first use cost ~100 ms on
 * our VMs, this ~15 ms. Best effort. */
void mc_pages_prefault_huge(void *addr, size_t len);

/* Huge page sizes mc_pages_shared_alloc takes. */
#define MC_PAGES_HUGE_2MB ((size_t)2 << 20)
#define MC_PAGES_HUGE_1GB ((size_t)1 << 30)

/* Memory that same-host processes can map: a memfd named `name` (close-on-exec, sealed against
 * resizing, so a process mapping it through /proc/<pid>/fd or SCM_RIGHTS cannot be cut short)
 * of len bytes rounded up to the page size (*alen_p), mapped shared and faulted in writable.
 * page_size: 0 = base pages; MC_PAGES_HUGE_2MB or MC_PAGES_HUGE_1GB = huge pages of that size,
 * required: a shared hugetlb mapping reserves all its pages at mmap, so with too few free the
 * call fails here (never on a later fault) and never falls back to base pages. Any other size
 * fails. Returns the mapping and its memfd in *fd_p (the caller owns both: munmap(p, *alen_p),
 * close(*fd_p)), or NULL. A failure is logged at ERROR, for huge pages naming the pool to
 * grow (/sys/kernel/mm/hugepages/hugepages-<kB>kB/nr_hugepages), unless quiet (a caller that
 * falls back on its own). */
void *mc_pages_shared_alloc(const char *name, size_t len, size_t page_size, int quiet,
                            size_t *alen_p, int *fd_p);

#define MC_NEW(type) ((type *)mc_calloc(1, sizeof(type)))
#define MC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
