/* Store client tuning for programs: defaults, the environment and the config fields
 * (contracts in store_knobs.h). */
#include "store_knobs.h"

#include "te_env.h"

#include "common/config.h"
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
        .not_ready_wait_ms = MC_STORE_NOT_READY_WAIT_DEFAULT_MS,
    };
}

/* The required page size of the client's segments from MC_STORE_USE_HUGEPAGE and
 * MC_STORE_HUGEPAGE_SIZE (store_knobs.h), into *size_p; -1 with a message in err if refused. */
static int hugepage_size_from_env(uint64_t *size_p, char *err, size_t errlen)
{
    const char *use = getenv("MC_STORE_USE_HUGEPAGE"), *size = getenv("MC_STORE_HUGEPAGE_SIZE");
    bool on = false;
    if (use && *use && mc_parse_bool(use, &on) != MC_OK) {
        snprintf(err, errlen, "MC_STORE_USE_HUGEPAGE must be 1, true, yes, on or 0, false, no, "
                 "off, got '%.64s'", use);
        return -1;
    }
    uint64_t n = 2u << 20;
    if (on && size && *size &&
        (mc_parse_size(size, &n) != MC_OK || (n != (2u << 20) && n != (1u << 30)))) {
        snprintf(err, errlen, "MC_STORE_HUGEPAGE_SIZE must be 2MB or 1GB, got '%.64s'", size);
        return -1;
    }
    *size_p = on ? n : 0;
    return 0;
}

mc_status_t mc_tool_store_knobs_load(mc_tool_store_knobs_t *k, char *err, size_t errlen)
{
    const char *bad = mc_tenant_invalid(k->tenant_id);
    if (bad) {
        snprintf(err, errlen, "--tenant_id / MOONCAKE_TENANT_ID '%.80s' is invalid: %s",
                 k->tenant_id, bad);
        return MC_ERR_INVALID_PARAMS;
    }
    mc_status_t st = mc_tool_te_config_from_env(&k->te_tuning, err, errlen);
    if (st == MC_OK && hugepage_size_from_env(&k->te_tuning.hugepage_size, err, errlen) != 0)
        st = MC_ERR_INVALID_PARAMS;
    return st;
}

void mc_tool_store_knobs_fill(mc_tool_store_knobs_t *k, mc_store_config_t *cfg)
{
    cfg->replica_hint_slots = k->hint_slots ? (uint32_t)k->hint_slots : MC_STORE_REPLICA_HINTS_OFF;
    cfg->lease_cache_off = k->lease_cache == 0;
    cfg->placement_feed_prefix = k->feed_prefix;
    cfg->metrics_off = !k->client_metric;
    cfg->tenant_id = k->tenant_id;
    cfg->not_ready_wait_ms =
        k->not_ready_wait_ms ? (uint32_t)k->not_ready_wait_ms : MC_STORE_NOT_READY_WAIT_OFF;
    cfg->te_tuning = &k->te_tuning;
}
