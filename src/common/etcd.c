/* etcd v3 JSON-gateway client: see etcd.h for the contract. One request helper (etcd_call)
 * owns endpoint failover, the body caps and error mapping; the ops below only build JSON. */
#include "common/etcd.h"

#include "common/alloc.h"
#include "common/http_client.h"
#include "common/log.h"
#include "common/net.h"

#include <errno.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct mc_etcd {
    size_t n;
    char *base[MC_ETCD_MAX_ENDPOINTS]; /* "http://host:port" */
    atomic_size_t cur;                 /* endpoint that answered last */
    uint32_t timeout_ms;
};

void mc_etcd_close(mc_etcd_t *e)
{
    if (!e)
        return;
    for (size_t i = 0; i < e->n; i++)
        mc_free(e->base[i]);
    mc_free(e);
}

mc_status_t mc_etcd_open(const char *endpoints, uint32_t timeout_ms, mc_etcd_t **e_p)
{
    *e_p = NULL;
    if (!endpoints || timeout_ms == 0)
        return MC_ERR_INVALID_PARAMS;
    mc_etcd_t *e = MC_NEW(mc_etcd_t);
    if (!e)
        return MC_ERR_NO_MEMORY;
    mc_status_t st = MC_OK;
    const char *p = endpoints;
    while (*p) {
        size_t len = strcspn(p, ";,");
        char ep[MC_HOST_MAX + 8], host[MC_HOST_MAX];
        uint16_t port;
        if (len == 0 || len >= sizeof(ep)) {
            MC_LOG_ERROR("etcd: bad endpoint list '%s' (want h:p;h:p)", endpoints);
            st = MC_ERR_INVALID_PARAMS;
            goto fail;
        }
        if (e->n == MC_ETCD_MAX_ENDPOINTS) {
            MC_LOG_ERROR("etcd: more than %d endpoints", MC_ETCD_MAX_ENDPOINTS);
            st = MC_ERR_INVALID_PARAMS;
            goto fail;
        }
        memcpy(ep, p, len);
        ep[len] = '\0';
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)ep[i] <= 0x20 || (unsigned char)ep[i] >= 0x7f || ep[i] == '/' ||
                ep[i] == '?' || ep[i] == '#' || ep[i] == '@')
                goto bad_ep;
        if (mc_net_split_hostport(ep, host, &port) != MC_OK)
            goto bad_ep;
        e->base[e->n] = mc_malloc(len + 8);
        if (!e->base[e->n]) {
            st = MC_ERR_NO_MEMORY;
            goto fail;
        }
        snprintf(e->base[e->n], len + 8, "http://%s", ep);
        e->n++;
        p += len;
        if (*p)
            p++;
        continue;
    bad_ep:
        MC_LOG_ERROR("etcd: bad endpoint '%s' (want host:port)", ep);
        st = MC_ERR_INVALID_PARAMS;
        goto fail;
    }
    if (e->n == 0) {
        MC_LOG_ERROR("etcd: no endpoint given (want h:p;h:p)");
        st = MC_ERR_INVALID_PARAMS;
        goto fail;
    }
    atomic_init(&e->cur, 0);
    e->timeout_ms = timeout_ms;
    mc_http_client_init(); /* curl_global_init now, not inside a request */
    *e_p = e;
    return MC_OK;
fail:
    mc_etcd_close(e);
    return st;
}

/* ---------------------------------------------------------------- request helper */

static mc_status_t etcd_error(const char *op, const mc_http_resp_t *r)
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
    else if (msg && strstr(msg, "lease not found"))
        st = MC_ERR_LEASE_EXPIRED;
    if (st != MC_ERR_LEASE_EXPIRED)
        MC_LOG_ERROR("etcd: %s: HTTP %ld: %.300s", op, r->code, msg ? msg : r->body);
    json_decref(j);
    return st;
}

/* POST req to path, failing over between endpoints; on MC_OK *out is the parsed 200 answer
 * (an object; json_decref it). */
static mc_status_t etcd_call(mc_etcd_t *e, const char *op, const char *path, json_t *req,
                             json_t **out)
{
    *out = NULL;
    char *body = json_dumps(req, JSON_COMPACT); /* malloc'd: mc_free releases it */
    if (!body)
        return MC_ERR_NO_MEMORY;
    size_t blen = strlen(body);
    if (blen > MC_ETCD_MAX_REQ) {
        MC_LOG_ERROR("etcd: %s: request of %zu bytes over the %zu-byte limit refused", op, blen,
                     MC_ETCD_MAX_REQ);
        mc_free(body);
        return MC_ERR_TOO_LARGE;
    }
    size_t start = atomic_load(&e->cur) % e->n;
    mc_status_t st = MC_ERR_CONNECTION;
    mc_http_resp_t r;
    for (size_t i = 0; i < e->n; i++) {
        size_t ep = (start + i) % e->n;
        char url[MC_HOST_MAX + 64];
        snprintf(url, sizeof(url), "%s%s", e->base[ep], path);
        st = mc_http_request("POST", url, body, blen, "application/json", MC_ETCD_MAX_RESP,
                             e->timeout_ms, &r);
        if (st == MC_OK && r.code == 503) {
            MC_LOG_WARN("etcd: %s at %s unavailable (503)", op, e->base[ep]);
            mc_free(r.body);
            st = MC_ERR_CONNECTION;
        }
        if (st == MC_ERR_CONNECTION || st == MC_ERR_TIMEOUT) {
            if (e->n > 1)
                MC_LOG_WARN("etcd: endpoint %s failed (%s), trying the next", e->base[ep],
                            mc_status_name(st));
            continue;
        }
        if (st != MC_OK)
            break;
        atomic_store(&e->cur, ep);
        if (r.code != 200) {
            st = etcd_error(op, &r);
        } else {
            json_error_t err;
            *out = json_loadb(r.body, r.len, 0, &err);
            if (!json_is_object(*out)) {
                MC_LOG_ERROR("etcd: %s: malformed answer: %s", op,
                             *out ? "not an object" : err.text);
                json_decref(*out);
                *out = NULL;
                st = MC_ERR_PROTOCOL;
            }
        }
        mc_free(r.body);
        break;
    }
    mc_free(body);
    return st;
}

/* The gateway writes int64 as strings ("revision":"7"); missing = 0. -1 if malformed. */
static int get_i64(json_t *o, const char *name, int64_t *v)
{
    json_t *j = json_object_get(o, name);
    *v = 0;
    if (!j)
        return 0;
    if (json_is_integer(j)) {
        *v = json_integer_value(j);
        return 0;
    }
    const char *s = json_string_value(j);
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || *end)
        return -1;
    *v = x;
    return 0;
}

/* base64 is ASCII: the string is set without a UTF-8 scan or a strlen */
static int set_b64(json_t *o, const char *name, const void *data, size_t len)
{
    char *s = mc_b64_encode(data, len);
    int rc = !s || json_object_set_new(o, name, json_stringn_nocheck(s, mc_b64_encoded_len(len)));
    mc_free(s);
    return rc;
}

static int set_i64(json_t *o, const char *name, int64_t v)
{
    char s[24];
    snprintf(s, sizeof(s), "%lld", (long long)v);
    return json_object_set_new(o, name, json_string(s));
}

char *mc_etcd_prefix_end(const char *prefix)
{
    size_t n = strlen(prefix);
    char *end = mc_malloc(n + 2);
    if (!end)
        return NULL;
    memcpy(end, prefix, n + 1);
    while (n > 0) {
        unsigned char c = (unsigned char)end[n - 1];
        if (c < 0xff) {
            end[n - 1] = (char)(c + 1);
            end[n] = '\0';
            return end;
        }
        n--;
    }
    end[0] = '\0'; /* all 0xff (or empty): to the end of the key space = "\0" */
    return end;
}

static int check_key(const char *key)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > MC_ETCD_KEY_MAX) {
        MC_LOG_ERROR("etcd: key empty or longer than %d bytes", MC_ETCD_KEY_MAX);
        return -1;
    }
    return 0;
}

/* {"key":..., "range_end":...} for range/delete (and their txn forms). */
static json_t *key_req(const char *key, const char *range_end)
{
    if (check_key(key))
        return NULL;
    json_t *req = json_object();
    if (!req || set_b64(req, "key", key, strlen(key)))
        goto fail;
    if (range_end) {
        char *end = range_end == MC_ETCD_PREFIX ? mc_etcd_prefix_end(key) : NULL;
        const char *re = end ? end : range_end;
        int bad = range_end == MC_ETCD_PREFIX && !end;
        /* "\0" (everything after key) encodes as one zero byte */
        bad = bad || set_b64(req, "range_end", re, *re ? strlen(re) : 1);
        mc_free(end);
        if (bad)
            goto fail;
    }
    return req;
fail:
    json_decref(req);
    return NULL;
}

static mc_status_t parse_kv(json_t *j, mc_etcd_kv_t *kv)
{
    memset(kv, 0, sizeof(*kv));
    json_t *jk = json_object_get(j, "key"), *jv = json_object_get(j, "value");
    const char *k = json_string_value(jk);
    const char *v = jv ? json_string_value(jv) : "";
    if (!json_is_object(j) || !k || !v || get_i64(j, "create_revision", &kv->create_revision) ||
        get_i64(j, "mod_revision", &kv->mod_revision) || get_i64(j, "version", &kv->version) ||
        get_i64(j, "lease", &kv->lease))
        return MC_ERR_PROTOCOL;
    size_t klen;
    mc_status_t st = mc_b64_decode(k, json_string_length(jk), &kv->key, &klen);
    if (st == MC_OK)
        st = mc_b64_decode(v, jv ? json_string_length(jv) : 0, &kv->value, &kv->value_len);
    if (st == MC_OK && strlen(kv->key) != klen)
        st = MC_ERR_PROTOCOL; /* our keys are text */
    return st;
}

/* A range answer (top level, or "response_range" of a txn) into *out. */
static mc_status_t parse_range(json_t *j, mc_etcd_range_t *out)
{
    memset(out, 0, sizeof(*out));
    json_t *kvs = json_object_get(j, "kvs");
    json_t *more = json_object_get(j, "more");
    if (get_i64(json_object_get(j, "header"), "revision", &out->revision) ||
        (kvs && !json_is_array(kvs)))
        goto bad;
    out->more = json_is_true(more);
    size_t n = json_array_size(kvs);
    if (n) {
        out->kvs = mc_calloc(n, sizeof(*out->kvs));
        if (!out->kvs)
            return MC_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++) {
        mc_status_t st = parse_kv(json_array_get(kvs, i), &out->kvs[i]);
        out->n = i + 1;
        if (st != MC_OK) {
            mc_etcd_range_free(out);
            if (st == MC_ERR_PROTOCOL)
                goto bad;
            return st;
        }
    }
    return MC_OK;
bad:
    MC_LOG_ERROR("etcd: malformed range answer");
    return MC_ERR_PROTOCOL;
}

void mc_etcd_range_free(mc_etcd_range_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++) {
        mc_free(r->kvs[i].key);
        mc_free(r->kvs[i].value);
    }
    mc_free(r->kvs);
    memset(r, 0, sizeof(*r));
}

/* ---------------------------------------------------------------- watch */

/* The gateway streams one JSON message per line: {"result":{"header":...,"created":true}}
 * first, then {"result":{"header":...,"events":[...]}} per change; a canceled watch (e.g. its
 * start revision was compacted) says "canceled" (and "compact_revision"); an error is
 * {"error":...}. */
typedef struct watch_ctx {
    size_t scanned; /* bytes of whole lines looked at */
    int64_t rev;    /* the change's revision */
    int bad;        /* an error message, or a line that does not parse */
} watch_ctx_t;

static int watch_data(void *arg, const char *body, size_t len)
{
    watch_ctx_t *w = arg;
    for (;;) {
        const char *nl = memchr(body + w->scanned, '\n', len - w->scanned);
        if (!nl)
            return 0;
        size_t start = w->scanned;
        w->scanned = (size_t)(nl - body) + 1;
        json_t *j = json_loadb(body + start, (size_t)(nl - body) - start, 0, NULL);
        json_t *res = json_object_get(j, "result");
        int64_t compact = 0, rev = 0;
        int stop = 1;
        if (!json_is_object(res) || get_i64(res, "compact_revision", &compact) ||
            get_i64(json_object_get(res, "header"), "revision", &rev))
            w->bad = 1;
        else if (compact > 0)
            w->rev = compact;
        else if (json_array_size(json_object_get(res, "events")) > 0)
            w->rev = rev;
        else if (json_is_true(json_object_get(res, "canceled")))
            w->bad = 1;
        else
            stop = 0; /* "created", or a progress notification */
        if (w->bad)
            MC_LOG_WARN("etcd: watch: %.200s", body + start);
        json_decref(j);
        if (stop)
            return 1;
    }
}

mc_status_t mc_etcd_watch(mc_etcd_t *e, const char *key, int64_t start_rev, uint32_t timeout_ms,
                          const atomic_int *cancel, int64_t *rev_p)
{
    *rev_p = 0;
    if (check_key(key))
        return MC_ERR_INVALID_PARAMS;
    json_t *create = key_req(key, NULL), *req = json_object();
    if (!create || !req || set_i64(create, "start_revision", start_rev) ||
        json_object_set_new(req, "create_request", create)) {
        json_decref(req);
        return MC_ERR_NO_MEMORY;
    }
    char *body = json_dumps(req, JSON_COMPACT);
    json_decref(req);
    if (!body)
        return MC_ERR_NO_MEMORY;
    size_t ep = atomic_load(&e->cur) % e->n;
    char url[MC_HOST_MAX + 64];
    snprintf(url, sizeof(url), "%s/v3/watch", e->base[ep]);
    watch_ctx_t w = {0};
    long code = 0;
    mc_status_t st = mc_http_stream("POST", url, body, strlen(body), "application/json",
                                    MC_ETCD_MAX_RESP, timeout_ms, watch_data, &w, cancel, &code);
    mc_free(body);
    if (st == MC_ERR_CONNECTION)
        atomic_compare_exchange_strong(&e->cur, &ep, (ep + 1) % e->n);
    if (st == MC_ERR_TIMEOUT || st == MC_ERR_CANCELED || st == MC_ERR_CONNECTION)
        return st;
    if (st != MC_OK)
        return st;
    if (code != 200 || w.bad || !w.rev)
        return MC_ERR_ETCD_OPERATION_ERROR; /* refused, or the stream ended without a change */
    *rev_p = w.rev;
    return MC_OK;
}

/* ---------------------------------------------------------------- kv */

mc_status_t mc_etcd_range(mc_etcd_t *e, const char *key, const char *range_end, int64_t limit,
                          mc_etcd_range_t *out)
{
    memset(out, 0, sizeof(*out));
    if (check_key(key))
        return MC_ERR_INVALID_PARAMS;
    json_t *req = key_req(key, range_end), *ans;
    if (!req || (limit > 0 && set_i64(req, "limit", limit))) {
        json_decref(req);
        return MC_ERR_NO_MEMORY;
    }
    mc_status_t st = etcd_call(e, "range", "/v3/kv/range", req, &ans);
    json_decref(req);
    if (st == MC_OK)
        st = parse_range(ans, out);
    json_decref(ans);
    return st;
}

mc_status_t mc_etcd_get(mc_etcd_t *e, const char *key, char **value_p, size_t *len_p)
{
    *value_p = NULL;
    *len_p = 0;
    mc_etcd_range_t r;
    mc_status_t st = mc_etcd_range(e, key, NULL, 1, &r);
    if (st != MC_OK)
        return st;
    if (r.n == 0) {
        mc_etcd_range_free(&r);
        return MC_ERR_OBJECT_NOT_FOUND;
    }
    *value_p = r.kvs[0].value;
    *len_p = r.kvs[0].value_len;
    r.kvs[0].value = NULL;
    mc_etcd_range_free(&r);
    return MC_OK;
}

static json_t *put_req(const char *key, const void *value, size_t len, int64_t lease)
{
    json_t *req = key_req(key, NULL);
    if (req && (set_b64(req, "value", value ? value : "", len) ||
                (lease && set_i64(req, "lease", lease)))) {
        json_decref(req);
        req = NULL;
    }
    return req;
}

mc_status_t mc_etcd_put(mc_etcd_t *e, const char *key, const void *value, size_t len,
                        int64_t lease, int64_t *revision_p)
{
    if (check_key(key))
        return MC_ERR_INVALID_PARAMS;
    json_t *req = put_req(key, value, len, lease), *ans;
    if (!req)
        return MC_ERR_NO_MEMORY;
    mc_status_t st = etcd_call(e, "put", "/v3/kv/put", req, &ans);
    json_decref(req);
    int64_t rev = 0;
    if (st == MC_OK && get_i64(json_object_get(ans, "header"), "revision", &rev))
        st = MC_ERR_PROTOCOL;
    if (revision_p)
        *revision_p = rev;
    json_decref(ans);
    return st;
}

mc_status_t mc_etcd_delete(mc_etcd_t *e, const char *key, const char *range_end,
                           int64_t *deleted_p)
{
    if (check_key(key))
        return MC_ERR_INVALID_PARAMS;
    json_t *req = key_req(key, range_end), *ans;
    if (!req)
        return MC_ERR_NO_MEMORY;
    mc_status_t st = etcd_call(e, "deleterange", "/v3/kv/deleterange", req, &ans);
    json_decref(req);
    int64_t n = 0;
    if (st == MC_OK && get_i64(ans, "deleted", &n))
        st = MC_ERR_PROTOCOL;
    if (deleted_p)
        *deleted_p = n;
    json_decref(ans);
    return st;
}

/* ---------------------------------------------------------------- txn */

static const char *const TARGET[] = {"CREATE", "MOD", "VALUE", "VERSION"};
static const char *const RESULT[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
static const char *const REV_FIELD[] = {"create_revision", "mod_revision", NULL, "version"};

static json_t *cmp_json(const mc_etcd_cmp_t *c)
{
    if ((unsigned)c->target > MC_ETCD_VERSION || (unsigned)c->result > MC_ETCD_NOT_EQUAL)
        return NULL;
    json_t *j = key_req(c->key, NULL);
    if (!j || json_object_set_new(j, "target", json_string(TARGET[c->target])) ||
        json_object_set_new(j, "result", json_string(RESULT[c->result])) ||
        (c->target == MC_ETCD_VALUE ? set_b64(j, "value", c->value ? c->value : "",
                                              c->value_len)
                                    : set_i64(j, REV_FIELD[c->target], c->rev))) {
        json_decref(j);
        return NULL;
    }
    return j;
}

static json_t *op_json(const mc_etcd_op_t *o)
{
    json_t *inner = NULL;
    const char *name = NULL;
    switch (o->type) {
    case MC_ETCD_OP_PUT:
        inner = put_req(o->key, o->value, o->value_len, o->lease);
        name = "request_put";
        break;
    case MC_ETCD_OP_DELETE:
        inner = key_req(o->key, o->range_end);
        name = "request_delete_range";
        break;
    case MC_ETCD_OP_RANGE:
        inner = key_req(o->key, o->range_end);
        if (inner && o->limit > 0 && set_i64(inner, "limit", o->limit)) {
            json_decref(inner);
            inner = NULL;
        }
        name = "request_range";
        break;
    }
    if (!inner)
        return NULL;
    json_t *j = json_object();
    if (!j || json_object_set_new(j, name, inner)) {
        json_decref(j);
        return NULL;
    }
    return j;
}

void mc_etcd_txn_resp_free(mc_etcd_txn_resp_t *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        mc_etcd_range_free(&r->ranges[i]);
    mc_free(r->ranges);
    memset(r, 0, sizeof(*r));
}

mc_status_t mc_etcd_txn(mc_etcd_t *e, const mc_etcd_cmp_t *cmps, size_t ncmp,
                        const mc_etcd_op_t *success, size_t nsuccess, const mc_etcd_op_t *failure,
                        size_t nfailure, int *succeeded_p, mc_etcd_txn_resp_t *resp)
{
    if (succeeded_p)
        *succeeded_p = 0;
    if (resp)
        memset(resp, 0, sizeof(*resp));
    json_t *req = json_object(), *jc = json_array(), *js = json_array(), *jf = json_array();
    int bad = !req || !jc || !js || !jf;
    for (size_t i = 0; !bad && i < ncmp; i++)
        bad = json_array_append_new(jc, cmp_json(&cmps[i]));
    for (size_t i = 0; !bad && i < nsuccess; i++)
        bad = json_array_append_new(js, op_json(&success[i]));
    for (size_t i = 0; !bad && i < nfailure; i++)
        bad = json_array_append_new(jf, op_json(&failure[i]));
    if (!bad) {
        bad = json_object_set(req, "compare", jc) || json_object_set(req, "success", js) ||
              json_object_set(req, "failure", jf);
    }
    json_decref(jc);
    json_decref(js);
    json_decref(jf);
    if (bad) {
        json_decref(req);
        return MC_ERR_INVALID_PARAMS;
    }
    json_t *ans;
    mc_status_t st = etcd_call(e, "txn", "/v3/kv/txn", req, &ans);
    json_decref(req);
    if (st != MC_OK)
        return st;
    int ok = json_is_true(json_object_get(ans, "succeeded"));
    if (succeeded_p)
        *succeeded_p = ok;
    if (resp) {
        resp->succeeded = ok;
        json_t *rs = json_object_get(ans, "responses");
        size_t n = json_array_size(rs);
        if (get_i64(json_object_get(ans, "header"), "revision", &resp->revision) ||
            (rs && !json_is_array(rs))) {
            st = MC_ERR_PROTOCOL;
        } else if (n) {
            resp->ranges = mc_calloc(n, sizeof(*resp->ranges));
            if (!resp->ranges)
                st = MC_ERR_NO_MEMORY;
        }
        for (size_t i = 0; st == MC_OK && i < n; i++) {
            json_t *rr = json_object_get(json_array_get(rs, i), "response_range");
            resp->n = i + 1;
            if (rr)
                st = parse_range(rr, &resp->ranges[i]);
        }
        if (st != MC_OK)
            mc_etcd_txn_resp_free(resp);
    }
    json_decref(ans);
    return st;
}

/* ---------------------------------------------------------------- leases */

mc_status_t mc_etcd_lease_grant(mc_etcd_t *e, int64_t ttl_s, int64_t *id_p)
{
    *id_p = 0;
    if (ttl_s < 1 || ttl_s > 3600)
        return MC_ERR_INVALID_PARAMS;
    json_t *req = json_object(), *ans;
    if (!req || set_i64(req, "TTL", ttl_s)) {
        json_decref(req);
        return MC_ERR_NO_MEMORY;
    }
    mc_status_t st = etcd_call(e, "lease grant", "/v3/lease/grant", req, &ans);
    json_decref(req);
    if (st == MC_OK && (get_i64(ans, "ID", id_p) || *id_p == 0))
        st = MC_ERR_PROTOCOL;
    json_decref(ans);
    return st;
}

mc_status_t mc_etcd_lease_keepalive(mc_etcd_t *e, int64_t id, int64_t *ttl_p)
{
    json_t *req = json_object(), *ans;
    if (!req || set_i64(req, "ID", id)) {
        json_decref(req);
        return MC_ERR_NO_MEMORY;
    }
    mc_status_t st = etcd_call(e, "lease keepalive", "/v3/lease/keepalive", req, &ans);
    json_decref(req);
    int64_t ttl = 0;
    if (st == MC_OK) {
        json_t *res = json_object_get(ans, "result");
        if (!json_is_object(res) || get_i64(res, "TTL", &ttl))
            st = MC_ERR_PROTOCOL;
        else if (ttl <= 0)
            st = MC_ERR_LEASE_EXPIRED; /* etcd answers an unknown lease with no TTL */
    }
    if (ttl_p)
        *ttl_p = ttl;
    json_decref(ans);
    return st;
}

mc_status_t mc_etcd_lease_revoke(mc_etcd_t *e, int64_t id)
{
    json_t *req = json_object(), *ans;
    if (!req || set_i64(req, "ID", id)) {
        json_decref(req);
        return MC_ERR_NO_MEMORY;
    }
    mc_status_t st = etcd_call(e, "lease revoke", "/v3/kv/lease/revoke", req, &ans);
    json_decref(req);
    json_decref(ans);
    return st == MC_ERR_LEASE_EXPIRED ? MC_OK : st;
}
