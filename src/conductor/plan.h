/* Capacity planner: the seed's "three accounts" (capacity, network, object count) plus the
 * master's metadata budget, as pure arithmetic on a set of inputs.
 *
 * Units: sizes in bytes (double, so that fractional GiB inputs such as 358.4 GiB are exact
 * enough), rates per second, times in seconds. No allocation, no I/O: the caller owns both
 * structs. Defaults (mc_conductor_plan_defaults) are the seed's teaching example
 * (003 §1/§2), for which plain `mc_plan` prints 20 GiB/s, 6000 GiB, 12000 GiB, 34 nodes,
 * 120 GiB/s, 192,000 chunks, 1,536,000 keys and ~0.73 GiB of metadata.
 */
#ifndef MC_CONDUCTOR_PLAN_H
#define MC_CONDUCTOR_PLAN_H

#include "mooncake/status.h"

#include <stdint.h>

typedef struct mc_conductor_plan_input {
    int64_t layers;            /* transformer layers, e.g. 32 */
    int64_t kv_heads;          /* KV heads (GQA), e.g. 8 */
    int64_t head_dim;          /* e.g. 128 */
    double dtype_bytes;        /* bytes per element: bf16 = 2 */
    double request_rate;       /* requests per second */
    int64_t prompt_tokens;     /* tokens per prompt */
    double reuse_share;        /* share of requests that reuse their full prompt, 0..1 */
    double retention_s;        /* how long new unique KV is kept (capacity target) */
    int64_t replicas;          /* copies actually obtained, across failure domains */
    double node_budget_bytes;  /* segment bytes per storage node, after OS/engine */
    double utilization;        /* target fill of the node budget, 0..1 */
    double endpoint_bw;        /* effective payload bytes/s of one transfer endpoint */
    int64_t chunk_tokens;      /* tokens per cache chunk (object) */
    int64_t tp;                /* tensor parallel ranks; one object per rank */
    double bytes_per_object;   /* master metadata per object (512 placeholder, or measured) */
} mc_conductor_plan_input_t;

typedef struct mc_conductor_plan {
    double kv_bytes_per_token;     /* 2 (K,V) * layers * kv_heads * head_dim * dtype */
    double kv_bytes_per_request;   /* prompt_tokens * kv_bytes_per_token */
    /* capacity */
    double new_kv_rate;            /* bytes/s of new unique KV: rate*(1-reuse)*kv/request */
    double working_set;            /* new_kv_rate * retention */
    double physical;               /* working_set * replicas */
    double node_usable;            /* node_budget * utilization */
    int64_t nodes_capacity;        /* ceil(physical / node_usable) */
    /* network (logical payload counted once, hits all remote, replica writes all remote) */
    double remote_read_rate;       /* rate*reuse*kv/request */
    double replica_write_rate;     /* new_kv_rate * replicas */
    double aggregate_rate;         /* read + write */
    int64_t endpoints_read;        /* ceil(read / endpoint_bw): saturated servers for reads */
    int64_t endpoints_aggregate;   /* ceil(aggregate / endpoint_bw) */
    int64_t nodes_needed;          /* max(nodes_capacity, endpoints_aggregate): lower bound */
    /* objects */
    double chunk_bytes;            /* chunk_tokens * kv_bytes_per_token (whole model) */
    double chunks;                 /* working_set / chunk_bytes */
    double keys;                   /* chunks * tp (one object per rank) */
    double object_bytes;           /* chunk_bytes / tp */
    double metadata_bytes;         /* keys * bytes_per_object */
} mc_conductor_plan_t;

/* Fill *in_p with the seed's example inputs. */
void mc_conductor_plan_defaults(mc_conductor_plan_input_t *in_p);

/* Compute the accounts. Returns MC_ERR_INVALID_PARAMS (and logs which input) when an input is
 * out of range (non-positive sizes, shares outside [0,1], ...); *out_p is then unspecified. */
mc_status_t mc_conductor_plan_compute(const mc_conductor_plan_input_t *in,
                                      mc_conductor_plan_t *out_p);

/* Parse a dtype name ("bf16", "fp16", "fp32", "fp8", "int8") into bytes per element. */
mc_status_t mc_conductor_dtype_bytes(const char *name, double *bytes_p);

#endif
