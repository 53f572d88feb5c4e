/* tcp transport: epoll event loops serving requests and receiving responses; client
 * connection pools per peer. Design in transport.h; frame in tcp_frame.h. Descriptor fetches
 * (GET_DESC) and control requests (NOTIFY, PROBE: the `control` op, notify.c) use short
 * connections of their own; the server queues received notifications with mc_te_notify_push
 * (notify_mu, a leaf lock).
 *
 * Every connection, pooled or short, starts with the cluster handshake (common/auth.h): the
 * server sends HELLO on accept and parses frames only after a valid PROOF (state S_AUTH);
 * pooled client connections run the client half non-blocking where their answers are
 * received (cli_handshake), short connections use mc_auth_connect. The frame path itself is
 * unchanged. The listener's
 * budgets (docs/internals/transfer-engine.md, "Authentication and connection budgets") are
 * enforced by each loop's sweep (srv_budget) and, at the connection cap, by the acceptor
 * (srv_displace).
 *
 * Lock order: client connection mu -> batch mu (via mc_te_slice_done) -> peer mu (via
 * mc_te_peer_invalidate). Server connections belong to one loop thread and have no lock.
 */
#include "te/transport.h"

#include "common/alloc.h"
#include "common/auth.h"
#include "common/buf.h"
#include "common/grant.h"
#include "common/hash.h"
#include "common/log.h"
#include "common/payload.h"
#include "common/net.h"
#include "common/time.h"
#include "te/tenant_windows.h"
#include "te/te_hashed.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define RXBUF_SIZE (256u << 10)
#define DIRECT_MIN (64u << 10)        /* payloads at least this big bypass the rx buffer */
#define MAX_IOV 256
#define SRV_TX_MAX_ENTRIES 4096       /* backpressure: stop parsing requests beyond these */
#define SRV_TX_MAX_BYTES (64ull << 20)
#define SWEEP_NS (20ull * 1000000)
#define RECONNECT_BACKOFF_NS (100ull * 1000000)
#define READ_BUDGET (32ull << 20)     /* bytes per event before yielding to other connections */
#define HANDSHAKE_NS ((uint64_t)MC_AUTH_HANDSHAKE_TIMEOUT_MS * 1000000ull)
#define CAP_WARN_NS (10ull * 1000000000) /* at most one "connection cap" warning this often */
#define SPREAD_BYTES (1ull << 20)     /* a batch uses one more connection per this many bytes */
#define SYNC_POLL_MAX_MS 10           /* a synchronous caller re-checks its connections this often */
#define RCVLOWAT_MAX (256u << 10)     /* wake a receiver of READ data per this many bytes at most */
#define HASH_PIECE MC_TE_HASH_PIECE /* a hashed READ's direct recv takes at most this much */
#define DENY_WARN_NS (10ull * 1000000000) /* at most one "refused for want of a grant" line this often */

enum { K_LISTEN = 1, K_WAKE, K_SRV, K_CLI };
enum { HS_DONE, HS_HELLO, HS_RESULT };

typedef struct tcp_ctx tcp_ctx_t;
typedef struct tcp_worker tcp_worker_t;

typedef struct tx_ent {
    uint8_t hdr[MC_TE_FRAME_HDR_SIZE];
    const uint8_t *data;
    uint64_t len;
    mc_te_lbuf_t *ref; /* released once sent */
    char *owned;       /* freed once sent */
} tx_ent_t;

/* S_AUTH: waiting for the handshake's PROOF; no frame is parsed before it is valid. */
enum { S_HDR, S_WRITE, S_DISCARD, S_CMA, S_NOTIFY, S_AUTH, S_GRANT };

/* What a server connection's peer may touch (srv_data_access, decided at the handshake):
 * everything (cluster token, no keyring here, or a tenant token of our own tenant when we
 * cannot check grants), only ranges of grants it presented (a tenant token, and we hold a
 * cluster key), or nothing (a tenant token of another tenant, and we cannot check grants). */
enum { DA_ALL, DA_GRANTS, DA_NONE };

/* Why the sweep closes a server connection (srv_budget). */
enum { B_OK, B_UNAUTH, B_IDLE, B_SLOW, B_STALL };

typedef struct srv_conn {
    int kind;
    int fd;
    tcp_worker_t *w;
    struct srv_conn *prev, *next;
    uint8_t *rx;
    size_t rx_pos, rx_len;
    int st;
    mc_te_frame_t cur;
    uint8_t *dst;
    uint64_t left;
    mc_te_lbuf_t *ref;
    tx_ent_t *tx;
    size_t tx_head, tx_n, tx_cap;
    uint64_t tx_off, tx_bytes;
    uint32_t ev;
    uint64_t last_progress_ns;
    uint64_t cma_pid;         /* pid proven to own the other end of this connection, or 0 */
    int rcvlowat;             /* SO_RCVLOWAT now set on fd (set_rcvlowat) */
    bool big_writes;          /* the last request was a big WRITE: expect another (srv_on_readable) */
    bool sending;             /* answers wait for socket space (counted in w->n_sending) */
    /* handshake and budgets */
    mc_auth_server_hs_t hs;   /* our HELLO's nonce (S_AUTH) */
    uint64_t accepted_ns;     /* immutable once listed */
    _Atomic int authed;       /* PROOF accepted (read by the acceptor under w->mu) */
    _Atomic int displaced;    /* shut down by the acceptor at the cap (counted in n_displaced) */
    uint64_t frame_id;        /* the unfinished frame the sweep last saw (srv_budget) */
    int frame_st;
    uint64_t frame_since_ns;  /* when the sweep first saw it; 0 = no frame open */
    struct srv_conn *sweep_next; /* the sweep's list of connections to close */
    int sweep_why;
    /* tenant-bound peers (docs/security.md, "Data ports and tenants") */
    int data_access;          /* DA_* */
    char tenant[MC_AUTH_TENANT_MAX + 1]; /* the peer's proven tenant (DA_GRANTS, DA_NONE) */
    mc_tenant_window_t *grants; /* its tenant's granted ranges (DA_GRANTS; tenant_windows.h) */
    uint64_t grant_hint;        /* where its last request matched in them */
} srv_conn_t;

typedef struct tcp_peer tcp_peer_t;

typedef struct cli_conn {
    int kind;
    pthread_mutex_t mu;
    int fd;
    tcp_peer_t *peer;
    tcp_worker_t *w;
    mc_te_slice_t *head, *tail, *tx_next; /* [head, tx_next) await responses */
    uint64_t tx_off;
    uint8_t *rx;
    size_t rx_pos, rx_len;
    mc_te_slice_t *rx_cur;
    uint64_t rx_left, rx_done;
    uint64_t next_id;
    uint64_t last_fail_ns;
    uint64_t last_used_ns;       /* last submit (cli_retire_idle) */
    uint64_t grant_seq;          /* the peer's grants presented on this connection so far
                                  * (mc_te_peer_grant_frame); 0 on every new connection */
    /* Client half of the handshake, run by whoever receives on c (cli_handshake): frames are
     * queued meanwhile and sent once the server proved itself. */
    int hs;                      /* HS_DONE, HS_HELLO (awaiting HELLO), HS_RESULT */
    uint8_t hs_hello[MC_AUTH_HELLO_SIZE];
    uint8_t hs_nonce[MC_AUTH_NONCE_SIZE];
    uint32_t ev;
    /* Synchronous caller driving this connection (tcp_sync_wait) until owner_last is answered;
     * meanwhile the loop neither watches it (epoll interest 0) nor sweeps it. */
    mc_te_batch_impl_t *owner;
    mc_te_slice_t *owner_last;
    int rcvlowat;                /* SO_RCVLOWAT now set on fd (set_rcvlowat) */
    /* Hashed READs (te_hashed.h): the XXH3 of the request whose data is arriving, fed with
     * each piece right after it lands (cli_hash_*). h_on: a chain is open (it began with the
     * request's first slice and has seen every byte since, in order); h.state is allocated
     * at its first bytes. h_expect: the queued slice whose data continues it. */
    bool h_on;
    mc_hash_stream_t h;
    mc_te_slice_t *h_expect;
} cli_conn_t;

struct tcp_peer {
    mc_te_peer_t *peer;
    uint32_t n;
    cli_conn_t *conns;
    _Atomic uint32_t rr;
};

struct tcp_worker {
    tcp_ctx_t *ctx;
    int idx;
    int epfd;
    int wake_fd;
    int wake_kind; /* epoll data for wake_fd points here */
    pthread_t th;
    bool started;
    pthread_mutex_t mu; /* srv list, cli list (the loop thread and the acceptor) */
    srv_conn_t *srv;
    cli_conn_t **cli;
    size_t n_cli, cap_cli;
    uint64_t next_sweep;
    uint32_t n_sending;  /* server connections with answers waiting for socket space */
};

struct tcp_ctx {
    mc_te_t *te;
    int listen_fd;
    int listen_kind;
    tcp_worker_t *w;
    uint32_t nw;
    _Atomic uint32_t rr;
    _Atomic int stop;
    _Atomic uint32_t n_displaced; /* connections shut down at the cap, not yet closed */
    uint64_t last_cap_warn_ns;    /* acceptor only */
    pthread_mutex_t peers_mu;
    int sndbuf, rcvbuf;
    uint32_t stripe; /* connections one submit may spread over (tcp_stripe_width) */
    _Atomic uint64_t deny_warn_ns; /* last "refused for want of a grant" log line */
    mc_tenant_windows_t windows;   /* tenant-bound peers' granted ranges, one per tenant */
};

static uint64_t timeout_ns(const tcp_ctx_t *ctx)
{
    return (uint64_t)ctx->te->timeout_ms * 1000000ull;
}

static void set_events(int epfd, int fd, void *obj, uint32_t *cur, uint32_t want)
{
    if (*cur == want)
        return;
    struct epoll_event ev = {.events = want, .data.ptr = obj};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        *cur = want;
}

/* While `incoming` bytes (the rest of a big payload being received straight into its buffer)
 * are sure to come, ask the kernel to report the socket readable only once min(incoming,
 * RCVLOWAT_MAX) bytes are queued: one large recv instead of a poll and a recv for every
 * 64 KiB that lands (32 MiB READ here: 2.87-3.24 -> 3.26-3.44 GiB/s, four interleaved pairs).
 * Only bytes that are sure to come count, so the mark never holds back a wake-up (a peer that
 * dies makes the socket readable anyway; a hung one is caught by deadlines, which do not wait
 * for readability); incoming 0 resets it to 1. Linux grows the receive buffer to twice the
 * mark unless it was fixed (tcp_rcvbuf), so the window cannot stall below it; with a fixed
 * buffer the mark stays under a quarter of it. *cur caches what fd has. */
static void set_rcvlowat(const tcp_ctx_t *ctx, int fd, int *cur, uint64_t incoming)
{
    if (fd < 0)
        return;
    uint64_t cap = RCVLOWAT_MAX;
    if (ctx->rcvbuf > 0 && (uint64_t)ctx->rcvbuf / 4 < cap)
        cap = (uint64_t)ctx->rcvbuf / 4;
    int want = incoming > 1 && cap > 1 ? (int)(incoming < cap ? incoming : cap) : 1;
    if (want != *cur && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)) == 0)
        *cur = want;
}

/* ===================================== server ========================================= */

static void srv_close(srv_conn_t *c)
{
    tcp_worker_t *w = c->w;
    mc_te_table_t *t = &w->ctx->te->table;
    if (c->sending)
        w->n_sending--;
    /* unlink first: the acceptor (srv_displace) may use c->fd while c is listed */
    pthread_mutex_lock(&w->mu);
    if (c->prev)
        c->prev->next = c->next;
    else
        w->srv = c->next;
    if (c->next)
        c->next->prev = c->prev;
    pthread_mutex_unlock(&w->mu);
    epoll_ctl(w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (atomic_load(&c->displaced))
        atomic_fetch_sub(&w->ctx->n_displaced, 1);
    if (c->ref)
        mc_te_table_release(t, c->ref);
    for (size_t i = 0; i < c->tx_n; i++) {
        tx_ent_t *e = &c->tx[(c->tx_head + i) % c->tx_cap];
        if (e->ref)
            mc_te_table_release(t, e->ref);
        mc_free(e->owned);
    }
    atomic_fetch_sub(&w->ctx->te->conn_open, 1);
    mc_tenant_window_release(&w->ctx->windows, c->grants);
    mc_free(c->tx);
    mc_free(c->rx);
    mc_free(c);
}

static bool srv_queue(srv_conn_t *c, const mc_te_frame_t *req, mc_status_t st, const void *data,
                      uint64_t len, mc_te_lbuf_t *ref, char *owned)
{
    if (c->tx_n == c->tx_cap) {
        size_t old = c->tx_cap;
        if (mc_array_reserve(&c->tx, &c->tx_cap, c->tx_n + 1, 64) != MC_OK)
            return false;
        /* the ring was full: entries [tx_head, old) then [0, tx_head); the capacity at least
         * doubled, so the wrapped ones fit right after the old end, keeping the order */
        memcpy(&c->tx[old], &c->tx[0], c->tx_head * sizeof(*c->tx));
    }
    tx_ent_t *e = &c->tx[(c->tx_head + c->tx_n) % c->tx_cap];
    mc_te_frame_t r = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                       .opcode = (uint16_t)(req->opcode | MC_TE_OP_RESPONSE), .id = req->id,
                       .addr = req->addr, .length = len, .status = st};
    mc_te_frame_encode(&r, e->hdr);
    e->data = data;
    e->len = len;
    e->ref = ref;
    e->owned = owned;
    c->tx_n++;
    c->tx_bytes += MC_TE_FRAME_HDR_SIZE + len;
    return true;
}

/* After parsing, at most a partial header or body is left at [*pos, *len) of an rx buffer:
 * move it to the front. */
static void rx_compact(uint8_t *rx, size_t *pos, size_t *len)
{
    if (*pos > 0) {
        memmove(rx, rx + *pos, *len - *pos);
        *len -= *pos;
        *pos = 0;
    }
}

/* Receive into a connection's rx buffer (compacted first) until it holds `max` (<= RXBUF_SIZE)
 * bytes. Returns recv's result; *asked = the room offered (a result below it means the socket
 * is now empty). */
static ssize_t rx_fill(int fd, uint8_t *rx, size_t *pos, size_t *len, size_t max, size_t *asked)
{
    rx_compact(rx, pos, len);
    *asked = max - *len;
    ssize_t n = recv(fd, rx + *len, *asked, MSG_DONTWAIT);
    if (n > 0)
        *len += (size_t)n;
    return n;
}

static bool srv_backpressured(const srv_conn_t *c)
{
    return c->tx_n >= SRV_TX_MAX_ENTRIES || c->tx_bytes >= SRV_TX_MAX_BYTES;
}

/* Returns false if the connection must be closed. */
static bool srv_flush(srv_conn_t *c)
{
    mc_te_table_t *t = &c->w->ctx->te->table;
    while (c->tx_n > 0) {
        struct iovec iov[MAX_IOV];
        int k = 0;
        uint64_t off = c->tx_off;
        for (size_t i = 0; i < c->tx_n && k + 2 <= MAX_IOV; i++) {
            tx_ent_t *e = &c->tx[(c->tx_head + i) % c->tx_cap];
            if (off < MC_TE_FRAME_HDR_SIZE) {
                iov[k].iov_base = e->hdr + off;
                iov[k++].iov_len = MC_TE_FRAME_HDR_SIZE - off;
                off = 0;
            } else {
                off -= MC_TE_FRAME_HDR_SIZE;
            }
            if (e->len > off) {
                iov[k].iov_base = (void *)(e->data + off);
                iov[k++].iov_len = e->len - off;
            }
            off = 0;
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
        MC_PAYLOAD_BEGIN(); /* READ answers come straight from registered memory */
        ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        MC_PAYLOAD_END();
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            MC_LOG_DEBUG("tcp server: send failed: %m");
            return false;
        }
        c->last_progress_ns = mc_now_ns();
        uint64_t done = (uint64_t)n;
        while (done > 0) {
            tx_ent_t *e = &c->tx[c->tx_head];
            uint64_t total = MC_TE_FRAME_HDR_SIZE + e->len;
            uint64_t rem = total - c->tx_off;
            if (done < rem) {
                c->tx_off += done;
                break;
            }
            done -= rem;
            c->tx_bytes -= total;
            if (e->ref)
                mc_te_table_release(t, e->ref);
            mc_free(e->owned);
            c->tx_head = (c->tx_head + 1) % c->tx_cap;
            c->tx_n--;
            c->tx_off = 0;
        }
    }
    if (c->sending != (c->tx_n > 0)) {
        c->sending = c->tx_n > 0;
        c->w->n_sending += c->sending ? 1 : (uint32_t)-1;
    }
    uint32_t want = srv_backpressured(c) ? EPOLLOUT : (EPOLLIN | (c->tx_n ? EPOLLOUT : 0));
    set_events(c->w->epfd, c->fd, c, &c->ev, want);
    return true;
}

/* Format an address the way /proc/net/tcp{,6} prints it ("0100007F:3039"). */
static bool proc_net_addr(const struct sockaddr_storage *ss, char *out, size_t cap)
{
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        snprintf(out, cap, "%08X:%04X", a->sin_addr.s_addr, ntohs(a->sin_port));
        return true;
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        uint32_t w[4];
        memcpy(w, &a->sin6_addr, sizeof(w));
        snprintf(out, cap, "%08X%08X%08X%08X:%04X", w[0], w[1], w[2], w[3], ntohs(a->sin6_port));
        return true;
    }
    return false;
}

/* CMA lets the owner write into another process, so the pid in a CMA request is not taken on
 * trust: the other end of this tcp connection must be a socket that process `pid` holds.
 * Found through /proc/net/tcp{,6} (the peer's socket inode) and /proc/<pid>/fd. */
static bool cma_peer_is(int fd, pid_t pid)
{
    struct sockaddr_storage la, ra;
    socklen_t ll = sizeof(la), rl = sizeof(ra);
    char want_local[64], want_rem[64];
    if (getsockname(fd, (struct sockaddr *)&la, &ll) != 0 ||
        getpeername(fd, (struct sockaddr *)&ra, &rl) != 0 ||
        !proc_net_addr(&ra, want_local, sizeof(want_local)) || /* the initiator's side */
        !proc_net_addr(&la, want_rem, sizeof(want_rem)))
        return false;
    FILE *f = fopen(ra.ss_family == AF_INET ? "/proc/net/tcp" : "/proc/net/tcp6", "r");
    if (!f)
        return false;
    char line[512];
    unsigned long inode = 0;
    while (fgets(line, sizeof(line), f)) {
        char loc[64], rem[64];
        unsigned long ino;
        if (sscanf(line, " %*d: %63s %63s %*x %*s %*s %*s %*d %*d %lu", loc, rem, &ino) == 3 &&
            strcmp(loc, want_local) == 0 && strcmp(rem, want_rem) == 0) {
            inode = ino;
            break;
        }
    }
    fclose(f);
    if (inode == 0)
        return false;
    char want[64], path[64];
    snprintf(want, sizeof(want), "socket:[%lu]", inode);
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    bool found = false;
    struct dirent *de;
    while (d && !found && (de = readdir(d))) {
        char link[128], target[80];
        if (de->d_name[0] == '.')
            continue;
        snprintf(link, sizeof(link), "%s/%.16s", path, de->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            found = strcmp(target, want) == 0;
        }
    }
    if (d)
        closedir(d);
    return found;
}

static void srv_do_cma(srv_conn_t *c, const uint8_t *body)
{
    mc_te_frame_t *h = &c->cur;
    uint64_t pid = 0, raddr = 0;
    for (int i = 7; i >= 0; i--) {
        pid = (pid << 8) | body[i];
        raddr = (raddr << 8) | body[8 + i];
    }
    mc_status_t st = MC_OK;
    if (pid == 0 || pid > INT_MAX || raddr + h->length < raddr) {
        st = MC_ERR_INVALID_PARAMS;
    } else if (c->cma_pid != pid && !cma_peer_is(c->fd, (pid_t)pid)) {
        MC_LOG_WARN("tcp server: CMA request names pid %llu, which does not own the connection",
                    (unsigned long long)pid);
        st = MC_ERR_PERMISSION;
    } else {
        c->cma_pid = pid;
        uint64_t done = 0;
        while (done < h->length) {
            struct iovec l = {.iov_base = (void *)(uintptr_t)(h->addr + done),
                              .iov_len = h->length - done};
            struct iovec r = {.iov_base = (void *)(uintptr_t)(raddr + done),
                              .iov_len = h->length - done};
            ssize_t n = h->opcode == MC_TE_OP_CMA_READ
                            ? process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0)
                            : process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
            if (n <= 0) {
                MC_LOG_WARN("tcp server: CMA copy with pid %llu failed: %m",
                            (unsigned long long)pid);
                st = MC_ERR_TRANSFER_FAIL;
                break;
            }
            done += (uint64_t)n;
        }
    }
    mc_te_table_release(&c->w->ctx->te->table, c->ref);
    c->ref = NULL;
    srv_queue(c, h, st, NULL, 0, NULL, NULL);
}

/* DA_* for a peer that proved `peer` to a server holding `auth` (see DA_*). */
static int srv_data_access(const mc_auth_t *auth, const mc_auth_peer_t *peer)
{
    if (!peer->tenant[0])
        return DA_ALL;
    if (mc_auth_has_cluster_key(auth))
        return DA_GRANTS;
    return strcmp(peer->tenant, mc_auth_client_tenant(auth)) == 0 ? DA_ALL : DA_NONE;
}

/* The client's PROOF is complete in rx: check it and answer RESULT (sent at once: nothing
 * else was queued on this fresh connection). Returns false to close (a refused proof, after
 * its RESULT; or RESULT could not be sent). */
static bool srv_do_auth(srv_conn_t *c, const uint8_t *proof)
{
    mc_te_t *te = c->w->ctx->te;
    uint8_t result[MC_AUTH_RESULT_SIZE];
    mc_auth_peer_t peer;
    mc_status_t st = mc_auth_server_check(te->auth, &c->hs, proof, result, &peer);
    ssize_t n = send(c->fd, result, sizeof(result), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (st != MC_OK) {
        atomic_fetch_add(&te->conn_closed_unauth, 1);
        MC_LOG_WARN("tcp server: connection refused: %s", st == MC_ERR_AUTH
                    ? "no or wrong cluster token" : "not a Mooncake-C handshake");
        return false;
    }
    if (n != (ssize_t)sizeof(result))
        return false;
    c->data_access = srv_data_access(te->auth, &peer);
    if (c->data_access != DA_ALL)
        snprintf(c->tenant, sizeof(c->tenant), "%s", peer.tenant);
    if (c->data_access == DA_GRANTS && !(c->grants = mc_tenant_window_acquire(&c->w->ctx->windows,
                                                                              c->tenant))) {
        MC_LOG_WARN("tcp server: out of memory for tenant %s's grants: closing", c->tenant);
        return false;
    }
    atomic_store(&c->authed, 1);
    c->st = S_HDR;
    return true;
}

/* Logs a refusal of a tenant-bound peer, at most once per DENY_WARN_NS per engine (a peer
 * sending nothing but refused requests must not flood the log). */
static void srv_deny_log(srv_conn_t *c, const char *what, uint64_t total)
{
    tcp_ctx_t *ctx = c->w->ctx;
    uint64_t now = mc_now_ns(), last = atomic_load(&ctx->deny_warn_ns);
    if ((last && now - last < DENY_WARN_NS) ||
        !atomic_compare_exchange_strong(&ctx->deny_warn_ns, &last, now))
        return;
    MC_LOG_WARN("tcp server: tenant %s: %s (%llu so far; this line at most every %llu s)",
                c->tenant, what, (unsigned long long)total,
                (unsigned long long)(DENY_WARN_NS / 1000000000));
}

/* A GRANT body is complete in rx: verify each grant (mac over our segment name and the peer's
 * tenant, cluster keys only) and keep its ranges. Nothing is answered; a grant that fails is
 * dropped (counted, logged) and the requests it would have covered are refused. Peers that
 * need no grants: the body is ignored unread. */
static void srv_do_grants(srv_conn_t *c, const uint8_t *body, size_t len)
{
    if (c->data_access != DA_GRANTS)
        return;
    mc_te_t *te = c->w->ctx->te;
    uint64_t now = mc_wall_ms();
    size_t off = 0;
    while (off < len) {
        mc_grant_view_t g;
        mc_status_t st = mc_grant_verify(te->auth, te->local_name, c->tenant, body + off,
                                         len - off, &g);
        const char *why = NULL;
        if (st == MC_ERR_INVALID_PARAMS)
            why = "malformed grant refused";
        else if (st != MC_OK)
            why = "grant refused: forged, or made for another segment or tenant";
        else if (g.expiry_ms <= now)
            why = "expired grant refused";
        if (why) {
            uint64_t total = atomic_fetch_add(&te->conn_grants_refused, 1) + 1;
            srv_deny_log(c, why, total);
            if (st == MC_ERR_INVALID_PARAMS)
                return; /* where the next one starts is unknown */
        } else {
            /* out of memory: its requests are refused */
            const uint8_t *mac = body + off + g.size - MC_AUTH_MAC_SIZE;
            if (mc_tenant_window_add(c->grants, &g, mac, now) == MC_TW_KEPT)
                atomic_fetch_add(&te->conn_grants_shared, 1);
        }
        off += g.size;
    }
}

/* Whether the peer may run request h on [h->addr, h->addr + h->length) (a range the table
 * already found inside one registered buffer). Tenant-bound peers never get CMA. */
static bool srv_allowed(srv_conn_t *c, const mc_te_frame_t *h)
{
    if (c->data_access == DA_ALL)
        return true;
    if (c->data_access == DA_NONE ||
        (h->opcode != MC_TE_OP_READ && h->opcode != MC_TE_OP_WRITE))
        return false;
    uint8_t access = h->opcode == MC_TE_OP_READ ? MC_GRANT_READ : MC_GRANT_WRITE;
    return mc_tenant_window_allows(c->grants, &c->grant_hint, h->addr, h->length, access,
                                   mc_wall_ms());
}

/* Handle a complete header at c->cur. Returns false to close. */
/* A NOTIFY body is complete in rx: validate, queue, answer (OK, BUSY when the queue is full,
 * INVALID_PARAMS when malformed). The connection stays in every case. Returns false only when
 * the answer cannot be queued. */
static bool srv_do_notify(srv_conn_t *c, const uint8_t *body, size_t len)
{
    mc_te_t *te = c->w->ctx->te;
    const char *name, *msg;
    size_t nl, ml;
    mc_status_t st = mc_te_notify_parse(body, len, &name, &nl, &msg, &ml);
    if (st != MC_OK) {
        mc_te_notify_count_bad(te);
        MC_LOG_DEBUG("tcp server: malformed NOTIFY body (%zu bytes) refused", len);
    } else {
        st = mc_te_notify_push(te, name, nl, msg, ml);
    }
    return srv_queue(c, &c->cur, st, NULL, 0, NULL, NULL);
}

static bool srv_on_header(srv_conn_t *c)
{
    mc_te_t *te = c->w->ctx->te;
    mc_te_frame_t *h = &c->cur;
    uint64_t payload = 0;
    mc_te_lbuf_t *b = NULL;
    c->big_writes = false;
    mc_status_t st = mc_te_tcp_check_request(&te->table, h, &payload, &b);
    if (st == MC_OK && b && !srv_allowed(c, h)) {
        mc_te_table_release(&te->table, b);
        b = NULL;
        st = MC_ERR_PERMISSION;
        uint64_t total = atomic_fetch_add(&te->conn_denied, 1) + 1;
        srv_deny_log(c, "data request outside its grants refused (PERMISSION_DENIED)", total);
    }
    if (st == MC_ERR_PROTOCOL) {
        MC_LOG_WARN("tcp server: bad request frame (opcode %u, length %llu): closing", h->opcode,
                    (unsigned long long)h->length);
        return false;
    }
    if (st != MC_OK) {
        MC_LOG_DEBUG("tcp server: refusing opcode %u addr 0x%llx len %llu: %s", h->opcode,
                     (unsigned long long)h->addr, (unsigned long long)h->length,
                     mc_status_name(st));
        if (h->opcode == MC_TE_OP_NOTIFY)
            mc_te_notify_count_bad(te);
        if (!srv_queue(c, h, st, NULL, 0, NULL, NULL))
            return false;
        if (payload) {
            c->st = S_DISCARD;
            c->left = payload;
        }
        return true;
    }
    switch (h->opcode) {
    case MC_TE_OP_GET_DESC: {
        char *json = NULL;
        size_t len = 0;
        st = mc_te_desc_json_copy(te, &json, &len);
        if (st == MC_OK && len > MC_TE_FRAME_MAX_DESC) {
            mc_free(json);
            json = NULL;
            st = MC_ERR_TOO_LARGE;
        }
        return srv_queue(c, h, st, json, st == MC_OK ? len : 0, NULL, json);
    }
    case MC_TE_OP_PROBE:
        return srv_queue(c, h, MC_OK, NULL, 0, NULL, NULL);
    case MC_TE_OP_NOTIFY:
        c->st = S_NOTIFY; /* the body (<= MC_TE_FRAME_MAX_NOTIFY) is gathered in rx */
        c->left = payload;
        return true;
    case MC_TE_OP_GRANT:
        c->st = S_GRANT; /* the body (<= MC_TE_FRAME_MAX_GRANT) is gathered in rx; no answer */
        c->left = payload;
        return true;
    case MC_TE_OP_READ:
        return srv_queue(c, h, MC_OK, (const void *)(uintptr_t)h->addr, h->length, b, NULL);
    case MC_TE_OP_WRITE:
        c->st = S_WRITE;
        c->dst = (uint8_t *)(uintptr_t)h->addr;
        c->left = h->length;
        c->ref = b;
        c->big_writes = h->length >= DIRECT_MIN;
        return true;
    default: /* CMA */
        c->st = S_CMA;
        c->ref = b;
        return true;
    }
}

static bool srv_finish_write(srv_conn_t *c)
{
    mc_te_table_release(&c->w->ctx->te->table, c->ref);
    c->ref = NULL;
    c->st = S_HDR;
    return srv_queue(c, &c->cur, MC_OK, NULL, 0, NULL, NULL);
}

/* Consume buffered bytes. Returns false to close. */
static bool srv_parse(srv_conn_t *c)
{
    for (;;) {
        size_t avail = c->rx_len - c->rx_pos;
        const uint8_t *p = c->rx + c->rx_pos;
        switch (c->st) {
        case S_HDR:
            if (avail < MC_TE_FRAME_HDR_SIZE || srv_backpressured(c))
                return true;
            if (mc_te_frame_decode(p, avail, &c->cur) != MC_OK) {
                MC_LOG_WARN("tcp server: bad frame header (magic/version/opcode): closing");
                return false;
            }
            c->rx_pos += MC_TE_FRAME_HDR_SIZE;
            if (!srv_on_header(c))
                return false;
            break;
        case S_WRITE: {
            if (avail == 0)
                return true;
            size_t k = avail < c->left ? avail : (size_t)c->left;
            mc_payload_copy(c->dst, p, k);
            c->dst += k;
            c->left -= k;
            c->rx_pos += k;
            if (c->left == 0 && !srv_finish_write(c))
                return false;
            break;
        }
        case S_DISCARD: {
            if (avail == 0)
                return true;
            size_t k = avail < c->left ? avail : (size_t)c->left;
            c->left -= k;
            c->rx_pos += k;
            if (c->left == 0)
                c->st = S_HDR;
            break;
        }
        case S_CMA:
            if (avail < MC_TE_FRAME_CMA_PAYLOAD)
                return true;
            srv_do_cma(c, p);
            c->rx_pos += MC_TE_FRAME_CMA_PAYLOAD;
            c->st = S_HDR;
            break;
        case S_AUTH:
            if (avail < MC_AUTH_PROOF_SIZE)
                return true;
            if (!srv_do_auth(c, p))
                return false;
            c->rx_pos += MC_AUTH_PROOF_SIZE;
            break;
        case S_NOTIFY:
            if (avail < c->left)
                return true;
            if (!srv_do_notify(c, p, (size_t)c->left))
                return false;
            c->rx_pos += (size_t)c->left;
            c->left = 0;
            c->st = S_HDR;
            break;
        case S_GRANT:
            if (avail < c->left)
                return true;
            srv_do_grants(c, p, (size_t)c->left);
            c->rx_pos += (size_t)c->left;
            c->left = 0;
            c->st = S_HDR;
            break;
        }
    }
}

/* The payload of the WRITE being received goes straight to its destination. */
static bool srv_direct(const srv_conn_t *c)
{
    return c->st == S_WRITE && c->rx_pos == c->rx_len && c->left >= DIRECT_MIN;
}

/* Returns false if the connection was closed (c is freed). */
static bool srv_on_readable(srv_conn_t *c)
{
    uint64_t budget = READ_BUDGET;
    for (;;) {
        if (!srv_parse(c))
            goto close;
        if (srv_backpressured(c))
            break;
        ssize_t n;
        size_t asked;
        if (srv_direct(c)) {
            asked = c->left;
            MC_PAYLOAD_BEGIN();
            n = recv(c->fd, c->dst, c->left, MSG_DONTWAIT);
            MC_PAYLOAD_END();
            if (n > 0) {
                c->dst += n;
                c->left -= (uint64_t)n;
                if (c->left == 0 && !srv_finish_write(c))
                    goto close;
            }
        } else {
            /* After a big WRITE the next frame is likely another: take its header alone, so
             * that its payload goes straight to its destination instead of through rx. */
            bool hdr_only = c->big_writes && c->st == S_HDR && c->rx_pos == c->rx_len;
            n = rx_fill(c->fd, c->rx, &c->rx_pos, &c->rx_len,
                        hdr_only ? MC_TE_FRAME_HDR_SIZE : RXBUF_SIZE, &asked);
        }
        if (n == 0)
            goto close;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            goto close;
        }
        c->last_progress_ns = mc_now_ns();
        if ((uint64_t)n >= budget || (size_t)n < asked) {
            /* Out of budget, or a short read (the socket is empty: skip the recv that would
             * only say EAGAIN; level-triggered epoll reports later bytes): parse what was just
             * buffered first, since epoll never reports bytes already taken from the socket. */
            if (!srv_parse(c))
                goto close;
            break;
        }
        budget -= (uint64_t)n;
    }
    bool was_backpressured = srv_backpressured(c);
    if (!srv_flush(c))
        goto close;
    /* The flush may have drained the whole backlog (loopback takes megabytes at once): requests
     * still buffered in rx would then wait for an EPOLLIN that never comes, since the peer has
     * nothing more to send. Parse them now. */
    if (was_backpressured && !srv_backpressured(c) && budget > 0 &&
        (c->rx_len > c->rx_pos || c->st != S_HDR))
        return srv_on_readable(c);
    set_rcvlowat(c->w->ctx, c->fd, &c->rcvlowat, srv_direct(c) ? c->left : 0);
    return true;
close:
    srv_close(c);
    return false;
}

/* Returns false if the connection was closed (c is freed). */
static bool srv_on_writable(srv_conn_t *c)
{
    bool was = srv_backpressured(c);
    if (!srv_flush(c)) {
        srv_close(c);
        return false;
    }
    if (was && !srv_backpressured(c))
        return srv_on_readable(c); /* parse what was left buffered */
    return true;
}

/* At the connection cap: shut down the oldest connection that has not completed the
 * handshake (its loop then closes it), so that floods of idle or unauthenticated connections
 * never lock proved peers out. Acceptor thread. Returns false if every open connection has
 * proved (the new one is then refused). */
static bool srv_displace(tcp_ctx_t *ctx)
{
    tcp_worker_t *ow = NULL;
    srv_conn_t *oldest = NULL;
    for (uint32_t i = 0; i < ctx->nw; i++) {
        tcp_worker_t *w = &ctx->w[i];
        pthread_mutex_lock(&w->mu);
        for (srv_conn_t *c = w->srv; c; c = c->next)
            if (!atomic_load(&c->authed) && !atomic_load(&c->displaced) &&
                (!oldest || c->accepted_ns < oldest->accepted_ns)) {
                oldest = c;
                ow = w;
            }
        pthread_mutex_unlock(&w->mu);
    }
    if (!oldest)
        return false;
    bool done = false;
    pthread_mutex_lock(&ow->mu);
    /* still listed (only its own loop unlinks it, and it cannot have proved since: check) */
    for (srv_conn_t *c = ow->srv; c && !done; c = c->next)
        if (c == oldest && !atomic_load(&c->authed) && !atomic_load(&c->displaced)) {
            atomic_store(&c->displaced, 1);
            atomic_fetch_add(&ctx->n_displaced, 1);
            shutdown(c->fd, SHUT_RDWR); /* its loop sees EOF and closes it */
            done = true;
        }
    pthread_mutex_unlock(&ow->mu);
    if (done)
        atomic_fetch_add(&ctx->te->conn_displaced, 1);
    return done;
}

/* Whether a new connection may be served: under the cap, or room was made by displacing an
 * unauthenticated one. Acceptor thread. */
static bool srv_admit(tcp_ctx_t *ctx)
{
    mc_te_t *te = ctx->te;
    if (atomic_load(&te->conn_open) - atomic_load(&ctx->n_displaced) < te->max_srv_conns)
        return true;
    bool ok = false;
    for (int tries = 0; tries < 4 && !ok; tries++) /* a chosen one may prove meanwhile */
        ok = srv_displace(ctx);
    if (!ok)
        atomic_fetch_add(&te->conn_refused_full, 1);
    uint64_t now = mc_now_ns();
    if (now - ctx->last_cap_warn_ns > CAP_WARN_NS) {
        ctx->last_cap_warn_ns = now;
        MC_LOG_WARN("tcp server: %u connections open (the cap): %s", te->max_srv_conns,
                    ok ? "closing the oldest unauthenticated one for each new one"
                       : "all proved; refusing new connections");
    }
    return ok;
}

static void srv_accept(tcp_ctx_t *ctx)
{
    for (int i = 0; i < 64; i++) {
        int fd = accept4(ctx->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                MC_LOG_WARN("tcp server: accept failed: %m");
            return;
        }
        if (!srv_admit(ctx)) {
            close(fd);
            continue;
        }
        mc_net_tune(fd, ctx->sndbuf, ctx->rcvbuf);
        srv_conn_t *c = mc_calloc(1, sizeof(*c));
        uint8_t *rx = mc_malloc(RXBUF_SIZE);
        if (!c || !rx) {
            mc_free(c);
            mc_free(rx);
            close(fd);
            MC_LOG_ERROR("tcp server: out of memory accepting a connection");
            continue;
        }
        tcp_worker_t *w = &ctx->w[atomic_fetch_add(&ctx->rr, 1) % ctx->nw];
        c->kind = K_SRV;
        c->fd = fd;
        c->rcvlowat = 1; /* the socket default */
        c->w = w;
        c->rx = rx;
        c->ev = EPOLLIN;
        c->st = S_AUTH;
        c->last_progress_ns = c->accepted_ns = mc_now_ns();
        /* HELLO first: a fresh socket has room for 48 bytes, so one non-blocking send */
        uint8_t hello[MC_AUTH_HELLO_SIZE];
        mc_auth_server_hello(ctx->te->auth, &c->hs, hello);
        if (send(fd, hello, sizeof(hello), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(hello)) {
            close(fd);
            mc_free(c->rx);
            mc_free(c);
            continue;
        }
        atomic_fetch_add(&ctx->te->conn_open, 1);
        pthread_mutex_lock(&w->mu);
        c->next = w->srv;
        if (w->srv)
            w->srv->prev = c;
        w->srv = c;
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
        /* Under w->mu so that a failure can unlink it before its loop could see it. */
        if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            MC_LOG_ERROR("tcp server: epoll_ctl failed: %m");
            w->srv = c->next;
            if (c->next)
                c->next->prev = NULL;
            atomic_fetch_sub(&ctx->te->conn_open, 1);
            close(fd);
            mc_free(c->rx);
            mc_free(c);
        }
        pthread_mutex_unlock(&w->mu);
    }
}

/* ===================================== client ========================================= */

static void cli_pop_head(cli_conn_t *c)
{
    mc_te_slice_t *s = c->head;
    mc_free(s->pre); /* a GRANT frame never sent (connection failed) */
    s->pre = NULL;
    s->pre_len = 0;
    c->head = s->next;
    if (c->tail == s)
        c->tail = NULL;
    s->next = NULL;
    s->queued = 0;
}

/* epoll interest for c: none while a synchronous caller drives it. Under c->mu. */
static uint32_t cli_events(const cli_conn_t *c)
{
    return c->owner ? 0 : EPOLLIN | (c->tx_next && c->hs == HS_DONE ? EPOLLOUT : 0);
}

/* ---- hashed READs (te_hashed.h) ----
 * A request's XXH3 is reported only when this connection received every byte of it, slice
 * after slice in order: the chain opens at the data of the request's first slice, continues
 * only into the slice queued right behind the one just finished when that is the request's
 * next slice (a request striped over several connections, or interleaved with others, breaks
 * it), and ends at its last slice, before that slice is done. Anything else (an error
 * answer, a failed connection) drops the chain, and the request stays unhashed. */

/* Drop the open chain, if any. Under c->mu. */
static void cli_hash_stop(cli_conn_t *c)
{
    if (c->h.state)
        (void)mc_hash_stream_final(&c->h); /* frees it */
    c->h_on = false;
    c->h_expect = NULL;
}

/* n bytes of the chain's request (c->rx_cur's) just landed at p (its buffer). Under c->mu. A
 * request that continues its caller's stream (cont) is hashed into a copy of it, handed over
 * in cli_data_got only once every byte is in. */
static void cli_hash_data(cli_conn_t *c, const uint8_t *p, size_t n)
{
    if (!c->h_on)
        return;
    const mc_hash_stream_t *cont = c->rx_cur->req->hash_out->cont;
    if (!c->h.state &&
        (cont ? mc_hash_stream_copy(&c->h, cont) : mc_hash_stream_init(&c->h)) != 0) {
        c->h_on = false; /* no memory: the caller hashes it itself */
        return;
    }
    mc_hash_stream_update(&c->h, p, n);
}

/* Close the connection and end every queued slice with st. Under c->mu. A connection with
 * nothing in flight (e.g. one the server closed as idle) may be reopened at once; otherwise
 * reconnects wait RECONNECT_BACKOFF_NS. Unless we closed it ourselves (TIMEOUT, CANCELED), the
 * peer's descriptor is dropped, idle or not: the process that closed it may have exited, and a
 * new one on the same host:port has a registration of its own, so the next use fetches it. */
static void cli_fail(cli_conn_t *c, mc_status_t st)
{
    if (c->fd >= 0) {
        epoll_ctl(c->w->epfd, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->fd = -1;
        c->last_fail_ns = c->head ? mc_now_ns() : 0;
    }
    c->rx_pos = c->rx_len = 0;
    c->rx_cur = NULL;
    c->tx_next = NULL;
    c->tx_off = 0;
    cli_hash_stop(c);
    bool any = c->head != NULL;
    while (c->head) {
        mc_te_slice_t *s = c->head;
        cli_pop_head(c);
        mc_te_slice_done(s, st, 0);
    }
    if (st != MC_ERR_TIMEOUT && st != MC_ERR_CANCELED) {
        if (any)
            MC_LOG_WARN("tcp: connection to %s lost (%s); in-flight requests failed",
                        c->peer->peer->name, mc_status_name(st));
        mc_te_peer_invalidate(c->peer->peer, NULL);
    }
}

static void cli_complete_head(cli_conn_t *c, mc_status_t st)
{
    mc_te_slice_t *s = c->head;
    if (c->h_expect) /* s was to continue the chain, and it ends without data */
        cli_hash_stop(c);
    cli_pop_head(c);
    mc_te_slice_done(s, st, st == MC_OK ? s->len : 0);
}

/* poll interest of a synchronous waiter driving c. Under c->mu. */
static uint32_t cli_events_sync(const cli_conn_t *c)
{
    return POLLIN | (c->tx_next && c->hs == HS_DONE ? POLLOUT : 0);
}

/* The bytes of s's request on the wire, in order: the GRANT frame presented ahead of it (if
 * any), its header, its payload (WRITE data or CMA body). Returns the number of parts. */
static int slice_parts(const mc_te_slice_t *s, struct iovec part[3])
{
    int k = 0;
    if (s->pre_len)
        part[k++] = (struct iovec){.iov_base = s->pre, .iov_len = s->pre_len};
    part[k++] = (struct iovec){.iov_base = (void *)s->hdr, .iov_len = MC_TE_FRAME_HDR_SIZE};
    if (s->cma)
        part[k++] = (struct iovec){.iov_base = (void *)s->body, .iov_len = MC_TE_FRAME_CMA_PAYLOAD};
    else if (s->opcode == MC_TE_WRITE)
        part[k++] = (struct iovec){.iov_base = s->local, .iov_len = s->len};
    return k;
}

/* Send what can be sent without blocking (nothing before the handshake is done). Under c->mu. */
static void cli_flush(cli_conn_t *c)
{
    while (c->tx_next && c->hs == HS_DONE) {
        struct iovec iov[MAX_IOV];
        int k = 0;
        uint64_t off = c->tx_off;
        for (mc_te_slice_t *s = c->tx_next; s && k + 3 <= MAX_IOV; s = s->next) {
            struct iovec part[3];
            int np = slice_parts(s, part);
            for (int i = 0; i < np; i++) {
                if (off >= part[i].iov_len) {
                    off -= part[i].iov_len;
                    continue;
                }
                iov[k].iov_base = (uint8_t *)part[i].iov_base + off;
                iov[k++].iov_len = part[i].iov_len - off;
                off = 0;
            }
        }
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)k};
        ssize_t n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            cli_fail(c, MC_ERR_CONNECTION);
            return;
        }
        uint64_t done = (uint64_t)n;
        while (c->tx_next) {
            mc_te_slice_t *s = c->tx_next;
            struct iovec part[3];
            int np = slice_parts(s, part);
            uint64_t total = 0;
            for (int i = 0; i < np; i++)
                total += part[i].iov_len;
            uint64_t rem = total - c->tx_off;
            if (done < rem) {
                c->tx_off += done;
                break;
            }
            done -= rem;
            c->tx_off = 0;
            c->tx_next = s->next;
            mc_free(s->pre); /* sent */
            s->pre = NULL;
            s->pre_len = 0;
            if (s->resp_ready && c->head == s) /* answered before we finished sending it */
                cli_complete_head(c, (mc_status_t)s->resp_status);
        }
    }
    if (c->fd >= 0)
        set_events(c->w->epfd, c->fd, c, &c->ev, cli_events(c));
}

/* Data bytes a successful answer to s carries. */
static uint64_t slice_answer_len(const mc_te_slice_t *s)
{
    return s->opcode == MC_TE_READ && !s->cma ? s->len : 0;
}

/* The data of s's answer (len bytes) is what comes next on c: it continues the open hash
 * chain, opens one (the first slice of a hashed READ), or drops it. */
static void cli_data_start(cli_conn_t *c, mc_te_slice_t *s, uint64_t len)
{
    c->rx_cur = s;
    c->rx_left = len;
    c->rx_done = 0;
    mc_te_req_t *r = s->req;
    if (c->h_on && s == c->h_expect) {
        c->h_expect = NULL;
        return;
    }
    cli_hash_stop(c);
    c->h_on = r->hash_out && s == &r->slices[0];
}

/* n more bytes of that data are in its buffer (cli_hash_data saw them); the last of them
 * completes the slice, and the request's hash when it was its last slice. */
static void cli_data_got(cli_conn_t *c, uint64_t n)
{
    c->rx_done += n;
    c->rx_left -= n;
    if (c->rx_left > 0)
        return;
    mc_te_slice_t *s = c->rx_cur, *next = NULL;
    mc_te_req_t *r = s->req;
    c->rx_cur = NULL;
    if (c->h_on && s == &r->slices[r->n_slices - 1]) {
        if (c->h.state && r->hash_out->cont) { /* it saw every byte of r: hand over */
            mc_hash_stream_move(r->hash_out->cont, &c->h);
            r->hash_out->hashed = true;
        } else if (c->h.state) { /* it saw every byte of r */
            r->hash_out->hash = mc_hash_stream_final(&c->h);
            r->hash_out->hashed = true;
        }
        c->h_on = false;
    } else if (c->h_on && s->next == s + 1) {
        next = s->next; /* the request's next slice is the next answer on c */
    } else {
        cli_hash_stop(c);
    }
    cli_complete_head(c, MC_OK);
    c->h_expect = next;
}

/* Consume buffered response bytes. Returns false on protocol loss (connection failed). */
static bool cli_parse(cli_conn_t *c)
{
    for (;;) {
        size_t avail = c->rx_len - c->rx_pos;
        const uint8_t *p = c->rx + c->rx_pos;
        if (c->rx_cur) {
            if (avail == 0)
                return true;
            size_t k = avail < c->rx_left ? avail : (size_t)c->rx_left;
            uint8_t *dst = c->rx_cur->local + c->rx_done;
            mc_te_req_t *r = c->rx_cur->req;
            if (c->h_on && !c->h.state && r->n_slices == 1 && k == c->rx_left &&
                !r->hash_out->cont) {
                /* a whole one-slice request from rx: copy and hash in one pass */
                r->hash_out->hash = mc_hash64_copy(dst, p, k, NULL);
                r->hash_out->hashed = true;
                c->h_on = false;
            } else {
                memcpy(dst, p, k);
                cli_hash_data(c, dst, k);
            }
            c->rx_pos += k;
            cli_data_got(c, k);
            continue;
        }
        if (avail < MC_TE_FRAME_HDR_SIZE)
            return true;
        mc_te_frame_t h;
        mc_te_slice_t *s = c->head;
        mc_te_resp_kind_t kind = MC_TE_RESP_BAD;
        if (s && !s->resp_ready && mc_te_frame_decode(p, avail, &h) == MC_OK)
            kind = mc_te_frame_classify_response(&h, s->id, slice_answer_len(s),
                                                 s != c->tx_next);
        if (kind == MC_TE_RESP_BAD) {
            MC_LOG_WARN("tcp: unexpected response frame from %s: closing connection",
                        c->peer->peer->name);
            cli_fail(c, MC_ERR_PROTOCOL);
            return false;
        }
        c->rx_pos += MC_TE_FRAME_HDR_SIZE;
        if (kind == MC_TE_RESP_ERROR) {
            if (s == c->tx_next) { /* refused while we are still sending its payload */
                s->resp_ready = 1;
                s->resp_status = h.status;
            } else {
                cli_complete_head(c, (mc_status_t)h.status);
            }
            continue;
        }
        if (kind == MC_TE_RESP_DATA) {
            cli_data_start(c, s, h.length);
        } else {
            cli_complete_head(c, MC_OK);
        }
    }
}

/* The oldest request is a fully sent READ whose data goes straight to its buffer, and its
 * response header has not fully arrived. */
static mc_te_slice_t *cli_big_read_next(const cli_conn_t *c)
{
    mc_te_slice_t *s = c->head;
    if (!s || c->rx_cur || s == c->tx_next || s->resp_ready || s->cma || s->opcode != MC_TE_READ ||
        s->len < DIRECT_MIN || c->rx_len - c->rx_pos >= MC_TE_FRAME_HDR_SIZE)
        return NULL;
    return s;
}

/* Receive the rest of the response header of big READ s into rx and, in the same recvmsg, the
 * first data bytes straight into s's buffer: without this the header's recv would also pull up
 * to RXBUF_SIZE data bytes into rx, to be copied again. If the header turns out not to be the
 * expected success (an error answer has no data), the bytes are moved back into rx for
 * cli_parse, which has room for them (at most RXBUF_SIZE - header). */
static ssize_t cli_recv_header_and_data(cli_conn_t *c, mc_te_slice_t *s, size_t *asked)
{
    rx_compact(c->rx, &c->rx_pos, &c->rx_len);
    size_t hdr_left = MC_TE_FRAME_HDR_SIZE - c->rx_len;
    size_t body_room = s->len < RXBUF_SIZE - MC_TE_FRAME_HDR_SIZE
                           ? (size_t)s->len : RXBUF_SIZE - MC_TE_FRAME_HDR_SIZE;
    struct iovec iov[2] = {{c->rx + c->rx_len, hdr_left}, {s->local, body_room}};
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = 2};
    *asked = hdr_left + body_room;
    ssize_t n = recvmsg(c->fd, &mh, MSG_DONTWAIT);
    if (n <= 0)
        return n;
    size_t h = (size_t)n < hdr_left ? (size_t)n : hdr_left, body = (size_t)n - h;
    c->rx_len += h;
    if (body == 0)
        return n;
    mc_te_frame_t f; /* the header is complete: the case cli_parse would take for s */
    if (mc_te_frame_decode(c->rx, MC_TE_FRAME_HDR_SIZE, &f) == MC_OK &&
        mc_te_frame_classify_response(&f, s->id, s->len, true) == MC_TE_RESP_DATA) {
        c->rx_pos = c->rx_len = 0;
        cli_data_start(c, s, s->len);
        cli_hash_data(c, s->local, body);
        cli_data_got(c, body);
    } else {
        memcpy(c->rx + c->rx_len, s->local, body);
        c->rx_len += body;
    }
    return n;
}

/* The data of the answer being received goes straight to its request's buffer. */
static bool cli_direct(const cli_conn_t *c)
{
    return c->rx_cur && c->rx_pos == c->rx_len && c->rx_left >= DIRECT_MIN;
}

/* Advance the client half of the handshake (common/auth.h) with what the socket holds: HELLO
 * -> PROOF, RESULT -> done, then send the frames queued meanwhile. The few handshake bytes go
 * through rx (empty until then). Returns true once done; false while waiting or when the
 * connection failed (MC_ERR_AUTH when the server refused us or could not prove the cluster
 * secret we hold). Under c->mu. */
static bool cli_handshake(cli_conn_t *c)
{
    const mc_auth_t *auth = c->w->ctx->te->auth;
    for (;;) {
        size_t want = c->hs == HS_HELLO ? MC_AUTH_HELLO_SIZE : MC_AUTH_RESULT_SIZE;
        while (c->rx_len < want) {
            ssize_t n = recv(c->fd, c->rx + c->rx_len, want - c->rx_len, MSG_DONTWAIT);
            if (n > 0) {
                c->rx_len += (size_t)n;
            } else if (n < 0 && errno == EINTR) {
                continue;
            } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                return false;
            } else {
                cli_fail(c, MC_ERR_CONNECTION);
                return false;
            }
        }
        c->rx_len = 0;
        if (c->hs == HS_RESULT)
            break;
        uint8_t proof[MC_AUTH_PROOF_SIZE];
        memcpy(c->hs_hello, c->rx, MC_AUTH_HELLO_SIZE);
        if (mc_auth_client_proof(auth, c->hs_hello, c->hs_nonce, proof) != MC_OK) {
            MC_LOG_WARN("tcp: %s did not greet with a Mooncake-C handshake", c->peer->peer->name);
            cli_fail(c, MC_ERR_PROTOCOL);
            return false;
        }
        /* the first bytes we send on this socket: its buffer has room */
        if (send(c->fd, proof, sizeof(proof), MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof(proof)) {
            cli_fail(c, MC_ERR_CONNECTION);
            return false;
        }
        c->hs = HS_RESULT;
    }
    mc_status_t st = mc_auth_client_result(auth, c->hs_hello, c->hs_nonce, c->rx);
    if (st != MC_OK) {
        MC_LOG_WARN("tcp: %s refused: %s", c->peer->peer->name,
                    st == MC_ERR_AUTH ? (auth ? "it does not hold our cluster token, or refused ours"
                                              : "it requires a cluster token")
                                      : "handshake version mismatch");
        cli_fail(c, st == MC_ERR_AUTH ? MC_ERR_AUTH : MC_ERR_PROTOCOL);
        return false;
    }
    c->hs = HS_DONE;
    cli_flush(c);
    return c->fd >= 0;
}

/* Receive and consume what the socket holds (up to READ_BUDGET bytes); then, while direct
 * data is arriving, the rest of it is what surely comes next (set_rcvlowat). Under c->mu. */
static void cli_receive(cli_conn_t *c)
{
    uint64_t budget = READ_BUDGET;
    if (c->fd >= 0 && c->hs != HS_DONE && !cli_handshake(c))
        return;
    while (c->fd >= 0) {
        if (!cli_parse(c))
            break;
        ssize_t n;
        size_t asked;
        mc_te_slice_t *big = cli_big_read_next(c);
        if (big) {
            n = cli_recv_header_and_data(c, big, &asked);
        } else if (cli_direct(c)) {
            /* hashed: pieces of HASH_PIECE, each hashed while the kernel's copy of it is still
             * cached (a recv of several MiB left its start in the third-level cache and the
             * hash ran at a third of its speed); never leaving a rest under DIRECT_MIN, which
             * would pull the next answer through rx and copy it once more */
            asked = c->h_on && c->rx_left >= HASH_PIECE + DIRECT_MIN ? HASH_PIECE
                                                                     : (size_t)c->rx_left;
            uint8_t *dst = c->rx_cur->local + c->rx_done;
            n = recv(c->fd, dst, asked, MSG_DONTWAIT);
            if (n > 0) {
                cli_hash_data(c, dst, (size_t)n);
                cli_data_got(c, (uint64_t)n);
            }
        } else {
            n = rx_fill(c->fd, c->rx, &c->rx_pos, &c->rx_len, RXBUF_SIZE, &asked);
        }
        if (n == 0) {
            cli_fail(c, MC_ERR_CONNECTION);
            break;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                cli_fail(c, MC_ERR_CONNECTION);
            break;
        }
        if ((uint64_t)n >= budget || (size_t)n < asked) {
            cli_parse(c); /* consume what was just buffered (see the server side) */
            break;
        }
        budget -= (uint64_t)n;
    }
    set_rcvlowat(c->w->ctx, c->fd, &c->rcvlowat, cli_direct(c) ? c->rx_left : 0);
}

/* Loop thread: data from the peer (or an error/hang-up, reported even with interest 0). */
static void cli_on_readable(cli_conn_t *c)
{
    pthread_mutex_lock(&c->mu);
    cli_receive(c);
    pthread_mutex_unlock(&c->mu);
}

static void cli_on_writable(cli_conn_t *c)
{
    pthread_mutex_lock(&c->mu);
    if (c->fd >= 0)
        cli_flush(c);
    pthread_mutex_unlock(&c->mu);
}

static mc_status_t cli_connect(tcp_ctx_t *ctx, cli_conn_t *c, uint16_t port)
{
    uint64_t now = mc_now_ns();
    if (c->last_fail_ns && now - c->last_fail_ns < RECONNECT_BACKOFF_NS)
        return MC_ERR_CONNECTION;
    uint32_t tmo = ctx->te->timeout_ms < 3000 ? ctx->te->timeout_ms : 3000;
    int fd;
    mc_status_t st = mc_net_connect(c->peer->peer->host, port, tmo, &fd);
    if (st != MC_OK) {
        c->last_fail_ns = mc_now_ns();
        return st;
    }
    mc_net_set_nonblock(fd, 1);
    mc_net_tune(fd, ctx->sndbuf, ctx->rcvbuf);
    c->fd = fd;
    c->hs = HS_HELLO; /* frames wait in the queue until the server proved itself */
    c->ev = EPOLLIN;
    c->rcvlowat = 1;
    c->rx_pos = c->rx_len = 0;
    c->last_fail_ns = 0;
    c->last_used_ns = mc_now_ns();
    c->grant_seq = 0; /* the server knows no grant of ours yet */
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(c->w->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        MC_LOG_ERROR("tcp: epoll_ctl failed: %m");
        close(fd);
        c->fd = -1;
        return MC_ERR_IO;
    }
    return MC_OK;
}

/* A pooled connection unused for half the idle timeout is closed before use and reopened,
 * rather than risk the server closing it as idle while a request is on the way. Marks c used
 * at now (the submit's clock, read once for all its connections). Under c->mu. */
static void cli_retire_idle(const tcp_ctx_t *ctx, cli_conn_t *c, uint64_t now)
{
    if (c->fd >= 0 && !c->head && !c->owner && now - c->last_used_ns > ctx->te->idle_timeout_ns / 2)
        cli_fail(c, MC_ERR_CANCELED); /* nothing in flight: no backoff, no message */
    c->last_used_ns = now;
}

static tcp_peer_t *cli_peer_state(tcp_ctx_t *ctx, mc_te_peer_t *peer)
{
    pthread_mutex_lock(&ctx->peers_mu);
    tcp_peer_t *tp = peer->tp_state[MC_TE_TP_TCP];
    if (!tp) {
        tp = mc_calloc(1, sizeof(*tp));
        cli_conn_t *conns = tp ? mc_calloc(ctx->te->tcp_conns, sizeof(*conns)) : NULL;
        uint8_t *rx = conns ? mc_malloc((size_t)RXBUF_SIZE * ctx->te->tcp_conns) : NULL;
        if (!rx) {
            mc_free(conns);
            mc_free(tp);
            pthread_mutex_unlock(&ctx->peers_mu);
            return NULL;
        }
        tp->peer = peer;
        tp->n = ctx->te->tcp_conns;
        tp->conns = conns;
        for (uint32_t i = 0; i < tp->n; i++) {
            cli_conn_t *c = &conns[i];
            c->kind = K_CLI;
            pthread_mutex_init(&c->mu, NULL);
            c->fd = -1;
            c->peer = tp;
            c->rx = rx + (size_t)i * RXBUF_SIZE;
            c->next_id = 1;
            c->w = &ctx->w[(peer->idx + i) % ctx->nw];
            tcp_worker_t *w = c->w;
            pthread_mutex_lock(&w->mu);
            if (mc_array_reserve(&w->cli, &w->cap_cli, w->n_cli + 1, 16) == MC_OK)
                w->cli[w->n_cli++] = c;
            else /* no deadline sweep for it */
                MC_LOG_ERROR("tcp: out of memory tracking a connection");
            pthread_mutex_unlock(&w->mu);
        }
        peer->tp_state[MC_TE_TP_TCP] = tp;
    }
    pthread_mutex_unlock(&ctx->peers_mu);
    return tp;
}

/* Fail c if its oldest request passed its deadline (the loop's sweep, or the thread that
 * drives c). Under c->mu. */
static void cli_expire(cli_conn_t *c, uint64_t now)
{
    if (c->fd >= 0 && c->head && now > c->head->req->deadline_ns) {
        MC_LOG_WARN("tcp: request to %s timed out after %u ms; closing its connection",
                    c->peer->peer->name, c->w->ctx->te->timeout_ms);
        cli_fail(c, MC_ERR_TIMEOUT);
    }
}

/* Note for b's waiter that its slices up to `last` went to c; false if b holds too many
 * connections already (the loop thread then receives c's answers). */
static bool sync_note(mc_te_batch_impl_t *b, cli_conn_t *c, mc_te_slice_t *last)
{
    for (uint32_t i = 0; i < b->n_held; i++) {
        if (b->held[i] == c) {
            b->held_last[i] = last;
            return true;
        }
    }
    if (b->n_held == MC_TE_SYNC_HELD_MAX)
        return false;
    b->held[b->n_held] = c;
    b->held_last[b->n_held++] = last;
    return true;
}

/* Makes b's waiter the owner of c until `last` is answered: the loop stops watching c (errors
 * and hang-ups still reach it). Under c->mu; c must be in b->held and not owned by another. */
static void sync_take(mc_te_batch_impl_t *b, cli_conn_t *c, mc_te_slice_t *last)
{
    c->owner = b;
    c->owner_last = last;
    set_events(c->w->epfd, c->fd, c, &c->ev, cli_events(c));
}

static void tcp_submit(void *vctx, mc_te_peer_t *peer, mc_te_rdesc_t *desc,
                       mc_te_slice_t **slices, size_t n)
{
    tcp_ctx_t *ctx = vctx;
    tcp_peer_t *tp = cli_peer_state(ctx, peer);
    if (!tp || atomic_load(&ctx->stop)) {
        for (size_t i = 0; i < n; i++)
            mc_te_slice_done(slices[i], tp ? MC_ERR_CANCELED : MC_ERR_NO_MEMORY, 0);
        return;
    }
    uint16_t port = desc && desc->d.tcp_data_port ? desc->d.tcp_data_port : peer->port;
    /* Spread by bytes: one connection per SPREAD_BYTES (at most ctx->stripe); connection g
     * takes the consecutive slices [g*n/k, (g+1)*n/k), so small batches travel in one
     * sendmsg and come back on one connection. */
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += slices[i]->len + MC_TE_FRAME_HDR_SIZE;
    uint64_t want = (total + SPREAD_BYTES - 1) / SPREAD_BYTES;
    uint32_t k = (uint32_t)(want < tp->n ? want : tp->n);
    if (k > ctx->stripe)
        k = ctx->stripe;
    if (k > n)
        k = (uint32_t)n;
    if (k == 0)
        k = 1;
    mc_te_batch_impl_t *sync_b = slices[0]->req->batch->sync ? slices[0]->req->batch : NULL;
    uint32_t start = atomic_fetch_add(&tp->rr, k);
    mc_status_t connect_st = MC_OK; /* after one failed connect, do not try the others now */
    uint64_t now = mc_now_ns();
    for (uint32_t g = 0; g < k; g++) {
        cli_conn_t *c = &tp->conns[(start + g) % tp->n];
        size_t first = (size_t)g * n / k, end = (size_t)(g + 1) * n / k;
        pthread_mutex_lock(&c->mu);
        mc_status_t st = MC_OK;
        cli_retire_idle(ctx, c, now);
        if (c->fd < 0) {
            st = connect_st != MC_OK ? connect_st : cli_connect(ctx, c, port);
            if (st != MC_OK)
                connect_st = st;
        }
        /* grants presented to this peer that c has not carried yet go ahead of the slices */
        uint8_t *pre = NULL;
        uint32_t pre_len = 0;
        if (st == MC_OK && ctx->te->tenant_bound)
            pre = mc_te_peer_grant_frame(peer, &c->grant_seq, &pre_len);
        for (size_t i = first; i < end; i++) {
            mc_te_slice_t *s = slices[i];
            s->pre = i == first ? pre : NULL;
            s->pre_len = i == first ? pre_len : 0;
            if (st != MC_OK) {
                mc_te_slice_done(s, st == MC_ERR_TIMEOUT ? MC_ERR_TIMEOUT : MC_ERR_CONNECTION, 0);
                continue;
            }
            s->id = c->next_id++;
            s->next = NULL;
            s->resp_ready = 0;
            uint16_t op;
            if (s->cma)
                op = s->opcode == MC_TE_READ ? MC_TE_OP_CMA_READ : MC_TE_OP_CMA_WRITE;
            else
                op = s->opcode == MC_TE_READ ? MC_TE_OP_READ : MC_TE_OP_WRITE;
            mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                               .opcode = op, .id = s->id, .addr = s->remote, .length = s->len};
            mc_te_frame_encode(&h, s->hdr);
            if (s->cma) {
                uint64_t pid = (uint64_t)ctx->te->pid, la = (uint64_t)(uintptr_t)s->local;
                for (int b = 0; b < 8; b++) {
                    s->body[b] = (uint8_t)(pid >> (8 * b));
                    s->body[8 + b] = (uint8_t)(la >> (8 * b));
                }
            }
            if (c->tail)
                c->tail->next = s;
            else
                c->head = s;
            c->tail = s;
            s->queued = 1;
            if (!c->tx_next)
                c->tx_next = s;
        }
        /* its waiter may drive c (tcp_sync_wait); a reserved transfer takes c now */
        if (st == MC_OK && sync_b && sync_note(sync_b, c, slices[end - 1]) && sync_b->reserve &&
            (!c->owner || c->owner == sync_b))
            sync_take(sync_b, c, slices[end - 1]);
        if (st == MC_OK)
            cli_flush(c);
        pthread_mutex_unlock(&c->mu);
    }
}

/* The synchronous waiter (transport.h, sync_wait): this thread takes over each connection b
 * noted at submit, unless another waiter already drives it or its share is answered, and
 * drives it (finishes sends, receives, enforces deadlines as the sweep would) with poll(), so
 * a response wakes the waiting thread directly instead of a loop thread that then wakes it.
 * While it drives a connection the loop neither watches (epoll interest 0; errors and
 * hang-ups still reach it) nor sweeps it; each connection goes back to its loop once b's last
 * slice on it is answered (parked, interest still 0, if the loop has nothing to do there).
 * Until the wait starts, the loop receives as usual, so a transfer started and not yet waited
 * for never holds anything up. */
static void tcp_sync_wait(void *vctx, mc_te_batch_impl_t *b, size_t upto)
{
    const tcp_ctx_t *ctx = vctx;
    bool partial = upto < b->n;
    for (uint32_t i = 0; i < b->n_held; i++) {
        cli_conn_t *c = b->held[i];
        if (!c)
            continue;
        pthread_mutex_lock(&c->mu);
        if (c->owner == b) {
            /* still ours from a partial wait or a reserved start */
        } else if (!c->owner && c->fd >= 0 && b->held_last[i]->queued) {
            sync_take(b, c, b->held_last[i]);
        } else {
            b->held[i] = NULL;
        }
        pthread_mutex_unlock(&c->mu);
    }
    struct pollfd pfd[MC_TE_SYNC_HELD_MAX];
    short revents[MC_TE_SYNC_HELD_MAX];            /* what the last poll saw, per held[] entry */
    uint32_t slot[MC_TE_SYNC_HELD_MAX];
    for (uint32_t i = 0; i < b->n_held; i++)
        revents[i] = POLLIN;                        /* answers may be waiting already */
    /* small answers come back faster than a wake-up */
    uint64_t spin = ctx->te->busy_poll_ns;
    for (;;) {
        /* Enough for a partial wait: keep the connections (the caller waits again soon; on
         * loopback the sender's own CPU moves the bytes into our socket buffers meanwhile). */
        if (partial && mc_te_batch_prefix_final(b, upto))
            return;
        nfds_t k = 0;
        uint64_t now = mc_now_ns(), next_deadline = UINT64_MAX;
        for (uint32_t i = 0; i < b->n_held; i++) {
            cli_conn_t *c = b->held[i];
            if (!c)
                continue;
            pthread_mutex_lock(&c->mu);
            if (c->fd >= 0 && c->owner_last->queued && (revents[i] & POLLOUT))
                cli_flush(c);
            if (c->fd >= 0 && c->owner_last->queued && (revents[i] & ~POLLOUT))
                cli_receive(c);
            if (c->owner_last->queued)
                cli_expire(c, now);
            if (c->fd < 0 || !c->owner_last->queued) {
                c->owner = NULL;
                c->owner_last = NULL;
                /* Back to the loop only if it has work there; an idle connection stays parked
                 * (no epoll interest), so back-to-back synchronous transfers on it make no
                 * epoll_ctl calls; the loop's sweep re-arms it (worker_sweep). */
                if (c->fd >= 0 && (c->head || c->tx_next))
                    set_events(c->w->epfd, c->fd, c, &c->ev, cli_events(c));
                b->held[i] = NULL;
            } else {
                slot[k] = i;
                pfd[k++] = (struct pollfd){.fd = c->fd,
                                           .events = (short)cli_events_sync(c)};
                if (c->head->req->deadline_ns < next_deadline)
                    next_deadline = c->head->req->deadline_ns;
            }
            pthread_mutex_unlock(&c->mu);
        }
        if (k == 0)
            break;
        uint64_t wait_ns = next_deadline > now ? next_deadline - now : 0;
        uint64_t ms = (wait_ns + 999999) / 1000000;
        int pr = mc_net_poll(pfd, k, (int)(ms < SYNC_POLL_MAX_MS ? ms : SYNC_POLL_MAX_MS), &spin);
        for (nfds_t j = 0; j < k; j++)
            revents[slot[j]] = pr > 0 ? pfd[j].revents : 0;
        if (pr > 0) /* bytes are flowing: keep spinning while they do (no wake-up per burst) */
            spin = ctx->te->busy_poll_ns;
    }
    b->n_held = 0;
}

/* ===================================== loops ========================================== */

/* Which budget c is over at now, B_OK if none. Loop thread (w->mu held; only c's own fields).
 *  - no valid PROOF within MC_AUTH_HANDSHAKE_TIMEOUT_MS of accept: B_UNAUTH;
 *  - one unfinished frame (a partial header, or a payload still arriving) seen by the sweeps
 *    for more than twice the transfer timeout, however slowly its bytes trickle: B_SLOW
 *    (sampled here, so the frame path does no bookkeeping; a frame counts by its id and
 *    state, so a stream of frames that each complete never matches);
 *  - no byte received or sent for idle_timeout_ns while no frame is open and nothing is
 *    queued: B_IDLE;
 *  - buffer references or queued answers without progress for twice the transfer timeout
 *    (a client that stopped reading; an unregister, which waits one timeout, reports BUSY
 *    first): B_STALL. */
static int srv_budget(srv_conn_t *c, uint64_t now)
{
    const tcp_ctx_t *ctx = c->w->ctx;
    if (c->st == S_AUTH)
        return now - c->accepted_ns > HANDSHAKE_NS ? B_UNAUTH : B_OK;
    if ((c->ref || c->tx_n > 0) && now - c->last_progress_ns > 2 * timeout_ns(ctx))
        return B_STALL;
    bool in_frame = c->st != S_HDR || c->rx_len > c->rx_pos;
    if (!in_frame) {
        c->frame_since_ns = 0;
        return c->tx_n == 0 && !c->ref && now - c->last_progress_ns > ctx->te->idle_timeout_ns
                   ? B_IDLE : B_OK;
    }
    if (c->frame_since_ns && c->frame_id == c->cur.id && c->frame_st == c->st)
        return now - c->frame_since_ns > 2 * timeout_ns(ctx) ? B_SLOW : B_OK;
    c->frame_id = c->cur.id;
    c->frame_st = c->st;
    c->frame_since_ns = now;
    return B_OK;
}

static void srv_close_over_budget(srv_conn_t *c)
{
    mc_te_t *te = c->w->ctx->te;
    switch (c->sweep_why) {
    case B_UNAUTH:
        atomic_fetch_add(&te->conn_closed_unauth, 1);
        MC_LOG_DEBUG("tcp server: no handshake within %u ms; closing the connection",
                     MC_AUTH_HANDSHAKE_TIMEOUT_MS);
        break;
    case B_IDLE:
        atomic_fetch_add(&te->conn_closed_idle, 1);
        MC_LOG_DEBUG("tcp server: connection idle for %llu s; closing it",
                     (unsigned long long)(te->idle_timeout_ns / 1000000000ull));
        break;
    case B_SLOW:
        atomic_fetch_add(&te->conn_closed_slow, 1);
        MC_LOG_WARN("tcp server: a frame (opcode %u) unfinished after %u ms; closing its "
                    "connection", c->cur.opcode, 2 * te->timeout_ms);
        break;
    default:
        MC_LOG_WARN("tcp server: client stalled for %u ms; closing its connection",
                    2 * te->timeout_ms);
        break;
    }
    srv_close(c);
}

static void worker_sweep(tcp_worker_t *w, uint64_t now)
{
    pthread_mutex_lock(&w->mu);
    size_t n = w->n_cli;
    pthread_mutex_unlock(&w->mu);
    for (size_t i = 0; i < n; i++) {
        pthread_mutex_lock(&w->mu);
        cli_conn_t *c = w->cli[i];
        pthread_mutex_unlock(&w->mu);
        pthread_mutex_lock(&c->mu);
        if (!c->owner) {
            cli_expire(c, now);
            /* re-arm a connection a synchronous waiter left parked, so that a peer closing
             * an idle connection is seen within a sweep */
            if (c->fd >= 0)
                set_events(c->w->epfd, c->fd, c, &c->ev, cli_events(c));
        }
        pthread_mutex_unlock(&c->mu);
    }
    /* Server connections over a budget (srv_budget). The list is shared with the acceptor:
     * find under the lock, close outside it. */
    srv_conn_t *doomed = NULL;
    pthread_mutex_lock(&w->mu);
    for (srv_conn_t *c = w->srv; c; c = c->next) {
        c->sweep_why = srv_budget(c, now);
        if (c->sweep_why != B_OK) {
            c->sweep_next = doomed;
            doomed = c;
        }
    }
    pthread_mutex_unlock(&w->mu);
    while (doomed) {
        srv_conn_t *c = doomed;
        doomed = c->sweep_next;
        srv_close_over_budget(c);
    }
}

static void *worker_main(void *arg)
{
    tcp_worker_t *w = arg;
    tcp_ctx_t *ctx = w->ctx;
    struct epoll_event evs[64];
    uint64_t busy_ns = ctx->te->busy_poll_ns, spin_until = 0, now = mc_now_ns();
    while (!atomic_load(&ctx->stop)) {
        /* While answers wait for socket space, poll without sleeping (until no event came for
         * the busy-poll time): the ACK that frees space comes within microseconds, and a
         * sleeping loop costs a wake-up (tens of microseconds on VMs) each time. An idle or
         * merely listening loop sleeps: spinning there steals the CPU its peers need. */
        bool spin = w->n_sending > 0 && now < spin_until;
        int n = epoll_wait(w->epfd, evs, 64, spin ? 0 : 20);
        if (n < 0 && errno != EINTR) {
            MC_LOG_ERROR("tcp: epoll_wait failed: %m");
            break;
        }
        for (int i = 0; i < n; i++) {
            int kind = *(int *)evs[i].data.ptr;
            uint32_t e = evs[i].events;
            if (kind == K_WAKE)
                continue;
            if (kind == K_LISTEN) {
                srv_accept(ctx);
            } else if (kind == K_SRV) {
                srv_conn_t *c = evs[i].data.ptr;
                if ((e & EPOLLOUT) && !srv_on_writable(c))
                    continue;
                if (e & (EPOLLIN | EPOLLERR | EPOLLHUP))
                    srv_on_readable(c);
            } else if (kind == K_CLI) {
                cli_conn_t *c = evs[i].data.ptr;
                if (e & EPOLLOUT)
                    cli_on_writable(c);
                cli_on_readable(c);
            }
        }
        now = mc_now_ns();
        if (n > 0)
            spin_until = now + busy_ns; /* busy_ns 0: never spins */
        if (now >= w->next_sweep) {
            w->next_sweep = now + SWEEP_NS;
            worker_sweep(w, now);
        }
    }
    return NULL;
}

static void tcp_fini(void *vctx);

/* How many connections one submit (one transfer's requests to one peer) may spread over:
 * the config's tcp_stripe, else half the online CPUs, at least 1, at most tcp_connections. Spreading
 * pays only when the receiving (and, on one host, the sending) copies of the streams run on
 * different cores; on 2 vCPUs a store get of 32 MiB spread over 4 streams ran 20 % slower than
 * on one (docs/internals/transfer-engine.md, "Striping"). Transfers started together still
 * take different connections (round robin). */
static uint32_t tcp_stripe_width(const mc_te_t *te)
{
    long want = (long)te->tcp_stripe; /* checked at create: 0 or 1..MC_TE_MAX_STRIPE */
    if (want <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        want = cpus > 1 ? cpus / 2 : 1;
    }
    return want < (long)te->tcp_conns ? (uint32_t)want : te->tcp_conns;
}

static mc_status_t tcp_init(mc_te_t *te, const mc_te_transport_t *fallback,
                            void **ctx_p)
{
    tcp_ctx_t *ctx = mc_calloc(1, sizeof(*ctx));
    if (!ctx)
        return MC_ERR_NO_MEMORY;
    ctx->te = te;
    ctx->listen_fd = te->listen_fd;
    ctx->listen_kind = K_LISTEN;
    ctx->nw = te->workers;
    ctx->stripe = tcp_stripe_width(te);
    MC_LOG_DEBUG("tcp: one transfer spreads over at most %u of %u connections per peer",
                 ctx->stripe, te->tcp_conns);
    pthread_mutex_init(&ctx->peers_mu, NULL);
    mc_tenant_windows_init(&ctx->windows);
    /* checked at create: 0 (kernel autotuning) or MC_TE_MIN_SOCKET_BUF..MC_TE_MAX_SOCKET_BUF */
    ctx->sndbuf = ctx->rcvbuf = (int)te->tcp_socket_buf;
    ctx->w = mc_calloc(ctx->nw, sizeof(*ctx->w));
    if (!ctx->w) {
        mc_free(ctx);
        return MC_ERR_NO_MEMORY;
    }
    mc_status_t st = MC_OK;
    for (uint32_t i = 0; i < ctx->nw; i++) {
        tcp_worker_t *w = &ctx->w[i];
        w->ctx = ctx;
        w->idx = (int)i;
        w->wake_kind = K_WAKE;
        pthread_mutex_init(&w->mu, NULL);
        w->epfd = epoll_create1(EPOLL_CLOEXEC);
        w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (w->epfd < 0 || w->wake_fd < 0) {
            MC_LOG_ERROR("tcp: epoll/eventfd failed: %m");
            st = MC_ERR_IO;
        } else {
            struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &w->wake_kind};
            epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wake_fd, &ev);
        }
    }
    if (st == MC_OK) {
        mc_net_set_nonblock(ctx->listen_fd, 1);
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &ctx->listen_kind};
        if (epoll_ctl(ctx->w[0].epfd, EPOLL_CTL_ADD, ctx->listen_fd, &ev) != 0)
            st = MC_ERR_IO;
    }
    for (uint32_t i = 0; st == MC_OK && i < ctx->nw; i++) {
        if (pthread_create(&ctx->w[i].th, NULL, worker_main, &ctx->w[i]) != 0)
            st = MC_ERR_INTERNAL;
        else
            ctx->w[i].started = true;
    }
    if (st != MC_OK) {
        tcp_fini(ctx);
        return st;
    }
    *ctx_p = ctx;
    return MC_OK;
}

static void tcp_fini(void *vctx)
{
    tcp_ctx_t *ctx = vctx;
    if (!ctx)
        return;
    atomic_store(&ctx->stop, 1);
    for (uint32_t i = 0; i < ctx->nw; i++) {
        tcp_worker_t *w = &ctx->w[i];
        if (w->wake_fd >= 0) {
            uint64_t one = 1;
            ssize_t r = write(w->wake_fd, &one, sizeof(one));
            (void)r;
        }
    }
    for (uint32_t i = 0; i < ctx->nw; i++)
        if (ctx->w[i].started)
            pthread_join(ctx->w[i].th, NULL);
    for (uint32_t i = 0; i < ctx->nw; i++) {
        tcp_worker_t *w = &ctx->w[i];
        while (w->srv)
            srv_close(w->srv);
        for (size_t k = 0; k < w->n_cli; k++) {
            cli_conn_t *c = w->cli[k];
            pthread_mutex_lock(&c->mu);
            cli_fail(c, MC_ERR_CANCELED);
            pthread_mutex_unlock(&c->mu);
        }
        mc_free(w->cli);
        if (w->epfd >= 0)
            close(w->epfd);
        if (w->wake_fd >= 0)
            close(w->wake_fd);
        pthread_mutex_destroy(&w->mu);
    }
    mc_free(ctx->w);
    pthread_mutex_destroy(&ctx->peers_mu);
    mc_tenant_windows_fini(&ctx->windows); /* every server connection released its window */
    mc_free(ctx);
}

static void tcp_peer_free(void *vctx, mc_te_peer_t *peer)
{
    tcp_peer_t *tp = peer->tp_state[MC_TE_TP_TCP];
    if (!tp)
        return;
    for (uint32_t i = 0; i < tp->n; i++) {
        cli_hash_stop(&tp->conns[i]);
        pthread_mutex_destroy(&tp->conns[i].mu);
    }
    if (tp->n)
        mc_free(tp->conns[0].rx);
    mc_free(tp->conns);
    mc_free(tp);
    peer->tp_state[MC_TE_TP_TCP] = NULL;
}

/* A READ's slices all travel on one connection when one transfer never spreads (stripe 1):
 * then cli_data_* hash every READ (te_hashed.h). Wider, a request of more than one slice may
 * be striped and stays unhashed. */
static bool tcp_hashes_reads(void *vctx)
{
    const tcp_ctx_t *ctx = vctx;
    return ctx->stripe == 1;
}

static uint64_t tcp_max_slice(void *vctx)
{
    tcp_ctx_t *ctx = vctx;
    return ctx->te->slice_size;
}

static bool tcp_can_reach(void *vctx, const mc_segment_desc_t *desc)
{
    return true;
}


/* ================================= descriptor fetch ==================================== */

/* ops.fetch_desc: one GET_DESC frame on a connection of its own (tcp_frame.h). */
static mc_status_t tcp_fetch_desc(void *vctx, const mc_te_peer_t *peer, char **json_p,
                                  size_t *len_p)
{
    tcp_ctx_t *ctx = vctx;
    const char *host = peer->host;
    uint16_t port = peer->port;
    uint32_t timeout_ms = ctx->te->timeout_ms;
    uint64_t deadline = mc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int fd;
    mc_status_t st = mc_auth_connect(host, port, timeout_ms, ctx->te->auth, &fd);
    if (st != MC_OK)
        return st;
    uint8_t hdr[MC_TE_FRAME_HDR_SIZE];
    mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                       .opcode = MC_TE_OP_GET_DESC, .id = 1};
    mc_te_frame_encode(&h, hdr);
    char *json = NULL;
    st = mc_net_send_all(fd, hdr, sizeof(hdr), deadline);
    if (st == MC_OK)
        st = mc_net_recv_all(fd, hdr, sizeof(hdr), deadline);
    if (st == MC_OK) {
        if (mc_te_frame_decode(hdr, sizeof(hdr), &h) != MC_OK ||
            h.opcode != (MC_TE_OP_GET_DESC | MC_TE_OP_RESPONSE) || h.id != 1) {
            st = MC_ERR_PROTOCOL;
        } else if (h.status != MC_OK) {
            st = (mc_status_t)h.status;
        } else if (h.length > MC_TE_FRAME_MAX_DESC) {
            st = MC_ERR_TOO_LARGE;
        } else if (!(json = mc_malloc(h.length + 1))) {
            st = MC_ERR_NO_MEMORY;
        } else {
            st = mc_net_recv_all(fd, json, h.length, deadline);
            json[h.length] = '\0';
        }
    }
    close(fd);
    if (st != MC_OK) {
        mc_free(json);
        MC_LOG_DEBUG("GET_DESC from %s:%u failed: %s", host, port, mc_status_name(st));
        return st;
    }
    *json_p = json;
    *len_p = h.length;
    return MC_OK;
}

/* ops.control: one NOTIFY/PROBE request on a connection of its own, its bare answer. */
static mc_status_t tcp_control(void *vctx, const char *host, uint16_t port, uint16_t opcode,
                               const void *body, size_t len, uint32_t timeout_ms)
{
    const tcp_ctx_t *ctx = vctx;
    uint64_t deadline = mc_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int fd;
    mc_status_t st = mc_auth_connect(host, port, timeout_ms, ctx->te->auth, &fd);
    if (st != MC_OK)
        return st;
    static _Atomic uint64_t next_id = 1;
    uint64_t id = atomic_fetch_add(&next_id, 1);
    uint8_t hdr[MC_TE_FRAME_HDR_SIZE];
    mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                       .opcode = opcode, .id = id, .length = len};
    mc_te_frame_encode(&h, hdr);
    st = mc_net_send_all(fd, hdr, sizeof(hdr), deadline);
    if (st == MC_OK && len)
        st = mc_net_send_all(fd, body, len, deadline);
    if (st == MC_OK)
        st = mc_net_recv_all(fd, hdr, sizeof(hdr), deadline);
    if (st == MC_OK) {
        if (mc_te_frame_decode(hdr, sizeof(hdr), &h) != MC_OK ||
            h.opcode != (opcode | MC_TE_OP_RESPONSE) || h.id != id || h.length != 0)
            st = MC_ERR_PROTOCOL;
        else
            st = (mc_status_t)h.status;
    }
    if (st != MC_ERR_PROTOCOL && st != MC_ERR_TIMEOUT && st != MC_ERR_CONNECTION) {
        /* The exchange is over (answer read): reset instead of closing, so that frequent
         * notifications and probes leave no TIME_WAIT socket behind to use up local ports. */
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    close(fd);
    return st;
}

const mc_te_transport_ops_t mc_te_tcp_ops = {
    .name = "tcp",
    .init = tcp_init,
    .fini = tcp_fini,
    .max_slice = tcp_max_slice,
    .sync_wait = tcp_sync_wait,
    .can_reach = tcp_can_reach,
    .submit = tcp_submit,
    .peer_free = tcp_peer_free,
    .fetch_desc = tcp_fetch_desc,
    .control = tcp_control,
    .hashes_reads = tcp_hashes_reads,
};
