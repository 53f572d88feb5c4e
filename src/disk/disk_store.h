/* The SSD tier's storage engine: objects in append-only bucket files on a local file system,
 * an in-memory index (storage key -> location), io_uring reads with O_DIRECT and deadlines,
 * checksums verified on every read, watermark eviction by whole buckets, and recovery of the
 * index from the files after a restart (also after kill -9 in the middle of a write).
 * docs/internals/disk-tier.md describes the format and the rules.
 *
 * Keys: an object is named by (tenant, key). The storage key is tenant '\0' key (upstream's
 * layout); tenant NULL or "" means "default". Keys are 1..MC_DISK_USER_KEY_MAX bytes.
 *
 * Threads: every function may be called concurrently on one store, except open/close. Puts are
 * serialized inside (one appender); reads run in parallel on a small pool of io_uring rings.
 * Callbacks (eviction) run on the thread whose put triggered them, with no store lock held;
 * they must not call mc_disk_store_close. The foreach callback runs under the store's lock and
 * must not call into the store.
 *
 * Memory: pointer arguments are borrowed for the call only, except registered buffers
 * (mc_disk_store_register_buffer), borrowed until unregistered or the store is closed.
 */
#ifndef MC_DISK_DISK_STORE_H
#define MC_DISK_DISK_STORE_H

#include "mooncake/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MC_DISK_USER_KEY_MAX 4096u   /* as MC_STORE_KEY_MAX */
#define MC_DISK_ALIGN 4096u          /* record and value alignment (O_DIRECT) */
#define MC_DISK_REG_BUFFERS_MAX 16u  /* regions mc_disk_store_register_buffer can hold */

typedef enum mc_disk_evict_policy {
    MC_DISK_EVICT_FIFO = 0, /* oldest bucket first (upstream's default) */
    MC_DISK_EVICT_LRU = 1,  /* bucket read least recently first */
    MC_DISK_EVICT_NONE = 2, /* never evict: a full store refuses puts */
} mc_disk_evict_policy_t;

/* Where an object lives (upstream's StorageObjectMetadata without the endpoint). */
typedef struct mc_disk_loc {
    uint64_t bucket_id;
    uint64_t offset;     /* of the record in <bucket_id>.bucket */
    uint32_t key_size;   /* storage key bytes */
    uint64_t data_size;  /* value bytes */
    uint64_t checksum;   /* XXH3-64 of the value (mc_hash64) */
} mc_disk_loc_t;

/* One object as reported by mc_disk_store_foreach and the eviction callback. The strings are
 * borrowed for the callback only and are not NUL-terminated. */
typedef struct mc_disk_obj {
    const char *tenant;
    size_t tenant_len;
    const char *key;
    size_t key_len;
    mc_disk_loc_t loc;
} mc_disk_obj_t;

/* Called after a bucket was evicted, with every object it still held (they are gone from the
 * index; reads of them answer MC_ERR_OBJECT_NOT_FOUND). Objects given their second chance
 * (readmit_pct) moved to another bucket of the store before and are not in the list. The master integration turns this
 * into BatchEvictDiskReplica. */
typedef void (*mc_disk_evict_fn)(uint64_t bucket_id, const mc_disk_obj_t *objs, size_t n,
                                 void *arg);

typedef struct mc_disk_config {
    /* Capacity of the store in bytes of bucket files (MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES,
     * default 2 TiB, 1 MiB..1 PiB). A put that does not fit even after eviction is refused. */
    uint64_t total_size_limit;
    uint64_t total_keys_limit;      /* ..._TOTAL_KEYS_LIMIT, default 10M, 1..1e9 */
    uint32_t bucket_keys_limit;     /* ..._BUCKET_KEYS_LIMIT, default 500, 1..1M */
    uint64_t bucket_size_limit;     /* ..._BUCKET_SIZE_LIMIT_BYTES, default 256 MiB,
                                       64 KiB..total_size_limit; a larger object gets a bucket
                                       of its own */
    bool watermark_eviction;        /* ..._ENABLE_DISK_WATERMARK_EVICTION, default true */
    double high_watermark;          /* ..._DISK_EVICTION_HIGH_WATERMARK_RATIO, default 0.90 */
    double low_watermark;           /* ..._DISK_EVICTION_LOW_WATERMARK_RATIO, default 0.80;
                                       0 < low < high <= 1 */
    mc_disk_evict_policy_t policy;  /* ..._BUCKET_EVICTION_POLICY fifo|lru|none, default fifo */
    uint32_t readmit_pct;           /* second chance (MC_DISK_READMIT_PCT), default 50, 0..90:
                                       before a victim bucket is dropped, its objects read
                                       since they were written are re-appended to the open
                                       bucket, at most this % of the victim's bytes; 0 = off
                                       (whole buckets dropped as they are) */
    bool sync_each_put;             /* fdatasync data, then header, per put (MC_DISK_SYNC_EACH_PUT);
                                       default false: one fdatasync per bucket seal */
    uint32_t io_depth;              /* piece reads in flight per ring (a value is read as
                                       pieces of at most 1 MiB, each hashed as it lands)
                                       (MC_DISK_IO_DEPTH), default 64, 1..4096 */
    uint32_t rings;                 /* io_uring rings for parallel readers (MC_DISK_RINGS),
                                       default 4, 1..64 */
    mc_disk_evict_fn on_evict;      /* optional */
    void *on_evict_arg;
} mc_disk_config_t;

/* Upstream's defaults (above). */
void mc_disk_config_default(mc_disk_config_t *cfg);
/* MC_OK or MC_ERR_INVALID_PARAMS with a message naming the field in err (errlen bytes). */
mc_status_t mc_disk_config_check(const mc_disk_config_t *cfg, char *err, size_t errlen);

/* Programs only (the library reads no environment itself): applies the MOONCAKE_OFFLOAD_*
 * and MC_DISK_* variables that lookup(name, arg) returns (pass a getenv wrapper) on top of
 * cfg, then checks the result. *dir_p (optional) gets MOONCAKE_OFFLOAD_FILE_STORAGE_PATH (NULL
 * when unset; borrowed from lookup). MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR must be unset
 * or bucket_storage_backend (MC_ERR_NOT_SUPPORTED otherwise). A value that does not parse or
 * is out of range is MC_ERR_INVALID_PARAMS with the variable named in err; nothing falls back
 * to a default silently. */
typedef const char *(*mc_disk_env_fn)(const char *name, void *arg);
mc_status_t mc_disk_config_from_env(mc_disk_config_t *cfg, mc_disk_env_fn lookup, void *arg,
                                    const char **dir_p, char *err, size_t errlen);

typedef struct mc_disk_store mc_disk_store_t;

/* Opens (creating dir if missing, one level) and recovers the store in dir: every bucket file
 * is scanned, committed records rebuild the index, a torn tail (a write cut short) is
 * truncated away, a corrupted record is skipped and counted (mc_disk_stats_t.recovered_*).
 * New writes go to a new bucket. dir is locked (flock on dir/LOCK): a second open of the same
 * directory fails with MC_ERR_BUSY. Errors: MC_ERR_INVALID_PARAMS (bad config),
 * MC_ERR_FILE_OPEN_FAIL (dir unusable), MC_ERR_NOT_SUPPORTED (no io_uring), MC_ERR_NO_MEMORY. */
mc_status_t mc_disk_store_open(const char *dir, const mc_disk_config_t *cfg,
                               mc_disk_store_t **store_p);
/* Seals (fdatasync) the current bucket, waits for reads abandoned at their deadline to
 * complete, frees everything. NULL is a no-op. */
void mc_disk_store_close(mc_disk_store_t *store);

/* Stores a copy of value (len bytes, 0 allowed) under (tenant, key). checksum must be the
 * value's mc_hash64 (the store's checksum); it is verified against the bytes before anything
 * is written (MC_ERR_CHECKSUM). Appends one record to the current bucket (rolling over at the
 * bucket limits) and returns after the record is committed: its header, written after the
 * value, is what makes it visible after a crash. With sync_each_put the record is also on
 * stable storage when this returns; otherwise when its bucket is sealed.
 * Errors: MC_ERR_OBJECT_ALREADY_EXISTS (remove first to replace), MC_ERR_INVALID_KEY,
 * MC_ERR_TOO_LARGE (over 1 GiB, or its record over total_size_limit),
 * MC_ERR_NO_AVAILABLE_HANDLE (store or disk full: capacity reached and eviction off or not
 * enough, or ENOSPC/EDQUOT/EFBIG from the file system), MC_ERR_FILE_WRITE_FAIL (other I/O
 * error; see the log). After an error the store
 * still serves every object already committed. */
mc_status_t mc_disk_store_put(mc_disk_store_t *store, const char *tenant, const char *key,
                              size_t key_len, const void *value, size_t len, uint64_t checksum);

/* Location of (tenant, key): MC_OK or MC_ERR_OBJECT_NOT_FOUND. */
mc_status_t mc_disk_store_lookup(mc_disk_store_t *store, const char *tenant, const char *key,
                                 size_t key_len, mc_disk_loc_t *loc);

/* Drops (tenant, key) from the index and appends a tombstone so that it stays removed after a
 * restart. A bucket left without live objects is deleted. MC_OK or MC_ERR_OBJECT_NOT_FOUND;
 * MC_ERR_NO_AVAILABLE_HANDLE / MC_ERR_FILE_WRITE_FAIL when the tombstone cannot be written
 * (the object is removed from the index anyway). */
mc_status_t mc_disk_store_remove(mc_disk_store_t *store, const char *tenant, const char *key,
                                 size_t key_len);

/* One read of a batch. */
typedef struct mc_disk_read mc_disk_read_t;
/* Optional progress of one read, called on the reading thread during mc_disk_store_read_batch
 * (or _finish) while it holds the ring (be quick; do not call into the store): the first
 * `ready` bytes of the value are in buf (landed, not yet verified), in order, as its pieces
 * land (pieces of read_piece_bytes, at most 1 MiB; a value over 512 KiB ends with a 256 KiB
 * piece of its own; pieces reaped together are reported together, before any of them is
 * hashed). A read straight into buf reports a piece before hashing it, so `ready` may reach
 * the whole length before the verdict; a read through the store's buffer, once the piece is
 * hashed and copied (its last piece comes with the verdict). `done`: the read has settled and
 * q->status is final (MC_OK only once the whole value matched its checksum). Not called for a
 * request settled at lookup (not found, overflow, bad key) nor after the deadline. */
typedef void (*mc_disk_progress_fn)(mc_disk_read_t *q, size_t ready, bool done);
struct mc_disk_read {
    const char *tenant;  /* in */
    const char *key;     /* in */
    size_t key_len;      /* in */
    void *buf;           /* in: destination */
    size_t cap;          /* in: its bytes; at least the value's length */
    bool late_ok;        /* in: buf stays the caller's after the call, so a read abandoned at
                            the deadline may still write it (the caller holds it back, e.g. a
                            staging slot kept out of use for a while): buf is then read into
                            directly also with a deadline */
    mc_disk_progress_fn progress; /* in, optional */
    void *arg;           /* in: the caller's, for progress */
    size_t len;          /* out: the value's length (also on MC_ERR_BUFFER_OVERFLOW) */
    mc_status_t status;  /* out */
};

/* Reads n objects (submits them all, then reaps all). deadline_ns: absolute CLOCK_MONOTONIC
 * time (mc_now_ns), 0 = none. Each request gets its own status:
 *   MC_OK (len bytes in buf, checksum verified), MC_ERR_OBJECT_NOT_FOUND,
 *   MC_ERR_BUFFER_OVERFLOW (cap < len), MC_ERR_CHECKSUM (the bytes on disk do not match: the
 *   object is dropped from the index and counted; never reported as data),
 *   MC_ERR_FILE_READ_FAIL (I/O error or short read), MC_ERR_TIMEOUT (not done by the deadline),
 *   MC_ERR_INVALID_KEY, MC_ERR_NO_MEMORY.
 * Destination rule: with no deadline (or with late_ok), a read whose buf is 4 KiB-aligned with
 * cap >= the value rounded up to 4 KiB goes straight from the disk into buf (O_DIRECT; a
 * registered buffer with io_uring's fixed buffers). With a deadline, other reads go into a
 * buffer the store owns and are copied into buf during the call (piece by piece as it is
 * hashed), so buf is never written after this call returns. A read abandoned at the deadline
 * keeps its store buffer (or, late_ok, the caller's buf) and its bucket (the file is not
 * deleted) until its completion arrives, which a later call or
 * close reaps. On any status but MC_OK, buf may have been written and must not be used.
 * Returns MC_OK when every status was filled, else MC_ERR_INVALID_PARAMS (NULL reqs with n>0). */
mc_status_t mc_disk_store_read_batch(mc_disk_store_t *store, mc_disk_read_t *reqs, size_t n,
                                     uint64_t deadline_ns);

/* mc_disk_store_read_batch in two halves, for a caller whose thread must not wait for the disk
 * (the storage server's RPC loop). _start looks the keys up and submits their first reads (at
 * most 8 pieces: tens of microseconds each) on a ring that is free at once, and returns
 * without waiting for any of them (*batch_p: the batch). _finish, on any thread, submits the
 * rest, reaps, hashes and settles them as mc_disk_store_read_batch does (progress is called on
 * that thread; the deadline and the destination rule are the same) and frees the batch. reqs
 * stay the caller's until _finish returns; every started batch must be finished (it holds its
 * ring) before mc_disk_store_close. _start answers MC_ERR_BUSY when every ring is held (then
 * nothing was done: use mc_disk_store_read_batch), MC_ERR_INVALID_PARAMS (no requests),
 * MC_ERR_NO_MEMORY. */
typedef struct mc_disk_batch mc_disk_batch_t;
mc_status_t mc_disk_store_read_start(mc_disk_store_t *store, mc_disk_read_t *reqs, size_t n,
                                     uint64_t deadline_ns, mc_disk_batch_t **batch_p);
mc_status_t mc_disk_store_read_finish(mc_disk_batch_t *batch);

/* Registers [base, base+len) (4 KiB-aligned, len <= 1 GiB) as an io_uring fixed buffer on every
 * ring: direct reads into it skip pinning pages per read. MC_ERR_INVALID_PARAMS (alignment,
 * size), MC_ERR_NO_AVAILABLE_HANDLE (MC_DISK_REG_BUFFERS_MAX regions held), MC_ERR_IO. */
mc_status_t mc_disk_store_register_buffer(mc_disk_store_t *store, void *base, size_t len);
mc_status_t mc_disk_store_unregister_buffer(mc_disk_store_t *store, void *base);

/* Calls fn for every object in the index (after open: everything recovered) under the store's
 * lock; the storage server re-registers them with the master (after its own restart or the
 * master's). Returns the number of objects visited. */
size_t mc_disk_store_foreach(mc_disk_store_t *store,
                             void (*fn)(const mc_disk_obj_t *obj, void *arg), void *arg);

/* The piece size reads are cut into on a block device with these queue limits (sysfs
 * queue/max_segments and queue/max_sectors_kb; 0 = unknown): the largest request the device
 * takes whole even when every 4 KiB page of the buffer is a segment of its own (a larger read
 * is split into two requests, the second a small remainder that costs a request of its own),
 * at most 1 MiB, at least 64 KiB, a multiple of 4 KiB. The store applies it to its directory's
 * device at open (1 MiB where there is none: tmpfs, overlay). */
uint64_t mc_disk_piece_bytes(uint64_t max_segments, uint64_t max_sectors_kb);

/* Read latency histogram bounds in microseconds (the last bucket is +Inf). */
#define MC_DISK_LAT_BUCKETS 14
extern const uint32_t mc_disk_lat_bounds_us[MC_DISK_LAT_BUCKETS - 1];

typedef struct mc_disk_stats {
    uint64_t bytes_on_disk;     /* bucket file bytes (what total_size_limit counts) */
    uint64_t live_bytes;        /* value bytes of the objects in the index */
    uint64_t objects;           /* objects in the index */
    uint64_t buckets;           /* bucket files */
    uint64_t puts, put_bytes, put_errors, disk_full; /* disk_full: puts refused for space */
    uint64_t removes;
    uint64_t reads, read_bytes, read_errors, read_timeouts, checksum_failures;
    uint64_t late_completions;  /* reads reaped after their deadline had passed */
    uint64_t evicted_buckets, evicted_objects;
    uint64_t readmitted_objects, readmitted_bytes; /* re-appended by the second chance (value
                                                      bytes); not counted as evicted */
    uint64_t recovered_objects, recovered_corrupt, recovered_torn; /* at open */
    uint64_t read_lat_us[MC_DISK_LAT_BUCKETS]; /* completed reads per latency bucket */
    uint64_t read_lat_sum_us;
    bool direct_io;             /* O_DIRECT reads (false: the file system refused it) */
    uint64_t read_piece_bytes;  /* reads are cut into pieces of this size (and a last one of
                                   256 KiB): mc_disk_piece_bytes of the directory's device */
} mc_disk_stats_t;

void mc_disk_store_stats(mc_disk_store_t *store, mc_disk_stats_t *out);

#endif
