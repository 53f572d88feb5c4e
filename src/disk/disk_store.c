/* The disk tier's storage engine (disk_store.h; docs/internals/disk-tier.md).
 *
 * Locks: `wmu` serializes the appender (bucket tails, rollover, file creation); `mu` guards the
 * index, the bucket list, the byte counts and the statistics, and is held only for memory
 * work, never across I/O. Order: wmu before mu. Each io_uring ring has its own mutex, taken
 * before mu and never while holding it.
 *
 * Lifetimes: an index entry (dent_t) belongs to the hash table and to its bucket's object
 * list. A bucket (bucket_t) is freed, and its file closed and deleted, only when it is off
 * the list (evicted or emptied) and no read is in flight on it (inflight == 0); the read that
 * drops inflight to 0 does it. A read in flight (op_t) belongs to its batch until the batch
 * returns; an op abandoned at its deadline then belongs to its ring and is freed when its
 * completion is reaped (it still holds its bucket and its store-owned buffer until then). */
#include "disk/disk_store.h"

#include "common/hash.h"
#include "common/log.h"
#include "common/tenant.h"
#include "common/time.h"
#include "disk/disk_format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <unistd.h>

const uint32_t mc_disk_lat_bounds_us[MC_DISK_LAT_BUCKETS - 1] = {
    50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000};

typedef struct dent dent_t;

typedef struct bucket {
    uint64_t id, salt;
    int rfd;                 /* reads (O_DIRECT when the store has direct_io) */
    int wfd;                 /* appends; -1 once sealed */
    uint64_t size;           /* file bytes up to the last committed record */
    uint32_t nrec;           /* records written (objects and tombstones) */
    uint32_t tombs;          /* tombstones in this bucket */
    uint64_t live;           /* objects of the index in this bucket */
    uint32_t inflight;       /* reads in flight */
    bool detached;           /* off the list: delete when inflight reaches 0 */
    uint64_t last_access_ns; /* LRU */
    dent_t *objs;            /* live objects (bprev/bnext) */
    struct bucket *prev, *next; /* the store's list, oldest (smallest id) first */
    struct bucket *enext;    /* evicted-bucket list of one put */
} bucket_t;

struct dent {
    dent_t *hnext;           /* hash chain */
    dent_t *bprev, *bnext;   /* bucket's objects */
    bucket_t *b;
    uint64_t hash, off, vlen, csum;
    uint32_t hlen, klen;
    bool refd;               /* read since written: re-appended once when its bucket is the
                                eviction victim (second chance) */
    bool shadows;            /* an older record of the key may still be on disk with no
                                tombstone after it (a second-chance copy, or a restart that
                                found both): its removal always writes a tombstone */
    char key[];              /* storage key: tenant '\0' key */
};

/* A ring is held by one batch at a time, from its first submission to its end, which may be
 * on another thread (mc_disk_store_read_start / _finish): `busy` (under mu) says it is held;
 * whoever holds it owns the uring and inflight. */
typedef struct ring {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* busy went false */
    bool busy;
    struct io_uring uring;
    uint32_t inflight; /* submitted, not reaped: reads and cancels, abandoned ones included */
} ring_t;

/* One read in flight, cut into CHUNK-sized reads (chunk_t: the io_uring user data). */
struct op;
typedef struct chunk {
    struct op *op;
    int res;
    bool submitted, done;
} chunk_t;

typedef struct op {
    mc_disk_read_t *req;     /* NULL once abandoned at the deadline */
    bucket_t *b;
    uint64_t off;            /* record offset (identifies the entry) */
    uint64_t voff, vlen, csum;
    void *dst;               /* what the device writes: req->buf or bounce */
    size_t dlen;             /* vlen, rounded to 4 KiB with O_DIRECT */
    void *bounce;            /* store-owned, or NULL */
    size_t bounce_cap;
    uint64_t t0;
    uint64_t chunk;          /* the store's piece size (chunk_span) */
    mc_hash_stream_t hs;     /* checksum of the chunks hashed so far */
    bool hs_live, failed, finished;
    uint32_t nchunks, nsubmitted, ndone, hashed;
    uint32_t reported;       /* chunks reported to progress so far */
    struct op *lnext;        /* late list */
    chunk_t ch[];
} op_t;

/* Reads are cut into chunks of the store's piece size (mc_disk_piece_bytes: at most CHUNK_MAX,
 * one device request each); each chunk is hashed as soon as it and the ones before it are in,
 * while the later ones are still being read. A read of more than 2 * TAIL ends with a
 * TAIL-sized chunk of its own (chunk_span), so that what follows its last completion (hashing
 * here, a streaming reader's last pull and hash) is short. */
#define CHUNK_MAX (1ull << 20)
#define CHUNK_MIN (64ull << 10)
#define TAIL (256ull << 10)
#define CANCEL_TAG ((uint64_t)1) /* user_data of cancel requests (chunks are 8-aligned) */
#define BOUNCE_CACHE 16
#define START_CHUNKS 8 /* chunks mc_disk_store_read_start submits; _finish submits the rest */
#define BOUNCE_CACHE_BYTES (256ull << 20)

struct mc_disk_store {
    char *dir;
    int dirfd, lockfd;
    mc_disk_config_t cfg;
    pthread_mutex_t mu, wmu;
    dent_t **ht;
    size_t ht_cap, nobj;
    bucket_t *head, *tail, *active;
    uint64_t next_id, seq, bytes, live_bytes;
    mc_disk_stats_t st;
    bool direct;
    uint64_t chunk; /* piece size of reads (mc_disk_piece_bytes of the directory's device) */
    ring_t *rings;
    uint32_t nrings;
    atomic_uint rr;
    struct {
        void *base;
        size_t len;
    } reg[MC_DISK_REG_BUFFERS_MAX]; /* guarded by mu */
    pthread_mutex_t bmu;            /* bounce cache */
    struct {
        void *p;
        size_t cap;
    } bcache[BOUNCE_CACHE];
    size_t bcache_n, bcache_bytes;
};

static uint8_t zero_page[MC_DISK_ALIGN] __attribute__((aligned(MC_DISK_ALIGN)));

/* ------------------------------------------------------------------ keys and the index */

/* Builds tenant '\0' key into out (MC_DISK_STORAGE_KEY_MAX bytes): its length, 0 if invalid. */
static uint32_t storage_key(const char *tenant, const char *key, size_t klen, char *out)
{
    if (!key || klen == 0 || klen > MC_DISK_USER_KEY_MAX || mc_tenant_invalid(tenant))
        return 0;
    const char *t = mc_tenant_or_default(tenant);
    size_t tl = strlen(t);
    memcpy(out, t, tl);
    out[tl] = '\0';
    memcpy(out + tl + 1, key, klen);
    return (uint32_t)(tl + 1 + klen);
}

static dent_t **ht_slot(mc_disk_store_t *s, const char *k, uint32_t kl, uint64_t h)
{
    dent_t **pp = &s->ht[h & (s->ht_cap - 1)];
    while (*pp && !((*pp)->hash == h && (*pp)->klen == kl && memcmp((*pp)->key, k, kl) == 0))
        pp = &(*pp)->hnext;
    return pp;
}

static void ht_grow(mc_disk_store_t *s)
{
    size_t ncap = s->ht_cap * 2;
    dent_t **nt = calloc(ncap, sizeof(*nt));
    if (!nt)
        return; /* chains get longer; still correct */
    for (size_t i = 0; i < s->ht_cap; i++)
        for (dent_t *e = s->ht[i], *n; e; e = n) {
            n = e->hnext;
            e->hnext = nt[e->hash & (ncap - 1)];
            nt[e->hash & (ncap - 1)] = e;
        }
    free(s->ht);
    s->ht = nt;
    s->ht_cap = ncap;
}

/* Unlinks e from its bucket's list and the counts (not from the hash table). */
static void dent_unlink_bucket(mc_disk_store_t *s, dent_t *e)
{
    if (e->bprev)
        e->bprev->bnext = e->bnext;
    else
        e->b->objs = e->bnext;
    if (e->bnext)
        e->bnext->bprev = e->bprev;
    e->bprev = e->bnext = NULL;
    e->b->live--;
    s->nobj--;
    s->live_bytes -= e->vlen;
}

/* Adds e (not yet in the table) to the table and its bucket. mu held. */
static void dent_insert(mc_disk_store_t *s, dent_t *e)
{
    if (s->nobj >= s->ht_cap)
        ht_grow(s);
    dent_t **pp = &s->ht[e->hash & (s->ht_cap - 1)];
    e->hnext = *pp;
    *pp = e;
    e->bprev = NULL;
    e->bnext = e->b->objs;
    if (e->bnext)
        e->bnext->bprev = e;
    e->b->objs = e;
    e->b->live++;
    s->nobj++;
    s->live_bytes += e->vlen;
}

static dent_t *dent_new(bucket_t *b, const char *k, uint32_t kl, uint64_t h, uint64_t off,
                        uint32_t hlen, uint64_t vlen, uint64_t csum)
{
    dent_t *e = malloc(sizeof(*e) + kl);
    if (!e)
        return NULL;
    memset(e, 0, sizeof(*e));
    e->b = b;
    e->hash = h;
    e->off = off;
    e->hlen = hlen;
    e->vlen = vlen;
    e->csum = csum;
    e->klen = kl;
    memcpy(e->key, k, kl);
    return e;
}

static void obj_of(const dent_t *e, mc_disk_obj_t *o)
{
    const char *nul = memchr(e->key, '\0', e->klen);
    size_t tl = nul ? (size_t)(nul - e->key) : 0;
    o->tenant = e->key;
    o->tenant_len = tl;
    o->key = e->key + tl + 1;
    o->key_len = e->klen - tl - 1;
    o->loc = (mc_disk_loc_t){.bucket_id = e->b->id, .offset = e->off, .key_size = e->klen,
                             .data_size = e->vlen, .checksum = e->csum};
}

/* ------------------------------------------------------------------ buckets */

/* The file name of bucket id, relative to the store's directory. */
static void bucket_name(uint64_t id, char *out, size_t cap)
{
    snprintf(out, cap, "%llu.bucket", (unsigned long long)id);
}

/* Closes and deletes a detached bucket with no read in flight, frees it. mu held or sole owner. */
static void bucket_destroy(mc_disk_store_t *s, bucket_t *b)
{
    char name[32];
    bucket_name(b->id, name, sizeof(name));
    if (unlinkat(s->dirfd, name, 0) != 0 && errno != ENOENT)
        MC_LOG_WARN("disk: cannot delete bucket %s/%s: %s", s->dir, name, strerror(errno));
    if (b->rfd >= 0)
        close(b->rfd);
    if (b->wfd >= 0)
        close(b->wfd);
    free(b);
}

static void list_append(mc_disk_store_t *s, bucket_t *b)
{
    b->prev = s->tail;
    b->next = NULL;
    if (s->tail)
        s->tail->next = b;
    else
        s->head = b;
    s->tail = b;
    s->bytes += b->size;
    s->st.buckets++;
}

/* Takes b off the list (its bytes no longer count). Its objects stay on b->objs. mu held. */
static void list_remove(mc_disk_store_t *s, bucket_t *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        s->head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    else
        s->tail = b->prev;
    b->prev = b->next = NULL;
    s->bytes -= b->size;
    s->st.buckets--;
    b->detached = true;
    if (s->active == b)
        s->active = NULL; /* the appender seals it when it next looks (wmu) */
}

/* Releases the objects of a detached bucket and, with no read in flight, the bucket. mu held. */
static void bucket_release(mc_disk_store_t *s, bucket_t *b)
{
    for (dent_t *e = b->objs, *n; e; e = n) {
        n = e->bnext;
        free(e);
    }
    b->objs = NULL;
    if (b->inflight == 0)
        bucket_destroy(s, b);
}

/* A bucket that holds no object any more is deleted, unless it holds tombstones that still
 * hide records of older buckets (only the oldest bucket's tombstones hide nothing). mu held. */
static void drop_empty(mc_disk_store_t *s)
{
    for (bucket_t *b = s->head, *n; b; b = n) {
        n = b->next;
        if (b->live || b == s->active || b->wfd >= 0)
            continue;
        if (b->tombs && b != s->head)
            continue;
        list_remove(s, b);
        bucket_release(s, b);
    }
}

/* Eviction victim: FIFO the oldest, LRU the least recently read; never the bucket being
 * appended to, and never a bucket with tombstones unless it is the oldest (so a removed key
 * cannot come back at the next restart). NULL when none. mu held. */
static bucket_t *pick_victim(mc_disk_store_t *s)
{
    bucket_t *best = NULL;
    for (bucket_t *b = s->head; b; b = b->next) {
        if (b == s->active || b->wfd >= 0 || (b->tombs && b != s->head))
            continue;
        if (s->cfg.policy == MC_DISK_EVICT_FIFO)
            return b;
        if (!best || b->last_access_ns < best->last_access_ns)
            best = b;
    }
    return best;
}

/* Reports evicted buckets to the callback, then releases them. No lock held. */
static void report_evicted(mc_disk_store_t *s, bucket_t *evicted)
{
    while (evicted) {
        bucket_t *b = evicted;
        evicted = b->enext;
        if (s->cfg.on_evict) {
            size_t n = 0;
            for (dent_t *e = b->objs; e; e = e->bnext)
                n++;
            mc_disk_obj_t *objs = n ? calloc(n, sizeof(*objs)) : NULL;
            if (n && !objs) {
                MC_LOG_ERROR("disk: no memory to report the %zu objects of evicted bucket %llu", n,
                             (unsigned long long)b->id);
            } else {
                size_t i = 0;
                for (dent_t *e = b->objs; e; e = e->bnext)
                    obj_of(e, &objs[i++]);
                s->cfg.on_evict(b->id, objs, n, s->cfg.on_evict_arg);
            }
            free(objs);
        }
        pthread_mutex_lock(&s->mu);
        bucket_release(s, b);
        pthread_mutex_unlock(&s->mu);
    }
}

static mc_status_t write_status(int err)
{
    return err == ENOSPC || err == EDQUOT || err == EFBIG ? MC_ERR_NO_AVAILABLE_HANDLE
                                                         : MC_ERR_FILE_WRITE_FAIL;
}

/* Writes all of the iovecs at off; 0 or an errno. */
static int pwritev_all(int fd, struct iovec *iov, int n, uint64_t off)
{
    while (n > 0) {
        ssize_t w = pwritev(fd, iov, n, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (w == 0)
            return EIO;
        off += (uint64_t)w;
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

static int open_read_fd(mc_disk_store_t *s, const char *name)
{
    return openat(s->dirfd, name, O_RDONLY | O_CLOEXEC | (s->direct ? O_DIRECT : 0));
}

/* Seals the bucket being appended to: fdatasync, close the write fd. wmu held. */
static void seal_active(mc_disk_store_t *s, bucket_t *b)
{
    if (!b || b->wfd < 0)
        return;
    if (fdatasync(b->wfd) != 0)
        MC_LOG_ERROR("disk: fdatasync of bucket %llu failed: %s", (unsigned long long)b->id,
                     strerror(errno));
    pthread_mutex_lock(&s->mu);
    close(b->wfd);
    b->wfd = -1;
    if (s->active == b)
        s->active = NULL;
    drop_empty(s);
    pthread_mutex_unlock(&s->mu);
}

/* Creates the next bucket file with its header and makes it the active bucket. wmu held. */
static mc_status_t bucket_create(mc_disk_store_t *s)
{
    bucket_t *b = calloc(1, sizeof(*b));
    if (!b)
        return MC_ERR_NO_MEMORY;
    b->id = s->next_id++;
    b->rfd = b->wfd = -1;
    if (getrandom(&b->salt, sizeof(b->salt), 0) != sizeof(b->salt))
        b->salt = mc_now_ns() ^ ((uint64_t)getpid() << 32);
    char name[32];
    bucket_name(b->id, name, sizeof(name));
    b->wfd = openat(s->dirfd, name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    int err = b->wfd < 0 ? errno : 0;
    if (!err) {
        uint8_t hdr[MC_DISK_BUCKET_HDR_SIZE];
        mc_disk_bucket_hdr_encode(
            &(mc_disk_bucket_hdr_t){.bucket_id = b->id, .salt = b->salt, .created_ms = mc_wall_ms()},
            hdr);
        struct iovec iov = {hdr, sizeof(hdr)};
        err = pwritev_all(b->wfd, &iov, 1, 0);
        if (!err && fsync(s->dirfd) != 0)
            err = errno;
    }
    if (!err) {
        b->rfd = open_read_fd(s, name);
        if (b->rfd < 0)
            err = errno;
    }
    if (err) {
        MC_LOG_ERROR("disk: cannot create bucket %s/%s: %s", s->dir, name, strerror(err));
        if (b->wfd >= 0) {
            close(b->wfd);
            unlinkat(s->dirfd, name, 0);
        }
        if (b->rfd >= 0)
            close(b->rfd);
        free(b);
        return write_status(err);
    }
    b->size = MC_DISK_BUCKET_HDR_SIZE;
    b->last_access_ns = mc_now_ns();
    pthread_mutex_lock(&s->mu);
    list_append(s, b);
    s->active = b;
    pthread_mutex_unlock(&s->mu);
    return MC_OK;
}

/* Writes one record at the end of bucket a: the value and its padding first, then the header
 * block that commits it (with sync_each_put each is fdatasynced). On failure a is truncated
 * back to its last committed record. *off_p gets the record's offset. The caller accounts the
 * record (account_record). wmu held. */
static mc_status_t write_record(mc_disk_store_t *s, bucket_t *a, const mc_disk_rec_t *r,
                                const void *value, uint64_t *off_p)
{
    uint8_t *hb = aligned_alloc(MC_DISK_ALIGN, r->hdr_len);
    if (!hb)
        return MC_ERR_NO_MEMORY;
    uint64_t off = a->size, len = r->value_len, vspan = mc_disk_round(len);
    mc_disk_rec_encode(r, a->salt, hb);
    int err = 0;
    if (len) {
        struct iovec iov[2] = {{(void *)value, len}, {zero_page, vspan - len}};
        err = pwritev_all(a->wfd, iov, vspan > len ? 2 : 1, off + r->hdr_len);
        if (!err && s->cfg.sync_each_put && fdatasync(a->wfd) != 0)
            err = errno;
    }
    if (!err) {
        struct iovec iov = {hb, r->hdr_len};
        err = pwritev_all(a->wfd, &iov, 1, off);
    }
    if (!err && s->cfg.sync_each_put && fdatasync(a->wfd) != 0)
        err = errno;
    free(hb);
    if (err) {
        /* nothing after `off` is committed: give the space back, the next record reuses it */
        if (ftruncate(a->wfd, (off_t)off) != 0)
            MC_LOG_WARN("disk: cannot truncate bucket %llu after a failed write: %s",
                        (unsigned long long)a->id, strerror(errno));
        MC_LOG_ERROR("disk: write of %llu bytes to bucket %llu failed: %s",
                     (unsigned long long)len, (unsigned long long)a->id, strerror(err));
        return write_status(err);
    }
    *off_p = off;
    return MC_OK;
}

/* Counts a record of rec bytes written at off in a. mu held. */
static void account_record(mc_disk_store_t *s, bucket_t *a, uint64_t off, uint64_t rec, bool tomb)
{
    a->size = off + rec;
    s->bytes += rec;
    a->nrec++;
    if (tomb)
        a->tombs++;
}

/* The bucket a record of rec bytes is appended to: the active one, sealed first when the record
 * would take it past the bucket limits (NULL then, or when there is none: a new bucket is
 * needed). wmu held. */
static bucket_t *active_for(mc_disk_store_t *s, uint64_t rec)
{
    bucket_t *a = s->active;
    if (a && a->nrec > 0 &&
        (a->nrec >= s->cfg.bucket_keys_limit || a->size + rec > s->cfg.bucket_size_limit)) {
        seal_active(s, a);
        a = NULL;
    }
    return a;
}

/* Reads all of [off, off+len) of fd into buf; 0 or an errno (EIO for a short file). */
static int pread_all(int fd, void *buf, uint64_t len, uint64_t off)
{
    uint64_t done = 0;
    while (done < len) {
        ssize_t g = pread(fd, (uint8_t *)buf + done, (size_t)(len - done), (off_t)(off + done));
        if (g < 0 && errno == EINTR)
            continue;
        if (g <= 0)
            return g < 0 ? errno : EIO;
        done += (uint64_t)g;
    }
    return 0;
}

/* Second chance for the objects of the eviction victim v that were read since they were
 * written (refd): each is re-appended to the active bucket, as many as fit in readmit_pct % of
 * v's bytes. A copy is read back from v and checked against its checksum (a damaged one is left
 * to be evicted), written as a new record, and only then replaces v's entry in the index (with
 * refd clear); the bucket the copies went to is fdatasynced before the caller drops v, so the
 * old record goes only once the new one is on stable storage. Reads that looked v's entry up
 * before the switch hold v and read the old, identical bytes. After a crash in the middle the
 * restart scan finds both records and keeps the newer bucket's. The caller holds a reference on
 * v (inflight) so that it stays allocated. wmu held, mu not held. */
static void readmit(mc_disk_store_t *s, bucket_t *v)
{
    pthread_mutex_lock(&s->mu);
    uint64_t budget = v->size * s->cfg.readmit_pct / 100, used = 0;
    size_t n = 0, cap = 0;
    dent_t **cp = NULL;
    for (dent_t *e = v->objs; e; e = e->bnext) {
        uint64_t rec = e->hlen + mc_disk_round(e->vlen);
        if (!e->refd || used + rec > budget)
            continue;
        if (n == cap) {
            size_t ncap = cap ? 2 * cap : 16;
            dent_t **ncp = realloc(cp, ncap * sizeof(*cp));
            if (!ncp)
                break;
            cp = ncp;
            cap = ncap;
        }
        /* the copy's entry, made now (the old one may go under us once mu is released: a
         * checksum failure of a read); b and off name the source until the switch */
        dent_t *c = dent_new(v, e->key, e->klen, e->hash, e->off, e->hlen, e->vlen, e->csum);
        if (!c)
            break;
        cp[n++] = c;
        used += rec;
    }
    pthread_mutex_unlock(&s->mu);

    void *buf = NULL;
    uint64_t bufcap = 0, moved = 0, moved_bytes = 0;
    bucket_t *last = NULL; /* the bucket the last copy went to (earlier ones were sealed) */
    size_t i = 0;
    for (; i < n; i++) {
        dent_t *c = cp[i];
        uint64_t span = mc_disk_round(c->vlen), rec = c->hlen + span;
        if (span > bufcap) {
            free(buf);
            bufcap = span;
            if (!(buf = aligned_alloc(MC_DISK_ALIGN, bufcap)))
                break;
        }
        int err = span ? pread_all(v->rfd, buf, span, c->off + c->hlen) : 0;
        if (err || mc_hash64(buf, c->vlen) != c->csum) {
            MC_LOG_WARN("disk: object at %llu in bucket %llu not re-appended: %s",
                        (unsigned long long)c->off, (unsigned long long)v->id,
                        err ? strerror(err) : "checksum mismatch");
            free(c);
            cp[i] = NULL;
            continue;
        }
        bucket_t *a = active_for(s, rec);
        if (!a) {
            if (bucket_create(s) != MC_OK)
                break;
            a = s->active;
        }
        mc_disk_rec_t r = {.key_len = c->klen, .hdr_len = c->hlen, .value_len = c->vlen,
                           .value_checksum = c->csum, .seq = s->seq++, .key = c->key};
        uint64_t off;
        if (write_record(s, a, &r, buf, &off) != MC_OK)
            break;
        last = a;
        pthread_mutex_lock(&s->mu);
        account_record(s, a, off, rec, false);
        dent_t **pp = ht_slot(s, c->key, c->klen, c->hash), *e = *pp;
        if (e && e->b == v && e->off == c->off) {
            *pp = e->hnext;
            dent_unlink_bucket(s, e);
            free(e);
            c->b = a;
            c->off = off;
            c->shadows = true;
            dent_insert(s, c);
            moved++;
            moved_bytes += c->vlen;
        } else {
            free(c); /* dropped meanwhile: the copy is dead space (a restart finds it again) */
        }
        cp[i] = NULL;
        pthread_mutex_unlock(&s->mu);
    }
    for (; i < n; i++)
        free(cp[i]); /* not copied (no memory, a failed write): evicted with v */
    free(cp);
    free(buf);
    if (last && last->wfd >= 0 && fdatasync(last->wfd) != 0)
        MC_LOG_ERROR("disk: fdatasync of bucket %llu failed: %s", (unsigned long long)last->id,
                     strerror(errno));
    pthread_mutex_lock(&s->mu);
    s->st.readmitted_objects += moved;
    s->st.readmitted_bytes += moved_bytes;
    pthread_mutex_unlock(&s->mu);
}

/* Takes the victim v off the list: its objects leave the table and v is chained on *evicted
 * for the callback. mu held. */
static void drop_victim(mc_disk_store_t *s, bucket_t *v, bucket_t **evicted)
{
    for (dent_t *e = v->objs; e; e = e->bnext) {
        *ht_slot(s, e->key, e->klen, e->hash) = e->hnext;
        s->nobj--;
        s->live_bytes -= e->vlen;
        s->st.evicted_objects++;
    }
    v->live = 0;
    list_remove(s, v);
    s->st.evicted_buckets++;
    v->enext = *evicted;
    *evicted = v;
}

/* Evicts victims (pick_victim) while over the byte target or the key target; each victim's
 * read objects first get their second chance (readmit, when readmit_pct > 0), except in the
 * buckets appended to since this call began (the copies' buckets): so every call ends, even
 * under readers that keep every object referenced. Evicted buckets are chained on *evicted
 * for the callback (their objects are out of the table). wmu held, mu not held. */
static void evict_until(mc_disk_store_t *s, uint64_t bytes_target, uint64_t keys_target,
                        bucket_t **evicted)
{
    if (s->cfg.policy == MC_DISK_EVICT_NONE)
        return;
    uint64_t fresh = s->active ? s->active->id : s->next_id; /* ids from here: no readmit */
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bucket_t *v = s->bytes > bytes_target || s->nobj > keys_target ? pick_victim(s) : NULL;
        if (v && s->cfg.readmit_pct && v->id < fresh) {
            v->inflight++; /* keeps v allocated while mu is released */
            pthread_mutex_unlock(&s->mu);
            readmit(s, v);
            pthread_mutex_lock(&s->mu);
            v->inflight--;
            if (v->detached) { /* emptied by the copies and deleted as empty meanwhile */
                if (v->inflight == 0 && !v->objs)
                    bucket_destroy(s, v);
                pthread_mutex_unlock(&s->mu);
                continue;
            }
        }
        if (v)
            drop_victim(s, v, evicted);
        pthread_mutex_unlock(&s->mu);
        if (!v)
            return;
    }
}

/* Counts a failed append (put or tombstone): every write error, and the space refusals in
 * disk_full. mu held. */
static void count_write_error(mc_disk_store_t *s, mc_status_t st)
{
    if (st == MC_ERR_NO_AVAILABLE_HANDLE || st == MC_ERR_FILE_WRITE_FAIL)
        s->st.put_errors++;
    if (st == MC_ERR_NO_AVAILABLE_HANDLE)
        s->st.disk_full++;
}

/* Whether need more bytes fit under the capacity with at most keys objects. mu not held. */
static bool fits(mc_disk_store_t *s, uint64_t need, uint64_t keys)
{
    pthread_mutex_lock(&s->mu);
    bool ok = s->bytes + need <= s->cfg.total_size_limit && s->nobj <= keys;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

/* Appends one record (value may be NULL for a tombstone) and, for an object, indexes it.
 * Makes room first (evict_until). wmu held. */
static mc_status_t append_record(mc_disk_store_t *s, const char *skey, uint32_t kl, uint64_t h,
                                 const void *value, size_t len, uint64_t csum, bool tomb,
                                 bucket_t **evicted)
{
    uint32_t hlen = mc_disk_hdr_len(kl);
    uint64_t rec = hlen + mc_disk_round(len), total = s->cfg.total_size_limit;
    uint64_t keys = s->cfg.total_keys_limit - (tomb ? 0 : 1); /* objects before this one */
    bucket_t *a = NULL;
    bool room = false;
    for (int attempt = 0; attempt < 2 && !room; attempt++) {
        a = active_for(s, rec);
        uint64_t need = rec + (a ? 0 : MC_DISK_BUCKET_HDR_SIZE);
        if (need > total)
            return MC_ERR_TOO_LARGE;
        if (!fits(s, need, keys)) {
            evict_until(s, total - need, keys, evicted);
            a = active_for(s, rec); /* second-chance copies may have filled or replaced it */
            need = rec + (a ? 0 : MC_DISK_BUCKET_HDR_SIZE);
        }
        room = need <= total && fits(s, need, keys);
        if (!room && a && a->nrec > 0 && s->cfg.policy != MC_DISK_EVICT_NONE) {
            /* only the bucket being appended to is left to evict: seal it, try once more */
            seal_active(s, a);
            a = NULL;
        } else {
            break;
        }
    }
    if (!room)
        return MC_ERR_NO_AVAILABLE_HANDLE;
    if (!a) {
        mc_status_t st = bucket_create(s);
        if (st != MC_OK)
            return st;
        a = s->active;
    }
    mc_disk_rec_t r = {.flags = tomb ? MC_DISK_REC_TOMBSTONE : 0, .key_len = kl, .hdr_len = hlen,
                       .value_len = len, .value_checksum = csum, .seq = s->seq++, .key = skey};
    uint64_t off;
    mc_status_t st = write_record(s, a, &r, value, &off);
    if (st != MC_OK)
        return st;
    dent_t *e = tomb ? NULL : dent_new(a, skey, kl, h, off, hlen, len, csum);
    pthread_mutex_lock(&s->mu);
    account_record(s, a, off, rec, tomb);
    if (e)
        dent_insert(s, e);
    pthread_mutex_unlock(&s->mu);
    if (!tomb && !e)
        return MC_ERR_NO_MEMORY; /* written but not indexed: found again at the next open */
    return MC_OK;
}

mc_status_t mc_disk_store_put(mc_disk_store_t *s, const char *tenant, const char *key,
                              size_t key_len, const void *value, size_t len, uint64_t checksum)
{
    char skey[MC_DISK_STORAGE_KEY_MAX];
    uint32_t kl = storage_key(tenant, key, key_len, skey);
    if (!s || !kl || (len && !value))
        return !s || (len && !value) ? MC_ERR_INVALID_PARAMS : MC_ERR_INVALID_KEY;
    if (len > MC_DISK_VALUE_MAX || len > s->cfg.total_size_limit)
        return MC_ERR_TOO_LARGE;
    if (mc_hash64(value, len) != checksum)
        return MC_ERR_CHECKSUM;
    uint64_t h = mc_hash64(skey, kl);
    bucket_t *evicted = NULL;
    pthread_mutex_lock(&s->wmu);
    pthread_mutex_lock(&s->mu);
    bool exists = *ht_slot(s, skey, kl, h) != NULL;
    pthread_mutex_unlock(&s->mu);
    mc_status_t st = exists ? MC_ERR_OBJECT_ALREADY_EXISTS
                            : append_record(s, skey, kl, h, value, len, checksum, false, &evicted);
    pthread_mutex_lock(&s->mu);
    count_write_error(s, st);
    bool high = false;
    if (st == MC_OK) {
        s->st.puts++;
        s->st.put_bytes += len;
        high = s->cfg.watermark_eviction &&
               (double)s->bytes > s->cfg.high_watermark * (double)s->cfg.total_size_limit;
    }
    pthread_mutex_unlock(&s->mu);
    if (high)
        evict_until(s, (uint64_t)(s->cfg.low_watermark * (double)s->cfg.total_size_limit),
                    s->cfg.total_keys_limit, &evicted);
    pthread_mutex_unlock(&s->wmu);
    report_evicted(s, evicted);
    return st;
}

mc_status_t mc_disk_store_lookup(mc_disk_store_t *s, const char *tenant, const char *key,
                                 size_t key_len, mc_disk_loc_t *loc)
{
    char skey[MC_DISK_STORAGE_KEY_MAX];
    uint32_t kl = storage_key(tenant, key, key_len, skey);
    if (!s || !kl)
        return !s ? MC_ERR_INVALID_PARAMS : MC_ERR_INVALID_KEY;
    pthread_mutex_lock(&s->mu);
    dent_t *e = *ht_slot(s, skey, kl, mc_hash64(skey, kl));
    if (e && loc) {
        mc_disk_obj_t o;
        obj_of(e, &o);
        *loc = o.loc;
    }
    pthread_mutex_unlock(&s->mu);
    return e ? MC_OK : MC_ERR_OBJECT_NOT_FOUND;
}

mc_status_t mc_disk_store_remove(mc_disk_store_t *s, const char *tenant, const char *key,
                                 size_t key_len)
{
    char skey[MC_DISK_STORAGE_KEY_MAX];
    uint32_t kl = storage_key(tenant, key, key_len, skey);
    if (!s || !kl)
        return !s ? MC_ERR_INVALID_PARAMS : MC_ERR_INVALID_KEY;
    uint64_t h = mc_hash64(skey, kl);
    bucket_t *evicted = NULL;
    pthread_mutex_lock(&s->wmu);
    pthread_mutex_lock(&s->mu);
    dent_t **pp = ht_slot(s, skey, kl, h), *e = *pp;
    bool found = e != NULL, need_tomb = false;
    if (found) {
        *pp = e->hnext;
        uint64_t bid = e->b->id;
        need_tomb = e->shadows; /* an older record must stay hidden */
        dent_unlink_bucket(s, e);
        free(e);
        s->st.removes++;
        drop_empty(s);
        /* otherwise a tombstone only where the record's bucket is still on disk */
        for (bucket_t *x = s->head; x; x = x->next)
            if (x->id == bid)
                need_tomb = true;
    }
    pthread_mutex_unlock(&s->mu);
    mc_status_t st = !found ? MC_ERR_OBJECT_NOT_FOUND
                            : need_tomb ? append_record(s, skey, kl, h, NULL, 0,
                                                        mc_hash64(NULL, 0), true, &evicted)
                                        : MC_OK;
    if (found) {
        pthread_mutex_lock(&s->mu);
        count_write_error(s, st);
        pthread_mutex_unlock(&s->mu);
    }
    pthread_mutex_unlock(&s->wmu);
    report_evicted(s, evicted);
    return st;
}

size_t mc_disk_store_foreach(mc_disk_store_t *s, void (*fn)(const mc_disk_obj_t *obj, void *arg),
                             void *arg)
{
    size_t n = 0;
    pthread_mutex_lock(&s->mu);
    for (bucket_t *b = s->head; b; b = b->next)
        for (dent_t *e = b->objs; e; e = e->bnext) {
            mc_disk_obj_t o;
            obj_of(e, &o);
            fn(&o, arg);
            n++;
        }
    pthread_mutex_unlock(&s->mu);
    return n;
}

void mc_disk_store_stats(mc_disk_store_t *s, mc_disk_stats_t *out)
{
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->bytes_on_disk = s->bytes;
    out->live_bytes = s->live_bytes;
    out->objects = s->nobj;
    out->direct_io = s->direct;
    out->read_piece_bytes = s->chunk;
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------ reads */

static void *bounce_get(mc_disk_store_t *s, size_t need, size_t *cap_p)
{
    pthread_mutex_lock(&s->bmu);
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < s->bcache_n; i++)
        if (s->bcache[i].cap >= need && s->bcache[i].cap <= 2 * need &&
            (best == SIZE_MAX || s->bcache[i].cap < s->bcache[best].cap))
            best = i;
    if (best != SIZE_MAX) {
        void *p = s->bcache[best].p;
        *cap_p = s->bcache[best].cap;
        s->bcache_bytes -= *cap_p;
        s->bcache[best] = s->bcache[--s->bcache_n];
        pthread_mutex_unlock(&s->bmu);
        return p;
    }
    pthread_mutex_unlock(&s->bmu);
    *cap_p = (size_t)mc_disk_round(need);
    return aligned_alloc(MC_DISK_ALIGN, *cap_p);
}

static void bounce_put(mc_disk_store_t *s, void *p, size_t cap)
{
    if (!p)
        return;
    pthread_mutex_lock(&s->bmu);
    if (s->bcache_n < BOUNCE_CACHE && s->bcache_bytes + cap <= BOUNCE_CACHE_BYTES) {
        s->bcache[s->bcache_n].p = p;
        s->bcache[s->bcache_n++].cap = cap;
        s->bcache_bytes += cap;
        p = NULL;
    }
    pthread_mutex_unlock(&s->bmu);
    free(p);
}

/* Takes r; with wait false only if nobody holds it. */
static bool ring_take(ring_t *r, bool wait)
{
    pthread_mutex_lock(&r->mu);
    bool ok = !r->busy || wait;
    while (ok && r->busy)
        pthread_cond_wait(&r->cv, &r->mu);
    if (ok)
        r->busy = true;
    pthread_mutex_unlock(&r->mu);
    return ok;
}

static void ring_give(ring_t *r)
{
    pthread_mutex_lock(&r->mu);
    r->busy = false;
    pthread_cond_signal(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

/* A free ring, else (wait) the next one in turn once it is free, else NULL. */
static ring_t *ring_acquire(mc_disk_store_t *s, bool wait)
{
    uint32_t start = atomic_fetch_add(&s->rr, 1);
    for (uint32_t i = 0; i < s->nrings; i++) {
        ring_t *r = &s->rings[(start + i) % s->nrings];
        if (ring_take(r, false))
            return r;
    }
    ring_t *r = &s->rings[start % s->nrings];
    return wait && ring_take(r, true) ? r : NULL;
}

static int reg_index(mc_disk_store_t *s, const void *p, size_t len)
{
    for (int i = 0; i < (int)MC_DISK_REG_BUFFERS_MAX; i++)
        if (s->reg[i].base && s->reg[i].len && (const char *)p >= (const char *)s->reg[i].base &&
            (const char *)p + len <= (const char *)s->reg[i].base + s->reg[i].len)
            return i;
    return -1;
}

static void lat_record(mc_disk_store_t *s, uint64_t ns)
{
    uint64_t us = ns / 1000;
    int i = 0;
    while (i < MC_DISK_LAT_BUCKETS - 1 && us > mc_disk_lat_bounds_us[i])
        i++;
    s->st.read_lat_us[i]++;
    s->st.read_lat_sum_us += us;
}

/* The chunks of a read of dlen device bytes: chunk-sized from the start, the last of them
 * possibly short, and, when dlen > 2 * TAIL, the final TAIL bytes as a chunk of their own
 * (dlen and chunk are 4 KiB-aligned with O_DIRECT, so every chunk starts aligned). */
static uint64_t chunk_split(uint64_t dlen) { return dlen > 2 * TAIL ? dlen - TAIL : dlen; }

static uint32_t chunk_count(uint64_t dlen, uint64_t chunk)
{
    uint64_t split = chunk_split(dlen);
    return (uint32_t)((split + chunk - 1) / chunk + (split < dlen ? 1 : 0));
}

/* Chunk i of op: device bytes [*at, *at + *len). */
static void chunk_span(const op_t *op, uint32_t i, uint64_t *at, uint64_t *len)
{
    uint64_t split = chunk_split(op->dlen);
    *at = (uint64_t)i * op->chunk < split ? (uint64_t)i * op->chunk : split;
    uint64_t end = *at < split ? *at + op->chunk : op->dlen;
    *len = (end < split || *at >= split ? end : split) - *at;
}

/* The value's bytes up to the end of chunk i of op. */
static uint64_t chunk_end(const op_t *op, uint32_t i)
{
    uint64_t at, len;
    chunk_span(op, i, &at, &len);
    return op->vlen - at < len ? op->vlen : at + len;
}

/* Whether chunk i of op has completed with all of its value bytes. */
static bool chunk_whole(const op_t *op, uint32_t i)
{
    uint64_t at, len;
    chunk_span(op, i, &at, &len);
    uint64_t want = op->vlen - at < len ? op->vlen - at : len;
    return op->ch[i].done && op->ch[i].res >= 0 && (uint64_t)op->ch[i].res >= want;
}

/* Reports a direct read's landed prefix: the chunks complete and whole, in order, from the
 * first not yet hashed; called as completions are reaped, before any hashing, so that the
 * caller may use those bytes (unverified, as any progress) while they are hashed. A read
 * through a store buffer reports in op_hash_step, once a chunk is copied out. No lock held
 * (the op belongs to its batch). */
static void op_report(op_t *op)
{
    mc_disk_read_t *q = op->req;
    if (op->bounce || !q->progress || op->failed)
        return;
    uint32_t landed = op->reported > op->hashed ? op->reported : op->hashed;
    while (landed < op->nchunks && chunk_whole(op, landed))
        landed++;
    if (landed > op->reported) {
        q->progress(q, (size_t)chunk_end(op, landed - 1), false);
        op->reported = landed;
    }
}

/* Whether op has a completed chunk to hash (the next in order). */
static bool op_hashable(const op_t *op)
{
    return op && op->req && !op->finished && op->hashed < op->nchunks &&
           op->ch[op->hashed].done;
}

/* Hashes (and, from a store buffer, copies out and reports) op's next completed chunk, and
 * settles the op once every chunk is in: MC_OK only when all bytes arrived and hash to the
 * committed checksum; a bounced read's last chunk is reported with the verdict. One chunk per
 * call, so that the caller reaps (and reports) the completions that arrive meanwhile. */
static void op_hash_step(op_t *op)
{
    mc_disk_read_t *q = op->req;
    if (op->hashed < op->nchunks && op->ch[op->hashed].done) {
        uint64_t at, len;
        chunk_span(op, op->hashed, &at, &len);
        uint64_t want = op->vlen - at < len ? op->vlen - at : len; /* the value's bytes */
        int res = op->ch[op->hashed].res;
        if (res < 0 || (uint64_t)res < want) {
            if (!op->failed)
                MC_LOG_ERROR("disk: read of %llu bytes at %llu in bucket %llu failed: %s",
                             (unsigned long long)want, (unsigned long long)(op->voff + at),
                             (unsigned long long)op->b->id,
                             res < 0 ? strerror(-res) : "short read");
            op->failed = true;
        } else if (!op->failed) {
            mc_hash_stream_update(&op->hs, (uint8_t *)op->dst + at, want);
            if (op->bounce)
                memcpy((uint8_t *)q->buf + at, (uint8_t *)op->bounce + at, want);
        }
        op->hashed++;
    }
    if (op->bounce && q->progress && op->hashed > op->reported && op->hashed < op->nchunks &&
        !op->failed) {
        q->progress(q, (size_t)chunk_end(op, op->hashed - 1), false);
        op->reported = op->hashed;
    }
    if (op->hashed < op->nchunks)
        return;
    uint64_t h = mc_hash_stream_final(&op->hs);
    op->hs_live = false;
    op->finished = true;
    q->status = op->failed ? MC_ERR_FILE_READ_FAIL : h == op->csum ? MC_OK : MC_ERR_CHECKSUM;
    if (q->progress)
        q->progress(q, q->status == MC_OK ? op->vlen : 0, true);
}

/* Handles one completion (ring locked): a chunk of a live op is marked (reporting it is the
 * caller's, reap_all, once the completion queue is drained; hashing too, op_hash_step); the
 * last completion of an abandoned op puts it on *late. */
static void reap_cqe(ring_t *r, struct io_uring_cqe *cqe, op_t **late)
{
    uint64_t ud = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    io_uring_cqe_seen(&r->uring, cqe);
    r->inflight--;
    if (ud == CANCEL_TAG)
        return;
    chunk_t *c = (chunk_t *)(uintptr_t)ud;
    op_t *op = c->op;
    c->res = res;
    c->done = true;
    op->ndone++;
    if (!op->req) {
        if (op->ndone == op->nsubmitted) {
            op->lnext = *late;
            *late = op;
        }
    }
}

/* Reaps every completion in the queue, then reports each live op's landed prefix: pieces
 * reaped together are reported together, before any of them is hashed. */
static void reap_all(ring_t *r, op_t **ops, size_t n, op_t **late)
{
    struct io_uring_cqe *cqe;
    while (io_uring_peek_cqe(&r->uring, &cqe) == 0)
        reap_cqe(r, cqe, late);
    for (size_t i = 0; i < n; i++)
        if (ops[i] && ops[i]->req && !ops[i]->finished)
            op_report(ops[i]);
}

/* Drops the entry (b, off) from the index after a checksum failure, if it is still there. */
static void drop_bad(mc_disk_store_t *s, bucket_t *b, uint64_t off)
{
    if (b->detached)
        return; /* evicted meanwhile: its objects are out of the index already */
    for (dent_t *e = b->objs; e; e = e->bnext)
        if (e->off == off) {
            MC_LOG_ERROR("disk: checksum mismatch in bucket %llu at %llu: object dropped",
                         (unsigned long long)b->id, (unsigned long long)off);
            *ht_slot(s, e->key, e->klen, e->hash) = e->hnext;
            dent_unlink_bucket(s, e);
            free(e);
            drop_empty(s);
            return;
        }
}

/* Releases an op's bucket reference (mu held). */
static void op_unref(mc_disk_store_t *s, op_t *op)
{
    bucket_t *b = op->b;
    if (--b->inflight == 0 && b->detached && !b->objs)
        bucket_destroy(s, b);
}

/* Frees an op that is off its ring (its bucket reference already dropped). */
static void op_free(mc_disk_store_t *s, op_t *op)
{
    if (op->hs_live)
        (void)mc_hash_stream_final(&op->hs);
    bounce_put(s, op->bounce, op->bounce_cap);
    free(op);
}

static void release_late(mc_disk_store_t *s, op_t *late)
{
    if (!late)
        return;
    pthread_mutex_lock(&s->mu);
    for (op_t *op = late; op; op = op->lnext) {
        s->st.late_completions++;
        op_unref(s, op);
    }
    pthread_mutex_unlock(&s->mu);
    while (late) {
        op_t *n = late->lnext;
        op_free(s, late);
        late = n;
    }
}

/* Looks up one request and makes its op (taking a bucket reference), or fills its status.
 * mu held. */
static op_t *op_make(mc_disk_store_t *s, mc_disk_read_t *q, uint64_t now)
{
    char skey[MC_DISK_STORAGE_KEY_MAX];
    uint32_t kl = storage_key(q->tenant, q->key, q->key_len, skey);
    q->len = 0;
    q->status = MC_ERR_INVALID_KEY;
    if (!kl)
        return NULL;
    dent_t *e = *ht_slot(s, skey, kl, mc_hash64(skey, kl));
    q->status = MC_ERR_OBJECT_NOT_FOUND;
    if (!e)
        return NULL;
    q->len = e->vlen;
    q->status = MC_ERR_BUFFER_OVERFLOW;
    if (q->cap < e->vlen || (e->vlen && !q->buf))
        return NULL;
    uint64_t dlen = s->direct ? mc_disk_round(e->vlen) : e->vlen;
    uint32_t nch = chunk_count(dlen, s->chunk);
    op_t *op = calloc(1, sizeof(*op) + nch * sizeof(chunk_t));
    q->status = MC_ERR_NO_MEMORY;
    if (!op)
        return NULL;
    if (mc_hash_stream_init(&op->hs) != 0) {
        free(op);
        return NULL;
    }
    op->hs_live = true;
    op->req = q;
    op->b = e->b;
    op->off = e->off;
    op->voff = e->off + e->hlen;
    op->vlen = e->vlen;
    op->csum = e->csum;
    op->dlen = dlen;
    op->chunk = s->chunk;
    op->nchunks = nch;
    for (uint32_t i = 0; i < nch; i++)
        op->ch[i].op = op;
    op->t0 = now;
    e->b->inflight++;
    e->b->last_access_ns = now;
    e->refd = true;
    q->status = MC_ERR_TIMEOUT; /* until settled */
    return op;
}

/* Queues the next chunk of op on the ring; false when the ring has no room. */
static bool op_submit_chunk(ring_t *r, op_t *op, int ri)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
    if (!sqe)
        return false;
    uint32_t i = op->nsubmitted;
    uint64_t at, len;
    chunk_span(op, i, &at, &len);
    uint8_t *p = (uint8_t *)op->dst + at;
    if (ri >= 0)
        io_uring_prep_read_fixed(sqe, op->b->rfd, p, (unsigned)len, op->voff + at, ri);
    else
        io_uring_prep_read(sqe, op->b->rfd, p, (unsigned)len, op->voff + at);
    io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)&op->ch[i]);
    op->ch[i].submitted = true;
    op->nsubmitted++;
    r->inflight++;
    return true;
}

/* A read batch (mc_disk_store_read_batch, or _start then _finish): its requests, their ops,
 * and the ring it holds from its first submission to its end. */
struct mc_disk_batch {
    mc_disk_store_t *s;
    mc_disk_read_t *reqs;
    size_t n;
    uint64_t deadline_ns, t0;
    ring_t *r;
    size_t pending; /* ops not settled */
    size_t next;    /* the first op with chunks left to submit */
    bool first;     /* nothing submitted yet */
    op_t *late;     /* abandoned ops reaped meanwhile: released at the end */
    int *ris;       /* per op: its registered buffer, or -1 */
    op_t *ops[];
};

/* Steps 1 and 2 of a batch on ring r (held): looks every key up (taking a reference on its
 * bucket) and picks each read's destination; then reaps what abandoned reads left on r and
 * submits the first reads. NULL when out of memory (r is given back). */
static mc_disk_batch_t *batch_begin(mc_disk_store_t *s, ring_t *r, mc_disk_read_t *reqs,
                                    size_t n, uint64_t deadline_ns)
{
    mc_disk_batch_t *b = calloc(1, sizeof(*b) + n * sizeof(op_t *));
    int *ris = calloc(n, sizeof(*ris));
    if (!b || !ris) {
        free(b);
        free(ris);
        ring_give(r);
        return NULL;
    }
    *b = (mc_disk_batch_t){.s = s, .reqs = reqs, .n = n, .deadline_ns = deadline_ns,
                           .t0 = mc_now_ns(), .r = r, .first = true, .ris = ris};
    /* 1. look up every key, take a reference on its bucket */
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < n; i++)
        b->ops[i] = op_make(s, &reqs[i], b->t0);
    pthread_mutex_unlock(&s->mu);
    /* 2. destinations: the caller's buffer only when nothing can outlive the batch */
    for (size_t i = 0; i < n; i++) {
        op_t *op = b->ops[i];
        ris[i] = -1;
        if (!op || op->nchunks == 0) /* no bytes: settled in batch_run */
            continue;
        bool direct_ok = (deadline_ns == 0 || op->req->late_ok) && op->req->cap >= op->dlen &&
                         (!s->direct || ((uintptr_t)op->req->buf % MC_DISK_ALIGN) == 0);
        if (direct_ok) {
            op->dst = op->req->buf;
            pthread_mutex_lock(&s->mu);
            ris[i] = reg_index(s, op->dst, op->dlen);
            pthread_mutex_unlock(&s->mu);
        } else {
            op->bounce = bounce_get(s, op->dlen, &op->bounce_cap);
            op->dst = op->bounce;
            if (!op->bounce) {
                op->req->status = MC_ERR_NO_MEMORY;
                op->finished = true;
                continue;
            }
        }
        b->pending++;
    }
    reap_all(r, NULL, 0, &b->late);
    return b;
}

/* Submits the chunks of b's ops in order, as many as the ring's io_depth allows, at most max.
 * The very first goes to the device on its own, so that the device starts on it while the
 * others are prepared (one 1 MiB O_DIRECT submission is tens of microseconds). */
static void batch_submit(mc_disk_batch_t *b, size_t max)
{
    ring_t *r = b->r;
    bool queued = false;
    for (size_t k = 0; k < max && b->next < b->n && r->inflight < b->s->cfg.io_depth;) {
        op_t *op = b->ops[b->next];
        if (!op || op->finished || op->nsubmitted == op->nchunks) {
            b->next++;
            continue;
        }
        if (!op_submit_chunk(r, op, b->ris[b->next]))
            break;
        k++;
        if (b->first) { /* alone, at once */
            b->first = false;
            io_uring_submit(&r->uring);
        } else {
            queued = true;
        }
    }
    if (queued)
        io_uring_submit(&r->uring);
}

/* Step 3: submits the rest (as the ring allows) and reaps, until every op has settled or the
 * deadline has passed; each op is cut into chunks so that hashing overlaps the reads
 * still in flight. Completions are reaped (and landed prefixes reported) before each chunk is
 * hashed, one chunk at a time, so that a report never waits for the hashing of an earlier
 * chunk; the deadline is looked at only when nothing landed is left to hash. Ops still in
 * flight at the deadline are abandoned to the ring. */
static void batch_run(mc_disk_batch_t *b)
{
    ring_t *r = b->r;
    op_t **ops = b->ops;
    size_t n = b->n;
    for (size_t i = 0; i < n; i++)
        if (ops[i] && ops[i]->nchunks == 0)
            op_hash_step(ops[i]); /* no bytes: only the checksum of nothing to check */
    struct io_uring_cqe *cqe;
    bool expired = false;
    while (b->pending) {
        batch_submit(b, SIZE_MAX);
        op_t *h = NULL; /* the first op, in request order, with a landed chunk to hash */
        for (size_t k = 0; k < n && !h; k++)
            h = op_hashable(ops[k]) ? ops[k] : NULL;
        if (h) {
            op_hash_step(h);
            if (h->finished)
                b->pending--;
            reap_all(r, ops, n, &b->late);
            continue;
        }
        int rc;
        if (b->deadline_ns) {
            uint64_t t = mc_now_ns();
            if (t >= b->deadline_ns) {
                expired = true;
                break;
            }
            uint64_t left = b->deadline_ns - t;
            struct __kernel_timespec ts = {.tv_sec = (long long)(left / 1000000000ull),
                                           .tv_nsec = (long long)(left % 1000000000ull)};
            rc = io_uring_wait_cqe_timeout(&r->uring, &cqe, &ts);
        } else {
            rc = io_uring_wait_cqe(&r->uring, &cqe);
        }
        if (rc == -ETIME) {
            expired = true;
            break;
        }
        if (rc == -EINTR)
            continue;
        if (rc < 0) {
            MC_LOG_ERROR("disk: io_uring wait failed: %s", strerror(-rc));
            expired = true; /* abandon what is in flight: reaped later */
            break;
        }
        reap_all(r, ops, n, &b->late); /* the completion waited for included */
    }
    if (!expired)
        return;
    /* abandon ops with chunks in flight: they stay with the ring (with their store buffers
     * and bucket references) until their last completion arrives; cancels are asked for */
    bool cancels = false;
    for (size_t i = 0; i < n; i++) {
        op_t *op = ops[i];
        if (!op || op->finished || op->ndone == op->nsubmitted)
            continue;
        op->req = NULL;
        ops[i] = NULL; /* owned by the ring now */
        for (uint32_t c = 0; c < op->nsubmitted; c++) {
            if (op->ch[c].done || r->inflight >= 2 * b->s->cfg.io_depth)
                continue;
            struct io_uring_sqe *sqe = io_uring_get_sqe(&r->uring);
            if (!sqe)
                break;
            io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)&op->ch[c], 0);
            io_uring_sqe_set_data64(sqe, CANCEL_TAG);
            r->inflight++;
            cancels = true;
        }
    }
    if (cancels)
        io_uring_submit(&r->uring);
}

/* Step 4: gives the ring back, counts, drops what failed its checksum, releases references,
 * frees b. */
static void batch_end(mc_disk_batch_t *b)
{
    mc_disk_store_t *s = b->s;
    ring_give(b->r);
    uint64_t end = mc_now_ns();
    pthread_mutex_lock(&s->mu);
    for (size_t i = 0; i < b->n; i++) {
        op_t *op = b->ops[i];
        mc_disk_read_t *q = &b->reqs[i];
        s->st.reads++;
        if (q->status == MC_OK) {
            s->st.read_bytes += q->len;
            lat_record(s, end - b->t0);
        } else if (q->status == MC_ERR_TIMEOUT) {
            s->st.read_timeouts++;
        } else if (q->status == MC_ERR_CHECKSUM) {
            s->st.checksum_failures++;
            s->st.read_errors++;
        } else if (q->status != MC_ERR_OBJECT_NOT_FOUND && q->status != MC_ERR_BUFFER_OVERFLOW &&
                   q->status != MC_ERR_INVALID_KEY) {
            s->st.read_errors++;
        }
        if (!op)
            continue;
        if (q->status == MC_ERR_CHECKSUM)
            drop_bad(s, op->b, op->off);
        op_unref(s, op);
    }
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < b->n; i++)
        if (b->ops[i])
            op_free(s, b->ops[i]);
    release_late(s, b->late);
    free(b->ris);
    free(b);
}

mc_status_t mc_disk_store_read_batch(mc_disk_store_t *s, mc_disk_read_t *reqs, size_t n,
                                     uint64_t deadline_ns)
{
    if (!s || (n && !reqs))
        return MC_ERR_INVALID_PARAMS;
    if (n == 0)
        return MC_OK;
    mc_disk_batch_t *b = batch_begin(s, ring_acquire(s, true), reqs, n, deadline_ns);
    if (!b)
        return MC_ERR_NO_MEMORY;
    return mc_disk_store_read_finish(b);
}

mc_status_t mc_disk_store_read_start(mc_disk_store_t *s, mc_disk_read_t *reqs, size_t n,
                                     uint64_t deadline_ns, mc_disk_batch_t **batch_p)
{
    if (!batch_p)
        return MC_ERR_INVALID_PARAMS;
    *batch_p = NULL;
    if (!s || !n || !reqs)
        return MC_ERR_INVALID_PARAMS;
    ring_t *r = ring_acquire(s, false);
    if (!r)
        return MC_ERR_BUSY;
    mc_disk_batch_t *b = batch_begin(s, r, reqs, n, deadline_ns);
    if (!b)
        return MC_ERR_NO_MEMORY;
    batch_submit(b, START_CHUNKS);
    *batch_p = b;
    return MC_OK;
}

mc_status_t mc_disk_store_read_finish(mc_disk_batch_t *b)
{
    if (!b)
        return MC_ERR_INVALID_PARAMS;
    batch_run(b);
    batch_end(b);
    return MC_OK;
}

mc_status_t mc_disk_store_register_buffer(mc_disk_store_t *s, void *base, size_t len)
{
    if (!s || !base || !len || ((uintptr_t)base % MC_DISK_ALIGN) || len > (1ull << 30))
        return MC_ERR_INVALID_PARAMS;
    pthread_mutex_lock(&s->mu);
    int slot = -1;
    for (int i = 0; i < (int)MC_DISK_REG_BUFFERS_MAX && slot < 0; i++)
        if (!s->reg[i].base)
            slot = i;
    if (slot >= 0)
        s->reg[slot].base = (void *)1; /* reserved while the rings are updated */
    pthread_mutex_unlock(&s->mu);
    if (slot < 0)
        return MC_ERR_NO_AVAILABLE_HANDLE;
    struct iovec iov = {base, len};
    int rc = 0;
    uint32_t done = 0;
    for (; done < s->nrings && rc >= 0; done++) {
        ring_take(&s->rings[done], true);
        rc = io_uring_register_buffers_update_tag(&s->rings[done].uring, (unsigned)slot, &iov,
                                                  NULL, 1);
        ring_give(&s->rings[done]);
    }
    if (rc < 0) {
        MC_LOG_ERROR("disk: cannot register a buffer of %zu bytes with io_uring: %s", len,
                     strerror(-rc));
        struct iovec none = {NULL, 0};
        for (uint32_t i = 0; i + 1 < done; i++) {
            ring_take(&s->rings[i], true);
            io_uring_register_buffers_update_tag(&s->rings[i].uring, (unsigned)slot, &none, NULL, 1);
            ring_give(&s->rings[i]);
        }
    }
    pthread_mutex_lock(&s->mu);
    s->reg[slot].base = rc < 0 ? NULL : base;
    s->reg[slot].len = rc < 0 ? 0 : len;
    pthread_mutex_unlock(&s->mu);
    return rc < 0 ? MC_ERR_IO : MC_OK;
}

mc_status_t mc_disk_store_unregister_buffer(mc_disk_store_t *s, void *base)
{
    if (!s || !base)
        return MC_ERR_INVALID_PARAMS;
    pthread_mutex_lock(&s->mu);
    int slot = -1;
    for (int i = 0; i < (int)MC_DISK_REG_BUFFERS_MAX; i++)
        if (s->reg[i].base == base)
            slot = i;
    if (slot >= 0)
        s->reg[slot].len = 0; /* no new read uses it; reads in flight hold the kernel's ref */
    pthread_mutex_unlock(&s->mu);
    if (slot < 0)
        return MC_ERR_INVALID_PARAMS;
    struct iovec none = {NULL, 0};
    for (uint32_t i = 0; i < s->nrings; i++) {
        ring_take(&s->rings[i], true);
        io_uring_register_buffers_update_tag(&s->rings[i].uring, (unsigned)slot, &none, NULL, 1);
        ring_give(&s->rings[i]);
    }
    pthread_mutex_lock(&s->mu);
    s->reg[slot].base = NULL;
    pthread_mutex_unlock(&s->mu);
    return MC_OK;
}

/* ------------------------------------------------------------------ open, recovery, close */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Applies one committed record found by the scan. mu not needed (open is single-threaded). */
static mc_status_t recover_record(mc_disk_store_t *s, bucket_t *b, const mc_disk_rec_t *r,
                                  uint64_t off)
{
    uint64_t h = mc_hash64(r->key, r->key_len);
    dent_t **pp = ht_slot(s, r->key, r->key_len, h), *old = *pp;
    bool shadows = old != NULL;
    if (old) { /* a newer record of the key: the older one is superseded */
        *pp = old->hnext;
        dent_unlink_bucket(s, old);
        free(old);
        s->st.recovered_objects--;
    }
    if (r->flags & MC_DISK_REC_TOMBSTONE) {
        b->tombs++;
        return MC_OK;
    }
    dent_t *e = dent_new(b, r->key, r->key_len, h, off, r->hdr_len, r->value_len,
                         r->value_checksum);
    if (!e)
        return MC_ERR_NO_MEMORY;
    e->shadows = shadows;
    dent_insert(s, e);
    s->st.recovered_objects++;
    return MC_OK;
}

/* Scans one bucket file: its committed records go into the index; a tail that is not a
 * committed record (a write cut short) is truncated away; a bad record followed by good ones
 * is skipped (scanning on at 4 KiB steps) and counted. */
static mc_status_t recover_bucket(mc_disk_store_t *s, uint64_t id)
{
    char name[32];
    bucket_name(id, name, sizeof(name));
    int fd = openat(s->dirfd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        MC_LOG_ERROR("disk: cannot open %s/%s: %s", s->dir, name, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    struct stat stt;
    uint8_t buf[2 * MC_DISK_ALIGN + MC_DISK_ALIGN]; /* >= the longest header block */
    mc_disk_bucket_hdr_t bh;
    ssize_t got = fstat(fd, &stt) == 0 ? pread(fd, buf, MC_DISK_BUCKET_HDR_SIZE, 0) : -1;
    if (got < (ssize_t)MC_DISK_BUCKET_HDR_SIZE ||
        mc_disk_bucket_hdr_parse(buf, (size_t)got, &bh) != MC_OK || bh.bucket_id != id) {
        close(fd);
        if (got >= 0 && got < (ssize_t)MC_DISK_BUCKET_HDR_SIZE) {
            /* created but never given its header: nothing in it was committed */
            MC_LOG_WARN("disk: deleting bucket %s/%s without a header", s->dir, name);
            unlinkat(s->dirfd, name, 0);
            s->st.recovered_torn++;
            return MC_OK;
        }
        MC_LOG_ERROR("disk: bucket %s/%s has a bad header; ignored (left on disk)", s->dir, name);
        s->st.recovered_corrupt++;
        return MC_OK;
    }
    bucket_t *b = calloc(1, sizeof(*b));
    if (!b) {
        close(fd);
        return MC_ERR_NO_MEMORY;
    }
    b->id = id;
    b->salt = bh.salt;
    b->wfd = -1;
    b->last_access_ns = mc_now_ns();
    uint64_t fsize = (uint64_t)stt.st_size, off = MC_DISK_BUCKET_HDR_SIZE, good_end = off;
    bool gap = false, io_error = false;
    mc_status_t st = MC_OK;
    while (off + MC_DISK_REC_HDR_SIZE <= fsize && st == MC_OK) {
        /* one 4 KiB block holds the header of a key up to 4032 bytes; longer keys read more */
        size_t want = (size_t)(fsize - off < MC_DISK_ALIGN ? fsize - off : MC_DISK_ALIGN);
        size_t need = 0;
        mc_disk_rec_t r;
        got = pread(fd, buf, want, (off_t)off);
        mc_status_t pst = got < 0 ? MC_ERR_FILE_READ_FAIL
                                  : mc_disk_rec_parse(buf, (size_t)got, b->salt, &r, &need);
        if (pst == MC_ERR_BUFFER_OVERFLOW && need <= sizeof(buf) && off + need <= fsize) {
            got = pread(fd, buf, need, (off_t)off);
            pst = got < 0 ? MC_ERR_FILE_READ_FAIL
                          : mc_disk_rec_parse(buf, (size_t)got, b->salt, &r, NULL);
        }
        if (got < 0) {
            MC_LOG_ERROR("disk: read of %s/%s failed: %s; the rest of the file is ignored "
                         "(left as it is)",
                         s->dir, name, strerror(errno));
            io_error = true;
            break;
        }
        if (pst == MC_OK &&
            off + r.hdr_len + mc_disk_round(r.value_len) <= fsize) {
            if (gap)
                s->st.recovered_corrupt++;
            gap = false;
            st = recover_record(s, b, &r, off);
            b->nrec++;
            if (r.seq >= s->seq)
                s->seq = r.seq + 1;
            off += r.hdr_len + mc_disk_round(r.value_len);
            good_end = off;
        } else {
            gap = true;
            off += MC_DISK_ALIGN;
        }
    }
    if (st != MC_OK) {
        close(fd);
        free(b);
        return st;
    }
    if (io_error) {
        good_end = fsize; /* keep every byte: the space stays counted */
        s->st.recovered_corrupt++;
    } else if (gap || good_end < fsize) {
        /* the tail is not a committed record: a write that a crash cut short */
        if (ftruncate(fd, (off_t)good_end) != 0)
            MC_LOG_WARN("disk: cannot truncate %s/%s: %s", s->dir, name, strerror(errno));
        s->st.recovered_torn++;
    }
    close(fd);
    b->size = good_end;
    b->rfd = open_read_fd(s, name);
    if (b->rfd < 0) {
        MC_LOG_ERROR("disk: cannot open %s/%s: %s", s->dir, name, strerror(errno));
        free(b);
        return MC_ERR_FILE_OPEN_FAIL;
    }
    list_append(s, b);
    return MC_OK;
}

static mc_status_t recover(mc_disk_store_t *s)
{
    int dfd = dup(s->dirfd);
    DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
    if (!d) {
        if (dfd >= 0)
            close(dfd);
        return MC_ERR_FILE_OPEN_FAIL;
    }
    uint64_t *ids = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        char *end;
        unsigned long long id = strtoull(de->d_name, &end, 10);
        if (end == de->d_name || de->d_name[0] < '0' || de->d_name[0] > '9' ||
            strcmp(end, ".bucket") != 0)
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            uint64_t *ni = realloc(ids, cap * sizeof(*ids));
            if (!ni) {
                free(ids);
                closedir(d);
                return MC_ERR_NO_MEMORY;
            }
            ids = ni;
        }
        ids[n++] = id;
    }
    closedir(d);
    if (n)
        qsort(ids, n, sizeof(*ids), cmp_u64);
    mc_status_t st = MC_OK;
    for (size_t i = 0; i < n && st == MC_OK; i++) {
        st = recover_bucket(s, ids[i]);
        if (ids[i] >= s->next_id)
            s->next_id = ids[i] + 1;
    }
    free(ids);
    drop_empty(s);
    return st;
}

uint64_t mc_disk_piece_bytes(uint64_t max_segments, uint64_t max_sectors_kb)
{
    uint64_t p = CHUNK_MAX;
    if (max_segments && max_segments < p / MC_DISK_ALIGN)
        p = max_segments * MC_DISK_ALIGN;
    if (max_sectors_kb && max_sectors_kb < p / 1024)
        p = max_sectors_kb * 1024;
    p -= p % MC_DISK_ALIGN;
    return p < CHUNK_MIN ? CHUNK_MIN : p;
}

/* A number in a sysfs file, 0 when unreadable. */
static uint64_t sysfs_u64(const char *path)
{
    FILE *f = fopen(path, "re");
    unsigned long long v = 0;
    if (f) {
        if (fscanf(f, "%llu", &v) != 1)
            v = 0;
        fclose(f);
    }
    return v;
}

/* The piece size for the block device under directory dirfd: its queue limits in sysfs (a
 * partition's are its disk's), CHUNK_MAX when there are none (tmpfs, overlay, no sysfs). */
static uint64_t dir_piece_bytes(int dirfd)
{
    struct stat st;
    if (fstat(dirfd, &st) != 0)
        return CHUNK_MAX;
    static const char *const queue[] = {"queue", "../queue"};
    for (size_t i = 0; i < 2; i++) {
        char a[128], b[128];
        snprintf(a, sizeof(a), "/sys/dev/block/%u:%u/%s/max_segments", major(st.st_dev),
                 minor(st.st_dev), queue[i]);
        snprintf(b, sizeof(b), "/sys/dev/block/%u:%u/%s/max_sectors_kb", major(st.st_dev),
                 minor(st.st_dev), queue[i]);
        uint64_t segs = sysfs_u64(a), kb = sysfs_u64(b);
        if (segs || kb)
            return mc_disk_piece_bytes(segs, kb);
    }
    return CHUNK_MAX;
}

mc_status_t mc_disk_store_open(const char *dir, const mc_disk_config_t *cfg,
                               mc_disk_store_t **store_p)
{
    char err[256];
    if (!dir || !dir[0] || !store_p)
        return MC_ERR_INVALID_PARAMS;
    mc_disk_config_t def;
    if (!cfg) {
        mc_disk_config_default(&def);
        cfg = &def;
    }
    if (mc_disk_config_check(cfg, err, sizeof(err)) != MC_OK) {
        MC_LOG_ERROR("disk: bad config: %s", err);
        return MC_ERR_INVALID_PARAMS;
    }
    *store_p = NULL;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        MC_LOG_ERROR("disk: cannot create %s: %s", dir, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    mc_disk_store_t *s = calloc(1, sizeof(*s));
    if (!s)
        return MC_ERR_NO_MEMORY;
    s->cfg = *cfg;
    s->dirfd = s->lockfd = -1;
    s->next_id = 1;
    s->ht_cap = 1024;
    s->ht = calloc(s->ht_cap, sizeof(*s->ht));
    s->dir = strdup(dir);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->wmu, NULL);
    pthread_mutex_init(&s->bmu, NULL);
    mc_status_t st = s->ht && s->dir ? MC_OK : MC_ERR_NO_MEMORY;
    if (st == MC_OK) {
        s->dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        s->lockfd = s->dirfd < 0 ? -1 : openat(s->dirfd, "LOCK", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
        if (s->lockfd < 0) {
            MC_LOG_ERROR("disk: cannot open %s: %s", dir, strerror(errno));
            st = MC_ERR_FILE_OPEN_FAIL;
        } else if (flock(s->lockfd, LOCK_EX | LOCK_NB) != 0) {
            MC_LOG_ERROR("disk: %s is in use by another store", dir);
            st = MC_ERR_BUSY;
        }
    }
    if (st == MC_OK) {
        /* O_DIRECT where the file system takes it */
        int fd = openat(s->dirfd, "LOCK", O_RDONLY | O_DIRECT | O_CLOEXEC);
        s->direct = fd >= 0;
        if (fd >= 0)
            close(fd);
        else
            MC_LOG_WARN("disk: %s does not take O_DIRECT (%s): reads go through the page cache",
                        dir, strerror(errno));
        s->chunk = dir_piece_bytes(s->dirfd);
    }
    if (st == MC_OK) {
        s->rings = calloc(cfg->rings, sizeof(*s->rings));
        if (!s->rings)
            st = MC_ERR_NO_MEMORY;
        for (uint32_t i = 0; st == MC_OK && i < cfg->rings; i++) {
            struct io_uring_params p = {.flags = IORING_SETUP_CQSIZE, .cq_entries = 4 * cfg->io_depth};
            int rc = io_uring_queue_init_params(cfg->io_depth, &s->rings[i].uring, &p);
            if (rc == 0) {
                rc = io_uring_register_buffers_sparse(&s->rings[i].uring, MC_DISK_REG_BUFFERS_MAX);
                if (rc != 0)
                    io_uring_queue_exit(&s->rings[i].uring);
            }
            if (rc != 0) {
                MC_LOG_ERROR("disk: io_uring setup failed: %s", strerror(-rc));
                st = MC_ERR_NOT_SUPPORTED;
                break;
            }
            pthread_mutex_init(&s->rings[i].mu, NULL);
            pthread_cond_init(&s->rings[i].cv, NULL);
            s->nrings++;
        }
    }
    if (st == MC_OK)
        st = recover(s);
    if (st != MC_OK) {
        mc_disk_store_close(s);
        return st;
    }
    MC_LOG_INFO("disk: %s open: %zu objects in %llu buckets (%llu bytes), %llu corrupt records "
                "skipped, %llu torn tails cut; reads in pieces of %llu KiB",
                dir, s->nobj, (unsigned long long)s->st.buckets, (unsigned long long)s->bytes,
                (unsigned long long)s->st.recovered_corrupt,
                (unsigned long long)s->st.recovered_torn, (unsigned long long)(s->chunk >> 10));
    *store_p = s;
    return MC_OK;
}

void mc_disk_store_close(mc_disk_store_t *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->wmu);
    seal_active(s, s->active);
    pthread_mutex_unlock(&s->wmu);
    /* reads abandoned at their deadline: wait for their completions */
    for (uint32_t i = 0; i < s->nrings; i++) {
        ring_t *r = &s->rings[i];
        op_t *late = NULL;
        ring_take(r, true); /* a started batch is finished first (the caller's contract) */
        while (r->inflight) {
            struct io_uring_cqe *cqe;
            if (io_uring_wait_cqe(&r->uring, &cqe) != 0)
                break;
            reap_cqe(r, cqe, &late);
        }
        ring_give(r);
        release_late(s, late);
        io_uring_queue_exit(&r->uring);
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
    }
    for (bucket_t *b = s->head, *n; b; b = n) {
        n = b->next;
        for (dent_t *e = b->objs, *en; e; e = en) {
            en = e->bnext;
            free(e);
        }
        if (b->rfd >= 0)
            close(b->rfd);
        if (b->wfd >= 0)
            close(b->wfd);
        free(b);
    }
    for (size_t i = 0; i < s->bcache_n; i++)
        free(s->bcache[i].p);
    if (s->lockfd >= 0)
        close(s->lockfd); /* releases the flock */
    if (s->dirfd >= 0)
        close(s->dirfd);
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->wmu);
    pthread_mutex_destroy(&s->bmu);
    free(s->rings);
    free(s->ht);
    free(s->dir);
    free(s);
}
