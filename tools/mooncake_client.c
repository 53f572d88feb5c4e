/* mooncake_client: a storage server. It contributes --global_segment_size bytes of DRAM to
 * the pool and serves them to other clients through the Transfer Engine; it stores nothing
 * itself and runs until SIGINT/SIGTERM (then unmounts its segment gracefully).
 * Prints "mooncake_client ready segment=<name>" on stdout once mounted. */
#include "common/alloc.h"
#include "common/config.h"
#include "common/log.h"
#include "mooncake/store.h"
#include "te_env.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig)
{
    (void)sig;
    stop_requested = 1;
}

int main(int argc, char **argv)
{
    const char *hostname = "127.0.0.1", *metadata = "P2PHANDSHAKE", *protocol = "tcp",
               *master = "127.0.0.1:50051", *host_label = "", *device = "", *log_level = "info";
    uint64_t segment_size = 1ull << 30;
    int64_t rpc_timeout_ms = 5000;
    /* store knobs (mc_store_config_t); the feed's default is the environment's value as is,
     * since an empty MC_STORE_PLACEMENT_FEED (every key) differs from an unset one (off) */
    int64_t hint_slots = MC_STORE_REPLICA_HINTS_DEFAULT, lease_cache = 1;
    const char *feed_prefix = getenv("MC_STORE_PLACEMENT_FEED");
    mc_option_t opts[] = {
        {"local_hostname", MC_OPT_STRING, &hostname, "LOCAL_HOSTNAME",
         "host or host:port this client serves on (no port = free port 12300-14300)", 0, 0},
        {"metadata_server", MC_OPT_STRING, &metadata, "MC_METADATA_SERVER",
         "TE metadata: http://host:port/metadata, etcd://host:port or P2PHANDSHAKE", 0, 0},
        {"master_server_address", MC_OPT_STRING, &master, "MOONCAKE_MASTER",
         "mooncake_master RPC address host:port", 0, 0},
        {"global_segment_size", MC_OPT_SIZE, &segment_size, NULL,
         "bytes of DRAM contributed to the pool (e.g. 4GB)", 1, 1ull << 50},
        {"protocol", MC_OPT_STRING, &protocol, "MOONCAKE_PROTOCOL",
         "tcp (same-host peers use shared memory automatically; MC_FORCE_TCP=1 forbids it)", 0, 0},
        {"device_name", MC_OPT_STRING, &device, NULL, "RDMA devices (accepted, unused)", 0, 0},
        {"host_label", MC_OPT_STRING, &host_label, NULL,
         "failure domain for replica placement (default: host part of local_hostname)", 0, 0},
        {"rpc_timeout_ms", MC_OPT_INT, &rpc_timeout_ms, NULL, "master RPC deadline (ms)", 1,
         600000},
        {"replica_hints", MC_OPT_INT, &hint_slots, "MC_STORE_REPLICA_HINTS",
         "entries of the replica hint table (0 = none: no speculative reads, no lease cache)", 0,
         MC_STORE_REPLICA_HINTS_MAX},
        {"lease_cache", MC_OPT_INT, &lease_cache, "MC_STORE_LEASE_CACHE",
         "1 = gets read under read leases still held, 0 = every get asks the master", 0, 1},
        {"placement_feed", MC_OPT_STRING, &feed_prefix, NULL,
         "key prefix whose placements the master pushes to this client (default: "
         "$MC_STORE_PLACEMENT_FEED; unset = off, empty = every key)", 0, 0},
        {"log_level", MC_OPT_STRING, &log_level, "MC_LOG_LEVEL", "debug|info|warn|error", 0, 0},
    };
    mc_config_spec_t spec = {"mooncake_client",
                             "Mooncake-C storage server: contributes DRAM to the store pool.",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    mc_te_config_t te_tuning = {0}; /* MC_TE_*, MC_FORCE_TCP, ... (tools/common/te_env.h) */
    char te_err[256];
    if (mc_tool_te_config_from_env(&te_tuning, te_err, sizeof(te_err)) != MC_OK) {
        fprintf(stderr, "%s: %s\n", spec.program, te_err);
        return 2;
    }

    mc_store_config_t cfg = {
        .local_hostname = hostname,
        .metadata_server = metadata,
        .global_segment_size = segment_size,
        .protocol = protocol,
        .device_name = device,
        .master_server_addr = master,
        .host_label = *host_label ? host_label : NULL,
        .rpc_timeout_ms = (uint32_t)rpc_timeout_ms,
        .replica_hint_slots = hint_slots ? (uint32_t)hint_slots : MC_STORE_REPLICA_HINTS_OFF,
        .lease_cache_off = lease_cache == 0,
        .placement_feed_prefix = feed_prefix,
        .te_tuning = &te_tuning,
    };
    mc_store_t *store;
    mc_status_t st = mc_store_create(&cfg, &store);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_client: setup failed: %s\n", mc_status_str(st));
        return 1;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    printf("mooncake_client ready segment=%s\n", mc_store_hostname(store));
    fflush(stdout);
    while (!stop_requested)
        pause();
    MC_LOG_INFO("mooncake_client: stopping");
    mc_store_destroy(store);
    return 0;
}
