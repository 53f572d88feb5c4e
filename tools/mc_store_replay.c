/* mc_store_replay: replays a FAST'25 trace against a running store as put/get of KV blocks.
 *
 * Each request's hash_ids are chained 512-token block hashes; block i of a request is stored
 * as key "<namespace>@<hash_id>" with --block_bytes of deterministic content derived from the
 * hash (a scaled-down KV block). Per request, like an inference engine with a prefix cache:
 * BatchExist on all blocks, fetch the longest present prefix (batch get, every byte checked
 * against the expected content), then put the remaining blocks (create-once).
 * Prints hit rate, throughput and latency percentiles; --json adds a JSON line;
 * --profile_out=FILE writes the measured-store profile that `mc_sim --measured_store=FILE` uses
 * (per batch call: latency percentiles and mean, per block, and a least-squares fit
 * latency = fixed + blocks * per_block; see docs/internals/simulator.md §7).
 * Exit status 1 if any byte read differs from what was written (must never happen).
 * It replays against a running master: scripts/store_replay_policies.sh starts one per
 * --eviction_policy (and scripts/live_replay.sh passes MASTER_FLAGS to its master). */
#include "common/alloc.h"
#include "common/buf.h"
#include "common/config.h"
#include "common/log.h"
#include "common/time.h"
#include "conductor/trace.h"
#include "mooncake/store.h"
#include "store_knobs.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define REPLAY_MAX_BLOCKS 512 /* blocks per request taken from the trace (longer: truncated) */

typedef struct lat_log {
    uint64_t *us;      /* per call, microseconds */
    uint32_t *blocks;  /* blocks moved or asked by that call */
    size_t n;
    size_t cap_us, cap_blocks; /* mc_array_reserve */
} lat_log_t;

typedef struct replay {
    mc_store_t *store;
    const mc_conductor_trace_t *trace;
    const char *ns;
    uint64_t block_bytes;
    size_t n_reqs;
    uint32_t threads;
    double time_scale;       /* 0 = as fast as possible */
    uint64_t put_retry_ms;   /* retry puts refused with NO_AVAILABLE_HANDLE this long (0: no) */
    uint32_t replicas;
    const char *transport;   /* "tcp" when tcp is forced to every peer, else "auto" */
    uint64_t t0_ms;
    atomic_size_t next_req;
    /* results, merged under lock */
    pthread_mutex_t lock;
    uint64_t blocks, prefix_hits, exists_hits, get_fail, put_fail, bytes_read, bytes_written;
    uint64_t wrong_blocks, concurrent_puts;
    lat_log_t get_lat, put_lat, exist_lat;
} replay_t;

static void lat_push(lat_log_t *l, uint64_t us, uint32_t blocks)
{
    if (mc_array_reserve(&l->us, &l->cap_us, l->n + 1, 1024) != MC_OK ||
        mc_array_reserve(&l->blocks, &l->cap_blocks, l->n + 1, 1024) != MC_OK)
        return;
    l->blocks[l->n] = blocks;
    l->us[l->n++] = us;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct(lat_log_t *l, double p)
{
    if (!l->n)
        return 0;
    size_t i = (size_t)(p * (double)(l->n - 1) + 0.5);
    return (double)l->us[i];
}

/* Deterministic content of a block: 64-bit words from a SplitMix64 sequence seeded by hash. */
static void block_fill(uint64_t *w, size_t bytes, uint64_t hash)
{
    uint64_t x = hash * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < bytes / 8; i++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        w[i] = z ^ (z >> 27);
    }
}

static int block_check(const uint64_t *w, size_t bytes, uint64_t hash)
{
    uint64_t x = hash * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull;
    for (size_t i = 0; i < bytes / 8; i++) {
        x += 0x9E3779B97F4A7C15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        if (w[i] != (z ^ (z >> 27)))
            return 0;
    }
    return 1;
}

static void *replay_worker(void *arg)
{
    replay_t *rp = arg;
    size_t bb = rp->block_bytes;
    char *buf = mc_pages_alloc(REPLAY_MAX_BLOCKS * bb, 1);
    char (*names)[96] = mc_calloc(REPLAY_MAX_BLOCKS, sizeof(*names));
    const char **keys = mc_calloc(REPLAY_MAX_BLOCKS, sizeof(*keys));
    struct iovec *iov = mc_calloc(REPLAY_MAX_BLOCKS, sizeof(*iov));
    const struct iovec **piov = mc_calloc(REPLAY_MAX_BLOCKS, sizeof(*piov));
    size_t *nparts = mc_calloc(REPLAY_MAX_BLOCKS, sizeof(*nparts));
    int32_t *res = mc_calloc(REPLAY_MAX_BLOCKS, sizeof(*res));
    int64_t *got = mc_calloc(REPLAY_MAX_BLOCKS, sizeof(*got));
    if (!buf || !names || !keys || !iov || !piov || !nparts || !res || !got) {
        MC_LOG_ERROR("replay: out of memory");
        return NULL;
    }
    lat_log_t gl = {0}, pl = {0}, el = {0};
    uint64_t blocks = 0, hits = 0, ehits = 0, gfail = 0, pfail = 0, rd = 0, wr = 0, wrong = 0, busy = 0;
    mc_replicate_config_t cfg = {.replica_num = rp->replicas};

    for (;;) {
        size_t r = atomic_fetch_add(&rp->next_req, 1);
        if (r >= rp->n_reqs)
            break;
        const mc_conductor_request_t *req = &rp->trace->reqs[r];
        if (rp->time_scale > 0) { /* open-loop replay by timestamp */
            uint64_t due = rp->t0_ms + (uint64_t)((double)req->timestamp_ms / rp->time_scale);
            uint64_t now = mc_now_ms();
            if (due > now)
                mc_sleep_ms((uint32_t)(due - now));
        }
        const uint64_t *hs = mc_conductor_trace_req_blocks(rp->trace, req);
        size_t n = req->n_blocks < REPLAY_MAX_BLOCKS ? req->n_blocks : REPLAY_MAX_BLOCKS;
        for (size_t i = 0; i < n; i++) {
            snprintf(names[i], sizeof(names[i]), "%s@%016llx", rp->ns, (unsigned long long)hs[i]);
            keys[i] = names[i];
            iov[i] = (struct iovec){buf + i * bb, bb};
            piov[i] = &iov[i];
            nparts[i] = 1;
        }
        blocks += n;
        uint64_t t = mc_now_ns();
        mc_store_batch_exists(rp->store, n, keys, res);
        lat_push(&el, (mc_now_ns() - t) / 1000, (uint32_t)n);
        size_t prefix = 0;
        while (prefix < n && res[prefix] == 1)
            prefix++;
        ehits += prefix;
        size_t fetched = 0;
        if (prefix) {
            t = mc_now_ns();
            mc_store_batch_get_into(rp->store, prefix, keys, piov, nparts, got);
            lat_push(&gl, (mc_now_ns() - t) / 1000, (uint32_t)prefix);
            /* Only a contiguous run of good blocks is a usable prefix. */
            while (fetched < prefix && got[fetched] == (int64_t)bb) {
                if (!block_check((const uint64_t *)(buf + fetched * bb), bb, hs[fetched])) {
                    wrong++;
                    break;
                }
                fetched++;
            }
            gfail += prefix - fetched;
            rd += fetched * bb;
        }
        hits += fetched;
        if (fetched < n) { /* recompute the rest and store it */
            for (size_t i = fetched; i < n; i++)
                block_fill((uint64_t *)(buf + i * bb), bb, hs[i]);
            t = mc_now_ns();
            mc_store_batch_put(rp->store, n - fetched, keys + fetched, piov + fetched,
                               nparts + fetched, &cfg, false, res);
            /* --put_retry_ms: blocks refused for space while eviction waits (for instance
             * for offloads to the SSD tier) are put again, one at a time, until the deadline */
            uint64_t retry_dl = mc_now_ms() + rp->put_retry_ms;
            for (size_t i = 0; rp->put_retry_ms && i < n - fetched; i++)
                while (res[i] == MC_ERR_NO_AVAILABLE_HANDLE && mc_now_ms() < retry_dl) {
                    mc_sleep_ms(1);
                    res[i] = mc_store_put(rp->store, keys[fetched + i], piov[fetched + i],
                                          nparts[fetched + i], &cfg);
                }
            lat_push(&pl, (mc_now_ns() - t) / 1000, (uint32_t)(n - fetched));
            for (size_t i = 0; i < n - fetched; i++) {
                if (res[i] == MC_OK) {
                    wr += bb;
                } else if (res[i] == MC_ERR_REPLICA_IS_NOT_READY) {
                    busy++; /* another request is writing the same block right now */
                } else {
                    pfail++;
                    MC_LOG_WARN("replay: put %s failed: %s", keys[fetched + i],
                                mc_status_str(res[i]));
                }
            }
        }
    }
    pthread_mutex_lock(&rp->lock);
    rp->blocks += blocks;
    rp->prefix_hits += hits;
    rp->exists_hits += ehits;
    rp->get_fail += gfail;
    rp->put_fail += pfail;
    rp->bytes_read += rd;
    rp->bytes_written += wr;
    rp->wrong_blocks += wrong;
    rp->concurrent_puts += busy;
    for (size_t i = 0; i < gl.n; i++)
        lat_push(&rp->get_lat, gl.us[i], gl.blocks[i]);
    for (size_t i = 0; i < pl.n; i++)
        lat_push(&rp->put_lat, pl.us[i], pl.blocks[i]);
    for (size_t i = 0; i < el.n; i++)
        lat_push(&rp->exist_lat, el.us[i], el.blocks[i]);
    pthread_mutex_unlock(&rp->lock);
    mc_free(gl.us);
    mc_free(pl.us);
    mc_free(el.us);
    mc_free(gl.blocks);
    mc_free(pl.blocks);
    mc_free(el.blocks);
    mc_pages_free(buf, REPLAY_MAX_BLOCKS * bb);
    mc_free(names);
    mc_free(keys);
    mc_free(iov);
    mc_free(piov);
    mc_free(nparts);
    mc_free(res);
    mc_free(got);
    return NULL;
}

static double pct_d(double *v, size_t n, double p)
{
    if (!n)
        return 0;
    return v[(size_t)(p * (double)(n - 1) + 0.5)];
}

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One operation's entry of the profile: per call and per block latency statistics and the
 * least-squares fit us = fixed_us + blocks * per_block_us over all calls. When the calls all
 * moved the same number of blocks, or the fit gives a negative slope or intercept, it falls
 * back to fixed_us = 0, per_block_us = total us / total blocks (pure bandwidth, stated in the
 * "fit" field). gib_s = bytes moved / time spent inside these calls (one stream). */
static void profile_op(FILE *f, const char *name, const lat_log_t *l, uint64_t block_bytes,
                       int last)
{
    double *call = mc_calloc(l->n + 1, sizeof(double)), *blk = mc_calloc(l->n + 1, sizeof(double));
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    size_t m = 0;
    for (size_t i = 0; i < l->n && call && blk; i++) {
        if (!l->blocks[i])
            continue;
        double x = l->blocks[i], y = (double)l->us[i];
        call[m] = y;
        blk[m++] = y / x;
        sx += x;
        sy += y;
        sxx += x * x;
        sxy += x * y;
    }
    double fixed = 0, per = sx > 0 ? sy / sx : 0, den = (double)m * sxx - sx * sx;
    const char *fit = "bandwidth_only";
    if (m >= 2 && den > 1e-9 * (double)m * sxx) {
        double b = ((double)m * sxy - sx * sy) / den, a = (sy - b * sx) / (double)m;
        if (b > 0 && a >= 0) {
            fixed = a;
            per = b;
            fit = "least_squares";
        }
    }
    if (m) {
        qsort(call, m, sizeof(double), cmp_dbl);
        qsort(blk, m, sizeof(double), cmp_dbl);
    }
    double gib = 1024.0 * 1024 * 1024;
    fprintf(f,
            "  \"%s\": {\"calls\": %zu, \"blocks\": %.0f, \"mean_us\": %.1f, \"p50_us\": %.1f, "
            "\"p90_us\": %.1f, \"p99_us\": %.1f, \"per_block_mean_us\": %.2f, "
            "\"per_block_p50_us\": %.2f, \"per_block_p90_us\": %.2f, \"per_block_p99_us\": %.2f, "
            "\"fit\": \"%s\", \"fixed_us\": %.2f, \"per_block_us\": %.3f, \"gib_s\": %.4f}%s\n",
            name, m, sx, m ? sy / (double)m : 0, pct_d(call, m, 0.5), pct_d(call, m, 0.9),
            pct_d(call, m, 0.99), sx > 0 ? sy / sx : 0, pct_d(blk, m, 0.5), pct_d(blk, m, 0.9),
            pct_d(blk, m, 0.99), fit, fixed, per,
            sy > 0 ? sx * (double)block_bytes / gib / (sy * 1e-6) : 0, last ? "" : ",");
    mc_free(call);
    mc_free(blk);
}

static int profile_write(const char *path, const replay_t *rp, double secs)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "mc_store_replay: cannot write %s\n", path);
        return -1;
    }
    double gib = 1024.0 * 1024 * 1024;
    fprintf(f,
            "{\"profile\": \"mc_store\", \"version\": 1,\n"
            "  \"transport\": \"%s\", \"block_bytes\": %llu, \"requests\": %zu, \"threads\": %u,\n"
            "  \"replicas\": %u, \"seconds\": %.3f, \"blocks\": %llu, \"prefix_hit_ratio\": %.4f,\n"
            "  \"read_gib_s\": %.4f, \"write_gib_s\": %.4f, \"put_fail\": %llu, \"wrong_blocks\": %llu,\n",
            rp->transport, (unsigned long long)rp->block_bytes,
            rp->n_reqs, rp->threads, rp->replicas, secs, (unsigned long long)rp->blocks,
            rp->blocks ? (double)rp->prefix_hits / (double)rp->blocks : 0,
            (double)rp->bytes_read / gib / secs, (double)rp->bytes_written / gib / secs,
            (unsigned long long)rp->put_fail, (unsigned long long)rp->wrong_blocks);
    profile_op(f, "exist", &rp->exist_lat, rp->block_bytes, 0);
    profile_op(f, "get", &rp->get_lat, rp->block_bytes, 0);
    profile_op(f, "put", &rp->put_lat, rp->block_bytes, 1);
    fprintf(f, "}\n");
    return fclose(f) == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *trace_path = "data/traces/conversation_trace.jsonl", *master = "127.0.0.1:50051",
               *metadata = "P2PHANDSHAKE", *ns = "demo-model@tp0@bf16", *hostname = "127.0.0.1",
               *profile_out = "";
    int64_t requests = 300, threads = 2, replicas = 1, put_retry_ms = 0;
    uint64_t block_bytes = 256 * 1024, segment = 0;
    double time_scale = 0;
    bool json = false;
    mc_tool_store_knobs_t knobs; /* --replica_hints, --lease_cache, --placement_feed, MC_TE_* */
    mc_tool_store_knobs_init(&knobs);
    mc_option_t opts[] = {
        {"trace", MC_OPT_STRING, &trace_path, NULL, "FAST'25 trace (JSON lines)", 0, 0},
        {"master_server_address", MC_OPT_STRING, &master, "MOONCAKE_MASTER", "master host:port", 0, 0},
        {"metadata_server", MC_OPT_STRING, &metadata, "MC_METADATA_SERVER", "TE metadata", 0, 0},
        {"local_hostname", MC_OPT_STRING, &hostname, "LOCAL_HOSTNAME", "this client's host", 0, 0},
        {"namespace", MC_OPT_STRING, &ns, NULL, "key prefix (model@rank@dtype)", 0, 0},
        {"requests", MC_OPT_INT, &requests, NULL, "requests replayed from the start of the trace", 1, 10000000},
        {"threads", MC_OPT_INT, &threads, NULL, "concurrent requests", 1, 256},
        {"replicas", MC_OPT_INT, &replicas, NULL, "replicas per block", 1, 8},
        {"block_bytes", MC_OPT_SIZE, &block_bytes, NULL, "bytes per 512-token block (scaled; real: 64 MiB)", 4096, 64ull << 20},
        {"global_segment_size", MC_OPT_SIZE, &segment, NULL, "memory this client contributes", 0, 1ull << 40},
        {"time_scale", MC_OPT_DOUBLE, &time_scale, NULL, "replay speed-up vs trace timestamps (0 = closed loop)", 0, 1e9},
        {"json", MC_OPT_BOOL, &json, NULL, "also print a JSON line", 0, 0},
        {"put_retry_ms", MC_OPT_INT, &put_retry_ms, NULL,
         "retry a put refused with NO_AVAILABLE_HANDLE (eviction waiting, e.g. for SSD "
         "offloads) for up to this long per request (0 = count it failed at once)", 0, 600000},
        {"profile_out", MC_OPT_STRING, &profile_out, NULL, "write the measured-store profile (JSON) for mc_sim --measured_store", 0, 0},
        MC_TOOL_STORE_KNOB_OPTIONS(&knobs),
    };
    mc_config_spec_t spec = {"mc_store_replay",
                             "Replays a FAST'25 trace as KV-block put/get against a running store.",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    char te_err[256];
    if (mc_tool_store_knobs_load(&knobs, te_err, sizeof(te_err)) != MC_OK) {
        fprintf(stderr, "%s: %s\n", spec.program, te_err);
        return 2;
    }
    if (block_bytes % 8) {
        fprintf(stderr, "mc_store_replay: --block_bytes must be a multiple of 8\n");
        return 2;
    }
    mc_conductor_trace_limits_t lim;
    mc_conductor_trace_limits_default(&lim);
    lim.max_requests = (size_t)requests;
    mc_conductor_trace_t *trace;
    if (mc_conductor_trace_load(trace_path, &lim, &trace) != MC_OK) {
        fprintf(stderr, "mc_store_replay: cannot load trace %s\n", trace_path);
        return 2;
    }
    mc_store_config_t cfg = {.local_hostname = hostname, .metadata_server = metadata,
                             .global_segment_size = segment, .protocol = "tcp",
                             .master_server_addr = master};
    mc_tool_store_knobs_fill(&knobs, &cfg);
    replay_t rp = {.transport = knobs.te_tuning.force_tcp == 1 ? "tcp" : "auto", .trace = trace, .ns = ns, .block_bytes = block_bytes, .n_reqs = trace->n_reqs,
                   .threads = (uint32_t)threads, .time_scale = time_scale,
                   .put_retry_ms = (uint64_t)put_retry_ms,
                   .replicas = (uint32_t)replicas};
    pthread_mutex_init(&rp.lock, NULL);
    mc_status_t st = mc_store_create(&cfg, &rp.store);
    if (st != MC_OK) {
        fprintf(stderr, "mc_store_replay: store setup failed: %s\n", mc_status_str(st));
        mc_conductor_trace_free(trace);
        return 1;
    }
    pthread_t *tids = mc_calloc((size_t)threads, sizeof(*tids));
    uint64_t t0 = mc_now_ns();
    rp.t0_ms = t0 / 1000000;
    for (int64_t i = 0; i < threads; i++)
        pthread_create(&tids[i], NULL, replay_worker, &rp);
    for (int64_t i = 0; i < threads; i++)
        pthread_join(tids[i], NULL);
    double secs = (double)(mc_now_ns() - t0) / 1e9;
    mc_free(tids);
    /* the profile pairs each call's latency with its block count: write it before sorting */
    int prc = 0;
    if (profile_out && *profile_out) {
        if (!rp.get_lat.n || !rp.put_lat.n) {
            fprintf(stderr, "mc_store_replay: no batch get or put measured, no profile written "
                            "(replay more requests)\n");
            prc = 1;
        } else if (profile_write(profile_out, &rp, secs) != 0) {
            prc = 1;
        }
    }
    qsort(rp.get_lat.us, rp.get_lat.n, sizeof(uint64_t), cmp_u64);
    qsort(rp.put_lat.us, rp.put_lat.n, sizeof(uint64_t), cmp_u64);
    qsort(rp.exist_lat.us, rp.exist_lat.n, sizeof(uint64_t), cmp_u64);

    double hit = rp.blocks ? (double)rp.prefix_hits / (double)rp.blocks : 0;
    double gib = 1024.0 * 1024 * 1024;
    printf("replayed %zu requests (%llu blocks of %llu KiB) with %u threads in %.2f s\n", rp.n_reqs,
           (unsigned long long)rp.blocks, (unsigned long long)(block_bytes / 1024), rp.threads, secs);
    printf("  prefix hit rate   %.1f %% of blocks (%llu fetched, %llu listed but gone by the get)\n",
           100 * hit, (unsigned long long)rp.prefix_hits, (unsigned long long)rp.get_fail);
    printf("  read              %.3f GiB  (%.2f GiB/s)\n", (double)rp.bytes_read / gib,
           (double)rp.bytes_read / gib / secs);
    printf("  written           %.3f GiB  (%.2f GiB/s), %llu puts failed, %llu skipped (being "
           "written by a concurrent request)\n",
           (double)rp.bytes_written / gib, (double)rp.bytes_written / gib / secs,
           (unsigned long long)rp.put_fail, (unsigned long long)rp.concurrent_puts);
    printf("  batch exist  p50 %8.0f us  p99 %8.0f us  (%zu calls)\n", pct(&rp.exist_lat, 0.5),
           pct(&rp.exist_lat, 0.99), rp.exist_lat.n);
    printf("  batch get    p50 %8.0f us  p99 %8.0f us  (%zu calls)\n", pct(&rp.get_lat, 0.5),
           pct(&rp.get_lat, 0.99), rp.get_lat.n);
    printf("  batch put    p50 %8.0f us  p99 %8.0f us  (%zu calls)\n", pct(&rp.put_lat, 0.5),
           pct(&rp.put_lat, 0.99), rp.put_lat.n);
    printf("  wrong blocks      %llu\n", (unsigned long long)rp.wrong_blocks);
    if (json)
        printf("{\"bench\":\"store_replay\",\"requests\":%zu,\"blocks\":%llu,\"block_bytes\":%llu,"
               "\"threads\":%u,\"seconds\":%.3f,\"prefix_hit_ratio\":%.4f,\"read_gib_s\":%.3f,"
               "\"write_gib_s\":%.3f,\"get_p50_us\":%.0f,\"get_p99_us\":%.0f,\"put_p50_us\":%.0f,"
               "\"put_p99_us\":%.0f,\"exist_p50_us\":%.0f,\"exist_p99_us\":%.0f,"
               "\"put_fail\":%llu,\"wrong_blocks\":%llu}\n",
               rp.n_reqs, (unsigned long long)rp.blocks, (unsigned long long)block_bytes, rp.threads,
               secs, hit, (double)rp.bytes_read / gib / secs, (double)rp.bytes_written / gib / secs,
               pct(&rp.get_lat, 0.5), pct(&rp.get_lat, 0.99), pct(&rp.put_lat, 0.5),
               pct(&rp.put_lat, 0.99), pct(&rp.exist_lat, 0.5), pct(&rp.exist_lat, 0.99),
               (unsigned long long)rp.put_fail, (unsigned long long)rp.wrong_blocks);
    mc_store_destroy(rp.store);
    mc_conductor_trace_free(trace);
    mc_free(rp.get_lat.us);
    mc_free(rp.put_lat.us);
    mc_free(rp.exist_lat.us);
    mc_free(rp.get_lat.blocks);
    mc_free(rp.put_lat.blocks);
    mc_free(rp.exist_lat.blocks);
    return rp.wrong_blocks || prc ? 1 : 0;
}
