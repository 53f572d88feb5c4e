/* Tenant quotas (strict multi-tenant mode): one account per tenant with a quota or usage, in
 * an array sorted by name (tenants are few and change rarely; lookups are a binary search).
 * Usage is charged where an object's replica count changes (master_obj_set_nrep) and where
 * objects are created and freed (master_obj_new / master_obj_unlink_free), so puts in flight,
 * commits, removals, evictions, lost segments and WAL recovery all keep it exact. */
#include "master/master_int.h"

#include "common/alloc.h"
#include "common/log.h"

#include <stdio.h>
#include <string.h>

/* Index of tenant (name, len) in m->tenants, or where it would go (*found false). */
static size_t tenant_pos(const mc_master_t *m, const char *name, size_t len, bool *found)
{
    size_t lo = 0, hi = m->n_tenants;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const char *t = m->tenants[mid].name;
        size_t tl = strlen(t);
        int c = memcmp(t, name, tl < len ? tl : len);
        if (c == 0)
            c = tl < len ? -1 : tl > len ? 1 : 0;
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

/* The account of tenant (name, len), created when create; NULL when absent (or not created:
 * the table is full or out of memory). */
static mc_master_tenant_info_t *tenant_acct(mc_master_t *m, const char *name, size_t len,
                                            bool create)
{
    bool found;
    size_t i = tenant_pos(m, name, len, &found);
    if (found)
        return &m->tenants[i];
    if (!create || len > MC_TENANT_MAX || m->n_tenants >= MC_MASTER_MAX_TENANTS ||
        mc_array_reserve(&m->tenants, &m->cap_tenants, m->n_tenants + 1, 16) != MC_OK)
        return NULL;
    memmove(&m->tenants[i + 1], &m->tenants[i], (m->n_tenants - i) * sizeof(m->tenants[0]));
    m->n_tenants++;
    mc_master_tenant_info_t *a = &m->tenants[i];
    memset(a, 0, sizeof(*a));
    memcpy(a->name, name, len);
    return a;
}

static void tenant_drop_if_idle(mc_master_t *m, mc_master_tenant_info_t *a)
{
    if (a->quota || a->used || a->objects || a->rejects)
        return;
    size_t i = (size_t)(a - m->tenants);
    memmove(&m->tenants[i], &m->tenants[i + 1], (m->n_tenants - i - 1) * sizeof(m->tenants[0]));
    m->n_tenants--;
}

void master_tenant_charge(mc_master_t *m, const obj_t *o, int64_t dreps, int dobjs)
{
    if (!m->cfg.multi_tenants || (dreps == 0 && dobjs == 0))
        return;
    const char *t;
    size_t tl;
    mc_tenant_of_key(obj_key((obj_t *)o), o->klen, &t, &tl);
    mc_master_tenant_info_t *a = tenant_acct(m, t, tl, dreps > 0 || dobjs > 0);
    if (!a) {
        if (dreps > 0 || dobjs > 0)
            MC_LOG_WARN("master: tenant '%.*s' not accounted (%u tenants known)", (int)tl, t,
                        MC_MASTER_MAX_TENANTS);
        return;
    }
    uint64_t bytes = (uint64_t)(dreps < 0 ? -dreps : dreps) * o->size;
    a->used = dreps >= 0 ? a->used + bytes : a->used - (bytes < a->used ? bytes : a->used);
    a->objects = dobjs >= 0 ? a->objects + (uint64_t)dobjs
                            : a->objects - ((uint64_t)-dobjs < a->objects ? (uint64_t)-dobjs
                                                                          : a->objects);
    tenant_drop_if_idle(m, a);
}

void master_obj_set_nrep(mc_master_t *m, obj_t *o, uint32_t n)
{
    master_tenant_charge(m, o, (int64_t)n - (int64_t)o->n_rep, 0);
    o->n_rep = (uint8_t)n;
}

mc_status_t master_tenant_admit(mc_master_t *m, const char *key, size_t klen, uint64_t bytes,
                                uint64_t (*evict)(mc_master_t *m, const mc_tenant_scope_t *scope,
                                                  uint64_t target))
{
    if (!m->cfg.multi_tenants)
        return MC_OK;
    const char *t;
    size_t tl;
    mc_tenant_of_key(key, klen, &t, &tl);
    mc_master_tenant_info_t *a = tenant_acct(m, t, tl, false);
    if (!a || !a->quota)
        return MC_ERR_TENANT_NOT_REGISTERED;
    if (a->used + bytes > a->quota && bytes <= a->quota) {
        /* make room by evicting the tenant's own evictable objects (a may move: re-find) */
        char name[MC_TENANT_MAX + 1];
        snprintf(name, sizeof(name), "%s", a->name);
        mc_tenant_scope_t scope;
        mc_tenant_scope_init(&scope, name);
        evict(m, &scope, a->used + bytes - a->quota);
        a = tenant_acct(m, name, strlen(name), true);
        if (!a)
            return MC_ERR_NO_MEMORY;
    }
    if (a->used + bytes > a->quota) {
        a->rejects++;
        return MC_ERR_TENANT_QUOTA_EXCEEDED;
    }
    return MC_OK;
}

mc_status_t mc_master_tenant_set_quota(mc_master_t *m, const char *tenant, uint64_t quota)
{
    if (!m->cfg.multi_tenants)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_MODE;
    if (mc_tenant_invalid(tenant) || quota == 0 || quota > MC_MASTER_TENANT_QUOTA_MAX)
        return MC_ERR_INVALID_PARAMS;
    tenant = mc_tenant_or_default(tenant);
    mc_master_tenant_info_t *a = tenant_acct(m, tenant, strlen(tenant), true);
    if (!a)
        return m->n_tenants >= MC_MASTER_MAX_TENANTS ? MC_ERR_TOO_LARGE : MC_ERR_NO_MEMORY;
    a->quota = quota;
    return MC_OK;
}

mc_status_t mc_master_tenant_clear_quota(mc_master_t *m, const char *tenant)
{
    if (!m->cfg.multi_tenants)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_MODE;
    if (mc_tenant_invalid(tenant))
        return MC_ERR_INVALID_PARAMS;
    tenant = mc_tenant_or_default(tenant);
    mc_master_tenant_info_t *a = tenant_acct(m, tenant, strlen(tenant), false);
    if (!a || !a->quota)
        return MC_ERR_OBJECT_NOT_FOUND;
    if (a->used || a->objects)
        return MC_ERR_TENANT_NOT_EMPTY;
    a->quota = 0;
    a->rejects = 0; /* a tenant re-registered later starts afresh */
    tenant_drop_if_idle(m, a);
    return MC_OK;
}

mc_status_t mc_master_tenant_get(mc_master_t *m, const char *tenant, mc_master_tenant_info_t *out)
{
    if (mc_tenant_invalid(tenant))
        return MC_ERR_INVALID_PARAMS;
    tenant = mc_tenant_or_default(tenant);
    mc_master_tenant_info_t *a = tenant_acct(m, tenant, strlen(tenant), false);
    if (!a)
        return MC_ERR_OBJECT_NOT_FOUND;
    *out = *a;
    return MC_OK;
}

static mc_status_t copy_list(const mc_master_tenant_info_t *src, size_t n,
                             mc_master_tenant_info_t **out_p, size_t *n_p)
{
    *out_p = NULL;
    *n_p = 0;
    if (!n)
        return MC_OK;
    if (!(*out_p = mc_malloc(n * sizeof(*src))))
        return MC_ERR_NO_MEMORY;
    memcpy(*out_p, src, n * sizeof(*src));
    *n_p = n;
    return MC_OK;
}

mc_status_t mc_master_tenant_list(mc_master_t *m, mc_master_tenant_info_t **out_p, size_t *n_p)
{
    return copy_list(m->tenants, m->n_tenants, out_p, n_p);
}

void master_tenants_publish(mc_master_t *m)
{
    if (mc_array_reserve(&m->pub_tenants, &m->cap_pub_tenants, m->n_tenants, 16) != MC_OK)
        return; /* the previous list stays published */
    if (m->n_tenants)
        memcpy(m->pub_tenants, m->tenants, m->n_tenants * sizeof(m->tenants[0]));
    m->n_pub_tenants = m->n_tenants;
}

mc_status_t mc_master_tenant_metrics_snapshot(mc_master_t *m, mc_master_tenant_info_t **out_p,
                                              size_t *n_p)
{
    pthread_mutex_lock(&m->snap_mu);
    mc_status_t st = copy_list(m->pub_tenants, m->n_pub_tenants, out_p, n_p);
    pthread_mutex_unlock(&m->snap_mu);
    return st;
}

void master_tenants_free(mc_master_t *m)
{
    mc_free(m->tenants);
    mc_free(m->pub_tenants);
    m->tenants = m->pub_tenants = NULL;
    m->n_tenants = m->cap_tenants = m->n_pub_tenants = m->cap_pub_tenants = 0;
}
