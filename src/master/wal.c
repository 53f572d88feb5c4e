/* WAL files (format and layout in wal.h, recovery in docs/internals/recovery.md): a buffered
 * record writer (records collect in an mc_buf_t, written out at 1 MiB and on flush, which
 * may fdatasync), a replay that reads a whole file and stops quietly at the first torn or
 * corrupt record, the listing of log/snapshot generations, and the little-endian payload
 * encoder/decoder (mc_wal_buf_t, mc_wal_rd_t) whose errors stick until checked. */
#include "master/wal.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/log.h"

#include "common/bytes.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

mc_status_t mc_wal_writer_open(mc_wal_writer_t *w, const char *path, int trunc)
{
    memset(w, 0, sizeof(*w));
    w->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | (trunc ? O_TRUNC : O_APPEND), 0644);
    if (w->fd < 0) {
        MC_LOG_ERROR("wal: open %s: %s", path, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    struct stat st;
    if (fstat(w->fd, &st) == 0)
        w->bytes = (uint64_t)st.st_size;
    return MC_OK;
}

mc_status_t mc_wal_writer_open_fixed(mc_wal_writer_t *w, const char *path)
{
    w->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_TRUNC, 0644);
    w->bytes = w->records = 0;
    mc_buf_reset(&w->buf);
    return w->fd < 0 ? MC_ERR_FILE_OPEN_FAIL : MC_OK;
}

/* Writes the whole buffer; on failure it is kept as it was (and written again next time). */
static mc_status_t writer_write(mc_wal_writer_t *w)
{
    size_t len = mc_buf_unread(&w->buf), off = 0;
    while (off < len) {
        ssize_t n = write(w->fd, mc_buf_head(&w->buf) + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (!w->fixed)
                MC_LOG_ERROR("wal: write: %s", strerror(errno));
            return MC_ERR_FILE_WRITE_FAIL;
        }
        off += (size_t)n;
    }
    mc_buf_reset(&w->buf);
    return MC_OK;
}

mc_status_t mc_wal_frame(mc_buf_t *out, uint8_t type, const void *payload, size_t len)
{
    if (len > MC_WAL_MAX_RECORD)
        return MC_ERR_TOO_LARGE;
    size_t need = 5 + len + 8;
    mc_status_t st = mc_buf_reserve(out, need);
    if (st != MC_OK)
        return st;
    uint8_t *p = out->data + out->len;
    mc_put_le32(p, (uint32_t)len);
    p[4] = type;
    if (len)
        memcpy(p + 5, payload, len);
    mc_put_le64(p + 5 + len, mc_hash64(p + 4, len + 1));
    out->len += need;
    return MC_OK;
}

mc_status_t mc_wal_writer_append(mc_wal_writer_t *w, uint8_t type, const void *payload, size_t len)
{
    if (w->fixed && (len > MC_WAL_MAX_RECORD || w->buf.cap - w->buf.len < 13 + len))
        return MC_ERR_NO_MEMORY;
    mc_status_t st = mc_wal_frame(&w->buf, type, payload, len);
    if (st != MC_OK)
        return st;
    w->bytes += 5 + len + 8;
    w->records++;
    if (mc_buf_unread(&w->buf) >= MC_WAL_WRITER_FLUSH)
        return writer_write(w);
    return MC_OK;
}

mc_status_t mc_wal_writer_flush(mc_wal_writer_t *w, int do_sync)
{
    if (w->fd < 0)
        return MC_ERR_FILE_WRITE_FAIL;
    mc_status_t st = writer_write(w);
    if (st != MC_OK)
        return st;
    if (do_sync && fdatasync(w->fd) != 0) {
        if (!w->fixed)
            MC_LOG_ERROR("wal: fdatasync: %s", strerror(errno));
        return MC_ERR_FILE_WRITE_FAIL;
    }
    return MC_OK;
}

void mc_wal_writer_close(mc_wal_writer_t *w)
{
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
    if (!w->fixed)
        mc_buf_free(&w->buf);
}

mc_status_t mc_wal_replay_buf(const void *buf, size_t len, mc_wal_record_fn fn, void *ctx,
                              size_t *used_p, uint8_t *last_type_p)
{
    const uint8_t *data = buf;
    size_t off = 0;
    mc_status_t ret = MC_OK;
    while (off < len) {
        if (len - off < 13)
            break; /* a partial frame: the caller has the rest later, or it is torn */
        uint32_t plen = mc_get_le32(data + off);
        if (plen > MC_WAL_MAX_RECORD) {
            ret = MC_ERR_INVALID_PARAMS;
            break;
        }
        if (len - off < 13 + (size_t)plen)
            break;
        uint64_t sum = mc_get_le64(data + off + 5 + plen);
        if (sum != mc_hash64(data + off + 4, (size_t)plen + 1)) {
            ret = MC_ERR_INVALID_PARAMS;
            break;
        }
        uint8_t type = data[off + 4];
        if (fn(ctx, type, data + off + 5, plen) != 0) {
            ret = MC_ERR_INTERNAL;
            break;
        }
        if (last_type_p)
            *last_type_p = type;
        off += 13 + plen;
    }
    *used_p = off;
    return ret;
}

mc_status_t mc_wal_replay_file(const char *path, mc_wal_record_fn fn, void *ctx, int *complete_p,
                               uint8_t *last_type_p)
{
    if (complete_p)
        *complete_p = 0;
    if (last_type_p)
        *last_type_p = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        MC_LOG_ERROR("wal: open %s: %s", path, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return MC_ERR_FILE_READ_FAIL;
    }
    size_t size = (size_t)st.st_size;
    uint8_t *data = size ? mc_malloc(size) : NULL;
    if (size && !data) {
        close(fd);
        return MC_ERR_NO_MEMORY;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, data + got, size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    size_t off = 0;
    mc_status_t ret = mc_wal_replay_buf(data, got, fn, ctx, &off, last_type_p);
    if (ret == MC_ERR_INVALID_PARAMS || (ret == MC_OK && off < got)) {
        /* torn or corrupt: everything before it is applied */
        MC_LOG_WARN("wal: %s: torn or corrupt record at offset %zu (rest ignored)", path, off);
        ret = MC_OK;
    }
    if (complete_p)
        *complete_p = off == got;
    mc_free(data);
    return ret;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

mc_status_t mc_wal_list(const char *dir, const char *prefix, uint64_t **gens_p, size_t *n_p)
{
    *gens_p = NULL;
    *n_p = 0;
    DIR *d = opendir(dir);
    if (!d)
        return MC_ERR_FILE_OPEN_FAIL;
    size_t plen = strlen(prefix), n = 0, cap = 0;
    uint64_t *g = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, prefix, plen) != 0)
            continue;
        const char *s = de->d_name + plen;
        if (!*s)
            continue;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (*end)
            continue;
        if (mc_array_reserve(&g, &cap, n + 1, 16) != MC_OK) {
            mc_free(g);
            closedir(d);
            return MC_ERR_NO_MEMORY;
        }
        g[n++] = v;
    }
    closedir(d);
    if (n)
        qsort(g, n, sizeof(*g), cmp_u64);
    *gens_p = g;
    *n_p = n;
    return MC_OK;
}

void mc_wal_put_u8(mc_wal_buf_t *b, uint8_t v) { mc_wal_put_bytes(b, &v, 1); }
void mc_wal_put_u32(mc_wal_buf_t *b, uint32_t v)
{
    uint8_t t[4];
    mc_put_le32(t, v);
    mc_wal_put_bytes(b, t, 4);
}
void mc_wal_put_u64(mc_wal_buf_t *b, uint64_t v)
{
    uint8_t t[8];
    mc_put_le64(t, v);
    mc_wal_put_bytes(b, t, 8);
}
void mc_wal_put_bytes(mc_wal_buf_t *b, const void *p, size_t n)
{
    if (!b->err && b->fixed && b->b.cap - b->b.len < n)
        b->err = 1;
    if (!b->err && mc_buf_append(&b->b, p, n) != MC_OK)
        b->err = 1;
}
void mc_wal_put_str(mc_wal_buf_t *b, const char *s, size_t n)
{
    if (n > 0xffff) {
        b->err = 1;
        return;
    }
    uint8_t t[2] = {(uint8_t)n, (uint8_t)(n >> 8)};
    mc_wal_put_bytes(b, t, 2);
    mc_wal_put_bytes(b, s, n);
}
void mc_wal_put_varint(mc_wal_buf_t *b, uint64_t v)
{
    uint8_t t[10];
    size_t n = 0;
    while (v >= 0x80) {
        t[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    t[n++] = (uint8_t)v;
    mc_wal_put_bytes(b, t, n);
}

const uint8_t *mc_wal_get_bytes(mc_wal_rd_t *r, size_t n)
{
    if (r->err || r->len - r->off < n) {
        r->err = 1;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}
uint8_t mc_wal_get_u8(mc_wal_rd_t *r)
{
    const uint8_t *p = mc_wal_get_bytes(r, 1);
    return p ? p[0] : 0;
}
uint32_t mc_wal_get_u32(mc_wal_rd_t *r)
{
    const uint8_t *p = mc_wal_get_bytes(r, 4);
    return p ? mc_get_le32(p) : 0;
}
uint64_t mc_wal_get_u64(mc_wal_rd_t *r)
{
    const uint8_t *p = mc_wal_get_bytes(r, 8);
    return p ? mc_get_le64(p) : 0;
}
const char *mc_wal_get_str(mc_wal_rd_t *r, size_t *n_p)
{
    const uint8_t *l = mc_wal_get_bytes(r, 2);
    if (!l) {
        *n_p = 0;
        return NULL;
    }
    size_t n = (size_t)l[0] | ((size_t)l[1] << 8);
    *n_p = n;
    return (const char *)mc_wal_get_bytes(r, n);
}
uint64_t mc_wal_get_varint(mc_wal_rd_t *r)
{
    uint64_t v = 0;
    for (unsigned shift = 0; shift < 70; shift += 7) {
        const uint8_t *p = mc_wal_get_bytes(r, 1);
        if (!p)
            return 0;
        /* the 10th byte may carry only the top bit */
        if (shift == 63 && *p > 1)
            break;
        v |= (uint64_t)(*p & 0x7f) << shift;
        if (!(*p & 0x80))
            return v;
    }
    r->err = 1;
    return 0;
}
