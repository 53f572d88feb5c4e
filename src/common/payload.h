/* Payload bytes in registered memory (segments, transfer buffers) are read and written by
 * different peers with no ordering between them: a reader may copy a block while a writer
 * stamps it (an upsert) or fills it again (space reused after a lease ended). That is by
 * design; the store never hands out bytes that do not hash to the committed checksum
 * (docs/internals/store-client.md). Under ThreadSanitizer these copies, and only these, are
 * excluded from race detection, so that it keeps reporting races on everything else.
 *
 * Use mc_payload_copy for memcpy of payload, and MC_PAYLOAD_BEGIN/END around a system call
 * that moves payload (recv into, sendmsg out of registered memory). */
#ifndef MC_COMMON_PAYLOAD_H
#define MC_COMMON_PAYLOAD_H

#include "common/hash.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__SANITIZE_THREAD__)
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
#define MC_PAYLOAD_BEGIN()                                                                         \
    do {                                                                                           \
        AnnotateIgnoreReadsBegin(__FILE__, __LINE__);                                              \
        AnnotateIgnoreWritesBegin(__FILE__, __LINE__);                                             \
    } while (0)
#define MC_PAYLOAD_END()                                                                           \
    do {                                                                                           \
        AnnotateIgnoreWritesEnd(__FILE__, __LINE__);                                               \
        AnnotateIgnoreReadsEnd(__FILE__, __LINE__);                                                \
    } while (0)
#else
#define MC_PAYLOAD_BEGIN() ((void)0)
#define MC_PAYLOAD_END() ((void)0)
#endif

static inline void mc_payload_copy(void *dst, const void *src, size_t n)
{
    MC_PAYLOAD_BEGIN();
    memcpy(dst, src, n);
    MC_PAYLOAD_END();
}

/* mc_payload_copy that also returns the XXH3-64 of the bytes written (mc_hash64_copy; next:
 * NULL, or where the caller's next copy reads from). */
static inline uint64_t mc_payload_copy_hash(void *dst, const void *src, size_t n,
                                            const void *next)
{
    MC_PAYLOAD_BEGIN();
    uint64_t h = mc_hash64_copy(dst, src, n, next);
    MC_PAYLOAD_END();
    return h;
}

#endif
