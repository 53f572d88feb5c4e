/* Redis metadata backend (hiredis, blocking sockets driven by hand for a total deadline).
 *
 * Upstream Mooncake's layout: one plain Redis string per key, no prefix of our own:
 *   get = GET <key>   (nil = absent)
 *   put = SET <key> <value>
 *   del = DEL <key>   (0 or 1 deleted: both MC_OK)
 * so the descriptor of segment S is the string at "mooncake/ram/S", its JSON text as value.
 *
 * Connection string (after "redis://"): [[user]:password@]host[:port][/db], host a name, an
 * IPv4 address or an [IPv6] address, port 6379 by default. Upstream takes "host:port" only
 * and reads the credentials from MC_REDIS_USERNAME / MC_REDIS_PASSWORD / MC_REDIS_DB_INDEX;
 * here those arrive as options (mc_meta_opts_t, filled from the TE config), and the standard
 * Redis URI form may carry them instead (percent-encoded). A value given both ways is refused.
 *
 * Each connection: connect (at most min(2 s, timeout)), AUTH [user] password when a password
 * is set, SELECT db when db != 0, then commands. Connections are pooled (up to POOL_MAX idle)
 * so several threads work in parallel; a connection that failed, timed out or got an
 * oversized answer is closed, never reused. A pooled connection that turns out dead (server
 * restarted) is replaced once within the same call: GET, SET and DEL are idempotent.
 *
 * Every request is bounded by timeout_ms in total: before each read and write the socket
 * timeout is set to what is left of the deadline. An answer growing past the value cap aborts
 * the request with MC_ERR_TOO_LARGE before it is buffered whole.
 *
 * Passwords are never logged; server error texts after AUTH are logged only when they do not
 * contain the password or username.
 */
#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"
#include "te/metadata_internal.h"

#include <hiredis/hiredis.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define REDIS_DEFAULT_PORT 6379
#define REDIS_CONNECT_MS 2000u
#define POOL_MAX 4
#define RESP_SLACK 64 /* "$<len>\r\n" ... "\r\n" around the largest value */

typedef struct redis_impl {
    char host[256];
    int port;
    char where[300]; /* "host:port" for log lines, no credentials */
    char *user;      /* NULL = none */
    char *pass;      /* NULL = no AUTH */
    uint32_t db;
    uint32_t timeout_ms;
    pthread_mutex_t mu; /* guards idle/nidle */
    redisContext *idle[POOL_MAX];
    int nidle;
} redis_impl_t;

/* ---------------------------------------------------------------- connection string */

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode s[0..n) into a heap string; NULL on a bad escape, %00 or no memory. */
static char *pct_decode(const char *s, size_t n)
{
    char *out = mc_malloc(n + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            out[o++] = s[i];
            continue;
        }
        if (n - i < 3 || hexval(s[i + 1]) < 0 || hexval(s[i + 2]) < 0 ||
            (s[i + 1] == '0' && s[i + 2] == '0')) {
            mc_free(out);
            return NULL;
        }
        out[o++] = (char)(hexval(s[i + 1]) << 4 | hexval(s[i + 2]));
        i += 2;
    }
    out[o] = '\0';
    return out;
}

/* Wipe and free a secret. */
static void free_secret(char *s)
{
    if (!s)
        return;
    volatile char *p = s;
    while (*p)
        *p++ = '\0';
    mc_free(s);
}

/* Parse "[[user]:password@]host[:port][/db]" into r (host, port, and the URI's own user,
 * password and db into *user_p, *pass_p, *db_p; db -1 = not given). */
static mc_status_t parse_uri(const char *s, redis_impl_t *r, char **user_p, char **pass_p,
                             int *db_p)
{
    *user_p = *pass_p = NULL;
    *db_p = -1;
    const char *slash = strchr(s, '/');
    const char *end = slash ? slash : s + strlen(s);
    if (strpbrk(s, "?#")) {
        MC_LOG_ERROR("metadata: redis:// connection string: query or fragment not supported "
                     "(want redis://[[user]:password@]host[:port][/db])");
        return MC_ERR_INVALID_PARAMS;
    }
    /* userinfo: up to the last '@' before the path */
    const char *at = NULL;
    for (const char *p = s; p < end; p++)
        if (*p == '@')
            at = p;
    const char *hp = s;
    if (at) {
        const char *colon = memchr(s, ':', (size_t)(at - s));
        if (!colon) {
            MC_LOG_ERROR("metadata: redis:// credentials must be written user:password@ or "
                         ":password@ (the user part alone is not accepted)");
            return MC_ERR_INVALID_PARAMS;
        }
        if (colon > s) {
            *user_p = pct_decode(s, (size_t)(colon - s));
            if (!*user_p)
                goto bad_escape;
        }
        if (at > colon + 1) {
            *pass_p = pct_decode(colon + 1, (size_t)(at - colon - 1));
            if (!*pass_p)
                goto bad_escape;
        }
        hp = at + 1;
    }
    /* host[:port] or [v6][:port] */
    const char *host = hp, *host_end, *port = NULL;
    if (*hp == '[') {
        host = hp + 1;
        host_end = memchr(host, ']', (size_t)(end - host));
        if (!host_end)
            goto bad_host;
        if (host_end + 1 < end) {
            if (host_end[1] != ':')
                goto bad_host;
            port = host_end + 2;
        }
    } else {
        host_end = memchr(hp, ':', (size_t)(end - hp));
        if (host_end)
            port = host_end + 1;
        else
            host_end = end;
        if (port && memchr(port, ':', (size_t)(end - port))) /* bare IPv6: needs brackets */
            goto bad_host;
    }
    size_t hlen = (size_t)(host_end - host);
    if (hlen == 0 || hlen >= sizeof(r->host))
        goto bad_host;
    memcpy(r->host, host, hlen);
    r->host[hlen] = '\0';
    r->port = REDIS_DEFAULT_PORT;
    if (port) {
        long v = 0;
        if (port == end || end - port > 5)
            goto bad_port;
        for (const char *p = port; p < end; p++) {
            if (*p < '0' || *p > '9')
                goto bad_port;
            v = v * 10 + (*p - '0');
        }
        if (v < 1 || v > 65535)
            goto bad_port;
        r->port = (int)v;
    }
    if (slash && slash[1]) {
        long v = 0;
        const char *d = slash + 1;
        if (strlen(d) > 3)
            goto bad_db;
        for (const char *p = d; *p; p++) {
            if (*p < '0' || *p > '9')
                goto bad_db;
            v = v * 10 + (*p - '0');
        }
        if (v > MC_META_REDIS_DB_MAX)
            goto bad_db;
        *db_p = (int)v;
    }
    if (strchr(r->host, ':'))
        snprintf(r->where, sizeof(r->where), "[%s]:%d", r->host, r->port);
    else
        snprintf(r->where, sizeof(r->where), "%s:%d", r->host, r->port);
    return MC_OK;

bad_escape:
    MC_LOG_ERROR("metadata: redis:// credentials: bad percent-escape (or %%00)");
    goto fail;
bad_host:
    MC_LOG_ERROR("metadata: redis:// connection string: bad host (want host[:port] or "
                 "[ipv6][:port])");
    goto fail;
bad_port:
    MC_LOG_ERROR("metadata: redis:// connection string: port must be 1..65535");
    goto fail;
bad_db:
    MC_LOG_ERROR("metadata: redis:// connection string: database after '/' must be 0..%d",
                 MC_META_REDIS_DB_MAX);
fail:
    free_secret(*user_p);
    free_secret(*pass_p);
    *user_p = *pass_p = NULL;
    return MC_ERR_INVALID_PARAMS;
}

/* ---------------------------------------------------------------- requests */

static void set_sock_timeout(redisContext *c, uint64_t left_ms)
{
    if (left_ms == 0)
        left_ms = 1;
    struct timeval tv = {.tv_sec = (time_t)(left_ms / 1000),
                         .tv_usec = (suseconds_t)(left_ms % 1000) * 1000};
    redisSetTimeout(c, tv);
}

/* The status of a hiredis I/O failure on c (errno as left by the failed call). */
static mc_status_t io_status(const redis_impl_t *r, redisContext *c, int err, uint64_t deadline,
                             const char *what)
{
    if (err == EAGAIN || err == EWOULDBLOCK || mc_now_ms() >= deadline) {
        MC_LOG_WARN("metadata: redis %s: %s: no answer within %u ms", r->where, what,
                    r->timeout_ms);
        return MC_ERR_TIMEOUT;
    }
    MC_LOG_WARN("metadata: redis %s: %s: %s", r->where, what,
                c->errstr[0] ? c->errstr : "connection lost");
    return MC_ERR_CONNECTION;
}

/* Send one command on c and read its reply, all before deadline. On MC_OK *reply_p is the
 * reply (freeReplyObject). Any other status leaves c unusable (the caller frees it). */
static mc_status_t command(const redis_impl_t *r, redisContext *c, int argc, const char **argv,
                           const size_t *lens, uint64_t deadline, redisReply **reply_p)
{
    *reply_p = NULL;
    if (redisAppendCommandArgv(c, argc, argv, lens) != REDIS_OK)
        return MC_ERR_NO_MEMORY;
    int done = 0;
    while (!done) {
        uint64_t now = mc_now_ms();
        if (now >= deadline)
            return io_status(r, c, EAGAIN, deadline, argv[0]);
        set_sock_timeout(c, deadline - now);
        errno = 0;
        if (redisBufferWrite(c, &done) != REDIS_OK)
            return io_status(r, c, errno, deadline, argv[0]);
    }
    for (;;) {
        void *rep = NULL;
        if (redisGetReplyFromReader(c, &rep) != REDIS_OK) {
            MC_LOG_WARN("metadata: redis %s: %s: bad answer: %s", r->where, argv[0],
                        c->errstr);
            return MC_ERR_PROTOCOL;
        }
        if (rep) {
            *reply_p = rep;
            return MC_OK;
        }
        if (c->reader->len - c->reader->pos > (size_t)MC_META_VALUE_MAX + RESP_SLACK) {
            MC_LOG_WARN("metadata: redis %s: %s: answer exceeds %u bytes", r->where, argv[0],
                        MC_META_VALUE_MAX);
            return MC_ERR_TOO_LARGE;
        }
        uint64_t now = mc_now_ms();
        if (now >= deadline)
            return io_status(r, c, EAGAIN, deadline, argv[0]);
        set_sock_timeout(c, deadline - now);
        errno = 0;
        if (redisBufferRead(c) != REDIS_OK)
            return io_status(r, c, errno, deadline, argv[0]);
    }
}

/* Error reply text for a log line: at most 200 bytes. */
static const char *reply_text(const redisReply *rep)
{
    return rep->str && rep->len ? rep->str : "unknown error";
}

static bool reply_code_is(const redisReply *rep, const char *code)
{
    size_t n = strlen(code);
    return rep->str && rep->len >= n && strncmp(rep->str, code, n) == 0 &&
           (rep->len == n || rep->str[n] == ' ');
}

/* The status of an error reply to a data command (GET/SET/DEL), logged. */
static mc_status_t error_reply_status(const redis_impl_t *r, const char *cmd, const char *key,
                                      const redisReply *rep)
{
    if (reply_code_is(rep, "NOAUTH") || reply_code_is(rep, "WRONGPASS") ||
        reply_code_is(rep, "NOPERM")) {
        MC_LOG_ERROR("metadata: redis %s: %s %s refused: %.200s (set the password: config "
                     "redis_password / MC_REDIS_PASSWORD, user: redis_username / "
                     "MC_REDIS_USERNAME)",
                     r->where, cmd, key, reply_text(rep));
        return MC_ERR_PERMISSION;
    }
    MC_LOG_ERROR("metadata: redis %s: %s %s refused: %.200s", r->where, cmd, key,
                 reply_text(rep));
    if (reply_code_is(rep, "LOADING") || reply_code_is(rep, "BUSY") ||
        reply_code_is(rep, "MASTERDOWN") || reply_code_is(rep, "TRYAGAIN"))
        return MC_ERR_BUSY;
    return MC_ERR_INTERNAL;
}

/* AUTH and SELECT on a fresh connection. */
static mc_status_t handshake(const redis_impl_t *r, redisContext *c, uint64_t deadline)
{
    redisReply *rep;
    mc_status_t st;
    if (r->pass) {
        const char *argv[3] = {"AUTH", NULL, NULL};
        size_t lens[3] = {4, 0, 0};
        int argc = 1;
        if (r->user) {
            argv[argc] = r->user;
            lens[argc++] = strlen(r->user);
        }
        argv[argc] = r->pass;
        lens[argc++] = strlen(r->pass);
        st = command(r, c, argc, argv, lens, deadline, &rep);
        if (st != MC_OK)
            return st;
        if (rep->type == REDIS_REPLY_ERROR) {
            bool safe = rep->str && !strstr(rep->str, r->pass) &&
                        !(r->user && strstr(rep->str, r->user));
            MC_LOG_ERROR("metadata: redis %s: authentication%s%s%s failed: %.200s (check "
                         "redis_password / MC_REDIS_PASSWORD and redis_username / "
                         "MC_REDIS_USERNAME)",
                         r->where, r->user ? " as user '" : "", r->user ? r->user : "",
                         r->user ? "'" : "", safe ? reply_text(rep) : "(server message withheld)");
            freeReplyObject(rep);
            return MC_ERR_PERMISSION;
        }
        freeReplyObject(rep);
    }
    if (r->db) {
        char db[16];
        snprintf(db, sizeof(db), "%u", r->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};
        st = command(r, c, 2, argv, lens, deadline, &rep);
        if (st != MC_OK)
            return st;
        if (rep->type == REDIS_REPLY_ERROR) {
            st = reply_code_is(rep, "NOAUTH") ? MC_ERR_PERMISSION : MC_ERR_INVALID_PARAMS;
            MC_LOG_ERROR("metadata: redis %s: SELECT %u refused: %.200s%s", r->where, r->db,
                         reply_text(rep),
                         st == MC_ERR_PERMISSION
                             ? " (set the password: redis_password / MC_REDIS_PASSWORD)"
                             : " (redis_db_index / MC_REDIS_DB_INDEX)");
            freeReplyObject(rep);
            return st;
        }
        freeReplyObject(rep);
    }
    return MC_OK;
}

static mc_status_t connect_new(const redis_impl_t *r, uint64_t deadline, redisContext **c_p)
{
    *c_p = NULL;
    uint64_t now = mc_now_ms();
    uint64_t ms = deadline > now ? deadline - now : 1;
    if (ms > REDIS_CONNECT_MS)
        ms = REDIS_CONNECT_MS;
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout(r->host, r->port, tv);
    if (!c)
        return MC_ERR_NO_MEMORY;
    if (c->err) {
        MC_LOG_WARN("metadata: redis %s: cannot connect: %s", r->where, c->errstr);
        redisFree(c);
        return MC_ERR_CONNECTION;
    }
    mc_status_t st = handshake(r, c, deadline);
    if (st != MC_OK) {
        redisFree(c);
        return st;
    }
    *c_p = c;
    return MC_OK;
}

static redisContext *pool_take(redis_impl_t *r)
{
    redisContext *c = NULL;
    pthread_mutex_lock(&r->mu);
    if (r->nidle > 0)
        c = r->idle[--r->nidle];
    pthread_mutex_unlock(&r->mu);
    return c;
}

static void pool_put(redis_impl_t *r, redisContext *c)
{
    pthread_mutex_lock(&r->mu);
    if (r->nidle < POOL_MAX) {
        r->idle[r->nidle++] = c;
        c = NULL;
    }
    pthread_mutex_unlock(&r->mu);
    if (c)
        redisFree(c);
}

/* One command through a pooled (or new) connection. A pooled connection that fails with
 * MC_ERR_CONNECTION is replaced by a new one once. */
static mc_status_t run(redis_impl_t *r, int argc, const char **argv, const size_t *lens,
                       redisReply **reply_p)
{
    uint64_t deadline = mc_now_ms() + r->timeout_ms;
    redisContext *c = pool_take(r);
    bool pooled = c != NULL;
    for (;;) {
        mc_status_t st;
        if (!c) {
            st = connect_new(r, deadline, &c);
            if (st != MC_OK)
                return st;
        }
        st = command(r, c, argc, argv, lens, deadline, reply_p);
        if (st == MC_OK) {
            pool_put(r, c);
            return MC_OK;
        }
        redisFree(c);
        c = NULL;
        if (!(pooled && st == MC_ERR_CONNECTION))
            return st;
        pooled = false;
        MC_LOG_DEBUG("metadata: redis %s: pooled connection lost, reconnecting", r->where);
    }
}

/* ---------------------------------------------------------------- ops */

static mc_status_t redis_get(void *impl, const char *key, char **value_p)
{
    redis_impl_t *r = impl;
    const char *argv[2] = {"GET", key};
    size_t lens[2] = {3, strlen(key)};
    redisReply *rep;
    mc_status_t st = run(r, 2, argv, lens, &rep);
    if (st != MC_OK)
        return st;
    switch (rep->type) {
    case REDIS_REPLY_NIL:
        st = MC_ERR_OBJECT_NOT_FOUND;
        break;
    case REDIS_REPLY_STRING:
        if (rep->len > MC_META_VALUE_MAX) {
            st = MC_ERR_TOO_LARGE;
            break;
        }
        *value_p = mc_malloc(rep->len + 1);
        if (!*value_p) {
            st = MC_ERR_NO_MEMORY;
            break;
        }
        memcpy(*value_p, rep->str, rep->len);
        (*value_p)[rep->len] = '\0';
        break;
    case REDIS_REPLY_ERROR:
        st = error_reply_status(r, "GET", key, rep);
        break;
    default:
        MC_LOG_WARN("metadata: redis %s: GET %s: unexpected reply type %d", r->where, key,
                    rep->type);
        st = MC_ERR_PROTOCOL;
        break;
    }
    freeReplyObject(rep);
    return st;
}

static mc_status_t redis_put(void *impl, const char *key, const char *value, size_t value_len)
{
    redis_impl_t *r = impl;
    const char *argv[3] = {"SET", key, value};
    size_t lens[3] = {3, strlen(key), value_len};
    redisReply *rep;
    mc_status_t st = run(r, 3, argv, lens, &rep);
    if (st != MC_OK)
        return st;
    if (rep->type == REDIS_REPLY_ERROR) {
        st = error_reply_status(r, "SET", key, rep);
    } else if (rep->type != REDIS_REPLY_STATUS) {
        MC_LOG_WARN("metadata: redis %s: SET %s: unexpected reply type %d", r->where, key,
                    rep->type);
        st = MC_ERR_PROTOCOL;
    }
    freeReplyObject(rep);
    return st;
}

static mc_status_t redis_del(void *impl, const char *key)
{
    redis_impl_t *r = impl;
    const char *argv[2] = {"DEL", key};
    size_t lens[2] = {3, strlen(key)};
    redisReply *rep;
    mc_status_t st = run(r, 2, argv, lens, &rep);
    if (st != MC_OK)
        return st;
    if (rep->type == REDIS_REPLY_ERROR) {
        st = error_reply_status(r, "DEL", key, rep);
    } else if (rep->type != REDIS_REPLY_INTEGER) {
        MC_LOG_WARN("metadata: redis %s: DEL %s: unexpected reply type %d", r->where, key,
                    rep->type);
        st = MC_ERR_PROTOCOL;
    }
    freeReplyObject(rep);
    return st;
}

static void redis_close(void *impl)
{
    redis_impl_t *r = impl;
    if (!r)
        return;
    for (int i = 0; i < r->nidle; i++)
        redisFree(r->idle[i]);
    pthread_mutex_destroy(&r->mu);
    free_secret(r->user);
    free_secret(r->pass);
    mc_free(r);
}

/* Take the option's secret unless the URI gave one too. */
static mc_status_t merge_secret(char **from_uri, const char *from_opts, const char *what)
{
    if (!from_opts || !*from_opts)
        return MC_OK;
    if (*from_uri) {
        MC_LOG_ERROR("metadata: redis %s given both in the connection string and in the "
                     "config (redis_%s / MC_REDIS_%s): give it once",
                     what, what, strcmp(what, "password") == 0 ? "PASSWORD" : "USERNAME");
        return MC_ERR_INVALID_PARAMS;
    }
    *from_uri = mc_strdup(from_opts);
    return *from_uri ? MC_OK : MC_ERR_NO_MEMORY;
}

mc_status_t mc_meta_redis_open(const char *rest, const mc_meta_opts_t *opts, void **impl_p)
{
    *impl_p = NULL;
    if (opts->redis_db_index > MC_META_REDIS_DB_MAX) {
        MC_LOG_ERROR("metadata: redis database index %u out of range (0..%d; redis_db_index / "
                     "MC_REDIS_DB_INDEX)",
                     opts->redis_db_index, MC_META_REDIS_DB_MAX);
        return MC_ERR_INVALID_PARAMS;
    }
    redis_impl_t *r = MC_NEW(redis_impl_t);
    if (!r)
        return MC_ERR_NO_MEMORY;
    int db;
    mc_status_t st = parse_uri(rest, r, &r->user, &r->pass, &db);
    if (st == MC_OK)
        st = merge_secret(&r->pass, opts->redis_password, "password");
    if (st == MC_OK)
        st = merge_secret(&r->user, opts->redis_username, "username");
    if (st == MC_OK && db >= 0 && opts->redis_db_index && (uint32_t)db != opts->redis_db_index) {
        MC_LOG_ERROR("metadata: redis database %d in the connection string but %u in the "
                     "config (redis_db_index / MC_REDIS_DB_INDEX)",
                     db, opts->redis_db_index);
        st = MC_ERR_INVALID_PARAMS;
    }
    if (st != MC_OK) {
        free_secret(r->user);
        free_secret(r->pass);
        mc_free(r);
        return st;
    }
    r->db = db >= 0 ? (uint32_t)db : opts->redis_db_index;
    if (r->user && !r->pass) {
        /* upstream sends AUTH only with a password and ignores a lone username */
        MC_LOG_WARN("metadata: redis %s: a username without a password is ignored (no AUTH)",
                    r->where);
        free_secret(r->user);
        r->user = NULL;
    }
    r->timeout_ms = opts->timeout_ms;
    pthread_mutex_init(&r->mu, NULL);
    *impl_p = r;
    return MC_OK;
}

const mc_meta_ops_t mc_meta_redis_ops = {
    .name = "redis",
    .get = redis_get,
    .put = redis_put,
    .del = redis_del,
    .close = redis_close,
};
