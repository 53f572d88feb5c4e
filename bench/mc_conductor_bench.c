/* mc_conductor_bench: prefix-index ingestion and query latency (JSON lines on stdout).
 *
 * Builds an index of --blocks blocks as chains of --prompt_blocks chained hashes (each chain a
 * "conversation"), each block committed to 1..3 segments on --hosts hosts (one private LOCAL
 * segment and one POOL segment per host, plus one SSD segment), then times --queries queries of
 * a --prompt_blocks-block prompt (a random chain, cut at a random point and extended with unseen
 * blocks so that prefixes end at varying places) against --candidates candidate hosts. */
#include "common/config.h"
#include "common/time.h"
#include "conductor/index.h"
#include "bench_stats.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng_state;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int main(int argc, char **argv)
{
    int64_t blocks = 1000000, hosts = 16, candidates = 16, prompt_blocks = 100, queries = 20000,
            seed = 1;
    mc_option_t opts[] = {
        {"blocks", MC_OPT_INT, &blocks, NULL, "indexed blocks", 1, 1e9},
        {"hosts", MC_OPT_INT, &hosts, NULL, "hosts holding blocks", 1, 4096},
        {"candidates", MC_OPT_INT, &candidates, NULL, "candidate hosts per query", 1, 4096},
        {"prompt_blocks", MC_OPT_INT, &prompt_blocks, NULL, "blocks per prompt", 1, 100000},
        {"queries", MC_OPT_INT, &queries, NULL, "timed queries", 1, 1e9},
        {"seed", MC_OPT_INT, &seed, NULL, "RNG seed", 0, 1e18},
    };
    mc_config_spec_t spec = {"mc_conductor_bench",
                             "Prefix index benchmark: event ingestion rate and query latency "
                             "(p50/p99) for N-block prompts over an index of M blocks.",
                             opts, sizeof(opts) / sizeof(opts[0])};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    rng_state = (uint64_t)seed;
    mc_conductor_index_config_t cfg;
    mc_conductor_index_config_default(&cfg);
    cfg.size_hint = (size_t)blocks;
    cfg.max_blocks = (size_t)blocks + 1;
    mc_conductor_index_t *idx;
    if (mc_conductor_index_create(&cfg, &idx) != MC_OK)
        return 1;
    char (*lseg)[32] = calloc((size_t)hosts, 32), (*pseg)[32] = calloc((size_t)hosts, 32),
         (*hname)[32] = calloc((size_t)hosts, 32);
    uint32_t *cand = calloc((size_t)candidates, sizeof(uint32_t));
    uint64_t *lat = calloc((size_t)queries, sizeof(uint64_t));
    uint64_t *q = calloc((size_t)prompt_blocks, sizeof(uint64_t));
    mc_conductor_prefix_t *out = calloc((size_t)candidates, sizeof(*out));
    if (!lseg || !pseg || !hname || !cand || !lat || !q || !out)
        return 1;
    for (int64_t h = 0; h < hosts; h++) {
        snprintf(lseg[h], 32, "host%lld/gpu", (long long)h);
        snprintf(pseg[h], 32, "host%lld/dram", (long long)h);
        snprintf(hname[h], 32, "host%lld", (long long)h);
    }
    /* block hash of chain c, position p: a chained hash stand-in */
    int64_t chains = (blocks + prompt_blocks - 1) / prompt_blocks;
    uint64_t seq = 1, events = 0;
    uint64_t t0 = mc_now_ns();
    for (int64_t c = 0; c < chains; c++) {
        int64_t h = (int64_t)(rnd() % (uint64_t)hosts);
        for (int64_t p = 0; p < prompt_blocks && c * prompt_blocks + p < blocks; p++) {
            uint64_t hash = ((uint64_t)c << 20) | (uint64_t)p;
            mc_conductor_event_t ev = {seq++, MC_CONDUCTOR_EV_COMMITTED, hash, 64 << 20,
                                       pseg[h], hname[h], MC_CONDUCTOR_TIER_POOL};
            mc_conductor_index_apply(idx, &ev);
            events++;
            if (rnd() % 2) { /* also in that host's private cache */
                mc_conductor_event_t e2 = {seq++, MC_CONDUCTOR_EV_COMMITTED, hash, 64 << 20,
                                           lseg[h], hname[h], MC_CONDUCTOR_TIER_LOCAL};
                mc_conductor_index_apply(idx, &e2);
                events++;
            }
            if (rnd() % 4 == 0) { /* a replica elsewhere */
                int64_t h2 = (int64_t)(rnd() % (uint64_t)hosts);
                mc_conductor_event_t e3 = {seq++, MC_CONDUCTOR_EV_COMMITTED, hash, 64 << 20,
                                           pseg[h2], hname[h2], MC_CONDUCTOR_TIER_POOL};
                mc_conductor_index_apply(idx, &e3);
                events++;
            }
        }
    }
    uint64_t t1 = mc_now_ns();
    mc_conductor_index_stats_t st;
    mc_conductor_index_get_stats(idx, &st);
    printf("{\"bench\":\"conductor_index_ingest\",\"blocks\":%llu,\"holders\":%llu,\"events\":%llu,"
           "\"seconds\":%.3f,\"events_per_s\":%.0f,\"state\":\"%s\"}\n",
           (unsigned long long)st.blocks, (unsigned long long)st.holders,
           (unsigned long long)events, (double)(t1 - t0) / 1e9,
           (double)events / ((double)(t1 - t0) / 1e9), mc_conductor_index_state_name(st.state));
    for (int64_t c = 0; c < candidates; c++)
        mc_conductor_index_host_id(idx, hname[c % hosts], &cand[c]);
    uint64_t total_prefix = 0;
    for (int64_t i = 0; i < queries; i++) {
        int64_t c = (int64_t)(rnd() % (uint64_t)chains);
        int64_t cut = (int64_t)(rnd() % (uint64_t)(prompt_blocks + 1));
        for (int64_t p = 0; p < prompt_blocks; p++)
            q[p] = p < cut ? (((uint64_t)c << 20) | (uint64_t)p) : (rnd() | (1ULL << 63));
        uint64_t a = mc_now_ns();
        mc_conductor_index_query(idx, q, (size_t)prompt_blocks, cand, (size_t)candidates, 0, out);
        lat[i] = mc_now_ns() - a;
        total_prefix += out[0].any;
    }
    qsort(lat, (size_t)queries, sizeof(uint64_t), mc_bench_cmp_u64);
    double sum = 0;
    for (int64_t i = 0; i < queries; i++)
        sum += (double)lat[i];
    /* worst case: every block of the prompt is a hit (full walk) */
    uint64_t full_max = 0, full_sum = 0;
    int64_t nfull = queries < 2000 ? queries : 2000;
    for (int64_t i = 0; i < nfull; i++) {
        int64_t c = (int64_t)(rnd() % (uint64_t)(blocks / prompt_blocks > 0 ? blocks / prompt_blocks : 1));
        for (int64_t p = 0; p < prompt_blocks; p++)
            q[p] = ((uint64_t)c << 20) | (uint64_t)p;
        uint64_t a = mc_now_ns();
        mc_conductor_index_query(idx, q, (size_t)prompt_blocks, cand, (size_t)candidates, 0, out);
        uint64_t d = mc_now_ns() - a;
        full_sum += d;
        if (d > full_max)
            full_max = d;
    }
    printf("{\"bench\":\"conductor_index_query\",\"indexed_blocks\":%llu,\"prompt_blocks\":%lld,"
           "\"candidates\":%lld,\"queries\":%lld,\"p50_us\":%.2f,\"p99_us\":%.2f,\"max_us\":%.2f,"
           "\"mean_us\":%.2f,\"full_hit_mean_us\":%.2f,\"full_hit_max_us\":%.2f,"
           "\"mean_prefix_blocks\":%.1f}\n",
           (unsigned long long)st.blocks, (long long)prompt_blocks, (long long)candidates,
           (long long)queries, (double)lat[queries / 2] / 1e3,
           (double)lat[(size_t)((double)queries * 0.99)] / 1e3, (double)lat[queries - 1] / 1e3,
           sum / (double)queries / 1e3, (double)full_sum / (double)nfull / 1e3,
           (double)full_max / 1e3, (double)total_prefix / (double)queries);
    mc_conductor_index_destroy(idx);
    free(lseg);
    free(pseg);
    free(hname);
    free(cand);
    free(lat);
    free(q);
    free(out);
    return 0;
}
