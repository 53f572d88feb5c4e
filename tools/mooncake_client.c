/* mooncake_client: a storage server. It contributes --global_segment_size bytes of DRAM to
 * the pool and serves them to other clients through the Transfer Engine; it stores nothing
 * itself and runs until SIGINT/SIGTERM (then unmounts its segment gracefully).
 * Prints "mooncake_client ready segment=<name>" on stdout once mounted. */
#include "common/alloc.h"
#include "common/config.h"
#include "common/log.h"
#include "mooncake/store.h"
#include "store_knobs.h"

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
    mc_tool_store_knobs_t knobs; /* --replica_hints, --lease_cache, --placement_feed, MC_TE_* */
    mc_tool_store_knobs_init(&knobs);
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
        MC_TOOL_STORE_KNOB_OPTIONS(&knobs),
        {"log_level", MC_OPT_STRING, &log_level, "MC_LOG_LEVEL", "debug|info|warn|error", 0, 0},
    };
    mc_config_spec_t spec = {"mooncake_client",
                             "Mooncake-C storage server: contributes DRAM to the store pool.",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    char te_err[256];
    if (mc_tool_store_knobs_load(&knobs, te_err, sizeof(te_err)) != MC_OK) {
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
    };
    mc_tool_store_knobs_fill(&knobs, &cfg);
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
