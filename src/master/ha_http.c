/* The standby's admin HTTP port (see ha.h): a standby runs no master service, so it answers
 * the HA endpoints itself on --metrics_port until it leads; then the service's HTTP server
 * (which answers the same endpoints for the leader) takes the port over by its listening
 * socket, so that the port never stops accepting (docs/internals/ha.md "Admin pages and
 * metrics"). It also serves the operator console (read-only: the page shows this standby's
 * role, the leader's address and its log lag), with its own login codes and sessions
 * (master/console.h).
 *
 * The listening socket's owner, in turn: this server's daemon (bound at start) until
 * mc_ha_http_take quiesces it (MHD_quiesce_daemon: it accepts no more and answers the
 * connections it has); from then on h->fd, lent to the service's server, which serves a
 * duplicate of it and never closes it. h closes it once, after its daemon stopped
 * (libmicrohttpd wants a quiesced socket open until then): when the service could not serve
 * it (mc_ha_http_handed false, before the service binds the port itself), else on the drain
 * thread, once the connections the daemon still had ended. */
#include "master/ha.h"

#include "master/console.h"

#include "common/alloc.h"
#include "common/http_auth_mhd.h"
#include "common/log.h"
#include "common/prom.h"

#include "common/time.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define HA_HTTP_CONNS 64u
#define HA_HTTP_CONNS_PER_IP 16u
#define HA_HTTP_IDLE_S 30u
/* after the hand-over: how long the daemon may go on answering the connections it had (a
 * request in flight, one a client sent on a connection accepted just before) before it stops;
 * a keep-alive connection still open then (its client sent nothing more) is closed */
#define HA_HTTP_DRAIN_MS 2000u
#define HA_HTTP_DRAIN_MIN_MS 50u

struct mc_ha_http {
    mc_ha_t *ha;
    struct MHD_Daemon *d; /* NULL once stopped */
    int fd;               /* the listening socket once taken (h's), else -1 */
    atomic_bool taken;    /* answers close their connection (the service serves new ones) */
    bool draining;        /* the drain thread runs (or ran): mc_ha_http_stop joins it */
    pthread_t drain;
    mc_http_auth_server_t *auth;
    mc_console_t *console;
    bool metrics_public;
};

static enum MHD_Result send_page(mc_ha_http_t *h, struct MHD_Connection *c, unsigned code,
                                 const char *type, char *body, bool owned)
{
    if (!body)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        strlen(body), body, owned ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (!r) {
        if (owned)
            mc_free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (atomic_load(&h->taken)) /* a kept-alive connection would stay on this server */
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *c, const char *url,
                               const char *method, const char *version, const char *upload,
                               size_t *upload_size, void **con_cls)
{
    (void)version;
    (void)upload;
    (void)upload_size;
    mc_ha_http_t *h = cls;
    if (strcmp(method, "GET") != 0)
        return send_page(h, c, 405, "text/plain", "method not allowed (GET only)\n", false);
    bool open = (h->metrics_public && (!strcmp(url, "/metrics") || !strcmp(url, "/health"))) ||
                !strcmp(url, "/console/login") || /* its one-time code is the credential */
                (strcmp(url, "/console/login_link") != 0 &&
                 mc_console_session_ok(h->console, c)); /* a session reads */
    if (!open && mc_http_auth_server_enabled(h->auth)) {
        uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE];
        mc_http_auth_body_hash(NULL, 0, bh);
        enum MHD_Result ret;
        if (!mc_mhd_authorized(h->auth, c, method, *con_cls, bh, false, &ret, NULL, NULL))
            return ret;
    }
    if (!strcmp(url, "/health")) {
        char buf[160];
        snprintf(buf, sizeof(buf),
                 "{\"status\":\"ok\",\"role\":\"standby\",\"ha_state\":\"standby\","
                 "\"service_ready\":false}");
        return send_page(h, c, 200, "application/json", mc_strdup(buf), true);
    }
    if (!strcmp(url, "/role"))
        return send_page(h, c, 200, "text/plain", "standby", false);
    if (!strcmp(url, "/ha_status"))
        return send_page(h, c, 200, "text/plain", "standby", false);
    if (!strcmp(url, "/leader"))
        return send_page(h, c, 200, "application/json", mc_ha_leader_json(h->ha), true);
    if (!strcmp(url, "/console/events")) /* the event log is the leader's */
        return send_page(h, c, 200, "application/json",
                         "{\"enabled\":false,\"standby\":true,\"epoch\":0,\"first_seq\":0,"
                         "\"next_seq\":0,\"gap\":false,\"events\":[]}",
                         false);
    if (!strncmp(url, "/console", 8))
        return mc_console_http(h->console, c, url, mc_http_auth_server_enabled(h->auth));
    if (!strcmp(url, "/metrics")) {
        mc_prom_t b = {0};
        mc_ha_render_metrics(h->ha, &b);
        if (b.st != MC_OK || mc_buf_append(&b.b, "", 1) != MC_OK) {
            mc_buf_free(&b.b);
            return send_page(h, c, 500, "text/plain", "no memory\n", false);
        }
        return send_page(h, c, 200, "text/plain; version=0.0.4", (char *)b.b.data, true);
    }
    return send_page(h, c, 404, "application/json",
                     "{\"success\":false,\"error\":\"not served by a standby\"}", false);
}

mc_ha_http_t *mc_ha_http_start(mc_ha_t *ha, const char *address, uint16_t port,
                               const mc_auth_t *auth, bool metrics_public)
{
    mc_ha_http_t *h = MC_NEW(mc_ha_http_t);
    if (!h)
        return NULL;
    h->ha = ha;
    h->fd = -1;
    h->metrics_public = metrics_public;
    if (!(h->console = mc_console_create()) ||
        mc_http_auth_server_create(auth, &h->auth) != MC_OK) {
        mc_console_free(h->console);
        mc_free(h);
        return NULL;
    }
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(port)};
    bool bind_addr = address && address[0] && inet_pton(AF_INET, address, &sin.sin_addr) == 1;
    /* MHD_USE_ITC: MHD_quiesce_daemon needs it with an internal thread. poll, not epoll:
     * libmicrohttpd's epoll loop can abort on a quiesce racing its own removal of the listening
     * socket from the epoll set (0.9.75 MHD_epoll); poll takes a quiesce at any time. */
    h->d = MHD_start_daemon(
        MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG, port, NULL, NULL,
        handler, h, MHD_OPTION_CONNECTION_LIMIT, HA_HTTP_CONNS,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, HA_HTTP_CONNS_PER_IP,
        MHD_OPTION_CONNECTION_TIMEOUT, HA_HTTP_IDLE_S, MHD_OPTION_URI_LOG_CALLBACK,
        mc_mhd_target_copy, NULL, MHD_OPTION_NOTIFY_COMPLETED, mc_mhd_target_free, NULL,
        bind_addr ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_END, (const struct sockaddr *)&sin,
        MHD_OPTION_END);
    if (!h->d) {
        MC_LOG_ERROR("ha: cannot start the standby's admin HTTP port %u", port);
        mc_http_auth_server_free(h->auth);
        mc_console_free(h->console);
        mc_free(h);
        return NULL;
    }
    return h;
}

/* Stops the daemon (its connections closed) and closes a taken socket: the port is free. */
static void stop_now(mc_ha_http_t *h)
{
    if (h->d)
        MHD_stop_daemon(h->d);
    h->d = NULL;
    if (h->fd >= 0)
        close(h->fd);
    h->fd = -1;
}

int mc_ha_http_take(void *ctx)
{
    mc_ha_http_t *h = ctx;
    if (!h || !h->d)
        return -1;
    atomic_store(&h->taken, true);
    MHD_socket fd = MHD_quiesce_daemon(h->d);
    if (fd == MHD_INVALID_SOCKET) {
        MC_LOG_WARN("ha: cannot hand the admin port's socket over to the service (quiesce "
                    "refused): the standby's server stops, then the service binds the port; a "
                    "request in between is refused");
        stop_now(h);
        return -1;
    }
    h->fd = fd;
    return fd;
}

/* After the service's server took the port: the daemon answers the connections it still has
 * (each answer closing its connection), for at most HA_HTTP_DRAIN_MS, then stops. It looks
 * at its count of connections no sooner than HA_HTTP_DRAIN_MIN_MS after the hand-over: a
 * connection it accepted as it was quiesced (its thread had checked the quiesce just before
 * its accept()) is counted by then, as its thread accepts and counts it in one step. */
static void *drain_main(void *arg)
{
    mc_ha_http_t *h = arg;
    uint64_t t0 = mc_now_ms();
    for (;;) {
        uint64_t now = mc_now_ms();
        const union MHD_DaemonInfo *di =
            MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        if ((now - t0 >= HA_HTTP_DRAIN_MIN_MS && di && di->num_connections == 0) ||
            now - t0 >= HA_HTTP_DRAIN_MS)
            break;
        mc_sleep_ms(5);
    }
    stop_now(h);
    return NULL;
}

void mc_ha_http_handed(void *ctx, bool served)
{
    mc_ha_http_t *h = ctx;
    if (!h)
        return;
    if (served && pthread_create(&h->drain, NULL, drain_main, h) == 0) {
        h->draining = true;
        return;
    }
    stop_now(h); /* not served: the service binds the port once this returns (or no thread) */
}

void mc_ha_http_stop(mc_ha_http_t *h)
{
    if (!h)
        return;
    if (h->draining)
        pthread_join(h->drain, NULL);
    else
        stop_now(h);
    mc_http_auth_server_free(h->auth);
    mc_console_free(h->console);
    mc_free(h);
}
