/* libFuzzer target: the conductor's two hostile-input parsers, the trace line reader and the
 * KV event line reader. Whatever they accept must satisfy their own caps. */
#include "common/alloc.h"
#include "conductor/index.h"
#include "conductor/trace.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mc_conductor_trace_limits_t lim;
    mc_conductor_trace_limits_default(&lim);
    lim.max_blocks_per_request = 4096;
    mc_conductor_request_t req;
    uint64_t *blocks = NULL;
    size_t n = 0, cap = 0;
    if (mc_conductor_trace_parse_line((const char *)data, size, &lim, &req, &blocks, &n, &cap) ==
        MC_OK) {
        if (req.n_blocks != n || n > lim.max_blocks_per_request)
            abort();
    } else if (n != 0) {
        abort(); /* nothing may be appended on error */
    }
    mc_free(blocks);

    mc_conductor_event_t ev;
    char seg[MC_CONDUCTOR_NAME_MAX + 1], host[MC_CONDUCTOR_NAME_MAX + 1];
    if (mc_conductor_event_parse_json((const char *)data, size, &ev, seg, host) == MC_OK) {
        if (strlen(seg) > MC_CONDUCTOR_NAME_MAX || strlen(host) > MC_CONDUCTOR_NAME_MAX)
            abort();
    }
    return 0;
}
