/* Capacity planner arithmetic (plan.h): validates the inputs, then derives bandwidth,
 * capacity, node count, object count and master metadata from them in closed form. Divisions
 * that end in a count round up, ignoring float noise of 1e-9 relative. No allocation, no I/O. */
#include "conductor/plan.h"

#include "common/log.h"

#include <math.h>
#include <string.h>
#include <strings.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

void mc_conductor_plan_defaults(mc_conductor_plan_input_t *in_p)
{
    memset(in_p, 0, sizeof(*in_p));
    in_p->layers = 32;
    in_p->kv_heads = 8;
    in_p->head_dim = 128;
    in_p->dtype_bytes = 2;
    in_p->request_rate = 100;
    in_p->prompt_tokens = 8192;
    in_p->reuse_share = 0.8;
    in_p->retention_s = 300;
    in_p->replicas = 2;
    in_p->node_budget_bytes = 512 * GIB;
    in_p->utilization = 0.7;
    in_p->endpoint_bw = 20 * GIB;
    in_p->chunk_tokens = 256;
    in_p->tp = 8;
    in_p->bytes_per_object = 512;
}

mc_status_t mc_conductor_dtype_bytes(const char *name, double *bytes_p)
{
    static const struct { const char *name; double bytes; } t[] = {
        {"bf16", 2}, {"fp16", 2}, {"float16", 2}, {"bfloat16", 2}, {"fp32", 4},
        {"float32", 4}, {"fp8", 1}, {"int8", 1}, {"fp4", 0.5}, {"int4", 0.5},
    };
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        if (strcasecmp(name, t[i].name) == 0) {
            *bytes_p = t[i].bytes;
            return MC_OK;
        }
    }
    return MC_ERR_INVALID_PARAMS;
}

static int64_t ceil_div_safe(double a, double b)
{
    /* Guard against 33.99999999 style float noise before ceil: round to 1e-9 relative. */
    double q = a / b;
    double r = nearbyint(q);
    if (fabs(q - r) < 1e-9 * (fabs(q) > 1 ? fabs(q) : 1))
        return (int64_t)r;
    return (int64_t)ceil(q);
}

mc_status_t mc_conductor_plan_compute(const mc_conductor_plan_input_t *in,
                                      mc_conductor_plan_t *out_p)
{
    const char *bad = NULL;
    if (in->layers <= 0 || in->layers > 100000)
        bad = "layers";
    else if (in->kv_heads <= 0 || in->kv_heads > 100000)
        bad = "kv_heads";
    else if (in->head_dim <= 0 || in->head_dim > 100000)
        bad = "head_dim";
    else if (!(in->dtype_bytes > 0 && in->dtype_bytes <= 16))
        bad = "dtype";
    else if (!(in->request_rate >= 0 && in->request_rate < 1e9))
        bad = "request_rate";
    else if (in->prompt_tokens <= 0 || in->prompt_tokens > (int64_t)1 << 32)
        bad = "prompt_tokens";
    else if (!(in->reuse_share >= 0 && in->reuse_share <= 1))
        bad = "reuse_share";
    else if (!(in->retention_s >= 0 && in->retention_s < 1e9))
        bad = "retention_s";
    else if (in->replicas <= 0 || in->replicas > 64)
        bad = "replicas";
    else if (!(in->node_budget_bytes > 0))
        bad = "node_budget";
    else if (!(in->utilization > 0 && in->utilization <= 1))
        bad = "utilization";
    else if (!(in->endpoint_bw > 0))
        bad = "endpoint_bw";
    else if (in->chunk_tokens <= 0 || in->chunk_tokens > (int64_t)1 << 32)
        bad = "chunk_tokens";
    else if (in->tp <= 0 || in->tp > 4096)
        bad = "tp";
    else if (!(in->bytes_per_object > 0 && in->bytes_per_object < 1e12))
        bad = "bytes_per_object";
    if (bad) {
        MC_LOG_ERROR("plan: input %s out of range", bad);
        return MC_ERR_INVALID_PARAMS;
    }
    mc_conductor_plan_t *o = out_p;
    memset(o, 0, sizeof(*o));
    o->kv_bytes_per_token =
        2.0 * (double)in->layers * (double)in->kv_heads * (double)in->head_dim * in->dtype_bytes;
    o->kv_bytes_per_request = (double)in->prompt_tokens * o->kv_bytes_per_token;

    o->new_kv_rate = in->request_rate * (1.0 - in->reuse_share) * o->kv_bytes_per_request;
    o->working_set = o->new_kv_rate * in->retention_s;
    o->physical = o->working_set * (double)in->replicas;
    o->node_usable = in->node_budget_bytes * in->utilization;
    o->nodes_capacity = ceil_div_safe(o->physical, o->node_usable);

    o->remote_read_rate = in->request_rate * in->reuse_share * o->kv_bytes_per_request;
    o->replica_write_rate = o->new_kv_rate * (double)in->replicas;
    o->aggregate_rate = o->remote_read_rate + o->replica_write_rate;
    o->endpoints_read = ceil_div_safe(o->remote_read_rate, in->endpoint_bw);
    o->endpoints_aggregate = ceil_div_safe(o->aggregate_rate, in->endpoint_bw);
    o->nodes_needed =
        o->nodes_capacity > o->endpoints_aggregate ? o->nodes_capacity : o->endpoints_aggregate;

    o->chunk_bytes = (double)in->chunk_tokens * o->kv_bytes_per_token;
    o->chunks = o->working_set / o->chunk_bytes;
    o->keys = o->chunks * (double)in->tp;
    o->object_bytes = o->chunk_bytes / (double)in->tp;
    o->metadata_bytes = o->keys * in->bytes_per_object;
    return MC_OK;
}
