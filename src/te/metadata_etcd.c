/* etcd v3 metadata backend over etcd's JSON gateway (libcurl, no gRPC):
 *   get  = POST /v3/kv/range        {"key":b64}          -> {"kvs":[{"value":b64}]} | no kvs
 *   put  = POST /v3/kv/put          {"key":b64,"value":b64}
 *   del  = POST /v3/kv/deleterange  {"key":b64}
 * Keys and values are base64 (RFC 4648). The gateway omits empty fields, so a kv without
 * "value" is an empty value. Errors are non-200 with {"error","message","code"}.
 *
 * Endpoints "h:p;h:p" (';' or ','): requests go to the last endpoint that answered; on a
 * transport error (refused, reset, timeout) or HTTP 503 the next endpoint is tried, each at
 * most once per call.
 */
#include "common/alloc.h"
#include "common/log.h"
#include "common/net.h"
#include "te/metadata_internal.h"

#include <jansson.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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

/* ---------------------------------------------------------------- etcd backend */

#define ETCD_MAX_ENDPOINTS 16

typedef struct etcd_meta {
    size_t n;
    char *base[ETCD_MAX_ENDPOINTS]; /* "http://host:port" */
    atomic_size_t cur;              /* endpoint that answered last */
    uint32_t timeout_ms;            /* per request, per endpoint tried */
} etcd_meta_t;

static void etcd_close(void *impl)
{
    etcd_meta_t *m = impl;
    for (size_t i = 0; i < m->n; i++)
        mc_free(m->base[i]);
    mc_free(m);
}

mc_status_t mc_meta_etcd_open(const char *endpoints, uint32_t timeout_ms, void **impl_p)
{
    etcd_meta_t *m = MC_NEW(etcd_meta_t);
    if (!m)
        return MC_ERR_NO_MEMORY;
    mc_status_t st = MC_OK;
    const char *p = endpoints;
    while (*p) {
        size_t len = strcspn(p, ";,");
        if (len == 0 || len >= MC_HOST_MAX + 8) {
            MC_LOG_ERROR("metadata: bad etcd endpoint list '%s'", endpoints);
            st = MC_ERR_INVALID_PARAMS;
            goto fail;
        }
        if (m->n == ETCD_MAX_ENDPOINTS) {
            MC_LOG_ERROR("metadata: more than %d etcd endpoints", ETCD_MAX_ENDPOINTS);
            st = MC_ERR_INVALID_PARAMS;
            goto fail;
        }
        char ep[MC_HOST_MAX + 8], host[MC_HOST_MAX];
        uint16_t port;
        memcpy(ep, p, len);
        ep[len] = '\0';
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)ep[i] <= 0x20 || (unsigned char)ep[i] >= 0x7f || ep[i] == '/' ||
                ep[i] == '?' || ep[i] == '#' || ep[i] == '@')
                goto bad_ep;
        if (mc_net_split_hostport(ep, host, &port) != MC_OK)
            goto bad_ep;
        size_t blen = len + 8;
        m->base[m->n] = mc_malloc(blen);
        if (!m->base[m->n]) {
            st = MC_ERR_NO_MEMORY;
            goto fail;
        }
        snprintf(m->base[m->n], blen, "http://%s", ep);
        m->n++;
        p += len;
        if (*p)
            p++;
        continue;
    bad_ep:
        MC_LOG_ERROR("metadata: bad etcd endpoint '%s' (want host:port)", ep);
        st = MC_ERR_INVALID_PARAMS;
        goto fail;
    }
    if (m->n == 0) {
        MC_LOG_ERROR("metadata: etcd:// needs at least one host:port");
        st = MC_ERR_INVALID_PARAMS;
        goto fail;
    }
    atomic_init(&m->cur, 0);
    m->timeout_ms = timeout_ms;
    mc_meta_curl_init(); /* curl_global_init now, not inside a request */
    *impl_p = m;
    return MC_OK;
fail:
    etcd_close(m);
    return st;
}

/* Max gateway response: a base64 value of MC_META_VALUE_MAX plus key and headers. */
#define ETCD_MAX_RESP ((size_t)(MC_META_VALUE_MAX / 3 + 1) * 4 + 4 * MC_META_KEY_MAX + 65536)

static mc_status_t etcd_error(const char *op, const mc_meta_http_resp_t *r)
{
    const char *msg = NULL;
    json_t *j = json_loadb(r->body, r->len, 0, NULL);
    if (j) {
        msg = json_string_value(json_object_get(j, "message"));
        if (!msg)
            msg = json_string_value(json_object_get(j, "error"));
    }
    mc_status_t st = MC_ERR_ETCD_OPERATION_ERROR;
    if (msg && (strstr(msg, "too large") || strstr(msg, "larger than max")))
        st = MC_ERR_TOO_LARGE;
    MC_LOG_ERROR("metadata: etcd %s: HTTP %ld: %.300s", op, r->code, msg ? msg : r->body);
    json_decref(j);
    return st;
}

/* POST body to path on the current endpoint, failing over. On MC_OK *resp holds a 200. */
static mc_status_t etcd_call(etcd_meta_t *m, const char *op, const char *path, json_t *req,
                             mc_meta_http_resp_t *resp)
{
    /* jansson allocates with malloc; mc_free (free) releases it like our own strings */
    char *body = json_dumps(req, JSON_COMPACT);
    if (!body)
        return MC_ERR_NO_MEMORY;
    size_t start = atomic_load(&m->cur) % m->n;
    mc_status_t st = MC_ERR_CONNECTION;
    for (size_t i = 0; i < m->n; i++) {
        size_t ep = (start + i) % m->n;
        char url[MC_HOST_MAX + 64];
        snprintf(url, sizeof(url), "%s%s", m->base[ep], path);
        st = mc_meta_http_request("POST", url, body, strlen(body), "application/json",
                                  ETCD_MAX_RESP, m->timeout_ms, resp);
        if (st == MC_OK && resp->code == 503) {
            MC_LOG_WARN("metadata: etcd %s at %s unavailable (503)", op, m->base[ep]);
            mc_free(resp->body);
            resp->body = NULL;
            st = MC_ERR_CONNECTION;
        }
        if (st == MC_ERR_CONNECTION || st == MC_ERR_TIMEOUT) {
            if (m->n > 1)
                MC_LOG_WARN("metadata: etcd endpoint %s failed (%s), trying the next",
                            m->base[ep], mc_status_name(st));
            continue;
        }
        if (st != MC_OK)
            break;
        atomic_store(&m->cur, ep);
        if (resp->code != 200) {
            st = etcd_error(op, resp);
            mc_free(resp->body);
            resp->body = NULL;
        }
        break;
    }
    mc_free(body);
    return st;
}

/* {"key": b64(key)} plus optional "value". */
static json_t *etcd_req(const char *key, const char *value, size_t value_len)
{
    json_t *req = json_object();
    char *k = mc_b64_encode(key, strlen(key));
    char *v = value ? mc_b64_encode(value, value_len) : NULL;
    if (!req || !k || (value && !v) || json_object_set_new(req, "key", json_string(k)) ||
        (v && json_object_set_new(req, "value", json_string(v)))) {
        json_decref(req);
        req = NULL;
    }
    mc_free(k);
    mc_free(v);
    return req;
}

static mc_status_t etcd_get(void *impl, const char *key, char **value_p)
{
    json_t *req = etcd_req(key, NULL, 0);
    if (!req)
        return MC_ERR_NO_MEMORY;
    mc_meta_http_resp_t r;
    mc_status_t st = etcd_call(impl, "range", "/v3/kv/range", req, &r);
    json_decref(req);
    if (st != MC_OK)
        return st;
    json_error_t err;
    json_t *j = json_loadb(r.body, r.len, 0, &err);
    mc_free(r.body);
    if (!json_is_object(j)) {
        MC_LOG_ERROR("metadata: etcd range: malformed reply: %s", j ? "not an object" : err.text);
        json_decref(j);
        return MC_ERR_PROTOCOL;
    }
    json_t *kvs = json_object_get(j, "kvs");
    json_t *kv = json_array_get(kvs, 0);
    if (!kv) {
        json_decref(j);
        return MC_ERR_OBJECT_NOT_FOUND;
    }
    json_t *jv = json_object_get(kv, "value");
    const char *v64 = jv ? json_string_value(jv) : "";
    if (!json_is_object(kv) || !v64) {
        MC_LOG_ERROR("metadata: etcd range: malformed kv in reply");
        json_decref(j);
        return MC_ERR_PROTOCOL;
    }
    size_t vlen;
    st = mc_b64_decode(v64, jv ? json_string_length(jv) : 0, value_p, &vlen);
    json_decref(j);
    if (st == MC_ERR_PROTOCOL)
        MC_LOG_ERROR("metadata: etcd range: value is not valid base64");
    if (st == MC_OK && vlen > MC_META_VALUE_MAX) {
        mc_free(*value_p);
        *value_p = NULL;
        MC_LOG_ERROR("metadata: etcd value for '%s' exceeds %u bytes", key, MC_META_VALUE_MAX);
        st = MC_ERR_TOO_LARGE;
    }
    return st;
}

static mc_status_t etcd_put(void *impl, const char *key, const char *value, size_t len)
{
    json_t *req = etcd_req(key, value, len);
    if (!req)
        return MC_ERR_NO_MEMORY;
    mc_meta_http_resp_t r;
    mc_status_t st = etcd_call(impl, "put", "/v3/kv/put", req, &r);
    json_decref(req);
    if (st == MC_OK)
        mc_free(r.body);
    return st;
}

static mc_status_t etcd_del(void *impl, const char *key)
{
    json_t *req = etcd_req(key, NULL, 0);
    if (!req)
        return MC_ERR_NO_MEMORY;
    mc_meta_http_resp_t r;
    mc_status_t st = etcd_call(impl, "deleterange", "/v3/kv/deleterange", req, &r);
    json_decref(req);
    if (st == MC_OK)
        mc_free(r.body);
    return st;
}

const mc_meta_ops_t mc_meta_etcd_ops = {
    .name = "etcd", .get = etcd_get, .put = etcd_put, .del = etcd_del, .close = etcd_close};
