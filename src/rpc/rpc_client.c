/* RPC client (contract in rpc_client.h): one non-blocking TCP connection, made on first use and
 * remade after any failure, guarded by a mutex for the whole of a call. A call or batch frames
 * every request, interleaves writing them with reading answers into the receive buffer (c->rx,
 * an mc_buf_t, empty between calls) and matches answers to calls by req_id. Any transport
 * error, timeout or stray byte closes the connection, so a late answer never meets a later
 * call. */
#include "rpc/rpc_client.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "rpc/frame.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct mc_rpc_client {
    pthread_mutex_t mu;
    char host[MC_HOST_MAX];
    uint16_t port;
    mc_rpc_client_opts_t o;
    int fd;
    uint64_t next_req_id;
    mc_buf_t rx;             /* answers received, not yet decoded (empty between calls) */
    uint64_t last_answer_ns; /* when the connection last delivered an answer */
    /* per opcode, a moving average of how long a lone call's answer took from its send
     * (ns; 0 = not seen yet): batch_exchange spins only for answers due within the spin */
    uint32_t answer_ns[MC_OP_MAX];
};

mc_status_t mc_rpc_client_create(const char *addr, const mc_rpc_client_opts_t *opts,
                                 mc_rpc_client_t **cli_p)
{
    *cli_p = NULL;
    mc_rpc_client_t *c = MC_NEW(mc_rpc_client_t);
    if (!c)
        return MC_ERR_NO_MEMORY;
    if (!addr || mc_net_split_hostport(addr, c->host, &c->port) != MC_OK) {
        MC_LOG_ERROR("rpc client: bad address '%s' (want host:port)", addr ? addr : "(null)");
        mc_free(c);
        return MC_ERR_INVALID_PARAMS;
    }
    if (opts)
        c->o = *opts;
    if (!c->o.connect_timeout_ms)
        c->o.connect_timeout_ms = 3000;
    if (!c->o.max_body)
        c->o.max_body = MC_RPC_MAX_BODY;
    c->fd = -1;
    c->next_req_id = 1;
    pthread_mutex_init(&c->mu, NULL);
    *cli_p = c;
    return MC_OK;
}

#define CLI_READ_CHUNK (64u << 10) /* room made for each recv */
#define CLI_KEEP_CAP (1u << 20)    /* a larger receive buffer is freed when the socket closes */

static void cli_close(mc_rpc_client_t *c)
{
    c->last_answer_ns = 0;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    mc_buf_reset(&c->rx);
    mc_buf_trim(&c->rx, CLI_KEEP_CAP);
}

void mc_rpc_client_destroy(mc_rpc_client_t *c)
{
    if (!c)
        return;
    cli_close(c);
    mc_buf_free(&c->rx);
    pthread_mutex_destroy(&c->mu);
    mc_free(c);
}

/* A kept connection whose peer went away (server restarted) shows up readable with EOF
 * before we send anything: drop it and reconnect instead of failing the next call. Nothing
 * was sent on it yet, so this never duplicates a request. Skipped (one syscall saved) when the
 * connection answered within the last STALE_CHECK_NS: a server that died since then cannot
 * have been restarted yet, so a reconnect would fail as well. */
#define STALE_CHECK_NS 1000000ull
static void cli_drop_if_stale(mc_rpc_client_t *c)
{
    if (c->last_answer_ns && mc_now_ns() - c->last_answer_ns < STALE_CHECK_NS)
        return;
    struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
    if (poll(&pfd, 1, 0) <= 0)
        return;
    char b;
    ssize_t r = recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR) || r > 0 ||
        (pfd.revents & (POLLERR | POLLHUP))) {
        MC_LOG_DEBUG("rpc client: %s:%u: dropping a stale connection", c->host, c->port);
        cli_close(c);
    }
}

static mc_status_t cli_connect(mc_rpc_client_t *c)
{
    if (c->fd >= 0)
        cli_drop_if_stale(c);
    if (c->fd >= 0)
        return MC_OK;
    int fd;
    mc_status_t st = mc_auth_connect(c->host, c->port, c->o.connect_timeout_ms, c->o.auth, &fd);
    if (st != MC_OK)
        return st == MC_ERR_AUTH ? MC_ERR_AUTH : MC_ERR_RPC_FAIL;
    mc_net_set_nonblock(fd, 1);
    c->fd = fd;
    return MC_OK;
}

mc_status_t mc_rpc_client_connect(mc_rpc_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    mc_status_t st = cli_connect(c);
    pthread_mutex_unlock(&c->mu);
    return st;
}

void mc_rpc_client_disconnect(mc_rpc_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    cli_close(c);
    pthread_mutex_unlock(&c->mu);
}

void mc_rpc_client_peer(const mc_rpc_client_t *c, char *out, size_t len)
{
    snprintf(out, len, "%s:%u", c->host, c->port);
}

void mc_rpc_response_free(ProtobufCMessage *resp)
{
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
}

mc_status_t mc_rpc_client_call_view(mc_rpc_client_t *c, uint16_t opcode,
                                    const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                    uint32_t timeout_ms, ProtobufCAllocator *alloc,
                                    uint64_t *view_p)
{
    mc_rpc_pending_t p = {.opcode = opcode, .req = req, .allocator = alloc};
    mc_status_t st = mc_rpc_client_call_many(c, &p, 1, timeout_ms);
    *resp_p = p.resp;
    if (view_p)
        *view_p = p.view;
    return st == MC_OK ? p.status : st;
}

mc_status_t mc_rpc_client_call_with(mc_rpc_client_t *c, uint16_t opcode,
                                    const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                    uint32_t timeout_ms, ProtobufCAllocator *alloc)
{
    return mc_rpc_client_call_view(c, opcode, req, resp_p, timeout_ms, alloc, NULL);
}

mc_status_t mc_rpc_client_call(mc_rpc_client_t *c, uint16_t opcode, const ProtobufCMessage *req,
                               ProtobufCMessage **resp_p, uint32_t timeout_ms)
{
    return mc_rpc_client_call_with(c, opcode, req, resp_p, timeout_ms, NULL);
}

/* One batch of calls in flight (mc_rpc_client_call_many, or its halves call_send and
 * call_recv; the struct is mc_rpc_inflight_t, rpc_client.h), in three phases: encode (every
 * request framed into tx up front), send (tx written as the socket takes it) and receive
 * (answers read into c->rx and matched to calls by req_id); send and receive interleave until
 * all are answered, so a large batch never deadlocks on full socket buffers. */
typedef struct mc_rpc_inflight batch_t;

static void fail_rest(mc_rpc_pending_t *calls, size_t n, const uint8_t *done, mc_status_t st)
{
    for (size_t i = 0; i < n; i++) {
        if (!done[i]) {
            calls[i].status = st;
            calls[i].resp = NULL;
        }
    }
}

/* Encode phase, first half (no lock needed): resets each call's outputs, checks its request
 * against the opcode and adds up the frame sizes. */
static mc_status_t batch_check(mc_rpc_pending_t *calls, size_t n, size_t *total_p)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        calls[i].resp = NULL;
        calls[i].status = MC_ERR_RPC_FAIL;
        calls[i].view = 0;
        const mc_rpc_op_info_t *info = mc_rpc_op_info(calls[i].opcode);
        if (!calls[i].req || (info && calls[i].req->descriptor != info->req)) {
            MC_LOG_ERROR("rpc client: request %zu has the wrong message type for opcode %u", i,
                         calls[i].opcode);
            return MC_ERR_INVALID_PARAMS;
        }
        size_t bl = protobuf_c_message_get_packed_size(calls[i].req);
        if (bl > MC_RPC_MAX_BODY)
            return MC_ERR_TOO_LARGE;
        total += MC_RPC_HDR_SIZE + bl;
    }
    *total_p = total;
    return MC_OK;
}

/* Encode phase, second half (under the lock, once b->base is taken): frames every request
 * (the body first: its packed length, which batch_check sized tx with, goes into the header
 * without walking the message a second time). */
static void batch_encode(batch_t *b)
{
    size_t off = 0;
    for (size_t i = 0; i < b->n; i++) {
        const mc_rpc_pending_t *pc = &b->calls[i];
        size_t bl = protobuf_c_message_pack(pc->req, b->tx + off + MC_RPC_HDR_SIZE);
        mc_rpc_hdr_t h = {.opcode = pc->opcode, .body_len = (uint32_t)bl, .req_id = b->base + i};
        mc_rpc_hdr_encode(&h, b->tx + off);
        off += MC_RPC_HDR_SIZE + bl;
    }
}

/* Send phase: one non-blocking write of what is left of tx (tried before every wait: the socket
 * buffer almost always has room). */
static mc_status_t batch_send(mc_rpc_client_t *c, batch_t *b)
{
    if (b->sent == b->total)
        return MC_OK;
    ssize_t w = send(c->fd, b->tx + b->sent, b->total - b->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
        b->sent += (size_t)w;
    } else if (w < 0 && errno != EAGAIN && errno != EINTR) {
        MC_LOG_WARN("rpc client: %s:%u send: %s", c->host, c->port, strerror(errno));
        return MC_ERR_RPC_FAIL;
    }
    return MC_OK;
}

/* Receive phase: hands one answer frame (header h, body) to its call. */
static void batch_take_answer(batch_t *b, const mc_rpc_hdr_t *h, const uint8_t *body)
{
    uint64_t idx = h->req_id - b->base;
    mc_rpc_pending_t *pc = &b->calls[idx];
    pc->view = h->view;
    if (h->status != MC_OK) {
        pc->status = h->status;
    } else {
        const mc_rpc_op_info_t *info = mc_rpc_op_info(h->opcode);
        pc->resp = info && h->opcode == pc->opcode
                       ? protobuf_c_message_unpack(info->resp, pc->allocator, h->body_len, body)
                       : NULL;
        pc->status = pc->resp ? MC_OK : MC_ERR_PROTOCOL;
        if (!pc->resp)
            MC_LOG_ERROR("rpc client: undecodable response to opcode %u", pc->opcode);
    }
    b->done[idx] = 1;
    b->answered++;
}

/* Receive phase: takes every complete frame in c->rx; a partial one stays (with room made for
 * all of it). MC_ERR_RPC_FAIL on a frame that cannot be ours: the connection must go. */
static mc_status_t batch_take_frames(mc_rpc_client_t *c, batch_t *b)
{
    while (mc_buf_unread(&c->rx) >= MC_RPC_HDR_SIZE) {
        const uint8_t *fp = mc_buf_head(&c->rx);
        mc_rpc_hdr_t h;
        if (mc_rpc_hdr_decode(fp, c->o.max_body, &h) != MC_OK ||
            !(h.flags & MC_RPC_FLAG_RESPONSE)) {
            MC_LOG_ERROR("rpc client: %s:%u sent a bad frame header", c->host, c->port);
            return MC_ERR_RPC_FAIL;
        }
        size_t flen = MC_RPC_HDR_SIZE + (size_t)h.body_len;
        if (mc_buf_unread(&c->rx) < flen) {
            /* room for the whole frame now, so that it arrives in few reads */
            if (mc_buf_reserve(&c->rx, flen - mc_buf_unread(&c->rx)) != MC_OK)
                return MC_ERR_RPC_FAIL;
            return MC_OK;
        }
        uint64_t idx = h.req_id - b->base;
        if (h.req_id < b->base || idx >= b->n || b->done[idx]) {
            /* An answer to an earlier, abandoned call cannot arrive (we close on timeout), so
             * this is a server bug: drop the connection. */
            MC_LOG_ERROR("rpc client: unexpected req_id %llu", (unsigned long long)h.req_id);
            return MC_ERR_RPC_FAIL;
        }
        batch_take_answer(b, &h, fp + MC_RPC_HDR_SIZE);
        mc_buf_consume(&c->rx, flen);
    }
    return MC_OK;
}

/* Receive phase: one non-blocking read into c->rx, then takes what it completed. */
static mc_status_t batch_recv(mc_rpc_client_t *c, batch_t *b)
{
    if (mc_buf_reserve(&c->rx, CLI_READ_CHUNK) != MC_OK)
        return MC_ERR_NO_MEMORY;
    ssize_t r = recv(c->fd, c->rx.data + c->rx.len, c->rx.cap - c->rx.len, MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) {
        MC_LOG_WARN("rpc client: %s:%u: connection lost (%s)", c->host, c->port,
                    r == 0 ? "EOF" : strerror(errno));
        return MC_ERR_RPC_FAIL;
    }
    if (r < 0)
        return MC_OK;
    c->rx.len += (size_t)r;
    return batch_take_frames(c, b);
}

uint64_t mc_rpc_spin_for(uint64_t spin_ns, uint64_t due_in_ns)
{
    if (spin_ns == 0 || due_in_ns <= spin_ns)
        return spin_ns;
    return due_in_ns <= MC_RPC_SPIN_AHEAD_NS ? due_in_ns + spin_ns : 0;
}

/* The spin before sleeping on a call's answers (mc_rpc_spin_for with mc_net_busy_poll_ns): a
 * lone call's answer is expected when the opcode's answers came lately (answer_ns); a batch
 * spins the plain budget. */
static uint64_t batch_spin(const mc_rpc_client_t *c, const batch_t *b)
{
    uint64_t spin = mc_net_busy_poll_ns();
    uint16_t op = b->calls[0].opcode;
    if (b->n != 1 || op >= MC_OP_MAX)
        return spin;
    uint64_t due = b->t_sent + c->answer_ns[op], now = mc_now_ns();
    return mc_rpc_spin_for(spin, due > now ? due - now : 0);
}

/* After a lone call's answer: its time from the send into the opcode's average (weight 1/4). */
static void batch_learn(mc_rpc_client_t *c, const batch_t *b)
{
    uint16_t op = b->calls[0].opcode;
    if (b->n != 1 || op >= MC_OP_MAX)
        return;
    uint64_t took = mc_now_ns() - b->t_sent, avg = c->answer_ns[op];
    if (took > UINT32_MAX)
        took = UINT32_MAX;
    c->answer_ns[op] = (uint32_t)(avg ? avg - avg / 4 + took / 4 : took);
}

/* Sends and receives until every call is answered (MC_OK), the deadline passes
 * (MC_ERR_RPC_TIMEOUT) or the connection fails. */
static mc_status_t batch_exchange(mc_rpc_client_t *c, batch_t *b, uint64_t deadline)
{
    uint64_t spin = batch_spin(c, b);
    while (b->answered < b->n) {
        uint64_t now = mc_now_ns();
        if (now >= deadline) {
            MC_LOG_WARN("rpc client: %s:%u: deadline passed with %zu of %zu answers", c->host,
                        c->port, b->answered, b->n);
            return MC_ERR_RPC_TIMEOUT;
        }
        mc_status_t st = batch_send(c, b);
        if (st != MC_OK)
            return st;
        struct pollfd pfd = {.fd = c->fd, .events = POLLIN | (b->sent < b->total ? POLLOUT : 0)};
        int ms = (int)((deadline - now + 999999) / 1000000);
        int pr = mc_net_poll(&pfd, 1, ms, &spin);
        if (pr < 0 && errno != EINTR)
            return MC_ERR_RPC_FAIL;
        if (pr <= 0 || !(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        st = batch_recv(c, b);
        if (st != MC_OK)
            return st;
    }
    return MC_OK;
}

/* After the exchange: unanswered calls get the error and the connection is closed (late answers
 * must not meet later calls), as it is when bytes follow the last answer. */
static mc_status_t batch_finish(mc_rpc_client_t *c, batch_t *b, mc_status_t st)
{
    if (b->answered < b->n) {
        if (st == MC_OK)
            st = MC_ERR_RPC_FAIL;
        fail_rest(b->calls, b->n, b->done, st);
        cli_close(c);
    } else if (mc_buf_unread(&c->rx)) {
        MC_LOG_ERROR("rpc client: %zu stray bytes after the last answer", mc_buf_unread(&c->rx));
        cli_close(c);
    } else {
        c->last_answer_ns = mc_now_ns();
        batch_learn(c, b);
    }
    return st;
}

mc_status_t mc_rpc_client_call_send(mc_rpc_client_t *c, mc_rpc_pending_t *calls, size_t n,
                                    uint32_t timeout_ms, bool nowait, mc_rpc_inflight_t *f)
{
    *f = (batch_t){.calls = calls, .n = n};
    if (n == 0)
        return MC_ERR_INVALID_PARAMS;
    f->timeout_ns = (uint64_t)(timeout_ms ? timeout_ms : 10000) * 1000000ull;
    mc_status_t st = batch_check(calls, n, &f->total);
    if (st != MC_OK)
        return st;
    if (nowait && pthread_mutex_trylock(&c->mu) != 0)
        return MC_ERR_BUSY;
    if (!nowait)
        pthread_mutex_lock(&c->mu);
    f->done = mc_calloc(n, 1);
    f->tx = mc_malloc(f->total);
    if (!f->done || !f->tx) {
        pthread_mutex_unlock(&c->mu);
        mc_free(f->done);
        mc_free(f->tx);
        return MC_ERR_NO_MEMORY;
    }
    f->base = c->next_req_id;
    c->next_req_id += n;
    batch_encode(f);
    f->t_sent = mc_now_ns();
    st = cli_connect(c);
    if (st == MC_OK) {
        mc_buf_reset(&c->rx);
        st = batch_send(c, f);
        if (st != MC_OK)
            st = batch_finish(c, f, st);
    } else {
        fail_rest(calls, n, f->done, st);
    }
    if (st != MC_OK) {
        pthread_mutex_unlock(&c->mu);
        mc_free(f->tx);
        mc_free(f->done);
        return st;
    }
    f->c = c; /* the connection stays ours until call_recv */
    return MC_OK;
}

mc_status_t mc_rpc_client_call_recv(mc_rpc_inflight_t *f)
{
    mc_rpc_client_t *c = f->c;
    mc_status_t st = batch_finish(c, f, batch_exchange(c, f, mc_now_ns() + f->timeout_ns));
    pthread_mutex_unlock(&c->mu);
    mc_free(f->tx);
    mc_free(f->done);
    f->c = NULL;
    return st;
}

mc_status_t mc_rpc_client_call_many(mc_rpc_client_t *c, mc_rpc_pending_t *calls, size_t n,
                                    uint32_t timeout_ms)
{
    if (n == 0)
        return MC_OK;
    mc_rpc_inflight_t f;
    mc_status_t st = mc_rpc_client_call_send(c, calls, n, timeout_ms, false, &f);
    return st == MC_OK ? mc_rpc_client_call_recv(&f) : st;
}
