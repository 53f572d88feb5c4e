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

#define MC_NEW(type) ((type *)mc_calloc(1, sizeof(type)))
#define MC_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
