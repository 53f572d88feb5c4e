/* Wire helpers of the standalone real-client service: abstract socket address, framed
 * send/receive with SCM_RIGHTS descriptors and deadlines, and the cap checks every request goes
 * through before the server acts on it. Design: rc_wire.h and docs/internals/store-client.md,
 * "Standalone real client and dummy clients". */
#include "client/rc_wire.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/store.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void mc_rc_sockaddr(uint16_t port, struct sockaddr_un *sa, socklen_t *len_p)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, MC_RC_SOCK_FMT, (unsigned)port);
    *len_p = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static mc_status_t wait_fd(int fd, short ev, uint64_t deadline_ns)
{
    for (;;) {
        int ms = -1;
        if (deadline_ns) {
            uint64_t now = mc_now_ns();
            if (now >= deadline_ns)
                return MC_ERR_TIMEOUT;
            ms = (int)((deadline_ns - now + 999999) / 1000000);
        }
        struct pollfd p = {.fd = fd, .events = ev};
        int r = poll(&p, 1, ms);
        if (r > 0)
            return MC_OK;
        if (r == 0)
            continue; /* re-check the deadline */
        if (errno != EINTR)
            return MC_ERR_CONNECTION;
    }
}

mc_status_t mc_rc_send(int fd, uint16_t op, uint16_t flags, int32_t status, uint64_t req_id,
                       const ProtobufCMessage *msg, int pass_fd, uint64_t deadline_ns)
{
    size_t blen = msg ? protobuf_c_message_get_packed_size(msg) : 0;
    if (blen > MC_RC_MAX_BODY)
        return MC_ERR_TOO_LARGE;
    uint8_t *frame = mc_malloc(MC_RPC_HDR_SIZE + blen);
    if (!frame)
        return MC_ERR_NO_MEMORY;
    mc_rpc_hdr_t h = {.opcode = op, .flags = flags, .status = status, .body_len = (uint32_t)blen,
                      .req_id = req_id};
    mc_rpc_hdr_encode(&h, frame);
    if (blen)
        protobuf_c_message_pack(msg, frame + MC_RPC_HDR_SIZE);
    size_t total = MC_RPC_HDR_SIZE + blen, off = 0;
    mc_status_t st = MC_OK;
    if (pass_fd >= 0) {
        /* the descriptor rides on the first sendmsg; the rest is plain */
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        memset(&u, 0, sizeof(u));
        struct iovec iov = {frame, total};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                            .msg_controllen = sizeof(u.buf)};
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        for (;;) {
            ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                off = (size_t)n;
                break;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                if ((st = wait_fd(fd, POLLOUT, deadline_ns)) != MC_OK)
                    goto out;
                continue;
            }
            st = MC_ERR_CONNECTION;
            goto out;
        }
    }
    if (off < total)
        st = mc_net_send_all(fd, frame + off, total - off, deadline_ns ? deadline_ns
                                                                        : mc_now_ns() + 3600e9);
out:
    mc_free(frame);
    return st;
}

/* recvmsg of up to len bytes; descriptors received go to *fd_p (first one) or are closed. */
static ssize_t recv_some(int fd, void *buf, size_t len, int *fd_p)
{
    union {
        char buf[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = {buf, len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                        .msg_controllen = sizeof(u.buf)};
    ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0)
        return n;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < nfd; i++) {
            int got;
            memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (fd_p && *fd_p < 0)
                *fd_p = got;
            else
                close(got); /* more than one descriptor, or none expected */
        }
    }
    return n;
}

mc_status_t mc_rc_recv(int fd, mc_rpc_hdr_t *h, uint8_t **body_p, int *fd_p,
                       uint64_t first_deadline_ns, uint64_t rest_deadline_ns)
{
    *body_p = NULL;
    int got_fd = -1;
    uint8_t hdr[MC_RPC_HDR_SIZE];
    size_t have = 0;
    mc_status_t st = MC_OK;
    uint64_t deadline = first_deadline_ns;
    while (have < sizeof(hdr)) {
        ssize_t n = recv_some(fd, hdr + have, sizeof(hdr) - have, fd_p ? &got_fd : NULL);
        if (n > 0) {
            if (have == 0)
                deadline = rest_deadline_ns ? rest_deadline_ns
                                            : mc_now_ns() + (uint64_t)MC_RC_FRAME_MS * 1000000;
            have += (size_t)n;
            continue;
        }
        if (n == 0) {
            st = MC_ERR_CONNECTION;
            goto fail;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            st = MC_ERR_CONNECTION;
            goto fail;
        }
        if ((st = wait_fd(fd, POLLIN, deadline)) != MC_OK)
            goto fail;
    }
    st = mc_rpc_hdr_decode(hdr, MC_RC_MAX_BODY, h);
    if (st != MC_OK)
        goto fail;
    if (h->body_len) {
        uint8_t *body = mc_malloc(h->body_len);
        if (!body) {
            st = MC_ERR_NO_MEMORY;
            goto fail;
        }
        st = mc_net_recv_all(fd, body, h->body_len, deadline);
        if (st != MC_OK) {
            mc_free(body);
            goto fail;
        }
        *body_p = body;
    }
    if (fd_p)
        *fd_p = got_fd;
    return MC_OK;
fail:
    if (got_fd >= 0)
        close(got_fd);
    if (fd_p)
        *fd_p = -1;
    return st;
}

/* A key (bytes): empty INVALID_PARAMS, over MC_STORE_KEY_MAX TOO_LARGE, a NUL byte inside
 * INVALID_KEY (the store API takes NUL-terminated keys: mc_wire_key_check). */
static mc_status_t check_key(ProtobufCBinaryData k)
{
    if (k.len == 0)
        return MC_ERR_INVALID_PARAMS;
    if (k.len > MC_STORE_KEY_MAX)
        return MC_ERR_TOO_LARGE;
    return mc_wire_key_check(k);
}

mc_status_t mc_rc_request_check(uint16_t op, const McRc__RcRequest *r)
{
    if (!r || op == 0 || op >= MC_RC_OP_MAX)
        return MC_ERR_INVALID_PARAMS;
    bool keyed = op == MC_RC_OP_PUT || op == MC_RC_OP_GET || op == MC_RC_OP_PUT_FROM ||
                 op == MC_RC_OP_GET_INTO || op == MC_RC_OP_EXIST || op == MC_RC_OP_GET_SIZE ||
                 op == MC_RC_OP_REMOVE;
    if (r->n_keys > MC_RC_MAX_KEYS || r->n_values > MC_RC_MAX_KEYS ||
        r->n_slices > MC_RC_MAX_SLICES || r->n_slice_counts > MC_RC_MAX_KEYS)
        return MC_ERR_TOO_LARGE;
    if (keyed) {
        if (r->n_keys == 0)
            return MC_ERR_INVALID_PARAMS;
        for (size_t i = 0; i < r->n_keys; i++) {
            mc_status_t st = check_key(r->keys[i]);
            if (st != MC_OK)
                return st;
        }
    }
    if (op == MC_RC_OP_PUT && r->n_values != r->n_keys)
        return MC_ERR_INVALID_PARAMS;
    if (op == MC_RC_OP_PUT_FROM || op == MC_RC_OP_GET_INTO) {
        if (r->n_slice_counts != r->n_keys)
            return MC_ERR_INVALID_PARAMS;
        uint64_t total = 0;
        for (size_t i = 0; i < r->n_slice_counts; i++) {
            if (r->slice_counts[i] > MC_RC_MAX_SLICES_PER_KEY)
                return MC_ERR_TOO_LARGE;
            total += r->slice_counts[i];
        }
        if (total != r->n_slices)
            return MC_ERR_INVALID_PARAMS;
        for (size_t i = 0; i < r->n_slices; i++) {
            const McRc__RcSlice *s = r->slices[i];
            if (!s || s->len == 0 || s->addr == 0 || s->addr + s->len < s->addr)
                return MC_ERR_INVALID_PARAMS;
        }
    }
    if (r->config && r->config->n_preferred_segments > MC_RC_MAX_PREFERRED)
        return MC_ERR_TOO_LARGE;
    if (r->config)
        for (size_t i = 0; i < r->config->n_preferred_segments; i++)
            if (!r->config->preferred_segments[i] ||
                strnlen(r->config->preferred_segments[i], 1025) > 1024)
                return MC_ERR_TOO_LARGE;
    if (op == MC_RC_OP_REMOVE_REGEX && (!r->regex || !*r->regex ||
                                        strnlen(r->regex, (size_t)MC_STORE_KEY_MAX + 1) >
                                            MC_STORE_KEY_MAX))
        return MC_ERR_INVALID_PARAMS;
    if (op == MC_RC_OP_REGISTER &&
        (r->region_base == 0 || r->region_size == 0 || r->region_size > MC_RC_MAX_REGION_SIZE ||
         r->region_base + r->region_size < r->region_base))
        return MC_ERR_INVALID_PARAMS;
    if (op == MC_RC_OP_UNREGISTER && r->region_base == 0)
        return MC_ERR_INVALID_PARAMS;
    return MC_OK;
}

const char *mc_rc_op_name(uint16_t op)
{
    static const char *names[MC_RC_OP_MAX] = {
        [MC_RC_OP_HELLO] = "hello",       [MC_RC_OP_ATTACH] = "attach",
        [MC_RC_OP_REGISTER] = "register", [MC_RC_OP_UNREGISTER] = "unregister",
        [MC_RC_OP_PING] = "ping",         [MC_RC_OP_PUT] = "put",
        [MC_RC_OP_GET] = "get",           [MC_RC_OP_PUT_FROM] = "put_from",
        [MC_RC_OP_GET_INTO] = "get_into", [MC_RC_OP_EXIST] = "exist",
        [MC_RC_OP_GET_SIZE] = "get_size", [MC_RC_OP_REMOVE] = "remove",
        [MC_RC_OP_REMOVE_REGEX] = "remove_regex", [MC_RC_OP_REMOVE_ALL] = "remove_all",
        [MC_RC_OP_STATS] = "stats",
    };
    return op < MC_RC_OP_MAX && names[op] ? names[op] : "?";
}

int mc_rc_thread_start(pthread_t *t, void *(*fn)(void *), void *arg)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(t, NULL, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}
