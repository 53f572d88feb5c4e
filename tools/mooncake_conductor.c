/* mooncake_conductor: the conductor service.
 *
 * Reads JSON lines from --input (default stdin) and answers on stdout, one JSON line per
 * request. Events come either from the same input (offline mode: a master event dump or a
 * pipe) or, with --master=host:port (live mode), from the master's event stream through a
 * subscriber thread (src/conductor/subscriber.h); then event and resync lines are refused.
 *
 *   {"seq":N,"kind":"committed|evicted|removed|segment_lost","hash":H|"key":K,
 *    "size":B,"segment":S,"host":H,"tier":"local|pool|ssd"}          -> applied silently;
 *        a sequence gap prints {"event":"gap",...} and the index stays stale until a resync
 *   {"op":"query","hashes":[...]|"keys":[...],"hosts":[...],"allow_stale":false}
 *        -> {"op":"query","state":..,"results":[{"host":..,"local":..,"pool":..,"any":..}]}
 *   {"op":"route","input_tokens":N,"hashes":[...],"candidates":[{"host":..,"queue_s":..,
 *    "handoff_s":..}]}  -> decision, chosen host, predicted fetch/prefill/TTFT
 *   {"op":"resync_begin"} / {"op":"snapshot","hash":H,"segment":S,"host":H,"tier":T} /
 *   {"op":"resync_end","next_seq":N} / {"op":"stats"}
 * Every line is capped (--max_line_bytes) and validated; a bad line gets {"error":...} and
 * the service continues. */
#include "common/auth.h"
#include "common/config.h"
#include "common/log.h"
#include "conductor/index.h"
#include "conductor/router.h"
#include "conductor/subscriber.h"
#include "te_env.h"

#include <pthread.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB (1024.0 * 1024.0 * 1024.0)
#define MAX_HASHES 100000
#define MAX_HOSTS 4096

typedef struct svc {
    mc_conductor_index_t *idx;
    mc_conductor_router_config_t router;
    mc_conductor_model_t model;
    mc_conductor_bandwidth_t bw;
    uint64_t rng;
    uint64_t lines, errors;
    pthread_mutex_t mu;        /* the index: this thread vs the subscriber thread */
    mc_conductor_sub_t *sub;   /* live mode */
    mc_auth_t *auth;           /* live mode: MC_AUTH_TOKEN_FILE's keyring, or NULL */
    /* scratch for one request */
    uint64_t *hashes;          /* MAX_HASHES */
    uint32_t *hosts;           /* MAX_HOSTS */
    mc_conductor_prefix_t *px; /* MAX_HOSTS */
    mc_conductor_candidate_t *cands; /* MAX_HOSTS */
} svc_t;

static void reply(json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (s) {
        fputs(s, stdout);
        fputc('\n', stdout);
        free(s);
    }
    fflush(stdout);
    json_decref(o);
}

static void reply_error(svc_t *sv, const char *what, mc_status_t st)
{
    sv->errors++;
    reply(json_pack("{s:s,s:s,s:I}", "error", what, "status", mc_status_name(st), "line",
                    (json_int_t)sv->lines));
}

/* hashes from "hashes" (integers >= 0 or "0x..." strings) or "keys" (store keys) */
static int get_hashes(json_t *root, uint64_t *out, size_t *n_p)
{
    json_t *a = json_object_get(root, "hashes");
    int keys = 0;
    if (!a) {
        a = json_object_get(root, "keys");
        keys = 1;
    }
    if (!a || !json_is_array(a) || json_array_size(a) > MAX_HASHES)
        return -1;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (keys) {
            if (!json_is_string(v) || json_string_length(v) > 4096)
                return -1;
            out[i] = mc_conductor_key_hash(json_string_value(v));
        } else if (json_is_integer(v) && json_integer_value(v) >= 0) {
            out[i] = (uint64_t)json_integer_value(v);
        } else if (json_is_string(v)) {
            char *end;
            const char *s = json_string_value(v);
            if (!*s || strlen(s) > 18 || s[0] == '-')
                return -1;
            out[i] = strtoull(s, &end, 0);
            if (*end)
                return -1;
        } else {
            return -1;
        }
    }
    *n_p = json_array_size(a);
    return 0;
}

static int host_ids(svc_t *sv, json_t *arr, const char *field, uint32_t *ids, size_t *n_p)
{
    if (!arr || !json_is_array(arr) || json_array_size(arr) == 0 ||
        json_array_size(arr) > MAX_HOSTS)
        return -1;
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v)
    {
        json_t *h = field ? json_object_get(v, field) : v;
        if (!h || !json_is_string(h) ||
            mc_conductor_index_host_id(sv->idx, json_string_value(h), &ids[i]) != MC_OK)
            return -1;
    }
    *n_p = json_array_size(arr);
    return 0;
}

/* query: the prefix each host holds of the hashes. */
static void reply_query(svc_t *sv, json_t *harr, size_t nc, mc_status_t rc,
                        const mc_conductor_index_stats_t *st)
{
    const char *state = mc_conductor_index_state_name(st->state);
    if (rc != MC_OK) {
        reply(json_pack("{s:s,s:s,s:s}", "op", "query", "state", state, "error",
                        mc_status_name(rc)));
        return;
    }
    const mc_conductor_prefix_t *px = sv->px;
    json_t *res = json_array();
    for (size_t i = 0; i < nc; i++)
        json_array_append_new(
            res, json_pack("{s:O,s:i,s:i,s:i}", "host",
                           json_array_get(harr, i), "local", (int)px[i].local, "pool",
                           (int)px[i].pool, "any", (int)px[i].any));
    reply(json_pack("{s:s,s:s,s:b,s:o}", "op", "query", "state", state, "stale",
                    st->state != MC_CONDUCTOR_INDEX_OK, "results", res));
}

/* route: the router's decision over the candidates (cache-blind when the index is stale). */
static void reply_route(svc_t *sv, json_t *root, json_t *harr, size_t nc, mc_status_t rc,
                        const mc_conductor_index_stats_t *st)
{
    mc_conductor_candidate_t *cands = sv->cands;
    json_t *it = json_object_get(root, "input_tokens");
    if (!it || !json_is_integer(it) || json_integer_value(it) < 1 ||
        json_integer_value(it) > 16000000) {
        reply_error(sv, "route needs input_tokens in [1, 16M]", MC_ERR_INVALID_PARAMS);
        return;
    }
    for (size_t i = 0; i < nc; i++) {
        json_t *c = json_array_get(harr, i);
        json_t *q = json_object_get(c, "queue_s"), *h = json_object_get(c, "handoff_s");
        cands[i].id = (uint32_t)i;
        cands[i].queue_s = q && json_is_number(q) ? json_number_value(q) : 0;
        cands[i].handoff_s = h && json_is_number(h) ? json_number_value(h) : 0;
        if (!(cands[i].queue_s >= 0 && cands[i].queue_s < 1e9 && cands[i].handoff_s >= 0 &&
              cands[i].handoff_s < 1e9)) {
            reply_error(sv, "queue_s/handoff_s out of range", MC_ERR_INVALID_PARAMS);
            return;
        }
        /* a stale index is not consulted: cache-blind routing (index.h) */
        cands[i].prefix = rc == MC_OK ? sv->px[i] : (mc_conductor_prefix_t){0, 0, 0};
    }
    json_t *dok = json_object_get(root, "decode_ok");
    mc_conductor_route_t r;
    mc_conductor_route(&sv->router, &sv->model, &sv->bw, (uint32_t)json_integer_value(it),
                       cands, nc, dok ? json_is_true(dok) : 1, &sv->rng, &r);
    reply(json_pack("{s:s,s:s,s:s,s:O,s:s,s:b,s:i,s:i,s:i,s:f,s:f,s:f}", "op", "route",
                    "decision", mc_conductor_decision_name(r.decision), "policy",
                    mc_conductor_policy_name(sv->router.policy), "host",
                    json_object_get(json_array_get(harr, r.chosen), "host"), "state",
                    mc_conductor_index_state_name(st->state), "cache_blind", rc != MC_OK,
                    "reuse_blocks", (int)r.est.reuse_blocks,
                    "remote_blocks", (int)r.est.remote_blocks, "ssd_blocks",
                    (int)r.est.ssd_blocks, "fetch_s", r.est.fetch_s, "prefill_s",
                    r.est.prefill_s, "ttft_s", r.est.ttft_s));
}

/* query and route: both look the hashes up for each host first. */
static void op_query_route(svc_t *sv, json_t *root, int route)
{
    size_t nh, nc;
    json_t *harr = json_object_get(root, route ? "candidates" : "hosts");
    if (get_hashes(root, sv->hashes, &nh) ||
        host_ids(sv, harr, route ? "host" : NULL, sv->hosts, &nc)) {
        reply_error(sv, "bad hashes/keys or hosts/candidates", MC_ERR_INVALID_PARAMS);
        return;
    }
    unsigned flags = json_is_true(json_object_get(root, "allow_stale"))
                         ? MC_CONDUCTOR_QUERY_ALLOW_STALE
                         : 0;
    mc_status_t rc = mc_conductor_index_query(sv->idx, sv->hashes, nh, sv->hosts, nc, flags,
                                              sv->px);
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(sv->idx, &st);
    if (route)
        reply_route(sv, root, harr, nc, rc, &st);
    else
        reply_query(sv, harr, nc, rc, &st);
}

static void op_snapshot(svc_t *sv, json_t *root)
{
    json_t *h = json_object_get(root, "hash"), *sg = json_object_get(root, "segment"),
           *ho = json_object_get(root, "host"), *ti = json_object_get(root, "tier");
    mc_conductor_tier_t tier = MC_CONDUCTOR_TIER_POOL;
    if (!h || !json_is_integer(h) || json_integer_value(h) < 0 || !sg || !json_is_string(sg) ||
        !ho || !json_is_string(ho) ||
        (ti && (!json_is_string(ti) || mc_conductor_tier_parse(json_string_value(ti), &tier)))) {
        reply_error(sv, "snapshot needs hash, segment, host[, tier]", MC_ERR_INVALID_PARAMS);
        return;
    }
    mc_status_t rc = mc_conductor_index_snapshot_add(sv->idx, (uint64_t)json_integer_value(h),
                                                     json_string_value(sg),
                                                     json_string_value(ho), tier);
    if (rc != MC_OK)
        reply_error(sv, "snapshot refused", rc);
}

static void op_resync_end(svc_t *sv, json_t *root, const char *op)
{
    json_t *n = json_object_get(root, "next_seq");
    if (!n || !json_is_integer(n) || json_integer_value(n) < 0) {
        reply_error(sv, "resync_end needs next_seq", MC_ERR_INVALID_PARAMS);
        return;
    }
    mc_status_t rc = mc_conductor_index_resync_end(sv->idx, (uint64_t)json_integer_value(n));
    if (rc != MC_OK)
        reply_error(sv, "resync_end without resync_begin", rc);
    else
        reply(json_pack("{s:s,s:s}", "op", op, "state", "ok"));
}

static void op_stats(svc_t *sv, const char *op)
{
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(sv->idx, &st);
    json_t *live = json_null();
    if (sv->sub) {
        mc_conductor_sub_stats_t ss;
        mc_conductor_sub_get_stats(sv->sub, &ss);
        live = json_pack("{s:b,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "synced", ss.synced,
                         "epoch", (json_int_t)ss.epoch, "next_seq", (json_int_t)ss.next_seq,
                         "master_next_seq", (json_int_t)ss.master_next_seq, "polls",
                         (json_int_t)ss.polls, "events", (json_int_t)ss.events, "gaps",
                         (json_int_t)ss.gaps, "resyncs", (json_int_t)ss.resyncs,
                         "resync_objects", (json_int_t)ss.resync_objects, "rpc_errors",
                         (json_int_t)ss.rpc_errors);
    }
    reply(json_pack("{s:o,s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "live",
                    live, "op", op, "state", mc_conductor_index_state_name(st.state), "blocks",
                    (json_int_t)st.blocks, "holders", (json_int_t)st.holders, "segments",
                    (json_int_t)st.segments, "hosts", (json_int_t)st.hosts, "applied",
                    (json_int_t)st.events_applied, "duplicates",
                    (json_int_t)st.events_duplicate, "refused", (json_int_t)st.events_refused,
                    "unknown", (json_int_t)st.events_unknown, "gaps", (json_int_t)st.gaps,
                    "resyncs", (json_int_t)st.resyncs, "next_seq", (json_int_t)st.next_seq,
                    "bad_lines", (json_int_t)sv->errors));
}

static void handle_op(svc_t *sv, json_t *root, const char *op)
{
    if (strcmp(op, "query") == 0 || strcmp(op, "route") == 0) {
        op_query_route(sv, root, op[0] == 'r');
    } else if (sv->sub && (strcmp(op, "resync_begin") == 0 || strcmp(op, "snapshot") == 0 ||
                           strcmp(op, "resync_end") == 0)) {
        reply_error(sv, "live mode: the index follows the master (--master)",
                    MC_ERR_UNAVAILABLE_IN_CURRENT_MODE);
    } else if (strcmp(op, "resync_begin") == 0) {
        mc_conductor_index_resync_begin(sv->idx);
        reply(json_pack("{s:s,s:s}", "op", op, "state", "resyncing"));
    } else if (strcmp(op, "snapshot") == 0) {
        op_snapshot(sv, root);
    } else if (strcmp(op, "resync_end") == 0) {
        op_resync_end(sv, root, op);
    } else if (strcmp(op, "stats") == 0) {
        op_stats(sv, op);
    } else {
        reply_error(sv, "unknown op", MC_ERR_INVALID_PARAMS);
    }
}

/* An event line (offline mode): applied; a sequence gap is reported. */
static void handle_event(svc_t *sv, const char *line, size_t len)
{
    char seg[MC_CONDUCTOR_NAME_MAX + 1], host[MC_CONDUCTOR_NAME_MAX + 1];
    mc_conductor_event_t ev;
    mc_status_t rc = mc_conductor_event_parse_json(line, len, &ev, seg, host);
    if (rc != MC_OK) {
        reply_error(sv, "bad event", rc);
        return;
    }
    mc_conductor_index_stats_t before, after;
    mc_conductor_index_get_stats(sv->idx, &before);
    rc = mc_conductor_index_apply(sv->idx, &ev);
    mc_conductor_index_get_stats(sv->idx, &after);
    if (after.gaps > before.gaps)
        reply(json_pack("{s:s,s:I,s:I,s:s}", "event", "gap", "expected",
                        (json_int_t)after.gap_expected, "got",
                        (json_int_t)after.gap_got, "state", "stale"));
    else if (rc != MC_OK && rc != MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS)
        reply_error(sv, "event refused", rc);
}

/* One input line (without its end of line): an op or an event, under the index lock. */
static void handle_line(svc_t *sv, const char *line, size_t len)
{
    json_error_t err;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
    if (!root || !json_is_object(root)) {
        reply_error(sv, "not a JSON object", MC_ERR_PROTOCOL);
        json_decref(root);
        return;
    }
    json_t *op = json_object_get(root, "op");
    pthread_mutex_lock(&sv->mu);
    if (op && json_is_string(op)) {
        handle_op(sv, root, json_string_value(op));
    } else if (sv->sub && json_object_get(root, "kind")) {
        reply_error(sv, "live mode: events come from the master (--master)",
                    MC_ERR_UNAVAILABLE_IN_CURRENT_MODE);
    } else if (json_object_get(root, "kind")) {
        handle_event(sv, line, len);
    } else {
        reply_error(sv, "neither an event nor an op", MC_ERR_PROTOCOL);
    }
    pthread_mutex_unlock(&sv->mu);
    json_decref(root);
}

/* Flag values, preset to their defaults by parse_flags. */
typedef struct flags {
    const char *input, *master, *policy, *fetch, *log_level;
    int64_t poll_wait_ms, first_seq, max_blocks, max_line_bytes, seed;
    double ttft_slo_s, queue_budget_s, net_gib_s, local_gib_s, ssd_gib_s, params_b, gpu_tflops,
        mfu;
    int64_t layers, kv_heads, q_heads, head_dim, block_tokens;
    bool allow_degrade;
} flags_t;

/* Parses the command line (and --config_path) into f: -1 to go on, else main's exit status. */
static int parse_flags(flags_t *f, int argc, char **argv)
{
    *f = (flags_t){.input = "-", .master = "", .policy = "cache_aware_slo", .fetch = "cost",
                   .log_level = "warn", .poll_wait_ms = 500, .first_seq = 1,
                   .max_blocks = 64 << 20, .max_line_bytes = 1 << 20, .seed = 1,
                   .ttft_slo_s = 10, .queue_budget_s = 5, .net_gib_s = 20, .local_gib_s = 25,
                   .ssd_gib_s = 3, .params_b = 8.03, .gpu_tflops = 312, .mfu = 0.5,
                   .layers = 32, .kv_heads = 8, .q_heads = 32, .head_dim = 128,
                   .block_tokens = 512, .allow_degrade = false};
    mc_option_t opt[] = {
        {"input", MC_OPT_STRING, &f->input, NULL, "JSON-lines input file, '-' = stdin", 0, 0},
        {"master", MC_OPT_STRING, &f->master, NULL,
         "live mode: host:port of mooncake_master; follow its object events (PollEvents, resync "
         "with ListObjects on a gap) instead of reading events from the input", 0, 0},
        {"poll_wait_ms", MC_OPT_INT, &f->poll_wait_ms, NULL, "live mode: long-poll wait", 1, 1000},
        {"first_seq", MC_OPT_INT, &f->first_seq, NULL, "first event sequence number expected", 0, 9e18},
        {"max_blocks", MC_OPT_INT, &f->max_blocks, NULL, "cap on indexed blocks", 1, 4e9},
        {"max_line_bytes", MC_OPT_INT, &f->max_line_bytes, NULL, "longest accepted input line", 64, 1 << 26},
        {"policy", MC_OPT_STRING, &f->policy, NULL, "random|least_loaded|cache_aware|cache_aware_slo", 0, 0},
        {"fetch", MC_OPT_STRING, &f->fetch, NULL, "cost|always|never", 0, 0},
        {"ttft_slo_s", MC_OPT_DOUBLE, &f->ttft_slo_s, NULL, "TTFT SLO", 1e-6, 1e6},
        {"queue_budget_s", MC_OPT_DOUBLE, &f->queue_budget_s, NULL, "wait tolerated beyond the SLO", 0, 1e6},
        {"allow_degrade", MC_OPT_BOOL, &f->allow_degrade, NULL, "degrade instead of queueing when decode is saturated", 0, 0},
        {"net_gib_s", MC_OPT_DOUBLE, &f->net_gib_s, NULL, "remote DRAM fetch GiB/s", 1e-6, 1e6},
        {"local_gib_s", MC_OPT_DOUBLE, &f->local_gib_s, NULL, "own-host DRAM fetch GiB/s", 1e-6, 1e6},
        {"ssd_gib_s", MC_OPT_DOUBLE, &f->ssd_gib_s, NULL, "SSD tier GiB/s", 1e-6, 1e6},
        {"layers", MC_OPT_INT, &f->layers, NULL, "model layers", 1, 100000},
        {"kv_heads", MC_OPT_INT, &f->kv_heads, NULL, "KV heads", 1, 100000},
        {"q_heads", MC_OPT_INT, &f->q_heads, NULL, "query heads", 1, 100000},
        {"head_dim", MC_OPT_INT, &f->head_dim, NULL, "head dim", 1, 100000},
        {"block_tokens", MC_OPT_INT, &f->block_tokens, NULL, "tokens per block", 1, 1e6},
        {"params_b", MC_OPT_DOUBLE, &f->params_b, NULL, "parameters, billions", 1e-6, 1e6},
        {"gpu_tflops", MC_OPT_DOUBLE, &f->gpu_tflops, NULL, "GPU peak TFLOP/s", 1e-6, 1e9},
        {"mfu", MC_OPT_DOUBLE, &f->mfu, NULL, "prefill MFU", 1e-6, 1},
        {"seed", MC_OPT_INT, &f->seed, NULL, "RNG seed (random policy)", 0, 9e18},
        {"log_level", MC_OPT_STRING, &f->log_level, "MC_LOG_LEVEL", "debug|info|warn|error|off", 0, 0},
    };
    mc_config_spec_t spec = {
        "mooncake_conductor",
        "Conductor service: keeps the global prefix index (block hash -> segments/hosts) and\n"
        "answers query/route/stats JSON lines on the input. Offline mode: object events arrive\n"
        "as JSON lines on the same input; a gap in event sequence numbers marks the index stale\n"
        "(reported, queries refused or flagged) until resync_begin/snapshot/resync_end.\n"
        "Live mode (--master=host:port): a thread follows the master's event stream; on a gap\n"
        "(events no longer held, master restart) it resyncs from the master's object listing;\n"
        "store keys map to block hashes (text after the last '/' as hex), host = the segment's\n"
        "host label, tier pool. Against a master with --auth_token_file, live mode proves the\n"
        "cluster token of the file named by MC_AUTH_TOKEN_FILE. Format:\n"
        "docs/internals/conductor.md.",
        opt, sizeof(opt) / sizeof(opt[0])};
    return mc_config_main(&spec, argc, argv);
}

/* The router, model and bandwidths from the flags; 0, or 2 after a message. */
static int svc_configure(svc_t *sv, const flags_t *f)
{
    sv->rng = (uint64_t)f->seed;
    mc_conductor_router_config_default(&sv->router);
    if (mc_conductor_policy_parse(f->policy, &sv->router.policy) != MC_OK ||
        mc_conductor_fetch_parse(f->fetch, &sv->router.fetch) != MC_OK) {
        fprintf(stderr, "mooncake_conductor: bad --policy or --fetch\n");
        return 2;
    }
    sv->router.ttft_slo_s = f->ttft_slo_s;
    sv->router.queue_budget_s = f->queue_budget_s;
    sv->router.allow_degrade = f->allow_degrade;
    mc_conductor_model_default(&sv->model);
    sv->model.layers = f->layers;
    sv->model.kv_heads = f->kv_heads;
    sv->model.q_heads = f->q_heads;
    sv->model.head_dim = f->head_dim;
    sv->model.block_tokens = f->block_tokens;
    sv->model.params = f->params_b * 1e9;
    sv->model.gpu_tflops = f->gpu_tflops;
    sv->model.mfu = f->mfu;
    sv->bw = (mc_conductor_bandwidth_t){f->local_gib_s * GIB, f->net_gib_s * GIB,
                                        f->ssd_gib_s * GIB, 2e-4, 0};
    return 0;
}

/* The index, and in live mode the subscriber thread; 0, or main's exit status. */
static int svc_start(svc_t *sv, const flags_t *f)
{
    mc_conductor_index_config_t icfg;
    mc_conductor_index_config_default(&icfg);
    icfg.first_seq = (uint64_t)f->first_seq;
    icfg.max_blocks = (size_t)f->max_blocks;
    if (mc_conductor_index_create(&icfg, &sv->idx) != MC_OK)
        return 1;
    pthread_mutex_init(&sv->mu, NULL);
    if (f->master[0]) {
        mc_conductor_sub_config_t scfg;
        mc_conductor_sub_config_default(&scfg);
        scfg.master_addr = f->master;
        scfg.wait_ms = (uint32_t)f->poll_wait_ms;
        /* the master's token file: MC_AUTH_TOKEN_FILE (tools/common/te_env) */
        mc_te_config_t env = {0};
        char err[256];
        mc_status_t st = mc_tool_te_config_from_env(&env, err, sizeof(err));
        if (st != MC_OK) {
            fprintf(stderr, "mooncake_conductor: %s\n", err);
            return 2;
        }
        if ((st = mc_auth_load(env.auth_token_file, &sv->auth)) != MC_OK) {
            fprintf(stderr, "mooncake_conductor: cannot load MC_AUTH_TOKEN_FILE: %s\n",
                    mc_status_str(st));
            return 2;
        }
        scfg.auth = sv->auth;
        st = mc_conductor_sub_create(&scfg, sv->idx, &sv->mu, &sv->sub);
        if (st == MC_OK)
            st = mc_conductor_sub_start(sv->sub);
        if (st != MC_OK) {
            fprintf(stderr, "mooncake_conductor: --master=%s: %s\n", f->master,
                    mc_status_str(st));
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    flags_t f;
    int rc = parse_flags(&f, argc, argv);
    if (rc >= 0)
        return rc;
    svc_t sv;
    memset(&sv, 0, sizeof(sv));
    rc = svc_configure(&sv, &f);
    if (rc == 0)
        rc = svc_start(&sv, &f);
    if (rc)
        return rc;
    FILE *in = strcmp(f.input, "-") == 0 ? stdin : fopen(f.input, "r");
    if (!in) {
        perror(f.input);
        return 1;
    }
    sv.hashes = calloc(MAX_HASHES, sizeof(uint64_t));
    sv.hosts = calloc(MAX_HOSTS, sizeof(uint32_t));
    sv.px = calloc(MAX_HOSTS, sizeof(*sv.px));
    sv.cands = calloc(MAX_HOSTS, sizeof(*sv.cands));
    size_t max_line = (size_t)f.max_line_bytes;
    char *line = malloc(max_line + 2);
    if (!sv.hashes || !sv.hosts || !sv.px || !sv.cands || !line)
        return 1;
    while (fgets(line, (int)max_line + 2, in)) {
        sv.lines++;
        size_t len = strlen(line);
        if (len > max_line && line[len - 1] != '\n') {
            int ch; /* over-long: discard the rest of the line */
            while ((ch = fgetc(in)) != EOF && ch != '\n')
                ;
            reply_error(&sv, "line too long", MC_ERR_TOO_LARGE);
            continue;
        }
        while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len)
            handle_line(&sv, line, len);
    }
    if (in != stdin)
        fclose(in);
    mc_conductor_sub_destroy(sv.sub); /* stops the thread first */
    mc_auth_free(sv.auth);
    mc_conductor_index_destroy(sv.idx);
    pthread_mutex_destroy(&sv.mu);
    free(sv.hashes);
    free(sv.hosts);
    free(sv.px);
    free(sv.cands);
    free(line);
    return 0;
}
