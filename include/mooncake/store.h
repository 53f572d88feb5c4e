/* Mooncake-C Store client: put/get objects in the shared DRAM pool.
 *
 * A store client talks to the master for metadata (where replicas live, leases) and moves
 * bytes with the Transfer Engine directly into and out of other clients' segments. It may
 * contribute memory to the pool (global_segment_size > 0) and owns a registered local buffer
 * for staging copies of non-registered user memory.
 *
 * Semantics follow upstream Mooncake:
 *  - put is create-once: putting an existing key returns MC_OK without writing; upsert
 *    overwrites.
 *  - Every get verifies the XXH3-64 checksum recorded at PutEnd before returning bytes; a
 *    mismatch is MC_ERR_CHECKSUM (never data). A get whose read lease expired before its
 *    transfer finished fails with MC_ERR_LEASE_EXPIRED.
 *  - On any failure of get_into the destination buffer may have been written to; its contents
 *    must not be consumed.
 *  - A key the master knows but cannot serve yet answers MC_ERR_REPLICA_IS_NOT_READY, not
 *    MC_ERR_OBJECT_NOT_FOUND: its put is still in flight, or its storage server has not
 *    re-mounted its segment since a master restart or takeover. Gets wait for such keys for a
 *    bounded time (mc_store_config_t.not_ready_wait_ms) before returning it.
 *
 * Thread-safety: all functions may be called concurrently from many threads on one handle.
 * Memory: every pointer argument is borrowed for the duration of the call only, except the
 * buffers of mc_store_register_buffer, which stay borrowed until unregistered.
 */
#ifndef MOONCAKE_STORE_H
#define MOONCAKE_STORE_H

#include "mooncake/status.h"
#include "mooncake/te.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mc_store mc_store_t;

#define MC_STORE_KEY_MAX 4096

/* Replica hint table sizes (mc_store_config_t.replica_hint_slots). */
#define MC_STORE_REPLICA_HINTS_DEFAULT 262144u   /* ~36 MB plus keys of 79 bytes or more */
#define MC_STORE_REPLICA_HINTS_MAX (1u << 22)    /* ~570 MB plus keys of 79 bytes or more */
#define MC_STORE_REPLICA_HINTS_OFF UINT32_MAX    /* no hint table at all */

typedef struct mc_store_config {
    const char *local_hostname;     /* "host" or "host:port"; no port = free port 12300-14300 */
    const char *metadata_server;    /* TE metadata URI: http://.../metadata, etcd://..., P2PHANDSHAKE */
    uint64_t global_segment_size;   /* bytes contributed to the pool (pre-faulted); 0 = none */
    uint64_t local_buffer_size;     /* registered staging buffer for non-registered user memory */
    const char *protocol;           /* "tcp", "auto" (shm for same-host peers) ...; NULL = "tcp" */
    const char *device_name;        /* RDMA devices; accepted and ignored (no RDMA transport) */
    const char *master_server_addr; /* "host:port" of mooncake_master */
    const char *host_label;         /* failure domain for replica placement; NULL = host part */
    uint32_t rpc_timeout_ms;        /* per master RPC; 0 = 5000 */
    uint32_t transfer_timeout_ms;   /* per data transfer; 0 = TE default */
    /* Entries of the replica hint table, which carries the hints of speculative reads and the
     * leases of the lease cache (120 bytes each plus the key): 0 = default
     * (MC_STORE_REPLICA_HINTS_DEFAULT); 1..MC_STORE_REPLICA_HINTS_MAX; or
     * MC_STORE_REPLICA_HINTS_OFF = no table (no speculative reads, no lease cache, no placement
     * feed). Other values are refused (MC_ERR_INVALID_PARAMS). Env: MC_STORE_REPLICA_HINTS. */
    uint32_t replica_hint_slots;
    /* false (default) = gets of a key this client holds a read lease on read the replica
     * without asking the master (lease cache; never on protocol "ucx"); true = every get asks
     * the master. Env: MC_STORE_LEASE_CACHE=0 sets it. */
    bool lease_cache_off;
    /* NULL = off; else a key prefix ("" = every key, at most MC_STORE_KEY_MAX bytes; copied):
     * the master pushes this client the placement and a read lease of every object committed
     * under it after setup returns (docs/internals/store-client.md, "Placement feed").
     * Env: MC_STORE_PLACEMENT_FEED. */
    const char *placement_feed_prefix;
    /* Optional transfer-engine tuning, NULL = defaults. Copied at setup; its metadata_uri,
     * local_server_name and protocol are replaced by the store's own (above), and its
     * transfer_timeout_ms by transfer_timeout_ms above when that is not 0. */
    const mc_te_config_t *te_tuning;
    /* false (default) = the client keeps upstream's client metrics (mc_store_metrics*,
     * docs/operations.md, "Client metrics"); true = none are kept (nothing timed or counted).
     * Env (programs, Python): MC_STORE_CLIENT_METRIC=0 sets it. */
    bool metrics_off;
    /* true = serve /health, /metrics and /metrics/summary over HTTP on client_http_host:
     * client_http_port (upstream's client HTTP server; Python enable_client_http_server,
     * mooncake_client --enable_http_server). Port 0 = a free port (mc_store_client_http_port
     * says which), 1..65535 = that port, else MC_ERR_INVALID_PARAMS. A port already taken does
     * not fail setup (upstream's behaviour): the client runs without the server, a warning
     * names the port, and mc_store_client_http_port returns 0. Host NULL or "" = every
     * interface, else an IPv4 address. */
    bool client_http_enable;
    int32_t client_http_port;
    const char *client_http_host;
    /* The client HTTP server requires signed requests (HTTP challenge-response,
     * docs/operations.md) when te_tuning->auth_token_file names a token file; this keeps
     * /metrics, /metrics/summary and /health public even then (counts and states only, never
     * keys; for Prometheus). mooncake_client --http_metrics_public. */
    bool client_http_metrics_public;
    /* The tenant this client acts for (upstream's tenant_id): NULL or "" = "default"; else
     * 1..64 bytes, not starting with '_', no control characters or DEL (MC_ERR_INVALID_PARAMS
     * otherwise). Keys live per tenant: the same key in two tenants is two objects
     * (docs/internals/master.md, "Tenants"). With a tenant-bound token (a token file line with
     * tenant=) the client acts as the token's tenant: "default" or unset then mean that
     * tenant, another name fails setup with MC_ERR_PERMISSION. Env (programs, Python):
     * MOONCAKE_TENANT_ID. */
    const char *tenant_id;
    /* The local-disk (SSD) tier (docs/internals/disk-tier.md, "Storage server"): non-NULL =
     * this client is a storage server with a disk store in this directory ("" = the
     * directory in MOONCAKE_OFFLOAD_FILE_STORAGE_PATH; none = MC_ERR_INVALID_PARAMS). The
     * engine's settings come from the MOONCAKE_OFFLOAD_* environment, read at setup (a bad
     * value fails setup with MC_ERR_INVALID_PARAMS). Python setup(enable_ssd_offload=True,
     * ssd_offload_path=...), mooncake_client --enable_offload=true. NULL = off. */
    const char *ssd_offload_path;
    /* How long a get (single or batch) waits for keys the master answers
     * MC_ERR_REPLICA_IS_NOT_READY for (docs/internals/store-client.md, "Keys not ready"): it
     * asks again after 10 ms, then twice as long each time up to 100 ms, until the key is
     * readable or this much time has passed since the first answer, then returns that status.
     * 0 = MC_STORE_NOT_READY_WAIT_DEFAULT_MS; MC_STORE_NOT_READY_WAIT_OFF = return it at once.
     * Env (programs, Python): MC_STORE_NOT_READY_WAIT_MS. */
    uint32_t not_ready_wait_ms;
} mc_store_config_t;

/* One heartbeat period of the storage servers (1 s), in which one re-mounts after a master
 * restart or takeover, and the round trips of its ping and re-mount. */
#define MC_STORE_NOT_READY_WAIT_DEFAULT_MS 1500u
#define MC_STORE_NOT_READY_WAIT_OFF UINT32_MAX

#define MC_STORE_CLIENT_HTTP_PORT_DEFAULT 9300 /* upstream's client_http_port */

typedef struct mc_replicate_config {
    uint32_t replica_num;           /* 0 is treated as 1 */
    bool with_soft_pin;             /* soft pin for soft_pin_ttl_ms */
    uint64_t soft_pin_ttl_ms;       /* with with_soft_pin; 0 = master default */
    bool with_hard_pin;
    const char *preferred_segment;  /* segment name or NULL */
    bool prefer_alloc_in_same_node;
    /* Upserts without with_soft_pin: false keeps the old value's soft pin (upstream's
     * SoftPinAction PRESERVE), true leaves the new value unpinned (DISABLE). */
    bool soft_pin_disable;
    /* Segment names tried first, in order, one replica on each that has room (then placement
     * as usual); when n_preferred_segments > 0, preferred_segment is not used. At most
     * MC_STORE_PREFERRED_MAX (else MC_ERR_INVALID_PARAMS). Borrowed for the call. */
    const char *const *preferred_segments;
    size_t n_preferred_segments;
} mc_replicate_config_t;

#define MC_STORE_PREFERRED_MAX 64

typedef struct mc_replica_desc {
    char segment[256];              /* segment name (its owner's TE server name) */
    char endpoint[256];             /* TE server name to transfer with */
    uint64_t addr;                  /* absolute address in the owner process */
    uint64_t size;
    int32_t status;                 /* 1 = complete/readable */
    /* MC_REPLICA_MEMORY, or MC_REPLICA_LOCAL_DISK: on a storage server's own disk (segment
     * "", addr 0, endpoint = the owner's offload endpoint, size = the object's size) */
    int32_t replica_type;
} mc_replica_desc_t;

#define MC_REPLICA_MEMORY 0
#define MC_REPLICA_LOCAL_DISK 2

/* Connect to the master, start the TE, mount the contributed segment. */
MC_API mc_status_t mc_store_create(const mc_store_config_t *cfg, mc_store_t **store_p);
/* Unmount (gracefully), stop, free. NULL is a no-op. */
MC_API void mc_store_destroy(mc_store_t *store);
/* What mc_store_health found; the values follow upstream's health_check convention. */
typedef enum mc_store_health_state {
    MC_STORE_HEALTHY = 0,            /* the master answered a ping */
    MC_STORE_NOT_SET_UP = 1,         /* no handle (NULL) */
    MC_STORE_MASTER_UNREACHABLE = 2, /* the ping failed */
} mc_store_health_t;

/* Pings the master once. */
MC_API mc_store_health_t mc_store_health(mc_store_t *store);
MC_API const char *mc_store_hostname(const mc_store_t *store);

/* Register user memory for zero-copy put_from/get_into. */
MC_API mc_status_t mc_store_register_buffer(mc_store_t *store, void *addr, size_t len);
MC_API mc_status_t mc_store_unregister_buffer(mc_store_t *store, void *addr);

/* Put from one or more pieces (concatenated). cfg may be NULL (1 replica). */
MC_API mc_status_t mc_store_put(mc_store_t *store, const char *key, const struct iovec *parts,
                                size_t n_parts, const mc_replicate_config_t *cfg);
MC_API mc_status_t mc_store_upsert(mc_store_t *store, const char *key, const struct iovec *parts,
                                   size_t n_parts, const mc_replicate_config_t *cfg);

/* Get into a heap buffer: *value_p is malloc'd (caller frees with free()), *len_p its size.
 * MC_ERR_OBJECT_NOT_FOUND on a miss. */
MC_API mc_status_t mc_store_get(mc_store_t *store, const char *key, void **value_p,
                                size_t *len_p);
/* Get into caller memory (scattered over n_parts pieces filled in order). Returns the number
 * of bytes read (>= 0) or a negative mc_status_t; MC_ERR_BUFFER_OVERFLOW if too small. */
MC_API int64_t mc_store_get_into(mc_store_t *store, const char *key, const struct iovec *parts,
                                 size_t n_parts);

/* Batch forms: results[i] is the status (put) or bytes-or-status (get) of key i.
 * The call returns MC_OK if the batch was processed (check results), or an error for the whole
 * batch (e.g. invalid arguments). parts[i]/n_parts[i] describe key i's pieces. */
MC_API mc_status_t mc_store_batch_put(mc_store_t *store, size_t n, const char *const *keys,
                                      const struct iovec *const *parts, const size_t *n_parts,
                                      const mc_replicate_config_t *cfg, bool upsert,
                                      int32_t *results);
MC_API mc_status_t mc_store_batch_get_into(mc_store_t *store, size_t n, const char *const *keys,
                                           const struct iovec *const *parts,
                                           const size_t *n_parts, int64_t *results);

/* Batch get into heap buffers: for each key found, values[i] is malloc'd with exactly
 * results[i] bytes (caller frees with free()); for others values[i] is NULL and results[i]
 * is a negative status. One master round trip and one transfer batch for all keys. */
MC_API mc_status_t mc_store_batch_get(mc_store_t *store, size_t n, const char *const *keys,
                                      void **values, int64_t *results);

/* 1 exists, 0 absent, negative error. */
MC_API int mc_store_exists(mc_store_t *store, const char *key);
MC_API mc_status_t mc_store_batch_exists(mc_store_t *store, size_t n, const char *const *keys,
                                         int32_t *results);
/* Size of the committed object in bytes, or a negative status. */
MC_API int64_t mc_store_get_size(mc_store_t *store, const char *key);
MC_API mc_status_t mc_store_remove(mc_store_t *store, const char *key, bool force);
MC_API mc_status_t mc_store_batch_remove(mc_store_t *store, size_t n, const char *const *keys,
                                         bool force, int32_t *results);
/* Number of objects removed (>= 0) or a negative status. */
MC_API int64_t mc_store_remove_by_regex(mc_store_t *store, const char *regex, bool force);
MC_API int64_t mc_store_remove_all(mc_store_t *store, bool force);

/* Upstream's BatchReplicaClear: for each key, the master drops the replicas of an object this
 * client wrote (its last put or upsert) that no reader holds a read lease on: all of them when
 * segment is "", else those in that segment (the object goes with its last replica). Space is
 * freed at once. results[i] is 0 when cleared, else why not (OBJECT_NOT_FOUND, ILLEGAL_CLIENT:
 * written by another client or recovered from the master's log, OBJECT_HAS_LEASE,
 * REPLICA_IS_NOT_READY: being written, SEGMENT_NOT_FOUND: no replica there, INVALID_KEY).
 * At most 16384 keys. Returns the call's status (then every results[i] is it). */
MC_API mc_status_t mc_store_batch_replica_clear(mc_store_t *store, size_t n,
                                               const char *const *keys, const char *segment,
                                               int32_t *results);

/* Replica copy/move tasks (upstream's CreateCopyTask, CreateMoveTask, QueryTask;
 * docs/internals/master.md, "Replica tasks"). The master queues the task for the client that
 * mounted the source segment, whose heartbeat runs it: the value's bytes are read from its
 * segment, checked against the committed checksum and written to the new replicas, which
 * readers see only once the task commits them. A copy adds a replica on each target (a target
 * that already holds one is left as it is); a move puts the source segment's replica on the
 * target and frees the source's space once the read leases on it end. id receives the task's
 * UUID (high, low). Errors: OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY (being written),
 * INVALID_PARAMS (no target or more than MC_STORE_TASK_TARGETS_MAX, a duplicate, a segment not
 * mounted, source == target, a source holding no replica of key), UNAVAILABLE_IN_CURRENT_STATUS
 * (a draining target), TASK_PENDING_LIMIT_EXCEEDED. Keys are this client's tenant's. Tasks
 * live in the master's memory: after a master restart or takeover QueryTask answers
 * TASK_NOT_FOUND (what a finished task committed stays). */
#define MC_STORE_TASK_TARGETS_MAX 8
#define MC_STORE_SEGMENT_NAME_MAX 255
#define MC_STORE_TASK_MESSAGE_MAX 1024
typedef enum { MC_TASK_REPLICA_COPY = 0, MC_TASK_REPLICA_MOVE = 1 } mc_task_type_t;
typedef enum {
    MC_TASK_PENDING = 0,    /* queued for its client */
    MC_TASK_PROCESSING = 1, /* its client fetched it */
    MC_TASK_FAILED = 2,     /* message says why (a timeout, the step that failed) */
    MC_TASK_SUCCESS = 3,
} mc_task_status_t;
typedef struct mc_store_task_info {
    uint64_t id[2];
    int type;                       /* mc_task_type_t */
    int status;                     /* mc_task_status_t */
    uint64_t created_at_ms;         /* wall clock, ms since the epoch */
    uint64_t last_updated_at_ms;
    uint8_t assigned_client[16];
    char message[MC_STORE_TASK_MESSAGE_MAX + 1];
} mc_store_task_info_t;
MC_API mc_status_t mc_store_create_copy_task(mc_store_t *store, const char *key,
                                             const char *const *targets, size_t n,
                                             uint64_t id[2]);
MC_API mc_status_t mc_store_create_move_task(mc_store_t *store, const char *key,
                                             const char *source, const char *target,
                                             uint64_t id[2]);
/* TASK_NOT_FOUND: unknown, forgotten (finished tasks are kept up to the master's
 * --max_total_finished_tasks), another tenant's, or created before a master restart. */
MC_API mc_status_t mc_store_query_task(mc_store_t *store, const uint64_t id[2],
                                       mc_store_task_info_t *out);

/* Extra segments: memory contributed after setup, each mounted with the master under its own
 * name ("<hostname>#<n>", served by this client) and named for the caller by a 16-byte id
 * (upstream's segment UUID). The heartbeat serves and re-mounts them like the setup segment;
 * mc_store_destroy unmounts and frees them. docs/internals/store-client.md, "Extra segments".
 * mount_file maps [offset, offset+size) of the file at path (MAP_SHARED; offset page-aligned,
 * the range inside the file); alloc_mount allocates size rounded up to 4 MiB of shareable
 * memory (*allocated_p). location: the TE memory location ("" or NULL: "cpu:0"). On a dummy
 * client these and mc_store_batch_replica_clear return MC_ERR_NOT_SUPPORTED. */
typedef enum { MC_STORE_SEG_FILE = 1, MC_STORE_SEG_ALLOC = 2 } mc_store_seg_kind_t;
MC_API mc_status_t mc_store_segment_mount_file(mc_store_t *store, const char *path,
                                               uint64_t offset, size_t size,
                                               const char *location, uint8_t id[16]);
MC_API mc_status_t mc_store_segment_alloc_mount(mc_store_t *store, size_t size,
                                                const char *location, uint8_t id[16],
                                                size_t *allocated_p);
/* Unmounts the extra segment `id` of that kind (SEGMENT_NOT_FOUND if there is none). grace_ms
 * 0: at once (its objects are dropped), then its memory is unmapped or freed. grace_ms > 0: a
 * graceful unmount (the master keeps it readable until no read lease on it is left, then drops
 * it); the memory is freed once the master no longer knows it (checked by the heartbeat). */
MC_API mc_status_t mc_store_segment_unmount(mc_store_t *store, const uint8_t id[16], int kind,
                                            uint64_t grace_ms);

/* How this client's gets found their bytes, counted per key since setup (all thread-safe,
 * monotonic). A key asked for once may count in several fields (a failed cached read, then
 * the master lookup). docs/internals/store-client.md. */
typedef struct mc_store_read_stats {
    uint64_t master_lookups;   /* keys looked up at the master (GetReplicaList, batch or not) */
    uint64_t lease_hits;       /* keys read under a cached read lease, without the master */
    uint64_t lease_misses;     /* cached leases given up: the read failed or did not verify
                                  (stamped by an upsert, replica gone), then asked the master */
    uint64_t speculative_hits; /* keys whose read from a hint, started before the lookup
                                  answered, was confirmed by it (one round trip saved) */
    uint64_t feed_placements;  /* placements with a read lease pushed by the master to this
                                  client's placement feed (placement_feed_prefix) */
    uint64_t offload_reads_served; /* a storage server of the SSD tier: disk reads it served
                                      to readers (BatchGetOffloadObject with a value read);
                                      upstream's get_offload_rpc_read_count */
} mc_store_read_stats_t;
MC_API void mc_store_read_stats(mc_store_t *store, mc_store_read_stats_t *out);

/* Client metrics (upstream's names; docs/operations.md, "Client metrics"). The text forms
 * return MC_OK with *text_p malloc'd (caller frees with free()), MC_ERR_NOT_SUPPORTED when the
 * client was set up with metrics_off, MC_ERR_INVALID_PARAMS for NULL arguments. */
MC_API mc_status_t mc_store_metrics_text(mc_store_t *store, char **text_p);    /* Prometheus 0.0.4 */
MC_API mc_status_t mc_store_metrics_summary(mc_store_t *store, char **text_p); /* upstream's summary */
typedef struct mc_store_op_metrics {
    uint64_t count;  /* operations observed (calls with a handle, whatever their outcome) */
    uint64_t sum_us; /* their total latency, microseconds */
} mc_store_op_metrics_t;
typedef struct mc_store_metrics {
    uint64_t read_bytes;  /* bytes returned by successful gets (single and batch) */
    uint64_t write_bytes; /* bytes written by puts/upserts: value size x replicas written */
    mc_store_op_metrics_t get, put, batch_get, batch_put;
    uint64_t rpc_count;    /* master RPCs sent (every rpc_name together) */
    uint64_t rpc_answered; /* of those, answered (observed in mooncake_client_rpc_latency) */
} mc_store_metrics_t;
/* A snapshot of the counters; same statuses as the text forms. */
MC_API mc_status_t mc_store_metrics(mc_store_t *store, mc_store_metrics_t *out);
/* The port the client HTTP server is bound to, or 0 when it does not run. */
MC_API uint16_t mc_store_client_http_port(const mc_store_t *store);

/* Replica descriptors of a committed object: *descs_p is malloc'd (free()), *n_p entries. */
MC_API mc_status_t mc_store_replica_desc(mc_store_t *store, const char *key,
                                         mc_replica_desc_t **descs_p, size_t *n_p);

#ifdef __cplusplus
}
#endif
#endif
