/* Internal structures of the master core (master.c, master_wal.c, master_json.c). */
#ifndef MC_MASTER_INT_H
#define MC_MASTER_INT_H

#include "common/evict.h"
#include "master/allocator.h"
#include "master/master.h"
#include "master/wal.h"
#include "rpc/frame.h"

#include <stdatomic.h>
#include <sys/types.h>

enum { OBJ_WRITING = 1, OBJ_READABLE = 2 };
/* OF_GRANTED: replicas of the object were handed out with data grants (a tenant-bound peer's
 * answer, mc_master_grants_begin): its space is parked until they expire (obj_grant_floor) */
/* OF_START_LOGGED (in memory only, never logged): a WRITING object whose PUT_START this
 * master logged, so that its PutEnd logs a PUT_ENDS entry naming only its key (master_wal.c) */
enum { OF_HARD_PIN = 1, OF_SOFT_PIN = 2, OF_GRANTED = 4,
       OF_REUSED = 8 /* served from memory since its put (offload admission) */,
       OF_START_LOGGED = 16 };
/* the flags a record carries */
#define OF_LOGGED (OF_HARD_PIN | OF_SOFT_PIN | OF_GRANTED | OF_REUSED)
enum { SEG_FREE = 0, SEG_MOUNTED = 1, SEG_RECOVERING = 2, SEG_DRAINING = 3 };

#define SEG_NONE UINT32_MAX
/* longest key the core keeps: a user key and its tenant's prefix (common/tenant.h) */
#define MASTER_KEY_MAX (MC_RPC_MAX_KEY + MC_TENANT_KEY_EXTRA)
#define MASTER_HA_DIRTY_SLOTS (1u << 16) /* settled reads: hash buckets (512 KiB) */

typedef struct obj_rep {
    uint32_t seg;  /* segment id */
    uint32_t blk;  /* allocator block (during recovery: extent index) */
} obj_rep_t;

/* One allocation per object: this header, rep_cap replica slots, then the key bytes. */
typedef struct obj {
    struct obj *hnext;          /* hash chain */
    mc_evict_node_t node;       /* READABLE: linked in the eviction policy (m->evict);
                                   WRITING: the writing list's links (plain obj_t pointers) */
    uint64_t size;
    uint64_t checksum;
    uint64_t t_lease;           /* READABLE: lease expiry (ms); WRITING: put start (ms) */
    uint64_t t_pin;             /* soft pin expiry (ms) */
    uint32_t hash;
    uint32_t owner;             /* WRITING: serial of the client that started the put */
    uint16_t klen;
    uint8_t state, flags;
    uint8_t n_rep, rep_cap;
    uint16_t grant_u;           /* OF_GRANTED: its put's write grant ends (master's clock) by
                                   t_lease on the 2 s grid + grant_u x 2 s (obj_grant_floor) */
    obj_rep_t rep[];
} obj_t;

_Static_assert(sizeof(obj_t) == 72, "the object header stays 72 bytes (internals/master.md)");

static inline char *obj_key(obj_t *o) { return (char *)(o->rep + o->rep_cap); }

/* The writing list (by put start), linked through the objects' nodes. */
typedef struct olist {
    obj_t *head, *tail;
    uint64_t n;
} olist_t;

typedef struct extent {        /* recovery only */
    uint64_t addr, size;
    obj_t *obj;                 /* NULL = dead */
    uint32_t rep_idx;
} extent_t;

/* A put pool (master_pool.c; HA leader in standbys mode with logged PutStarts): blocks of one
 * size on one segment, allocated ahead and named by RESERVE records, that create-once PutStarts
 * take without waiting for their own PUT_START record. blk[head..n) in the order reserved;
 * grp[i]: the group commit whose RESERVE names blk[i] (usable once that group is released). */
typedef struct put_pool {
    uint64_t size;              /* block size (a multiple of 64); 0 = unused slot */
    uint64_t last_use_ms;
    uint32_t head, n, cap;
    uint32_t *blk;
    uint64_t *grp;
} put_pool_t;

#define MASTER_POOLS_PER_SEG 4      /* sizes pooled per segment */
#define MASTER_POOL_MAX_BLOCKS 256  /* blocks per pool (and per RESERVE record) */
/* reserved extents a follower keeps per segment: what a leader's pools can hold, twice */
#define MASTER_RESV_MAX (2 * MASTER_POOLS_PER_SEG * MASTER_POOL_MAX_BLOCKS)

typedef struct resv {          /* a reserved extent (replay: RESERVE records) */
    uint64_t addr, size;        /* size 0: claimed or given back (dropped at the next merge) */
} resv_t;

typedef struct freed_range {  /* standby only: space an applied record freed */
    uint64_t addr, end;         /* [addr, end), whole 64-byte granules */
    uint64_t at_ms;             /* when the standby applied the (last) record freeing it */
} freed_range_t;

/* Freed ranges a standby keeps per segment (those within recovered_reuse_delay; a power of 2):
 * beyond that many the segment keeps none and waits as a whole (untracked_free_ms), as for
 * frees whose ranges it never saw. 24 bytes each: at most 96 KiB per segment. */
#define MASTER_FREED_MAX 4096

typedef struct segment {
    int state;
    char *name, *endpoint, *host_label;
    uint8_t uuid[16];
    uint8_t owner_id[16];
    uint32_t owner_serial;
    uint64_t base, size;
    uint64_t page_size;         /* of its memory, as its owner reported (0 = not reported;
                                   not logged: learnt again at re-mount) */
    mc_master_allocator_t *alloc;
    uint64_t n_replicas;
    uint64_t deadline_ms;       /* RECOVERING: dropped after this */
    uint64_t reuse_after_ms;    /* recovered: nothing allocated in it before this */
    uint64_t untracked_free_ms; /* replay: when space in it was last freed without its range
                                   kept in freed (a snapshot applied, a replaced slot, the
                                   MASTER_FREED_MAX cap, a restart's replay): a promotion by
                                   frees lends none of the segment before this + the reuse
                                   delay; 0 = never */
    freed_range_t *freed;       /* standby only: ranges freed within the reuse delay, oldest
                                   first: a ring of cap_freed (a power of 2, at most
                                   MASTER_FREED_MAX) from freed_head, n_freed of them */
    size_t freed_head, n_freed, cap_freed;
    bool held;                  /* RECOVERING because its owner went silent (not from the WAL):
                                   restored only for owner_id */
    extent_t *ext;              /* replay only (recovery, a standby's table) */
    size_t n_ext, cap_ext, n_dead_ext; /* n_dead_ext: entries with obj == NULL */
    resv_t *resv;               /* replay only: reserved extents no put claimed, by address */
    size_t n_resv, n_dead_resv; /* n_dead_resv: entries of size 0 */
    put_pool_t pools[MASTER_POOLS_PER_SEG]; /* serving leader only (master_pool.c) */
} segment_t;

typedef struct dobj dobj_t; /* a LOCAL_DISK entry (master_disk.c) */

typedef struct client {
    uint8_t id[16];
    uint32_t serial;
    uint32_t n_writing;         /* puts it started that are still WRITING */
    bool expired;               /* silent for client_ttl: segments held or gone; the record is
                                   kept while it has puts in flight or held segments */
    bool greeted;               /* has pinged or mounted since it was registered or expired */
    uint64_t last_ping_ms;
    /* its local disk (master_disk.c): mounted with MountLocalDiskSegment */
    bool disk_mounted, disk_offloading;
    char *disk_endpoint;        /* its offload endpoint (LOCAL_DISK transport_endpoint) */
    uint64_t disk_capacity;     /* ReportSsdCapacity */
    uint64_t disk_bytes, disk_objects; /* its STORED entries */
    dobj_t *dq_head, *dq_tail;  /* offload and removal tasks not handed out yet */
    uint64_t dq_n;
    uint64_t disk_beats;        /* OffloadObjectHeartbeats received */
    uint64_t tombs_handed;      /* tombstones waiting for its next heartbeat (its ack) */
    bool disk_recovered;        /* its disk entries come from the WAL: they are served, but its
                                   disk RPCs answer UNABLE_OFFLOADING until it mounts again
                                   (and so re-registers what its disk holds) */
    uint32_t disk_round;        /* MountLocalDiskSegments received (live, not replayed): the
                                   entries confirmed or re-registered since the last one carry
                                   it; the end of a re-registration drops the others */
} client_t;

typedef struct discarded {
    uint32_t seg, blk;
    uint64_t release_ms;
    uint64_t floor_ms;          /* data grants may cover it until then: never freed earlier */
    uint64_t token;             /* retired (upsert, forced remove): ReleaseRetired frees it early
                                   (not before floor_ms) */
    bool stuck_put;             /* counted as a put-start release when freed */
} discarded_t;

struct mc_master {
    mc_master_config_t cfg;
    char *wal_dir;
    uint64_t (*clock)(void *);
    void *clock_ctx;
    uint64_t rng;

    obj_t **buckets;
    uint64_t n_buckets, n_objs;
    olist_t writing;
    mc_evict_core_t *evict;     /* READABLE objects, in the policy of cfg.eviction_policy */
    uint64_t n_readable, n_soft, n_hard; /* READABLE objects, of which carry OF_SOFT_PIN /
                                    OF_HARD_PIN (pin flags never change while READABLE) */
    /* Read leases by end second (master_lease_note): lease_ring[s % lease_ring_n] counts the
     * leases that end in second s (rounded up), for s in (lease_sec, lease_sec + n); n_leased
     * is their sum. */
    uint32_t *lease_ring;
    uint32_t lease_ring_n;
    uint64_t lease_sec, n_leased;
    uint64_t evict_capacity;    /* the policy's capacity: high watermark x mounted bytes */
    uint64_t evict_entries;     /* the object count its ghost and sketch are sized for */

    dobj_t **dbuckets;          /* LOCAL_DISK entries (master_disk.c) */
    uint64_t n_dbuckets, n_dobjs;
    uint8_t *dsketch;           /* count-min sketch of disk hits (promotion_on_hit) */
    uint64_t dsketch_adds;
    uint64_t n_promoting;       /* entries with a promotion queued or handed out */
    struct dtomb **dtbuckets;   /* removed disk copies not yet acknowledged (master_disk.c) */
    struct dtomb *dt_head, *dt_tail; /* the same, oldest first */
    uint64_t n_dtombs;

    segment_t **segs;
    uint32_t n_segs;            /* slots in use or free (ids < n_segs) */
    size_t cap_segs;
    client_t *clients;
    size_t n_clients, cap_clients;
    uint32_t next_serial;
    discarded_t *disc;
    size_t n_disc, cap_disc;
    bool granting;              /* between mc_master_grants_begin and _end */

    bool evict_pending;
    uint64_t last_slow_tick_ms;
    uint64_t view_version, epoch;
    mc_master_metrics_t cnt;    /* counters (owner thread) */

    /* WAL */
    bool wal_on;
    mc_wal_writer_t wal;
    uint64_t wal_gen;           /* generation of the open log */
    uint64_t wal_bytes_at_snap;
    pid_t snap_pid;             /* child writing a snapshot, 0 = none */
    uint64_t snap_gen;
    bool wal_dirty, wal_failed, recovering;
    bool following;             /* a standby (follow_begin until the promotion) */
    bool wal_undurable;         /* written but not fdatasync'ed yet (wal_fsync off) */
    uint64_t wal_durable_ms;    /* last fdatasync */
    bool snapshot_soon;
    /* HA (mc_master_ha_log): every record of the current group commit, framed, for the
     * replicated log; ha_log_lost when one could not be kept (the batch must not be acked);
     * ha_log_space when one of them frees or mounts space (every MOUNT, UNMOUNT, REMOVE, and
     * the COMMIT of a replica clear; not the COMMIT of a PutEnd). */
    bool ha_log_on, ha_log_lost, ha_log_space;
    mc_buf_t ha_log;
    /* set by mc_master_ha_groups after each group commit (put pools, settled reads): the
     * current buffer becomes group ha_handed + 1; NULL = not yet, or not a leader */
    const atomic_uint_fast64_t *ha_released;
    uint64_t ha_handed;
    /* settled reads (mc_master_reads_settled; allocated by the first mc_master_ha_groups):
     * ha_dirty[h & (MASTER_HA_DIRTY_SLOTS - 1)] is the last group with a record that changed
     * a key of hash h, ha_broad the last group with a record that may change what a read of
     * any key sees; NULL: every read counts as unsettled */
    uint64_t *ha_dirty;
    uint64_t ha_broad;
    uint64_t pool_bytes;        /* bytes in pool blocks (gauge) */
    /* a run of entries not yet appended (master_wal.c): PUT_STARTS_V entries of writer
     * run_cid, or PUT_ENDS entries; one record, out before any other record, the group
     * hand-over or the WAL flush. run_key, run_size, run_next: the last entry's key and size,
     * where its replicas ended (the next entry is coded against them) */
    mc_wal_buf_t run_stage;
    uint8_t run_type;           /* MC_WAL_PUT_STARTS_V or MC_WAL_PUT_ENDS while run_n > 0 */
    uint32_t run_n;
    uint8_t run_cid[16];
    uint64_t run_size;
    uint64_t run_next[MC_MASTER_MAX_REPLICAS];
    size_t run_klen;
    char run_key[MASTER_KEY_MAX];

    pthread_mutex_t snap_mu;
    mc_master_metrics_t snap;
    mc_master_segment_metrics_t *pub_segs;  /* per-segment numbers published by the cron */
    size_t n_pub_segs, cap_pub_segs;        /* (under snap_mu) */
    mc_master_tenant_info_t *pub_tenants;   /* per-tenant numbers published by the cron */
    size_t n_pub_tenants, cap_pub_tenants;  /* (under snap_mu) */

    /* replica copy/move tasks (master_tasks.c), in creation order */
    struct master_task **tasks;
    size_t n_tasks, cap_tasks;
    uint64_t n_task_pending, n_task_processing, n_task_finished;

    /* tenant accounts (master_tenants.c; strict multi-tenant mode only), sorted by name */
    mc_master_tenant_info_t *tenants;
    size_t n_tenants, cap_tenants;

    /* object event log (master_events.c) */
    struct master_ev **ev_ring;
    uint32_t ev_cap;
    uint64_t ev_first, ev_next;  /* oldest held seq, next seq */
    /* parked PollEvents calls (master_rpc.c); called by the cron and (shutdown) by destroy */
    void *ev_waiters;
    void (*ev_waiters_fn)(mc_master_t *m, bool shutdown);
};

uint64_t master_now(mc_master_t *m);
/* A READABLE object's read lease moves from old_end (its t_lease; not counted unless > now)
 * to end (now + the lease TTL): the lease gauge follows. The caller then sets t_lease. */
void master_lease_note(mc_master_t *m, uint64_t old_end, uint64_t end);
/* The same with the caller's clock reading now (a batch lookup or a promotion reads it once). */
void master_lease_note_at(mc_master_t *m, uint64_t now, uint64_t old_end, uint64_t end);
/* Objects under a read lease now (counted to the second, rounded up; an object removed while
 * leased counts until its lease would have ended). */
uint64_t master_leased_count(mc_master_t *m);
/* master_wal.c */
mc_status_t master_wal_open_and_recover(mc_master_t *m);
void master_wal_log_mount(mc_master_t *m, uint32_t seg_id);
void master_wal_log_unmount(mc_master_t *m, uint32_t seg_id);
/* frees: the object lost replicas (a replica clear), not a PutEnd's first commit */
void master_wal_log_commit(mc_master_t *m, obj_t *o, bool frees);
/* A PutEnd (o just became READABLE): a PUT_ENDS entry when its PUT_START is in the replicated
 * log (OF_START_LOGGED, cleared here), else a COMMIT */
void master_wal_log_put_end(mc_master_t *m, obj_t *o);
void master_wal_log_remove(mc_master_t *m, const char *key, size_t klen);
/* A PutStart's allocation, an upsert's too (cfg.ha_log_put_starts with the replicated log
 * on); a PUT_ENDS entry, COMMIT or REMOVE of its key supersedes it. */
void master_wal_log_put_start(mc_master_t *m, obj_t *o, const uint8_t cid[16]);
/* RESERVE: blocks blks[0..n) of bsize bytes on segment seg reserved ahead, or given back
 * (release; frees space) */
void master_wal_log_reserve(mc_master_t *m, uint32_t seg, uint64_t bsize, const uint32_t *blks,
                            uint32_t n, bool release);
/* A snapshot being written (master_wal.c). It may be written in a fork()ed child, which
 * must take no lock (docs/internals/recovery.md, "Snapshots"): its writer and its one record
 * buffer are fixed (reserved before the fork), and encoding a record only reads the table. */
typedef struct master_snap {
    mc_wal_writer_t w;
    mc_wal_buf_t rec;
} master_snap_t;
/* The record buffer, emptied: encode the next record into it, then master_snap_append it. */
mc_wal_buf_t *master_snap_rec(master_snap_t *s);
/* Appends the record encoded in master_snap_rec as type; 1 on an encoding or write error. */
int master_snap_append(master_snap_t *s, uint8_t type);
/* Appends the record encoded in b (freed) to the log, marked as freeing no memory space (a
 * light PutStart need not wait for it); nothing while recovering or without a
 * WAL. The disk tier encodes its own records (master_disk.c). */
void master_wal_append(mc_master_t *m, uint8_t type, mc_wal_buf_t *b);
void master_wal_cron(mc_master_t *m);
void master_wal_close(mc_master_t *m);
/* master.c helpers used by recovery */
obj_t *master_obj_find(mc_master_t *m, const char *key, size_t klen, uint32_t h);
obj_t *master_obj_new(mc_master_t *m, const char *key, size_t klen, uint32_t h, uint32_t nrep);
void master_obj_unlink_free(mc_master_t *m, obj_t *o);
void master_list_push(olist_t *l, obj_t *o);
void master_list_remove(olist_t *l, obj_t *o);
/* A WRITING object becomes READABLE (PutEnd, WAL replay): it enters the eviction policy. */
void master_readable_link(mc_master_t *m, obj_t *o);
/* READABLE objects in eviction order, first victim first: o = NULL gives the first. o may be
 * freed after its successor was taken. */
obj_t *master_readable_next(mc_master_t *m, obj_t *o);
uint32_t master_key_hash(const char *key, size_t klen);
segment_t *master_seg_slot(mc_master_t *m, uint32_t id);
void master_seg_free(mc_master_t *m, uint32_t id);
void master_writer_done(mc_master_t *m, uint32_t serial);
/* Finds or registers a client and refreshes its liveness (master.c); NULL on no memory. */
client_t *master_client_touch(mc_master_t *m, const uint8_t id[16], bool *was_new_p);
/* PutStart/UpsertStart (master.c); promote = a promotion's memory copy of a disk-only key
 * (which a plain put refuses as existing). */
mc_status_t master_put_start(mc_master_t *m, const uint8_t cid[16], const char *key, size_t klen,
                             uint64_t size, const mc_master_put_opts_t *opts, bool upsert,
                             bool promote, mc_master_replica_t *reps, uint32_t *n_p,
                             mc_master_retired_t *retired, bool *light_p);
/* Parks allocated block blk of segment seg until release_ms (the discard list), then frees it. */
void master_park_block(mc_master_t *m, uint32_t seg, uint32_t blk, uint64_t release_ms);
/* master_pool.c: put pools (docs/internals/ha.md, "Put pools") */
/* Pools serve this master: a leader logging PutStarts, told its group commits. */
bool master_pools_on(const mc_master_t *m);
/* A ready block of size (rounded to 64) from seg's pool; false when it has none. */
bool master_pool_take(mc_master_t *m, uint32_t seg, uint64_t size, uint32_t *blk_p);
/* Logs that block blk of seg, taken from a pool, goes back unused (the caller frees it). */
void master_pool_give_back(mc_master_t *m, uint32_t seg, uint32_t blk);
/* After a create-once put placed a replica of size on seg: creates or refills its pool. */
void master_pool_refill(mc_master_t *m, uint32_t seg, uint64_t size);
/* Gives back every block of seg's pools (SEG_NONE: of every segment), logged; returns whether
 * any was given back. */
bool master_pool_drain(mc_master_t *m, uint32_t seg);
/* Gives back the pools not used for MASTER_POOL_IDLE_MS. */
void master_pool_cron(mc_master_t *m, uint64_t now);
/* Forgets seg's pools without logging (the segment and its allocator go). */
void master_pool_forget(mc_master_t *m, segment_t *s);
/* master_disk.c: the LOCAL_DISK tier's hooks into the memory tier */
/* A get was answered from disk: counts the key's hits, queues its promotion at the threshold. */
void master_disk_hit(mc_master_t *m, const char *key, size_t klen, uint32_t h);
void master_disk_put_end(mc_master_t *m, obj_t *o);     /* eager offload (PutEnd) */
/* Eviction of victim o: DISK_EVICT = evict it now; DISK_HOLD = keep it in memory for now (its
 * offload is queued); DISK_STOP = end the eviction pass (on-evict offload without
 * offload_force_evict: the pass holds offload_cap_ratio x offloading_queue_limit victims
 * already). With offload_on_evict every held victim counts in *deferred. */
enum { DISK_EVICT = 0, DISK_HOLD = 1, DISK_STOP = 2 };
int master_disk_defer_evict(mc_master_t *m, obj_t *o, uint64_t now, uint64_t *deferred);
/* On-evict offload ahead of eviction: queues o's offload if it is admitted, has no disk entry
 * and the cap allows (*held counts the victims held, as above); false = the cap is reached. */
bool master_disk_offload_ahead(mc_master_t *m, obj_t *o, uint64_t now, uint64_t *held);
/* The key was removed or replaced: its disk copy is stale (a removal task for the owner). */
void master_disk_key_gone(mc_master_t *m, const char *key, size_t klen, uint32_t h);
/* A readable LOCAL_DISK replica of the key (owner alive, disk mounted). */
bool master_disk_has(mc_master_t *m, const char *key, size_t klen, uint32_t h);
bool master_disk_replica(mc_master_t *m, const char *key, size_t klen, uint32_t h,
                         mc_master_replica_t *out, uint64_t *size_p, uint64_t *checksum_p);
void master_disk_client_gone(mc_master_t *m, client_t *c);
/* RemoveByRegex/RemoveAll: drops every disk-only key (a stored disk copy, no memory object)
 * that match accepts, as a removal (task and tombstone for its owner); returns how many. */
uint64_t master_disk_remove_where(mc_master_t *m,
                                  bool (*match)(void *arg, const char *key, size_t klen),
                                  void *arg);
void master_disk_free(mc_master_t *m);
/* WAL: replays one MC_WAL_DISK_* record (0 = go on, 1 = no memory); at the end of a recovery
 * or takeover the recovered disks' owners get client_ttl from now to mount again; a snapshot
 * writes the disk state (returns non-zero on a write failure). */
int master_disk_replay(mc_master_t *m, uint8_t type, mc_wal_rd_t *r);
void master_disk_replay_finish(mc_master_t *m, uint64_t now);
int master_disk_snapshot(mc_master_t *m, master_snap_t *s);
void master_disk_metrics(mc_master_t *m, mc_master_metrics_t *out);
/* master_tenants.c (no-ops unless cfg.multi_tenants) */
/* o's tenant is charged dreps more replicas of o->size bytes and dobjs more objects. */
void master_tenant_charge(mc_master_t *m, const obj_t *o, int64_t dreps, int dobjs);
/* Sets o->n_rep, charging the difference (every change of n_rep goes through here). */
void master_obj_set_nrep(mc_master_t *m, obj_t *o, uint32_t n);
/* Admission of a put of `bytes` (all replicas) of internal key: MC_OK, TENANT_NOT_REGISTERED
 * or TENANT_QUOTA_EXCEEDED (after evicting the tenant's evictable objects with evict). */
mc_status_t master_tenant_admit(mc_master_t *m, const char *key, size_t klen, uint64_t bytes,
                                uint64_t (*evict)(mc_master_t *m, const mc_tenant_scope_t *scope,
                                                  uint64_t target));
void master_tenants_publish(mc_master_t *m); /* caller holds snap_mu */
void master_tenants_free(mc_master_t *m);
/* master.c helpers for master_tasks.c */
uint64_t master_rand(mc_master_t *m);
segment_t *master_seg_named(mc_master_t *m, const char *name, uint32_t *id_p);
client_t *master_client_find(mc_master_t *m, const uint8_t id[16]);
/* A read lease on READABLE o from now (counted in the gauge), as a get grants. */
void master_obj_lease_read(mc_master_t *m, obj_t *o, uint64_t now);
/* Frees replica r's block now (never handed to a reader). */
void master_rep_free_block(mc_master_t *m, obj_rep_t *r);
/* Frees r's block once o's read leases and data grants have ended (parked until then). */
void master_rep_release_after_leases(mc_master_t *m, const obj_t *o, obj_rep_t *r);
/* The replica descriptor of o's replica r (status 1 PROCESSING, 2 COMPLETE). */
void master_fill_rep(mc_master_t *m, const obj_t *o, const obj_rep_t *r, mc_master_replica_t *out,
                     int status);
/* READABLE o with room for cap replicas (cap > o->rep_cap): o is reallocated in place of the
 * old record (hash chain, eviction policy), which is freed; NULL when out of memory (o kept). */
obj_t *master_obj_grow(mc_master_t *m, obj_t *o, uint32_t cap);
/* Strict multi-tenant mode: admits bytes more of key's tenant (evicting its evictable objects
 * if needed); MC_OK otherwise. */
mc_status_t master_tenant_admit_bytes(mc_master_t *m, const char *key, size_t klen,
                                      uint64_t bytes);
/* master_tasks.c */
void master_tasks_seg_gone(mc_master_t *m, uint32_t seg_id); /* its blocks go with it */
void master_tasks_cron(mc_master_t *m, uint64_t now);        /* timeouts */
void master_tasks_free(mc_master_t *m);
/* The blocks tasks hold (allocated by a Start, not yet in an object) into out (up to cap);
 * returns how many there are (invariant checks in tests). */
size_t master_tasks_blocks(mc_master_t *m, obj_rep_t *out, size_t cap);
/* master_events.c */
mc_status_t master_events_init(mc_master_t *m, uint32_t cap);
void master_events_free(mc_master_t *m);
void master_events_obj(mc_master_t *m, int kind, obj_t *o);          /* one per replica */
void master_events_obj_seg(mc_master_t *m, int kind, obj_t *o, uint32_t seg_id);
void master_events_segment_lost(mc_master_t *m, uint32_t seg_id);

#endif
