/* Shared HTTP client (libcurl) and base64, used by the metadata backends (te) and the etcd
 * client (common/etcd.c): curl_global_init once (pthread_once), easy handles recycled through
 * a small mutex-protected pool so that keep-alive connections are reused, a cap on every
 * response body and a total timeout on every request.
 */
#include "common/alloc.h"
#include "common/buf.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/time.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
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
        MC_LOG_ERROR("http: curl_global_init failed");
}

void mc_http_client_init(void)
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
    /* streams (mc_http_stream): after each chunk; nonzero ends the transfer (done) */
    int (*on_data)(void *ctx, const char *body, size_t len);
    void *ctx;
    const atomic_int *cancel; /* streams: nonzero ends the transfer (canceled) */
    int done;
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
    if (s->on_data && s->on_data(s->ctx, (const char *)s->buf.data, s->buf.len)) {
        s->done = 1;
        return 0; /* the stream said enough: abort (reported as MC_OK) */
    }
    return n;
}

/* Streams: called by libcurl while it waits; nonzero aborts the transfer. */
static int sink_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    (void)dt, (void)dn, (void)ut, (void)un;
    const sink_t *s = arg;
    return s->cancel && atomic_load(s->cancel);
}

char *mc_http_url_escape(const char *s)
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
    if (sink->on_data) {
        curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, sink_progress);
        curl_easy_setopt(h, CURLOPT_XFERINFODATA, sink);
        curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    }
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
    if (sink->on_data && (sink->done || rc == CURLE_OPERATION_TIMEDOUT ||
                          rc == CURLE_ABORTED_BY_CALLBACK)) {
        /* a stream that said enough, ran its time, or was canceled: no error to log */
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code_p);
        st = sink->done ? MC_OK : rc == CURLE_OPERATION_TIMEDOUT ? MC_ERR_TIMEOUT : MC_ERR_CANCELED;
    } else if (rc == CURLE_OK) {
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code_p);
        if (!sink->buf.data && mc_buf_reserve(&sink->buf, 1) == MC_OK)
            sink->buf.data[0] = '\0'; /* empty body: still a string */
        if (!sink->buf.data)
            st = MC_ERR_NO_MEMORY;
    } else if (sink->too_large) {
        MC_LOG_ERROR("http: %s %s: response larger than %zu bytes refused", method, url,
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
        MC_LOG_WARN("http: %s %s failed: %s", method, url, curl_easy_strerror(rc));
    }
    curl_slist_free_all(hdrs);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
    handle_put(h);
    return st;
}

mc_status_t mc_http_request_auth(const mc_auth_t *auth, mc_http_auth_client_t *cache,
                                 const char *method, const char *url, const char *body,
                                 size_t body_len, const char *content_type, size_t max_resp,
                                 uint32_t timeout_ms, mc_http_resp_t *resp)
{
    memset(resp, 0, sizeof(*resp));
    pthread_once(&g_curl_once, curl_init_once);
    if (!g_curl_ok)
        return MC_ERR_INTERNAL;
    char target[MC_HTTP_AUTH_TARGET_MAX + 1];
    if (auth && mc_http_auth_target(url, target, sizeof(target)) != MC_OK) {
        MC_LOG_ERROR("http: %s %s: URL too long to sign", method, url);
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
        MC_LOG_ERROR("http: %s %s refused our credentials: %.200s", method, url,
                     sink.buf.data ? (char *)sink.buf.data : "");
    else if (!auth && resp->code == 401)
        MC_LOG_ERROR("http: %s %s requires credentials: set auth_token_file "
                     "(MC_AUTH_TOKEN_FILE) to the cluster token file", method, url);
    resp->body = (char *)sink.buf.data; /* ownership passes to the caller (mc_free) */
    resp->len = sink.buf.len;
    return MC_OK;
}

mc_status_t mc_http_request(const char *method, const char *url, const char *body,
                            size_t body_len, const char *content_type, size_t max_resp,
                            uint32_t timeout_ms, mc_http_resp_t *resp)
{
    return mc_http_request_auth(NULL, NULL, method, url, body, body_len, content_type,
                                     max_resp, timeout_ms, resp);
}

mc_status_t mc_http_stream(const char *method, const char *url, const char *body,
                           size_t body_len, const char *content_type, size_t max_resp,
                           uint32_t timeout_ms, int (*on_data)(void *ctx, const char *body,
                                                               size_t len),
                           void *ctx, const atomic_int *cancel, long *code_p)
{
    *code_p = 0;
    pthread_once(&g_curl_once, curl_init_once);
    if (!g_curl_ok)
        return MC_ERR_INTERNAL;
    sink_t sink = {.on_data = on_data, .ctx = ctx, .cancel = cancel};
    char www[MC_HTTP_AUTH_HEADER_MAX];
    mc_status_t st = perform(method, url, body, body_len, content_type, NULL, max_resp,
                             timeout_ms, &sink, code_p, www);
    if (st == MC_OK && !sink.done && on_data && sink.buf.data)
        sink.done = on_data(ctx, (const char *)sink.buf.data, sink.buf.len); /* final look */
    mc_buf_free(&sink.buf);
    return st;
}

/* ---------------------------------------------------------------- base64 */

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t mc_b64_encoded_len(size_t n)
{
    return (n + 2) / 3 * 4;
}

char *mc_b64_encode(const void *data, size_t n)
{
    if (n > (SIZE_MAX / 4) * 3 - 3)
        return NULL;
    const unsigned char *in = data;
    char *out = mc_malloc(mc_b64_encoded_len(n) + 1);
    if (!out)
        return NULL;
    size_t o = 0, i = 0;
    for (; i + 3 <= n; i += 3) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = B64[v & 63];
    }
    if (n - i == 1) {
        uint32_t v = (uint32_t)in[i] << 16;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = '=';
        out[o++] = '=';
    } else if (n - i == 2) {
        uint32_t v = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8;
        out[o++] = B64[v >> 18];
        out[o++] = B64[(v >> 12) & 63];
        out[o++] = B64[(v >> 6) & 63];
        out[o++] = '=';
    }
    out[o] = '\0';
    return out;
}

static int b64_val(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

mc_status_t mc_b64_decode(const char *s, size_t n, char **out_p, size_t *out_len_p)
{
    *out_p = NULL;
    *out_len_p = 0;
    if (n % 4)
        return MC_ERR_PROTOCOL;
    size_t pad = 0;
    if (n >= 4 && s[n - 1] == '=')
        pad = s[n - 2] == '=' ? 2 : 1;
    char *out = mc_malloc(n / 4 * 3 + 1);
    if (!out)
        return MC_ERR_NO_MEMORY;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int last = i + 4 == n;
        int v[4];
        for (int k = 0; k < 4; k++) {
            unsigned char c = (unsigned char)s[i + k];
            if (c == '=' && last && k >= 4 - (int)pad) {
                v[k] = 0;
                continue;
            }
            v[k] = b64_val(c);
            if (v[k] < 0)
                goto bad;
        }
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 |
                     (uint32_t)v[3];
        out[o++] = (char)(w >> 16);
        if (!(last && pad == 2))
            out[o++] = (char)(w >> 8);
        else if (w & 0xffff) /* non-canonical: bits set under the padding */
            goto bad;
        if (!(last && pad >= 1))
            out[o++] = (char)w;
        else if (w & 0xff)
            goto bad;
    }
    out[o] = '\0';
    *out_p = out;
    *out_len_p = o;
    return MC_OK;
bad:
    mc_free(out);
    return MC_ERR_PROTOCOL;
}
