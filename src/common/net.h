/* Socket helpers shared by the TE tcp transport, the RPC layer and the HTTP clients.
 * All functions return mc_status_t; sockets are created CLOEXEC; errors are logged once here
 * with errno text. Addresses are "host:port" with host a name, an IPv4 address or [IPv6]. */
#ifndef MC_COMMON_NET_H
#define MC_COMMON_NET_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

#define MC_HOST_MAX 256

/* Split "host:port" (port required, 1..65535). host_out gets at most MC_HOST_MAX bytes. */
mc_status_t mc_net_split_hostport(const char *addr, char *host_out, uint16_t *port_p);

/* Listening TCP socket on host:port (port 0 = ephemeral; *port_p receives the bound port).
 * SO_REUSEADDR, backlog 512. Non-blocking if nonblock. */
mc_status_t mc_net_listen(const char *host, uint16_t port, int nonblock, int *fd_p,
                          uint16_t *port_p);

/* Reserving a port before it is served (an HA standby's RPC address, held until it leads):
 * mc_net_reserve binds a socket on host:port as mc_net_listen would (port 0 = ephemeral;
 * *port_p receives it; may be NULL) but does not listen, so a connect() to it is refused, and
 * clears SO_REUSEADDR once bound, so that no other socket binds the port meanwhile, with or
 * without SO_REUSEADDR (two sockets that both set it may share a port neither listens on).
 * SO_REUSEPORT is not set, so no socket shares the port through it either. Logs "cannot
 * bind host:port: <errno text>" on failure. The caller owns *fd_p. mc_net_listen_reserved sets
 * SO_REUSEADDR again and listens on such a socket (backlog 512; non-blocking if nonblock; *port_p,
 * if not NULL, receives its port). */
mc_status_t mc_net_reserve(const char *host, uint16_t port, int *fd_p, uint16_t *port_p);
mc_status_t mc_net_listen_reserved(int fd, int nonblock, uint16_t *port_p);

/* Blocking connect with a timeout; returns a blocking socket with TCP_NODELAY set. */
mc_status_t mc_net_connect(const char *host, uint16_t port, uint32_t timeout_ms, int *fd_p);

/* Send/receive exactly len bytes on a blocking socket, waiting at most until deadline_ns
 * (CLOCK_MONOTONIC, 0 = no deadline). MC_ERR_CONNECTION on EOF/reset, MC_ERR_TIMEOUT. */
mc_status_t mc_net_send_all(int fd, const void *buf, size_t len, uint64_t deadline_ns);
mc_status_t mc_net_recv_all(int fd, void *buf, size_t len, uint64_t deadline_ns);

mc_status_t mc_net_set_nonblock(int fd, int on);
void mc_net_tune(int fd, int sndbuf, int rcvbuf); /* TCP_NODELAY + optional buffer sizes */

/* Busy polling for a waiter that expects an answer within microseconds (a synchronous RPC or
 * small transfer). On VMs, waking a sleeping thread costs tens of microseconds (the sender's
 * wake-up IPI exits to the hypervisor), more than a small request itself, so such a waiter
 * first spins with non-blocking polls for a bounded time. The budget is process-wide: 50 µs
 * per wait unless mc_net_set_busy_poll_us changed it. The library reads no environment: the
 * transfer engine sets it from its config (mc_te_config_t.busy_poll_us), and a program may
 * call the setter itself. */
uint64_t mc_net_busy_poll_ns(void);
/* Sets the budget: us microseconds per wait, 0 = never spin, above 10000 taken as 10000. */
void mc_net_set_busy_poll_us(uint32_t us);

/* poll() that first spends up to *spin_ns (decremented by what it used) spinning with
 * zero-timeout polls, then blocks for at most timeout_ms. Same result as poll(). */
struct pollfd;
int mc_net_poll(struct pollfd *fds, unsigned long nfds, int timeout_ms, uint64_t *spin_ns);

/* A TCP port free right now on every address, for tests and benchmarks: picked at random below
 * the kernel's ephemeral range (net.ipv4.ip_local_port_range), so that no outgoing connection
 * can take it while a test restarts a server on it (the same rule as scripts/lib/free_port.py);
 * bind to 0 when that range starts at or below 10000. */
mc_status_t mc_net_free_port(uint16_t *port_p);

/* Stable identity of this host (boot id; same for all processes and namespaces on one
 * kernel). Written to out (at least 64 bytes). */
void mc_net_host_id(char *out, size_t len);

#endif
