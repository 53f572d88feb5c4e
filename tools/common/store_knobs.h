/* The store client's tuning as the store programs (mooncake_client, mc_store_replay,
 * mc_store_bench) take it: one set of options with their environment variables, and one way
 * to put them into an mc_store_config_t. The library reads no environment; this is where the
 * programs do.
 *
 *   --replica_hints   MC_STORE_REPLICA_HINTS   replica_hint_slots (0 = no hint table)
 *   --lease_cache     MC_STORE_LEASE_CACHE     lease_cache_off = !value (0 or 1)
 *   --placement_feed  MC_STORE_PLACEMENT_FEED  placement_feed_prefix (unset = off,
 *                                              empty = every key)
 *   --client_metric   MC_STORE_CLIENT_METRIC   metrics_off = !value (upstream's switch;
 *                                              true/false/1/0/yes/no)
 *   --tenant_id       MOONCAKE_TENANT_ID       tenant_id (upstream's; "" = "default")
 *   --not_ready_wait_ms  MC_STORE_NOT_READY_WAIT_MS  not_ready_wait_ms (0 = gets do not wait
 *                                              for keys not ready; default 1500)
 *   MC_TE_*, MC_FORCE_TCP, ...                 te_tuning (te_env.h)
 *   MC_STORE_USE_HUGEPAGE, MC_STORE_HUGEPAGE_SIZE  te_tuning.hugepage_size (upstream's): the
 *                     client's segments on huge pages, required; USE 1/true/yes/on (unset,
 *                     empty, 0/false/no/off = off), SIZE 2MB (default) or 1GB
 *
 * Usage: mc_tool_store_knobs_init(&k); put MC_TOOL_STORE_KNOB_OPTIONS(&k) in the option table
 * (common/config.h); after parsing, mc_tool_store_knobs_load(&k, ...) (fails on a bad
 * environment value), and mc_tool_store_knobs_fill(&k, &cfg) where the config is built. */
#ifndef MC_TOOLS_STORE_KNOBS_H
#define MC_TOOLS_STORE_KNOBS_H

#include "mooncake/store.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mc_tool_store_knobs {
    int64_t hint_slots;
    int64_t lease_cache;
    const char *feed_prefix;
    bool client_metric;
    const char *tenant_id;
    int64_t not_ready_wait_ms;
    mc_te_config_t te_tuning; /* filled by load; cfg->te_tuning points here */
} mc_tool_store_knobs_t;

/* Defaults. The feed's default is MC_STORE_PLACEMENT_FEED as it is (borrowed from the
 * environment), since an empty value (every key) differs from an unset one (off). */
void mc_tool_store_knobs_init(mc_tool_store_knobs_t *k);

/* Six mc_option_t rows (common/config.h) over k's fields. */
#define MC_TOOL_STORE_KNOB_OPTIONS(k)                                                          \
    {"replica_hints", MC_OPT_INT, &(k)->hint_slots, "MC_STORE_REPLICA_HINTS",                  \
     "entries of the replica hint table (0 = none: no speculative reads, no lease cache)", 0,  \
     MC_STORE_REPLICA_HINTS_MAX},                                                              \
    {"lease_cache", MC_OPT_INT, &(k)->lease_cache, "MC_STORE_LEASE_CACHE",                     \
     "1 = gets read under read leases still held, 0 = every get asks the master", 0, 1},      \
    {"placement_feed", MC_OPT_STRING, &(k)->feed_prefix, NULL,                                 \
     "key prefix whose placements the master pushes to this client (default: "                 \
     "$MC_STORE_PLACEMENT_FEED; unset = off, empty = every key)", 0, 0},                     \
    {"client_metric", MC_OPT_BOOL, &(k)->client_metric, "MC_STORE_CLIENT_METRIC",              \
     "keep the client metrics (mooncake_transfer_*, mooncake_client_rpc_*); false = none", 0, 0}, \
    {"tenant_id", MC_OPT_STRING, &(k)->tenant_id, "MOONCAKE_TENANT_ID",                        \
     "tenant this client acts for (keys are per tenant; empty = \"default\")", 0, 0},          \
    {"not_ready_wait_ms", MC_OPT_INT, &(k)->not_ready_wait_ms, "MC_STORE_NOT_READY_WAIT_MS",   \
     "how long a get waits for a key not ready yet (put in flight, segment awaiting its "      \
     "re-mount) before answering REPLICA_IS_NOT_READY; 0 = no wait", 0, 3600000}

/* Reads the transfer-engine tuning from the environment into k->te_tuning (te_env.h). MC_OK,
 * or MC_ERR_INVALID_PARAMS with a message in err naming the variable. */
mc_status_t mc_tool_store_knobs_load(mc_tool_store_knobs_t *k, char *err, size_t errlen);

/* Sets cfg's replica_hint_slots, lease_cache_off, placement_feed_prefix, metrics_off,
 * tenant_id, not_ready_wait_ms and te_tuning (which points into k: k must outlive mc_store_create). */
void mc_tool_store_knobs_fill(mc_tool_store_knobs_t *k, mc_store_config_t *cfg);

#endif
