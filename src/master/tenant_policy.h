/* The tenant quota policy file (mooncake_master --tenant_quota_connector_type=file
 * --tenant_quota_connector_uri=PATH): the subset of upstream's YAML that it writes and
 * documents, parsed by hand with strict checks (docs/internals/master.md, "Tenants"):
 *
 *   version: 1              # required, must be 1
 *   tenants:                # a block list of mappings, or "tenants: []"
 *     - name: tenant-a      # a valid tenant name (common/tenant.h), unique
 *       quota: 200GB        # digits with an optional B, KB, MB, GB or TB (powers of 1024),
 *                           # 1 .. 2^63-1 bytes
 *
 * Scalars are plain (trimmed; "#" after a space starts a comment) or quoted ("..." with \" and
 * \\ escapes, or '...' with '' for a quote). Tabs, other keys, flow mappings and duplicates are
 * refused. At most MC_MASTER_MAX_TENANTS tenants, 1 MiB of file. */
#ifndef MC_MASTER_TENANT_POLICY_H
#define MC_MASTER_TENANT_POLICY_H

#include "common/buf.h"
#include "master/master.h"

#include <stddef.h>

typedef struct mc_tenant_policy {
    mc_master_tenant_info_t *t; /* name and quota of each tenant (the rest 0); mc_free */
    size_t n;
} mc_tenant_policy_t;

#define MC_TENANT_POLICY_MAX_BYTES (1u << 20)

/* Parses text (len bytes). MC_OK, or MC_ERR_INVALID_PARAMS with "line N: why" in err. */
mc_status_t mc_tenant_policy_parse(const char *text, size_t len, mc_tenant_policy_t *out,
                                   char *err, size_t errlen);
/* Reads and parses path: MC_OK; MC_ERR_FILE_OPEN_FAIL / FILE_READ_FAIL / INVALID_PARAMS with
 * the reason in err. */
mc_status_t mc_tenant_policy_load(const char *path, mc_tenant_policy_t *out, char *err,
                                  size_t errlen);
/* Appends the policy text of the tenants of list that have a quota to b (the format above). */
mc_status_t mc_tenant_policy_format(const mc_master_tenant_info_t *list, size_t n, mc_buf_t *b);
/* Writes the tenants of list that have a quota to path (a temporary file, fsync'ed, renamed
 * over it): MC_OK or MC_ERR_FILE_WRITE_FAIL (logged). */
mc_status_t mc_tenant_policy_save(const char *path, const mc_master_tenant_info_t *list,
                                  size_t n);
void mc_tenant_policy_free(mc_tenant_policy_t *p);

#endif
