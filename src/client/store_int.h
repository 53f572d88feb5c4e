/* Internals of the store client shared by its files (store*.c): the mc_store handle, the
 * transfer plan that every data movement goes through, and the helpers more than one file uses.
 * Not installed; nothing outside src/client includes it.
 *
 *   store.c       create/destroy, segment mount and re-mount, heartbeat, health, buffers, stats
 *   store_xfer.c  argument checks, checksums, the transfer plan, replica hints, upsert stamps
 *   store_put.c   put, upsert, batch put/upsert
 *   store_get.c   get, get_into, batch gets: lease cache, speculative reads, verified reads
 *   store_feed.c  the placement feed thread
 *   store_keys.c  exists, size, removes, replica descriptors
 *   store_clear.c batch replica clear
 *   store_segments.c  extra segments (mounted after setup)
 *   store_metrics.c, client_http.c  client metrics and the client HTTP server (store_metrics.h)
 *
 * Locking: the handle is shared by every application thread and the heartbeat and feed
 * threads. Fields set in mc_store_create and never changed after it returns (te, te_name,
 * master, client_id, segment*, host_label, hints, lease_cache, feed_prefix, metrics, http) are
 * read without a
 * lock; counters are atomics; the rest names its lock. The hint table and the master client
 * lock internally. */
#ifndef MC_CLIENT_STORE_INT_H
#define MC_CLIENT_STORE_INT_H

#include "mooncake/store.h"

#include "client/dummy_int.h"
#include "client/master_client.h"
#include "common/auth.h"
#include "common/hash.h"
#include "client/replica_hint.h"
#include "client/store_metrics.h"
#include "common/net.h"
#include "mooncake/te.h"
#include "rpc/wire_key.h"
#include "te/te_hashed.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#define STORE_MAX_BATCH 16384
#define STORE_HEARTBEAT_MS 1000        /* or client_ttl / 4 if that is shorter */
/* A storage server serves its segment until client_ttl * 7/8 after the send time of its last
 * answered ping: the master drops it no earlier than client_ttl after receiving that ping. */
#define SERVE_TTL_NUM 7
#define SERVE_TTL_DEN 8
#define SPEC_MAX_OBJECT (1u << 20)       /* larger objects: the lookup is small next to the read */
#define LEASE_MARGIN_MS 100              /* a cached lease is used while this much of it is left */
#define STAMP_BYTES 8                    /* random bytes an upsert writes over each old replica */
#define STAMP_MAX 16                     /* old replicas stamped per key (the master keeps fewer) */
#define STAMP_WAIT_MAX_MS 600000         /* cap on store_stamp_wait (a lease TTL, from the net) */

/* A list of TE requests built for one operation; owner[i] says which object (batch index)
 * request i belongs to. Local replicas (in our own segment) are copied directly when added. */
typedef struct xfer_plan {
    mc_te_request_t *reqs;
    size_t *owner;
    size_t n;
    size_t cap_reqs, cap_owner; /* mc_array_reserve */
    /* the segment of the last remote endpoint added: a batch's objects mostly live on a few
     * storage servers, so most adds skip mc_te_segment_open (its lock and search) */
    char seg_endpoint[MC_TE_NAME_MAX]; /* "" = none yet */
    mc_te_segment_t seg;
    /* some READ since the last reset goes to a segment whose reads the engine does not hash
     * (mc_te_segment_hashes_reads; set where a segment is opened) */
    bool unhashed_seg;
    /* per request, from store_plan_start to store_plan_free: the XXH3 of the bytes a same-host
     * read delivered, when the engine computed it while copying (te_hashed.h); NULL if the
     * array could not be had (every object is then hashed by the caller) */
    mc_te_read_hash_t *hashes;
    size_t cap_hashes;
    /* NULL, or (set by the caller before store_plan_start; store_plan_reset clears it) the
     * running XXH3 stream a plan of one READ continues: the engine feeds the bytes into it as
     * they land where it can (te_hashed.h, cont; store_plan_engine_continued says whether it
     * did), so a value read in ranges in order is hashed on receipt, not in a second pass */
    mc_hash_stream_t *hash_cont;
    mc_te_xfer_status_t *sts; /* per request: store_plan_finish_each's statuses */
    size_t cap_sts;
} xfer_plan_t;

/* Reusable scratch of the batch gets (store_get.c): one block for the per-key arrays and the
 * batch's transfer plans, kept with their capacity between calls so that a warm batch
 * allocates nothing of its own. A handle keeps up to STORE_SCRATCH_POOL idle ones
 * (mc_store.scratch: a thread takes one for the length of a call; more threads at once make
 * more); one that grew past STORE_SCRATCH_KEEP_MAX bytes is freed instead of kept. */
#define STORE_SCRATCH_POOL 4
#define STORE_SCRATCH_PLANS 17 /* a batch get's early reads and its 16 lookup sub-batches */
#define STORE_SCRATCH_KEEP_MAX (8u << 20)
typedef struct store_scratch {
    void *mem;   /* store_scratch_arrays */
    size_t cap;  /* its bytes */
    xfer_plan_t plans[STORE_SCRATCH_PLANS]; /* empty (n = 0) whenever the scratch is taken */
} store_scratch_t;
typedef struct store_scratch_pool {
    _Atomic(store_scratch_t *) slot[STORE_SCRATCH_POOL]; /* NULL = empty */
} store_scratch_pool_t;

/* The client handle (mooncake/store.h: mc_store_t). Owned by whoever called mc_store_create;
 * mc_store_destroy stops both threads before freeing it. */
struct mc_store {
    /* Non-NULL: a dummy client (dummy_client.c; mooncake/dummy.h): the public functions forward
     * to it and nothing else in this handle is set. */
    struct mc_dummy *dummy;
    mc_te_t *te;
    const char *te_name;            /* owned by te */
    mc_master_client_t master;
    uint8_t client_id[16];
    /* The cluster keyring (te_tuning->auth_token_file): the transfer engine's, which loaded it
     * (mc_te_keyring), borrowed by every master connection and the HTTP server of this handle,
     * all closed before the engine is destroyed; NULL = no token. */
    const mc_auth_t *auth;

    void *segment;                  /* contributed memory (TE shareable), or NULL */
    size_t segment_size;
    uint8_t segment_uuid[16];
    char host_label[MC_HOST_MAX];

    /* Replica hints and cached leases (replica_hint.h): replica_hint_slots entries of 120 bytes
     * plus the key; the default (32 MB + keys) keeps ~200 k hot keys without set overflows.
     * NULL = no speculative reads, no lease cache. */
    mc_hint_table_t *hints;
    store_scratch_pool_t scratch;   /* idle batch-get scratches (lock-free slots) */
    bool lease_cache;               /* gets read under read leases still held (!lease_cache_off) */
    uint32_t not_ready_wait_ms;     /* cfg's, resolved (0 = off): store_get.c, not_ready_again */
    atomic_ullong n_lookups, n_lease_hits, n_lease_misses, n_spec_hits; /* mc_store_read_stats */
    atomic_ullong n_feed_placements;
    store_metrics_t *metrics;       /* NULL = metrics_off; else also master.metrics */
    client_http_t *http;            /* the client HTTP server, or NULL */

    /* Placement feed (placement_feed_prefix; store_feed.c). */
    char *feed_prefix;              /* NULL = no feed */
    /* its own master client for the long polls (the same address: a fixed master, or etcd://
     * whose leader it follows through a failover); zeroed when the feed is off */
    mc_master_client_t feed_master;
    uint64_t feed_from, feed_epoch; /* where the feed thread starts (store_feed_start) */
    pthread_t feed;
    int feed_started;
    atomic_int feed_stop;

    pthread_t heartbeat;
    int heartbeat_started;
    pthread_mutex_t hb_lock;
    pthread_cond_t hb_cond;
    int hb_stop;                    /* guarded by hb_lock */
    atomic_int master_reachable;
    atomic_bool tasks_due;          /* the last Ping said replica tasks wait (store_tasks.c) */
    atomic_uint heartbeat_ms;       /* STORE_HEARTBEAT_MS, or less for a short client_ttl */

    /* Segment fencing (store_ping; all guarded by ping_mu). */
    pthread_mutex_t ping_mu;
    uint64_t master_epoch;          /* of the last answered ping; 0 = none yet */
    uint64_t lease_ttl_ms;          /* the master's read lease, from the last answered ping */
    uint64_t remount_after_ms;      /* a re-mount is due from then on (store_ping); 0 = none */
    bool remount_undecided;         /* a new master; whether it recovered the segment: unknown */

    /* Extra segments mounted after setup (store_segments.c), all guarded by xseg_mu (taken
     * inside ping_mu, never the other way round). */
    pthread_mutex_t xseg_mu;
    struct store_xseg *xsegs;
    size_t n_xsegs, cap_xsegs;
    unsigned xseg_next;             /* names them <te name>#<n> */
    uint64_t xseg_until;            /* serving limit of the last answered ping (0 = none yet) */

    /* The local-disk tier (store_disk.c): this client's disk when it is a storage server
     * (ssd_offload_path; NULL otherwise), and its connections to other servers' offload RPC
     * servers for reads of LOCAL_DISK replicas (made on first use, under dconn_mu). */
    struct store_disk *disk;
    pthread_mutex_t dconn_mu;
    struct reader_conn *dconns;
    size_t dconn_next;
    mc_hint_table_t *disk_hints; /* with hints: disk replicas read (store_disk_spec_start) */
};
typedef struct store_disk store_disk_t;
typedef struct store_disk_spec store_disk_spec_t;
typedef struct reader_conn reader_conn_t;
typedef struct store_xseg store_xseg_t;


/* ---- store_segments.c: extra segments, driven by the heartbeat and destroy (store.c) */

size_t store_xsegs_count(mc_store_t *s);
/* Copies [addr, addr+size) of this client's extra segment `name` into buf, with *hash_p its
 * XXH3-64, under xseg_mu (an unmount waits for the copy); INVALID_REPLICA when no extra
 * segment of that name holds the range. */
mc_status_t store_xsegs_copy_out(mc_store_t *s, const char *name, uint64_t addr, uint64_t size,
                                 void *buf, uint64_t *hash_p);
/* Serve every extra segment until until_ns (an answered ping; mc_te_set_serve_until). */
void store_xsegs_serve_until(mc_store_t *s, uint64_t until_ns);
/* Re-mount them (the master asked); draining ones are dropped and freed instead. */
mc_status_t store_xsegs_remount(mc_store_t *s);
/* Free the draining segments the master no longer knows. */
void store_xsegs_reap(mc_store_t *s);
/* Fence, unmount (when `unmount`), unregister and free all of them. */
void store_xsegs_fini(mc_store_t *s, bool unmount);

/* ---- store_xfer.c: checks and checksums */

/* MC_OK, MC_ERR_INVALID_PARAMS (NULL) or MC_ERR_INVALID_KEY (empty, over MC_STORE_KEY_MAX). */
mc_status_t store_key_check(const char *key);
/* Total bytes of the parts; MC_ERR_INVALID_PARAMS for NULL pieces or an overflow. */
mc_status_t store_iov_total(const struct iovec *parts, size_t n, uint64_t *total_p);
/* XXH3-64 of the first `limit` bytes of the concatenated parts. */
uint64_t store_iov_hash(const struct iovec *parts, size_t n, uint64_t limit);
/* (store_get.c) The pieces of parts covering bytes [off, off+len) into out (at most n
 * entries); returns the count. */
size_t store_iov_sub(const struct iovec *parts, size_t n, uint64_t off, uint64_t len,
                     struct iovec *out);
/* (store_get.c) Adds bytes [off, off+len) of the parts to hs (scratch: n_parts entries). */
void store_hash_range(mc_hash_stream_t *hs, const struct iovec *parts, size_t n_parts,
                      struct iovec *scratch, uint64_t off, uint64_t len);
/* MC_OK if cfg is NULL or usable; MC_ERR_INVALID_PARAMS for more than MC_STORE_PREFERRED_MAX
 * preferred_segments, a NULL list with a count, or a NULL or over-long name in it. */
mc_status_t store_cfg_check(const mc_replicate_config_t *cfg);
/* The RPC form of cfg (may be NULL) in *out; strings are borrowed from cfg. */
McRpc__ReplicateConfig *store_rpc_config(const mc_replicate_config_t *cfg,
                                         McRpc__ReplicateConfig *out);
/* Status of a batch reply: the call's, else the reply's, else RPC_FAIL on a count mismatch. */
mc_status_t store_batch_reply_status(mc_status_t call_st, int32_t reply_st, size_t n_results,
                                     size_t n_keys);
/* Handle, keys array and batch size (at most STORE_MAX_BATCH) of a batch call. */
mc_status_t store_batch_args_check(mc_store_t *s, size_t n, const char *const *keys);
void store_uuid_random(uint8_t out[16]);

/* ---- store_xfer.c: the transfer plan (owned by its caller; store_plan_free releases it) */

void store_plan_free(xfer_plan_t *p);
/* Whether [addr, addr+size) on endpoint lies in this client's own segment. */
int store_is_local(const mc_store_t *s, const char *endpoint, uint64_t addr, uint64_t size);
/* Adds the move of `size` bytes between the parts and [addr, addr+size) on endpoint to p, or
 * copies at once when the range is local. The parts are borrowed until the plan has run. */
mc_status_t store_plan_add(mc_store_t *s, xfer_plan_t *p, mc_te_opcode_t op,
                           const char *endpoint, uint64_t addr, uint64_t size,
                           const struct iovec *parts, size_t n_parts, size_t owner);
mc_status_t store_plan_start(mc_store_t *s, xfer_plan_t *p, bool reserved,
                             mc_te_transfer_t **x);
/* Sets failed[owner] for every object with a request that did not complete (failed may be
 * NULL); returns the first error. */
mc_status_t store_plan_finish(mc_store_t *s, xfer_plan_t *p, mc_status_t start_st,
                              mc_te_transfer_t *x, unsigned char *failed);
mc_status_t store_plan_run(mc_store_t *s, xfer_plan_t *p, unsigned char *failed);
/* Empties p (no requests, no segment remembered) and keeps its arrays for the next use. */
void store_plan_reset(xfer_plan_t *p);
/* The engine's XXH3 of the bytes requests [first, last] of a plan that has run delivered, when
 * they are one request of `size` bytes that the engine copied and hashed itself (same host);
 * NULL otherwise: the caller hashes the bytes (store_iov_hash). */
const uint64_t *store_plan_engine_hash(const xfer_plan_t *p, size_t first, size_t last,
                                       uint64_t size);
/* Whether the engine fed the bytes of a plan that has run into p->hash_cont (its one READ
 * completed, hashed on receipt); false: the stream is as it was, the caller hashes them. */
bool store_plan_engine_continued(const xfer_plan_t *p);
/* store_plan_finish object by object (store_xfer.c): done(arg, owner, first, last, now_ms) for
 * each object once its requests [first, last] are final (failed[owner] set if one did not
 * complete), while later ones still arrive; now_ms: the clock read once after those requests
 * were final (so no earlier than any of their bytes arrived). The objects not passed to done
 * are the caller's to handle after it returns. */
mc_status_t store_plan_finish_each(mc_store_t *s, xfer_plan_t *p, mc_status_t start_st,
                                   mc_te_transfer_t *x, unsigned char *failed,
                                   void (*done)(void *arg, size_t owner, size_t first,
                                                size_t last, uint64_t now_ms),
                                   void *arg);

/* ---- store_xfer.c: the batch-get scratch pool (store_scratch_t) */

/* An idle scratch of the pool, or a new empty one; NULL when out of memory. */
store_scratch_t *store_scratch_take(store_scratch_pool_t *pool);
/* w->mem with room for `bytes` (grown when smaller; the old contents are not kept), or NULL
 * when out of memory. The caller carves its arrays out of it and initialises what it reads. */
void *store_scratch_arrays(store_scratch_t *w, size_t bytes);
/* Hands w back after a call, whatever its outcome: its plans are emptied (store_plan_reset)
 * and it goes to a free slot of the pool, or is freed (no slot, or over
 * STORE_SCRATCH_KEEP_MAX). NULL does nothing. */
void store_scratch_give(store_scratch_pool_t *pool, store_scratch_t *w);
/* Frees every idle scratch (mc_store_destroy; no call may be running). */
void store_scratch_pool_fini(store_scratch_pool_t *pool);
/* Hands the TE the data grants of a master answer (a tenant-bound client's; none otherwise),
 * before the plan that needs them runs (docs/security.md, "Data ports and tenants"). A grant
 * that cannot be presented is logged; the requests it covers then fail PERMISSION_DENIED. */
void store_grants_present(mc_store_t *s, McRpc__TeGrant *const *grants, size_t n);

/* ---- store_xfer.c: replica hints and upsert stamps */

bool store_hint_make(const mc_store_t *s, const McRpc__ReplicaDesc *rd,
                     const McRpc__ReplicaListResponse *rl, uint64_t t0_ms, mc_replica_hint_t *h);
void store_hint_remember(mc_store_t *s, const char *key, const McRpc__ReplicaDesc *rd,
                         const McRpc__ReplicaListResponse *rl, uint64_t t0_ms);
uint64_t store_stamp_add(mc_store_t *s, xfer_plan_t *p, const McRpc__RetiredReplicas *rr,
                         size_t max, uint8_t stamp[STAMP_BYTES], size_t owner,
                         unsigned char *failed, uint64_t *token);
void store_stamp_release(mc_store_t *s, const uint64_t *tokens, size_t n);
void store_stamp_wait(const char *op, const char *key, uint64_t lease_ms);

/* ---- store_disk.c: the local-disk (SSD) tier */

/* Opens the disk store in path (NULL/"": MOONCAKE_OFFLOAD_FILE_STORAGE_PATH) with the
 * MOONCAKE_OFFLOAD_* environment, starts the offload RPC server and the offload thread. On an
 * error the caller destroys the store (store_disk_stop cleans up what was started). */
mc_status_t store_disk_start(mc_store_t *s, const char *path);
void store_disk_stop(mc_store_t *s);
void store_disk_readers_free(mc_store_t *s);
/* Appends the SSD tier's client metrics to *text_p (replaced); nothing without a disk. */
mc_status_t store_disk_metrics_append(mc_store_t *s, char **text_p);
void store_disk_stats(mc_store_t *s, uint64_t *objects, uint64_t *bytes, uint64_t *offloaded,
                      uint64_t *served);
/* host:port of this storage server's offload RPC server ("" without a disk). */
const char *store_disk_endpoint(const mc_store_t *s);
/* Reads a LOCAL_DISK replica rd of key (size bytes) through its owner into parts; *hash_p =
 * XXH3-64 of what arrived (the caller compares it with the committed checksum). spec (may be
 * NULL; *spec is taken and set NULL): a request store_disk_spec_start sent for key, followed
 * when it asked rd's owner for this size, else given up first. */
mc_status_t store_disk_read(mc_store_t *s, const char *key, const McRpc__ReplicaDesc *rd,
                            uint64_t size, const struct iovec *parts, size_t n_parts,
                            store_disk_spec_t **spec, uint64_t *hash_p);
/* Disk hints (s->disk_hints: key -> the owner and size of the LOCAL_DISK replica this client
 * last read it from, and verified). A single get of a hinted key sends its request to that
 * owner before the master's lookup (store_disk_spec_start, when the value fits cap: NULL when
 * nothing was sent), so the owner's disk reads overlap the lookup. It is a prefetch only: the
 * get still asks the master, follows the request only if the master names that replica
 * (store_disk_read) and keeps the bytes only if they hash to the committed checksum; a
 * removed, moved or changed key fails or is read again as without it. Until store_disk_read
 * or store_disk_spec_drop takes it, the spec holds the connection to that owner: the caller
 * makes no other disk read meanwhile. */
#define STORE_DISK_HINTS 4096 /* entries of s->disk_hints (made with s->hints) */
store_disk_spec_t *store_disk_spec_start(mc_store_t *s, const char *key, uint64_t cap);
/* Gives sp up (NULL: nothing) and drops key's disk hint: the master named another replica. */
void store_disk_spec_drop(mc_store_t *s, store_disk_spec_t *sp, const char *key);
/* Records rd (size bytes) as key's disk hint after a verified read; rd NULL drops it. */
void store_disk_learn(mc_store_t *s, const char *key, const McRpc__ReplicaDesc *rd,
                      uint64_t size);
/* The same for n keys whose LOCAL_DISK replicas one owner (endpoint) holds: key i (sizes[i]
 * bytes) into parts[i] (n_parts[i] pieces); sts[i] = MC_OK (hashes[i] = XXH3-64 of what
 * arrived) or its error. Requests of up to 64 keys and 64 MiB, the next one asked for before
 * the previous one's last key is pulled; on the owner every key's disk reads in flight at once, each
 * key's bytes pulled as they land; one deadline (the store's RPC timeout, at most 60 s) for
 * the whole call. */
void store_disk_read_many(mc_store_t *s, const char *endpoint, size_t n,
                          const char *const *keys, const uint64_t *sizes,
                          const struct iovec *const *parts, const size_t *n_parts,
                          uint64_t *hashes, mc_status_t *sts);

/* ---- store_get.c */

/* Replica read order (own segment first, `avoid` last) as indexes into order[] (cap). */
size_t store_replica_order(const mc_store_t *s, McRpc__ReplicaDesc **reps, size_t n,
                           size_t *order, size_t cap, const char *avoid);
/* GetReplicaList for key: *rl_p is the answer (free with mc_rpc_response_free) on MC_OK; a key
 * without replicas is MC_ERR_OBJECT_NOT_FOUND. Counts a master lookup. */
mc_status_t store_replica_list(mc_store_t *s, const char *key, McRpc__ReplicaListResponse **rl_p);

/* ---- store_tasks.c */

/* Heartbeat thread: fetches this client's replica tasks and runs them (a few per call). */
void store_tasks_run(mc_store_t *s);

/* ---- store_feed.c */

/* Starts the placement feed for keys under prefix (NULL: no feed; length checked by the
 * caller); called last in mc_store_create. The prefix is copied. */
mc_status_t store_feed_start(mc_store_t *s, const char *prefix, const char *master_addr);
/* Stops the feed thread and frees what the feed holds; safe when it never started. */
void store_feed_stop(mc_store_t *s);

#endif
