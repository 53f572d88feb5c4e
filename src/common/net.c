/* Sockets for every layer (net.h): host:port parsing (IPv4, [IPv6]), listen / connect with a
 * deadline, send_all / recv_all that loop until done or the deadline passes, free-port and
 * host-id helpers, and the process-wide busy-poll budget that waiters spin before sleeping
 * (set by the transfer engine from its config; the library reads no environment). */
#include "common/net.h"

#include "common/auth.h"
#include "common/log.h"
#include "common/time.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

mc_status_t mc_net_split_hostport(const char *addr, char *host_out, uint16_t *port_p)
{
    if (!addr)
        return MC_ERR_INVALID_PARAMS;
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return MC_ERR_INVALID_PARAMS;
    const char *h = addr;
    size_t hlen = (size_t)(colon - addr);
    if (h[0] == '[') { /* [v6]:port */
        if (hlen < 2 || h[hlen - 1] != ']')
            return MC_ERR_INVALID_PARAMS;
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= MC_HOST_MAX)
        return MC_ERR_INVALID_PARAMS;
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (errno || end == colon + 1 || *end != '\0' || port < 1 || port > 65535)
        return MC_ERR_INVALID_PARAMS;
    memcpy(host_out, h, hlen);
    host_out[hlen] = '\0';
    *port_p = (uint16_t)port;
    return MC_OK;
}

mc_status_t mc_net_set_nonblock(int fd, int on)
{
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0)
        return MC_ERR_IO;
    flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
    return fcntl(fd, F_SETFL, flags) == 0 ? MC_OK : MC_ERR_IO;
}

void mc_net_tune(int fd, int sndbuf, int rcvbuf)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (sndbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    if (rcvbuf > 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
}

static mc_status_t net_resolve(const char *host, uint16_t port, int passive, struct addrinfo **res)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = passive ? AI_PASSIVE : 0};
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", port);
    int rc = getaddrinfo(host && *host ? host : NULL, portstr, &hints, res);
    if (rc != 0) {
        MC_LOG_ERROR("cannot resolve %s:%u: %s", host ? host : "*", port, gai_strerror(rc));
        return MC_ERR_CONNECTION;
    }
    return MC_OK;
}

static uint16_t net_local_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0)
        return 0;
    return ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
}

/* A socket bound to host:port as a listener gets it (SO_REUSEADDR: a port whose connections
 * linger in TIME_WAIT binds), listening (backlog 512) when listen_now. */
static mc_status_t net_bind(const char *host, uint16_t port, int listen_now, int nonblock,
                            int *fd_p, uint16_t *port_p)
{
    struct addrinfo *res;
    mc_status_t st = net_resolve(host, port, 1, &res);
    if (st != MC_OK)
        return st;
    st = MC_ERR_IO;
    int err = 0;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || (listen_now && listen(fd, 512) != 0)) {
            err = errno;
            MC_LOG_DEBUG("bind/listen %s:%u failed: %s", host ? host : "*", port, strerror(err));
            close(fd);
            continue;
        }
        if (nonblock)
            mc_net_set_nonblock(fd, 1);
        *fd_p = fd;
        if (port_p)
            *port_p = net_local_port(fd);
        st = MC_OK;
        break;
    }
    freeaddrinfo(res);
    if (st != MC_OK)
        MC_LOG_ERROR("cannot %s %s:%u: %s", listen_now ? "listen on" : "bind", host ? host : "*",
                     port, strerror(err));
    return st;
}

mc_status_t mc_net_listen(const char *host, uint16_t port, int nonblock, int *fd_p,
                          uint16_t *port_p)
{
    return net_bind(host, port, 1, nonblock, fd_p, port_p);
}

mc_status_t mc_net_reserve(const char *host, uint16_t port, int *fd_p, uint16_t *port_p)
{
    mc_status_t st = net_bind(host, port, 0, 0, fd_p, port_p);
    if (st == MC_OK) { /* held: no other socket, SO_REUSEADDR or not, binds the port now */
        int zero = 0;
        setsockopt(*fd_p, SOL_SOCKET, SO_REUSEADDR, &zero, sizeof(zero));
    }
    return st;
}

mc_status_t mc_net_listen_reserved(int fd, int nonblock, uint16_t *port_p)
{
    uint16_t port = net_local_port(fd);
    if (port_p)
        *port_p = port;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (listen(fd, 512) != 0) {
        MC_LOG_ERROR("cannot listen on the reserved port %u: %s", port, strerror(errno));
        return MC_ERR_IO;
    }
    return nonblock ? mc_net_set_nonblock(fd, 1) : MC_OK;
}

mc_status_t mc_net_connect(const char *host, uint16_t port, uint32_t timeout_ms, int *fd_p)
{
    struct addrinfo *res;
    mc_status_t st = net_resolve(host, port, 0, &res);
    if (st != MC_OK)
        return st;
    st = MC_ERR_CONNECTION;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
            continue;
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            rc = poll(&pfd, 1, (int)timeout_ms);
            if (rc == 0) {
                errno = ETIMEDOUT;
                rc = -1;
            } else if (rc > 0) {
                int err = 0;
                socklen_t el = sizeof(err);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                errno = err;
                rc = err ? -1 : 0;
            }
        }
        if (rc != 0) {
            if (errno == ETIMEDOUT)
                st = MC_ERR_TIMEOUT;
            MC_LOG_DEBUG("connect %s:%u failed: %m", host, port);
            close(fd);
            continue;
        }
        mc_net_set_nonblock(fd, 0);
        mc_net_tune(fd, 0, 0);
        *fd_p = fd;
        st = MC_OK;
        break;
    }
    freeaddrinfo(res);
    return st;
}

static mc_status_t net_wait(int fd, short events, uint64_t deadline_ns)
{
    int timeout = -1;
    if (deadline_ns) {
        uint64_t now = mc_now_ns();
        if (now >= deadline_ns)
            return MC_ERR_TIMEOUT;
        timeout = (int)((deadline_ns - now + 999999) / 1000000);
    }
    struct pollfd pfd = {.fd = fd, .events = events};
    int rc = poll(&pfd, 1, timeout);
    if (rc == 0)
        return MC_ERR_TIMEOUT;
    if (rc < 0 && errno != EINTR)
        return MC_ERR_IO;
    return MC_OK;
}

mc_status_t mc_net_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | (deadline_ns ? MSG_DONTWAIT : 0));
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            mc_status_t st = net_wait(fd, POLLOUT, deadline_ns);
            if (st != MC_OK)
                return st;
            continue;
        }
        return MC_ERR_CONNECTION;
    }
    return MC_OK;
}

mc_status_t mc_net_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, deadline_ns ? MSG_DONTWAIT : 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return MC_ERR_CONNECTION;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            mc_status_t st = net_wait(fd, POLLIN, deadline_ns);
            if (st != MC_OK)
                return st;
            continue;
        }
        return MC_ERR_CONNECTION;
    }
    return MC_OK;
}

mc_status_t mc_net_free_port(uint16_t *port_p)
{
    unsigned low = 32768, high = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%u %u", &low, &high) != 2)
            low = 32768;
        fclose(f);
    }
    int fd;
    mc_status_t st = MC_ERR_IO;
    if (low > 10000 && low <= 65536) {
        for (int tries = 0; tries < 1000; tries++) {
            uint32_t r;
            mc_auth_random((uint8_t *)&r, sizeof(r));
            uint16_t port = (uint16_t)(10000 + r % (low - 10000));
            st = mc_net_listen("0.0.0.0", port, 0, &fd, port_p);
            if (st == MC_OK) {
                close(fd);
                return MC_OK;
            }
        }
        return st;
    }
    st = mc_net_listen("127.0.0.1", 0, 0, &fd, port_p);
    if (st == MC_OK)
        close(fd);
    return st;
}

void mc_net_host_id(char *out, size_t len)
{
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    out[0] = '\0';
    if (f) {
        if (fgets(out, (int)len, f))
            out[strcspn(out, "\n")] = '\0';
        fclose(f);
    }
    if (!out[0]) {
        char host[128] = "unknown";
        gethostname(host, sizeof(host) - 1);
        snprintf(out, len, "host:%s", host);
    }
}

static _Atomic uint64_t g_busy_poll_ns = 50 * 1000;

uint64_t mc_net_busy_poll_ns(void)
{
    return atomic_load_explicit(&g_busy_poll_ns, memory_order_relaxed);
}

void mc_net_set_busy_poll_us(uint32_t us)
{
    if (us > 10000)
        us = 10000;
    atomic_store_explicit(&g_busy_poll_ns, (uint64_t)us * 1000, memory_order_relaxed);
}

int mc_net_poll(struct pollfd *fds, unsigned long nfds, int timeout_ms, uint64_t *spin_ns)
{
    if (spin_ns && *spin_ns > 0 && timeout_ms != 0) {
        uint64_t t0 = mc_now_ns(), used;
        int r;
        do {
            r = poll(fds, (nfds_t)nfds, 0);
            used = mc_now_ns() - t0;
        } while (r == 0 && used < *spin_ns);
        *spin_ns = used < *spin_ns ? *spin_ns - used : 0;
        if (r != 0)
            return r;
    }
    return poll(fds, (nfds_t)nfds, timeout_ms);
}
