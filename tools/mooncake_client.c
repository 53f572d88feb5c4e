/* mooncake_client: a storage server. It contributes --global_segment_size bytes of DRAM to
 * the pool and serves them to other clients through the Transfer Engine; it stores nothing
 * itself and runs until SIGINT/SIGTERM (then unmounts its segment gracefully).
 * Prints "mooncake_client ready segment=<name>" on stdout once mounted.
 *
 * Upstream's flags are accepted too (upstream's mooncake_client is also the standalone client
 * that dummy clients connect to): --host (= --local_hostname, wins over it), --device_names
 * (= --device_name); --port (default 50052) is where it serves dummy clients of the same host
 * (abstract Unix socket @mooncake_client_<port>.sock, mooncake/dummy.h; when the default port
 * is taken by another storage server it logs a warning and serves no dummies, when --port was
 * given it exits); --local_buffer_size and --threads are accepted and unused; --http_port and
 * --start_offload_rpc_server are accepted; --tenant_id (MOONCAKE_TENANT_ID) names the tenant
 * it acts for, with its dummy clients. --enable_offload=true makes it a storage server of the
 * local-disk (SSD) tier: its disk store lives in --offload_path or
 * MOONCAKE_OFFLOAD_FILE_STORAGE_PATH, tuned by the MOONCAKE_OFFLOAD_* environment
 * (docs/internals/disk-tier.md). --enable_http_server=true serves
 * upstream's client HTTP endpoints (/health, /metrics, /metrics/summary) on --http_port (0 = a
 * free port; the port is printed as "mooncake_client http_port=<port>" before the ready line,
 * 0 when it was taken: the server is then off, with a warning, as upstream). */
#include "common/alloc.h"
#include "common/config.h"
#include "common/log.h"
#include "mooncake/dummy.h"
#include "mooncake/store.h"
#include "store_knobs.h"

#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* set by the SIGINT/SIGTERM handler, which may run on any thread (lock-free: signal-safe) */
static atomic_int stop_requested;
static uint16_t dummy_port = 50052; /* --port: the standalone-client service */

/* Upstream's flags (see the top comment). String targets stay NULL when not given. */
static struct {
    const char *host;
    const char *port; /* text, so that "given" can be told from the default */
    const char *device_names;
    uint64_t local_buffer_size;
    int64_t threads;
    bool enable_offload;
    bool start_offload_rpc_server;
    bool enable_http_server;
    int64_t http_port;
    bool http_metrics_public;
} up = {
    .threads = 1,
    .start_offload_rpc_server = true,
    .http_port = 9300,
};

/* Refuses what upstream's flags ask for that we cannot do, warns about what is accepted but
 * not served. 0, or 2 after a message on stderr. */
static int check_upstream_flags(const char **hostname, const char **device)
{
    if (up.host) {
        if (!*up.host) {
            fprintf(stderr, "mooncake_client: --host must be an address or address:port\n");
            return 2;
        }
        *hostname = up.host;
    }
    if (up.device_names)
        *device = up.device_names;
    if (up.port) {
        int64_t port;
        if (mc_parse_int(up.port, &port) != MC_OK || port < 1 || port > 65535) {
            fprintf(stderr, "mooncake_client: --port must be a port number 1..65535, got '%s'\n",
                    up.port);
            return 2;
        }
        dummy_port = (uint16_t)port;
    }
    if (up.enable_offload && !up.start_offload_rpc_server) {
        fprintf(stderr, "mooncake_client: --enable_offload=true needs its offload RPC server "
                "(--start_offload_rpc_server=false refused): readers load disk objects "
                "through it\n");
        return 2;
    }
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    atomic_store(&stop_requested, 1);
}

int main(int argc, char **argv)
{
    const char *hostname = "127.0.0.1", *metadata = "P2PHANDSHAKE", *protocol = "tcp",
               *master = "127.0.0.1:50051", *host_label = "", *device = "", *log_level = "info";
    uint64_t segment_size = 1ull << 30;
    int64_t rpc_timeout_ms = 5000;
    const char *offload_path = "";
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
        /* upstream's flags */
        {"host", MC_OPT_STRING, &up.host, NULL,
         "upstream's name of --local_hostname: ip or ip:port (wins over --local_hostname)", 0, 0},
        {"device_names", MC_OPT_STRING, &up.device_names, NULL,
         "upstream's name of --device_name (accepted, unused)", 0, 0},
        {"port", MC_OPT_STRING, &up.port, NULL,
         "standalone-client port: dummy clients of this host connect to "
         "@mooncake_client_<port>.sock (default 50052)", 0, 0},
        {"local_buffer_size", MC_OPT_SIZE, &up.local_buffer_size, NULL,
         "standalone-client local buffer (accepted, unused: not served yet)", 0, 0},
        {"threads", MC_OPT_INT, &up.threads, NULL,
         "standalone-client RPC threads (accepted, unused: not served yet)", 1, 1024},
        {"enable_offload", MC_OPT_BOOL, &up.enable_offload, NULL,
         "be a storage server of the local-disk (SSD) tier (the master needs "
         "--enable_offload)", 0, 0},
        {"offload_path", MC_OPT_STRING, &offload_path, "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH",
         "directory of the disk store (with --enable_offload)", 0, 0},
        {"start_offload_rpc_server", MC_OPT_BOOL, &up.start_offload_rpc_server, NULL,
         "serve disk reads to other clients (with --enable_offload; must stay true)", 0, 0},
        {"enable_http_server", MC_OPT_BOOL, &up.enable_http_server, NULL,
         "serve /health, /metrics and /metrics/summary over HTTP on --http_port", 0, 0},
        {"http_port", MC_OPT_INT, &up.http_port, NULL,
         "client HTTP server port (with --enable_http_server; 0 = a free port)", 0, 65535},
        {"http_metrics_public", MC_OPT_BOOL, &up.http_metrics_public, NULL,
         "with MC_AUTH_TOKEN_FILE: still serve /metrics, /metrics/summary and /health "
         "unsigned on the HTTP port (counts only; for Prometheus)", 0, 0},
    };
    mc_config_spec_t spec = {"mooncake_client",
                             "Mooncake-C storage server: contributes DRAM to the store pool.",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    rc = check_upstream_flags(&hostname, &device);
    if (rc)
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
    cfg.ssd_offload_path = up.enable_offload ? offload_path : NULL;
    cfg.client_http_enable = up.enable_http_server;
    cfg.client_http_port = (int32_t)up.http_port;
    cfg.client_http_metrics_public = up.http_metrics_public;
    mc_store_t *store;
    mc_status_t st = mc_store_create(&cfg, &store);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_client: setup failed: %s\n", mc_status_str(st));
        return 1;
    }
    if (up.enable_http_server) /* 0: the port was taken (logged), the client runs without it */
        printf("mooncake_client http_port=%u\n", (unsigned)mc_store_client_http_port(store));
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN); /* a peer gone mid-write is an error on that socket, not our end */
    mc_real_service_t *svc = NULL;
    st = mc_real_service_start(store, dummy_port, &svc);
    if (st != MC_OK && up.port) {
        fprintf(stderr, "mooncake_client: cannot serve dummy clients on port %u: %s\n",
                (unsigned)dummy_port, mc_status_str(st));
        mc_store_destroy(store);
        return 1;
    }
    if (st != MC_OK) /* info: a second storage server on a host is normal */
        MC_LOG_INFO("mooncake_client: default port %u taken: serving no dummy clients (give "
                    "--port)", (unsigned)dummy_port);
    printf("mooncake_client ready segment=%s\n", mc_store_hostname(store));
    fflush(stdout);
    while (!atomic_load(&stop_requested))
        pause();
    MC_LOG_INFO("mooncake_client: stopping");
    mc_real_service_stop(svc);
    mc_store_destroy(store);
    return 0;
}
