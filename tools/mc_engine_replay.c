/* mc_engine_replay: run the first N requests of a FAST'25 trace through the engine with prefix
 * reuse through a store, one JSON line per request and a summary line.
 *
 *   mc_engine_replay [--trace FILE] [--requests N] [--max_prompt T] [--decode N]
 *                    [--threads N] [--block B] [--tiny] [--seed S] [--checkpoint FILE]
 *                    [--master HOST:PORT] [--segment_size MB] [--local_hostname H]
 *                    [--metadata URI] [--kernels avx2-fma|portable] [--cost] [--deadline_ms MS]
 *                    [--pause_after N] [--repeat N] [--serve] [--scope NAME] [--host_label L]
 *
 * Prompt tokens: trace block j (hash_id h) holds 512 tokens from splitmix64 seeded with h, so
 * requests sharing hash ids share tokens; a prompt is its blocks' tokens cut to input_length
 * and to --max_prompt. Without --master nothing is reused (the no-cache baseline). The process
 * contributes --segment_size MB to the pool (default 256; 0 = none, then a storage server must
 * provide the memory). The transfer engine reads its tuning from the environment
 * (tools/common/te_env.h). --cost measures the store's bandwidth and per-object latency and the
 * prefill throughput at startup (mc_engine_cost_calibrate; printed as a "calibration" line) and
 * fetches a found prefix only where that beats recomputing it; --deadline_ms MS (> 0 implies
 * --cost) also caps each request's predicted fetch time. --pause_after N: after N requests,
 * print {"paused":N} and wait for a line on stdin (a script's hook to fail a server at a known
 * point of the run; EOF also continues). --repeat N runs the requests N times in this process
 * (rounds 0..N-1; a store with only this process's memory stays filled between rounds); every
 * line carries its "round" and each round ends with its summary line.
 * --scope NAME: this process is one engine instance with a private cache: its blocks are
 * stored under "mc_engine/<compat>/NAME/<chain>" and placed on its own segment first (with
 * --segment_size > 0). --host_label L labels its segment's host (the conductor's host name).
 * --serve: no replay; answers "hashes R" / "run R" lines on stdin (serve_loop below), the
 * engine instance behind scripts/engine_route.py.
 *
 * Per request: prompt_tokens, tokens_reused, tokens_prefilled, blocks_found, blocks_rejected,
 * blocks_skipped (found, not fetched: the cost model chose recompute), blocks_put,
 * lookup/fetch/prefill/put ms, ttft_ms (lookup + fetch + prefill + the first
 * token; the puts come after), ideal_reused (tokens of leading trace blocks an unbounded cache
 * filled by this replay alone would hold, within what the engine may reuse), first_token,
 * last_token (the last decoded), logits_hash (XXH3-64 of the logits last_token came from: equal
 * hashes across runs mean bit-identical logits).
 *
 * Options are parsed by common/config.h (--flag value or --flag=value; --help lists them with
 * their defaults; a bad one exits 2).
 */
#include "common/alloc.h"
#include "common/config.h"
#include "common/hash.h"
#include "common/time.h"
#include "conductor/trace.h"
#include "engine/reuse.h"
#include "mooncake/store.h"
#include "cli.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_BLOCK 512 /* tokens per trace block (FAST'25 traces) */

/* Tokens of one trace block, from its hash id. */
static void block_tokens(uint64_t hash_id, int32_t vocab, int32_t *out, uint32_t n)
{
    uint64_t s = hash_id ^ 0x6D635F656E67696Eull; /* "mc_engin" */
    for (uint32_t i = 0; i < n; i++)
        out[i] = (int32_t)(mc_engine_splitmix64(&s) % (uint64_t)vocab);
}

/* A set of seen hash ids (open addressing; the ideal-reuse count). */
typedef struct idset {
    uint64_t *slots; /* id + 1, 0 = empty */
    size_t cap, n;
} idset_t;

static int idset_add(idset_t *s, uint64_t id) /* 1 if it was there */
{
    if ((s->n + 1) * 2 > s->cap) {
        idset_t g = {calloc(s->cap ? s->cap * 2 : 1024, sizeof(uint64_t)),
                     s->cap ? s->cap * 2 : 1024, 0};
        if (!g.slots)
            return 0;
        for (size_t i = 0; i < s->cap; i++)
            if (s->slots[i])
                idset_add(&g, s->slots[i] - 1);
        free(s->slots);
        *s = g;
    }
    size_t i = (id * 0x9E3779B97F4A7C15ull) & (s->cap - 1);
    for (; s->slots[i]; i = (i + 1) & (s->cap - 1))
        if (s->slots[i] == id + 1)
            return 1;
    s->slots[i] = id + 1;
    s->n++;
    return 0;
}

/* What one request needs and what every request adds to. */
typedef struct replay {
    const mc_engine_model_t *m;
    mc_engine_t *e;
    mc_store_t *store;
    const mc_conductor_trace_t *trace;
    uint64_t compat;
    const mc_engine_reuse_opts_t *opts;
    long block, max_prompt, decode;
    int32_t *tokens, *out;
    float *logits;
    idset_t seen;
} replay_t;

typedef struct req_result {
    uint32_t n, reused, prefilled;
    uint64_t ideal;
    double ttft, prefill_ms;
} req_result_t;

/* The prompt of request r (tokens into rp->tokens); 0 = empty. */
static uint32_t build_prompt(replay_t *rp, size_t r)
{
    const mc_conductor_request_t *req = &rp->trace->reqs[r];
    const uint64_t *ids = mc_conductor_trace_req_blocks(rp->trace, req);
    uint64_t len = req->input_tokens;
    if (len > (uint64_t)req->n_blocks * TRACE_BLOCK)
        len = (uint64_t)req->n_blocks * TRACE_BLOCK;
    if (len > (uint64_t)rp->max_prompt)
        len = (uint64_t)rp->max_prompt;
    uint32_t n = (uint32_t)len, nb = (n + TRACE_BLOCK - 1) / TRACE_BLOCK;
    for (uint32_t j = 0; j < nb; j++)
        block_tokens(ids[j], rp->m->cfg.vocab_size, rp->tokens + (size_t)j * TRACE_BLOCK,
                     TRACE_BLOCK);
    return n;
}

/* Serve mode: the chain hashes of request r's reusable blocks, as the conductor's route op
 * takes them ("0x..." strings). */
static void print_hashes(replay_t *rp, size_t r)
{
    uint32_t n = build_prompt(rp, r), nb = n ? (n - 1) / (uint32_t)rp->block : 0;
    uint64_t *chain = calloc(nb ? nb : 1, sizeof(uint64_t));
    printf("{\"req\":%zu,\"input_tokens\":%u,\"hashes\":[", r, n);
    if (chain) {
        mc_engine_chain_hashes(rp->compat, rp->tokens, (uint32_t)rp->block, nb, chain);
        for (uint32_t i = 0; i < nb; i++)
            printf("%s\"0x%016llx\"", i ? "," : "", (unsigned long long)chain[i]);
    }
    printf("]}\n");
    fflush(stdout);
    free(chain);
}

/* Runs request r, prints its line; 1 = done, 0 = empty prompt, -1 = error. */
static int run_request(replay_t *rp, size_t r, long round, req_result_t *res)
{
    const mc_engine_model_t *m = rp->m;
    const mc_conductor_request_t *req = &rp->trace->reqs[r];
    const uint64_t *ids = mc_conductor_trace_req_blocks(rp->trace, req);
    long block = rp->block, decode = rp->decode;
    int32_t *out = rp->out;
    float *logits = rp->logits;
    mc_status_t st;
    uint32_t n = build_prompt(rp, r), nb = (n + TRACE_BLOCK - 1) / TRACE_BLOCK;
    if (n == 0)
        return 0;
    /* ideal: leading trace blocks seen before, in whole engine blocks, leaving one token */
    uint64_t ideal = 0;
    int leading = 1;
    for (uint32_t j = 0; j < nb; j++) {
        int was = idset_add(&rp->seen, ids[j]);
        if (leading && was)
            ideal += TRACE_BLOCK;
        else
            leading = 0;
    }
    uint64_t cap = (uint64_t)(n - 1) / (uint64_t)block * (uint64_t)block;
    ideal = (ideal / (uint64_t)block) * (uint64_t)block;
    if (ideal > cap)
        ideal = cap;

    mc_engine_kv_t *kv;
    if ((st = mc_engine_kv_create(m, (uint32_t)block, &kv)) != MC_OK) {
        fprintf(stderr, "mc_engine_replay: kv cache: %s\n", mc_status_str(st));
        return -1;
    }
    mc_engine_reuse_stats_t rs;
    uint64_t t0 = mc_now_ns();
    st = mc_engine_prefill_reuse_opts(rp->e, kv, rp->store, rp->compat, rp->opts,
                                      rp->tokens, n, logits, &rs);
    int32_t first = mc_engine_argmax(logits, m->cfg.vocab_size);
    double ttft = rs.lookup_ms + rs.fetch_ms + rs.prefill_ms;
    if (st == MC_OK && decode > 0)
        st = mc_engine_decode(rp->e, kv, logits, out, (uint32_t)decode);
    double total = (double)(mc_now_ns() - t0) / 1e6;
    mc_engine_kv_free(kv);
    if (st != MC_OK) {
        fprintf(stderr, "mc_engine_replay: request %zu: %s\n", r, mc_status_str(st));
        return -1;
    }
    printf("{\"round\":%ld,\"req\":%zu,\"line\":%u,\"prompt_tokens\":%u,"
           "\"tokens_reused\":%u,\"tokens_prefilled\":%u,\"ideal_reused\":%" PRIu64
           ",\"blocks_found\":%u,"
           "\"blocks_rejected\":%u,\"blocks_skipped\":%u,\"blocks_put\":%u,"
           "\"lookup_ms\":%.2f,\"fetch_ms\":%.2f,"
           "\"prefill_ms\":%.1f,\"put_ms\":%.2f,\"ttft_ms\":%.1f,\"total_ms\":%.1f,"
           "\"first_token\":%d,\"last_token\":%d,\"logits_hash\":\"%016llx\"}\n",
           round, r, req->line, n, rs.tokens_reused, rs.tokens_prefilled, ideal,
           rs.blocks_found, rs.blocks_rejected, rs.blocks_skipped, rs.blocks_put,
           rs.lookup_ms, rs.fetch_ms, rs.prefill_ms, rs.put_ms, ttft, total, first,
           decode > 0 ? out[decode - 1] : first,
           (unsigned long long)mc_hash64(logits,
                                         (size_t)m->cfg.vocab_size * sizeof(float)));
    fflush(stdout);
    *res = (req_result_t){n, rs.tokens_reused, rs.tokens_prefilled, ideal, ttft, rs.prefill_ms};
    return 1;
}

/* Serve mode: one command per stdin line, one JSON line per answer, until EOF:
 *   "hashes R" -> {"req":R,"input_tokens":N,"hashes":["0x...",...]}  (reusable blocks)
 *   "run R"    -> the request's line, as in a replay (round 0)
 * R indexes the loaded trace; anything else gets {"error":...} and the loop goes on. */
static int serve_loop(replay_t *rp, const char *segment, const char *label)
{
    printf("{\"ready\":true,\"segment\":\"%s\",\"host\":\"%s\",\"requests\":%zu}\n",
           segment ? segment : "", label ? label : "", rp->trace->n_reqs);
    fflush(stdout);
    char line[128];
    while (fgets(line, sizeof(line), stdin)) {
        char cmd[16];
        unsigned long r;
        char extra;
        if (!strchr(line, '\n') && !feof(stdin)) { /* over-long: drop to the newline */
            int c;
            while ((c = getchar()) != EOF && c != '\n')
                ;
            printf("{\"error\":\"line too long\"}\n");
        } else if (sscanf(line, "%15s %lu %c", cmd, &r, &extra) != 2 ||
                   r >= rp->trace->n_reqs) {
            printf("{\"error\":\"want 'hashes R' or 'run R', R < %zu\"}\n", rp->trace->n_reqs);
        } else if (!strcmp(cmd, "hashes")) {
            print_hashes(rp, r);
            continue;
        } else if (!strcmp(cmd, "run")) {
            req_result_t res;
            int k = run_request(rp, r, 0, &res);
            if (k < 0)
                return 1;
            if (k == 0)
                printf("{\"req\":%lu,\"error\":\"empty prompt\"}\n", r);
        } else {
            printf("{\"error\":\"unknown command\"}\n");
        }
        fflush(stdout);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int64_t n_req = 10, max_prompt = 8192, decode = 1, threads = 2, block = TRACE_BLOCK,
            seed = 1, segment_mb = 256, deadline_ms = 0, pause_after = 0, repeat = 1;
    bool tiny = false, use_cost = false, serve = false;
    const char *scope = NULL, *host_label = NULL;
    const char *trace_path = "data/traces/conversation_trace.jsonl", *ckpt = NULL,
               *master = NULL, *host = "127.0.0.1", *metadata = "P2PHANDSHAKE", *kernels = NULL;
    mc_option_t options[] = {
        {"trace", MC_OPT_STRING, &trace_path, NULL, "request trace (JSON lines)", 0, 0},
        {"requests", MC_OPT_INT, &n_req, NULL, "requests to replay", 1, 10000000},
        {"max_prompt", MC_OPT_INT, &max_prompt, NULL, "prompt tokens at most", 1, 1 << 20},
        {"decode", MC_OPT_INT, &decode, NULL, "tokens to decode per request", 1, 4096},
        {"threads", MC_OPT_INT, &threads, NULL, "compute threads", 1, MC_ENGINE_THREADS_MAX},
        {"block", MC_OPT_INT, &block, NULL, "tokens per KV block", 1, 1 << 20},
        {"tiny", MC_OPT_BOOL, &tiny, NULL, "the tiny model (tests) instead of the default", 0, 0},
        {"seed", MC_OPT_INT, &seed, NULL, "model weights seed", 0, INT32_MAX},
        {"checkpoint", MC_OPT_STRING, &ckpt, NULL, "load the model from this checkpoint", 0, 0},
        {"master", MC_OPT_STRING, &master, NULL,
         "mooncake_master host:port (unset: no reuse, the no-cache baseline)", 0, 0},
        {"segment_size", MC_OPT_INT, &segment_mb, NULL,
         "MB contributed to the pool (0: a storage server provides the memory)", 0, 1 << 20},
        {"local_hostname", MC_OPT_STRING, &host, NULL, "this store client's host", 0, 0},
        {"metadata", MC_OPT_STRING, &metadata, NULL, "TE metadata URI", 0, 0},
        {"kernels", MC_OPT_STRING, &kernels, NULL, "avx2-fma|portable (default: the best)", 0, 0},
        {"cost", MC_OPT_BOOL, &use_cost, NULL,
         "fetch a found prefix only where that beats recomputing it", 0, 0},
        {"deadline_ms", MC_OPT_INT, &deadline_ms, NULL,
         "cap on each request's predicted fetch time (> 0 implies --cost; 0: none)", 0,
         3600000},
        {"pause_after", MC_OPT_INT, &pause_after, NULL,
         "after this many requests, wait for a line on stdin (0: never)", 0, 10000000},
        {"repeat", MC_OPT_INT, &repeat, NULL, "run the requests this many times", 1, 1000},
        {"serve", MC_OPT_BOOL, &serve, NULL, "answer requests on stdin instead of replaying", 0,
         0},
        {"scope", MC_OPT_STRING, &scope, NULL,
         "this engine instance's private cache name (unset: the shared cache)", 0, 0},
        {"host_label", MC_OPT_STRING, &host_label, NULL, "label of this process's segment host",
         0, 0},
    };
    mc_config_spec_t spec = {"mc_engine_replay",
                             "Replays a request trace through the engine, reusing KV blocks "
                             "through the store; prints JSON lines.",
                             options, MC_ARRAY_LEN(options)};
    int parsed = mc_config_main(&spec, argc, argv);
    if (parsed >= 0)
        return parsed;
    if (deadline_ms > 0)
        use_cost = true;

    if (!mc_engine_scope_valid(scope)) {
        fprintf(stderr, "mc_engine_replay: --scope: 1..%d characters of [A-Za-z0-9_-]\n",
                MC_ENGINE_SCOPE_MAX);
        return 2;
    }
    mc_engine_model_t *m;
    mc_status_t st;
    st = mc_engine_model_open(ckpt, tiny, (uint64_t)seed, &m);
    if (st != MC_OK) {
        fprintf(stderr, "mc_engine_replay: model: %s\n", mc_status_str(st));
        return 1;
    }
    if (max_prompt + decode > m->cfg.seq_len) {
        max_prompt = m->cfg.seq_len - decode;
        if (max_prompt < 1) {
            fprintf(stderr, "mc_engine_replay: --decode %ld leaves no room in seq_len %d\n",
                    decode, m->cfg.seq_len);
            return 2;
        }
    }
    mc_conductor_trace_limits_t lim;
    mc_conductor_trace_limits_default(&lim);
    lim.max_requests = (size_t)n_req;
    mc_conductor_trace_t *trace;
    if ((st = mc_conductor_trace_load(trace_path, &lim, &trace)) != MC_OK) {
        fprintf(stderr, "mc_engine_replay: trace %s: %s\n", trace_path, mc_status_str(st));
        return 1;
    }

    mc_store_t *store = NULL;
    if (master) {
        int rc = mc_tool_store_open("mc_engine_replay", host, metadata, master, host_label,
                                    (uint64_t)segment_mb << 20, &store);
        if (rc != 0)
            return rc;
    }

    mc_engine_t *e;
    if ((st = mc_engine_create(m, (int)threads, &e)) != MC_OK) {
        fprintf(stderr, "mc_engine_replay: engine: %s\n", mc_status_str(st));
        return 1;
    }
    if (kernels && (st = mc_engine_set_kernels(e, kernels)) != MC_OK) {
        fprintf(stderr, "mc_engine_replay: --kernels %s: %s\n", kernels, mc_status_str(st));
        return 2;
    }
    uint64_t compat = mc_engine_compat_id(m, mc_engine_kernels_name(e), (uint32_t)block, 0, 1);
    mc_engine_cost_t cost = {.deadline_ms = (double)deadline_ms};
    if (use_cost && store) {
        if ((st = mc_engine_cost_calibrate(e, store, (uint32_t)block, 8, &cost)) != MC_OK) {
            fprintf(stderr, "mc_engine_replay: calibration: %s\n", mc_status_str(st));
            return 1;
        }
        printf("{\"calibration\":true,\"store_mb_per_s\":%.1f,\"obj_latency_ms\":%.3f,"
               "\"prefill_tokens_per_s\":%.0f,\"deadline_ms\":%ld}\n",
               cost.store_bytes_per_ms * 1000 / 1e6, cost.obj_latency_ms,
               cost.prefill_tokens_per_ms * 1000, deadline_ms);
    }
    int32_t *tokens = malloc(((size_t)max_prompt + TRACE_BLOCK) * sizeof(int32_t));
    int32_t *out = malloc((size_t)decode * sizeof(int32_t));
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    /* --scope: this instance's private cache: its own keys, placed on its own segment */
    const char *own_segment = store && scope && segment_mb > 0 ? mc_store_hostname(store) : NULL;
    mc_engine_reuse_opts_t opts = {.cost = use_cost ? &cost : NULL, .scope = scope,
                                   .preferred_segment = own_segment};
    replay_t rp = {.m = m, .e = e, .store = store, .trace = trace, .compat = compat,
                   .opts = &opts, .block = block, .max_prompt = max_prompt, .decode = decode,
                   .tokens = tokens, .out = out, .logits = logits};
    int rc = 0;
    if (!tokens || !out || !logits) {
        fprintf(stderr, "mc_engine_replay: out of memory\n");
        rc = 1;
    } else if (serve) {
        rc = serve_loop(&rp, own_segment, host_label);
        repeat = 0;
    }
    for (long round = 0; round < repeat && rc == 0; round++) {
        uint64_t sum_prompt = 0, sum_reused = 0, sum_prefilled = 0, sum_ideal = 0;
        double sum_ttft = 0, sum_prefill = 0;
        size_t done = 0;
        for (size_t r = 0; r < trace->n_reqs; r++) {
            req_result_t res;
            int k = run_request(&rp, r, round, &res);
            if (k < 0) {
                rc = 1;
                break;
            }
            if (k == 0)
                continue;
            sum_prompt += res.n;
            sum_reused += res.reused;
            sum_prefilled += res.prefilled;
            sum_ideal += res.ideal;
            sum_ttft += res.ttft;
            sum_prefill += res.prefill_ms;
            done++;
            if (round == 0 && pause_after > 0 && done == (size_t)pause_after) {
                printf("{\"paused\":%zu}\n", done);
                fflush(stdout);
                char line[16];
                (void)!fgets(line, sizeof(line), stdin);
            }
        }
        printf("{\"summary\":true,\"round\":%ld,\"requests\":%zu,\"store\":%s,\"block_tokens\":%ld,"
               "\"block_bytes\":%zu,\"kernels\":\"%s\",\"prompt_tokens\":%" PRIu64
               ",\"tokens_reused\":%" PRIu64 ",\"tokens_prefilled\":%" PRIu64
               ",\"compute_skipped\":%.4f,\"ideal_hit_ratio\":%.4f,\"mean_ttft_ms\":%.1f,"
               "\"mean_prefill_ms\":%.1f}\n",
               round, done, store ? "true" : "false", block,
               (size_t)m->cfg.n_layers * 2 * (size_t)block * (size_t)m->kv_dim * sizeof(float) +
                   sizeof(mc_engine_kv_hdr_t),
               mc_engine_kernels_name(e), sum_prompt, sum_reused, sum_prefilled,
               sum_prompt ? (double)sum_reused / (double)sum_prompt : 0.0,
               sum_prompt ? (double)sum_ideal / (double)sum_prompt : 0.0,
               done ? sum_ttft / (double)done : 0.0, done ? sum_prefill / (double)done : 0.0);
    }
    free(rp.seen.slots);
    free(tokens);
    free(out);
    free(logits);
    mc_engine_destroy(e);
    mc_store_destroy(store);
    mc_conductor_trace_free(trace);
    mc_engine_model_free(m);
    return rc;
}
