/* mooncake_http_metadata_server: the HTTP metadata store of the upstream protocol
 * (GET|PUT|DELETE /metadata?key=K, GET /health), with optional crash-safe persistence
 * (--persist_path) and authentication (--auth_token_file). Runs until SIGINT or SIGTERM, then stops cleanly (exit 0). */
#include "common/config.h"
#include "common/log.h"
#include "te/metadata_server.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

/* Option targets live at file scope: mc_config keeps parsed strings for the process lifetime
 * and they must stay reachable (LeakSanitizer) after main returns. */
static int64_t port = 8080;
static const char *host = "0.0.0.0";
static const char *persist_path = "";
static const char *log_level = "info";
static const char *auth_token_file = "";

int main(int argc, char **argv)
{
    mc_option_t opts[] = {
        {"port", MC_OPT_INT, &port, "MC_METADATA_PORT", "TCP port to listen on (0 = ephemeral)",
         0, 65535},
        {"host", MC_OPT_STRING, &host, NULL, "address to bind", 0, 0},
        {"persist_path", MC_OPT_STRING, &persist_path, "MC_METADATA_PERSIST_PATH",
         "append-only log that keeps the keys across restarts (empty = memory only)", 0, 0},
        {"auth_token_file", MC_OPT_STRING, &auth_token_file, "MC_AUTH_TOKEN_FILE",
         "cluster token file (mode 0600): every request but GET /health must then be signed "
         "(Authorization: Mooncake ...; mooncake_auth_curl); empty = open", 0, 0},
        {"log_level", MC_OPT_STRING, &log_level, "MC_LOG_LEVEL", "debug|info|warn|error|off", 0,
         0},
    };
    mc_config_spec_t spec = {
        "mooncake_http_metadata_server",
        "HTTP metadata store for the transfer engine (connection string\n"
        "http://HOST:PORT/metadata): GET|PUT|DELETE /metadata?key=K, GET /health.\n"
        "With --persist_path every update is logged and fsync'ed before the reply and replayed\n"
        "at start, so a restart (or kill -9) loses nothing that was acknowledged.",
        opts, sizeof(opts) / sizeof(opts[0])};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;

    /* Block the stop signals before any thread starts so that only sigwait() sees them. */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    mc_meta_server_t *srv = NULL;
    mc_meta_server_opts_t so = {.host = host, .port = (uint16_t)port,
                                .persist_path = persist_path,
                                .auth_token_file = auth_token_file};
    mc_status_t st = mc_meta_server_start_opts(&so, &srv);
    if (st != MC_OK) {
        fprintf(stderr, "mooncake_http_metadata_server: cannot start: %s\n", mc_status_str(st));
        return 1;
    }
    int sig = 0;
    sigwait(&set, &sig);
    MC_LOG_INFO("metadata server: signal %d, stopping (%zu keys)", sig, mc_meta_server_count(srv));
    mc_meta_server_stop(srv);
    return 0;
}
