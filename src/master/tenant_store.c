/* Tenant quota policy connectors: see tenant_store.h. */
#include "master/tenant_store.h"

#include "common/alloc.h"
#include "common/etcd.h"
#include "common/log.h"
#include "common/time.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#define TENANT_STORE_ETCD_TIMEOUT_MS 3000

struct mc_tenant_store {
    bool etcd;
    char *path;                 /* file */
    mc_etcd_t *e;               /* etcd */
    char key[300];
    char where[400];
    pthread_t poller;
    atomic_bool stop;
    pthread_mutex_t mu;         /* guards the fields below */
    int64_t known_mod;          /* mod revision of the last load/save/take (0 = absent) */
    int64_t known_at;           /* the store revision at which known_mod was read or written:
                                   an answer older than this says nothing new */
    bool pending;
    mc_tenant_policy_t change;  /* valid when pending */
};

/* etcd: the key's text and mod revision (0 and NULL when absent), *at_p the store revision of
 * the answer. */
static mc_status_t etcd_read(mc_tenant_store_t *s, char **text_p, size_t *len_p, int64_t *mod_p,
                             int64_t *at_p)
{
    mc_etcd_range_t r;
    mc_status_t st = mc_etcd_range(s->e, s->key, NULL, 0, &r);
    *text_p = NULL;
    *len_p = 0;
    *mod_p = 0;
    if (st != MC_OK)
        return st;
    *at_p = r.revision;
    if (r.n == 1) {
        *text_p = r.kvs[0].value;
        *len_p = r.kvs[0].value_len;
        *mod_p = r.kvs[0].mod_revision;
        r.kvs[0].value = NULL;
    }
    mc_etcd_range_free(&r);
    return MC_OK;
}

static mc_status_t parse_text(const char *text, size_t len, mc_tenant_policy_t *out, char *err,
                              size_t errlen)
{
    if (len > MC_TENANT_POLICY_MAX_BYTES) {
        snprintf(err, errlen, "policy over %u bytes", MC_TENANT_POLICY_MAX_BYTES);
        return MC_ERR_TOO_LARGE;
    }
    if (!text) { /* absent: empty policy (the admin API creates the first tenants) */
        *out = (mc_tenant_policy_t){0};
        return MC_OK;
    }
    return mc_tenant_policy_parse(text, len, out, err, errlen);
}

static void *poll_main(void *arg)
{
    mc_tenant_store_t *s = arg;
    while (!atomic_load(&s->stop)) {
        for (int i = 0; i < MC_TENANT_STORE_POLL_MS / 50 && !atomic_load(&s->stop); i++)
            mc_sleep_ms(50);
        char *text;
        size_t len;
        int64_t mod, at;
        if (atomic_load(&s->stop) || etcd_read(s, &text, &len, &mod, &at) != MC_OK)
            continue;
        pthread_mutex_lock(&s->mu);
        bool changed = at > s->known_at && mod != s->known_mod;
        pthread_mutex_unlock(&s->mu);
        if (changed) {
            mc_tenant_policy_t p;
            char err[320] = "";
            if (parse_text(text, len, &p, err, sizeof(err)) != MC_OK) {
                MC_LOG_ERROR("master: tenant quota policy in %s changed but is invalid (%s); "
                             "the quotas in force stay", s->where, err);
                p = (mc_tenant_policy_t){0};
                pthread_mutex_lock(&s->mu);
                if (at > s->known_at) { /* do not log it again until it changes */
                    s->known_mod = mod;
                    s->known_at = at;
                }
                pthread_mutex_unlock(&s->mu);
            } else {
                pthread_mutex_lock(&s->mu);
                if (at > s->known_at) { /* no save of ours meanwhile */
                    mc_tenant_policy_free(&s->change);
                    s->change = p;
                    s->pending = true;
                    s->known_mod = mod;
                    s->known_at = at;
                    p = (mc_tenant_policy_t){0};
                }
                pthread_mutex_unlock(&s->mu);
                mc_tenant_policy_free(&p);
            }
        }
        mc_free(text);
    }
    return NULL;
}

mc_status_t mc_tenant_store_open(const char *type, const char *uri, const char *cluster_id,
                                 mc_tenant_store_t **s_p)
{
    *s_p = NULL;
    bool etcd = !strcmp(type, "etcd");
    if (!etcd && strcmp(type, "file") != 0) {
        MC_LOG_ERROR("master: unknown tenant quota connector '%s' (file or etcd)", type);
        return MC_ERR_INVALID_PARAMS;
    }
    mc_tenant_store_t *s = MC_NEW(mc_tenant_store_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    pthread_mutex_init(&s->mu, NULL);
    s->etcd = etcd;
    mc_status_t st = MC_OK;
    if (!etcd) {
        s->path = mc_strdup(uri);
        st = s->path ? MC_OK : MC_ERR_NO_MEMORY;
        snprintf(s->where, sizeof(s->where), "file %.380s", uri);
    } else {
        if (!strncmp(uri, "etcd://", 7))
            uri += 7;
        size_t n = strlen(cluster_id);
        if (n == 0 || n > 128 || strspn(cluster_id, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ"
                                                    "RSTUVWXYZ0123456789_.-") != n) {
            MC_LOG_ERROR("master: --cluster_id must be 1..128 of [A-Za-z0-9_.-]");
            st = MC_ERR_INVALID_PARAMS;
        }
        if (st == MC_OK)
            st = mc_etcd_open(uri, TENANT_STORE_ETCD_TIMEOUT_MS, &s->e);
        snprintf(s->key, sizeof(s->key), "mooncake-store/%s/tenant_quota_policy", cluster_id);
        snprintf(s->where, sizeof(s->where), "etcd key %s", s->key);
        if (st == MC_OK && pthread_create(&s->poller, NULL, poll_main, s) != 0)
            st = MC_ERR_NO_MEMORY;
    }
    if (st != MC_OK) {
        mc_etcd_close(s->e);
        s->e = NULL;
        mc_tenant_store_close(s);
        return st;
    }
    *s_p = s;
    return MC_OK;
}

void mc_tenant_store_close(mc_tenant_store_t *s)
{
    if (!s)
        return;
    if (s->e) {
        atomic_store(&s->stop, true);
        pthread_join(s->poller, NULL);
        mc_etcd_close(s->e);
    }
    mc_tenant_policy_free(&s->change);
    pthread_mutex_destroy(&s->mu);
    mc_free(s->path);
    mc_free(s);
}

const char *mc_tenant_store_where(const mc_tenant_store_t *s)
{
    return s->where;
}

mc_status_t mc_tenant_store_load(mc_tenant_store_t *s, mc_tenant_policy_t *out, char *err,
                                 size_t errlen)
{
    if (!s->etcd)
        return mc_tenant_policy_load(s->path, out, err, errlen);
    char *text;
    size_t len;
    int64_t mod, at;
    mc_status_t st = etcd_read(s, &text, &len, &mod, &at);
    if (st != MC_OK) {
        snprintf(err, errlen, "etcd: %s", mc_status_str(st));
        return st;
    }
    st = parse_text(text, len, out, err, errlen);
    mc_free(text);
    if (st == MC_OK) {
        pthread_mutex_lock(&s->mu);
        s->known_mod = mod;
        s->known_at = at;
        s->pending = false;
        mc_tenant_policy_free(&s->change);
        pthread_mutex_unlock(&s->mu);
    }
    return st;
}

mc_status_t mc_tenant_store_save(mc_tenant_store_t *s, const mc_master_tenant_info_t *list,
                                 size_t n)
{
    if (!s->etcd)
        return mc_tenant_policy_save(s->path, list, n);
    mc_buf_t b = {0};
    mc_status_t st = mc_tenant_policy_format(list, n, &b);
    int64_t rev = 0;
    if (st == MC_OK)
        st = mc_etcd_put(s->e, s->key, b.data, b.len, 0, &rev);
    mc_buf_free(&b);
    if (st != MC_OK) {
        MC_LOG_ERROR("master: cannot write the tenant quota policy to %s: %s", s->where,
                     mc_status_str(st));
        return MC_ERR_FILE_WRITE_FAIL; /* the same answer as a file that cannot be written */
    }
    pthread_mutex_lock(&s->mu);
    s->known_mod = s->known_at = rev; /* our own write: not a change to report */
    s->pending = false;
    mc_tenant_policy_free(&s->change);
    pthread_mutex_unlock(&s->mu);
    return MC_OK;
}

bool mc_tenant_store_take_change(mc_tenant_store_t *s, mc_tenant_policy_t *out)
{
    if (!s->etcd)
        return false;
    pthread_mutex_lock(&s->mu);
    bool p = s->pending;
    if (p) {
        *out = s->change;
        s->change = (mc_tenant_policy_t){0};
        s->pending = false;
    }
    pthread_mutex_unlock(&s->mu);
    return p;
}
