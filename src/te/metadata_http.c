/* HTTP metadata backend (upstream REST protocol): GET|PUT|DELETE <url>?key=<escaped key>.
 * 200 = ok, 404 = absent (GET: MC_ERR_OBJECT_NOT_FOUND; DELETE: MC_OK), 413 = too large.
 *
 * Also home of the libcurl helper shared with the etcd backend: curl_global_init once
 * (pthread_once), easy handles recycled through a small mutex-protected pool so that
 * keep-alive connections are reused, caps on every response, the timeout its client was
 * opened with.
 */
#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
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

mc_status_t mc_meta_http_request(const char *method, const char *url, const char *body,
                                 size_t body_len, const char *content_type, size_t max_resp,
                                 uint32_t timeout_ms, mc_meta_http_resp_t *resp)
{
    memset(resp, 0, sizeof(*resp));
    pthread_once(&g_curl_once, curl_init_once);
    if (!g_curl_ok)
        return MC_ERR_INTERNAL;
    CURL *h = handle_get();
    if (!h)
        return MC_ERR_NO_MEMORY;
    sink_t sink = {.max = max_resp};
    struct curl_slist *hdrs = curl_slist_append(NULL, "Expect:");
    char ct[128];
    if (content_type && hdrs) {
        snprintf(ct, sizeof(ct), "Content-Type: %s", content_type);
        struct curl_slist *n = curl_slist_append(hdrs, ct);
        if (n)
            hdrs = n;
    }
    uint32_t total = timeout_ms;
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)(total < 2000 ? total : 2000));
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)total);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, sink_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &sink);
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
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &resp->code);
        if (!sink.buf.data && mc_buf_reserve(&sink.buf, 1) == MC_OK)
            sink.buf.data[0] = '\0'; /* empty body: still a string */
        if (!sink.buf.data)
            st = MC_ERR_NO_MEMORY;
    } else if (sink.too_large) {
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
    if (st != MC_OK) {
        mc_buf_free(&sink.buf);
        resp->code = 0;
        return st;
    }
    resp->body = (char *)sink.buf.data; /* ownership passes to the caller (mc_free) */
    resp->len = sink.buf.len;
    return MC_OK;
}

/* ---------------------------------------------------------------- http backend */

typedef struct http_meta {
    char *url; /* base URL without query */
    uint32_t timeout_ms;
} http_meta_t;

mc_status_t mc_meta_http_open(const char *url, uint32_t timeout_ms, void **impl_p)
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
    m->timeout_ms = timeout_ms;
    mc_meta_curl_init();
    *impl_p = m;
    return MC_OK;
}

static void http_close(void *impl)
{
    http_meta_t *m = impl;
    mc_free(m->url);
    mc_free(m);
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
    mc_status_t st = r->code == 413   ? MC_ERR_TOO_LARGE
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
    mc_status_t st = mc_meta_http_request("GET", u, NULL, 0, NULL, MC_META_VALUE_MAX, m->timeout_ms,
                                          &r);
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
    mc_status_t st = mc_meta_http_request("PUT", u, value, len, "application/json", 64 << 10,
                                          m->timeout_ms, &r);
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
    mc_status_t st = mc_meta_http_request("DELETE", u, NULL, 0, NULL, 64 << 10, m->timeout_ms,
                                          &r);
    mc_free(u);
    if (st != MC_OK)
        return st;
    st = map_code("DELETE", key, &r);
    mc_free(r.body);
    return st == MC_ERR_OBJECT_NOT_FOUND ? MC_OK : st;
}

const mc_meta_ops_t mc_meta_http_ops = {
    .name = "http", .get = http_get, .put = http_put, .del = http_del, .close = http_close};
