/* Helpers shared by the engine tools (their options are parsed by common/config.h). Uses only
 * the public headers. */
#ifndef MC_TOOLS_CLI_H
#define MC_TOOLS_CLI_H

#include "mooncake/store.h"

#include <stdint.h>

/* A store client for a tool: transfer-engine tuning from the environment (te_env.h, e.g.
 * MC_AUTH_TOKEN_FILE), tcp, `segment_bytes` contributed (0: none) under `host_label` (NULL:
 * the default), a 64 MiB local buffer.
 * Returns 0 with *store_p set; 2 for a bad environment variable; 1 when the store cannot be
 * set up (both printed on stderr with prog's name). */
int mc_tool_store_open(const char *prog, const char *host, const char *metadata,
                       const char *master, const char *host_label, uint64_t segment_bytes,
                       mc_store_t **store_p);

#endif
