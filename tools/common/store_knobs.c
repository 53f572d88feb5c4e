/* Store client tuning for programs: defaults, the environment and the config fields
 * (contracts in store_knobs.h). */
#include "store_knobs.h"

#include "te_env.h"

#include "common/tenant.h"

#include <stdio.h>
#include <stdlib.h>

void mc_tool_store_knobs_init(mc_tool_store_knobs_t *k)
{
    *k = (mc_tool_store_knobs_t){
        .hint_slots = MC_STORE_REPLICA_HINTS_DEFAULT,
        .lease_cache = 1,
        .client_metric = true,
        .feed_prefix = getenv("MC_STORE_PLACEMENT_FEED"),
        .tenant_id = "",
    };
}

mc_status_t mc_tool_store_knobs_load(mc_tool_store_knobs_t *k, char *err, size_t errlen)
{
    const char *bad = mc_tenant_invalid(k->tenant_id);
    if (bad) {
        snprintf(err, errlen, "--tenant_id / MOONCAKE_TENANT_ID '%.80s' is invalid: %s",
                 k->tenant_id, bad);
        return MC_ERR_INVALID_PARAMS;
    }
    return mc_tool_te_config_from_env(&k->te_tuning, err, errlen);
}

void mc_tool_store_knobs_fill(mc_tool_store_knobs_t *k, mc_store_config_t *cfg)
{
    cfg->replica_hint_slots = k->hint_slots ? (uint32_t)k->hint_slots : MC_STORE_REPLICA_HINTS_OFF;
    cfg->lease_cache_off = k->lease_cache == 0;
    cfg->placement_feed_prefix = k->feed_prefix;
    cfg->metrics_off = !k->client_metric;
    cfg->tenant_id = k->tenant_id;
    cfg->te_tuning = &k->te_tuning;
}
