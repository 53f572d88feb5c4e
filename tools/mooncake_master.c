/* mooncake_master: the Store master daemon (control plane). Flags use upstream names and
 * defaults; see --help. SIGTERM/SIGINT stop it cleanly (WAL flushed).
 *
 * The write-ahead log directory: --wal_dir=auto (the default) is the user's state directory
 * (/var/lib/mooncake/master for root, else $XDG_STATE_HOME or ~/.local/state, + mooncake/master),
 * never the working directory; --wal_dir="" keeps metadata in memory only and says so in the
 * log. A master holds an exclusive lock on <wal_dir>/LOCK for its lifetime, so a second master
 * pointed at the same directory refuses to start instead of corrupting the log. */
#include "common/config.h"
#include "common/log.h"
#include "master/service.h"
#ifdef MC_HAVE_META_SERVER
#include "te/metadata_server.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#define WAL_DIR_AUTO "auto"

static mc_master_service_t *g_svc;

/* mkdir -p for an absolute or relative path; 0 or -1 with errno. */
static int make_dirs(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, 0700) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    return mkdir(buf, 0700) != 0 && errno != EEXIST ? -1 : 0;
}

/* --wal_dir=auto -> the user's state directory (see the file comment). */
static int resolve_wal_dir(const char *arg, char *out, size_t n)
{
    if (strcmp(arg, WAL_DIR_AUTO) != 0)
        return snprintf(out, n, "%s", arg) < (int)n ? 0 : -1;
    const char *xdg = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    int len;
    if (geteuid() == 0)
        len = snprintf(out, n, "/var/lib/mooncake/master");
    else if (xdg && xdg[0] == '/')
        len = snprintf(out, n, "%s/mooncake/master", xdg);
    else if (home && *home)
        len = snprintf(out, n, "%s/.local/state/mooncake/master", home);
    else {
        fprintf(stderr, "mooncake_master: --wal_dir=auto needs $HOME or $XDG_STATE_HOME; pass "
                        "--wal_dir=<dir> (or --wal_dir=\"\" to keep metadata in memory only)\n");
        return -1;
    }
    return len < (int)n ? 0 : -1;
}

/* Creates dir and takes an exclusive lock on dir/LOCK (held until exit: the fd is never
 * closed). Returns 0, or -1 after printing why (another master holds it, or I/O errors). */
static int lock_wal_dir(const char *dir)
{
    char path[4200];
    if (make_dirs(dir) != 0) {
        fprintf(stderr, "mooncake_master: cannot create --wal_dir %s: %s\n", dir, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "%s/LOCK", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "mooncake_master: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        char holder[32] = "";
        ssize_t r = pread(fd, holder, sizeof(holder) - 1, 0);
        holder[r > 0 ? r : 0] = '\0';
        holder[strcspn(holder, "\n")] = '\0';
        fprintf(stderr,
                "mooncake_master: --wal_dir %s is in use by another master (pid %s); give each "
                "master its own directory\n",
                dir, holder[0] ? holder : "unknown");
        close(fd);
        return -1;
    }
    char pid[32];
    int len = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len)
        fprintf(stderr, "mooncake_master: warning: cannot write the pid into %s\n", path);
    return 0;
}

static void on_signal(int sig)
{
    (void)sig;
    if (g_svc)
        mc_master_service_stop(g_svc);
}

int main(int argc, char **argv)
{
    int64_t port = 50051, metrics_port = 9003, rpc_thread_num = 1, http_meta_port = 8080;
    int64_t lease_ttl = 10000, soft_pin_ttl = 1800000, client_ttl = 10, discard_s = 30,
            release_s = 600, cron_ms = 10, event_buffer = 65536;
    double eviction_ratio = 0.05, high_wm = 0.90;
    bool allow_soft = true, exist_extends = false, enable_meta = false, enable_ha = false,
         wal_fsync = false;
    const char *rpc_address = "0.0.0.0", *memory_allocator = "offset",
               *strategy = "random", *wal_dir = WAL_DIR_AUTO, *log_level = "info",
               *config_path = "", *etcd_endpoints = "", *cluster_id = "mooncake_cluster";
    uint64_t snapshot_bytes = 64ull << 20;
    mc_option_t opts[] = {
        {"port", MC_OPT_INT, &port, NULL, "RPC port", 0, 65535},
        {"rpc_address", MC_OPT_STRING, &rpc_address, NULL, "RPC bind address", 0, 0},
        {"rpc_thread_num", MC_OPT_INT, &rpc_thread_num, NULL,
         "accepted for compatibility; the object table is served by one loop thread", 0, 1024},
        {"metrics_port", MC_OPT_INT, &metrics_port, NULL,
         "HTTP port for /metrics /health /role /query_key /get_all_segments (-1 = off)", -1,
         65535},
        {"enable_http_metadata_server", MC_OPT_BOOL, &enable_meta, NULL,
         "also serve the HTTP metadata store (GET/PUT/DELETE /metadata?key=)", 0, 0},
        {"http_metadata_server_port", MC_OPT_INT, &http_meta_port, NULL,
         "port of the HTTP metadata server", 0, 65535},
        {"default_kv_lease_ttl", MC_OPT_INT, &lease_ttl, NULL, "read lease (ms)", 1, 86400000},
        {"default_kv_soft_pin_ttl", MC_OPT_INT, &soft_pin_ttl, NULL, "soft pin TTL (ms)", 1,
         86400000},
        {"allow_evict_soft_pinned_objects", MC_OPT_BOOL, &allow_soft, NULL,
         "evict soft-pinned objects in a second pass", 0, 0},
        {"eviction_ratio", MC_OPT_DOUBLE, &eviction_ratio, NULL,
         "fraction of capacity freed per eviction round", 0.0001, 1},
        {"eviction_high_watermark_ratio", MC_OPT_DOUBLE, &high_wm, NULL,
         "usage above which the cron evicts", 0.01, 1},
        {"client_ttl", MC_OPT_INT, &client_ttl, NULL,
         "seconds without a ping before a client's segments are unmounted", 1, 86400},
        {"put_start_discard_timeout_sec", MC_OPT_INT, &discard_s, NULL,
         "an unfinished put may be pre-empted after this many seconds", 1, 86400},
        {"put_start_release_timeout_sec", MC_OPT_INT, &release_s, NULL,
         "space of an unfinished put is released after this many seconds", 1, 864000},
        {"exist_key_extends_lease", MC_OPT_BOOL, &exist_extends, NULL,
         "ExistKey grants a read lease (upstream behaviour; false answers upstream #2187)", 0, 0},
        {"memory_allocator", MC_OPT_STRING, &memory_allocator, NULL, "offset (only)", 0, 0},
        {"allocation_strategy", MC_OPT_STRING, &strategy, NULL,
         "random | free_ratio_first (a preferred segment is always tried first)", 0, 0},
        {"wal_dir", MC_OPT_STRING, &wal_dir, NULL,
         "write-ahead log directory: auto = /var/lib/mooncake/master for root, else "
         "$XDG_STATE_HOME (~/.local/state)/mooncake/master; \"\" = metadata in memory only, "
         "lost on restart", 0, 0},
        {"wal_fsync", MC_OPT_BOOL, &wal_fsync, NULL,
         "fdatasync every group commit (default: write every commit, fdatasync within 1 s)", 0, 0},
        {"wal_snapshot_bytes", MC_OPT_SIZE, &snapshot_bytes, NULL,
         "log size that triggers a snapshot", 0, 0},
        {"cron_period_ms", MC_OPT_INT, &cron_ms, NULL, "housekeeping period (ms)", 1, 1000},
        {"event_buffer_size", MC_OPT_INT, &event_buffer, NULL,
         "object events (committed/evicted/removed/segment_lost) kept for subscribers such as "
         "mooncake_conductor (PollEvents); a subscriber further behind resyncs (0 = off)",
         0, 1 << 24},
        {"enable_ha", MC_OPT_BOOL, &enable_ha, NULL, "not supported yet (must be false)", 0, 0},
        {"etcd_endpoints", MC_OPT_STRING, &etcd_endpoints, NULL, "for HA (not supported yet)", 0,
         0},
        {"cluster_id", MC_OPT_STRING, &cluster_id, NULL, "cluster id (HA)", 0, 0},
        {"log_level", MC_OPT_STRING, &log_level, NULL, "debug | info | warn | error", 0, 0},
        {"config_path", MC_OPT_STRING, &config_path, NULL, "JSON file with the same names", 0, 0},
    };
    mc_config_spec_t spec = {"mooncake_master",
                             "Mooncake-C Store master: key -> replica locations, space allocation "
                             "in client segments, leases, pins, eviction, client liveness, "
                             "restart recovery from a write-ahead log, Prometheus metrics.",
                             opts, sizeof(opts) / sizeof(opts[0])};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    if (strcmp(memory_allocator, "offset") != 0) {
        fprintf(stderr, "mooncake_master: --memory_allocator=%s not supported (offset only)\n",
                memory_allocator);
        return 2;
    }
    if (enable_ha) {
        fprintf(stderr, "mooncake_master: --enable_ha is not supported yet\n");
        return 2;
    }
    mc_master_service_opts_t so = {0};
    mc_master_config_default(&so.cfg);
    if (!strcmp(strategy, "random") || !strcmp(strategy, "local_first"))
        so.cfg.strategy = MC_STRATEGY_RANDOM;
    else if (!strcmp(strategy, "free_ratio_first"))
        so.cfg.strategy = MC_STRATEGY_FREE_RATIO_FIRST;
    else {
        fprintf(stderr, "mooncake_master: unknown --allocation_strategy=%s\n", strategy);
        return 2;
    }
    so.rpc_address = rpc_address;
    so.port = (uint16_t)port;
    so.metrics_port = (int)metrics_port;
    so.cron_period_ms = (uint32_t)cron_ms;
    so.cfg.default_kv_lease_ttl_ms = (uint64_t)lease_ttl;
    so.cfg.default_kv_soft_pin_ttl_ms = (uint64_t)soft_pin_ttl;
    so.cfg.allow_evict_soft_pinned_objects = allow_soft;
    so.cfg.eviction_ratio = eviction_ratio;
    so.cfg.eviction_high_watermark_ratio = high_wm;
    so.cfg.client_ttl_ms = (uint64_t)client_ttl * 1000;
    so.cfg.put_start_discard_timeout_ms = (uint64_t)discard_s * 1000;
    so.cfg.put_start_release_timeout_ms = (uint64_t)release_s * 1000;
    so.cfg.exist_key_extends_lease = exist_extends;
    char wal_path[4096] = "";
    if (resolve_wal_dir(wal_dir, wal_path, sizeof(wal_path)) != 0) {
        fprintf(stderr, "mooncake_master: --wal_dir too long or unresolvable\n");
        return 2;
    }
    if (wal_path[0] && lock_wal_dir(wal_path) != 0)
        return 1;
    if (!wal_path[0])
        MC_LOG_WARN("master: --wal_dir is empty: metadata is kept in memory only and is lost "
                    "when this master restarts");
    wal_dir = wal_path;
    so.cfg.wal_dir = wal_dir;
    so.cfg.wal_fsync = wal_fsync;
    so.cfg.wal_snapshot_bytes = snapshot_bytes;
    so.cfg.event_buffer_size = (uint32_t)event_buffer;

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    mc_status_t st = mc_master_service_create(&so, &g_svc);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_master: cannot start: %s\n", mc_status_str(st));
        return 1;
    }
#ifdef MC_HAVE_META_SERVER
    mc_meta_server_t *meta = NULL;
    if (enable_meta) {
        char path[4096] = "";
        if (wal_dir && *wal_dir)
            snprintf(path, sizeof(path), "%s/http_metadata.json", wal_dir);
        st = mc_meta_server_start(rpc_address, (uint16_t)http_meta_port, path[0] ? path : NULL,
                                  &meta);
        if (st != MC_OK) {
            fprintf(stderr, "mooncake_master: cannot start the HTTP metadata server: %s\n",
                    mc_status_str(st));
            mc_master_service_destroy(g_svc);
            return 1;
        }
        MC_LOG_INFO("master: HTTP metadata server on port %u", mc_meta_server_port(meta));
    }
#else
    if (enable_meta) {
        fprintf(stderr, "mooncake_master: built without the HTTP metadata server\n");
        mc_master_service_destroy(g_svc);
        return 2;
    }
#endif
    /* Machine-readable line for scripts and tests. */
    printf("mooncake_master listening rpc_port=%u metrics_port=%u\n",
           mc_master_service_port(g_svc), mc_master_service_metrics_port(g_svc));
    fflush(stdout);
    MC_LOG_INFO("master: serving RPC on %s:%u, metrics on %u, wal_dir '%s'", rpc_address,
                mc_master_service_port(g_svc), mc_master_service_metrics_port(g_svc), wal_dir);
    mc_master_service_run(g_svc);
    MC_LOG_INFO("master: stopping");
#ifdef MC_HAVE_META_SERVER
    if (meta)
        mc_meta_server_stop(meta);
#endif
    mc_master_service_t *s = g_svc;
    g_svc = NULL;
    mc_master_service_destroy(s);
    return 0;
}
