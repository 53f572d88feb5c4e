/* WAL glue of the master core: what is logged, snapshots (fork + copy-on-write), recovery.
 * See docs/internals/recovery.md. */
#include "master/master_int.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void wal_path(const mc_master_t *m, char *out, size_t n, const char *prefix, uint64_t gen,
                     const char *suffix)
{
    snprintf(out, n, "%s/%s%llu%s", m->wal_dir, prefix, (unsigned long long)gen, suffix);
}

/* ------------------------------------------------------------------ encoding */

static void enc_mount(mc_wal_buf_t *b, uint32_t id, const segment_t *s)
{
    mc_wal_put_u32(b, id);
    mc_wal_put_u64(b, s->base);
    mc_wal_put_u64(b, s->size);
    mc_wal_put_bytes(b, s->uuid, 16);
    mc_wal_put_str(b, s->name, strlen(s->name));
    mc_wal_put_str(b, s->endpoint, strlen(s->endpoint));
    mc_wal_put_str(b, s->host_label, strlen(s->host_label));
}

/* The replicas of o that lie on a segment with an allocator (what a record names): their
 * segment ids and addresses; returns how many. */
static uint8_t obj_placed(mc_master_t *m, const obj_t *o, uint32_t *segs, uint64_t *addrs)
{
    uint8_t n = 0;
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (!s || !s->alloc)
            continue;
        segs[n] = o->rep[i].seg;
        addrs[n++] = mc_master_allocator_addr(s->alloc, o->rep[i].blk);
    }
    return n;
}

/* COMMIT: size, checksum, flags, n, n x (segment id u32, address u64), key (u16 len + bytes) */
static void enc_commit(mc_master_t *m, mc_wal_buf_t *b, obj_t *o)
{
    uint32_t segs[MC_MASTER_MAX_REPLICAS];
    uint64_t addrs[MC_MASTER_MAX_REPLICAS];
    uint8_t n = obj_placed(m, o, segs, addrs);
    mc_wal_put_u64(b, o->size);
    mc_wal_put_u64(b, o->checksum);
    mc_wal_put_u8(b, o->flags & OF_LOGGED);
    mc_wal_put_u8(b, n);
    for (uint32_t i = 0; i < n; i++) {
        mc_wal_put_u32(b, segs[i]);
        mc_wal_put_u64(b, addrs[i]);
    }
    mc_wal_put_str(b, obj_key(o), o->klen);
}

/* PUT_START (a snapshot's pending put): the writer's client id, then a COMMIT's payload
 * (checksum 0): the allocation a PutStart made, so that a new HA leader keeps it
 * for its writer. */
static void enc_put_start(mc_master_t *m, mc_wal_buf_t *b, obj_t *o, const uint8_t cid[16])
{
    mc_wal_put_bytes(b, cid, 16);
    enc_commit(m, b, o);
}

/* Signed differences as varints: zigzag (0, -1, 1, -2 ... -> 0, 1, 2, 3 ...). */
static uint64_t zigzag(uint64_t to, uint64_t from)
{
    uint64_t d = to - from; /* two's complement */
    return (d << 1) ^ (uint64_t)-(int64_t)(d >> 63);
}

static uint64_t unzigzag(uint64_t from, uint64_t z)
{
    return from + ((z >> 1) ^ (uint64_t)-(int64_t)(z & 1));
}

/* An address coded as a zigzag varint difference from *next (where the previous block of its
 * slot ended; 0 before the record's first), which becomes addr + size: blocks allocated one
 * after the other cost a byte each. */
static void enc_addr(mc_wal_buf_t *b, uint64_t *next, uint64_t addr, uint64_t size)
{
    mc_wal_put_varint(b, zigzag(addr, *next));
    *next = addr + size;
}

static uint64_t dec_addr(mc_wal_rd_t *r, uint64_t *next, uint64_t size)
{
    uint64_t z = mc_wal_get_varint(r);
    if (r->err)
        return 0;
    uint64_t addr = unzigzag(*next, z);
    *next = addr + size;
    return addr;
}

/* A key coded against the previous one of its record (kept in prev[0..*prev_len), the
 * caller's MASTER_KEY_MAX bytes; empty for its first): varint length of the shared prefix,
 * varint length of the rest, the rest. klen <= MASTER_KEY_MAX. */
static void enc_key(mc_wal_buf_t *b, char *prev, size_t *prev_len, const char *key, size_t klen)
{
    size_t p = 0, lim = klen < *prev_len ? klen : *prev_len;
    while (p < lim && key[p] == prev[p])
        p++;
    mc_wal_put_varint(b, p);
    mc_wal_put_varint(b, klen - p);
    mc_wal_put_bytes(b, key + p, klen - p);
    memcpy(prev + p, key + p, klen - p);
    *prev_len = klen;
}

/* The decoder's side: the key in prev[0..*prev_len). r->err when the shared prefix is longer
 * than the previous key, the key is empty or longer than MASTER_KEY_MAX, or bytes are short. */
static void dec_key(mc_wal_rd_t *r, char *prev, size_t *prev_len)
{
    uint64_t p = mc_wal_get_varint(r), rest = mc_wal_get_varint(r);
    if (r->err || p > *prev_len || rest > MASTER_KEY_MAX - p || p + rest == 0) {
        r->err = 1;
        return;
    }
    const uint8_t *bytes = mc_wal_get_bytes(r, (size_t)rest);
    if (!bytes)
        return;
    memcpy(prev + p, bytes, (size_t)rest);
    *prev_len = (size_t)(p + rest);
}

/* RESERVE_V: release flag (u8), varint segment id, varint block size, varint n, then n block
 * addresses (enc_addr, each block predicted right after the previous one). */
static void enc_reserve(mc_master_t *m, mc_wal_buf_t *b, uint32_t seg, uint64_t bsize,
                        const uint32_t *blks, uint32_t n, bool release)
{
    mc_wal_put_u8(b, release);
    mc_wal_put_varint(b, seg);
    mc_wal_put_varint(b, bsize);
    mc_wal_put_varint(b, n);
    uint64_t next = 0;
    for (uint32_t i = 0; i < n; i++)
        enc_addr(b, &next, mc_master_allocator_addr(m->segs[seg]->alloc, blks[i]), bsize);
}

/* The id of the client with that serial (a WRITING object's owner); NULL when unknown. */
static const uint8_t *client_id_of(const mc_master_t *m, uint32_t serial)
{
    for (size_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].serial == serial)
            return m->clients[i].id;
    return NULL;
}

/* Settled reads (mc_master_reads_settled): a record of the current group changes the key of
 * hash h, or (ha_mark_broad) what a read of any key may see. */
static void ha_mark(mc_master_t *m, uint32_t h)
{
    if (m->ha_dirty)
        m->ha_dirty[h & (MASTER_HA_DIRTY_SLOTS - 1)] = m->ha_handed + 1;
}

static void ha_mark_broad(mc_master_t *m)
{
    m->ha_broad = m->ha_handed + 1;
}

bool mc_master_reads_settled(const mc_master_t *m, const uint32_t *hashes, size_t n)
{
    if (!m->ha_dirty)
        return false;
    uint64_t released = atomic_load_explicit(m->ha_released, memory_order_acquire);
    if (m->ha_broad > released)
        return false;
    for (size_t i = 0; i < n; i++)
        if (m->ha_dirty[hashes[i] & (MASTER_HA_DIRTY_SLOTS - 1)] > released)
            return false;
    return true;
}

/* space: the record changes which space is free or mounted (ha_log_space) */
static void wal_append_now(mc_master_t *m, uint8_t type, mc_wal_buf_t *b, bool space)
{
    m->ha_log_space |= space && m->ha_log_on;
    if (b->err) {
        MC_LOG_ERROR("wal: cannot encode a record (no memory)");
        m->wal_failed = true;
        m->ha_log_lost |= m->ha_log_on;
    } else {
        if (mc_wal_writer_append(&m->wal, type, b->b.data, b->b.len) != MC_OK)
            m->wal_failed = true;
        if (m->ha_log_on && mc_wal_frame(&m->ha_log, type, b->b.data, b->b.len) != MC_OK)
            m->ha_log_lost = true;
    }
    m->wal_dirty = true;
    mc_buf_free(&b->b);
}

/* Runs: PUT_STARTs of one writer in a row (the keys of a BatchPutStart) go out as one
 * PUT_STARTS_V record, PutEnds of logged PUT_STARTs in a row (a BatchPutEnd's keys, of any
 * writers) as one PUT_ENDS record: fewer records, one client id, and keys coded against the
 * previous one for the log, the fetches and etcd to carry. At most MASTER_RUN_MAX_KEYS entries
 * (the decoders' cap too) or about MASTER_RUN_MAX_BYTES bytes each. */
#define MASTER_RUN_MAX_KEYS 1024
#define MASTER_RUN_MAX_BYTES (256u << 10)

/* Appends the staged run: PUT_STARTS_V (the writer's client id, varint n, n entries) or
 * PUT_ENDS (varint n, n entries). Every append and every reader of the logs calls it first,
 * so records keep their order. */
static void run_flush(mc_master_t *m)
{
    if (!m->run_n)
        return;
    mc_wal_buf_t b = {0};
    if (m->run_type == MC_WAL_PUT_STARTS_V)
        mc_wal_put_bytes(&b, m->run_cid, 16);
    mc_wal_put_varint(&b, m->run_n);
    mc_wal_put_bytes(&b, m->run_stage.b.data, m->run_stage.b.len);
    b.err |= m->run_stage.err;
    mc_buf_reset(&m->run_stage.b);
    m->run_stage.err = 0;
    m->run_n = 0;
    m->run_klen = 0;
    m->run_size = 0;
    memset(m->run_next, 0, sizeof(m->run_next));
    wal_append_now(m, m->run_type, &b, false);
}

/* Before an entry of a run of type (cid: its writer; NULL for PUT_ENDS): the staged run ends
 * unless the entry joins it. */
static void run_join(mc_master_t *m, uint8_t type, const uint8_t *cid)
{
    if (m->run_n && (m->run_type != type || (cid && memcmp(m->run_cid, cid, 16) != 0) ||
                     m->run_n >= MASTER_RUN_MAX_KEYS ||
                     m->run_stage.b.len >= MASTER_RUN_MAX_BYTES))
        run_flush(m);
    m->run_type = type;
    if (cid)
        memcpy(m->run_cid, cid, 16);
    m->run_n++;
    m->wal_dirty = true; /* the group commit flushes it */
}

static void wal_append(mc_master_t *m, uint8_t type, mc_wal_buf_t *b, bool space)
{
    run_flush(m);
    wal_append_now(m, type, b, space);
}

void master_wal_append(mc_master_t *m, uint8_t type, mc_wal_buf_t *b)
{
    if (!m->wal_on || m->recovering) {
        mc_buf_free(&b->b);
        return;
    }
    ha_mark_broad(m); /* a disk-tier record: replicas and disks, not read key by key here */
    wal_append(m, type, b, false); /* disk-tier records free or mount no memory space */
}

void master_wal_log_mount(mc_master_t *m, uint32_t id)
{
    if (!m->wal_on || m->recovering)
        return;
    mc_wal_buf_t b = {0};
    enc_mount(&b, id, m->segs[id]);
    ha_mark_broad(m); /* a re-mount may bring a segment's objects back */
    wal_append(m, MC_WAL_MOUNT, &b, true);
}

void master_wal_log_unmount(mc_master_t *m, uint32_t id)
{
    if (!m->wal_on || m->recovering)
        return;
    mc_wal_buf_t b = {0};
    mc_wal_put_u32(&b, id);
    ha_mark_broad(m); /* the segment's objects go with it */
    wal_append(m, MC_WAL_UNMOUNT, &b, true);
}

void master_wal_log_commit(mc_master_t *m, obj_t *o, bool frees)
{
    if (!m->wal_on || m->recovering)
        return;
    mc_wal_buf_t b = {0};
    enc_commit(m, &b, o);
    ha_mark(m, o->hash);
    wal_append(m, MC_WAL_COMMIT, &b, frees);
}

/* Whether o's PutStart and PutEnd go into the replicated log as PUT_STARTS_V / PUT_ENDS entries
 * (HA standbys mode with cfg.ha_log_put_starts; keys the entries can code). */
static bool put_starts_logged(const mc_master_t *m, const obj_t *o)
{
    return m->ha_log_on && m->cfg.ha_log_put_starts && o->klen <= MASTER_KEY_MAX;
}

/* A PUT_ENDS entry: a tag (bit 7: a u64 checksum follows, else it is 0; bits 0..6: the
 * object's flags), the checksum, the key (enc_key). Only for a put whose PUT_START this master
 * logged (OF_START_LOGGED) with the log still on: every reader of the log holds its allocation
 * under that key (the record before it, or a snapshot taken since, which writes every pending
 * put); else a COMMIT. */
void master_wal_log_put_end(mc_master_t *m, obj_t *o)
{
    bool started = o->flags & OF_START_LOGGED;
    o->flags &= ~OF_START_LOGGED;
    if (!m->wal_on || m->recovering)
        return;
    if (!started || !put_starts_logged(m, o)) {
        master_wal_log_commit(m, o, false);
        return;
    }
    run_join(m, MC_WAL_PUT_ENDS, NULL);
    ha_mark(m, o->hash);
    mc_wal_buf_t *b = &m->run_stage;
    mc_wal_put_u8(b, (uint8_t)((o->flags & OF_LOGGED) | (o->checksum ? 0x80 : 0)));
    if (o->checksum)
        mc_wal_put_u64(b, o->checksum);
    enc_key(b, m->run_key, &m->run_klen, obj_key(o), o->klen);
}

/* A PUT_STARTS_V entry: the size (a zigzag varint difference from the previous entry's; 0
 * before the first), flags (u8), n (u8), n x (varint segment id, address (enc_addr: replica i
 * predicted right after the previous entry's replica i)), the key (enc_key); checksum 0. */
void master_wal_log_put_start(mc_master_t *m, obj_t *o, const uint8_t cid[16])
{
    if (!m->wal_on || m->recovering || !put_starts_logged(m, o))
        return;
    run_join(m, MC_WAL_PUT_STARTS_V, cid);
    ha_mark(m, o->hash);
    uint32_t segs[MC_MASTER_MAX_REPLICAS];
    uint64_t addrs[MC_MASTER_MAX_REPLICAS];
    uint8_t n = obj_placed(m, o, segs, addrs);
    mc_wal_buf_t *b = &m->run_stage;
    mc_wal_put_varint(b, zigzag(o->size, m->run_size));
    m->run_size = o->size;
    mc_wal_put_u8(b, o->flags & OF_LOGGED);
    mc_wal_put_u8(b, n);
    for (uint32_t i = 0; i < n; i++) {
        mc_wal_put_varint(b, segs[i]);
        enc_addr(b, &m->run_next[i], addrs[i], o->size);
    }
    enc_key(b, m->run_key, &m->run_klen, obj_key(o), o->klen);
    o->flags |= OF_START_LOGGED;
}

void master_wal_log_reserve(mc_master_t *m, uint32_t seg, uint64_t bsize, const uint32_t *blks,
                            uint32_t n, bool release)
{
    if (!m->wal_on || m->recovering)
        return;
    mc_wal_buf_t b = {0};
    enc_reserve(m, &b, seg, bsize, blks, n, release);
    wal_append(m, MC_WAL_RESERVE_V, &b, release);
}

mc_wal_buf_t *master_snap_rec(master_snap_t *s)
{
    mc_buf_reset(&s->rec.b);
    s->rec.err = 0;
    return &s->rec;
}

int master_snap_append(master_snap_t *s, uint8_t type)
{
    return s->rec.err || mc_wal_writer_append(&s->w, type, s->rec.b.data, s->rec.b.len) != MC_OK;
}

/* RESERVE records of every pool block (a snapshot) */
static int snapshot_pools(mc_master_t *m, master_snap_t *snap)
{
    int bad = 0;
    for (uint32_t id = 0; id < m->n_segs && !bad; id++) {
        segment_t *s = m->segs[id];
        for (int i = 0; s && s->alloc && i < MASTER_POOLS_PER_SEG && !bad; i++) {
            const put_pool_t *p = &s->pools[i];
            if (p->n == p->head)
                continue;
            enc_reserve(m, master_snap_rec(snap), id, p->size, p->blk + p->head, p->n - p->head,
                        false);
            bad |= master_snap_append(snap, MC_WAL_RESERVE_V);
        }
    }
    return bad;
}

void master_wal_log_remove(mc_master_t *m, const char *key, size_t klen)
{
    if (!m->wal_on || m->recovering)
        return;
    mc_wal_buf_t b = {0};
    mc_wal_put_str(&b, key, klen);
    if (m->ha_dirty)
        ha_mark(m, master_key_hash(key, klen));
    wal_append(m, MC_WAL_REMOVE, &b, true);
}

/* Group commit. With wal_fsync every commit is fdatasync'ed; without it, records are written
 * (a master process crash loses nothing) and made durable against a host crash within
 * MC_WAL_BACKGROUND_SYNC_MS by a later call (the cron calls this every tick). */
#define MC_WAL_BACKGROUND_SYNC_MS 1000

mc_status_t mc_master_wal_sync(mc_master_t *m)
{
    if (!m->wal_on)
        return MC_OK;
    run_flush(m);
    uint64_t now = master_now(m);
    bool background_due = m->wal_undurable && now - m->wal_durable_ms >= MC_WAL_BACKGROUND_SYNC_MS;
    if (!m->wal_dirty && !background_due)
        return MC_OK;
    bool do_sync = m->cfg.wal_fsync || background_due;
    mc_status_t st = mc_wal_writer_flush(&m->wal, do_sync);
    if (do_sync) {
        m->wal_undurable = false;
        m->wal_durable_ms = now;
    } else {
        m->wal_undurable = true;
    }
    m->wal_dirty = false;
    m->cnt.wal_syncs++;
    if (st != MC_OK) {
        m->wal_failed = true;
        MC_LOG_ERROR("wal: group commit failed: acknowledged changes may not survive a crash");
    }
    return st;
}

void mc_master_ha_log_enable(mc_master_t *m)
{
    m->ha_log_on = true;
}

mc_buf_t *mc_master_ha_log(mc_master_t *m, bool *lost_p, bool *space_p)
{
    run_flush(m);
    *lost_p = m->ha_log_lost;
    *space_p = m->ha_log_space;
    m->ha_log_lost = m->ha_log_space = false;
    return &m->ha_log;
}

void mc_master_ha_groups(mc_master_t *m, uint64_t handed, const atomic_uint_fast64_t *released)
{
    if (!m->ha_released && m->ha_log_on) {
        /* from now on reads may be settled; without the buckets (no memory) none is */
        m->ha_dirty = mc_calloc(MASTER_HA_DIRTY_SLOTS, sizeof(*m->ha_dirty));
        m->ha_broad = handed; /* the groups handed so far may hold anything */
    }
    m->ha_handed = handed;
    m->ha_released = released;
}

/* ------------------------------------------------------------------ snapshots */

static void snap_release(master_snap_t *s)
{
    mc_buf_free(&s->w.buf);
    mc_buf_free(&s->rec.b);
}

/* Every buffer a snapshot needs, reserved now: 0, or 1 (no memory; nothing to release). */
static int snap_prepare(master_snap_t *s)
{
    memset(s, 0, sizeof(*s));
    s->w.fd = -1;
    if (mc_buf_reserve(&s->w.buf, MC_WAL_WRITER_CAP) != MC_OK ||
        mc_buf_reserve(&s->rec.b, MC_WAL_MAX_RECORD) != MC_OK) {
        snap_release(s);
        return 1;
    }
    s->w.fixed = s->rec.fixed = 1;
    return 0;
}

/* Writes the snapshot with s prepared: reads the table, makes system calls (open, write,
 * fdatasync, close, rename) and nothing else: no allocation, no log, no lock. 0 or 1. */
static int snap_write(mc_master_t *m, master_snap_t *s, const char *tmp, const char *final)
{
    if (mc_wal_writer_open_fixed(&s->w, tmp) != MC_OK)
        return 1;
    int bad = 0;
    for (uint32_t id = 0; id < m->n_segs && !bad; id++) {
        segment_t *seg = m->segs[id];
        if (!seg || seg->state == SEG_FREE)
            continue;
        enc_mount(master_snap_rec(s), id, seg);
        bad |= master_snap_append(s, MC_WAL_MOUNT);
    }
    if (!bad) /* the put pools' blocks (an HA leader): reserved on a standby starting from it */
        bad |= snapshot_pools(m, s);
    for (obj_t *o = master_readable_next(m, NULL); o && !bad; o = master_readable_next(m, o)) {
        enc_commit(m, master_snap_rec(s), o);
        bad |= master_snap_append(s, MC_WAL_COMMIT);
    }
    /* the pending puts the log holds (HA standbys mode), so that a standby starting from this
     * snapshot keeps their space too */
    for (obj_t *o = m->cfg.ha_log_put_starts && m->ha_log_on ? m->writing.head : NULL; o && !bad;
         o = (obj_t *)o->node.next_tag) {
        const uint8_t *cid = client_id_of(m, o->owner);
        if (!cid)
            continue;
        enc_put_start(m, master_snap_rec(s), o, cid);
        bad |= master_snap_append(s, MC_WAL_PUT_START);
    }
    if (!bad)
        bad |= master_disk_snapshot(m, s);
    if (!bad) /* after a failed append the buffer may be full */
        bad |= mc_wal_writer_append(&s->w, MC_WAL_SNAP_END, NULL, 0) != MC_OK;
    if (!bad)
        bad |= mc_wal_writer_flush(&s->w, 1) != MC_OK;
    mc_wal_writer_close(&s->w);
    if (bad || rename(tmp, final) != 0)
        return 1;
    return 0;
}

int mc_master_snapshot_write(mc_master_t *m, const char *tmp, const char *final)
{
    master_snap_t s;
    if (snap_prepare(&s) != 0)
        return 1;
    int bad = snap_write(m, &s, tmp, final);
    snap_release(&s);
    return bad;
}

pid_t mc_master_snapshot_fork(mc_master_t *m, const char *tmp, const char *final)
{
    /* The master is multithreaded (RPC loop, HA, HTTP threads): a lock another thread held at
     * the fork (the allocator's, the log's, stdio's) stays taken forever in the child, which
     * may therefore only make async-signal-safe calls. So every buffer the child needs is
     * allocated here, before the fork, and the child writes with system calls only, logging
     * nothing: its exit status tells the parent, which logs (docs/internals/recovery.md). */
    master_snap_t s;
    if (snap_prepare(&s) != 0) {
        errno = ENOMEM;
        return -1;
    }
    pid_t pid = fork();
    if (pid == 0) {
        /* the child holds no socket of the parent: a parent that exits (kill -9, fenced)
         * closes its port and its clients' connections at once */
        close_range(3, ~0U, 0);
        _exit(snap_write(m, &s, tmp, final));
    }
    int err = errno;
    snap_release(&s); /* the parent's copy; the child's image has its own */
    errno = err;
    return pid;
}

static void remove_old(mc_master_t *m, uint64_t keep_from)
{
    const char *prefixes[2] = {"log.", "snap."};
    for (int p = 0; p < 2; p++) {
        uint64_t *g;
        size_t n;
        if (mc_wal_list(m->wal_dir, prefixes[p], &g, &n) != MC_OK)
            continue;
        for (size_t i = 0; i < n; i++) {
            if (g[i] >= keep_from)
                continue;
            char path[4096];
            wal_path(m, path, sizeof(path), prefixes[p], g[i], "");
            unlink(path);
        }
        mc_free(g);
    }
}

static mc_status_t open_log(mc_master_t *m, uint64_t gen)
{
    char path[4096];
    wal_path(m, path, sizeof(path), "log.", gen, "");
    mc_status_t st = mc_wal_writer_open(&m->wal, path, 1);
    if (st != MC_OK)
        return st;
    m->wal_gen = gen;
    m->wal_bytes_at_snap = 0;
    m->wal.bytes = 0;
    return MC_OK;
}

static void start_snapshot(mc_master_t *m)
{
    /* Rotate: everything up to now is in log.<gen>; new records go to log.<gen+1>. The
     * snapshot snap.<gen+1> is the state at this instant (= replay of every log < gen+1). */
    mc_master_wal_sync(m);
    uint64_t records = m->wal.records;
    mc_wal_writer_close(&m->wal);
    uint64_t gen = m->wal_gen + 1;
    if (open_log(m, gen) != MC_OK) {
        m->wal_failed = true;
        return;
    }
    m->wal.records = records;
    char tmp[4096], final[4096];
    wal_path(m, tmp, sizeof(tmp), "snap.", gen, ".tmp");
    wal_path(m, final, sizeof(final), "snap.", gen, "");
    pid_t pid = mc_master_snapshot_fork(m, tmp, final);
    if (pid < 0) {
        /* back off: retry after another wal_snapshot_bytes of log, not on the next cron */
        MC_LOG_ERROR("wal: fork for snapshot: %s", strerror(errno));
        m->snapshot_soon = false;
        return;
    }
    m->snap_pid = pid;
    m->snap_gen = gen;
    m->snapshot_soon = false;
}

void master_wal_cron(mc_master_t *m)
{
    if (!m->wal_on)
        return;
    if (m->snap_pid) {
        int status;
        pid_t r = waitpid(m->snap_pid, &status, WNOHANG);
        if (r == m->snap_pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                remove_old(m, m->snap_gen);
                m->cnt.snapshots++;
                MC_LOG_INFO("wal: snapshot %llu written", (unsigned long long)m->snap_gen);
            } else {
                MC_LOG_ERROR("wal: snapshot %llu failed; logs kept", (unsigned long long)m->snap_gen);
            }
            m->snap_pid = 0;
        }
        return;
    }
    if (m->snapshot_soon || m->wal.bytes - m->wal_bytes_at_snap > m->cfg.wal_snapshot_bytes)
        start_snapshot(m);
}

void master_wal_close(mc_master_t *m)
{
    if (!m->wal_on)
        return;
    mc_master_wal_sync(m);
    mc_wal_writer_close(&m->wal);
    if (m->snap_pid) {
        int status;
        waitpid(m->snap_pid, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
            remove_old(m, m->snap_gen);
        m->snap_pid = 0;
    }
    m->wal_on = false;
    mc_buf_free(&m->ha_log);
    mc_buf_free(&m->run_stage.b);
}

/* ------------------------------------------------------------------ recovery */

/* addresses rounded to the allocator's granules (its base is aligned to them) */
#define GRANULE_DOWN(a) ((a) & ~(uint64_t)(MC_ALLOC_ALIGN - 1))
#define GRANULE_UP(a) GRANULE_DOWN((a) + (MC_ALLOC_ALIGN - 1))

/* Freed range i (0 = the oldest) of s's ring. */
static freed_range_t *freed_at(const segment_t *s, size_t i)
{
    return &s->freed[(s->freed_head + i) & (s->cap_freed - 1)];
}

/* A record freed [addr, addr + size) of s: a read lease the old leader granted there may run
 * until recovered_reuse_delay after now (the free came before the record reached us). A
 * standby keeps the range with now in s->freed, oldest first: ranges older than the delay are
 * pruned as it goes, and one that touches or overlaps the newest is merged into it (the
 * merged range waits for the later free). At MASTER_FREED_MAX ranges, or without memory, it
 * drops them and the whole segment waits from now instead (untracked_free_ms), which covers
 * every range it dropped. O(1) amortised. A restart's replay, or a standby whose promotion
 * waits as a whole (recovered_reuse_all), keeps no ranges. */
static void replay_note_free(mc_master_t *m, segment_t *s, uint64_t addr, uint64_t size)
{
    uint64_t now = master_now(m), delay = m->cfg.recovered_reuse_delay_ms;
    if (!m->following || m->cfg.recovered_reuse_all) {
        s->untracked_free_ms = now;
        return;
    }
    while (s->n_freed && freed_at(s, 0)->at_ms + delay <= now) {
        s->freed_head = (s->freed_head + 1) & (s->cap_freed - 1);
        s->n_freed--;
    }
    uint64_t a = GRANULE_DOWN(addr), e = size > UINT64_MAX - (MC_ALLOC_ALIGN - 1) - addr
                                             ? GRANULE_DOWN(UINT64_MAX) /* (a corrupt log) */
                                             : GRANULE_UP(addr + size);
    freed_range_t *last = s->n_freed ? freed_at(s, s->n_freed - 1) : NULL;
    if (last && a <= last->end && last->addr <= e) {
        last->addr = a < last->addr ? a : last->addr;
        last->end = e > last->end ? e : last->end;
        last->at_ms = now;
        return;
    }
    if (s->n_freed == s->cap_freed) { /* full: twice the ring, unwrapped, up to the cap */
        size_t cap = s->cap_freed ? 2 * s->cap_freed : 16;
        freed_range_t *ring = cap <= MASTER_FREED_MAX ? mc_malloc(cap * sizeof(*ring)) : NULL;
        if (!ring) {
            s->untracked_free_ms = now;
            s->freed_head = s->n_freed = 0;
            return;
        }
        for (size_t i = 0; i < s->n_freed; i++)
            ring[i] = *freed_at(s, i);
        mc_free(s->freed);
        s->freed = ring;
        s->cap_freed = cap;
        s->freed_head = 0;
    }
    s->n_freed++;
    *freed_at(s, s->n_freed - 1) = (freed_range_t){a, e, now};
}

static void replay_kill_obj(mc_master_t *m, obj_t *o)
{
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (s && o->rep[i].blk < s->n_ext && s->ext[o->rep[i].blk].obj) {
            extent_t *x = &s->ext[o->rep[i].blk];
            x->obj = NULL;
            s->n_dead_ext++;
            if (o->state == OBJ_READABLE) /* no read lease names a pending put's space */
                replay_note_free(m, s, x->addr, x->size);
        }
    }
    master_obj_unlink_free(m, o);
}

/* Drops the dead extents of s once they are the majority, so that a standby applying a long
 * history of churn keeps extents proportional to the live replicas. */
static void replay_compact_ext(segment_t *s)
{
    if (s->n_dead_ext < 1024 || s->n_dead_ext * 2 < s->n_ext)
        return;
    size_t k = 0;
    for (size_t e = 0; e < s->n_ext; e++) {
        extent_t *x = &s->ext[e];
        if (!x->obj)
            continue;
        x->obj->rep[x->rep_idx].blk = (uint32_t)k;
        s->ext[k++] = *x;
    }
    s->n_ext = k;
    s->n_dead_ext = 0;
}

static void replay_drop_seg(mc_master_t *m, uint32_t id)
{
    segment_t *s = m->segs[id];
    for (size_t e = 0; e < s->n_ext; e++) {
        obj_t *o = s->ext[e].obj;
        if (!o)
            continue;
        o->rep[s->ext[e].rep_idx].seg = SEG_NONE;
        bool live = false;
        for (uint32_t i = 0; i < o->n_rep; i++)
            live |= o->rep[i].seg != SEG_NONE;
        if (!live)
            master_obj_unlink_free(m, o);
    }
    master_seg_free(m, id);
}

/* Replay of one record, by type. Each returns 0 to go on (a malformed record is skipped) and 1
 * to stop the recovery (no memory). */

/* MOUNT: (re)creates segment slot `id` as RECOVERING; its allocator is rebuilt at the end. */
static int replay_mount(mc_master_t *m, mc_wal_rd_t *r)
{
    uint32_t id = mc_wal_get_u32(r);
    uint64_t base = mc_wal_get_u64(r), size = mc_wal_get_u64(r);
    const uint8_t *uuid = mc_wal_get_bytes(r, 16);
    size_t nl, el, ll;
    const char *name = mc_wal_get_str(r, &nl);
    const char *ep = mc_wal_get_str(r, &el);
    const char *lb = mc_wal_get_str(r, &ll);
    if (r->err || id > 1000000)
        return 0; /* skip malformed */
    if (id >= m->n_segs) {
        if (mc_array_reserve(&m->segs, &m->cap_segs, (size_t)id + 1, 16) != MC_OK)
            return 1;
        for (uint32_t i = m->n_segs; i <= id; i++)
            m->segs[i] = NULL;
        m->n_segs = id + 1;
    }
    bool replaced = m->segs[id] != NULL;
    if (replaced)
        replay_drop_seg(m, id);
    segment_t *s = MC_NEW(segment_t);
    if (!s)
        return 1;
    if (replaced) /* the old slot's objects are gone: the whole segment as freed now */
        s->untracked_free_ms = master_now(m);
    s->name = mc_strndup(name, nl);
    s->endpoint = mc_strndup(ep, el);
    s->host_label = mc_strndup(lb, ll);
    s->base = base;
    s->size = size;
    memcpy(s->uuid, uuid, 16);
    s->state = SEG_RECOVERING;
    m->segs[id] = s;
    if (!s->name || !s->endpoint || !s->host_label)
        return 1;
    return 0;
}

/* The first reserved extent of s at or above addr (s->n_resv when none). */
static size_t resv_lower(const segment_t *s, uint64_t addr)
{
    size_t lo = 0, hi = s->n_resv;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->resv[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* A put claimed (or the leader gave back) the reserved extent at addr: no longer reserved
 * (marked; dropped by the next merge, so a claim costs no move of the array). */
static void resv_drop(segment_t *s, uint64_t addr)
{
    size_t i = resv_lower(s, addr);
    if (i == s->n_resv || s->resv[i].addr != addr || !s->resv[i].size)
        return;
    s->resv[i].size = 0;
    s->n_dead_resv++;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Merges the sorted addresses add[0..k) (blocks of bsize) into s's reserved extents in one
 * pass, dropping the marked ones; an address already there takes the new size. 1: no memory. */
static int resv_merge(segment_t *s, const uint64_t *add, size_t k, uint64_t bsize)
{
    resv_t *out = mc_malloc((s->n_resv - s->n_dead_resv + k) * sizeof(*out) + 1);
    if (!out)
        return 1;
    size_t n = 0, i = 0, j = 0;
    while (i < s->n_resv || j < k) {
        if (j == k || (i < s->n_resv && s->resv[i].addr < add[j])) {
            if (s->resv[i].size)
                out[n++] = s->resv[i];
            i++;
            continue;
        }
        if (i < s->n_resv && s->resv[i].addr == add[j])
            i++; /* replaced by the new block */
        if (!n || out[n - 1].addr != add[j]) /* (duplicates in one record: once) */
            out[n++] = (resv_t){add[j], bsize};
        j++;
    }
    mc_free(s->resv);
    s->resv = out;
    s->n_resv = n;
    s->n_dead_resv = 0;
    return 0;
}

/* RESERVE (packed: RESERVE_V): blocks a leader allocated ahead for its put pools (or,
 * release, gave back). Kept by address until a PUT_START or COMMIT names one
 * (replay_place_replicas); replay_finish quarantines those left. At most
 * MASTER_POOL_MAX_BLOCKS per record, MASTER_RESV_MAX per segment (what a leader's pools can
 * hold, twice: a record beyond it is skipped, logged); blocks outside the segment are
 * skipped. */
static int replay_reserve(mc_master_t *m, mc_wal_rd_t *r, bool packed)
{
    uint8_t release = mc_wal_get_u8(r);
    uint64_t id, bsize, n;
    if (packed) {
        id = mc_wal_get_varint(r);
        bsize = mc_wal_get_varint(r);
        n = mc_wal_get_varint(r);
    } else {
        id = mc_wal_get_u32(r);
        bsize = mc_wal_get_u64(r);
        n = mc_wal_get_u32(r);
    }
    segment_t *s = id < SEG_NONE ? master_seg_slot(m, (uint32_t)id) : NULL;
    if (r->err || release > 1 || !s || n > MASTER_POOL_MAX_BLOCKS || bsize == 0 ||
        bsize > s->size)
        return 0; /* skip malformed */
    uint64_t add[MASTER_POOL_MAX_BLOCKS], next = 0;
    size_t k = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint64_t addr = packed ? dec_addr(r, &next, bsize) : mc_wal_get_u64(r);
        if (r->err)
            return 0;
        if (addr < s->base || addr - s->base > s->size - bsize)
            continue;
        if (release)
            resv_drop(s, addr);
        else
            add[k++] = addr;
    }
    if (!k)
        return 0;
    if (s->n_resv - s->n_dead_resv + k > MASTER_RESV_MAX) {
        MC_LOG_ERROR("wal: segment %u holds %zu reserved blocks; %zu more skipped", (uint32_t)id,
                     s->n_resv - s->n_dead_resv, k);
        return 0;
    }
    qsort(add, k, sizeof(*add), cmp_u64);
    return resv_merge(s, add, k, bsize);
}

/* COMMIT, second half: records each replica as an extent of its segment (placed in the
 * allocator by replay_finish); replicas on unknown segments are dropped, and so is an object
 * left with none. */
static int replay_place_replicas(mc_master_t *m, obj_t *o, uint32_t n, const uint32_t *segs,
                                 const uint64_t *addrs)
{
    bool live = false;
    for (uint32_t i = 0; i < n; i++) {
        segment_t *s = master_seg_slot(m, segs[i]);
        o->rep[i].seg = SEG_NONE;
        if (!s)
            continue;
        replay_compact_ext(s);
        if (s->n_resv) /* a pool block: the put's from now on */
            resv_drop(s, addrs[i]);
        if (mc_array_reserve(&s->ext, &s->cap_ext, s->n_ext + 1, 1024) != MC_OK)
            return 1;
        s->ext[s->n_ext] = (extent_t){addrs[i], o->size, o, i};
        o->rep[i].seg = segs[i];
        o->rep[i].blk = (uint32_t)s->n_ext++;
        live = true;
    }
    if (!live)
        master_obj_unlink_free(m, o);
    return 0;
}

/* A pending put (PUT_START) becomes readable where it is (no new object or extents). */
static void replay_make_readable(mc_master_t *m, obj_t *o, uint64_t sum, uint8_t flags)
{
    master_list_remove(&m->writing, o);
    master_writer_done(m, o->owner);
    o->state = OBJ_READABLE;
    o->checksum = sum;
    o->flags = flags & OF_LOGGED;
    o->t_lease = 0;
    master_readable_link(m, o);
}

/* An object as a record carries it (COMMIT, PUT_START, an entry of PUT_STARTS(_V)). */
typedef struct rec_obj {
    uint64_t size, sum;
    uint8_t flags, n;
    uint32_t segs[MC_MASTER_MAX_REPLICAS];
    uint64_t addrs[MC_MASTER_MAX_REPLICAS];
    const char *key;
    size_t kl;
} rec_obj_t;

/* COMMIT of a pending put (PUT_START) with the same size and replicas, the PutEnd of a
 * logged put before PUT_ENDS: the object becomes readable where it is. */
static bool replay_commit_pending(mc_master_t *m, obj_t *o, const rec_obj_t *x)
{
    if (o->state != OBJ_WRITING || o->size != x->size || o->n_rep != x->n)
        return false;
    for (uint32_t i = 0; i < x->n; i++) {
        segment_t *s = master_seg_slot(m, x->segs[i]);
        if (o->rep[i].seg != x->segs[i] || !s || o->rep[i].blk >= s->n_ext ||
            s->ext[o->rep[i].blk].obj != o || s->ext[o->rep[i].blk].addr != x->addrs[i])
            return false;
    }
    replay_make_readable(m, o, x->sum, x->flags);
    return true;
}

/* The flags and replica count every object entry carries after its size (and checksum); false
 * (r->err set) when malformed: no replica or more than MC_MASTER_MAX_REPLICAS. */
static bool dec_flags_and_count(mc_wal_rd_t *r, rec_obj_t *x)
{
    x->flags = mc_wal_get_u8(r);
    x->n = mc_wal_get_u8(r);
    if (r->err || x->n == 0 || x->n > MC_MASTER_MAX_REPLICAS)
        r->err = 1;
    return !r->err;
}

/* COMMIT's payload (a PUT_START's after its client id): r->err when malformed (no replica, more
 * than MC_MASTER_MAX_REPLICAS, an empty key). */
static void dec_commit(mc_wal_rd_t *r, rec_obj_t *x)
{
    x->size = mc_wal_get_u64(r);
    x->sum = mc_wal_get_u64(r);
    if (!dec_flags_and_count(r, x))
        return;
    for (uint32_t i = 0; i < x->n; i++) {
        x->segs[i] = mc_wal_get_u32(r);
        x->addrs[i] = mc_wal_get_u64(r);
    }
    x->key = mc_wal_get_str(r, &x->kl);
    if (x->kl == 0)
        r->err = 1;
}

/* The decoder's state over one PUT_STARTS_V record: the previous entry's size, where each
 * replica slot's previous block ended, the previous key. */
typedef struct ps_dec {
    uint64_t size;
    uint64_t next[MC_MASTER_MAX_REPLICAS];
    size_t kl;
    char key[MASTER_KEY_MAX];
} ps_dec_t;

/* A PUT_STARTS_V entry (master_wal_log_put_start) into x (its key in d->key). r->err when
 * malformed (no replica, more than MC_MASTER_MAX_REPLICAS, a segment id over 32 bits, a bad
 * key). */
static void dec_put_start_v(mc_wal_rd_t *r, rec_obj_t *x, ps_dec_t *d)
{
    x->size = d->size = unzigzag(d->size, mc_wal_get_varint(r));
    x->sum = 0;
    if (!dec_flags_and_count(r, x))
        return;
    for (uint32_t i = 0; i < x->n; i++) {
        uint64_t seg = mc_wal_get_varint(r);
        if (seg > UINT32_MAX)
            r->err = 1;
        x->segs[i] = (uint32_t)seg;
        x->addrs[i] = dec_addr(r, &d->next[i], x->size);
    }
    dec_key(r, d->key, &d->kl);
    x->key = d->key;
    x->kl = d->kl;
}

/* COMMIT (cid NULL): the object (replacing any of the same key), readable (leased by
 * replay_finish). PUT_START (cid: its writer): the same, WRITING, owned by that client (known
 * from now on, not greeted: its first Ping still asks for a re-mount). Not OF_START_LOGGED:
 * the PUT_START may come from a snapshot, which holds every pending put (upserts' too), so its
 * PutEnd after a promotion logs a COMMIT, which every reader can apply. */
static int replay_commit(mc_master_t *m, const rec_obj_t *x, const uint8_t *cid)
{
    uint32_t h = master_key_hash(x->key, x->kl);
    obj_t *old = master_obj_find(m, x->key, x->kl, h);
    if (old && !cid && replay_commit_pending(m, old, x))
        return 0;
    if (old)
        replay_kill_obj(m, old);
    client_t *c = cid ? master_client_touch(m, cid, NULL) : NULL;
    if (cid && !c)
        return 1;
    obj_t *o = master_obj_new(m, x->key, x->kl, h, x->n);
    if (!o)
        return 1;
    o->size = x->size;
    o->checksum = x->sum;
    o->flags = x->flags & OF_LOGGED;
    master_obj_set_nrep(m, o, x->n);
    if (c) {
        o->state = OBJ_WRITING;
        o->owner = c->serial;
        o->t_lease = master_now(m);
        c->n_writing++;
        master_list_push(&m->writing, o);
    } else {
        o->state = OBJ_READABLE;
        master_readable_link(m, o);
    }
    return replay_place_replicas(m, o, x->n, x->segs, x->addrs);
}

/* PUT_STARTS (packed: PUT_STARTS_V): n PUT_STARTs of one writer, in order, at most
 * MASTER_RUN_MAX_KEYS (packed; else as many as the record holds). A malformed entry ends the
 * record (those before it applied). */
static int replay_put_starts(mc_master_t *m, mc_wal_rd_t *r, bool packed)
{
    const uint8_t *cid = mc_wal_get_bytes(r, 16);
    uint64_t n = packed ? mc_wal_get_varint(r) : mc_wal_get_u32(r);
    if (r->err || (packed && n > MASTER_RUN_MAX_KEYS))
        return 0;
    ps_dec_t d;
    d.size = d.kl = 0;
    memset(d.next, 0, sizeof(d.next));
    for (uint64_t i = 0; i < n; i++) {
        rec_obj_t x;
        if (packed)
            dec_put_start_v(r, &x, &d);
        else
            dec_commit(r, &x);
        if (r->err)
            return 0;
        if (replay_commit(m, &x, cid))
            return 1;
    }
    return 0;
}

/* PUT_ENDS: varint n (at most MASTER_RUN_MAX_KEYS), n entries (master_wal_log_put_end): each
 * key's pending put becomes readable with its checksum and flags. An entry whose key names no
 * pending put (a log missing its PUT_START: corrupt) is skipped, logged; a malformed entry ends
 * the record. */
static int replay_put_ends(mc_master_t *m, mc_wal_rd_t *r)
{
    uint64_t n = mc_wal_get_varint(r), missing = 0;
    if (r->err || n > MASTER_RUN_MAX_KEYS)
        return 0;
    char key[MASTER_KEY_MAX];
    size_t kl = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint8_t tag = mc_wal_get_u8(r);
        uint64_t sum = tag & 0x80 ? mc_wal_get_u64(r) : 0;
        dec_key(r, key, &kl);
        if (r->err)
            break;
        obj_t *o = master_obj_find(m, key, kl, master_key_hash(key, kl));
        if (o && o->state == OBJ_WRITING)
            replay_make_readable(m, o, sum, tag & 0x7f);
        else
            missing++;
    }
    if (missing)
        MC_LOG_ERROR("wal: PUT_ENDS names %llu keys without a pending put; skipped",
                     (unsigned long long)missing);
    return 0;
}

static int replay_record(void *ctx, uint8_t type, const uint8_t *p, size_t len)
{
    mc_master_t *m = ctx;
    mc_wal_rd_t r = {.p = p, .len = len};
    switch (type) {
    case MC_WAL_MOUNT:
        return replay_mount(m, &r);
    case MC_WAL_UNMOUNT: {
        uint32_t id = mc_wal_get_u32(&r);
        if (!r.err && master_seg_slot(m, id))
            replay_drop_seg(m, id);
        return 0;
    }
    case MC_WAL_COMMIT:
    case MC_WAL_PUT_START: {
        const uint8_t *cid = type == MC_WAL_PUT_START ? mc_wal_get_bytes(&r, 16) : NULL;
        rec_obj_t x;
        dec_commit(&r, &x);
        return r.err ? 0 : replay_commit(m, &x, cid);
    }
    case MC_WAL_PUT_STARTS:
    case MC_WAL_PUT_STARTS_V:
        return replay_put_starts(m, &r, type == MC_WAL_PUT_STARTS_V);
    case MC_WAL_PUT_ENDS:
        return replay_put_ends(m, &r);
    case MC_WAL_REMOVE: {
        size_t kl;
        const char *key = mc_wal_get_str(&r, &kl);
        if (r.err || kl == 0)
            return 0;
        obj_t *o = master_obj_find(m, key, kl, master_key_hash(key, kl));
        if (o)
            replay_kill_obj(m, o);
        return 0;
    }
    case MC_WAL_RESERVE:
    case MC_WAL_RESERVE_V:
        return replay_reserve(m, &r, type == MC_WAL_RESERVE_V);
    case MC_WAL_SNAP_END: /* frees before the snapshot are not known: as freed now */
        for (uint32_t id = 0; id < m->n_segs; id++)
            if (m->segs[id])
                m->segs[id]->untracked_free_ms = master_now(m);
        return 0;
    case MC_WAL_DISK_MOUNT:
    case MC_WAL_DISK_UNMOUNT:
    case MC_WAL_DISK_PUT:
    case MC_WAL_DISK_DROP:
    case MC_WAL_DISK_TOMB:
    case MC_WAL_DISK_UNTOMB:
        return master_disk_replay(m, type, &r);
    default:
        MC_LOG_WARN("wal: unknown record type %u skipped", type);
        return 0;
    }
}

static int cmp_ext(const void *a, const void *b)
{
    const extent_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* A recovered object keeps its replicas on segments the log mounted (one on an unknown
 * segment was never usable); one left with none is freed. */
static void keep_known_replicas(mc_master_t *m, obj_t *o)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < o->n_rep; i++)
        if (o->rep[i].seg != SEG_NONE)
            o->rep[k++] = o->rep[i];
    master_obj_set_nrep(m, o, k);
    if (!k)
        master_obj_unlink_free(m, o);
}

static int cmp_freed(const void *a, const void *b)
{
    const freed_range_t *x = a, *y = b;
    return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* Promotion by frees: s->freed becomes an array of the ranges still within the reuse delay
 * at now, sorted by address, those that overlap or touch merged (waiting for the later free);
 * returns how many. Without memory for it the whole segment waits for its last free. */
static size_t freed_still_recent(mc_master_t *m, segment_t *s, uint64_t now)
{
    size_t n = 0;
    freed_range_t *arr = s->n_freed ? mc_malloc(s->n_freed * sizeof(*arr)) : NULL;
    if (s->n_freed && !arr) {
        uint64_t until = freed_at(s, s->n_freed - 1)->at_ms + m->cfg.recovered_reuse_delay_ms;
        if (s->reuse_after_ms < until)
            s->reuse_after_ms = until;
    }
    for (size_t i = 0; arr && i < s->n_freed; i++)
        if (freed_at(s, i)->at_ms + m->cfg.recovered_reuse_delay_ms > now)
            arr[n++] = *freed_at(s, i);
    mc_free(s->freed);
    s->freed = arr;
    s->freed_head = 0;
    s->n_freed = s->cap_freed = n; /* no ring any more: an array, freed by replay_finish */
    if (n > 1)
        qsort(arr, n, sizeof(*arr), cmp_freed);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        freed_range_t *last = k ? &arr[k - 1] : NULL;
        if (last && arr[i].addr <= last->end) {
            if (arr[i].end > last->end)
                last->end = arr[i].end;
            if (arr[i].at_ms > last->at_ms)
                last->at_ms = arr[i].at_ms;
        } else {
            arr[k++] = arr[i];
        }
    }
    return k;
}

/* Promotion by frees, while the allocator of segment id is built in address order (alloc_at
 * only goes up; *cursor is where its last reservation ended): the parts of the freed ranges
 * s->freed[*i..n) below limit (the next reservation) and above *cursor are reserved and
 * parked until their free + the reuse delay (master_park_block); what a recovered replica or
 * a quarantined pool block covers is theirs. A part that cannot be reserved (a corrupt log,
 * no memory) makes the whole segment wait until then instead. */
static void park_freed(mc_master_t *m, uint32_t id, size_t *i, size_t n, uint64_t limit,
                       uint64_t *cursor)
{
    segment_t *s = m->segs[id];
    for (; *i < n && s->freed[*i].addr < limit; ++*i) {
        const freed_range_t *f = &s->freed[*i];
        uint64_t from = f->addr > *cursor ? f->addr : *cursor;
        uint64_t to = f->end < limit ? f->end : limit;
        uint64_t until = f->at_ms + m->cfg.recovered_reuse_delay_ms;
        uint32_t blk;
        if (from < to) {
            if (mc_master_allocator_alloc_at(s->alloc, from, to - from, &blk) == MC_OK) {
                s->n_replicas++;
                master_park_block(m, id, blk, until);
                *cursor = to;
            } else if (s->reuse_after_ms < until) {
                s->reuse_after_ms = until;
            }
        }
        if (f->end > limit)
            return; /* its rest lies above the reservation at limit: the next call's */
    }
}

/* Turns the replayed table into a serving one, as of now: rebuilds each segment's allocator
 * from the surviving extents and drops what cannot be placed (overlaps mean a corrupt log:
 * never hand out a range twice); every segment waits client_ttl for its owner. Reuse of
 * recovered space: a read lease the old master granted on space it freed ends within
 * recovered_reuse_delay after the free, which came before its record reached us; space never
 * freed in the log carried no object. Without by_frees (a restart) each segment lends nothing
 * for the delay, counted from now. With by_frees (a promoted standby, which applied every
 * record as it arrived) each range freed within the delay is parked until its free + the
 * delay, less what live replicas cover now (a later object re-used it), and the rest of the
 * segment lends at once, unless the standby did not keep the ranges (untracked_free_ms: then
 * the whole segment waits until that + the delay). Every object is leased from now. */
/* Extents ahead whose replica replay_finish asks the cache for: objects lie anywhere in
 * memory, and a promotion visits every one (1 M objects: ~100 ms of cache misses in a row). */
#define REPLAY_PREFETCH 8

static mc_status_t replay_finish(mc_master_t *m, bool by_frees)
{
    uint64_t now = master_now(m), lost = 0;
    for (uint32_t id = 0; id < m->n_segs; id++) {
        segment_t *s = m->segs[id];
        if (!s)
            continue;
        s->deadline_ms = now + m->cfg.client_ttl_ms;
        s->reuse_after_ms =
            !by_frees              ? now + m->cfg.recovered_reuse_delay_ms
            : s->untracked_free_ms ? s->untracked_free_ms + m->cfg.recovered_reuse_delay_ms
                                   : 0;
        if (mc_master_allocator_create(s->base, s->size, &s->alloc) != MC_OK)
            return MC_ERR_NO_MEMORY;
        size_t k = 0;
        for (size_t e = 0; e < s->n_ext; e++)
            if (s->ext[e].obj)
                s->ext[k++] = s->ext[e];
        if (k)
            qsort(s->ext, k, sizeof(extent_t), cmp_ext);
        size_t n_freed = by_frees ? freed_still_recent(m, s, now) : 0, f = 0;
        uint64_t cursor = 0; /* where the allocator's last reservation ended */
        size_t q = 0; /* reserved extents, merged in address order */
        for (size_t e = 0; e <= k; e++) {
            extent_t *x = e < k ? &s->ext[e] : NULL;
            if (e + REPLAY_PREFETCH < k) { /* the replica whose blk is set a few extents on */
                const extent_t *y = &s->ext[e + REPLAY_PREFETCH];
                __builtin_prefetch(&y->obj->rep[y->rep_idx], 1);
            }
            /* Pool blocks of an older leader that no put claimed: their writer (its PUT_START
             * lost) may still write there, so they are lent to nobody for
             * put_start_release_timeout, as a stuck put's space; an object's replica wins
             * over an overlapping one. */
            for (; q < s->n_resv && (!x || s->resv[q].addr < x->addr); q++) {
                const resv_t *v = &s->resv[q];
                uint32_t blk;
                if (!v->size || (x && v->addr + v->size > x->addr))
                    continue;
                park_freed(m, id, &f, n_freed, v->addr, &cursor);
                if (mc_master_allocator_alloc_at(s->alloc, v->addr, v->size, &blk) != MC_OK)
                    continue;
                cursor = GRANULE_UP(v->addr + v->size);
                s->n_replicas++;
                master_park_block(m, id, blk, now + m->cfg.put_start_release_timeout_ms);
            }
            park_freed(m, id, &f, n_freed, x ? x->addr : UINT64_MAX, &cursor);
            if (!x)
                break;
            uint32_t blk;
            if (mc_master_allocator_alloc_at(s->alloc, x->addr, x->size, &blk) == MC_OK) {
                x->obj->rep[x->rep_idx].blk = blk;
                cursor = GRANULE_UP(x->addr + x->size);
                s->n_replicas++;
            } else {
                MC_LOG_ERROR("wal: replica of '%.*s' at 0x%llx overlaps another; dropped",
                             (int)x->obj->klen, obj_key(x->obj), (unsigned long long)x->addr);
                x->obj->rep[x->rep_idx].seg = SEG_NONE;
                lost++;
            }
        }
        mc_free(s->ext);
        s->ext = NULL;
        s->n_ext = s->cap_ext = s->n_dead_ext = 0;
        mc_free(s->resv);
        s->resv = NULL;
        s->n_resv = s->n_dead_resv = 0;
        mc_free(s->freed);
        s->freed = NULL;
        s->freed_head = s->n_freed = s->cap_freed = 0;
    }
    for (obj_t *o = master_readable_next(m, NULL); o;) {
        obj_t *next = master_readable_next(m, o);
        /* Leases are not logged: honour any the old master may have granted (clients read
         * under them without asking, store-client.md "Lease cache") by leasing every
         * recovered object for one lease period from now. */
        master_lease_note_at(m, now, o->t_lease > now ? o->t_lease : 0,
                             now + m->cfg.default_kv_lease_ttl_ms);
        o->t_lease = now + m->cfg.default_kv_lease_ttl_ms;
        if (o->flags & OF_SOFT_PIN)
            o->t_pin = now + m->cfg.default_kv_soft_pin_ttl_ms;
        keep_known_replicas(m, o);
        o = next;
    }
    /* pending puts (PUT_START records): as if started now, so that their space is kept for
     * their writers as a single master keeps its own (put_start_discard_timeout before another
     * PutStart of the key may pre-empt one, put_start_release_timeout before its space is
     * freed) */
    for (obj_t *o = m->writing.head; o;) {
        obj_t *next = (obj_t *)o->node.next_tag;
        o->t_lease = now;
        keep_known_replicas(m, o);
        o = next;
    }
    for (size_t i = 0; i < m->n_clients; i++) /* their writers: client_ttl from now to call */
        if (m->clients[i].n_writing)
            m->clients[i].last_ping_ms = now;
    (void)lost;
    master_disk_replay_finish(m, now);
    return MC_OK;
}

mc_status_t master_wal_open_and_recover(mc_master_t *m)
{
    if (mkdir(m->wal_dir, 0755) != 0 && errno != EEXIST) {
        MC_LOG_ERROR("wal: mkdir %s: %s", m->wal_dir, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    uint64_t *snaps = NULL, *logs = NULL;
    size_t n_snaps = 0, n_logs = 0;
    if (mc_wal_list(m->wal_dir, "snap.", &snaps, &n_snaps) != MC_OK ||
        mc_wal_list(m->wal_dir, "log.", &logs, &n_logs) != MC_OK) {
        mc_free(snaps);
        return MC_ERR_FILE_OPEN_FAIL;
    }
    m->recovering = true;
    uint64_t from = 0, max_gen = 0;
    mc_status_t st = MC_OK;
    char path[4096];
    /* Newest complete snapshot. */
    for (size_t i = n_snaps; i-- > 0;) {
        int complete = 0;
        uint8_t last = 0;
        wal_path(m, path, sizeof(path), "snap.", snaps[i], "");
        /* Validate first with a no-op pass so that a partial snapshot never half-applies. */
        if (mc_wal_replay_file(path, replay_record, m, &complete, &last) != MC_OK)
            continue;
        if (complete && last == MC_WAL_SNAP_END) {
            from = snaps[i];
            MC_LOG_INFO("wal: loaded snapshot %llu", (unsigned long long)from);
            break;
        }
        /* Incomplete: undo by starting over from a clean table. */
        MC_LOG_WARN("wal: snapshot %llu incomplete; ignored", (unsigned long long)snaps[i]);
        for (uint32_t id = 0; id < m->n_segs; id++)
            if (m->segs[id])
                replay_drop_seg(m, id);
        for (obj_t *o = master_readable_next(m, NULL); o;) {
            obj_t *n = master_readable_next(m, o);
            master_obj_unlink_free(m, o);
            o = n;
        }
        master_disk_free(m); /* the disk entries and tombstones it applied */
    }
    if (n_snaps)
        max_gen = snaps[n_snaps - 1];
    uint64_t replayed = 0;
    for (size_t i = 0; i < n_logs && st == MC_OK; i++) {
        if (logs[i] > max_gen)
            max_gen = logs[i];
        if (logs[i] < from)
            continue;
        wal_path(m, path, sizeof(path), "log.", logs[i], "");
        st = mc_wal_replay_file(path, replay_record, m, NULL, NULL);
        replayed++;
    }
    mc_free(snaps);
    mc_free(logs);
    if (st == MC_OK)
        st = replay_finish(m, false);
    m->recovering = false;
    if (st != MC_OK)
        return st;
    st = open_log(m, max_gen + 1);
    if (st != MC_OK)
        return st;
    m->wal_on = true;
    uint32_t nseg = 0;
    for (uint32_t id = 0; id < m->n_segs; id++)
        nseg += m->segs[id] != NULL;
    if (nseg || m->n_objs) {
        MC_LOG_INFO("wal: recovered %u segments and %llu objects from %s; waiting for owners to "
                    "re-mount", nseg, (unsigned long long)m->n_objs, m->wal_dir);
        m->snapshot_soon = true; /* compact the replayed logs */
    }
    (void)replayed;
    return MC_OK;
}

/* ------------------------------------------------------------------ standby (master/ha.c) */

mc_status_t mc_master_follow_begin(mc_master_t *m)
{
    if (m->wal_on)
        return MC_ERR_INVALID_PARAMS;
    m->recovering = true;
    m->following = true;
    return MC_OK;
}

typedef struct follow_ctx {
    mc_master_t *m;
    uint64_t n;
} follow_ctx_t;

static int follow_record(void *ctx, uint8_t type, const uint8_t *p, size_t len)
{
    follow_ctx_t *f = ctx;
    f->n++;
    return replay_record(f->m, type, p, len);
}

mc_status_t mc_master_follow_apply(mc_master_t *m, const void *records, size_t len,
                                   size_t *used_p, uint64_t *n_p, uint8_t *last_type_p)
{
    follow_ctx_t f = {.m = m};
    mc_status_t st = m->recovering
                         ? mc_wal_replay_buf(records, len, follow_record, &f, used_p, last_type_p)
                         : MC_ERR_INVALID_PARAMS;
    if (n_p)
        *n_p = f.n;
    return st == MC_ERR_INTERNAL ? MC_ERR_NO_MEMORY : st;
}

mc_status_t mc_master_follow_promote(mc_master_t *m, const char *wal_dir, uint64_t ha_view)
{
    if (!m->recovering)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = replay_finish(m, !m->cfg.recovered_reuse_all);
    m->recovering = m->following = false;
    if (st != MC_OK)
        return st;
    m->cfg.ha_view_version = ha_view;
    if (!wal_dir || !wal_dir[0])
        return MC_OK;
    m->wal_dir = mc_strdup(wal_dir);
    if (!m->wal_dir)
        return MC_ERR_NO_MEMORY;
    m->cfg.wal_dir = m->wal_dir;
    /* a generation after anything the directory holds; the first cron snapshots the promoted
     * table into it (snapshot_soon), after which the directory alone holds the state */
    uint64_t gen = 0, *g;
    size_t n;
    const char *prefixes[2] = {"log.", "snap."};
    for (int p = 0; p < 2; p++) {
        if (mc_wal_list(m->wal_dir, prefixes[p], &g, &n) != MC_OK)
            return MC_ERR_FILE_OPEN_FAIL;
        if (n && g[n - 1] > gen)
            gen = g[n - 1];
        mc_free(g);
    }
    st = open_log(m, gen + 1);
    if (st != MC_OK)
        return st;
    m->wal_on = true;
    m->snapshot_soon = true;
    return MC_OK;
}
