/* FAST'25-style trace reader (Mooncake traces): one JSON object per line with
 *   timestamp (ms since start), input_length, output_length, hash_ids (chained block hashes,
 *   512 tokens per block; equal ids = reusable prefix blocks).
 * Hostile-input safe: every line is capped in length, every field is type- and range-checked,
 * the number of requests and blocks is capped, duplicate keys are refused. Lines are sorted by
 * timestamp (stable) after loading so that a replay is in time order.
 */
#ifndef MC_CONDUCTOR_TRACE_H
#define MC_CONDUCTOR_TRACE_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mc_conductor_request {
    uint64_t timestamp_ms;
    uint32_t input_tokens;
    uint32_t output_tokens;
    uint32_t n_blocks;
    uint32_t line;        /* 1-based source line, for diagnostics */
    size_t blocks_off;    /* first block in trace->blocks */
} mc_conductor_request_t;

typedef struct mc_conductor_trace {
    mc_conductor_request_t *reqs; /* owned, n_reqs entries, sorted by timestamp */
    size_t n_reqs;
    uint64_t *blocks;             /* owned, all requests' hash ids back to back */
    size_t n_blocks;
    size_t skipped_lines;         /* bad lines skipped when limits.skip_bad */
} mc_conductor_trace_t;

typedef struct mc_conductor_trace_limits {
    size_t max_requests;          /* stop after this many requests (a slice); default 10 M */
    size_t max_line_bytes;        /* default 1 MiB */
    uint32_t max_blocks_per_request; /* default 16384 */
    uint32_t max_tokens;          /* per input or output; default 16 M */
    int skip_bad;                 /* 1: skip and count bad lines; 0 (default): fail */
} mc_conductor_trace_limits_t;

void mc_conductor_trace_limits_default(mc_conductor_trace_limits_t *lim_p);

/* Parse one line into *req_p, appending its hash ids to *blocks_p (a growable array owned by
 * the caller: *blocks_p, *n_p, *cap_p, reallocated with mc_realloc). Returns MC_ERR_PROTOCOL for
 * malformed input, MC_ERR_TOO_LARGE for capped sizes; nothing is appended on error. */
mc_status_t mc_conductor_trace_parse_line(const char *line, size_t len,
                                          const mc_conductor_trace_limits_t *lim,
                                          mc_conductor_request_t *req_p, uint64_t **blocks_p,
                                          size_t *n_p, size_t *cap_p);

/* Load a file. lim may be NULL (defaults). On success *trace_p is owned by the caller
 * (mc_conductor_trace_free). Errors name the line in the log. */
mc_status_t mc_conductor_trace_load(const char *path, const mc_conductor_trace_limits_t *lim,
                                    mc_conductor_trace_t **trace_p);
void mc_conductor_trace_free(mc_conductor_trace_t *trace);

static inline const uint64_t *mc_conductor_trace_req_blocks(const mc_conductor_trace_t *t,
                                                            const mc_conductor_request_t *r)
{
    return t->blocks + r->blocks_off;
}

typedef struct mc_conductor_trace_stats {
    uint64_t requests;
    uint64_t blocks_requested;
    uint64_t blocks_distinct;
    uint64_t prefix_hit_blocks;   /* with an unbounded cache: leading blocks seen before */
    uint64_t any_hit_blocks;      /* blocks seen before, prefix or not */
    uint64_t input_tokens;
    uint64_t output_tokens;
    double duration_s;            /* last - first timestamp */
    double prefix_hit_ratio;      /* prefix_hit_blocks / blocks_requested */
} mc_conductor_trace_stats_t;

mc_status_t mc_conductor_trace_stats(const mc_conductor_trace_t *t,
                                     mc_conductor_trace_stats_t *stats_p);

#endif
