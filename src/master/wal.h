/* Write-ahead log files of the master (docs/internals/recovery.md).
 *
 * Directory layout: log.<gen> (append-only record files) and snap.<gen> (a full state dump that
 * equals replaying every log below <gen>). Recovery = newest complete snap.K + log.K, log.K+1...
 *
 * Record framing: u32 payload_len | u8 type | payload | u64 XXH3-64(type || payload), LE.
 * A torn or corrupt record ends the replay of that file (everything before it is applied).
 *
 * This file knows nothing about objects; master.c encodes payloads. Owner thread only.
 */
#ifndef MC_MASTER_WAL_H
#define MC_MASTER_WAL_H

#include "common/buf.h"
#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

#define MC_WAL_MAX_RECORD (1u << 20)

enum {
    MC_WAL_MOUNT = 1,
    MC_WAL_UNMOUNT = 2,
    MC_WAL_COMMIT = 3,
    MC_WAL_REMOVE = 4,
    MC_WAL_SNAP_END = 5, /* last record of a complete snapshot */
    /* the LOCAL_DISK tier (master_disk.c; docs/internals/recovery.md) */
    MC_WAL_DISK_MOUNT = 6,   /* a client mounted its local disk */
    MC_WAL_DISK_UNMOUNT = 7, /* a client's disk entries went (unmount, silence) */
    MC_WAL_DISK_PUT = 8,     /* a LOCAL_DISK replica confirmed (stored) */
    MC_WAL_DISK_DROP = 9,    /* a stored LOCAL_DISK replica gone */
    MC_WAL_DISK_TOMB = 10,   /* a removed disk copy's tombstone */
    MC_WAL_DISK_UNTOMB = 11, /* a tombstone gone (acknowledged, forgotten, key live again) */
    /* a create-once put started (HA standbys mode): its client and allocation, pending until a
     * COMMIT or REMOVE of its key supersedes it */
    MC_WAL_PUT_START = 12,
    /* blocks an HA leader (standbys mode) allocated ahead for create-once puts, or gave back:
     * reserved until a PUT_START or COMMIT names one (master_pool.c) */
    MC_WAL_RESERVE = 13,
    /* consecutive PUT_STARTs of one writer (a BatchPutStart's keys) in one record */
    MC_WAL_PUT_STARTS = 14,
    /* PutEnds of pending puts, named by key only: each key's PUT_START (a record before it, or
     * a snapshot's) holds the allocation (master_wal.c, docs/internals/recovery.md) */
    MC_WAL_PUT_ENDS = 15,
    /* PUT_STARTS with varints and prefix-compressed keys (what a leader writes since) */
    MC_WAL_PUT_STARTS_V = 16,
    /* RESERVE with varints and address deltas (what a leader writes since) */
    MC_WAL_RESERVE_V = 17,
};

/* Buffered record writer on one file. The buffer is written out once it holds
 * MC_WAL_WRITER_FLUSH bytes, so it never holds more than MC_WAL_WRITER_CAP. */
#define MC_WAL_WRITER_FLUSH (1u << 20)
#define MC_WAL_WRITER_CAP (MC_WAL_WRITER_FLUSH + 13 + MC_WAL_MAX_RECORD)
typedef struct mc_wal_writer {
    int fd;
    mc_buf_t buf;     /* records not yet written to the file */
    uint64_t bytes;   /* bytes written to the file so far, including buffered */
    uint64_t records;
    /* a writer in a fork()ed child (a snapshot, docs/internals/recovery.md): makes system
     * calls only. Its buf, reserved to MC_WAL_WRITER_CAP before the fork, never grows (a record
     * that does not fit fails), nothing is logged, and close leaves buf to its preparer. */
    int fixed;
} mc_wal_writer_t;

/* Opens (creating, truncating if trunc) path for appending. */
mc_status_t mc_wal_writer_open(mc_wal_writer_t *w, const char *path, int trunc);
/* Opens path (creating, truncating) for a fixed writer (fixed set, buf reserved), keeping its
 * buffer; system calls only. */
mc_status_t mc_wal_writer_open_fixed(mc_wal_writer_t *w, const char *path);
/* Appends one framed record to out (the framing above): the bytes a writer would write. */
mc_status_t mc_wal_frame(mc_buf_t *out, uint8_t type, const void *payload, size_t len);
/* Buffers one record (flushes the buffer to the file when it is large). */
mc_status_t mc_wal_writer_append(mc_wal_writer_t *w, uint8_t type, const void *payload,
                                 size_t len);
/* write() the buffer; with do_sync also fdatasync. */
mc_status_t mc_wal_writer_flush(mc_wal_writer_t *w, int do_sync);
void mc_wal_writer_close(mc_wal_writer_t *w);

/* Calls fn for every valid record of path, in order. Stops at the first torn/corrupt record
 * (logged) and returns MC_OK; *complete_p (optional) = 1 if the file ended cleanly. fn
 * returning non-zero stops the replay with MC_ERR_INTERNAL. */
typedef int (*mc_wal_record_fn)(void *ctx, uint8_t type, const uint8_t *p, size_t len);
mc_status_t mc_wal_replay_file(const char *path, mc_wal_record_fn fn, void *ctx,
                               int *complete_p, uint8_t *last_type_p);

/* The same over framed records in memory (a replicated batch, a snapshot's chunks): applies
 * every whole valid record in order; *used_p = the bytes of those records (a partial frame at
 * the end is left for the caller: MC_OK with *used_p < len). MC_ERR_INVALID_PARAMS at a
 * corrupt frame (bad length or checksum; *used_p = its offset), MC_ERR_INTERNAL when fn
 * stopped it. */
mc_status_t mc_wal_replay_buf(const void *buf, size_t len, mc_wal_record_fn fn, void *ctx,
                              size_t *used_p, uint8_t *last_type_p);

/* Lists generations present in dir: sorted ascending arrays (malloc'ed; caller frees). */
mc_status_t mc_wal_list(const char *dir, const char *prefix, uint64_t **gens_p, size_t *n_p);

/* Little helpers for payload encoding/decoding. A payload is built in an mc_buf_t; the first
 * failure (no memory, string over 64 KiB) sets err and later puts do nothing. Zero-initialise;
 * release b with mc_buf_free. fixed (a fork()ed child's buffer, reserved before the fork):
 * b never grows; a put that does not fit its capacity sets err. */
typedef struct mc_wal_buf {
    mc_buf_t b;
    int err;
    int fixed;
} mc_wal_buf_t;
void mc_wal_put_u8(mc_wal_buf_t *b, uint8_t v);
void mc_wal_put_u32(mc_wal_buf_t *b, uint32_t v);
void mc_wal_put_u64(mc_wal_buf_t *b, uint64_t v);
void mc_wal_put_bytes(mc_wal_buf_t *b, const void *p, size_t n);
void mc_wal_put_str(mc_wal_buf_t *b, const char *s, size_t n); /* u16 len + bytes */
/* unsigned LEB128: 7 bits a byte, low first, high bit = more (1..10 bytes) */
void mc_wal_put_varint(mc_wal_buf_t *b, uint64_t v);

typedef struct mc_wal_rd {
    const uint8_t *p;
    size_t len, off;
    int err;
} mc_wal_rd_t;
uint8_t mc_wal_get_u8(mc_wal_rd_t *r);
uint32_t mc_wal_get_u32(mc_wal_rd_t *r);
uint64_t mc_wal_get_u64(mc_wal_rd_t *r);
const uint8_t *mc_wal_get_bytes(mc_wal_rd_t *r, size_t n);
const char *mc_wal_get_str(mc_wal_rd_t *r, size_t *n_p); /* not NUL-terminated */
/* err on a truncated varint, one over 10 bytes or one whose value exceeds 64 bits */
uint64_t mc_wal_get_varint(mc_wal_rd_t *r);

#endif
