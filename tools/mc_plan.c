/* mc_plan: capacity planner for a shared KV cache (seed 003 §2, "the three accounts").
 * Prints capacity, network and object-count accounts plus the master metadata budget for the
 * given inputs; defaults are the seed's example. --json prints one JSON object instead. */
#include "common/config.h"
#include "conductor/plan.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MIB (1024.0 * 1024.0)

int main(int argc, char **argv)
{
    mc_conductor_plan_input_t in;
    mc_conductor_plan_defaults(&in);
    const char *dtype = "bf16";
    double node_budget_gib = 512, endpoint_gib_s = 20;
    bool json = false;
    mc_option_t opts[] = {
        {"layers", MC_OPT_INT, &in.layers, NULL, "transformer layers", 1, 100000},
        {"kv_heads", MC_OPT_INT, &in.kv_heads, NULL, "KV heads (GQA/MQA)", 1, 100000},
        {"head_dim", MC_OPT_INT, &in.head_dim, NULL, "head dimension", 1, 100000},
        {"dtype", MC_OPT_STRING, &dtype, NULL, "KV dtype: bf16|fp16|fp32|fp8|int8|fp4", 0, 0},
        {"request_rate", MC_OPT_DOUBLE, &in.request_rate, NULL, "requests per second", 0, 1e9},
        {"prompt_tokens", MC_OPT_INT, &in.prompt_tokens, NULL, "tokens per prompt", 1, 4e9},
        {"reuse_share", MC_OPT_DOUBLE, &in.reuse_share, NULL,
         "share of requests reusing their full prompt (0..1)", 0, 1},
        {"retention_s", MC_OPT_DOUBLE, &in.retention_s, NULL,
         "seconds new unique KV is retained (capacity target, not a lease TTL)", 0, 1e9},
        {"replicas", MC_OPT_INT, &in.replicas, NULL, "replicas actually obtained", 1, 64},
        {"node_budget_gib", MC_OPT_DOUBLE, &node_budget_gib, NULL,
         "store segment budget per node, GiB (after OS/engine/staging)", 1e-6, 1e9},
        {"utilization", MC_OPT_DOUBLE, &in.utilization, NULL, "target fill of the budget", 1e-6,
         1},
        {"endpoint_gib_s", MC_OPT_DOUBLE, &endpoint_gib_s, NULL,
         "measured effective payload GiB/s per transfer endpoint", 1e-9, 1e9},
        {"chunk_tokens", MC_OPT_INT, &in.chunk_tokens, NULL, "tokens per cache chunk", 1, 4e9},
        {"tp", MC_OPT_INT, &in.tp, NULL, "tensor-parallel ranks (one object per rank)", 1, 4096},
        {"bytes_per_object", MC_OPT_DOUBLE, &in.bytes_per_object, NULL,
         "master metadata bytes per object (512 placeholder; pass the measured value)", 1e-3,
         1e12},
        {"json", MC_OPT_BOOL, &json, NULL, "print one JSON object instead of text", 0, 0},
    };
    mc_config_spec_t spec = {
        "mc_plan",
        "Capacity planner for a shared KV cache: the seed's three accounts (capacity, network,\n"
        "object count) and the master metadata budget. Defaults are the seed's teaching example\n"
        "(32 layers, 8 KV heads, head dim 128, bf16, 100 req/s, 8192-token prompts, 80% reuse,\n"
        "300 s retention, 2 replicas, 512 GiB/node at 70%, 20 GiB/s per endpoint, 256-token\n"
        "chunks, TP 8, 512 B/object). Results are lower bounds, not deployment advice.",
        opts, sizeof(opts) / sizeof(opts[0])};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    if (mc_conductor_dtype_bytes(dtype, &in.dtype_bytes) != MC_OK) {
        fprintf(stderr, "mc_plan: unknown dtype '%s'\n", dtype);
        return 2;
    }
    in.node_budget_bytes = node_budget_gib * GIB;
    in.endpoint_bw = endpoint_gib_s * GIB;
    mc_conductor_plan_t p;
    if (mc_conductor_plan_compute(&in, &p) != MC_OK) {
        fprintf(stderr, "mc_plan: invalid inputs (see log)\n");
        return 2;
    }
    if (json) {
        json_t *o = json_pack(
            "{s:f,s:f,s:f,s:f,s:f,s:f,s:I,s:f,s:f,s:f,s:I,s:I,s:I,s:f,s:f,s:f,s:f,s:f,s:f}",
            "kv_kib_per_token", p.kv_bytes_per_token / 1024, "kv_gib_per_request",
            p.kv_bytes_per_request / GIB, "new_kv_gib_s", p.new_kv_rate / GIB, "working_set_gib",
            p.working_set / GIB, "physical_gib", p.physical / GIB, "node_usable_gib",
            p.node_usable / GIB, "nodes_capacity", (json_int_t)p.nodes_capacity,
            "remote_read_gib_s", p.remote_read_rate / GIB, "replica_write_gib_s",
            p.replica_write_rate / GIB, "aggregate_gib_s", p.aggregate_rate / GIB,
            "endpoints_read", (json_int_t)p.endpoints_read, "endpoints_aggregate",
            (json_int_t)p.endpoints_aggregate, "nodes_needed", (json_int_t)p.nodes_needed,
            "chunk_mib", p.chunk_bytes / MIB, "object_mib", p.object_bytes / MIB, "chunks",
            p.chunks, "keys", p.keys, "metadata_gib", p.metadata_bytes / GIB,
            "bytes_per_object", in.bytes_per_object);
        char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
        printf("%s\n", s);
        free(s);
        json_decref(o);
        return 0;
    }
    printf("Inputs: %lld layers x %lld KV heads x head_dim %lld x %s -> %.0f KiB/token; "
           "%.0f req/s x %lld tokens (%.4g GiB/request); reuse %.0f%%; retention %.0f s;\n"
           "        %lld replicas; node budget %.1f GiB at %.0f%%; %.3g GiB/s per endpoint; "
           "chunk %lld tokens; TP %lld; %.0f B/object\n\n",
           (long long)in.layers, (long long)in.kv_heads, (long long)in.head_dim, dtype,
           p.kv_bytes_per_token / 1024, in.request_rate, (long long)in.prompt_tokens,
           p.kv_bytes_per_request / GIB, in.reuse_share * 100, in.retention_s,
           (long long)in.replicas, node_budget_gib, in.utilization * 100, endpoint_gib_s,
           (long long)in.chunk_tokens, (long long)in.tp, in.bytes_per_object);
    printf("Capacity\n");
    printf("  new unique KV            %10.4g GiB/s   (rate x (1-reuse) x KV/request)\n",
           p.new_kv_rate / GIB);
    printf("  working set (retention)  %10.6g GiB\n", p.working_set / GIB);
    printf("  with %lld replicas         %10.6g GiB\n", (long long)in.replicas, p.physical / GIB);
    printf("  usable per node          %10.6g GiB\n", p.node_usable / GIB);
    printf("  nodes (capacity bound)   %10lld        (ceil)\n", (long long)p.nodes_capacity);
    printf("Network (logical payload, counted once)\n");
    printf("  remote-hit reads         %10.4g GiB/s\n", p.remote_read_rate / GIB);
    printf("  replica writes           %10.4g GiB/s\n", p.replica_write_rate / GIB);
    printf("  aggregate                %10.4g GiB/s\n", p.aggregate_rate / GIB);
    printf("  saturated endpoints      %10lld        for reads alone (>=), %lld for aggregate\n",
           (long long)p.endpoints_read, (long long)p.endpoints_aggregate);
    printf("Objects\n");
    printf("  chunk size               %10.6g MiB     (%.6g MiB per rank object)\n",
           p.chunk_bytes / MIB, p.object_bytes / MIB);
    printf("  logical chunks           %10.0f\n", p.chunks);
    printf("  object keys (x TP)       %10.0f\n", p.keys);
    printf("  master metadata          %10.2f GiB     (%.0f B/object)\n", p.metadata_bytes / GIB,
           in.bytes_per_object);
    printf("Lower bound on storage nodes: %lld (max of capacity %lld and bandwidth %lld); add "
           "headroom for failures, rebuild, fragmentation and growth.\n",
           (long long)p.nodes_needed, (long long)p.nodes_capacity,
           (long long)p.endpoints_aggregate);
    return 0;
}
