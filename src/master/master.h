/* Master core: the object table, segments, clients, leases, pins, eviction, put timeouts.
 *
 * Control plane only: the master hands out [addr, addr+size) ranges inside client segments and
 * tracks who may read what; the bytes move between clients with the Transfer Engine.
 *
 * Threading: a mc_master_t is owned by ONE thread (the RPC loop thread in mooncake_master; the
 * test thread in unit tests). No function here locks anything; none may be called from another
 * thread. The only exception is mc_master_metrics_snapshot(), which reads a copy published by
 * mc_master_cron() under its own mutex (see docs/internals/threads.md).
 *
 * Keys are byte strings (key, klen), 1..MC_RPC_MAX_KEY + MC_TENANT_KEY_EXTRA bytes (a
 * tenant's key as the RPC layer maps it, common/tenant.h). client ids are 16-byte UUIDs.
 * Object states (docs/internals/master.md): absent -> WRITING (PutStart) -> READABLE (PutEnd)
 * -> absent (remove / evict / segment loss); WRITING -> absent (revoke, timeout). "Reclaimable"
 * is a READABLE object with no lease and no pin. Readers never see WRITING objects, nor the
 * replicas on RECOVERING segments (recovered from the WAL, or held for a silent owner for
 * segment_hold_ms): a READABLE object with no other replica is absent to them until its owner
 * re-mounts the segment.
 */
#ifndef MC_MASTER_MASTER_H
#define MC_MASTER_MASTER_H

#include "common/evict.h"
#include "common/buf.h"
#include "common/tenant.h"
#include "mooncake/status.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#define MC_MASTER_MAX_REPLICAS 8
#define MC_MASTER_NAME_MAX 256   /* segment names, endpoints, host labels */
#define MC_MASTER_REGEX_MAX 4096

typedef enum mc_master_strategy {
    MC_STRATEGY_RANDOM = 0,
    MC_STRATEGY_FREE_RATIO_FIRST = 1,
} mc_master_strategy_t;

enum { MC_MASTER_ADMIT_ALL = 0, MC_MASTER_ADMIT_REUSED = 1 }; /* offload_admission */

typedef struct mc_master_config {
    uint64_t default_kv_lease_ttl_ms;        /* 10000 */
    uint64_t default_kv_soft_pin_ttl_ms;     /* 1800000 */
    bool allow_evict_soft_pinned_objects;    /* true */
    double eviction_ratio;                   /* 0.05 */
    double eviction_high_watermark_ratio;    /* 0.90 */
    mc_evict_policy_t eviction_policy;       /* MC_EVICT_LRU or MC_EVICT_ADAPTIVE (others:
                                                INVALID_PARAMS); docs/internals/eviction.md */
    uint64_t client_ttl_ms;                  /* 10000 */
    /* A client silent for client_ttl_ms has its mounted segments HELD this long (60000; 0 =
     * dropped at once): their objects are kept but unreadable, and come back if the same
     * client re-mounts the same segment instance (uuid) in time (docs/internals/recovery.md,
     * "Stalled clients"). */
    uint64_t segment_hold_ms;
    uint64_t put_start_discard_timeout_ms;   /* 30000 */
    uint64_t put_start_release_timeout_ms;   /* 600000 */
    bool exist_key_extends_lease;            /* false: answers upstream #2187 */
    mc_master_strategy_t strategy;           /* random */
    const char *wal_dir;                     /* NULL or "" = no WAL (borrowed during create) */
    uint64_t wal_snapshot_bytes;             /* log size that triggers a snapshot; 0 = 64 MiB */
    /* Space of a segment recovered from the WAL is not allocated for this long after the
     * recovery (a new HA leader: read leases the old leader granted on since-freed space may
     * still be in use; tools/mooncake_master.c sets default_kv_lease_ttl_ms). 0 = at once.
     * A promoted HA standby (follow_promote) counts it per freed range from the record that
     * freed it as the standby applied it (space not freed within the delay lends at once),
     * unless recovered_reuse_all (docs/internals/ha.md, "Standby and takeover"). */
    uint64_t recovered_reuse_delay_ms;
    /* follow_promote: every recovered segment waits recovered_reuse_delay from the promotion
     * (space the old leader may have lent without a log record, e.g. under data grants). */
    bool recovered_reuse_all;
    /* --ha_commit=standbys (set by master/ha.c): every create-once PutStart is logged as a
     * PUT_START record (its allocation), so that a new leader keeps the pending put's space,
     * and served from put pools once mc_master_ha_groups was called (docs/internals/ha.md);
     * only while the replicated log is on. */
    bool ha_log_put_starts;
    /* --enable_ha: this leader's view version (PingResponse.ha_view_version); 0 = no HA. */
    uint64_t ha_view_version;
    bool wal_fsync;                          /* true: fdatasync at each group commit */
    uint32_t event_buffer_size;              /* object events kept for subscribers (65536;
                                                0 = no event log) */
    /* Strict multi-tenant mode (--enable_multi_tenants, false): the master keeps each tenant's
     * usage (memory replicas, in-flight ones included), and a put needs a tenant with a quota
     * (mc_master_tenant_set_quota; else TENANT_NOT_REGISTERED) that can hold it, after evicting
     * that tenant's evictable objects if needed (else TENANT_QUOTA_EXCEEDED). */
    bool multi_tenants;
    /* The local-disk (SSD) tier (docs/internals/disk-tier.md, "Master"). Without
     * enable_offload (false) MountLocalDiskSegment answers UNABLE_OFFLOAD. offload_on_evict
     * (false): false = each PutEnd queues an offload of the value to the owner of its memory
     * segment (if that client mounted a disk taking offloads); true = eviction does, keeping
     * the victim in memory until the owner confirms or OFFLOAD_DEFER_MS (10 s) pass, for at
     * most offload_cap_ratio (0.5) x offloading_queue_limit victims per eviction pass.
     * offloading_queue_limit (50000): tasks queued per client at most. */
    bool enable_offload;
    bool offload_on_evict;
    /* Promotion on hit (false; threshold 2): a key served from disk this many times (a
     * count-min sketch of disk hits, halved every 163 840 hits) gets a promotion task for its
     * disk's owner, which writes a memory copy (mc_master_promotion_start/_end).
     * promotion_queue_limit (50000, >= 1): promotions queued or handed out at once over all
     * clients; a hit beyond it queues none. promotion_max_per_heartbeat (1, >= 1): promotion
     * tasks one offload heartbeat hands a client (the rest wait for its next heartbeat). */
    bool promotion_on_hit;
    uint32_t promotion_admission_threshold;
    uint32_t promotion_queue_limit;
    uint32_t promotion_max_per_heartbeat;
    uint64_t offloading_queue_limit;
    double offload_cap_ratio;
    /* With offload_on_evict, a victim past the per-pass cap (every victim held for its offload
     * counts) or its owner's full queue: true (default) = evicted from memory without a disk
     * copy (counted in offload_skipped); false = the eviction pass ends there (a put needing
     * the room answers NO_AVAILABLE_HANDLE until the held victims are written). */
    bool offload_force_evict;
    /* With offload_on_evict, which victims go to the disk: MC_MASTER_ADMIT_ALL (default) every
     * one; MC_MASTER_ADMIT_REUSED only those served from memory (GetReplicaList) at least once
     * since their put (a block never read again is not worth a disk write). */
    uint8_t offload_admission;
    /* Replica copy/move tasks (master_tasks.c; docs/internals/master.md, "Replica tasks"),
     * upstream's flags and defaults: at most max_total_pending_tasks PENDING (10000; a create
     * beyond answers TASK_PENDING_LIMIT_EXCEEDED), max_total_processing_tasks PROCESSING
     * (10000; FetchTasks hands out no more), max_total_finished_tasks finished ones kept for
     * QueryTask (10000; the oldest forgotten). A task PENDING for pending_task_timeout_ms or
     * PROCESSING for processing_task_timeout_ms (300000 each; 0 = never) becomes FAILED. */
    uint32_t max_total_finished_tasks;
    uint32_t max_total_pending_tasks;
    uint32_t max_total_processing_tasks;
    uint64_t pending_task_timeout_ms;
    uint64_t processing_task_timeout_ms;
    /* Millisecond monotonic clock (tests inject a fake one); NULL = CLOCK_MONOTONIC. Used from
     * the start, WAL recovery included. */
    uint64_t (*clock)(void *ctx);
    void *clock_ctx;
} mc_master_config_t;

/* Fills upstream defaults (WAL disabled). */
void mc_master_config_default(mc_master_config_t *cfg);

typedef struct mc_master mc_master_t;

/* Creates the master. With a wal_dir, recovers the state found there first (segments come back
 * RECOVERING, their objects become readable once the owner re-mounts the same segment).
 * cfg is copied (wal_dir too). */
mc_status_t mc_master_create(const mc_master_config_t *cfg, mc_master_t **m_p);
/* Flushes the WAL and frees everything. */
void mc_master_destroy(mc_master_t *m);

/* Test hook: seed of the random placement. */
void mc_master_set_seed(mc_master_t *m, uint64_t seed);

/* Periodic housekeeping (call every 10..100 ms): client liveness, recovering-segment grace,
 * stuck puts, watermark eviction, graceful unmounts, WAL snapshot, metrics snapshot. */
void mc_master_cron(mc_master_t *m);

/* Group commit: makes every WAL record appended so far durable. Call before sending replies. */
mc_status_t mc_master_wal_sync(mc_master_t *m);
/* Writes the committed state (MOUNT records of every segment, COMMIT of every committed object,
 * SNAP_END) to tmp, fsyncs and renames it to final: 0, or 1 on failure. In this process;
 * recovery.md, "Snapshots and log truncation". */
int mc_master_snapshot_write(mc_master_t *m, const char *tmp, const char *final);
/* The same in a fork()ed child (the copy-on-write image of the table at this instant), which
 * takes no lock, allocates nothing and logs nothing: returns its pid (the caller reaps it; exit
 * status 0 = written, else failed; the caller logs), or -1 (errno). */
pid_t mc_master_snapshot_fork(mc_master_t *m, const char *tmp, const char *final);
/* High availability (master/ha.h): from now on every WAL record is also kept, framed as in the
 * log file, in a buffer the replicated log takes after each group commit. */
void mc_master_ha_log_enable(mc_master_t *m);
/* The records kept since the buffer was last emptied (the caller empties it with
 * mc_buf_reset after shipping them); *lost_p = a record could not be kept since the last call
 * (no memory): the batch must not be acknowledged; *space_p = one of them frees or mounts
 * space (MOUNT, UNMOUNT, REMOVE, a replica clear's COMMIT: an allocation made after it may
 * depend on it), false when they are only PutEnd COMMITs. Owner thread. */
mc_buf_t *mc_master_ha_log(mc_master_t *m, bool *lost_p, bool *space_p);
/* An HA leader, after each group commit: the records kept so far went out up to group
 * `handed` (the buffer now collects group handed + 1), and *released (read at any time; never
 * decreasing) is the last group every later leader is guaranteed to hold. From the first call
 * on, reads can tell whether they show a change not released yet (mc_master_reads_settled),
 * and with cfg.ha_log_put_starts create-once PutStarts are served from put pools whose RESERVE
 * record's group is released (docs/internals/ha.md, "Put pools"). */
void mc_master_ha_groups(mc_master_t *m, uint64_t handed, const atomic_uint_fast64_t *released);
/* An HA leader: true when a read of the n keys of these hashes (master_key_hash of the keys
 * as stored, e.g. from mc_master_lookup_prepare) shows no change that is not released yet, so
 * its answer need not wait for the appends in flight: no record of a group after the released
 * one changed a key of the same hash bucket (MASTER_HA_DIRTY_SLOTS buckets; a shared bucket
 * only makes a read wait), and none changed what reads of every key may see (MOUNT, UNMOUNT,
 * the disk tier's records). false before mc_master_ha_groups and without HA. Owner thread. */
bool mc_master_reads_settled(const mc_master_t *m, const uint32_t *hashes, size_t n);

/* Standby (master/ha.c): a core created without a wal_dir follows a replicated log of WAL
 * records in memory and is promoted to serve when its process takes over.
 *   follow_begin: from now on the core only takes records (call right after create).
 *   follow_apply: applies the whole valid records of records[0..len) in order, as a restart
 *     replays them (recovery.md); *used_p = their bytes (a partial frame at the end is left for
 *     the next call), *n_p (optional) = records applied, *last_type_p (optional) = the type of
 *     the last one. MC_ERR_INVALID_PARAMS at a corrupt frame, MC_ERR_NO_MEMORY.
 *   follow_promote: the state a restart ends in, as of now: allocators built from the applied
 *     replicas, every segment RECOVERING until its owner re-mounts (client_ttl), a range freed
 *     by a record applied within recovered_reuse_delay lent only from that record + the delay
 *     (with recovered_reuse_all: no space lent until the delay after the promotion), every
 *     object leased for one lease period; the core answers
 *     ha_view in Pings and, with a wal_dir, opens a new log generation there and snapshots
 *     into it at the first cron. The core then serves like any other. */
mc_status_t mc_master_follow_begin(mc_master_t *m);
mc_status_t mc_master_follow_apply(mc_master_t *m, const void *records, size_t len,
                                   size_t *used_p, uint64_t *n_p, uint8_t *last_type_p);
mc_status_t mc_master_follow_promote(mc_master_t *m, const char *wal_dir, uint64_t ha_view);

/* ---- replicas handed to clients. Strings are borrowed from the segment table and stay valid
 * until the next call into the master that can unmount a segment (any call but the lookups). */
enum { MC_MASTER_REPLICA_MEMORY = 0, MC_MASTER_REPLICA_LOCAL_DISK = 2 }; /* wire ReplicaType */

typedef struct mc_master_replica {
    const char *segment_name;   /* LOCAL_DISK: "" */
    const char *endpoint;       /* LOCAL_DISK: the owner's offload endpoint */
    uint64_t addr;              /* LOCAL_DISK: 0 */
    uint64_t size;
    int status; /* 1 PROCESSING, 2 COMPLETE (wire ReplicaStatus values) */
    int type;   /* MC_MASTER_REPLICA_MEMORY or _LOCAL_DISK */
    const uint8_t *client_id;   /* LOCAL_DISK: the owner's 16-byte id; NULL for memory */
} mc_master_replica_t;

typedef struct mc_master_put_opts {
    uint32_t replica_num;          /* 0 -> 1; capped at MC_MASTER_MAX_REPLICAS */
    bool soft_pin, hard_pin;
    uint64_t soft_pin_ttl_ms;      /* with soft_pin; 0 = cfg.default_kv_soft_pin_ttl_ms */
    bool soft_pin_disable;         /* upsert without soft_pin: drop (not keep) the old pin */
    const char *preferred_segment; /* NULL/"" = none */
    /* Tried first, in order, one replica each (then placement as usual); when n > 0,
     * preferred_segment is not used. At most MC_MASTER_MAX_PREFERRED (else INVALID_PARAMS). */
    const char *const *preferred_segments;
    size_t n_preferred_segments;
} mc_master_put_opts_t;
#define MC_MASTER_MAX_PREFERRED 64

/* PutStart (upsert=false) / UpsertStart (upsert=true). reps has room for
 * MC_MASTER_MAX_REPLICAS entries; *n_p receives how many were allocated (>= 1 on MC_OK).
 * Errors: INVALID_KEY, INVALID_PARAMS (size 0 or > 1 TiB), OBJECT_ALREADY_EXISTS (put of a
 * committed key; one whose replicas are all on held segments is replaced as by an upsert), REPLICA_IS_NOT_READY (another put of the key is in flight and not yet
 * pre-emptible), OBJECT_HAS_LEASE (upsert of a key being read), NO_AVAILABLE_HANDLE (no space
 * even after evicting everything evictable). */
mc_status_t mc_master_put_start(mc_master_t *m, const uint8_t client_id[16], const char *key,
                                size_t klen, uint64_t size, const mc_master_put_opts_t *opts,
                                bool upsert, mc_master_replica_t *reps, uint32_t *n_p);
/* Replicas of values that readers hold a lease on, taken away by an upsert or a forced remove
 * ("retired"): their space stays allocated until the leases end, so the caller may stamp them
 * (master.proto, RetiredReplicas), or until the caller, having stamped them, releases them with
 * `token` (mc_master_release_retired). Values that were not leased are simply freed and not
 * reported. Up to `max` replicas are listed (reps, allocated by the master; free with
 * mc_master_retired_free); the rest only count in `unlisted` and carry no token: they are held
 * until their leases end. Initialise with max set and everything else zero. */
typedef struct mc_master_retired {
    uint32_t max;               /* list at most this many */
    mc_master_replica_t *reps;  /* n listed; strings point into the segment table */
    uint32_t n, cap;
    uint64_t unlisted;          /* retired beyond max (or when listing ran out of memory) */
    uint64_t token;             /* for mc_master_release_retired (0 when n == 0) */
    uint64_t lease_left_ms;     /* the longest lease left on what was retired */
} mc_master_retired_t;

void mc_master_retired_free(mc_master_retired_t *retired);

/* Frees now the space of the replicas retired under each of tokens[0..n) (the caller stamped
 * them); unknown tokens are ignored. Returns the number of blocks freed. A guessed token could
 * only free a block early, which readers still catch by checksum. */
size_t mc_master_release_retired(mc_master_t *m, const uint64_t *tokens, size_t n);

/* ---- data grants (docs/security.md, "Data ports and tenants"). The RPC layer signs grants for
 * the replicas of a tenant-bound peer's answer, expiring mc_master_grant_life_ms after a wall
 * clock time it read before the request reached the core: reads (GetReplicaList family) the
 * read lease TTL, writes (PutStart family) the put discard timeout, each plus
 * MC_GRANT_SKEW_MS; stamps of retired replicas the lease left plus MC_GRANT_SKEW_MS.
 *
 * Between mc_master_grants_begin and mc_master_grants_end (around one such request) the core
 * records every object whose replicas it hands out. The space of a recorded object, however
 * it is freed (remove, eviction, upsert, revoke, stuck put, replica clear), is parked on the
 * discard list until its grants have expired plus MC_GRANT_SKEW_MS more (a storage server's
 * clock may run that far behind the master's); ReleaseRetired does not free it earlier.
 * Replicas listed as retired inside a session (stamp grants) are parked at least until now +
 * the read lease TTL + 2 x MC_GRANT_SKEW_MS. Parked space stays allocated (counts as used).
 * Cost: one flag bit and 2 bytes of the object header, nothing for objects never granted. */
uint64_t mc_master_grant_life_ms(const mc_master_t *m, bool write);
void mc_master_grants_begin(mc_master_t *m);
void mc_master_grants_end(mc_master_t *m);

/* As mc_master_put_start, also reporting what the put retires (also on errors: an upsert
 * retires the old value before it places the new one) and, in *light_p (may be NULL), whether
 * its answer need not wait for its own log record: true on MC_OK when the allocation is not
 * logged (no PUT_START) or every replica came from a put pool ready for use (HA standbys mode:
 * every later leader knows those blocks; docs/internals/ha.md "Put pools"). */
mc_status_t mc_master_put_start_ex(mc_master_t *m, const uint8_t client_id[16], const char *key,
                                   size_t klen, uint64_t size, const mc_master_put_opts_t *opts,
                                   bool upsert, mc_master_replica_t *reps, uint32_t *n_p,
                                   mc_master_retired_t *retired, bool *light_p);
/* Commits with the writer's XXH3-64 of the value. ILLEGAL_CLIENT if another client started the
 * put; INVALID_WRITE if the object is already committed; OBJECT_NOT_FOUND if it is gone. */
mc_status_t mc_master_put_end(mc_master_t *m, const uint8_t client_id[16], const char *key,
                              size_t klen, uint64_t checksum);
/* Drops an in-flight put. ILLEGAL_CLIENT / INVALID_WRITE (already committed) / OBJECT_NOT_FOUND. */
mc_status_t mc_master_put_revoke(mc_master_t *m, const uint8_t client_id[16], const char *key,
                                 size_t klen);

/* Readable replicas (COMPLETE, on mounted segments) and a read lease of
 * default_kv_lease_ttl_ms. REPLICA_IS_NOT_READY if the key is being written, or if its
 * replicas are on segments recovered from the log (a restart or a takeover) whose owner has
 * not re-mounted them yet; OBJECT_NOT_FOUND if absent or its replicas are all on segments
 * held for a silent owner. */
mc_status_t mc_master_get_replicas(mc_master_t *m, const char *key, size_t klen,
                                   mc_master_replica_t *reps, uint32_t *n_p, uint64_t *size_p,
                                   uint64_t *checksum_p);
/* As mc_master_get_replicas (same statuses, reps has room for MC_MASTER_MAX_REPLICAS) but
 * read-only: no lease, no LRU touch (the admin HTTP views). */
mc_status_t mc_master_peek_replicas(mc_master_t *m, const char *key, size_t klen,
                                    mc_master_replica_t *reps, uint32_t *n_p, uint64_t *size_p);
/* MC_OK if readable or waiting for its segments' re-mount (a get answers
 * REPLICA_IS_NOT_READY meanwhile), OBJECT_NOT_FOUND otherwise. Extends the lease only with
 * exist_key_extends_lease, and only of a readable object. */
mc_status_t mc_master_exist(mc_master_t *m, const char *key, size_t klen);
/* The committed size of an object that mc_master_exist finds; OBJECT_NOT_FOUND otherwise. */
mc_status_t mc_master_get_size(mc_master_t *m, const char *key, size_t klen, uint64_t *size_p);

/* Batch lookups: hash n keys into hashes[] and prefetch their records; returns the master's
 * clock reading for the batch. Then call the _h variants (same semantics as above) with
 * hashes[i] and that reading as now, with no other master call in between: every read lease
 * the batch grants ends at now + the lease TTL. keys are borrowed for the call. */
uint64_t mc_master_lookup_prepare(mc_master_t *m, const char *const *keys, const size_t *klens,
                                  size_t n, uint32_t *hashes);
mc_status_t mc_master_get_replicas_h(mc_master_t *m, const char *key, size_t klen, uint32_t hash,
                                     uint64_t now, mc_master_replica_t *reps, uint32_t *n_p,
                                     uint64_t *size_p, uint64_t *checksum_p);
mc_status_t mc_master_exist_h(mc_master_t *m, const char *key, size_t klen, uint32_t hash,
                              uint64_t now);

/* Remove: OBJECT_HAS_LEASE while leased unless force; REPLICA_IS_NOT_READY while being
 * written (in-flight puts are only ever revoked by their writer or the timeouts). A forced
 * remove of a leased value retires its replicas into `retired` (may be NULL: then they are
 * only held until the lease ends). */
mc_status_t mc_master_remove(mc_master_t *m, const char *key, size_t klen, bool force,
                             mc_master_retired_t *retired);
/* POSIX extended regex (<= MC_MASTER_REGEX_MAX bytes). Removes matching committed objects that
 * are not leased (or all matching committed objects with force). */
mc_status_t mc_master_remove_regex(mc_master_t *m, const char *pattern, bool force,
                                   uint64_t *count_p, mc_master_retired_t *retired);
mc_status_t mc_master_remove_all(mc_master_t *m, bool force, uint64_t *count_p,
                                 mc_master_retired_t *retired);
/* Both, within one tenant's keys: removes the objects of `scope` (NULL = every key) whose user
 * key (mc_tenant_scope_key) matches `pattern` (NULL = all), with the rules above. */
mc_status_t mc_master_remove_scoped(mc_master_t *m, const mc_tenant_scope_t *scope,
                                    const char *pattern, bool force, uint64_t *count_p,
                                    mc_master_retired_t *retired);

/* Upstream's BatchReplicaClear, one key: drops the replicas of a committed object that the
 * client `cid` wrote (its last PutEnd/UpsertEnd; objects recovered from the WAL have no
 * writer) and that no reader holds a lease on: all of them with segment "", else those in
 * that segment (the object goes when none is left; the rest is logged as a commit). Space is
 * freed at once. MC_OK when cleared; otherwise why not: OBJECT_NOT_FOUND, ILLEGAL_CLIENT (not
 * the writer), OBJECT_HAS_LEASE, REPLICA_IS_NOT_READY (being written), SEGMENT_NOT_FOUND (no
 * replica in `segment`), INVALID_KEY / INVALID_PARAMS. */
mc_status_t mc_master_replica_clear(mc_master_t *m, const uint8_t cid[16], const char *key,
                                    size_t klen, const char *segment);

/* ---- the local-disk (SSD) tier (master_disk.c). Every call but unmount answers
 * UNABLE_OFFLOAD without cfg.enable_offload, UNABLE_OFFLOADING when the client has no disk
 * mounted (or was expired for silence: it mounts again). Keys are the core's internal keys.
 *
 * A get answers the LOCAL_DISK replica (one, type LOCAL_DISK, no lease) only when the key has
 * no readable memory replica; Exist and GetSize count it too. A memory eviction keeps the disk
 * replica; a remove or upsert drops it and queues a removal task for its owner. */

/* MountLocalDiskSegment: registers (or refreshes) the client's disk; endpoint = where its
 * offload reads are served (1..255 bytes, else INVALID_PARAMS). */
mc_status_t mc_master_mount_local_disk(mc_master_t *m, const uint8_t client_id[16],
                                       bool enable_offloading, const char *endpoint);
/* UnmountLocalDiskSegment: drops the client's disk replicas and tasks. */
mc_status_t mc_master_unmount_local_disk(mc_master_t *m, const uint8_t client_id[16]);
mc_status_t mc_master_report_ssd_capacity(mc_master_t *m, const uint8_t client_id[16],
                                          uint64_t bytes);

#define MC_MASTER_OFFLOAD_BATCH_MAX 1024 /* tasks one heartbeat hands out at most */
/* Removed disk copies remembered until their owner acknowledges the removal (its next
 * heartbeat after the task), so that a re-registration cannot bring them back; beyond this
 * many the oldest is forgotten (disk-tier.md, "Removal while the owner is down"). */
#define MC_MASTER_DISK_TOMBSTONES_MAX 65536
typedef struct mc_master_offload_task {
    const char *key;            /* internal key, klen bytes (in the tasks' keys block) */
    size_t klen;
    bool remove;                /* remove the key from the disk (its value was removed or
                                   replaced); the fields below are then 0 */
    bool promote;               /* promotion: read the key (size, checksum) from the disk into
                                   memory from mc_master_promotion_start; no segment/addr */
    const char *segment_name;   /* the memory replica in the client's own segment */
    uint64_t addr, size, checksum;
} mc_master_offload_task_t;
typedef struct mc_master_offload_tasks {
    mc_master_offload_task_t *items;
    uint32_t n;
    char *keys;
} mc_master_offload_tasks_t;
void mc_master_offload_tasks_free(mc_master_offload_tasks_t *t);
/* OffloadObjectHeartbeat: hands out up to max (0 or > MC_MASTER_OFFLOAD_BATCH_MAX: that cap)
 * of the client's queued tasks, oldest first; offloads whose memory replica is gone are
 * dropped. out is allocated (free with mc_master_offload_tasks_free; segment names borrowed as
 * for replicas). enable_offloading updates whether the client takes new offloads. */
mc_status_t mc_master_offload_heartbeat(mc_master_t *m, const uint8_t client_id[16],
                                        bool enable_offloading, uint32_t max,
                                        mc_master_offload_tasks_t *out);
/* NotifyOffloadSuccess of one key: the client holds (size, checksum) on its disk.
 * recovered = false: a task it was handed (else OBJECT_NOT_FOUND: removed or replaced since,
 * the client removes its copy). recovered = true: a copy found on its disk at start (creates a
 * disk-only object when the master does not know the key). INVALID_PARAMS when the key's
 * committed value differs (stale copy), REPLICA_IS_NOT_READY while it is being written,
 * OBJECT_ALREADY_EXISTS when another client holds a different value on disk. */
mc_status_t mc_master_notify_offload_success(mc_master_t *m, const uint8_t client_id[16],
                                             const char *key, size_t klen, uint64_t size,
                                             uint64_t checksum, bool recovered);
/* The end of a re-registration (NotifyOffloadSuccess with recovered and recovery_done): the
 * client has re-registered every copy on its disk since its last MountLocalDiskSegment. Each
 * of its stored LOCAL_DISK replicas that it neither re-registered nor confirmed since that
 * mount is dropped (logged as DISK_DROP; no removal task: its disk does not hold it) and
 * counted in disk_reconciled; *dropped_p (may be NULL) gets their number. Its queued offloads
 * stay. UNABLE_OFFLOADING when the client has no mounted disk (or has not mounted it again
 * since a master restart). */
mc_status_t mc_master_disk_reregistered(mc_master_t *m, const uint8_t client_id[16],
                                        uint64_t *dropped_p);
/* PromotionAllocStart: memory replicas for a promotion handed to this client (a put of the
 * disk-only key; its bytes come from the client's disk). OBJECT_NOT_FOUND if no such
 * promotion; OBJECT_ALREADY_EXISTS if memory holds the key; placement errors as PutStart. */
mc_status_t mc_master_promotion_start(mc_master_t *m, const uint8_t client_id[16],
                                      const char *key, size_t klen, mc_master_replica_t *reps,
                                      uint32_t *n_p);
/* NotifyPromotionSuccess (commits the memory copy with the disk's checksum: gets prefer it
 * from now on) / NotifyPromotionFailure (drops it). OBJECT_NOT_FOUND if no such promotion. */
mc_status_t mc_master_promotion_end(mc_master_t *m, const uint8_t client_id[16], const char *key,
                                    size_t klen, bool success);
/* EvictDiskReplica: the client dropped the key from its disk. OBJECT_NOT_FOUND if the master
 * has no LOCAL_DISK replica of it from this client. */
mc_status_t mc_master_evict_disk_replica(mc_master_t *m, const uint8_t client_id[16],
                                         const char *key, size_t klen);

/* ---- replica copy/move tasks (master_tasks.c; docs/internals/master.md, "Replica tasks").
 * Tasks live in memory only: a master restart or an HA takeover forgets them (QueryTask then
 * answers TASK_NOT_FOUND); what a finished copy or move changed is in the WAL (COMMIT). Keys
 * are internal keys (the RPC layer maps a tenant's keys). */
enum { MC_MASTER_TASK_COPY = 0, MC_MASTER_TASK_MOVE = 1 };               /* wire TaskType */
enum { MC_MASTER_TASK_PENDING = 0, MC_MASTER_TASK_PROCESSING = 1,         /* wire TaskStatus */
       MC_MASTER_TASK_FAILED = 2, MC_MASTER_TASK_SUCCESS = 3 };
#define MC_MASTER_TASK_MESSAGE_MAX 1024 /* bytes of a completion message kept */
#define MC_MASTER_TASK_FETCH_MAX 64     /* tasks one FetchTasks hands out at most */

/* A task as QueryTask and FetchTasks show it; strings borrowed until the next master call. */
typedef struct mc_master_task_info {
    uint64_t id[2];               /* upstream's UUID pair (high, low) */
    int type, status;
    uint64_t created_ms, updated_ms; /* wall clock, ms since the epoch */
    uint8_t client[16];           /* the client that runs it (owner of the source segment) */
    const char *message;          /* "" until it finishes */
    const char *key;              /* internal key, klen bytes */
    size_t klen;
    const char *source;           /* the source segment */
    const char *const *targets;   /* target segments (a move: one) */
    uint32_t n_targets;
} mc_master_task_info_t;

/* CreateCopyTask: a copy of key's value to each of targets[0..n) (1..MC_MASTER_MAX_REPLICAS
 * distinct mounted segments; a target that already holds a replica is left as it is), run by
 * the owner of a source replica chosen at random among the readable ones. Errors: INVALID_KEY;
 * OBJECT_NOT_FOUND; REPLICA_IS_NOT_READY (being written, or no readable replica);
 * INVALID_PARAMS (no target, too many, a duplicate, a bad name or one not mounted);
 * UNAVAILABLE_IN_CURRENT_STATUS (a target is draining); TASK_PENDING_LIMIT_EXCEEDED. */
mc_status_t mc_master_create_copy_task(mc_master_t *m, const char *key, size_t klen,
                                       const char *const *targets, size_t n, uint64_t id[2]);
/* CreateMoveTask: key's replica on source goes to target, run by source's owner. Errors as
 * above; INVALID_PARAMS also when source == target or source holds no replica of key. */
mc_status_t mc_master_create_move_task(mc_master_t *m, const char *key, size_t klen,
                                       const char *source, const char *target, uint64_t id[2]);
/* QueryTask: TASK_NOT_FOUND for an unknown or forgotten id. */
mc_status_t mc_master_query_task(mc_master_t *m, const uint64_t id[2], mc_master_task_info_t *out);
/* Whether the client has PENDING tasks (the Ping answer's hint). */
bool mc_master_tasks_pending(mc_master_t *m, const uint8_t cid[16]);
/* FetchTasks: up to max (capped at MC_MASTER_TASK_FETCH_MAX) of cid's PENDING tasks, oldest
 * first, become PROCESSING (not beyond max_total_processing_tasks) and are listed in out. */
mc_status_t mc_master_fetch_tasks(mc_master_t *m, const uint8_t cid[16], uint32_t max,
                                  mc_master_task_info_t *out, uint32_t *n_p);
/* CopyStart / MoveStart (type) of a PROCESSING task of cid: leases the object for reading and
 * allocates a replica on each target that holds none (held by the task, not readable): *src
 * is the source replica (in cid's own segment), reps[0..*n_p) the new ones (room for
 * MC_MASTER_MAX_REPLICAS), *size_p / *checksum_p the committed value's. Errors:
 * TASK_NOT_FOUND, ILLEGAL_CLIENT (another client's task), INVALID_PARAMS (wrong type, already
 * started), OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY, SEGMENT_NOT_FOUND (the source replica or a
 * target is gone), NO_AVAILABLE_HANDLE (a target has no room), INVALID_PARAMS (the object
 * would have more than MC_MASTER_MAX_REPLICAS replicas). */
mc_status_t mc_master_task_start(mc_master_t *m, const uint8_t cid[16], const uint64_t id[2],
                                 int type, mc_master_replica_t *src, mc_master_replica_t *reps,
                                 uint32_t *n_p, uint64_t *size_p, uint64_t *checksum_p);
/* CopyEnd / MoveEnd (commit = true): the new replicas join the object (a move drops its source
 * replica, whose space is freed once the read leases on it end), logged as a COMMIT of the
 * object. CopyRevoke / MoveRevoke (commit = false): the new replicas are freed. Either way
 * the task stays PROCESSING until MarkTaskToComplete. An End whose object changed since the
 * Start (removed, replaced, the source or a target segment gone) frees the new replicas and
 * answers OBJECT_NOT_FOUND / INVALID_WRITE / SEGMENT_NOT_FOUND. */
mc_status_t mc_master_task_end(mc_master_t *m, const uint8_t cid[16], const uint64_t id[2],
                               int type, bool commit);
/* MarkTaskToComplete: the task (PROCESSING, cid's) becomes SUCCESS or FAILED with message
 * (first MC_MASTER_TASK_MESSAGE_MAX bytes kept); replicas still held are freed. */
mc_status_t mc_master_task_complete(mc_master_t *m, const uint8_t cid[16], const uint64_t id[2],
                                    int status, const char *message);

/* ---- segments and clients */
typedef struct mc_master_segment_info {
    const char *name;
    uint64_t base, size;
    const char *host_label;   /* may be NULL/"" */
    const char *te_endpoint;  /* may be NULL/"" (then = name) */
    uint8_t uuid[16];         /* chosen by the owner when it allocated the memory */
    uint64_t page_size;       /* its memory's page size: 0 = not reported, else a power of
                                 two in [4096, 1 GiB] (else INVALID_PARAMS) */
} mc_master_segment_info_t;

/* Mount (remount=false) or ReMount (remount=true; same checks, used after NEED_REMOUNT).
 * Re-mounting a segment the master knows (same name, base, size, uuid) is idempotent and
 * restores a RECOVERING segment with its objects; a segment held for its silent owner
 * (segment_hold_ms) is restored only for that same client id. A RECOVERING or held segment
 * mounted with other memory (or, held, by another client) is dropped and mounted fresh.
 * SEGMENT_ALREADY_EXISTS if the name is taken by another live mount; INVALID_PARAMS on bad
 * fields. */
mc_status_t mc_master_mount(mc_master_t *m, const uint8_t client_id[16],
                            const mc_master_segment_info_t *si, bool remount);
/* Unmount: drops every replica on the segment now. Graceful: stops new allocations there and
 * unmounts once no object with a replica on it holds a read lease. SEGMENT_NOT_FOUND,
 * ILLEGAL_CLIENT (not the owner). */
mc_status_t mc_master_unmount(mc_master_t *m, const uint8_t client_id[16], const char *name,
                              bool graceful);
/* Heartbeat. *need_remount_p = true when the master did not know the client or had expired
 * it for silence (its segments held or dropped); it knows it from now on. */
mc_status_t mc_master_ping(mc_master_t *m, const uint8_t client_id[16], bool *need_remount_p);

typedef struct mc_master_segment_status {
    int state;      /* wire SegmentStatus: 1 MOUNTED, 2 RECOVERING, 3 DRAINING */
    uint64_t capacity, used, replicas;
} mc_master_segment_status_t;
mc_status_t mc_master_query_segment(mc_master_t *m, const char *name,
                                    mc_master_segment_status_t *out);

/* ---- observability */

/* Upper bounds (bytes) of master_value_size_bytes' buckets (upstream's: 4 KiB ... 64 MiB); a
 * last bucket holds the larger values. */
#define MC_MASTER_VALUE_SIZE_BUCKETS 7
extern const uint64_t mc_master_value_size_le[MC_MASTER_VALUE_SIZE_BUCKETS];

typedef struct mc_master_metrics {
    uint64_t allocated_bytes, total_capacity_bytes;
    uint64_t key_count, writing_count, active_clients, mounted_segments, recovering_segments;
    /* committed objects put with a soft pin (an expired pin is counted until the object goes) */
    uint64_t soft_pin_key_count;
    uint64_t hard_pin_key_count; /* committed objects put with a hard pin */
    /* committed objects under a read lease (to the second, rounded up; one removed while
     * leased counts until its lease would have ended) */
    uint64_t leased_key_count;
    uint64_t successful_evictions, evicted_objects, evicted_bytes, failed_evictions;
    uint64_t put_start_discards, put_start_releases;
    uint64_t put_pool_hits;       /* replicas placed in put pool blocks (HA standbys mode) */
    uint64_t put_pool_bytes;      /* gauge: bytes held in put pools (counted as allocated) */
    uint64_t put_start_alloc_failures;  /* PutStarts refused NO_AVAILABLE_HANDLE */
    uint64_t put_start_partial_allocations; /* PutStarts placed with fewer replicas than asked */
    /* committed puts by value size: bucket[i] counts sizes <= le[i] and > le[i-1] (not
     * cumulative); bucket[MC_MASTER_VALUE_SIZE_BUCKETS] the sizes above the last bound */
    uint64_t value_size_bucket[MC_MASTER_VALUE_SIZE_BUCKETS + 1];
    uint64_t value_size_count, value_size_sum;
    uint64_t lease_blocked_removes;
    uint64_t wal_records, wal_bytes, wal_syncs, snapshots;
    double fragmentation;   /* capacity-weighted over mounted segments */
    uint64_t view_version, epoch;
    uint64_t events;        /* object events appended (= last seq) */
    /* local-disk tier: STORED LOCAL_DISK replicas and their bytes, the capacity the disks
     * reported, clients with a mounted disk, tasks queued; counters */
    uint64_t disk_objects, disk_bytes, disk_capacity_bytes, disk_clients, offload_queue_depth;
    uint64_t offload_queued, offload_succeeded, offload_dropped, disk_evicted;
    uint64_t offload_skipped; /* on-evict victims evicted without a disk copy (cap, full queue) */
    uint64_t disk_reconciled; /* LOCAL_DISK replicas dropped at the end of a re-registration
                                 (their owner's disk no longer held them) */
    uint64_t promotion_in_flight;            /* promotions queued or handed out (gauge) */
    uint64_t promotions_queued, promotions;  /* counters: queued; memory copies committed */
    uint64_t tasks_pending, tasks_processing; /* replica tasks (gauges) */
    uint64_t tasks_succeeded, tasks_failed;   /* counters */
} mc_master_metrics_t;

/* Any thread: copy of the numbers published by the last cron. */
void mc_master_metrics_snapshot(mc_master_t *m, mc_master_metrics_t *out);
/* Owner thread: live numbers. */
void mc_master_metrics_now(mc_master_t *m, mc_master_metrics_t *out);

/* One mounted (or draining) segment's numbers, as published by the last cron. */
typedef struct mc_master_segment_metrics {
    char name[MC_MASTER_NAME_MAX];
    uint64_t allocated_bytes, capacity_bytes;
} mc_master_segment_metrics_t;

/* Any thread: a copy of the per-segment numbers published by the last cron (the segments
 * counted in total_capacity_bytes). *out_p is malloc'ed (free with mc_free; NULL when *n_p is
 * 0). MC_ERR_NO_MEMORY if the copy cannot be made. */
mc_status_t mc_master_segment_metrics_snapshot(mc_master_t *m, mc_master_segment_metrics_t **out_p,
                                               size_t *n_p);

/* ---- tenant quotas (master_tenants.c; docs/internals/master.md, "Tenants"). Quotas and usage
 * are kept only in strict multi-tenant mode (cfg.multi_tenants); otherwise the calls that
 * change them answer UNAVAILABLE_IN_CURRENT_MODE. */
#define MC_MASTER_TENANT_QUOTA_MAX ((uint64_t)INT64_MAX) /* bytes */
#define MC_MASTER_MAX_TENANTS 65536u                     /* tenants with a quota or usage */
#define MC_MASTER_TENANT_EVICT_SCAN 65536u /* objects a quota eviction looks at, at most */

typedef struct mc_master_tenant_info {
    char name[MC_TENANT_MAX + 1];
    uint64_t quota;          /* bytes; 0 = no policy (not registered) */
    uint64_t used;           /* bytes of memory replicas charged (in-flight included) */
    uint64_t objects;        /* objects (in-flight included) */
    uint64_t rejects;        /* puts refused with TENANT_QUOTA_EXCEEDED */
} mc_master_tenant_info_t;

/* Owner thread: sets tenant's quota (1..MC_MASTER_TENANT_QUOTA_MAX, else INVALID_PARAMS; a
 * valid tenant name). A quota under the current usage only stops new puts. TOO_LARGE when
 * MC_MASTER_MAX_TENANTS tenants are known. */
mc_status_t mc_master_tenant_set_quota(mc_master_t *m, const char *tenant, uint64_t quota);
/* Owner thread: drops tenant's quota. OBJECT_NOT_FOUND without one; TENANT_NOT_EMPTY while it
 * owns objects or usage. */
mc_status_t mc_master_tenant_clear_quota(mc_master_t *m, const char *tenant);
/* Owner thread: one tenant's numbers (OBJECT_NOT_FOUND when it has neither quota nor usage). */
mc_status_t mc_master_tenant_get(mc_master_t *m, const char *tenant, mc_master_tenant_info_t *out);
/* Owner thread: the tenants with a quota or usage, sorted by name, into *out_p (mc_free;
 * NULL when *n_p is 0). Any thread: the same, as published by the last cron (metrics). */
mc_status_t mc_master_tenant_list(mc_master_t *m, mc_master_tenant_info_t **out_p, size_t *n_p);
mc_status_t mc_master_tenant_metrics_snapshot(mc_master_t *m, mc_master_tenant_info_t **out_p,
                                              size_t *n_p);

/* ---- admin views (master_json.c; owner thread, read-only: no lease, no LRU touch). Each
 * returns a NUL-terminated string the caller frees with mc_free, or NULL. */

/* The admin HTTP queries act on one tenant's keys: scope (common/tenant.h) maps the keys asked
 * for to internal keys (NULL: as "default" does: unchanged; a key starting with the byte
 * MC_TENANT_MARK is INVALID_KEY) and keeps the listing to that tenant (NULL: every key); keys
 * in answers are the user's.
 *
 * /query_key: {"success":true,"data":[descriptor per readable replica], ...}, a descriptor being
 * upstream's {"size_","buffer_address_","protocol_","transport_endpoint_"}, followed by our
 * fields (key, size, checksum, leased, hard_pinned, soft_pinned, replicas). NULL with *st_p:
 * OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY (being written), INVALID_KEY or NO_MEMORY. */
char *mc_master_query_key_json(mc_master_t *m, const mc_tenant_scope_t *scope, const char *key,
                               size_t klen, mc_status_t *st_p);
/* /batch_query_keys: {"success":true,"data":{"<key>":{"ok":true,"values":[descriptors]} or
 * {"ok":false,"error":"OBJECT_NOT_FOUND"}, ...}}. Keys must be valid UTF-8 (JSON object
 * names); borrowed for the call. NULL only when out of memory. */
char *mc_master_batch_query_keys_json(mc_master_t *m, const mc_tenant_scope_t *scope,
                                      const char *const *keys, const size_t *klens, size_t n);
/* /get_all_keys: the keys with a readable replica, one per line, in table order, at most
 * max_bytes of them (whole lines): *truncated_p says whether keys were left out, *n_p how many
 * are listed. NULL when out of memory. */
char *mc_master_key_list(mc_master_t *m, const mc_tenant_scope_t *scope, size_t max_bytes,
                         size_t *n_p, bool *truncated_p);
/* /api/v1/tenant_quotas: upstream's {"success":true,"data":<snapshot>} for one tenant (one:
 * t[0]) or "data":[snapshots] for n; a snapshot is upstream's tenant_id,
 * requested_quota_bytes, effective_quota_bytes, charged_bytes, admission_closed, over_quota,
 * has_explicit_policy, then our objects and quota_reject_total. */
char *mc_master_tenants_json(const mc_master_tenant_info_t *t, size_t n, bool one);
/* /get_all_segments: names of the mounted (and draining) segments, one per line. */
char *mc_master_segment_names(mc_master_t *m);
/* /get_segments_detail: {"total_segments":N,"segments":[...]} with upstream's fields and ours,
 * for every segment the master knows (recovering ones too). */
char *mc_master_segments_detail_json(mc_master_t *m);
/* /query_segment: upstream's text ("<name>\nUsed(bytes): U\nCapacity(bytes) : C\n"); NULL
 * with *st_p (SEGMENT_NOT_FOUND, NO_MEMORY). */
char *mc_master_query_segment_text(mc_master_t *m, const char *name, mc_status_t *st_p);

/* Owner thread: the configured read lease, and the segment-set version / master start epoch. */
uint64_t mc_master_lease_ttl_ms(const mc_master_t *m);
void mc_master_view(const mc_master_t *m, uint64_t *view_version_p, uint64_t *epoch_p);

/* ---- object events (docs/internals/conductor.md §2). The master appends one event per
 * (object, replica segment) when an object is committed (PutEnd/UpsertEnd), evicted, removed
 * (Remove, RemoveByRegex, RemoveAll, upsert replacement), or becomes readable again because
 * its RECOVERING segment was re-mounted (committed); one SEGMENT_LOST per segment that is
 * unmounted or dropped. Sequence numbers start at 1 per epoch (master start), +1 per event.
 * The last event_buffer_size events are kept. */
enum {
    MC_MASTER_EV_COMMITTED = 1, /* values = mc_conductor_event_kind_t = wire KvEvent.kind */
    MC_MASTER_EV_EVICTED = 2,
    MC_MASTER_EV_REMOVED = 3,
    MC_MASTER_EV_SEGMENT_LOST = 4,
};

typedef struct mc_master_event {
    uint64_t seq;
    int kind;
    const char *key;       /* NUL-terminated ("" for SEGMENT_LOST); klen bytes */
    uint32_t klen;
    uint64_t size;         /* object bytes (0 for SEGMENT_LOST) */
    const char *segment;   /* NUL-terminated segment name */
    const char *host;      /* NUL-terminated host label ("" if the segment has none) */
} mc_master_event_t;

typedef struct mc_master_events_info {
    uint64_t epoch;        /* this master's epoch */
    uint64_t first_seq;    /* oldest event still held */
    uint64_t next_seq;     /* seq the next event will get */
    bool gap;              /* from_seq is no longer (or not yet) held, or epoch differs */
} mc_master_events_info_t;

/* Owner thread: up to max events from from_seq into out[]. Strings point into the log and stay
 * valid until the next call that can append events (any mutating call or the cron).
 * epoch 0 = not checked. On a gap no events are returned (info_p->gap). MC_ERR_NOT_SUPPORTED
 * when the log is disabled (event_buffer_size 0). */
mc_status_t mc_master_events_read(mc_master_t *m, uint64_t from_seq, uint64_t epoch, size_t max,
                                  mc_master_event_t *out, size_t *n_p,
                                  mc_master_events_info_t *info_p);
/* Owner thread: would a read from from_seq return something now (events or a gap)? */
bool mc_master_events_pending(const mc_master_t *m, uint64_t from_seq, uint64_t epoch);

/* One committed object of a listing: key (klen bytes, not NUL-terminated) and its n readable
 * replicas' segment names and host labels, all borrowed for the call. Non-MC_OK aborts. */
typedef mc_status_t (*mc_master_list_fn)(void *ctx, const char *key, size_t klen, uint64_t size,
                                         const char *const *segments, const char *const *hosts,
                                         uint32_t n);
/* Owner thread: a page of the committed objects with readable replicas, starting at cursor
 * (0 = start), at least max objects unless the table ends (whole hash buckets). *seq_p is the
 * next event seq at the time of the call, *epoch_p the epoch. Objects present for the whole
 * listing are listed at least once; objects that change during a multi-page listing are covered
 * by the events from the first page's *seq_p on (see docs/internals/conductor.md). */
mc_status_t mc_master_list_objects(mc_master_t *m, uint64_t cursor, size_t max,
                                   mc_master_list_fn fn, void *ctx, uint64_t *next_cursor_p,
                                   bool *done_p, uint64_t *seq_p, uint64_t *epoch_p);

/* Owner thread: number of objects (any state). */
uint64_t mc_master_object_count(const mc_master_t *m);
/* The eviction policy's counters (hits, misses, ghost hits, its memory, adaptive's current
 * candidate); owner thread only. */
void mc_master_policy_stats(const mc_master_t *m, mc_evict_stats_t *s);

#endif
