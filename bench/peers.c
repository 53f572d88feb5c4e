/* Peer measurements (see peers.h). Everything here is benchmark tooling: it prints nothing but
 * the JSON lines asked for and short diagnostics on stderr. */
#include "peers.h"

#include "bench_stats.h"

#include "common/alloc.h"
#include "common/hash.h"
#include "common/net.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

static void peer_init(mc_peer_result_t *r, const char *peer, size_t block)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->peer, sizeof(r->peer), "%s", peer);
    r->block = block;
}

static mc_status_t peer_fail(mc_peer_result_t *r, mc_status_t st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static mc_status_t peer_fail(mc_peer_result_t *r, mc_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->error, sizeof(r->error), fmt, ap);
    va_end(ap);
    r->ok = 0;
    fprintf(stderr, "peer %s: %s\n", r->peer, r->error);
    return st;
}

/* Sorts t[0..n) (seconds per op) and fills the median/best figures of r. */
static void peer_summarize(mc_peer_result_t *r, double *t, unsigned n, size_t bytes_per_op)
{
    qsort(t, n, sizeof(double), mc_bench_cmp_double);
    double med = t[n / 2];
    r->runs = n;
    if (bytes_per_op) {
        r->gib_s = (double)bytes_per_op / med / GIB;
        r->gib_s_best = (double)bytes_per_op / t[0] / GIB;
    }
    r->req_s = 1.0 / med;
    r->p50_us = med * 1e6;
    r->p99_us = t[(size_t)((n - 1) * 0.99)] * 1e6;
    r->ok = 1;
}

/* ---------------------------------------------------------------- small process helpers -- */

long mc_peer_status_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    size_t flen = strlen(field);
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kb = -1;
    while (fgets(line, sizeof(line), f)) {
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            kb = strtol(line + flen + 1, NULL, 10);
            break;
        }
    }
    fclose(f);
    return kb;
}

long mc_peer_rss_kb(pid_t pid)
{
    return mc_peer_status_kb(pid, "VmRSS");
}

void mc_peer_date(char *out, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

void mc_peer_host(char *out, size_t len)
{
    if (gethostname(out, len) != 0 || !out[0])
        snprintf(out, len, "unknown");
    out[len - 1] = '\0';
}

char *mc_peer_which(const char *name)
{
    const char *path = getenv("PATH");
    char *dirs = mc_malloc(strlen(path ? path : "") + 64);
    if (!dirs)
        return NULL;
    sprintf(dirs, "%s:/usr/bin:/usr/sbin:/usr/local/bin", path ? path : "");
    char *save = NULL, *found = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char cand[1024];
        snprintf(cand, sizeof(cand), "%s/%s", d, name);
        if (access(cand, X_OK) == 0) {
            found = mc_strdup(cand);
            break;
        }
    }
    mc_free(dirs);
    return found;
}

void mc_peer_stop_child(pid_t pid, unsigned grace_ms)
{
    if (pid <= 0)
        return;
    kill(pid, SIGTERM);
    uint64_t deadline = mc_now_ms() + grace_ms;
    for (;;) {
        int wst;
        pid_t r = waitpid(pid, &wst, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return;
        if (mc_now_ms() >= deadline)
            break;
        mc_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

/* vfork + exec argv. The child dies with us (PR_SET_PDEATHSIG). stdout goes to *out_fd_p (a
 * pipe) when out_fd_p is not NULL, else to /dev/null (or stderr with MC_PEERS_VERBOSE).
 * vfork, not fork: a fork write-protects every private page of this process until the child
 * execs, and the benchmark's next writes into its buffers (and the kernel's receives into them)
 * then fault page by page, which on this VM made the store rounds after a peer 3x slower. The
 * child only makes system calls before execv (everything it needs is computed before). */
static pid_t peer_spawn(char *const argv[], int *out_fd_p)
{
    int pfd[2] = {-1, -1};
    if (out_fd_p && pipe2(pfd, O_CLOEXEC) != 0)
        return -1;
    pid_t parent = getpid();
    int verbose = getenv("MC_PEERS_VERBOSE") != NULL;
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    int out_fd = out_fd_p ? pfd[1] : verbose ? 2 : devnull;
    int err_fd = verbose ? 2 : devnull;
    pid_t pid = vfork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        if (devnull >= 0)
            dup2(devnull, 0);
        if (err_fd >= 0 && err_fd != 2)
            dup2(err_fd, 2);
        if (out_fd >= 0)
            dup2(out_fd, 1);
        execv(argv[0], argv);
        _exit(127);
    }
    if (devnull >= 0)
        close(devnull);
    if (out_fd_p) {
        close(pfd[1]);
        if (pid < 0) {
            close(pfd[0]);
            return -1;
        }
        *out_fd_p = pfd[0];
    }
    return pid;
}

/* True once something listens on 127.0.0.1:port (binding it fails with EADDRINUSE). Probing by
 * bind, not connect, so that one-shot servers (iperf3 -1) do not see a stray client. */
static int peer_port_listening(uint16_t port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int busy = bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 && errno == EADDRINUSE;
    close(fd);
    return busy;
}

/* True once a connect to the unix socket at path succeeds (the server sees a client that
 * leaves at once). */
static int peer_unix_listening(const char *path)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int up = connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return up;
}

/* Poll until the child listens on port (on the unix socket unix_path when not NULL), it exits,
 * or timeout_ms passes. */
static mc_status_t peer_wait_listening(pid_t pid, uint16_t port, const char *unix_path,
                                       unsigned timeout_ms)
{
    uint64_t deadline = mc_now_ms() + timeout_ms;
    while (mc_now_ms() < deadline) {
        if (unix_path ? peer_unix_listening(unix_path) : peer_port_listening(port))
            return MC_OK;
        int wst;
        if (waitpid(pid, &wst, WNOHANG) == pid)
            return MC_ERR_CONNECTION;
        mc_sleep_ms(10);
    }
    return MC_ERR_TIMEOUT;
}

/* Read everything from fd until EOF into a NUL-terminated heap string (capped at cap bytes). */
static char *peer_slurp(int fd, size_t cap)
{
    size_t len = 0, size = 65536;
    char *buf = mc_malloc(size);
    if (!buf)
        return NULL;
    for (;;) {
        if (len + 1 >= size) {
            if (size >= cap)
                break;
            char *nb = mc_realloc(buf, size * 2);
            if (!nb)
                break;
            buf = nb;
            size *= 2;
        }
        ssize_t n = read(fd, buf + len, size - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return buf;
}

/* ------------------------------------------------------------------------------ memcpy -- */

mc_status_t mc_peer_memcpy(size_t size, uint64_t bytes_per_run, unsigned runs,
                           mc_peer_result_t *r)
{
    peer_init(r, "memcpy", size);
    if (size == 0)
        return peer_fail(r, MC_ERR_INVALID_PARAMS, "size 0");
    if (!bytes_per_run)
        bytes_per_run = 4ull << 30;
    if (!runs)
        runs = 9;
    if (runs > 1000)
        runs = 1000;
    char *src = mc_pages_alloc(size, 1), *dst = mc_pages_alloc(size, 1);
    double *t = mc_calloc(runs, sizeof(double));
    if (!src || !dst || !t) {
        if (src)
            mc_pages_free(src, size);
        if (dst)
            mc_pages_free(dst, size);
        mc_free(t);
        return peer_fail(r, MC_ERR_NO_MEMORY, "cannot allocate 2 x %zu bytes", size);
    }
    memset(src, 0x5a, size);
    memset(dst, 0xa5, size);
    for (int i = 0; i < 3; i++)
        memcpy(dst, src, size);
    uint64_t iters = bytes_per_run / size;
    if (iters < 1)
        iters = 1;
    for (unsigned k = 0; k < runs; k++) {
        uint64_t t0 = mc_now_ns();
        for (uint64_t i = 0; i < iters; i++) {
            memcpy(dst, src, size);
            __asm__ volatile("" ::: "memory");
        }
        t[k] = (double)(mc_now_ns() - t0) / 1e9 / (double)iters; /* seconds per copy */
    }
    peer_summarize(r, t, runs, size);
    r->p50_us = r->p99_us = 0; /* per-copy latency is not a meaningful figure here */
    mc_pages_free(src, size);
    mc_pages_free(dst, size);
    mc_free(t);
    return MC_OK;
}

/* --------------------------------------------------------------------------- memcached -- */

/* Minimal buffered reader over a blocking socket for the memcached text protocol. */
typedef struct mcd_conn {
    int fd;
    char buf[65536];
    size_t off, len;
} mcd_conn_t;

#define MCD_DEADLINE_NS (30ull * 1000000000ull)

static mc_status_t mcd_fill(mcd_conn_t *c)
{
    if (c->off == c->len)
        c->off = c->len = 0;
    ssize_t n;
    do {
        n = recv(c->fd, c->buf + c->len, sizeof(c->buf) - c->len, 0);
    } while (n < 0 && errno == EINTR);
    if (n <= 0)
        return MC_ERR_CONNECTION;
    c->len += (size_t)n;
    return MC_OK;
}

/* One "\r\n"-terminated line (without it) into out (cap bytes). */
static mc_status_t mcd_line(mcd_conn_t *c, char *out, size_t cap)
{
    size_t n = 0;
    for (;;) {
        while (c->off < c->len) {
            char ch = c->buf[c->off++];
            if (ch == '\n') {
                if (n && out[n - 1] == '\r')
                    n--;
                out[n] = '\0';
                return MC_OK;
            }
            if (n + 1 >= cap)
                return MC_ERR_PROTOCOL;
            out[n++] = ch;
        }
        if (c->off == c->len)
            c->off = c->len = 0;
        mc_status_t st = mcd_fill(c);
        if (st != MC_OK)
            return st;
    }
}

/* Exactly len bytes: buffered ones first, the rest straight into dst. */
static mc_status_t mcd_read(mcd_conn_t *c, void *dst, size_t len)
{
    size_t have = c->len - c->off;
    if (have > len)
        have = len;
    memcpy(dst, c->buf + c->off, have);
    c->off += have;
    if (len == have)
        return MC_OK;
    return mc_net_recv_all(c->fd, (char *)dst + have, len - have, mc_now_ns() + MCD_DEADLINE_NS);
}

static mc_status_t mcd_send(mcd_conn_t *c, const void *p, size_t len)
{
    return mc_net_send_all(c->fd, p, len, mc_now_ns() + MCD_DEADLINE_NS);
}

static mc_status_t mcd_set(mcd_conn_t *c, const char *key, const char *val, size_t len)
{
    char hdr[256], line[256];
    int hl = snprintf(hdr, sizeof(hdr), "set %s 0 0 %zu\r\n", key, len);
    mc_status_t st = mcd_send(c, hdr, (size_t)hl);
    if (st == MC_OK)
        st = mcd_send(c, val, len);
    if (st == MC_OK)
        st = mcd_send(c, "\r\n", 2);
    if (st == MC_OK)
        st = mcd_line(c, line, sizeof(line));
    if (st == MC_OK && strcmp(line, "STORED") != 0) {
        fprintf(stderr, "memcached set reply: %s\n", line);
        st = MC_ERR_WRITE_FAIL;
    }
    return st;
}

/* GET key into out (cap bytes); *len_p receives the value length. */
static mc_status_t mcd_get(mcd_conn_t *c, const char *key, char *out, size_t cap, size_t *len_p)
{
    char req[256], line[512], trailer[7];
    int rl = snprintf(req, sizeof(req), "get %s\r\n", key);
    mc_status_t st = mcd_send(c, req, (size_t)rl);
    if (st == MC_OK)
        st = mcd_line(c, line, sizeof(line));
    if (st != MC_OK)
        return st;
    if (strcmp(line, "END") == 0)
        return MC_ERR_OBJECT_NOT_FOUND;
    char rkey[251];
    unsigned flags;
    unsigned long long n;
    if (sscanf(line, "VALUE %250s %u %llu", rkey, &flags, &n) != 3 || n > cap)
        return MC_ERR_PROTOCOL;
    st = mcd_read(c, out, (size_t)n);
    if (st == MC_OK)
        st = mcd_read(c, trailer, sizeof(trailer));
    if (st == MC_OK && memcmp(trailer, "\r\nEND\r\n", 7) != 0)
        st = MC_ERR_PROTOCOL;
    *len_p = (size_t)n;
    return st;
}

struct mc_peer_memcached {
    pid_t pid;
    int fd;
    mcd_conn_t *c;
    size_t size;
    unsigned keys;
    char *val, *in; /* the values set (all keys hold val), the GET buffer */
    uint64_t want;  /* mc_hash64 of val */
};

void mc_peer_memcached_stop(mc_peer_memcached_t *m)
{
    if (!m)
        return;
    if (m->fd >= 0)
        close(m->fd);
    if (m->pid > 0)
        mc_peer_stop_child(m->pid, 3000);
    mc_free(m->c);
    mc_pages_free(m->val, m->size); /* NULL is fine */
    mc_pages_free(m->in, m->size);
    mc_free(m);
}

mc_status_t mc_peer_memcached_start(size_t size, unsigned keys, mc_peer_memcached_t **m_p,
                                    char *err, size_t err_len)
{
    *m_p = NULL;
    if (keys == 0)
        keys = 1;
    if (keys > 64)
        keys = 64;
    if (size == 0 || size > (1ull << 30)) {
        snprintf(err, err_len, "size %zu out of range", size);
        return MC_ERR_INVALID_PARAMS;
    }
    char *bin = mc_peer_which("memcached");
    if (!bin) {
        snprintf(err, err_len, "memcached not installed");
        return MC_ERR_NOT_SUPPORTED;
    }
    uint16_t port;
    mc_status_t st = mc_net_free_port(&port);
    if (st != MC_OK) {
        mc_free(bin);
        snprintf(err, err_len, "no free port");
        return st;
    }
    char port_s[16], mem_s[32], item_s[32];
    snprintf(port_s, sizeof(port_s), "%u", port);
    size_t mb = (size >> 20) + 1;
    size_t need_mb = mb * (keys + 1) * 2; /* slab overhead: twice what the values hold */
    snprintf(mem_s, sizeof(mem_s), "%zu", need_mb < 1024 ? 1024 : need_mb);
    snprintf(item_s, sizeof(item_s), "%zum", mb + 1 < 64 ? 64 : mb + 1);
    char *argv[16];
    int a = 0;
    argv[a++] = bin;
    argv[a++] = "-l";
    argv[a++] = "127.0.0.1";
    argv[a++] = "-p";
    argv[a++] = port_s;
    argv[a++] = "-U";
    argv[a++] = "0";
    argv[a++] = "-m";
    argv[a++] = mem_s;
    argv[a++] = "-I";
    argv[a++] = item_s;
    argv[a++] = "-L"; /* large pages: memcached preallocates its memory and, where transparent
                         huge pages are enabled (THP "always"), gets it on huge pages */
    if (geteuid() == 0) {
        argv[a++] = "-u";
        argv[a++] = "root";
    }
    argv[a] = NULL;

    mc_peer_memcached_t *m = MC_NEW(mc_peer_memcached_t);
    if (!m) {
        mc_free(bin);
        snprintf(err, err_len, "no memory");
        return MC_ERR_NO_MEMORY;
    }
    *m = (mc_peer_memcached_t){.pid = peer_spawn(argv, NULL), .fd = -1, .size = size,
                               .keys = keys};
    mc_free(bin);
    if (m->pid < 0) {
        snprintf(err, err_len, "cannot start memcached: %s", strerror(errno));
        mc_peer_memcached_stop(m);
        return MC_ERR_IO;
    }
    st = peer_wait_listening(m->pid, port, NULL, 5000);
    if (st != MC_OK) {
        snprintf(err, err_len, "memcached did not start listening on port %u", port);
        goto fail;
    }
    st = mc_net_connect("127.0.0.1", port, 2000, &m->fd);
    if (st != MC_OK) {
        snprintf(err, err_len, "cannot connect to memcached");
        goto fail;
    }
    m->c = MC_NEW(mcd_conn_t);
    m->val = mc_pages_alloc(size, 1);
    m->in = mc_pages_alloc(size, 1);
    if (!m->c || !m->val || !m->in) {
        snprintf(err, err_len, "no memory");
        st = MC_ERR_NO_MEMORY;
        goto fail;
    }
    m->c->fd = m->fd;
    for (size_t i = 0; i < size; i++)
        m->val[i] = (char)('a' + (i * 7 + i / 4096) % 26);
    m->want = mc_hash64(m->val, size);
    memset(m->in, 0, size);
    for (unsigned k = 0; k < keys && st == MC_OK; k++)
        st = mc_peer_memcached_set(m, k, NULL);
    if (st != MC_OK) {
        snprintf(err, err_len, "memcached SET of %zu bytes failed", size);
        goto fail;
    }
    /* one verified GET (fully checked), so that the timed ones below may check less */
    size_t got = 0;
    st = mcd_get(m->c, "mc_bench_key_0", m->in, size, &got);
    if (st != MC_OK || got != size || mc_hash64(m->in, size) != m->want) {
        st = st != MC_OK ? st : MC_ERR_CHECKSUM;
        snprintf(err, err_len, "memcached GET returned wrong data (len %zu)", got);
        goto fail;
    }
    *m_p = m;
    return MC_OK;
fail:
    mc_peer_memcached_stop(m);
    return st;
}

mc_status_t mc_peer_memcached_set(mc_peer_memcached_t *m, unsigned k, double *secs)
{
    char key[32];
    snprintf(key, sizeof(key), "mc_bench_key_%u", k % m->keys);
    uint64_t t0 = mc_now_ns();
    mc_status_t st = mcd_set(m->c, key, m->val, m->size);
    if (secs)
        *secs = (double)(mc_now_ns() - t0) / 1e9;
    return st;
}

mc_status_t mc_peer_memcached_get(mc_peer_memcached_t *m, unsigned k, double *secs)
{
    char key[32];
    snprintf(key, sizeof(key), "mc_bench_key_%u", k % m->keys);
    m->in[0] ^= 1; /* so a GET that delivered nothing is caught below */
    size_t got = 0;
    uint64_t t0 = mc_now_ns();
    mc_status_t st = mcd_get(m->c, key, m->in, m->size, &got);
    *secs = (double)(mc_now_ns() - t0) / 1e9;
    if (st == MC_OK && (got != m->size || m->in[0] != m->val[0]))
        st = MC_ERR_CHECKSUM;
    return st;
}

mc_status_t mc_peer_memcached(size_t size, unsigned keys, unsigned runs, mc_peer_result_t *get_r,
                              mc_peer_result_t *set_r)
{
    mc_peer_result_t dummy;
    if (!set_r)
        set_r = &dummy;
    char get_name[32];
    if (keys <= 1)
        snprintf(get_name, sizeof(get_name), "memcached_get");
    else
        snprintf(get_name, sizeof(get_name), "memcached_get_%ukeys", keys > 64 ? 64 : keys);
    peer_init(get_r, get_name, size);
    peer_init(set_r, "memcached_set", size);
    if (!runs)
        runs = 20;
    if (runs > 10000)
        runs = 10000;
    mc_peer_memcached_t *m = NULL;
    char err[160];
    mc_status_t st = mc_peer_memcached_start(size, keys, &m, err, sizeof(err));
    if (st != MC_OK)
        return peer_fail(get_r, st, "%s", err);
    double *tg = mc_calloc(runs, sizeof(double)), *ts = mc_calloc(runs, sizeof(double));
    if (!tg || !ts) {
        st = peer_fail(get_r, MC_ERR_NO_MEMORY, "no memory");
        goto out;
    }
    /* SET timed `runs` times too (as the probes did), then timed GETs, the keys in turn */
    for (unsigned k = 0; k < runs && st == MC_OK; k++)
        st = mc_peer_memcached_set(m, k, &ts[k]);
    if (st != MC_OK) {
        peer_fail(get_r, st, "memcached SET of %zu bytes failed", size);
        goto out;
    }
    for (unsigned k = 0; k < runs && st == MC_OK; k++)
        st = mc_peer_memcached_get(m, k + 1, &tg[k]);
    if (st == MC_OK && mc_hash64(m->in, size) != m->want)
        st = MC_ERR_CHECKSUM;
    if (st != MC_OK) {
        peer_fail(get_r, st, "memcached GET failed: %s", mc_status_name(st));
        goto out;
    }
    peer_summarize(get_r, tg, runs, size);
    peer_summarize(set_r, ts, runs, size);
out:
    mc_peer_memcached_stop(m);
    mc_free(tg);
    mc_free(ts);
    return st;
}

/* ------------------------------------------------------------------------------ iperf3 -- */

mc_status_t mc_peer_iperf3(unsigned seconds, mc_peer_result_t *r)
{
    peer_init(r, "iperf3", 0);
    if (!seconds)
        seconds = 3;
    if (seconds > 600)
        seconds = 600;
    char *bin = mc_peer_which("iperf3");
    if (!bin)
        return peer_fail(r, MC_ERR_NOT_SUPPORTED, "iperf3 not installed");
    uint16_t port;
    mc_status_t st = mc_net_free_port(&port);
    if (st != MC_OK) {
        mc_free(bin);
        return peer_fail(r, st, "no free port");
    }
    char port_s[16], secs_s[16];
    snprintf(port_s, sizeof(port_s), "%u", port);
    snprintf(secs_s, sizeof(secs_s), "%u", seconds);
    char *sargv[] = {bin, "-s", "-1", "-B", "127.0.0.1", "-p", port_s, NULL};
    pid_t spid = peer_spawn(sargv, NULL);
    if (spid < 0) {
        mc_free(bin);
        return peer_fail(r, MC_ERR_IO, "cannot start iperf3 server");
    }
    pid_t cpid = -1;
    char *out = NULL;
    json_t *root = NULL;
    st = peer_wait_listening(spid, port, NULL, 5000);
    if (st != MC_OK) {
        peer_fail(r, st, "iperf3 server did not start on port %u", port);
        goto done;
    }
    char *cargv[] = {bin, "-c", "127.0.0.1", "-p", port_s, "-P", "1", "-t", secs_s, "-J", NULL};
    int ofd = -1;
    cpid = peer_spawn(cargv, &ofd);
    if (cpid < 0) {
        st = peer_fail(r, MC_ERR_IO, "cannot start iperf3 client");
        goto done;
    }
    out = peer_slurp(ofd, 16u << 20);
    close(ofd);
    int wst = 0;
    waitpid(cpid, &wst, 0);
    cpid = -1;
    json_error_t jerr;
    root = out ? json_loads(out, 0, &jerr) : NULL;
    if (!root) {
        st = peer_fail(r, MC_ERR_PROTOCOL, "iperf3 -J output does not parse");
        goto done;
    }
    json_t *err = json_object_get(root, "error");
    json_t *bps = json_object_get(json_object_get(json_object_get(root, "end"), "sum_received"),
                                  "bits_per_second");
    if (json_is_string(err) || !json_is_number(bps)) {
        st = peer_fail(r, MC_ERR_PROTOCOL, "iperf3: %s",
                       json_is_string(err) ? json_string_value(err) : "no end.sum_received");
        goto done;
    }
    r->gib_s = r->gib_s_best = json_number_value(bps) / 8.0 / GIB;
    r->runs = 1;
    r->ok = 1;
done:
    if (cpid > 0)
        mc_peer_stop_child(cpid, 1000);
    mc_peer_stop_child(spid, 1000);
    json_decref(root);
    mc_free(out);
    mc_free(bin);
    return st;
}

/* ------------------------------------------------------------------------------- redis -- */

/* Find the CSV row of one test ("SET"/"GET") in redis-benchmark --csv output and read rps and
 * p50/p99 latency (ms). Columns: test,rps,avg,min,p50,p95,p99,max. */
static int redis_csv_row(const char *csv, const char *test, mc_peer_result_t *r, size_t size)
{
    char pat[32];
    snprintf(pat, sizeof(pat), "\"%s\",", test);
    const char *row = strstr(csv, pat);
    if (!row)
        return -1;
    double v[8] = {0};
    if (sscanf(row + strlen(pat), "\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\",\"%lf\"", &v[1],
               &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) < 7)
        return -1;
    r->req_s = v[1];
    r->gib_s = r->gib_s_best = v[1] * (double)size / GIB;
    r->p50_us = v[4] * 1000.0;
    r->p99_us = v[6] * 1000.0;
    r->runs = 1;
    r->ok = 1;
    return 0;
}

mc_status_t mc_peer_redis_benchmark(size_t size, unsigned clients, unsigned requests,
                                    unsigned pipeline, mc_peer_result_t *set_r,
                                    mc_peer_result_t *get_r)
{
    return mc_peer_redis_benchmark_via(MC_PEER_REDIS_TCP, size, clients, requests, pipeline,
                                       set_r, get_r);
}

mc_status_t mc_peer_redis_benchmark_via(mc_peer_redis_via_t via, size_t size, unsigned clients,
                                        unsigned requests, unsigned pipeline,
                                        mc_peer_result_t *set_r, mc_peer_result_t *get_r)
{
    int unix_sock = via == MC_PEER_REDIS_UNIX;
    peer_init(set_r, unix_sock ? "redis_unix_set" : "redis_set", size);
    peer_init(get_r, unix_sock ? "redis_unix_get" : "redis_get", size);
    if (!clients)
        clients = 50;
    if (!requests)
        requests = 100000;
    if (!pipeline)
        pipeline = 1;
    char *srv = mc_peer_which("redis-server");
    char *cli = mc_peer_which("redis-benchmark");
    if (!srv || !cli) {
        mc_free(srv);
        mc_free(cli);
        return peer_fail(get_r, MC_ERR_NOT_SUPPORTED, "redis-server/redis-benchmark not installed");
    }
    /* tcp: a free loopback port. unix: port 0 (no TCP listener) and the socket in a private
     * directory (mkdtemp: mode 0700), both removed at the end. */
    uint16_t port = 0;
    char dir[96] = "", sock[sizeof(((struct sockaddr_un *)0)->sun_path)] = "";
    mc_status_t st = MC_OK;
    if (unix_sock) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof(dir), "%s/mc_redis_XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(dir)) {
            dir[0] = '\0';
            st = MC_ERR_IO;
        } else if ((size_t)snprintf(sock, sizeof(sock), "%s/redis.sock", dir) >= sizeof(sock)) {
            sock[0] = '\0'; /* TMPDIR too long for a socket path; never unlink a truncated one */
            st = MC_ERR_INVALID_PARAMS;
        }
    } else {
        st = mc_net_free_port(&port);
    }
    char port_s[16], size_s[32], cl_s[16], n_s[16], p_s[16];
    snprintf(port_s, sizeof(port_s), "%u", port);
    snprintf(size_s, sizeof(size_s), "%zu", size);
    snprintf(cl_s, sizeof(cl_s), "%u", clients);
    snprintf(n_s, sizeof(n_s), "%u", requests);
    snprintf(p_s, sizeof(p_s), "%u", pipeline);
    char *sargv_tcp[] = {srv,  "--port",       port_s, "--bind",      "127.0.0.1", "--save",
                         "",   "--appendonly", "no",   "--daemonize", "no",        NULL};
    char *sargv_unix[] = {srv,      "--port",       "0",  "--unixsocket", sock,
                          "--unixsocketperm", "700", "--save", "",       "--appendonly",
                          "no",     "--daemonize",  "no", NULL};
    pid_t spid = -1;
    char *out = NULL;
    if (st != MC_OK) {
        peer_fail(get_r, st, "%s", unix_sock ? "no private socket directory" : "no free port");
        goto done;
    }
    spid = peer_spawn(unix_sock ? sargv_unix : sargv_tcp, NULL);
    if (spid < 0) {
        st = peer_fail(get_r, MC_ERR_IO, "cannot start redis-server");
        goto done;
    }
    st = peer_wait_listening(spid, port, unix_sock ? sock : NULL, 5000);
    if (st != MC_OK && unix_sock) {
        peer_fail(get_r, st, "redis-server %s on unix socket %s (no --unixsocket support?)",
                  st == MC_ERR_CONNECTION ? "exited before listening" : "did not listen", sock);
        goto done;
    }
    if (st != MC_OK) {
        peer_fail(get_r, st, "redis-server did not start on port %u", port);
        goto done;
    }
    char *cargv_tcp[] = {cli, "-h", "127.0.0.1", "-p", port_s, "-t", "set,get", "-d", size_s,
                         "-c", cl_s, "-n", n_s, "-P", p_s, "--csv", NULL};
    char *cargv_unix[] = {cli, "-s", sock, "-t", "set,get", "-d", size_s,
                          "-c", cl_s, "-n", n_s, "-P", p_s, "--csv", NULL};
    int ofd = -1;
    pid_t cpid = peer_spawn(unix_sock ? cargv_unix : cargv_tcp, &ofd);
    if (cpid < 0) {
        st = peer_fail(get_r, MC_ERR_IO, "cannot start redis-benchmark");
        goto done;
    }
    out = peer_slurp(ofd, 1u << 20);
    close(ofd);
    waitpid(cpid, NULL, 0);
    if (!out || redis_csv_row(out, "SET", set_r, size) != 0 ||
        redis_csv_row(out, "GET", get_r, size) != 0)
        st = peer_fail(get_r, MC_ERR_PROTOCOL, "cannot parse redis-benchmark --csv output");
done:
    if (spid > 0)
        mc_peer_stop_child(spid, 3000);
    if (sock[0])
        unlink(sock); /* redis-server removes it on a clean shutdown; not after SIGKILL */
    if (dir[0])
        rmdir(dir);
    mc_free(out);
    mc_free(srv);
    mc_free(cli);
    return st;
}

/* -------------------------------------------------------------------------------- JSON -- */

void mc_peer_print_json(const mc_peer_result_t *r)
{
    char date[32], host[256];
    mc_peer_date(date, sizeof(date));
    mc_peer_host(host, sizeof(host));
    json_t *o = json_object();
    json_object_set_new(o, "bench", json_string("peer"));
    json_object_set_new(o, "peer", json_string(r->peer[0] ? r->peer : "?"));
    json_object_set_new(o, "block", json_integer((json_int_t)r->block));
    json_object_set_new(o, "ok", json_boolean(r->ok));
    if (r->ok) {
        json_object_set_new(o, "runs", json_integer(r->runs));
        json_object_set_new(o, "gib_s", json_real(r->gib_s));
        json_object_set_new(o, "gib_s_best", json_real(r->gib_s_best));
        json_object_set_new(o, "req_s", json_real(r->req_s));
        json_object_set_new(o, "p50_us", json_real(r->p50_us));
        json_object_set_new(o, "p99_us", json_real(r->p99_us));
    } else {
        json_object_set_new(o, "error", json_string(r->error));
    }
    json_object_set_new(o, "date", json_string(date));
    json_object_set_new(o, "host", json_string(host));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(6));
    if (s) {
        printf("%s\n", s);
        fflush(stdout);
        free(s);
    }
    json_decref(o);
}
