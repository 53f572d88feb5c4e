/* RPC server loop (contract in rpc_server.h). One epoll thread owns every connection.
 *
 * Input: each readable connection is read into one server-wide scratch buffer; complete
 * frames are dispatched straight from it, and only what is left (an incomplete frame, or
 * frames not yet dispatched because the connection is paused) is copied into the
 * connection's own buffer, which is then sized once for the whole declared frame after the
 * budget check. Output: replies are appended to the connection's output buffer during
 * dispatch and flushed only after before_reply, at the end of the iteration. Buffers are
 * freed when drained if they grew past SRV_KEEP_CAP. A closed connection is freed at the end
 * of the iteration in which it closed, so no pointer to it outlives the events being
 * processed. Timeouts are checked by a sweep over all connections every SRV_SWEEP_MS.
 *
 * Fairness: in one loop iteration a connection's requests run until their answers reach
 * SRV_ITER_QUOTA bytes or their handlers SRV_ITER_NS of the loop's time (at least one request
 * runs); the rest wait in its input buffer for the next iteration (s->resume makes that one
 * start at once and its sweep run them), so a few connections pipelining costly requests
 * delay everyone else by one bounded batch, not by all they sent. The time bounds requests
 * that are cheap to send and costly to answer in few bytes (thousands of ListObjects fit in
 * the byte quota).
 *
 * Accounting: c->acct = unread input + the rest of a declared incomplete frame + unread
 * output; s->buffered is the sum over connections (kept up to date by conn_account). */
#include "rpc/rpc_server.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "rpc/frame.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define SRV_READ_CHUNK (256u << 10) /* the scratch buffer: bytes per recv */
#define SRV_KEEP_CAP (64u << 10)    /* a drained buffer above this is freed (mc_buf_trim) */
#define SRV_SWEEP_MS 100u           /* timeout checks */
#define SRV_SMALL_FRAME 4096u       /* frames this small are never refused by the budget */
#define SRV_ITER_QUOTA (256u << 10) /* answer bytes a connection may produce per iteration */
#define SRV_ITER_NS 100000u         /* and handler time (0.1 ms: ten 128-key lookups) */

enum { CONN_HANDSHAKE, CONN_OPEN };

typedef struct conn {
    int fd;
    uint64_t id;
    int state;          /* CONN_HANDSHAKE until a valid PROOF */
    mc_auth_server_hs_t hs;
    mc_auth_peer_t peer;
    mc_buf_t in, out;
    size_t in_need;     /* bytes of the incomplete frame in `in` still to come */
    size_t acct;        /* bytes counted in s->buffered for this connection */
    uint32_t inflight;  /* deferred requests not answered yet */
    uint64_t accepted_ms, last_frame_ms; /* last complete frame in, or deferred answer out */
    uint64_t partial_since_ms; /* an incomplete frame has been waiting since; 0 = none */
    uint64_t blocked_since_ms; /* paused and not draining since; 0 = not paused */
    uint64_t quota_iter;       /* the loop iteration quota_used and quota_ns count for */
    size_t quota_used;         /* answer bytes produced in that iteration */
    uint64_t quota_ns;         /* time its handlers took in that iteration */
    int closing;    /* flush out, then close */
    int dead;       /* closed; freed at the end of the iteration */
    int dirty;      /* in the dirty list */
    uint32_t events;
    struct conn *next_dead;
    /* Held answers (before_reply returned a ticket): byte positions count every byte ever
     * queued on `out`. Bytes up to out_ok may be sent; holds[h_first..n_holds) release the
     * bytes up to .mark once the ticket .ticket is durable (tickets and marks increase). */
    uint64_t out_total, out_sent, out_ok, out_marked;
    /* where the first answer that is not light (mc_rpc_call_t.light) queued since out_marked
     * starts (UINT64_MAX: none): the bytes before it wait only for the light ticket */
    uint64_t strong_from;
    struct hold { uint64_t ticket, mark; } *holds;
    size_t h_first, n_holds, cap_holds;
} conn_t;

typedef struct task {
    void (*fn)(void *);
    void *arg;
    struct task *next;
} task_t;

struct mc_rpc_server {
    mc_rpc_server_opts_t o;
    mc_rpc_limits_t lim;  /* o.limits with the defaults filled in */
    int lfd, epfd, evfd;
    uint16_t port;
    atomic_int stop;
    uint64_t next_conn_id;
    uint32_t n_conns;
    conn_t **dirty;
    size_t n_dirty, cap_dirty;
    conn_t *dead;
    conn_t **all;       /* every live connection */
    size_t n_all, cap_all;
    pthread_mutex_t task_mu;
    task_t *tasks, *tasks_tail;
    mc_rpc_arena_t arena;
    uint64_t next_cron_ms, next_sweep_ms;
    uint8_t *scratch;   /* SRV_READ_CHUNK bytes */
    uint64_t buffered;  /* sum of c->acct */
    int resume;         /* a connection has frames to run after a pause: sweep now */
    uint64_t iter;      /* loop iterations (per-connection quotas) */
    uint64_t log_next_ms, log_skipped; /* srv_log_refusal */
    _Atomic uint64_t durable;  /* mc_rpc_server_release: highest ticket released */
    uint64_t durable_done;     /* the highest one applied to the connections' holds */
    pthread_t loop_thread;     /* the thread in mc_rpc_server_run, once loop_running */
    _Atomic int loop_running;
    int self_released;         /* loop thread: a release since the last epoll_wait (no wake-up
                                  was written: the next epoll_wait must not block) */
    uint64_t last_event_ns;    /* loop thread: when an epoll_wait last returned events
                                  (o.busy_poll_us counts from there) */
    /* counters (mc_rpc_server_stats) */
    _Atomic uint64_t st_conns, st_buffered, st_backpressure, st_busy, st_idle, st_slow,
        st_blocked, st_budget, st_unauth, st_auth_failed, st_refused;
};

static void bump(_Atomic uint64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

/* Recounts c's bytes into s->buffered. */
static void conn_account(mc_rpc_server_t *s, conn_t *c)
{
    size_t now = c->dead ? 0 : mc_buf_unread(&c->in) + c->in_need + mc_buf_unread(&c->out);
    s->buffered = s->buffered - c->acct + now;
    c->acct = now;
    atomic_store_explicit(&s->st_buffered, s->buffered, memory_order_relaxed);
}

/* Is c not read (nor its buffered frames run) now? When its queued answers exceed the cap, or
 * when the server is over budget and c has answers not yet delivered (a client that reads its
 * answers gets one request served per loop iteration even then). */
static int conn_paused(const mc_rpc_server_t *s, const conn_t *c)
{
    size_t out = mc_buf_unread(&c->out);
    return out > s->lim.conn_out_cap || (out && s->buffered > s->lim.mem_budget);
}

/* Has c produced its share of answers in this loop iteration? Its remaining frames wait for
 * the next one, so a few connections with costly requests cannot hold the loop for long. */
static bool conn_over_quota(const mc_rpc_server_t *s, const conn_t *c)
{
    return c->quota_iter == s->iter &&
           (c->quota_used >= SRV_ITER_QUOTA || c->quota_ns >= SRV_ITER_NS);
}

/* c's quota counts for this loop iteration from now on (reset at its first use in one). */
static void conn_quota_now(const mc_rpc_server_t *s, conn_t *c)
{
    if (c->quota_iter != s->iter) {
        c->quota_iter = s->iter;
        c->quota_used = 0;
        c->quota_ns = 0;
    }
}

/* Queued answer bytes that may be sent now (not held). */
static size_t conn_sendable(const conn_t *c) { return (size_t)(c->out_ok - c->out_sent); }

static void conn_update_events(mc_rpc_server_t *s, conn_t *c)
{
    int paused = conn_paused(s, c);
    /* the blocked clock also runs for a closing connection that still owes bytes */
    int stuck = paused || (c->closing && mc_buf_unread(&c->out));
    if (stuck && !c->blocked_since_ms) {
        c->blocked_since_ms = mc_now_ms();
        if (paused)
            bump(&s->st_backpressure);
    } else if (!stuck) {
        c->blocked_since_ms = 0;
    }
    uint32_t ev = 0;
    if (conn_sendable(c) && !c->dirty) /* a dirty one is flushed at this iteration's end: */
        ev |= EPOLLOUT;                 /* only what that flush could not send waits for it */
    if (!c->closing && !paused)
        ev |= EPOLLIN;
    if (ev == c->events)
        return;
    struct epoll_event e = {.events = ev, .data.ptr = c};
    if (epoll_ctl(s->epfd, EPOLL_CTL_MOD, c->fd, &e) == 0)
        c->events = ev;
}

static void conn_close(mc_rpc_server_t *s, conn_t *c)
{
    if (c->dead)
        return;
    c->dead = 1;
    conn_account(s, c); /* released before the peer can see the close */
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->next_dead = s->dead;
    s->dead = c;
    s->n_conns--;
    atomic_store_explicit(&s->st_conns, s->n_conns, memory_order_relaxed);
    for (size_t i = 0; i < s->n_all; i++) {
        if (s->all[i] == c) {
            s->all[i] = s->all[--s->n_all];
            break;
        }
    }
}

/* Logs a connection closed or refused for what its peer did, at most once a second (a flood
 * of bad connections must not flood the log; the mc_rpc_* counters count every one). */
static void srv_log_refusal(mc_rpc_server_t *s, uint64_t conn_id, const char *why)
{
    uint64_t now = mc_now_ms();
    if (now < s->log_next_ms) {
        s->log_skipped++;
        return;
    }
    MC_LOG_WARN("rpc: conn %llu closed: %s (%llu more in the last second, not logged)",
                (unsigned long long)conn_id, why, (unsigned long long)s->log_skipped);
    s->log_skipped = 0;
    s->log_next_ms = now + 1000;
}

/* Closes c for a reason counted in *counter. */
static void conn_drop(mc_rpc_server_t *s, conn_t *c, _Atomic uint64_t *counter, const char *why)
{
    srv_log_refusal(s, c->id, why);
    bump(counter); /* counted and its bytes released (conn_close) before the peer sees EOF */
    conn_close(s, c);
}

static void conn_mark_dirty(mc_rpc_server_t *s, conn_t *c)
{
    if (c->dirty)
        return;
    if (mc_array_reserve(&s->dirty, &s->cap_dirty, s->n_dirty + 1, 64) != MC_OK) {
        conn_close(s, c);
        return;
    }
    s->dirty[s->n_dirty++] = c;
    c->dirty = 1;
}

/* Appends raw bytes (handshake messages) to the connection's output. They tell nothing of the
 * application's state, so they are never held (unless behind held answers: order). */
static void conn_send_raw(mc_rpc_server_t *s, conn_t *c, const void *p, size_t n)
{
    bool free_to_go = c->out_ok == c->out_total;
    if (mc_buf_append(&c->out, p, n) != MC_OK) {
        conn_close(s, c);
        return;
    }
    c->out_total += n;
    if (free_to_go)
        c->out_ok = c->out_marked = c->out_total;
    conn_account(s, c);
    conn_mark_dirty(s, c);
}

/* Appends a response frame (header + packed body) to the connection's output. */
/* unheld: the answer shows no change that is not durable yet (mc_rpc_call_t.unheld), so it
 * is sendable at once unless answers before it are still held or unmarked (order). */
static void conn_reply(mc_rpc_server_t *s, conn_t *c, const mc_rpc_hdr_t *req, int32_t status,
                       const ProtobufCMessage *resp, bool light, bool unheld)
{
    bool free_to_go = unheld && c->out_ok == c->out_total;
    size_t blen = resp ? protobuf_c_message_get_packed_size(resp) : 0;
    if (blen > MC_RPC_MAX_BODY) {
        MC_LOG_ERROR("rpc: response to opcode %u is %zu bytes, over the cap", req->opcode, blen);
        resp = NULL;
        blen = 0;
        status = MC_ERR_TOO_LARGE;
        light = false;
    }
    if (!light && !free_to_go && c->strong_from == UINT64_MAX)
        c->strong_from = c->out_total;
    if (mc_buf_reserve(&c->out, MC_RPC_HDR_SIZE + blen) != MC_OK) {
        conn_close(s, c);
        return;
    }
    mc_rpc_hdr_t h = {.opcode = req->opcode, .flags = MC_RPC_FLAG_RESPONSE, .status = status,
                      .body_len = (uint32_t)blen, .req_id = req->req_id, .view = s->o.view};
    mc_rpc_hdr_encode(&h, c->out.data + c->out.len);
    if (resp)
        protobuf_c_message_pack(resp, c->out.data + c->out.len + MC_RPC_HDR_SIZE);
    c->out.len += MC_RPC_HDR_SIZE + blen;
    c->out_total += MC_RPC_HDR_SIZE + blen;
    conn_quota_now(s, c);
    c->quota_used += MC_RPC_HDR_SIZE + blen;
    if (free_to_go)
        c->out_ok = c->out_marked = c->out_total;
    conn_account(s, c);
    conn_mark_dirty(s, c);
}

static void dispatch(mc_rpc_server_t *s, conn_t *c, const mc_rpc_hdr_t *h, const uint8_t *body)
{
    const mc_rpc_op_info_t *info = mc_rpc_op_info(h->opcode);
    if (h->flags & MC_RPC_FLAG_RESPONSE) {
        MC_LOG_WARN("rpc: conn %llu sent a response frame as a request", (unsigned long long)c->id);
        conn_reply(s, c, h, MC_ERR_PROTOCOL, NULL, false, false);
        return;
    }
    if (!info || !s->o.handlers[h->opcode]) {
        MC_LOG_WARN("rpc: conn %llu: unknown opcode %u", (unsigned long long)c->id, h->opcode);
        if (s->o.on_request)
            s->o.on_request(s->o.ctx, h->opcode, 1);
        conn_reply(s, c, h, MC_ERR_NOT_SUPPORTED, NULL, false, false);
        return;
    }
    if (c->inflight >= s->lim.max_inflight) {
        bump(&s->st_busy);
        if (s->o.on_request)
            s->o.on_request(s->o.ctx, h->opcode, 1);
        conn_reply(s, c, h, MC_ERR_BUSY, NULL, false, false);
        return;
    }
    ProtobufCMessage *req = protobuf_c_message_unpack(info->req, &s->arena.pb, h->body_len, body);
    if (!req) {
        MC_LOG_WARN("rpc: conn %llu: undecodable %s body (%u bytes)", (unsigned long long)c->id,
                    info->name, h->body_len);
        if (s->o.on_request)
            s->o.on_request(s->o.ctx, h->opcode, 1);
        conn_reply(s, c, h, MC_ERR_PROTOCOL, NULL, false, false);
        mc_rpc_arena_reset(&s->arena);
        return;
    }
    mc_rpc_call_t call = {.srv = s, .conn_id = c->id, .opcode = h->opcode, .req_id = h->req_id,
                          .arena = &s->arena, .peer = &c->peer};
    ProtobufCMessage *resp = NULL;
    mc_status_t st = s->o.handlers[h->opcode](s->o.ctx, &call, req, &resp);
    if (st == MC_RPC_DEFERRED) { /* answered later by mc_rpc_server_reply */
        c->inflight++;
        mc_rpc_arena_reset(&s->arena);
        return;
    }
    if (st == MC_OK && !resp)
        st = MC_ERR_INTERNAL;
    conn_reply(s, c, h, st, st == MC_OK ? resp : NULL, st == MC_OK && call.light, call.unheld);
    mc_rpc_arena_reset(&s->arena);
}

static mc_status_t server_reply(mc_rpc_server_t *s, uint64_t conn_id, uint16_t opcode,
                                uint64_t req_id, mc_status_t status, const ProtobufCMessage *resp,
                                bool unheld)
{
    for (size_t i = 0; i < s->n_all; i++) {
        conn_t *c = s->all[i];
        if (c->id != conn_id)
            continue;
        if (c->inflight)
            c->inflight--;
        if (c->dead || c->closing)
            return MC_ERR_RPC_FAIL;
        c->last_frame_ms = mc_now_ms(); /* idle counts from here: the answer came late */
        mc_rpc_hdr_t h = {.opcode = opcode, .req_id = req_id};
        conn_reply(s, c, &h, status, status == MC_OK ? resp : NULL, false, unheld);
        return MC_OK;
    }
    return MC_ERR_RPC_FAIL;
}

mc_status_t mc_rpc_server_reply(mc_rpc_server_t *s, uint64_t conn_id, uint16_t opcode,
                                uint64_t req_id, mc_status_t status, const ProtobufCMessage *resp)
{
    return server_reply(s, conn_id, opcode, req_id, status, resp, false);
}

mc_status_t mc_rpc_server_reply_unheld(mc_rpc_server_t *s, uint64_t conn_id, uint16_t opcode,
                                       uint64_t req_id, mc_status_t status,
                                       const ProtobufCMessage *resp)
{
    return server_reply(s, conn_id, opcode, req_id, status, resp, true);
}

/* Checks the PROOF in p (MC_AUTH_PROOF_SIZE bytes) and queues the RESULT. */
static void conn_handshake(mc_rpc_server_t *s, conn_t *c, const uint8_t *p)
{
    uint8_t result[MC_AUTH_RESULT_SIZE];
    mc_status_t st = mc_auth_server_check(s->o.auth, &c->hs, p, result, &c->peer);
    conn_send_raw(s, c, result, sizeof(result));
    if (c->dead)
        return;
    if (st != MC_OK) {
        srv_log_refusal(s, c->id,
                        st == MC_ERR_AUTH ? "authentication failed (no or wrong token)"
                                          : "authentication failed (not a PROOF)");
        bump(&s->st_auth_failed);
        c->closing = 1;
        return;
    }
    c->state = CONN_OPEN;
    c->last_frame_ms = mc_now_ms();
}

/* Handles the PROOF and every complete frame at the start of p[0..len) until the connection
 * pauses, closes or the bytes end mid-message. Returns the bytes consumed. The bytes must stay
 * in place until this returns (handlers borrow the bodies). */
static size_t conn_process(mc_rpc_server_t *s, conn_t *c, const uint8_t *p, size_t len)
{
    uint32_t max_body = s->o.max_body ? s->o.max_body : MC_RPC_MAX_BODY;
    size_t used = 0;
    while (used < len && !c->dead && !c->closing && !conn_paused(s, c)) {
        if (conn_over_quota(s, c)) {
            s->resume = 1; /* the rest runs in the next iteration */
            break;
        }
        const uint8_t *q = p + used;
        size_t avail = len - used;
        if (c->state == CONN_HANDSHAKE) {
            if (avail < MC_AUTH_PROOF_SIZE)
                break;
            used += MC_AUTH_PROOF_SIZE;
            conn_handshake(s, c, q);
            continue;
        }
        if (avail < MC_RPC_HDR_SIZE)
            break;
        mc_rpc_hdr_t h;
        mc_status_t st = mc_rpc_hdr_decode(q, max_body, &h);
        if (st != MC_OK) {
            MC_LOG_WARN("rpc: conn %llu: bad frame header (%s, body_len %u); closing",
                        (unsigned long long)c->id, mc_status_name(st), h.body_len);
            h.flags = 0;
            conn_reply(s, c, &h, st, NULL, false, false);
            c->closing = 1;
            return len;
        }
        if (avail < MC_RPC_HDR_SIZE + (size_t)h.body_len)
            break;
        used += MC_RPC_HDR_SIZE + h.body_len;
        uint64_t t0 = mc_now_ns();
        c->last_frame_ms = t0 / 1000000u;
        c->partial_since_ms = 0;
        dispatch(s, c, &h, q + MC_RPC_HDR_SIZE);
        conn_quota_now(s, c);
        c->quota_ns += mc_now_ns() - t0;
    }
    return used;
}

/* After input was consumed: sizes c->in for the incomplete frame at its head (refusing one
 * that does not fit in the budget) and starts its slow-sender clock. */
static void conn_check_partial(mc_rpc_server_t *s, conn_t *c)
{
    size_t have = mc_buf_unread(&c->in);
    c->in_need = 0;
    if (!have || c->closing || c->dead) {
        c->partial_since_ms = 0;
        if (!have)
            mc_buf_trim(&c->in, SRV_KEEP_CAP);
        conn_account(s, c);
        return;
    }
    mc_rpc_hdr_t h;
    uint32_t max_body = s->o.max_body ? s->o.max_body : MC_RPC_MAX_BODY;
    bool known = c->state == CONN_OPEN && have >= MC_RPC_HDR_SIZE &&
                 mc_rpc_hdr_decode(mc_buf_head(&c->in), max_body, &h) == MC_OK;
    if (known && have >= MC_RPC_HDR_SIZE + (size_t)h.body_len) {
        c->partial_since_ms = 0; /* whole frames waiting for a pause to end */
        conn_account(s, c);
        return;
    }
    if (!c->partial_since_ms)
        c->partial_since_ms = mc_now_ms();
    if (!known) { /* the PROOF or a header still arriving */
        conn_account(s, c);
        return;
    }
    size_t frame = MC_RPC_HDR_SIZE + (size_t)h.body_len;
    uint64_t others = s->buffered - c->acct;
    uint64_t left = s->lim.mem_budget > others ? s->lim.mem_budget - others : 0;
    if (frame > left && frame > SRV_SMALL_FRAME) {
        srv_log_refusal(s, c->id, "a frame larger than what is left of the memory budget");
        mc_buf_reset(&c->in);
        mc_buf_trim(&c->in, 0);
        conn_reply(s, c, &h, MC_ERR_BUSY, NULL, false, false);
        c->closing = 1;
        bump(&s->st_budget);
        conn_account(s, c);
        return;
    }
    if (mc_buf_reserve(&c->in, frame - have) != MC_OK) {
        conn_close(s, c);
        return;
    }
    c->in_need = frame - have;
    conn_account(s, c);
}

/* Feeds n new bytes (may be 0: retry what waits in c->in) through conn_process. */
static void conn_ingest(mc_rpc_server_t *s, conn_t *c, const uint8_t *data, size_t n)
{
    if (mc_buf_unread(&c->in)) {
        if (n && mc_buf_append(&c->in, data, n) != MC_OK) {
            conn_close(s, c);
            return;
        }
        size_t used = conn_process(s, c, mc_buf_head(&c->in), mc_buf_unread(&c->in));
        if (c->dead)
            return;
        mc_buf_consume(&c->in, used);
    } else {
        size_t used = conn_process(s, c, data, n);
        if (c->dead)
            return;
        if (used < n && !c->closing && mc_buf_append(&c->in, data + used, n - used) != MC_OK) {
            conn_close(s, c);
            return;
        }
    }
    if (c->closing)
        mc_buf_reset(&c->in);
    conn_check_partial(s, c);
}

static void conn_read(mc_rpc_server_t *s, conn_t *c)
{
    if (mc_buf_unread(&c->in) && !conn_paused(s, c))
        conn_ingest(s, c, NULL, 0); /* frames left from a pause first */
    for (int rounds = 0;
         rounds < 16 && !c->dead && !c->closing && !conn_paused(s, c) && !conn_over_quota(s, c);
         rounds++) {
        /* over budget: small reads, so a connection adds little before its answer pauses it */
        size_t want = s->buffered > s->lim.mem_budget ? SRV_SMALL_FRAME : SRV_READ_CHUNK;
        ssize_t n = recv(c->fd, s->scratch, want, 0);
        if (n > 0) {
            conn_ingest(s, c, s->scratch, (size_t)n);
            if ((size_t)n < want)
                break;
            continue;
        }
        if (n == 0) {
            MC_LOG_DEBUG("rpc: conn %llu closed by peer", (unsigned long long)c->id);
            if (mc_buf_unread(&c->out))
                c->closing = 1; /* still try to flush what we owe */
            else
                conn_close(s, c);
            return;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            MC_LOG_DEBUG("rpc: conn %llu recv: %s", (unsigned long long)c->id, strerror(errno));
            conn_close(s, c);
        }
        break;
    }
    if (!c->dead)
        conn_update_events(s, c);
}

static void conn_flush(mc_rpc_server_t *s, conn_t *c)
{
    int sent = 0;
    while (conn_sendable(c)) {
        ssize_t n = send(c->fd, mc_buf_head(&c->out), conn_sendable(c), MSG_NOSIGNAL);
        if (n > 0) {
            mc_buf_consume(&c->out, (size_t)n);
            c->out_sent += (uint64_t)n;
            sent = 1;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        conn_close(s, c);
        return;
    }
    if (sent && c->blocked_since_ms)
        c->blocked_since_ms = mc_now_ms(); /* draining: not blocked */
    if (!mc_buf_unread(&c->out)) {
        mc_buf_trim(&c->out, SRV_KEEP_CAP);
        if (c->closing) {
            conn_close(s, c);
            return;
        }
    }
    conn_account(s, c);
    conn_update_events(s, c);
    if (mc_buf_unread(&c->in) && !c->closing && !conn_paused(s, c))
        s->resume = 1; /* frames left from a pause: the next iteration's sweep runs them */
}

/* After before_reply: c's answers queued in [out_marked, end) become sendable now (ticket 0,
 * or one already released, and nothing held before them) or are held until `ticket` is
 * released (behind whatever c already holds, so c's answers leave in the order queued). */
static void conn_hold_upto(mc_rpc_server_t *s, conn_t *c, uint64_t ticket, uint64_t end)
{
    if (end == c->out_marked)
        return;
    bool held = c->h_first < c->n_holds;
    if (ticket <= s->durable_done)
        ticket = 0;
    if (!ticket && !held) {
        c->out_ok = c->out_marked = end;
        return;
    }
    if (!ticket || (held && c->holds[c->n_holds - 1].ticket >= ticket)) {
        c->holds[c->n_holds - 1].mark = c->out_marked = end; /* joins the last hold */
        return;
    }
    if (mc_array_reserve(&c->holds, &c->cap_holds, c->n_holds + 1, 8) != MC_OK) {
        conn_close(s, c);
        return;
    }
    c->holds[c->n_holds++] = (struct hold){.ticket = ticket, .mark = end};
    c->out_marked = end;
}

/* c's answers queued since the last call: the light ones before its first other answer wait
 * for `light` (<= ticket), the rest for `ticket`. */
static void conn_hold(mc_rpc_server_t *s, conn_t *c, uint64_t ticket, uint64_t light)
{
    uint64_t split = c->strong_from < c->out_total ? c->strong_from : c->out_total;
    c->strong_from = UINT64_MAX;
    if (split > c->out_marked)
        conn_hold_upto(s, c, light, split);
    if (!c->dead)
        conn_hold_upto(s, c, ticket, c->out_total);
}

/* Loop thread: applies the tickets released since the last call (mc_rpc_server_release) to
 * every connection's holds; a connection with newly sendable bytes is flushed this
 * iteration (after before_reply). */
static void srv_release_holds(mc_rpc_server_t *s)
{
    uint64_t d = atomic_load(&s->durable);
    if (d <= s->durable_done)
        return;
    s->durable_done = d;
    for (size_t i = s->n_all; i-- > 0;) {
        if (i >= s->n_all)
            continue; /* a close in this loop shrank the list */
        conn_t *c = s->all[i];
        size_t k = c->h_first;
        while (k < c->n_holds && c->holds[k].ticket <= d)
            c->out_ok = c->holds[k++].mark;
        if (k == c->h_first)
            continue;
        c->h_first = k;
        if (k == c->n_holds)
            c->h_first = c->n_holds = 0;
        conn_mark_dirty(s, c);
    }
}

static void conn_free(conn_t *c)
{
    mc_buf_free(&c->in);
    mc_buf_free(&c->out);
    mc_free(c->holds);
    mc_free(c);
}

/* Timeouts, and reads resumed for connections a budget pause no longer holds. */
static void srv_sweep(mc_rpc_server_t *s, uint64_t now)
{
    uint32_t hs_ms = s->lim.handshake_timeout_ms;
    for (size_t i = s->n_all; i-- > 0;) {
        if (i >= s->n_all)
            continue; /* an earlier close in this sweep shrank the list */
        conn_t *c = s->all[i];
        if (c->state == CONN_HANDSHAKE && now - c->accepted_ms > hs_ms)
            conn_drop(s, c, &s->st_unauth, "no valid PROOF within the handshake timeout");
        else if (c->partial_since_ms && now - c->partial_since_ms > s->lim.slow_timeout_ms)
            conn_drop(s, c, &s->st_slow, "a frame incomplete past the slow-sender timeout");
        else if (c->blocked_since_ms && now - c->blocked_since_ms > s->lim.blocked_timeout_ms)
            conn_drop(s, c, &s->st_blocked, "not reading its answers past the blocked timeout");
        else if (c->state == CONN_OPEN && !c->inflight && !c->acct && !c->closing &&
                 now - c->last_frame_ms > s->lim.idle_timeout_ms)
            conn_drop(s, c, &s->st_idle, "idle past the idle timeout");
        else if (!c->closing) {
            if (!(c->events & EPOLLIN) || c->blocked_since_ms)
                conn_update_events(s, c); /* a budget pause may be over */
            if (mc_buf_unread(&c->in) && !conn_paused(s, c)) {
                conn_ingest(s, c, NULL, 0); /* frames left from a pause */
                if (!c->dead)
                    conn_update_events(s, c);
            }
        }
    }
}

/* At max_conns: closes the oldest connection still in its handshake; 0 if there is none. */
static int srv_evict_unproven(mc_rpc_server_t *s)
{
    conn_t *victim = NULL;
    for (size_t i = 0; i < s->n_all; i++) {
        conn_t *c = s->all[i];
        if (c->state == CONN_HANDSHAKE && (!victim || c->id < victim->id))
            victim = c;
    }
    if (!victim)
        return 0;
    conn_drop(s, victim, &s->st_unauth, "unauthenticated, closed at the connection limit");
    return 1;
}

static void srv_accept(mc_rpc_server_t *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                MC_LOG_WARN("rpc: accept: %s", strerror(errno));
            return;
        }
        if (s->n_conns >= s->lim.max_conns && !srv_evict_unproven(s)) {
            srv_log_refusal(s, s->next_conn_id + 1, "refused at the connection limit (every "
                                                     "connection is authenticated)");
            bump(&s->st_refused);
            close(fd);
            continue;
        }
        mc_net_tune(fd, 0, 0);
        conn_t *c = MC_NEW(conn_t);
        if (!c || mc_array_reserve(&s->all, &s->cap_all, s->n_all + 1, 64) != MC_OK) {
            mc_free(c);
            close(fd);
            continue;
        }
        c->fd = fd;
        c->id = ++s->next_conn_id;
        c->strong_from = UINT64_MAX;
        c->state = CONN_HANDSHAKE;
        c->accepted_ms = c->last_frame_ms = mc_now_ms();
        c->events = EPOLLIN;
        struct epoll_event e = {.events = EPOLLIN, .data.ptr = c};
        if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
            MC_LOG_WARN("rpc: epoll_ctl: %s", strerror(errno));
            close(fd);
            mc_free(c);
            continue;
        }
        s->all[s->n_all++] = c;
        s->n_conns++;
        atomic_store_explicit(&s->st_conns, s->n_conns, memory_order_relaxed);
        uint8_t hello[MC_AUTH_HELLO_SIZE];
        mc_auth_server_hello(s->o.auth, &c->hs, hello);
        conn_send_raw(s, c, hello, sizeof(hello));
    }
}

static void srv_run_tasks(mc_rpc_server_t *s)
{
    uint64_t v;
    while (read(s->evfd, &v, sizeof(v)) > 0) {
    }
    pthread_mutex_lock(&s->task_mu);
    task_t *t = s->tasks;
    s->tasks = s->tasks_tail = NULL;
    pthread_mutex_unlock(&s->task_mu);
    while (t) {
        task_t *n = t->next;
        t->fn(t->arg);
        mc_free(t);
        t = n;
    }
}

mc_status_t mc_rpc_server_create(const mc_rpc_server_opts_t *opts, mc_rpc_server_t **srv_p)
{
    mc_rpc_server_t *s = MC_NEW(mc_rpc_server_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    s->o = *opts;
    s->lim = opts->limits;
#define DEF(f, v) if (!s->lim.f) s->lim.f = (v)
    DEF(mem_budget, MC_RPC_DEFAULT_MEM_BUDGET);
    DEF(conn_out_cap, MC_RPC_DEFAULT_CONN_OUT_CAP);
    DEF(blocked_timeout_ms, MC_RPC_DEFAULT_BLOCKED_TIMEOUT_MS);
    DEF(max_inflight, MC_RPC_DEFAULT_MAX_INFLIGHT);
    DEF(idle_timeout_ms, MC_RPC_DEFAULT_IDLE_TIMEOUT_MS);
    DEF(slow_timeout_ms, MC_RPC_DEFAULT_SLOW_TIMEOUT_MS);
    DEF(handshake_timeout_ms, MC_AUTH_HANDSHAKE_TIMEOUT_MS);
    DEF(max_conns, MC_RPC_DEFAULT_MAX_CONNS);
#undef DEF
    s->lfd = s->epfd = s->evfd = -1;
    pthread_mutex_init(&s->task_mu, NULL);
    mc_rpc_arena_init(&s->arena, 1u << 20);
    s->scratch = mc_malloc(SRV_READ_CHUNK);
    if (!s->scratch) {
        mc_rpc_server_destroy(s);
        return MC_ERR_NO_MEMORY;
    }
    int bound = opts->bound_fd ? *opts->bound_fd : -1;
    s->o.bound_fd = NULL;
    mc_status_t st;
    if (bound >= 0) { /* s->lfd only on success: on failure the socket stays the caller's */
        st = mc_net_listen_reserved(bound, 1, &s->port);
        if (st != MC_OK)
            goto fail;
        s->lfd = bound;
    } else {
        st = mc_net_listen(opts->host ? opts->host : "0.0.0.0", opts->port, 1, &s->lfd,
                           &s->port);
        if (st != MC_OK)
            goto fail;
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    s->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (s->epfd < 0 || s->evfd < 0) {
        MC_LOG_ERROR("rpc: epoll/eventfd: %s", strerror(errno));
        st = MC_ERR_IO;
        goto fail;
    }
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = &s->lfd};
    struct epoll_event e2 = {.events = EPOLLIN, .data.ptr = &s->evfd};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->lfd, &e) != 0 ||
        epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->evfd, &e2) != 0) {
        MC_LOG_ERROR("rpc: epoll_ctl: %s", strerror(errno));
        st = MC_ERR_IO;
        goto fail;
    }
    if (bound >= 0)
        *opts->bound_fd = -1;
    *srv_p = s;
    return MC_OK;
fail:
    if (bound >= 0)
        s->lfd = -1;
    mc_rpc_server_destroy(s);
    return st;
}

uint16_t mc_rpc_server_port(const mc_rpc_server_t *srv) { return srv->port; }

const mc_auth_t *mc_rpc_server_keyring(const mc_rpc_server_t *srv) { return srv->o.auth; }

/* o.busy_poll_us (non-zero): polls the loop's events without sleeping until one arrives, the
 * spin since the last event runs out, or the server stops. Returns epoll_wait's result (0: go
 * to sleep). */
static int srv_busy_poll(mc_rpc_server_t *s, struct epoll_event *evs, int max)
{
    uint64_t us = s->o.busy_poll_us < MC_RPC_BUSY_POLL_MAX_US ? s->o.busy_poll_us
                                                               : MC_RPC_BUSY_POLL_MAX_US;
    uint64_t until = s->last_event_ns + us * 1000;
    int n = 0;
    while (n == 0 && !atomic_load(&s->stop) && mc_now_ns() < until)
        n = epoll_wait(s->epfd, evs, max, 0);
    return n;
}

mc_status_t mc_rpc_server_run(mc_rpc_server_t *s)
{
    struct epoll_event evs[256];
    s->next_cron_ms = mc_now_ms() + s->o.cron_period_ms;
    s->next_sweep_ms = mc_now_ms() + SRV_SWEEP_MS;
    s->loop_thread = pthread_self();
    atomic_store(&s->loop_running, 1);
    while (!atomic_load(&s->stop)) {
        s->iter++;
        uint64_t now = mc_now_ms(), next = s->next_sweep_ms;
        if (s->o.cron && s->o.cron_period_ms && s->next_cron_ms < next)
            next = s->next_cron_ms;
        int timeout = s->resume || s->self_released || next <= now ? 0 : (int)(next - now);
        s->self_released = 0;
        int n = s->o.busy_poll_us && timeout != 0 ? srv_busy_poll(s, evs, 256) : 0;
        if (n == 0)
            n = epoll_wait(s->epfd, evs, 256, timeout);
        if (n > 0 && s->o.busy_poll_us)
            s->last_event_ns = mc_now_ns();
        if (n < 0 && errno != EINTR) {
            MC_LOG_ERROR("rpc: epoll_wait: %s", strerror(errno));
            atomic_store(&s->loop_running, 0);
            return MC_ERR_IO;
        }
        for (int i = 0; i < n; i++) {
            void *p = evs[i].data.ptr;
            if (p == &s->lfd) {
                srv_accept(s);
                continue;
            }
            if (p == &s->evfd) {
                srv_run_tasks(s);
                continue;
            }
            conn_t *c = p;
            if (c->dead)
                continue;
            if ((evs[i].events & (EPOLLHUP | EPOLLERR)) && conn_paused(s, c))
                conn_close(s, c); /* gone while not read: do not spin on HUP */
            else if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
                conn_read(s, c);
            if (!c->dead && c->closing && (evs[i].events & (EPOLLHUP | EPOLLERR)))
                conn_close(s, c); /* cannot deliver what is left; do not spin on HUP */
            if (!c->dead && (evs[i].events & EPOLLOUT))
                conn_mark_dirty(s, c);
        }
        if (s->o.cron && s->o.cron_period_ms && mc_now_ms() >= s->next_cron_ms) {
            s->o.cron(s->o.ctx);
            s->next_cron_ms = mc_now_ms() + s->o.cron_period_ms;
        }
        if (s->resume || mc_now_ms() >= s->next_sweep_ms) {
            s->resume = 0;
            srv_sweep(s, mc_now_ms());
            s->next_sweep_ms = mc_now_ms() + SRV_SWEEP_MS;
        }
        srv_release_holds(s);
        uint64_t ticket = 0, light = 0;
        if (s->o.before_reply && s->n_dirty) {
            light = UINT64_MAX;
            ticket = s->o.before_reply(s->o.ctx, &light);
            if (light > ticket)
                light = ticket;
        }
        for (size_t i = 0; i < s->n_dirty; i++) {
            conn_t *c = s->dirty[i];
            c->dirty = 0;
            if (!c->dead)
                conn_hold(s, c, ticket, light);
            if (!c->dead)
                conn_flush(s, c);
        }
        s->n_dirty = 0;
        while (s->dead) {
            conn_t *c = s->dead;
            s->dead = c->next_dead;
            conn_free(c);
        }
    }
    atomic_store(&s->loop_running, 0);
    return MC_OK;
}

void mc_rpc_server_stats(const mc_rpc_server_t *s, mc_rpc_server_stats_t *o)
{
#define LD(f) atomic_load_explicit(&((mc_rpc_server_t *)s)->f, memory_order_relaxed)
    *o = (mc_rpc_server_stats_t){
        .conns = LD(st_conns), .buffered_bytes = LD(st_buffered),
        .backpressure = LD(st_backpressure), .busy = LD(st_busy), .closed_idle = LD(st_idle),
        .closed_slow = LD(st_slow), .closed_blocked = LD(st_blocked),
        .closed_budget = LD(st_budget), .closed_unauth = LD(st_unauth),
        .auth_failed = LD(st_auth_failed), .refused = LD(st_refused)};
#undef LD
}

void mc_rpc_server_stop(mc_rpc_server_t *s)
{
    atomic_store(&s->stop, 1);
    uint64_t one = 1;
    ssize_t r = write(s->evfd, &one, sizeof(one));
    (void)r;
}

void mc_rpc_server_release(mc_rpc_server_t *s, uint64_t ticket)
{
    uint64_t cur = atomic_load(&s->durable);
    while (cur < ticket && !atomic_compare_exchange_weak(&s->durable, &cur, ticket)) {
    }
    if (atomic_load(&s->loop_running) && pthread_equal(pthread_self(), s->loop_thread)) {
        /* from a handler or hook: this iteration (or the next, not blocking) applies it; a
         * wake-up would cost a write, a read and an extra loop iteration */
        s->self_released = 1;
        return;
    }
    uint64_t one = 1;
    ssize_t r = write(s->evfd, &one, sizeof(one));
    (void)r;
}

mc_status_t mc_rpc_server_post(mc_rpc_server_t *s, void (*fn)(void *), void *arg)
{
    task_t *t = MC_NEW(task_t);
    if (!t)
        return MC_ERR_NO_MEMORY;
    t->fn = fn;
    t->arg = arg;
    pthread_mutex_lock(&s->task_mu);
    if (s->tasks_tail)
        s->tasks_tail->next = t;
    else
        s->tasks = t;
    s->tasks_tail = t;
    pthread_mutex_unlock(&s->task_mu);
    uint64_t one = 1;
    ssize_t r = write(s->evfd, &one, sizeof(one));
    (void)r;
    return MC_OK;
}

void mc_rpc_server_destroy(mc_rpc_server_t *s)
{
    if (!s)
        return;
    while (s->n_all)
        conn_close(s, s->all[0]);
    while (s->dead) {
        conn_t *c = s->dead;
        s->dead = c->next_dead;
        conn_free(c);
    }
    task_t *t = s->tasks;
    while (t) {
        task_t *n = t->next;
        mc_free(t);
        t = n;
    }
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->epfd >= 0)
        close(s->epfd);
    if (s->evfd >= 0)
        close(s->evfd);
    mc_free(s->all);
    mc_free(s->dirty);
    mc_free(s->scratch);
    mc_rpc_arena_destroy(&s->arena);
    pthread_mutex_destroy(&s->task_mu);
    mc_free(s);
}
