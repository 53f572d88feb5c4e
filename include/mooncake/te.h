/* Mooncake-C Transfer Engine: moves bytes between registered memory of processes.
 *
 * Buffer lifecycle (the caller's contract): allocate -> mc_te_register -> produce data ->
 * submit -> in flight (do not free or rewrite the source/target range) -> completion seen via
 * status -> consume -> mc_te_unregister -> free. Unregistering a range with transfers in flight
 * waits for those transfers to finish or time out; it never lets a transfer touch freed memory.
 *
 * Segments: every engine publishes one RAM segment, named by its local server name
 * ("host:port"), made of the buffers it registered. A peer opens a segment by name and
 * reads/writes inside it at absolute addresses of the owning process. The serving side checks
 * that every [addr, addr+len) lies inside a registered (not yet unregistered) buffer.
 *
 * Thread-safety: every function may be called from any thread.
 */
#ifndef MOONCAKE_TE_H
#define MOONCAKE_TE_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mc_te mc_te_t;
typedef uint64_t mc_te_segment_t;   /* handle of an opened (remote or local) segment */
typedef uint64_t mc_te_batch_t;     /* handle of an allocated batch */

#define MC_TE_NAME_MAX 256          /* segment / server names, incl. NUL */
#define MC_TE_LOCATION_MAX 64       /* "cpu:0", "cuda:0", ... incl. NUL */
#define MC_TE_MAX_BATCH 65536       /* requests per batch */
#define MC_TE_NOTIFY_NAME_MAX 4096  /* bytes of a notification's name */
#define MC_TE_NOTIFY_MSG_MAX 65536  /* bytes of a notification's message */
#define MC_TE_NOTIFY_QUEUE_MAX 4096 /* notifications an engine holds until drained */
#define MC_TE_NOTIFY_QUEUE_BYTES (64u << 20) /* and their name + message bytes */

typedef enum mc_te_opcode {
    MC_TE_READ = 0,  /* remote -> local */
    MC_TE_WRITE = 1, /* local -> remote */
} mc_te_opcode_t;

typedef struct mc_te_request {
    mc_te_opcode_t opcode;
    void *local;              /* local address; need not be registered for tcp, must be for ucx */
    mc_te_segment_t target;   /* from mc_te_segment_open */
    uint64_t target_addr;     /* absolute address in the target process */
    size_t length;
} mc_te_request_t;

typedef enum mc_te_state {
    MC_TE_WAITING = 0,   /* accepted, not started */
    MC_TE_PENDING = 1,   /* in flight */
    MC_TE_INVALID = 2,
    MC_TE_CANCELED = 3,
    MC_TE_COMPLETED = 4,
    MC_TE_TIMEOUT = 5,
    MC_TE_FAILED = 6,
} mc_te_state_t;

typedef struct mc_te_xfer_status {
    mc_te_state_t state;
    size_t transferred;  /* bytes moved so far */
    mc_status_t error;   /* why FAILED/TIMEOUT/INVALID (e.g. MC_ERR_OUT_OF_RANGE); MC_OK else */
} mc_te_xfer_status_t;

typedef struct mc_te_config {
    /* "http://host:port/metadata", "etcd://host:port[;host:port]", "redis://host:port",
     * or "P2PHANDSHAKE" (docs/internals/metadata.md). */
    const char *metadata_uri;
    /* "host:port" this engine serves on; port 0 or no port = pick a free one (12300-14300
     * like upstream). The final name is returned by mc_te_local_name(). */
    const char *local_server_name;
    /* "auto" (default: shm for same-host peers, else tcp), "tcp", "shm", "ucx".
     * force_tcp = 1 forces tcp whatever this says. */
    const char *protocol;

    /* Tuning. Zero means the default stated for each field. A value outside the valid range
     * makes mc_te_create fail with MC_ERR_INVALID_PARAMS and log the field's name. The
     * library reads no environment: the tools and the Python layer fill these fields from
     * the environment variable named in brackets (tools/common/te_env.h,
     * python/mooncake/_config.py). */

    /* Per-request deadline, ms. 0 = 5000; any other value is taken as is. [MC_TE_TIMEOUT_MS] */
    uint32_t transfer_timeout_ms;
    /* Pooled tcp connections per peer. 0 = 4; 1..64 (larger values are taken as 64).
     * [MC_TE_TCP_CONNECTIONS] */
    uint32_t tcp_connections;
    /* tcp event-loop threads. 0 = 2; 1..32 (larger values are taken as 32). [MC_TE_WORKERS] */
    uint32_t worker_threads;
    /* Largest piece of a request one tcp frame carries, bytes. 0 = 1 MiB;
     * 4096..67108864 (64 MiB). [MC_TE_SLICE_SIZE] */
    uint32_t slice_size;
    /* 1 = every peer over tcp, whatever `protocol` says (no shm, no ucx). 0 = the protocol
     * decides; 0..1. [MC_FORCE_TCP] */
    uint32_t force_tcp;
    /* mc_te_alloc_shareable on 2 MiB huge pages: 0 = when len >= 2 MiB and the host has
     * enough free (the default), 1 = the same, -1 = never; -1..1.
     * [MC_TE_HUGEPAGES: "0" gives -1, "1" gives 1] */
    int32_t hugepages;
    /* Page size mc_te_alloc_shareable must use, required: 0 = as `hugepages` says (the
     * default); 2097152 (2 MiB) or 1073741824 (1 GiB) = every shareable allocation on huge
     * pages of that size (rounded up to whole pages), NULL with an error naming
     * /sys/kernel/mm/hugepages/hugepages-<kB>kB/nr_hugepages when the host has too few free,
     * never base pages (`hugepages` is then ignored). [MC_STORE_USE_HUGEPAGE and
     * MC_STORE_HUGEPAGE_SIZE, read by the store programs and the Python package] */
    uint64_t hugepage_size;
    /* How many of a peer's tcp connections one transfer may spread over. 0 = half the online
     * CPUs, at least 1; 1..64. Never more than tcp_connections. [MC_TE_TCP_STRIPE] */
    uint32_t tcp_stripe;
    /* SO_SNDBUF and SO_RCVBUF of every tcp data connection, bytes. 0 = the kernel's
     * autotuning (the default); 4096..1073741824 (1 GiB). [MC_TE_TCP_BUF] */
    uint32_t tcp_socket_buf;
    /* A thread waiting for a transfer's answers (and a tcp loop with answers waiting for
     * socket space) first spins this long, µs, before sleeping. 0 = 50; -1 = never spin;
     * -1..10000. A non-zero value also becomes the process's budget for RPC waits.
     * [MC_BUSY_POLL_US: "0" gives -1] */
    int32_t busy_poll_us;
    /* Total time of one http/etcd/redis metadata request, ms (connect: at most 2000 of it).
     * 0 = 5000; 100..600000. [MC_META_TIMEOUT_MS] */
    uint32_t metadata_timeout_ms;
    /* redis:// metadata only, ignored by the other backends (upstream's variables). With a
     * password every connection starts with AUTH [username] password; NULL or "" = no AUTH
     * (a username without a password is ignored, as upstream). The connection string may
     * carry them instead (redis://user:password@host:port/db); given both ways is refused.
     * Never logged. [MC_REDIS_USERNAME, MC_REDIS_PASSWORD] */
    const char *redis_username;
    const char *redis_password;
    /* Redis database to SELECT; 0..255 (0 = database 0, the default). [MC_REDIS_DB_INDEX] */
    uint32_t redis_db_index;
    /* Cluster token file (docs/security.md): every connection this engine accepts or opens
     * proves a secret from it, and descriptors it publishes are signed with it. NULL or "" =
     * no authentication (only safe on loopback or a private network). A store client uses the
     * same file for its master connection. 1..4096 bytes. [MC_AUTH_TOKEN_FILE] */
    const char *auth_token_file;
    /* A connection this engine accepted that carries no frame for this long, seconds, is
     * closed (a client reconnects on its next transfer; clients retire their own pooled
     * connections idle for half their own value, so set it alike on every engine). 0 = 120;
     * 1..86400. [MC_TE_IDLE_TIMEOUT_S] */
    uint32_t tcp_idle_timeout_s;
    /* Connections this engine serves at once. At the cap, a new connection first displaces
     * the oldest one that has not completed the handshake; when every open one has, the new
     * one is closed. 0 = 4096; 16..65536. [MC_TE_MAX_SERVER_CONNS] */
    uint32_t tcp_max_server_conns;
} mc_te_config_t;

/* Create the engine: start the data server, connect to metadata, publish an empty segment.
 * `cfg` and its strings are borrowed for the call only. */
MC_API mc_status_t mc_te_create(const mc_te_config_t *cfg, mc_te_t **te_p);
/* Stop serving, unpublish the segment, fail outstanding transfers, free everything. */
MC_API void mc_te_destroy(mc_te_t *te);

MC_API const char *mc_te_local_name(const mc_te_t *te);   /* valid until destroy */
/* A metadata URI fit for logs and messages: credentials ("user:pass@" after "scheme://") are
 * replaced by "***". Writes into buf (len bytes, NUL-terminated) and returns buf. */
MC_API const char *mc_te_metadata_uri_for_log(const char *uri, char *buf, size_t len);
MC_API uint16_t mc_te_rpc_port(const mc_te_t *te);

/* Memory from the engine that same-host peers can map directly (memfd-backed, pre-faulted;
 * with the config's hugepage_size on huge pages of that size or NULL; else on 2 MiB huge
 * pages when len >= 2 MiB and the host has enough free, unless the config's hugepages is -1).
 * Not registered yet: call mc_te_register. Release with mc_te_free_shareable. */
MC_API void *mc_te_alloc_shareable(mc_te_t *te, size_t len);
MC_API void mc_te_free_shareable(mc_te_t *te, void *addr);
/* The page size of the shareable allocation holding addr (2 MiB, 1 GiB or the base page
 * size), or 0 if addr is in none. */
MC_API uint64_t mc_te_shareable_page_size(mc_te_t *te, const void *addr);

/* Add [addr, addr+len) to the local segment and republish it. Overlapping registrations are
 * refused (MC_ERR_SEGMENT_ALREADY_EXISTS). `location` may be NULL ("cpu:0"). */
MC_API mc_status_t mc_te_register(mc_te_t *te, void *addr, size_t len, const char *location);
/* Remove the buffer starting at addr. Waits (up to the transfer timeout) for transfers that
 * touch it, then refuses new ones; MC_ERR_BUSY if they did not drain in time (the buffer
 * then stays registered). */
MC_API mc_status_t mc_te_unregister(mc_te_t *te, void *addr);

/* Serve the buffer registered at addr only until until_ns (CLOCK_MONOTONIC, nanoseconds; 0 =
 * no limit, the default): later tcp and shm requests of peers that touch it, and copies within
 * this engine, fail with MC_ERR_SEGMENT_FENCED. Same-host peers check the limit themselves,
 * so it holds even while this process is stopped. A store extends it with every heartbeat the
 * master answers, so a storage server that lost its master stops serving before the master
 * drops its segment (docs/internals/store-client.md, "Lease cache"). Not enforced for
 * one-sided ucx RMA. MC_ERR_OBJECT_NOT_FOUND if no buffer starts at addr. */
MC_API mc_status_t mc_te_set_serve_until(mc_te_t *te, void *addr, uint64_t until_ns);

/* Open a segment by name (its owner's local server name). Cached; cheap to call again. */
MC_API mc_status_t mc_te_segment_open(mc_te_t *te, const char *name, mc_te_segment_t *seg_p);
/* Drop the cached descriptor so the next open fetches it again. */
MC_API mc_status_t mc_te_segment_close(mc_te_t *te, mc_te_segment_t seg);
/* First registered buffer address of a segment (Python get_first_buffer_address). */
MC_API mc_status_t mc_te_segment_first_buffer(mc_te_t *te, mc_te_segment_t seg, uint64_t *addr_p);

MC_API mc_status_t mc_te_batch_alloc(mc_te_t *te, size_t max_requests, mc_te_batch_t *batch_p);
/* Submit n requests (appended after those already submitted to the batch). If submit fails,
 * none of the n requests runs or completes later. */
MC_API mc_status_t mc_te_batch_submit(mc_te_t *te, mc_te_batch_t batch,
                                      const mc_te_request_t *reqs, size_t n);
MC_API mc_status_t mc_te_batch_status(mc_te_t *te, mc_te_batch_t batch, size_t index,
                                      mc_te_xfer_status_t *status_p);
/* Fills status_p[0..n) for the first n requests; returns MC_OK when all are final. */
MC_API mc_status_t mc_te_batch_status_all(mc_te_t *te, mc_te_batch_t batch,
                                          mc_te_xfer_status_t *status_p, size_t n);
/* Free a batch. MC_ERR_BUSY while any request is still WAITING/PENDING. */
MC_API mc_status_t mc_te_batch_free(mc_te_t *te, mc_te_batch_t batch);

/* Submit n requests and wait for all (mc_te_transfer_start_reserved + mc_te_transfer_wait).
 * MC_OK when every one COMPLETED; otherwise the first error (MC_ERR_TIMEOUT,
 * MC_ERR_OUT_OF_RANGE, MC_ERR_TRANSFER_FAIL...). Optional per-request status output. */
MC_API mc_status_t mc_te_transfer_sync(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                       mc_te_xfer_status_t *status_p);

/* mc_te_transfer_sync in two halves, so the caller can do other work (an RPC) while the
 * requests are in flight: start submits (same validation and errors as the sync call; on
 * error nothing is left behind), wait finishes and frees the transfer, with the sync call's
 * result and status output. Every successful start must be followed by exactly one wait
 * (from any thread); deadlines run from the start. Until the wait begins, the engine's own
 * threads receive the answers, so a started transfer never holds up other transfers; the
 * waiter then drives its connections itself. n == 0 gives *xfer_p = NULL, which wait
 * accepts. */
typedef struct mc_te_transfer mc_te_transfer_t;
MC_API mc_status_t mc_te_transfer_start(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                        mc_te_transfer_t **xfer_p);
/* As mc_te_transfer_start, but the transfer's tcp connections are reserved for its waiter at
 * once: the answers stay in the socket until the wait, so no engine thread wakes up for them
 * (on a small machine that wake-up costs as much as the round trip). The price: other
 * transfers sharing those connections also wait for this one's waiter. For a short overlap
 * only (one RPC), with the wait following on the same thread and no other transfer waited
 * for in between (that one could be queued behind this one: it would wait for its deadline). */
MC_API mc_status_t mc_te_transfer_start_reserved(mc_te_t *te, const mc_te_request_t *reqs,
                                                 size_t n, mc_te_transfer_t **xfer_p);
MC_API mc_status_t mc_te_transfer_wait(mc_te_t *te, mc_te_transfer_t *xfer,
                                       mc_te_xfer_status_t *status_p);
/* Waits only until requests [0, upto) are final (same driving as wait) and reports them in
 * status_p[0..upto); the transfer stays, still to be finished by mc_te_transfer_wait. Lets a
 * caller consume a large transfer in order while the rest is still arriving. */
MC_API mc_status_t mc_te_transfer_wait_some(mc_te_t *te, mc_te_transfer_t *xfer, size_t upto,
                                            mc_te_xfer_status_t *status_p);

/* ---- notifications (upstream's TransferNotify) and probes ---------------------------------
 *
 * A notification is a (name, msg) pair of byte strings (not NUL-terminated on the wire, at most
 * MC_TE_NOTIFY_NAME_MAX / MC_TE_NOTIFY_MSG_MAX bytes) that one engine sends to another; the
 * receiving engine queues it until its owner drains the queue. The Python binding sends one
 * after a transfer completed (transfer_sync(..., notify=...)), so the target learns that the
 * bytes are in its memory. Each engine queues at most MC_TE_NOTIFY_QUEUE_MAX notifications and
 * MC_TE_NOTIFY_QUEUE_BYTES bytes of them: a notification arriving at a full queue is refused
 * (the sender gets MC_ERR_BUSY, the receiver counts it, see mc_te_notify_stats); nothing queued
 * is ever dropped. */

/* Send (name, msg) to the engine that serves segment seg and wait until it queued it
 * (bounded by the transfer timeout). Works for every transport (it travels on a tcp control
 * connection of its own); seg may be our own segment. MC_ERR_TOO_LARGE over a cap,
 * MC_ERR_BUSY if the receiver's queue is full, MC_ERR_CONNECTION/MC_ERR_TIMEOUT if it cannot
 * be reached. Strings are borrowed for the call. */
MC_API mc_status_t mc_te_notify_send(mc_te_t *te, mc_te_segment_t seg, const char *name,
                                     size_t name_len, const char *msg, size_t msg_len);

typedef struct mc_te_notify {
    const char *name;   /* name_len bytes, NUL-terminated (the bytes may contain NULs) */
    size_t name_len;
    const char *msg;    /* msg_len bytes, NUL-terminated */
    size_t msg_len;
} mc_te_notify_t;

/* Take up to max (0 = all) queued notifications, oldest first. *notes_p: one heap block
 * holding the *n_p entries and their strings, NULL when none; release it with
 * mc_te_notify_free. */
MC_API mc_status_t mc_te_notify_drain(mc_te_t *te, size_t max, mc_te_notify_t **notes_p,
                                      size_t *n_p);
MC_API void mc_te_notify_free(mc_te_notify_t *notes);

typedef struct mc_te_notify_stats {
    uint64_t queued;       /* held now */
    uint64_t received;     /* queued since create */
    uint64_t refused_full; /* refused: the queue was full */
    uint64_t refused_bad;  /* refused: malformed or over a cap */
} mc_te_notify_stats_t;
MC_API void mc_te_notify_stats(mc_te_t *te, mc_te_notify_stats_t *stats_p);

/* Server connections this engine closed under its listener's budgets, since create
 * (docs/internals/transfer-engine.md, "Authentication and connection budgets"). */
typedef struct mc_te_conn_stats {
    uint64_t open;              /* server connections open now */
    uint64_t closed_unauth;     /* no valid proof: wrong or missing token, or none in time */
    uint64_t closed_idle;       /* authenticated, no frame for tcp_idle_timeout_s */
    uint64_t closed_slow;       /* a frame started and not finished in time */
    uint64_t displaced;         /* unauthenticated, closed at the cap for a new connection */
    uint64_t refused_full;      /* new connections closed: the cap held only proved peers */
    /* tenant-bound peers (docs/security.md, "Data ports and tenants") */
    uint64_t denied;            /* READ/WRITE/CMA refused PERMISSION_DENIED: no grant covers it */
    uint64_t grants_refused;    /* presented grants dropped: forged, expired, other segment/tenant */
    uint64_t grants_shared;     /* presented grants another connection of the same tenant had
                                 * presented already: verified, their ranges not kept twice */
} mc_te_conn_stats_t;
MC_API void mc_te_conn_stats(mc_te_t *te, mc_te_conn_stats_t *stats_p);

/* Whether the engine serving as server_name ("host:port", a segment name) answers: one
 * round trip on a connection of its own, bounded by timeout_ms (0 = the transfer timeout).
 * MC_OK, or MC_ERR_CONNECTION / MC_ERR_TIMEOUT / MC_ERR_INVALID_PARAMS (not host:port). */
MC_API mc_status_t mc_te_probe(mc_te_t *te, const char *server_name, uint32_t timeout_ms);

#ifdef __cplusplus
}
#endif
#endif
