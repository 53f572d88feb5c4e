/* The store client's HTTP server (upstream's client HTTP server: RealClient::start_http_server):
 * GET /health, /metrics, /metrics/summary, on libmicrohttpd's own thread, as the master's
 * (src/master/service.c). Contract in store_metrics.h; endpoints and bodies in
 * docs/operations.md, "Client HTTP server".
 *
 * Bounds: at most CLIENT_HTTP_CONNS connections at once (more are refused by the server), a
 * request (line and headers) of at most CLIENT_HTTP_MEM bytes (larger ones are answered 414 or
 * 431 by libmicrohttpd), idle connections closed after CLIENT_HTTP_IDLE_S seconds; bodies are
 * never read. /health pings the master (mc_store_health, up to the RPC timeout); the metrics
 * pages read atomics only. Requests are served one at a time by one thread, so a slow /health
 * delays the others but never the store's own threads. The server borrows the store handle:
 * mc_store_destroy stops it before anything else.
 *
 * Authentication: with a token file (te_tuning->auth_token_file) every request must be signed
 * (HTTP challenge-response, common/http_auth.h; else 401 with a challenge), except /metrics,
 * /metrics/summary and /health when metrics_public. At most CLIENT_HTTP_CONNS_PER_IP
 * connections from one address, so one host cannot hold all of them. */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/http_auth_mhd.h"
#include "common/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define CLIENT_HTTP_CONNS 32u
#define CLIENT_HTTP_MEM (16u * 1024u)
#define CLIENT_HTTP_IDLE_S 10u
#define CLIENT_HTTP_CONNS_PER_IP 8u

struct client_http {
    struct MHD_Daemon *d;
    mc_store_t *s;
    uint16_t port;
    const mc_auth_t *auth;         /* the store's (borrowed); NULL = open */
    mc_http_auth_server_t *check;  /* request checks over auth */
    bool metrics_public;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type, char *body,
                             int owned)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (owned)
            mc_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", type);
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

/* Upstream's /health: {"status":"healthy|master_unreachable","code":N}, 200 when healthy,
 * else 503. */
static enum MHD_Result http_health(client_http_t *h, struct MHD_Connection *c)
{
    mc_store_health_t code = mc_store_health(h->s);
    const char *status = code == MC_STORE_HEALTHY             ? "healthy"
                         : code == MC_STORE_NOT_SET_UP         ? "not_initialized"
                         : code == MC_STORE_MASTER_UNREACHABLE ? "master_unreachable"
                                                               : "unknown";
    char buf[96];
    snprintf(buf, sizeof(buf), "{\"status\":\"%s\",\"code\":%d}", status, (int)code);
    char *body = mc_strdup(buf);
    if (!body)
        return MHD_NO;
    return reply(c, code == MC_STORE_HEALTHY ? 200 : 503, "application/json", body, 1);
}

static enum MHD_Result http_metrics(client_http_t *h, struct MHD_Connection *c, bool summary)
{
    char *text = NULL;
    mc_status_t st = summary ? mc_store_metrics_summary(h->s, &text)
                             : mc_store_metrics_text(h->s, &text);
    if (st == MC_ERR_NOT_SUPPORTED) /* metrics_off: upstream's answer */
        return reply(c, 503, "text/plain", "metrics not available", 0);
    if (st != MC_OK)
        return reply(c, 500, "text/plain", "no memory", 0);
    return reply(c, 200, summary ? "text/plain" : "text/plain; version=0.0.4", text, 1);
}

/* true = the request may be served; false = a refusal (401 with a challenge, or 503) is
 * queued in *ret. Bodies are never read: requests are checked as signed over the empty body. */
static bool http_authorized(client_http_t *h, struct MHD_Connection *c, const char *url,
                            const char *method, const char *target, enum MHD_Result *ret)
{
    if (!mc_http_auth_server_enabled(h->check) ||
        (h->metrics_public && (!strcmp(url, "/metrics") || !strcmp(url, "/metrics/summary") ||
                               !strcmp(url, "/health"))))
        return true;
    uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE];
    mc_http_auth_body_hash(NULL, 0, bh);
    return mc_mhd_authorized(h->check, c, method, target, bh, false, ret, NULL, NULL);
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *c, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)upload_size;
    client_http_t *h = cls;
    enum MHD_Result ret;
    if (!http_authorized(h, c, url, method, *con_cls, &ret))
        return ret;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(c, 405, "text/plain", "method not allowed (GET only)\n", 0);
    if (strcmp(url, "/health") == 0)
        return http_health(h, c);
    if (strcmp(url, "/metrics") == 0)
        return http_metrics(h, c, false);
    if (strcmp(url, "/metrics/summary") == 0)
        return http_metrics(h, c, true);
    return reply(c, 404, "text/plain", "not found\n", 0);
}

/* libmicrohttpd's own messages go to our log sink, not to stderr; at INFO, since most are
 * about one client's bad request (431 for an oversized one), which the network controls. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char msg[256];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n && msg[n - 1] == '\n')
        msg[--n] = '\0';
    MC_LOG_INFO("client HTTP server: %s", msg);
}

/* The listening socket, bound here so that a taken port is told apart from other failures
 * (libmicrohttpd only says it could not start). -1 with *st_p set on failure. */
static int listen_socket(const char *host, int port, mc_status_t *st_p)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_ANY);
    if (host && host[0] && inet_pton(AF_INET, host, &sin.sin_addr) != 1) {
        MC_LOG_ERROR("client HTTP server: host '%s' is not an IPv4 address", host);
        *st_p = MC_ERR_INVALID_PARAMS;
        return -1;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        MC_LOG_ERROR("client HTTP server: socket: %m");
        *st_p = MC_ERR_IO;
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        *st_p = e == EADDRINUSE ? MC_ERR_BUSY : MC_ERR_IO;
        MC_LOG_WARN("client HTTP server not started: cannot listen on %s:%d: %s",
                    host && host[0] ? host : "0.0.0.0", port, strerror(e));
        close(fd);
        return -1;
    }
    return fd;
}

static void http_free(client_http_t *h)
{
    mc_http_auth_server_free(h->check);
    mc_free(h);
}

mc_status_t client_http_start(mc_store_t *s, const char *host, int port,
                              const mc_auth_t *auth, bool metrics_public, client_http_t **http_p)
{
    *http_p = NULL;
    if (port < 0 || port > 65535)
        return MC_ERR_INVALID_PARAMS;
    client_http_t *h = MC_NEW(client_http_t);
    if (!h)
        return MC_ERR_NO_MEMORY;
    h->auth = auth;
    mc_status_t st = mc_http_auth_server_create(auth, &h->check);
    if (st != MC_OK) {
        MC_LOG_WARN("client HTTP server not started: %s", mc_status_str(st));
        http_free(h);
        return st;
    }
    h->metrics_public = metrics_public;
    int fd = listen_socket(host, port, &st);
    if (fd < 0) {
        http_free(h);
        return st;
    }
    struct sockaddr_in bound;
    socklen_t blen = sizeof(bound);
    if (getsockname(fd, (struct sockaddr *)&bound, &blen) != 0) {
        close(fd);
        http_free(h);
        return MC_ERR_IO;
    }
    h->s = s;
    h->port = ntohs(bound.sin_port); /* the one picked when port is 0 */
    h->d = MHD_start_daemon(
        MHD_USE_AUTO | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
        http_handler, h, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET,
        (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT, CLIENT_HTTP_CONNS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, CLIENT_HTTP_CONNS_PER_IP,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CLIENT_HTTP_MEM,
        MHD_OPTION_CONNECTION_TIMEOUT, CLIENT_HTTP_IDLE_S, MHD_OPTION_URI_LOG_CALLBACK,
        mc_mhd_target_copy, NULL, MHD_OPTION_NOTIFY_COMPLETED, mc_mhd_target_free, NULL,
        MHD_OPTION_END);
    if (!h->d) { /* fd is left open: whether libmicrohttpd closed it is not said */
        MC_LOG_ERROR("client HTTP server: cannot start on port %d", port);
        http_free(h);
        return MC_ERR_IO;
    }
    mc_auth_warn_if_open("client HTTP server", host && host[0] ? host : "0.0.0.0", h->auth);
    MC_LOG_INFO("client HTTP server listening on %s:%u (/health, /metrics, /metrics/summary)",
                host && host[0] ? host : "0.0.0.0", (unsigned)h->port);
    *http_p = h;
    return MC_OK;
}

uint16_t client_http_port(const client_http_t *h) { return h ? h->port : 0; }

void client_http_stop(client_http_t *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d); /* closes the listening socket too */
    MC_LOG_INFO("client HTTP server on port %u stopped", (unsigned)h->port);
    http_free(h);
}

uint16_t mc_store_client_http_port(const mc_store_t *s) { return s ? client_http_port(s->http) : 0; }
