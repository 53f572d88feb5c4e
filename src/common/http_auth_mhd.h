/* The HTTP challenge-response (http_auth.h) on a libmicrohttpd server: the one place that
 * turns a request into a verdict and a refusal into a 401 (with a fresh challenge) or a 503.
 * Used by the HTTP metadata server, the master's admin/metrics port and the store client's
 * HTTP server.
 *
 * Header-only on purpose: the common module does not link libmicrohttpd; only the modules that
 * run an MHD server include this (and link it). */
#ifndef MC_COMMON_HTTP_AUTH_MHD_H
#define MC_COMMON_HTTP_AUTH_MHD_H

#include "common/alloc.h"
#include "common/http_auth.h"

#include <microhttpd.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* MHD_OPTION_URI_LOG_CALLBACK for servers whose *con_cls is just the request target: a copy of
 * the raw target (what clients sign), or NULL when over MC_HTTP_AUTH_TARGET_MAX (then no
 * signature can match). Free it with mc_mhd_target_free (MHD_OPTION_NOTIFY_COMPLETED). */
static inline void *mc_mhd_target_copy(void *cls, const char *uri, struct MHD_Connection *c)
{
    (void)cls;
    (void)c;
    return strlen(uri) <= MC_HTTP_AUTH_TARGET_MAX ? mc_strdup(uri) : NULL;
}

static inline void mc_mhd_target_free(void *cls, struct MHD_Connection *c, void **con_cls,
                                      enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    (void)toe;
    mc_free(*con_cls);
    *con_cls = NULL;
}

/* Checks one request against check (a server without a keyring accepts everything).
 * target: the raw request target (NULL = over the cap); body_hash: SHA-256 of the body, NULL
 * when the body is not read yet (headers-only check) or never read (then sign over the empty
 * body: pass mc_http_auth_body_hash of nothing). true = serve it. false = a refusal is queued,
 * its MHD result in *ret and the verdict in *verdict_p (may be NULL): 503 when the replay
 * cache is full, else 401 with a fresh challenge; the body names the verdict, as text/plain or,
 * for JSON APIs (json), as {"success":false,"error":"<verdict>"}. On success *peer (may be
 * NULL) tells who signed (mc_http_auth_check). */
static inline bool mc_mhd_authorized(mc_http_auth_server_t *check, struct MHD_Connection *c,
                                     const char *method, const char *target,
                                     const uint8_t *body_hash, bool json, enum MHD_Result *ret,
                                     mc_http_auth_verdict_t *verdict_p, mc_auth_peer_t *peer)
{
    char challenge[MC_HTTP_AUTH_CHALLENGE_MAX];
    const char *authz = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
                                                    MHD_HTTP_HEADER_AUTHORIZATION);
    mc_http_auth_verdict_t v = mc_http_auth_check(check, authz, method, target ? target : "",
                                                  body_hash, peer, challenge);
    if (verdict_p)
        *verdict_p = v;
    if (v == MC_HTTP_AUTH_OK)
        return true;
    char text[128];
    snprintf(text, sizeof(text), json ? "{\"success\":false,\"error\":\"%s\"}" : "%s",
             mc_http_auth_verdict_str(v));
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    *ret = MHD_NO;
    if (!r)
        return false;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            json ? "application/json; charset=utf-8" : "text/plain");
    if (v != MC_HTTP_AUTH_BUSY)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, challenge);
    *ret = MHD_queue_response(
        c, v == MC_HTTP_AUTH_BUSY ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_UNAUTHORIZED, r);
    MHD_destroy_response(r);
    return false;
}

#endif
