/* RPC server loop (contract in rpc_server.h). One epoll thread owns every connection; each has
 * an input and an output mc_buf_t (freed when drained if they grew past 1 MiB). Reads stop
 * while a connection owes more than 64 MiB of replies. Replies are appended to the output
 * buffer during dispatch and flushed only after before_reply, at the end of the iteration; a
 * closed connection is freed at the end of the iteration in which it closed, so no pointer
 * to it outlives the events being processed. */
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
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#define SRV_READ_CHUNK (256u << 10)
#define SRV_OUT_PAUSE (64u << 20) /* stop reading a connection whose replies pile up */
#define SRV_KEEP_CAP (1u << 20)   /* a drained buffer above this is freed (mc_buf_trim) */

typedef struct conn {
    int fd;
    uint64_t id;
    mc_buf_t in, out;
    int closing;    /* flush out, then close */
    int dead;       /* closed; freed at the end of the iteration */
    int dirty;      /* in the dirty list */
    uint32_t events;
    struct conn *next_dead;
} conn_t;

typedef struct task {
    void (*fn)(void *);
    void *arg;
    struct task *next;
} task_t;

struct mc_rpc_server {
    mc_rpc_server_opts_t o;
    int lfd, epfd, evfd;
    uint16_t port;
    atomic_int stop;
    uint64_t next_conn_id;
    uint32_t n_conns;
    conn_t **dirty;
    size_t n_dirty, cap_dirty;
    conn_t *dead;
    conn_t **all;       /* every live connection, for destroy */
    size_t n_all, cap_all;
    pthread_mutex_t task_mu;
    task_t *tasks, *tasks_tail;
    mc_rpc_arena_t arena;
    uint64_t next_cron_ms;
};

static void conn_update_events(mc_rpc_server_t *s, conn_t *c)
{
    uint32_t ev = 0;
    if (mc_buf_unread(&c->out))
        ev |= EPOLLOUT;
    if (!c->closing && mc_buf_unread(&c->out) < SRV_OUT_PAUSE)
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
    epoll_ctl(s->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->dead = 1;
    c->next_dead = s->dead;
    s->dead = c;
    s->n_conns--;
    for (size_t i = 0; i < s->n_all; i++) {
        if (s->all[i] == c) {
            s->all[i] = s->all[--s->n_all];
            break;
        }
    }
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

/* Appends a response frame (header + packed body) to the connection's output. */
static void conn_reply(mc_rpc_server_t *s, conn_t *c, const mc_rpc_hdr_t *req, int32_t status,
                       const ProtobufCMessage *resp)
{
    size_t blen = resp ? protobuf_c_message_get_packed_size(resp) : 0;
    if (blen > MC_RPC_MAX_BODY) {
        MC_LOG_ERROR("rpc: response to opcode %u is %zu bytes, over the cap", req->opcode, blen);
        resp = NULL;
        blen = 0;
        status = MC_ERR_TOO_LARGE;
    }
    if (mc_buf_reserve(&c->out, MC_RPC_HDR_SIZE + blen) != MC_OK) {
        conn_close(s, c);
        return;
    }
    mc_rpc_hdr_t h = {.opcode = req->opcode, .flags = MC_RPC_FLAG_RESPONSE, .status = status,
                      .body_len = (uint32_t)blen, .req_id = req->req_id};
    mc_rpc_hdr_encode(&h, c->out.data + c->out.len);
    if (resp)
        protobuf_c_message_pack(resp, c->out.data + c->out.len + MC_RPC_HDR_SIZE);
    c->out.len += MC_RPC_HDR_SIZE + blen;
    conn_mark_dirty(s, c);
}

static void dispatch(mc_rpc_server_t *s, conn_t *c, const mc_rpc_hdr_t *h, const uint8_t *body)
{
    const mc_rpc_op_info_t *info = mc_rpc_op_info(h->opcode);
    if (h->flags & MC_RPC_FLAG_RESPONSE) {
        MC_LOG_WARN("rpc: conn %llu sent a response frame as a request", (unsigned long long)c->id);
        conn_reply(s, c, h, MC_ERR_PROTOCOL, NULL);
        return;
    }
    if (!info || !s->o.handlers[h->opcode]) {
        MC_LOG_WARN("rpc: conn %llu: unknown opcode %u", (unsigned long long)c->id, h->opcode);
        if (s->o.on_request)
            s->o.on_request(s->o.ctx, h->opcode, 1);
        conn_reply(s, c, h, MC_ERR_NOT_SUPPORTED, NULL);
        return;
    }
    ProtobufCMessage *req = protobuf_c_message_unpack(info->req, &s->arena.pb, h->body_len, body);
    if (!req) {
        MC_LOG_WARN("rpc: conn %llu: undecodable %s body (%u bytes)", (unsigned long long)c->id,
                    info->name, h->body_len);
        if (s->o.on_request)
            s->o.on_request(s->o.ctx, h->opcode, 1);
        conn_reply(s, c, h, MC_ERR_PROTOCOL, NULL);
        mc_rpc_arena_reset(&s->arena);
        return;
    }
    mc_rpc_call_t call = {.srv = s, .conn_id = c->id, .opcode = h->opcode, .req_id = h->req_id,
                          .arena = &s->arena};
    ProtobufCMessage *resp = NULL;
    mc_status_t st = s->o.handlers[h->opcode](s->o.ctx, &call, req, &resp);
    if (st == MC_RPC_DEFERRED) { /* answered later by mc_rpc_server_reply */
        mc_rpc_arena_reset(&s->arena);
        return;
    }
    if (st == MC_OK && !resp)
        st = MC_ERR_INTERNAL;
    conn_reply(s, c, h, st, st == MC_OK ? resp : NULL);
    mc_rpc_arena_reset(&s->arena);
}

mc_status_t mc_rpc_server_reply(mc_rpc_server_t *s, uint64_t conn_id, uint16_t opcode,
                                uint64_t req_id, mc_status_t status, const ProtobufCMessage *resp)
{
    for (size_t i = 0; i < s->n_all; i++) {
        conn_t *c = s->all[i];
        if (c->id != conn_id)
            continue;
        if (c->dead || c->closing)
            return MC_ERR_RPC_FAIL;
        mc_rpc_hdr_t h = {.opcode = opcode, .req_id = req_id};
        conn_reply(s, c, &h, status, status == MC_OK ? resp : NULL);
        return MC_OK;
    }
    return MC_ERR_RPC_FAIL;
}

/* Parses and dispatches every complete frame in c->in. */
static void conn_process(mc_rpc_server_t *s, conn_t *c)
{
    uint32_t max_body = s->o.max_body ? s->o.max_body : MC_RPC_MAX_BODY;
    while (!c->dead && !c->closing) {
        size_t avail = mc_buf_unread(&c->in);
        if (avail < MC_RPC_HDR_SIZE)
            break;
        const uint8_t *p = mc_buf_head(&c->in);
        mc_rpc_hdr_t h;
        mc_status_t st = mc_rpc_hdr_decode(p, max_body, &h);
        if (st != MC_OK) {
            MC_LOG_WARN("rpc: conn %llu: bad frame header (%s, body_len %u); closing",
                        (unsigned long long)c->id, mc_status_name(st), h.body_len);
            h.flags = 0;
            conn_reply(s, c, &h, st, NULL);
            c->closing = 1;
            mc_buf_consume(&c->in, avail);
            break;
        }
        if (avail < MC_RPC_HDR_SIZE + (size_t)h.body_len)
            break;
        /* Consuming keeps the bytes in place (nothing writes to c->in before the next
         * read), so the body stays valid through dispatch. */
        mc_buf_consume(&c->in, MC_RPC_HDR_SIZE + h.body_len);
        dispatch(s, c, &h, p + MC_RPC_HDR_SIZE);
    }
    mc_buf_trim(&c->in, SRV_KEEP_CAP); /* a 64 MiB frame must not pin 64 MiB forever */
}

static void conn_read(mc_rpc_server_t *s, conn_t *c)
{
    for (int rounds = 0; rounds < 16 && !c->dead && !c->closing; rounds++) {
        if (mc_buf_reserve(&c->in, SRV_READ_CHUNK) != MC_OK) {
            conn_close(s, c);
            return;
        }
        ssize_t n = recv(c->fd, c->in.data + c->in.len, c->in.cap - c->in.len, 0);
        if (n > 0) {
            c->in.len += (size_t)n;
            conn_process(s, c);
            if ((size_t)n < SRV_READ_CHUNK)
                return;
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
        return;
    }
}

static void conn_flush(mc_rpc_server_t *s, conn_t *c)
{
    while (mc_buf_unread(&c->out)) {
        ssize_t n = send(c->fd, mc_buf_head(&c->out), mc_buf_unread(&c->out), MSG_NOSIGNAL);
        if (n > 0) {
            mc_buf_consume(&c->out, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        conn_close(s, c);
        return;
    }
    if (!mc_buf_unread(&c->out)) {
        mc_buf_trim(&c->out, SRV_KEEP_CAP);
        if (c->closing) {
            conn_close(s, c);
            return;
        }
    }
    conn_update_events(s, c);
}

static void srv_accept(mc_rpc_server_t *s)
{
    uint32_t max_conns = s->o.max_conns ? s->o.max_conns : 4096;
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                MC_LOG_WARN("rpc: accept: %s", strerror(errno));
            return;
        }
        if (s->n_conns >= max_conns) {
            MC_LOG_WARN("rpc: connection limit %u reached; refusing", max_conns);
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
    s->lfd = s->epfd = s->evfd = -1;
    pthread_mutex_init(&s->task_mu, NULL);
    mc_rpc_arena_init(&s->arena, 1u << 20);
    mc_status_t st = mc_net_listen(opts->host ? opts->host : "0.0.0.0", opts->port, 1, &s->lfd,
                                   &s->port);
    if (st != MC_OK)
        goto fail;
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
    *srv_p = s;
    return MC_OK;
fail:
    mc_rpc_server_destroy(s);
    return st;
}

uint16_t mc_rpc_server_port(const mc_rpc_server_t *srv) { return srv->port; }

mc_status_t mc_rpc_server_run(mc_rpc_server_t *s)
{
    struct epoll_event evs[256];
    s->next_cron_ms = mc_now_ms() + s->o.cron_period_ms;
    while (!atomic_load(&s->stop)) {
        int timeout = -1;
        if (s->o.cron && s->o.cron_period_ms) {
            uint64_t now = mc_now_ms();
            timeout = s->next_cron_ms > now ? (int)(s->next_cron_ms - now) : 0;
        }
        int n = epoll_wait(s->epfd, evs, 256, timeout);
        if (n < 0 && errno != EINTR) {
            MC_LOG_ERROR("rpc: epoll_wait: %s", strerror(errno));
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
            if (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR))
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
        if (s->o.before_reply && s->n_dirty)
            s->o.before_reply(s->o.ctx);
        for (size_t i = 0; i < s->n_dirty; i++) {
            conn_t *c = s->dirty[i];
            c->dirty = 0;
            if (!c->dead)
                conn_flush(s, c);
        }
        s->n_dirty = 0;
        while (s->dead) {
            conn_t *c = s->dead;
            s->dead = c->next_dead;
            mc_buf_free(&c->in);
            mc_buf_free(&c->out);
            mc_free(c);
        }
    }
    return MC_OK;
}

void mc_rpc_server_stop(mc_rpc_server_t *s)
{
    atomic_store(&s->stop, 1);
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
        mc_buf_free(&c->in);
        mc_buf_free(&c->out);
        mc_free(c);
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
    mc_rpc_arena_destroy(&s->arena);
    pthread_mutex_destroy(&s->task_mu);
    mc_free(s);
}
