/* Where the tenant quota policy lives (mooncake_master --tenant_quota_connector_type):
 *   file: the YAML policy at a path (master/tenant_policy.h), read at start, rewritten on every
 *         admin change;
 *   etcd: the same YAML text in the key mooncake-store/<cluster_id>/tenant_quota_policy
 *         (upstream's key), uri "h:p;h:p" or "etcd://h:p;h:p". An absent key is an empty
 *         policy. A thread polls the key (every MC_TENANT_STORE_POLL_MS) and keeps a policy
 *         that someone else wrote for mc_tenant_store_take_change; our own writes are not
 *         reported back. A key whose text does not parse is logged and ignored (the quotas
 *         in force stay).
 * load/save block (file I/O or one etcd request) and belong at start and on admin changes;
 * take_change never blocks. */
#ifndef MC_MASTER_TENANT_STORE_H
#define MC_MASTER_TENANT_STORE_H

#include "master/tenant_policy.h"

#include <stdbool.h>

#define MC_TENANT_STORE_POLL_MS 1000

typedef struct mc_tenant_store mc_tenant_store_t;

/* MC_ERR_INVALID_PARAMS (logged) for an unknown type or a bad uri / cluster id. */
mc_status_t mc_tenant_store_open(const char *type, const char *uri, const char *cluster_id,
                                 mc_tenant_store_t **s_p);
void mc_tenant_store_close(mc_tenant_store_t *s);
/* "file /path" or "etcd key K", for log lines. */
const char *mc_tenant_store_where(const mc_tenant_store_t *s);
/* The stored policy: MC_OK, or an error with the reason in err. */
mc_status_t mc_tenant_store_load(mc_tenant_store_t *s, mc_tenant_policy_t *out, char *err,
                                 size_t errlen);
/* Replaces the stored policy by the tenants of list that have a quota. */
mc_status_t mc_tenant_store_save(mc_tenant_store_t *s, const mc_master_tenant_info_t *list,
                                 size_t n);
/* etcd: true and *out (caller frees) when another writer changed the policy since the last
 * load, save or take; file: always false. */
bool mc_tenant_store_take_change(mc_tenant_store_t *s, mc_tenant_policy_t *out);

#endif
