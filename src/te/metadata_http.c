/* HTTP metadata backend (upstream REST protocol): GET|PUT|DELETE <url>?key=<escaped key>.
 * 200 = ok, 404 = absent (GET: MC_ERR_OBJECT_NOT_FOUND; DELETE: MC_OK), 413 = too large,
 * 401 = credentials refused (MC_ERR_AUTH). With a keyring every request is signed
 * (common/http_auth.h); the server's nonce is cached per client. Requests go through the
 * shared libcurl helper (common/http_client.h) with the timeout the client was opened with.
 */
#include "common/alloc.h"
#include "common/log.h"
#include "te/metadata_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- http backend */

typedef struct http_meta {
    char *url; /* base URL without query */
    uint32_t timeout_ms;
    const mc_auth_t *auth;     /* signs requests; NULL = unsigned */
    mc_auth_t *owned_auth;     /* loaded from opts->auth_token_file (auth points to it) */
    mc_http_auth_client_t nonce; /* the server's current nonce */
} http_meta_t;

static void http_close(void *impl)
{
    http_meta_t *m = impl;
    mc_auth_free(m->owned_auth);
    pthread_mutex_destroy(&m->nonce.mu);
    mc_free(m->url);
    mc_free(m);
}

mc_status_t mc_meta_http_open(const char *url, const mc_meta_opts_t *opts, void **impl_p)
{
    const char *auth = url + 7; /* after "http://" */
    size_t n = strlen(url);
    if (n > 2048 || *auth == '\0' || *auth == '/' || *auth == ':') {
        MC_LOG_ERROR("metadata: bad http url '%s' (want http://host:port/path)", url);
        return MC_ERR_INVALID_PARAMS;
    }
    for (const char *p = url; *p; p++) {
        unsigned char c = (unsigned char)*p;
        if (c <= 0x20 || c >= 0x7f || c == '?' || c == '#') {
            MC_LOG_ERROR("metadata: bad character in http url '%s'", url);
            return MC_ERR_INVALID_PARAMS;
        }
    }
    http_meta_t *m = MC_NEW(http_meta_t);
    if (!m)
        return MC_ERR_NO_MEMORY;
    m->url = mc_strdup(url);
    if (!m->url) {
        mc_free(m);
        return MC_ERR_NO_MEMORY;
    }
    m->timeout_ms = opts->timeout_ms;
    pthread_mutex_init(&m->nonce.mu, NULL);
    m->auth = opts->auth;
    if (!m->auth && opts->auth_token_file && *opts->auth_token_file) {
        mc_status_t st = mc_auth_load(opts->auth_token_file, &m->owned_auth);
        if (st != MC_OK) {
            http_close(m);
            return st;
        }
        m->auth = m->owned_auth;
    }
    mc_http_client_init();
    *impl_p = m;
    return MC_OK;
}


static char *key_url(http_meta_t *m, const char *key)
{
    char *ek = mc_http_url_escape(key);
    if (!ek)
        return NULL;
    size_t n = strlen(m->url) + strlen(ek) + 8;
    char *u = mc_malloc(n);
    if (u)
        snprintf(u, n, "%s?key=%s", m->url, ek);
    mc_free(ek);
    return u;
}

static mc_status_t map_code(const char *op, const char *key, const mc_http_resp_t *r)
{
    if (r->code >= 200 && r->code < 300)
        return MC_OK;
    if (r->code == 404)
        return MC_ERR_OBJECT_NOT_FOUND;
    mc_status_t st = r->code == 401   ? MC_ERR_AUTH
                     : r->code == 413 ? MC_ERR_TOO_LARGE
                     : r->code == 400 ? MC_ERR_INVALID_PARAMS
                     : r->code == 503 ? MC_ERR_BUSY
                                      : MC_ERR_INTERNAL;
    MC_LOG_ERROR("metadata: http %s '%s': status %ld: %.200s", op, key, r->code,
                 r->body ? r->body : "");
    return st;
}

static mc_status_t http_get(void *impl, const char *key, char **value_p)
{
    http_meta_t *m = impl;
    char *u = key_url(impl, key);
    if (!u)
        return MC_ERR_NO_MEMORY;
    mc_http_resp_t r;
    mc_status_t st = mc_http_request_auth(m->auth, &m->nonce, "GET", u, NULL, 0, NULL,
                                               MC_META_VALUE_MAX, m->timeout_ms, &r);
    mc_free(u);
    if (st != MC_OK)
        return st;
    st = map_code("GET", key, &r);
    if (st == MC_OK) {
        *value_p = r.body;
        return MC_OK;
    }
    mc_free(r.body);
    return st;
}

static mc_status_t http_put(void *impl, const char *key, const char *value, size_t len)
{
    http_meta_t *m = impl;
    char *u = key_url(impl, key);
    if (!u)
        return MC_ERR_NO_MEMORY;
    mc_http_resp_t r;
    mc_status_t st = mc_http_request_auth(m->auth, &m->nonce, "PUT", u, value, len,
                                               "application/json", 64 << 10, m->timeout_ms, &r);
    mc_free(u);
    if (st != MC_OK)
        return st;
    st = map_code("PUT", key, &r);
    mc_free(r.body);
    return st == MC_ERR_OBJECT_NOT_FOUND ? MC_ERR_INTERNAL : st;
}

static mc_status_t http_del(void *impl, const char *key)
{
    http_meta_t *m = impl;
    char *u = key_url(impl, key);
    if (!u)
        return MC_ERR_NO_MEMORY;
    mc_http_resp_t r;
    mc_status_t st = mc_http_request_auth(m->auth, &m->nonce, "DELETE", u, NULL, 0, NULL,
                                               64 << 10, m->timeout_ms, &r);
    mc_free(u);
    if (st != MC_OK)
        return st;
    st = map_code("DELETE", key, &r);
    mc_free(r.body);
    return st == MC_ERR_OBJECT_NOT_FOUND ? MC_OK : st;
}

const mc_meta_ops_t mc_meta_http_ops = {
    .name = "http", .get = http_get, .put = http_put, .del = http_del, .close = http_close};
