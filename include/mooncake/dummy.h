/* Mooncake-C standalone mode: a real client (a store client in a storage server, mooncake_client
 * --port) serves dummy clients on the same host over the abstract Unix socket
 * "@mooncake_client_<port>.sock". A dummy owns no transfer engine and no master connection: it
 * shares memfd regions with the real client (passed as SCM_RIGHTS), which maps them and
 * registers them with its own engine, so put_from / get_into move bytes between the store and
 * the dummy's memory without a copy through the socket. Byte puts and gets ship the value in
 * the message. docs/internals/store-client.md, "Standalone real client and dummy clients".
 *
 * A dummy handle is an mc_store_t: the functions of mooncake/store.h work on it (register_buffer
 * takes ranges of memory from mc_shm_alloc; replica descriptors and read statistics are not
 * available: MC_ERR_UNAVAILABLE_IN_CURRENT_MODE and zeros). When the real client dies or stops
 * answering, every call fails with MC_ERR_RPC_FAIL within the call deadline; the handle must
 * then be destroyed and created again. */
#ifndef MOONCAKE_DUMMY_H
#define MOONCAKE_DUMMY_H

#include "mooncake/store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mc_store_dummy_config {
    const char *server_address;  /* "host:port" of the real client; the port names the socket
                                    (NULL = "127.0.0.1:50052"); the host must be this host */
    uint64_t local_buffer_size;  /* shared local buffer registered with the real client; 0 = none */
    uint64_t mem_pool_size;      /* accepted, unused (as upstream) */
    uint32_t call_timeout_ms;    /* deadline of every call, 0 = 30000 */
    uint32_t max_connections;    /* data connections to the real client, 0 = 4 (at most 64) */
    /* Cluster token file (docs/security.md), NULL or "" = none. Every connection to the real
     * client starts with the cluster handshake; a real client with a token file accepts only
     * dummies proving one of its secrets, and a dummy with one accepts only a real client
     * proving its secret (MC_ERR_AUTH otherwise). */
    const char *auth_token_file;
    /* Page size of the local buffer: 0 = base pages, MC_SHM_HUGE_2MB or MC_SHM_HUGE_1GB = on
     * huge pages of that size, required (mc_shm_alloc_pages). [MC_STORE_USE_HUGEPAGE,
     * MC_STORE_HUGEPAGE_SIZE in the Python package] */
    uint64_t hugepage_size;
} mc_store_dummy_config_t;

/* Connects to the real client, registers the local buffer, starts the 1 s ping. *store_p is
 * released with mc_store_destroy (which closes the connections: the real client unmaps the
 * dummy's memory). MC_ERR_RPC_FAIL when no real client answers. */
MC_API mc_status_t mc_store_create_dummy(const mc_store_dummy_config_t *cfg, mc_store_t **store_p);
MC_API bool mc_store_is_dummy(const mc_store_t *store);

/* Process-wide shared memory (upstream's ShmHelper: alloc_from_mem_pool,
 * MooncakeHostMemAllocator): a memfd mapping of at least size bytes (page-rounded, sealed
 * against shrinking), or NULL. Only this memory can be registered on a dummy handle. */
MC_API void *mc_shm_alloc(size_t size);
#define MC_SHM_HUGE_2MB (2ull << 20)
#define MC_SHM_HUGE_1GB (1ull << 30)
/* mc_shm_alloc on pages of huge_page_size: 0 = base pages (mc_shm_alloc), MC_SHM_HUGE_2MB or
 * MC_SHM_HUGE_1GB = huge pages of that size, size rounded up to a whole page; required, as
 * upstream's MC_STORE_USE_HUGEPAGE: NULL (logged, naming the sysfs knob) when the host has too
 * few free huge pages of that size, never a fallback to base pages. Any other page size:
 * NULL. */
MC_API void *mc_shm_alloc_pages(size_t size, size_t huge_page_size);
/* Unregisters the allocation from every dummy that registered it, then unmaps it. 0 or -1
 * (not an allocation's start). */
MC_API int mc_shm_free(void *addr);

/* What a real client serves (mc_real_service_stats, and the STATS call of a dummy). */
typedef struct mc_real_service_stats {
    uint64_t dummies;       /* dummies attached */
    uint64_t regions;       /* regions mapped and registered, all dummies */
    uint64_t region_bytes;  /* their bytes */
} mc_real_service_stats_t;

typedef struct mc_real_service mc_real_service_t;
/* Serves dummy clients on "@mooncake_client_<port>.sock" with store (borrowed until stop).
 * MC_ERR_BUSY when that socket is taken (another real client on this host), logged as info.
 * Threads: one acceptor, one reaper (drops dummies silent for 10 s), one per connection. */
MC_API mc_status_t mc_real_service_start(mc_store_t *store, uint16_t port,
                                         mc_real_service_t **svc_p);
/* Closes every connection, unmaps every region, joins the threads. NULL is a no-op. */
MC_API void mc_real_service_stop(mc_real_service_t *svc);
MC_API void mc_real_service_stats(mc_real_service_t *svc, mc_real_service_stats_t *out);
/* On a dummy handle: asks its real client for its stats. */
MC_API mc_status_t mc_store_dummy_server_stats(mc_store_t *dummy, mc_real_service_stats_t *out);

#ifdef __cplusplus
}
#endif
#endif
