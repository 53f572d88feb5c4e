/* Helpers for the engine tools (cli.h). */
#include "cli.h"

#include "te_env.h"

#include <stdio.h>
#include <stdlib.h>

int mc_tool_store_open(const char *prog, const char *host, const char *metadata,
                       const char *master, const char *host_label, uint64_t segment_bytes,
                       mc_store_t **store_p)
{
    mc_te_config_t tuning = {0}; /* copied by mc_store_create */
    char err[256] = "";
    if (mc_tool_te_config_from_env(&tuning, err, sizeof(err)) != MC_OK) {
        fprintf(stderr, "%s: %s\n", prog, err);
        return 2;
    }
    mc_store_config_t sc = {.local_hostname = host, .metadata_server = metadata,
                            .global_segment_size = segment_bytes,
                            .local_buffer_size = 64u << 20, .protocol = "tcp",
                            .master_server_addr = master, .te_tuning = &tuning,
                            .host_label = host_label};
    mc_status_t st = mc_store_create(&sc, store_p);
    if (st != MC_OK) {
        fprintf(stderr, "%s: store at %s: %s\n", prog, master, mc_status_str(st));
        return 1;
    }
    return 0;
}
