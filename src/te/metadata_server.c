/* Embeddable HTTP metadata server: libmicrohttpd (internal thread pool) in front of a chained
 * hash table (string -> bytes) under a rwlock, with an optional append-only, checksummed,
 * self-compacting log for persistence. Wire routes and guarantees: metadata_server.h.
 *
 * Log file format (all integers little-endian):
 *   file header   8 bytes  "MCMETAL1"
 *   record       20 bytes  u32 op (1 = PUT, 2 = DEL) | u32 key_len | u32 val_len |
 *                          u64 checksum: h = XXH3(first 12 header bytes),
 *                              h = XXH3_seed(key, h), checksum = XXH3_seed(value, h)
 *                then key_len bytes of key, val_len bytes of value (DEL: val_len = 0)
 * Replay stops at the first record that is short, out of bounds or fails its checksum; the
 * file is truncated there (warning) and appends continue from that point.
 *
 * Durability: a PUT/DELETE is appended with pwrite() and fdatasync()'ed under the table's write
 * lock before the 200 reply. Metadata writes are rare (segment registration), so the simple
 * per-write sync is chosen over group commit; readers wait for at most one sync.
 *
 * Lock order: the table rwlock is the only lock; the log is touched only under its write lock.
 */
#include "te/metadata_server.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/http_auth_mhd.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "te/metadata.h"

#include "common/bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define LOG_MAGIC "MCMETAL1"
#define LOG_MAGIC_LEN 8
#define REC_HDR 20
#define OP_PUT 1u
#define OP_DEL 2u
#define COMPACT_MIN_BYTES (64u << 10) /* never compact a log smaller than this */
/* Bytes of request bodies buffered at once across all connections; beyond it PUTs get 503
 * (so 1024 connections each uploading 4 MiB cannot take 4 GiB). */
#define UPLOAD_BUDGET (64u << 20)
/* Connection bounds (a flood of idle connections from one address cannot starve the others):
 * at most CONN_MAX at once, PER_IP_MAX from one address, closed after IDLE_S idle seconds. */
#define CONN_MAX 1024u
#define PER_IP_MAX 64u
#define IDLE_S 10u

typedef struct entry {
    struct entry *next;
    uint64_t hash;
    char *key;   /* NUL-terminated, owned */
    size_t klen;
    char *val;   /* val_len bytes + NUL, owned */
    size_t vlen;
} entry_t;

struct mc_meta_server {
    struct MHD_Daemon *mhd;
    uint16_t port;
    pthread_rwlock_t lock;
    entry_t **buckets;
    size_t nbuckets, count;
    /* persistence (log_fd < 0: memory only) */
    int log_fd;
    char *log_path;
    uint64_t log_bytes;  /* current file size */
    uint64_t live_bytes; /* size a compacted log would have */
    atomic_size_t upload_bytes; /* request body capacity held by all connections */
    mc_auth_t *owned_auth;      /* loaded from opts.auth_token_file */
    mc_http_auth_server_t *http_auth; /* checks every /metadata request (open without a ring) */
};

/* ---------------------------------------------------------------- table */

static entry_t **tbl_slot(mc_meta_server_t *s, const char *key, size_t klen, uint64_t h)
{
    entry_t **pp = &s->buckets[h & (s->nbuckets - 1)];
    while (*pp && !((*pp)->hash == h && (*pp)->klen == klen && memcmp((*pp)->key, key, klen) == 0))
        pp = &(*pp)->next;
    return pp;
}

static void tbl_grow(mc_meta_server_t *s)
{
    size_t nb = s->nbuckets * 2;
    entry_t **b = mc_calloc(nb, sizeof(*b));
    if (!b)
        return; /* keep the longer chains */
    for (size_t i = 0; i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e) {
            entry_t *next = e->next;
            e->next = b[e->hash & (nb - 1)];
            b[e->hash & (nb - 1)] = e;
            e = next;
        }
    }
    mc_free(s->buckets);
    s->buckets = b;
    s->nbuckets = nb;
}

static uint64_t rec_size(size_t klen, size_t vlen)
{
    return REC_HDR + (uint64_t)klen + vlen;
}

/* Insert or replace; takes a copy of key and value. -1 on no memory. */
static int tbl_put(mc_meta_server_t *s, const char *key, size_t klen, const char *val,
                   size_t vlen)
{
    uint64_t h = mc_hash64(key, klen);
    entry_t **pp = tbl_slot(s, key, klen, h);
    char *v = mc_malloc(vlen + 1);
    if (!v)
        return -1;
    memcpy(v, val, vlen);
    v[vlen] = '\0';
    if (*pp) {
        s->live_bytes -= rec_size(klen, (*pp)->vlen);
        mc_free((*pp)->val);
        (*pp)->val = v;
        (*pp)->vlen = vlen;
        s->live_bytes += rec_size(klen, vlen);
        return 0;
    }
    entry_t *e = MC_NEW(entry_t);
    char *k = e ? mc_strndup(key, klen) : NULL;
    if (!k) {
        mc_free(e);
        mc_free(v);
        return -1;
    }
    e->hash = h;
    e->key = k;
    e->klen = klen;
    e->val = v;
    e->vlen = vlen;
    e->next = NULL;
    *pp = e;
    s->count++;
    s->live_bytes += rec_size(klen, vlen);
    if (s->count > s->nbuckets)
        tbl_grow(s);
    return 0;
}

/* 1 if removed, 0 if absent. */
static int tbl_del(mc_meta_server_t *s, const char *key, size_t klen)
{
    entry_t **pp = tbl_slot(s, key, klen, mc_hash64(key, klen));
    entry_t *e = *pp;
    if (!e)
        return 0;
    *pp = e->next;
    s->count--;
    s->live_bytes -= rec_size(klen, e->vlen);
    mc_free(e->key);
    mc_free(e->val);
    mc_free(e);
    return 1;
}

static void tbl_free(mc_meta_server_t *s)
{
    for (size_t i = 0; s->buckets && i < s->nbuckets; i++) {
        entry_t *e = s->buckets[i];
        while (e) {
            entry_t *next = e->next;
            mc_free(e->key);
            mc_free(e->val);
            mc_free(e);
            e = next;
        }
    }
    mc_free(s->buckets);
    s->buckets = NULL;
}

/* ---------------------------------------------------------------- log */

/* Chained XXH3-64 (no allocation): seed each piece with the hash of the pieces before it. */
static uint64_t rec_checksum(const unsigned char *hdr12, const char *key, size_t klen,
                             const char *val, size_t vlen)
{
    uint64_t h = mc_hash64(hdr12, 12);
    h = mc_hash64_seed(key, klen, h);
    return mc_hash64_seed(vlen ? val : "", vlen, h);
}

static int write_full(int fd, const void *buf, size_t len, off_t off)
{
    const char *p = buf;
    while (len) {
        ssize_t n = pwrite(fd, p, len, off);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        off += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_full(int fd, void *buf, size_t len, off_t off)
{
    char *p = buf;
    while (len) {
        ssize_t n = pread(fd, p, len, off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        off += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Encode one record into a heap buffer (*len_p bytes). */
static unsigned char *rec_encode(uint32_t op, const char *key, size_t klen, const char *val,
                                 size_t vlen, size_t *len_p)
{
    size_t n = REC_HDR + klen + vlen;
    unsigned char *r = mc_malloc(n);
    if (!r)
        return NULL;
    mc_put_le32(r, op);
    mc_put_le32(r + 4, (uint32_t)klen);
    mc_put_le32(r + 8, (uint32_t)vlen);
    mc_put_le64(r + 12, rec_checksum(r, key, klen, val, vlen));
    memcpy(r + REC_HDR, key, klen);
    if (vlen)
        memcpy(r + REC_HDR + klen, val, vlen);
    *len_p = n;
    return r;
}

static void fsync_dir_of(const char *path)
{
    char *copy = mc_strdup(path);
    if (!copy)
        return;
    int dfd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        if (fsync(dfd) != 0)
            MC_LOG_WARN("metadata server: fsync of the log directory failed: %m");
        close(dfd);
    }
    mc_free(copy);
}

/* Rewrite the log as one PUT per live key (temp file + fsync + rename). Write lock held.
 * On failure the old log stays in use. */
static void log_compact(mc_meta_server_t *s)
{
    size_t plen = strlen(s->log_path) + 8;
    char *tmp = mc_malloc(plen);
    if (!tmp)
        return;
    snprintf(tmp, plen, "%s.tmp", s->log_path);
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        MC_LOG_WARN("metadata server: compaction: cannot create %s: %m", tmp);
        mc_free(tmp);
        return;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        MC_LOG_WARN("metadata server: compaction: cannot lock %s: %m", tmp);
    uint64_t off = 0;
    int ok = write_full(fd, LOG_MAGIC, LOG_MAGIC_LEN, 0) == 0;
    off = LOG_MAGIC_LEN;
    for (size_t i = 0; ok && i < s->nbuckets; i++) {
        for (entry_t *e = s->buckets[i]; ok && e; e = e->next) {
            size_t n;
            unsigned char *r = rec_encode(OP_PUT, e->key, e->klen, e->val, e->vlen, &n);
            ok = r && write_full(fd, r, n, (off_t)off) == 0;
            off += n;
            mc_free(r);
        }
    }
    if (ok && fdatasync(fd) != 0)
        ok = 0;
    if (ok && rename(tmp, s->log_path) != 0)
        ok = 0;
    if (!ok) {
        MC_LOG_WARN("metadata server: compaction of %s failed (%m); keeping the old log",
                    s->log_path);
        close(fd);
        unlink(tmp);
        mc_free(tmp);
        return;
    }
    fsync_dir_of(s->log_path);
    MC_LOG_INFO("metadata server: compacted %s: %llu -> %llu bytes, %zu keys", s->log_path,
                (unsigned long long)s->log_bytes, (unsigned long long)off, s->count);
    close(s->log_fd);
    s->log_fd = fd;
    s->log_bytes = off;
    mc_free(tmp);
}

/* Append one mutation and sync. Write lock held. 0 ok, -1 failed (log unchanged). */
static int log_append(mc_meta_server_t *s, uint32_t op, const char *key, size_t klen,
                      const char *val, size_t vlen)
{
    if (s->log_fd < 0)
        return 0;
    size_t n;
    unsigned char *r = rec_encode(op, key, klen, val, vlen, &n);
    if (!r)
        return -1;
    int rc = write_full(s->log_fd, r, n, (off_t)s->log_bytes);
    mc_free(r);
    if (rc == 0 && fdatasync(s->log_fd) != 0)
        rc = -1;
    if (rc != 0) {
        MC_LOG_ERROR("metadata server: append to %s failed: %m", s->log_path);
        if (ftruncate(s->log_fd, (off_t)s->log_bytes) != 0)
            MC_LOG_ERROR("metadata server: cannot cut back %s: %m", s->log_path);
        return -1;
    }
    s->log_bytes += n;
    return 0;
}

static void maybe_compact(mc_meta_server_t *s)
{
    if (s->log_fd >= 0 && s->log_bytes > COMPACT_MIN_BYTES &&
        s->log_bytes > 2 * (s->live_bytes + LOG_MAGIC_LEN))
        log_compact(s);
}

/* Open (or create) and replay the log. */
static mc_status_t log_open(mc_meta_server_t *s, const char *path)
{
    s->log_path = mc_strdup(path);
    if (!s->log_path)
        return MC_ERR_NO_MEMORY;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        MC_LOG_ERROR("metadata server: cannot open %s: %m", path);
        return MC_ERR_FILE_OPEN_FAIL;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        MC_LOG_ERROR("metadata server: %s is in use by another process (flock: %m)", path);
        close(fd);
        return MC_ERR_FILE_OPEN_FAIL;
    }
    s->log_fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        MC_LOG_ERROR("metadata server: fstat %s: %m", path);
        return MC_ERR_FILE_READ_FAIL;
    }
    uint64_t size = (uint64_t)st.st_size;
    char magic[LOG_MAGIC_LEN];
    if (size >= LOG_MAGIC_LEN) {
        if (read_full(fd, magic, LOG_MAGIC_LEN, 0) != 0 ||
            memcmp(magic, LOG_MAGIC, LOG_MAGIC_LEN) != 0) {
            MC_LOG_ERROR("metadata server: %s is not a metadata log (bad magic); refusing to "
                         "overwrite it",
                         path);
            return MC_ERR_FILE_READ_FAIL;
        }
    } else {
        if (size > 0)
            MC_LOG_WARN("metadata server: %s has a torn header (%llu bytes); starting empty",
                        path, (unsigned long long)size);
        if (ftruncate(fd, 0) != 0 || write_full(fd, LOG_MAGIC, LOG_MAGIC_LEN, 0) != 0 ||
            fdatasync(fd) != 0) {
            MC_LOG_ERROR("metadata server: cannot initialise %s: %m", path);
            return MC_ERR_FILE_WRITE_FAIL;
        }
        fsync_dir_of(path);
        s->log_bytes = LOG_MAGIC_LEN;
        return MC_OK;
    }

    uint64_t off = LOG_MAGIC_LEN;
    size_t records = 0;
    const char *why = NULL;
    char *buf = NULL;
    while (off < size) {
        unsigned char h[REC_HDR];
        if (size - off < REC_HDR || read_full(fd, h, REC_HDR, (off_t)off) != 0) {
            why = "short record header";
            break;
        }
        uint32_t op = mc_get_le32(h), klen = mc_get_le32(h + 4), vlen = mc_get_le32(h + 8);
        if ((op != OP_PUT && op != OP_DEL) || klen == 0 || klen > MC_META_KEY_MAX ||
            vlen > MC_META_VALUE_MAX || (op == OP_DEL && vlen)) {
            why = "invalid record header";
            break;
        }
        if (size - off - REC_HDR < (uint64_t)klen + vlen) {
            why = "record runs past the end of the file";
            break;
        }
        char *nb = mc_realloc(buf, (size_t)klen + vlen + 1);
        if (!nb) {
            mc_free(buf);
            return MC_ERR_NO_MEMORY;
        }
        buf = nb;
        if (read_full(fd, buf, (size_t)klen + vlen, (off_t)(off + REC_HDR)) != 0) {
            why = "read error";
            break;
        }
        if (rec_checksum(h, buf, klen, buf + klen, vlen) != mc_get_le64(h + 12)) {
            why = "checksum mismatch";
            break;
        }
        int rc = op == OP_PUT ? tbl_put(s, buf, klen, buf + klen, vlen)
                              : (tbl_del(s, buf, klen), 0);
        if (rc != 0) {
            mc_free(buf);
            return MC_ERR_NO_MEMORY;
        }
        off += REC_HDR + (uint64_t)klen + vlen;
        records++;
    }
    mc_free(buf);
    if (why) {
        MC_LOG_WARN("metadata server: %s: %s at offset %llu; truncating %llu tail bytes", path,
                    why, (unsigned long long)off, (unsigned long long)(size - off));
        if (ftruncate(fd, (off_t)off) != 0 || fdatasync(fd) != 0) {
            MC_LOG_ERROR("metadata server: cannot truncate %s: %m", path);
            return MC_ERR_FILE_WRITE_FAIL;
        }
    }
    s->log_bytes = off;
    MC_LOG_INFO("metadata server: replayed %zu records from %s: %zu keys", records, path,
                s->count);
    maybe_compact(s);
    return MC_OK;
}

/* ---------------------------------------------------------------- HTTP */

typedef struct req_ctx {
    mc_meta_server_t *srv;
    char *target; /* request target as received (signed by clients), NULL if over the cap */
    char *body;
    size_t len, cap; /* cap is charged to srv->upload_bytes */
    int too_large, over_budget;
} req_ctx_t;

static void ctx_release_body(req_ctx_t *ctx)
{
    if (ctx->cap)
        atomic_fetch_sub(&ctx->srv->upload_bytes, ctx->cap);
    mc_free(ctx->body);
    ctx->body = NULL;
    ctx->len = ctx->cap = 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

/* Checks the request's credentials, with_body 0 = headers only (before the upload is read).
 * 1 when the request may go on, else 0 with the queued refusal's result in *ret. */
static int authorized(mc_meta_server_t *s, struct MHD_Connection *c, const char *method,
                      const req_ctx_t *ctx, int with_body, enum MHD_Result *ret)
{
    if (!mc_http_auth_server_enabled(s->http_auth))
        return 1;
    uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE];
    if (with_body)
        mc_http_auth_body_hash(ctx->body, ctx->len, bh);
    mc_http_auth_verdict_t v;
    if (mc_mhd_authorized(s->http_auth, c, method, ctx->target, with_body ? bh : NULL, false, ret,
                          &v, NULL))
        return 1;
    /* bad credentials are worth a warning, at most one a second (anyone can send them) */
    static _Atomic uint64_t last_warn_ms;
    uint64_t now = mc_now_ms(), last = atomic_load(&last_warn_ms);
    if (v != MC_HTTP_AUTH_MISSING && v != MC_HTTP_AUTH_STALE && now - last >= 1000 &&
        atomic_compare_exchange_strong(&last_warn_ms, &last, now))
        MC_LOG_WARN("metadata server: %s %.200s refused: %s", method,
                    ctx->target ? ctx->target : "(long target)", mc_http_auth_verdict_str(v));
    return 0;
}

static enum MHD_Result handle_get(mc_meta_server_t *s, struct MHD_Connection *c, const char *key,
                                  size_t klen)
{
    pthread_rwlock_rdlock(&s->lock);
    entry_t *e = *tbl_slot(s, key, klen, mc_hash64(key, klen));
    struct MHD_Response *r = NULL;
    if (e)
        r = MHD_create_response_from_buffer(e->vlen, e->val, MHD_RESPMEM_MUST_COPY);
    pthread_rwlock_unlock(&s->lock);
    if (!e)
        return reply(c, MHD_HTTP_NOT_FOUND, "metadata not found");
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handle_put(mc_meta_server_t *s, struct MHD_Connection *c, const char *key,
                                  size_t klen, req_ctx_t *ctx)
{
    if (ctx->too_large)
        return reply(c, 413, "metadata value too large");
    if (ctx->over_budget)
        return reply(c, MHD_HTTP_SERVICE_UNAVAILABLE, "server busy: too many uploads");
    const char *val = ctx->body ? ctx->body : "";
    pthread_rwlock_wrlock(&s->lock);
    int rc = log_append(s, OP_PUT, key, klen, val, ctx->len);
    if (rc == 0)
        rc = tbl_put(s, key, klen, val, ctx->len);
    if (rc == 0)
        maybe_compact(s);
    pthread_rwlock_unlock(&s->lock);
    if (rc != 0)
        return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "metadata update failed");
    return reply(c, MHD_HTTP_OK, "metadata updated");
}

static enum MHD_Result handle_del(mc_meta_server_t *s, struct MHD_Connection *c, const char *key,
                                  size_t klen)
{
    pthread_rwlock_wrlock(&s->lock);
    int found = *tbl_slot(s, key, klen, mc_hash64(key, klen)) != NULL;
    int rc = 0;
    if (found) {
        rc = log_append(s, OP_DEL, key, klen, NULL, 0);
        if (rc == 0) {
            tbl_del(s, key, klen);
            maybe_compact(s);
        }
    }
    pthread_rwlock_unlock(&s->lock);
    if (rc != 0)
        return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "metadata delete failed");
    if (!found)
        return reply(c, MHD_HTTP_NOT_FOUND, "metadata not found");
    return reply(c, MHD_HTTP_OK, "metadata deleted");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **con_cls)
{
    mc_meta_server_t *s = cls;
    req_ctx_t *ctx = *con_cls;
    int is_put = strcmp(method, MHD_HTTP_METHOD_PUT) == 0;
    if (!ctx) /* on_uri had no memory */
        return MHD_NO;
    if (!ctx->srv) { /* first call: headers only */
        ctx->srv = s;
        enum MHD_Result ret;
        if (strcmp(url, "/health") != 0 && !authorized(s, c, method, ctx, 0, &ret))
            return ret; /* an anonymous upload is refused before it is buffered */
        if (is_put) {
            const char *cl =
                MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
            if (cl && strtoull(cl, NULL, 10) > MC_META_VALUE_MAX)
                return reply(c, 413, "metadata value too large");
        }
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (!is_put || ctx->too_large || ctx->over_budget)
            return MHD_YES; /* bodies of other methods (and refused ones) are discarded */
        if (n > MC_META_VALUE_MAX - ctx->len) {
            ctx->too_large = 1;
            ctx_release_body(ctx);
            return MHD_YES;
        }
        if (ctx->len + n > ctx->cap) {
            /* grow first, then charge the growth to the budget (undone when over it) */
            size_t old = ctx->cap;
            if (mc_array_reserve(&ctx->body, &ctx->cap, ctx->len + n, 4096) != MC_OK)
                return MHD_NO;
            size_t grow = ctx->cap - old;
            if (atomic_fetch_add(&s->upload_bytes, grow) + grow > UPLOAD_BUDGET) {
                atomic_fetch_sub(&s->upload_bytes, grow);
                MC_LOG_WARN("metadata server: upload budget (%u bytes) exhausted; refusing a PUT",
                            UPLOAD_BUDGET);
                ctx->over_budget = 1;
                ctx->cap = old; /* only `old` bytes are charged to it */
                ctx_release_body(ctx);
                return MHD_YES;
            }
        }
        memcpy(ctx->body + ctx->len, upload_data, n);
        ctx->len += n;
        return MHD_YES;
    }

    if (strcmp(url, "/health") == 0) {
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
            return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
        return reply(c, MHD_HTTP_OK, "OK");
    }
    enum MHD_Result ret;
    if (!authorized(s, c, method, ctx, 1, &ret))
        return ret;
    if (strcmp(url, "/metadata") != 0)
        return reply(c, MHD_HTTP_NOT_FOUND, "not found");
    int is_get = strcmp(method, MHD_HTTP_METHOD_GET) == 0;
    int is_del = strcmp(method, MHD_HTTP_METHOD_DELETE) == 0;
    if (!is_get && !is_put && !is_del)
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed");
    const char *key = NULL;
    size_t klen = 0;
    if (MHD_lookup_connection_value_n(c, MHD_GET_ARGUMENT_KIND, "key", 3, &key, &klen) !=
            MHD_YES ||
        !key || klen == 0)
        return reply(c, MHD_HTTP_BAD_REQUEST, "missing key");
    if (klen > MC_META_KEY_MAX || strlen(key) != klen)
        return reply(c, MHD_HTTP_BAD_REQUEST, "bad key");
    if (is_get)
        return handle_get(s, c, key, klen);
    if (is_put)
        return handle_put(s, c, key, klen, ctx);
    return handle_del(s, c, key, klen);
}

/* Called by libmicrohttpd with the raw request target before anything else: the request's
 * context starts here, holding a copy of the target (what clients sign). NULL = no memory
 * (the request then fails). */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)c;
    req_ctx_t *ctx = MC_NEW(req_ctx_t);
    if (ctx && strlen(uri) <= MC_HTTP_AUTH_TARGET_MAX)
        ctx->target = mc_strdup(uri);
    return ctx;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    req_ctx_t *ctx = *con_cls;
    if (ctx) {
        if (ctx->srv)
            ctx_release_body(ctx);
        mc_free(ctx->target);
        mc_free(ctx);
        *con_cls = NULL;
    }
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    MC_LOG_WARN("metadata server (microhttpd): %s", buf);
}

/* ---------------------------------------------------------------- lifecycle */

mc_status_t mc_meta_server_start(const char *host, uint16_t port, const char *persist_path,
                                 mc_meta_server_t **srv_p)
{
    mc_meta_server_opts_t o = {.host = host, .port = port, .persist_path = persist_path};
    return mc_meta_server_start_opts(&o, srv_p);
}

/* Frees what start set up (s->mhd already stopped or never started). */
static void server_free(mc_meta_server_t *s)
{
    if (s->log_fd >= 0)
        close(s->log_fd);
    mc_free(s->log_path);
    tbl_free(s);
    pthread_rwlock_destroy(&s->lock);
    mc_http_auth_server_free(s->http_auth);
    mc_auth_free(s->owned_auth);
    mc_free(s);
}

mc_status_t mc_meta_server_start_opts(const mc_meta_server_opts_t *o, mc_meta_server_t **srv_p)
{
    if (!srv_p || !o)
        return MC_ERR_INVALID_PARAMS;
    const char *host = o->host, *persist_path = o->persist_path;
    uint16_t port = o->port;
    *srv_p = NULL;
    mc_meta_server_t *s = MC_NEW(mc_meta_server_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    s->log_fd = -1;
    atomic_init(&s->upload_bytes, 0);
    s->nbuckets = 256;
    s->buckets = mc_calloc(s->nbuckets, sizeof(*s->buckets));
    if (!s->buckets || pthread_rwlock_init(&s->lock, NULL) != 0) {
        mc_free(s->buckets);
        mc_free(s);
        return MC_ERR_NO_MEMORY;
    }
    const mc_auth_t *auth = o->auth;
    mc_status_t st = MC_OK;
    if (!auth && o->auth_token_file && *o->auth_token_file) {
        st = mc_auth_load(o->auth_token_file, &s->owned_auth);
        if (st != MC_OK)
            goto fail;
        auth = s->owned_auth;
    }
    st = mc_http_auth_server_create(auth, &s->http_auth);
    if (st != MC_OK)
        goto fail;
    if (persist_path && *persist_path) {
        st = log_open(s, persist_path);
        if (st != MC_OK)
            goto fail;
    }
    int lfd = -1;
    st = mc_net_listen(host && *host ? host : "0.0.0.0", port, 1, &lfd, &s->port);
    if (st != MC_OK)
        goto fail;
    s->mhd = MHD_start_daemon(
        MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        on_request, s, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, s, /* must come first */
        MHD_OPTION_LISTEN_SOCKET, (MHD_socket)lfd, MHD_OPTION_THREAD_POOL_SIZE,
        (unsigned)4, MHD_OPTION_CONNECTION_LIMIT, CONN_MAX, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        PER_IP_MAX, MHD_OPTION_CONNECTION_TIMEOUT, IDLE_S, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        (size_t)(64 << 10), MHD_OPTION_URI_LOG_CALLBACK, on_uri, s,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
    if (!s->mhd) {
        MC_LOG_ERROR("metadata server: cannot start microhttpd on %s:%u", host ? host : "",
                     s->port);
        close(lfd);
        st = MC_ERR_INTERNAL;
        goto fail;
    }
    MC_LOG_INFO("metadata server: listening on %s:%u (%s, %s)", host && *host ? host : "0.0.0.0",
                s->port, s->log_fd >= 0 ? s->log_path : "memory only",
                auth ? "requests must be signed" : "no authentication");
    mc_auth_warn_if_open("HTTP metadata server", host && *host ? host : "0.0.0.0", auth);
    *srv_p = s;
    return MC_OK;
fail:
    server_free(s);
    return st;
}

uint16_t mc_meta_server_port(const mc_meta_server_t *srv)
{
    return srv ? srv->port : 0;
}

size_t mc_meta_server_count(mc_meta_server_t *srv)
{
    if (!srv)
        return 0;
    pthread_rwlock_rdlock(&srv->lock);
    size_t n = srv->count;
    pthread_rwlock_unlock(&srv->lock);
    return n;
}

void mc_meta_server_stop(mc_meta_server_t *srv)
{
    if (!srv)
        return;
    MHD_stop_daemon(srv->mhd); /* joins the threads and closes the listening socket */
    server_free(srv);
}
