/* HTTP metadata backend (upstream REST protocol): GET|PUT|DELETE <url>?key=<escaped key>.
 * 200 = ok, 404 = absent (GET: MC_ERR_OBJECT_NOT_FOUND; DELETE: MC_OK), 413 = too large,
 * 401 = credentials refused (MC_ERR_AUTH). With a keyring every request is signed
 * (common/http_auth.h); the server's nonce is cached per client.
 *
 * Also home of the libcurl helper shared with the etcd backend: curl_global_init once
 * (pthread_once), easy handles recycled through a small mutex-protected pool so that
 * keep-alive connections are reused, caps on every response, the timeout its client was
 * opened with.
 */
#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "common/time.h"
#include "te/metadata_internal.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- curl helper */

static pthread_once_t g_curl_once = PTHREAD_ONCE_INIT;
static int g_curl_ok;

#define POOL_MAX 16
static pthread_mutex_t g_pool_mu = PTHREAD_MUTEX_INITIALIZER;
static CURL *g_pool[POOL_MAX];
static int g_pool_n;

static void curl_init_once(void)
{
    g_curl_ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
    if (!g_curl_ok)
        MC_LOG_ERROR("metadata: curl_global_init failed");
}

void mc_meta_curl_init(void)
{
    pthread_once(&g_curl_once, curl_init_once);
}

static CURL *handle_get(void)
{
    CURL *h = NULL;
    pthread_mutex_lock(&g_pool_mu);
    if (g_pool_n > 0)
        h = g_pool[--g_pool_n];
    pthread_mutex_unlock(&g_pool_mu);
    if (h) {
        curl_easy_reset(h); /* keeps the connection cache */
        return h;
    }
    return curl_easy_init();
}

static void handle_put(CURL *h)
{
    pthread_mutex_lock(&g_pool_mu);
    if (g_pool_n < POOL_MAX) {
        g_pool[g_pool_n++] = h;
        h = NULL;
    }
    pthread_mutex_unlock(&g_pool_mu);
    if (h)
        curl_easy_cleanup(h);
}

typedef struct sink {
    mc_buf_t buf; /* the body so far, NUL-terminated once anything arrived */
    size_t max;
    int too_large;
} sink_t;

static size_t sink_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
    sink_t *s = arg;
    size_t n = size * nmemb;
    if (n > s->max - s->buf.len) {
        s->too_large = 1;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (mc_buf_reserve(&s->buf, n + 1) != MC_OK)
        return 0;
    mc_buf_append(&s->buf, ptr, n); /* room reserved above: cannot fail */
    s->buf.data[s->buf.len] = '\0';
    return n;
}

char *mc_meta_url_escape(const char *s)
{
    pthread_once(&g_curl_once, curl_init_once);
    char *e = curl_easy_escape(NULL, s, 0);
    if (!e)
        return NULL;
    char *copy = mc_strdup(e); /* curl_free vs free: hand out a malloc'd copy */
    curl_free(e);
    return copy;
}

/* Keeps the WWW-Authenticate value of the response (the last one seen; "" if none). */
static size_t header_sink(char *ptr, size_t size, size_t nmemb, void *arg)
{
    char *www = arg;
    size_t n = size * nmemb;
    static const char name[] = "WWW-Authenticate:";
    if (n > sizeof(name) - 1 && strncasecmp(ptr, name, sizeof(name) - 1) == 0) {
        const char *v = ptr + sizeof(name) - 1;
        size_t len = n - (sizeof(name) - 1);
        while (len && (*v == ' ' || *v == '\t'))
            v++, len--;
        while (len && (v[len - 1] == '\r' || v[len - 1] == '\n' || v[len - 1] == ' '))
            len--;
        if (len >= MC_HTTP_AUTH_HEADER_MAX)
            len = 0; /* not a challenge of ours: ignored */
        memcpy(www, v, len);
        www[len] = '\0';
    }
    return n;
}

/* One transfer on a pooled handle; *code_p the HTTP status, www the WWW-Authenticate value. */
static mc_status_t perform(const char *method, const char *url, const char *body, size_t body_len,
                           const char *content_type, const char *authz, size_t max_resp,
                           uint32_t timeout_ms, sink_t *sink, long *code_p, char *www)
{
    CURL *h = handle_get();
    if (!h)
        return MC_ERR_NO_MEMORY;
    struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
    char line[MC_HTTP_AUTH_HEADER_MAX + 32];
    const char *extra[2] = {content_type ? "Content-Type: " : NULL,
                            authz ? "Authorization: " : NULL};
    const char *val[2] = {content_type, authz};
    for (int i = 0; i < 2 && hdrs; i++) {
        if (!extra[i])
            continue;
        snprintf(line, sizeof(line), "%s%s", extra[i], val[i]);
        struct curl_slist *n = curl_slist_append(hdrs, line);
        if (n)
            hdrs = n;
    }
    www[0] = '\0';
    sink->max = max_resp;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L); /* the target is sent as signed */
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(timeout_ms < 2000 ? timeout_ms : 2000));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, sink);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_sink);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, www);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    if (strcmp(method, "GET") == 0) {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    } else {
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        if (body || strcmp(method, "DELETE") != 0) {
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
            curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? body_len : 0));
        }
    }
    CURLcode rc = curl_easy_perform(h);
    mc_status_t st = MC_OK;
    if (rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code_p);
        if (!sink->buf.data && mc_buf_reserve(&sink->buf, 1) == MC_OK)
            sink->buf.data[0] = '\0'; /* empty body: still a string */
        if (!sink->buf.data)
            st = MC_ERR_NO_MEMORY;
    } else if (sink->too_large) {
        MC_LOG_ERROR("metadata: %s %s: response larger than %zu bytes refused", method, url,
                     max_resp);
        st = MC_ERR_TOO_LARGE;
    } else {
        switch (rc) {
        case CURLE_OPERATION_TIMEDOUT:
            st = MC_ERR_TIMEOUT;
            break;
        case CURLE_WRITE_ERROR:
        case CURLE_OUT_OF_MEMORY:
            st = MC_ERR_NO_MEMORY;
            break;
        case CURLE_URL_MALFORMAT:
        case CURLE_UNSUPPORTED_PROTOCOL:
            st = MC_ERR_INVALID_PARAMS;
            break;
        default: /* couldn't resolve/connect, send/recv error, empty reply, ... */
            st = MC_ERR_CONNECTION;
            break;
        }
        MC_LOG_WARN("metadata: %s %s failed: %s", method, url, curl_easy_strerror(rc));
    }
    curl_slist_free_all(hdrs);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    handle_put(h);
    return st;
}

mc_status_t mc_meta_http_request_auth(const mc_auth_t *auth, mc_http_auth_client_t *cache,
                                      const char *method, const char *url, const char *body,
                                      size_t body_len, const char *content_type, size_t max_resp,
                                      uint32_t timeout_ms, mc_meta_http_resp_t *resp)
{
    memset(resp, 0, sizeof(*resp));
    pthread_once(&g_curl_once, curl_init_once);
    if (!g_curl_ok)
        return MC_ERR_INTERNAL;
    char target[MC_HTTP_AUTH_TARGET_MAX + 1];
    if (auth && mc_http_auth_target(url, target, sizeof(target)) != MC_OK) {
        MC_LOG_ERROR("metadata: %s %s: URL too long to sign", method, url);
        return MC_ERR_INVALID_PARAMS;
    }
    sink_t sink = {0};
    mc_status_t st = MC_OK;
    uint64_t deadline = mc_now_ms() + timeout_ms;
    char nonce[2 * MC_HTTP_AUTH_NONCE_SIZE + 1], www[MC_HTTP_AUTH_HEADER_MAX];
    char authz[MC_HTTP_AUTH_HEADER_MAX];
    for (int attempt = 0;; attempt++) {
        if (auth && body_len > 0 && !mc_http_auth_client_nonce(cache, nonce)) {
            /* A server refuses an unsigned upload right after its headers and may close the
             * connection while the body is still being sent, so its 401 can be lost: learn
             * the nonce first from a bodiless GET of the same URL (refused, no side effect). */
            uint64_t t = mc_now_ms();
            (void)perform("GET", url, NULL, 0, NULL, NULL, max_resp,
                          t < deadline ? (uint32_t)(deadline - t) : 1, &sink, &resp->code, www);
            if (resp->code == 401 && www[0])
                (void)mc_http_auth_client_learn(cache, www);
        }
        int signed_req = auth && mc_http_auth_client_nonce(cache, nonce) &&
                         mc_http_auth_authorize(auth, nonce, method, target, body, body_len,
                                                authz) == MC_OK;
        uint64_t now = mc_now_ms();
        uint32_t left = now < deadline ? (uint32_t)(deadline - now) : 1;
        sink.buf.len = 0;
        sink.too_large = 0;
        st = perform(method, url, body, body_len, content_type, signed_req ? authz : NULL,
                     max_resp, left, &sink, &resp->code, www);
        /* A 401 with a challenge: learn the nonce and sign once more (first contact, nonce
         * expired, or the server restarted and no longer knows ours). */
        if (st == MC_ERR_CONNECTION && auth && body_len > 0 && attempt == 0) {
            mc_http_auth_client_forget(cache); /* an upload cut off: maybe a stale nonce */
            continue;
        }
        if (st != MC_OK || !auth || resp->code != 401 || attempt > 0 || !www[0] ||
            mc_http_auth_client_learn(cache, www) != 0)
            break;
    }
    if (st != MC_OK) {
        mc_buf_free(&sink.buf);
        resp->code = 0;
        return st;
    }
    if (auth && resp->code == 401)
        MC_LOG_ERROR("metadata: %s %s refused our credentials: %.200s", method, url,
                     sink.buf.data ? (char *)sink.buf.data : "");
    else if (!auth && resp->code == 401)
        MC_LOG_ERROR("metadata: %s %s requires credentials: set auth_token_file "
                     "(MC_AUTH_TOKEN_FILE) to the cluster token file", method, url);
    resp->body = (char *)sink.buf.data; /* ownership passes to the caller (mc_free) */
    resp->len = sink.buf.len;
    return MC_OK;
}

mc_status_t mc_meta_http_request(const char *method, const char *url, const char *body,
                                 size_t body_len, const char *content_type, size_t max_resp,
                                 uint32_t timeout_ms, mc_meta_http_resp_t *resp)
{
    return mc_meta_http_request_auth(NULL, NULL, method, url, body, body_len, content_type,
                                     max_resp, timeout_ms, resp);
}

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
    mc_meta_curl_init();
    *impl_p = m;
    return MC_OK;
}


static char *key_url(http_meta_t *m, const char *key)
{
    char *ek = mc_meta_url_escape(key);
    if (!ek)
        return NULL;
    size_t n = strlen(m->url) + strlen(ek) + 8;
    char *u = mc_malloc(n);
    if (u)
        snprintf(u, n, "%s?key=%s", m->url, ek);
    mc_free(ek);
    return u;
}

static mc_status_t map_code(const char *op, const char *key, const mc_meta_http_resp_t *r)
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
    mc_meta_http_resp_t r;
    mc_status_t st = mc_meta_http_request_auth(m->auth, &m->nonce, "GET", u, NULL, 0, NULL,
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
    mc_meta_http_resp_t r;
    mc_status_t st = mc_meta_http_request_auth(m->auth, &m->nonce, "PUT", u, value, len,
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
    mc_meta_http_resp_t r;
    mc_status_t st = mc_meta_http_request_auth(m->auth, &m->nonce, "DELETE", u, NULL, 0, NULL,
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
