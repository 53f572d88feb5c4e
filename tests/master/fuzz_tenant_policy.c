/* Fuzz target: the tenant quota policy parser (master/tenant_policy.h) on arbitrary bytes.
 * Whatever it accepts must satisfy the policy's rules: valid, unique names, quotas in range. */
#include "master/tenant_policy.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mc_tenant_policy_t p;
    char err[256];
    if (mc_tenant_policy_parse((const char *)data, size, &p, err, sizeof(err)) != MC_OK) {
        if (p.n || p.t || !err[0])
            abort(); /* a refusal leaves nothing and says why */
        return 0;
    }
    for (size_t i = 0; i < p.n; i++) {
        if (!p.t[i].name[0] || mc_tenant_invalid(p.t[i].name) || p.t[i].quota == 0 ||
            p.t[i].quota > MC_MASTER_TENANT_QUOTA_MAX)
            abort();
        for (size_t j = 0; j < i; j++)
            if (strcmp(p.t[i].name, p.t[j].name) == 0)
                abort();
    }
    mc_tenant_policy_free(&p);
    return 0;
}
