/* mc_engine_pd: one request in prefill/decode disaggregation (engine/pd.h), or colocated.
 *
 *   mc_engine_pd --role prefill|decode|colocated [--master HOST:PORT] [--request ID]
 *                [--prompt N] [--decode N] [--threads N] [--block B] [--tiny] [--seed S]
 *                [--kernels NAME] [--local_hostname H] [--metadata URI]
 *                [--segment_size MB] [--timeout_ms MS]
 *
 * The prompt: --prompt tokens (default 1800, not a multiple of the block, so there is a tail)
 * from splitmix64 seeded with the request id (default 1). prefill: prefill with prefix reuse
 * through the store at --master, store the KV and the handoff record, exit. decode: wait up to
 * --timeout_ms (default 30000) for the request's record, fetch its KV, decode --decode tokens
 * (default 16). colocated: prefill and decode in this process (with --master: prefix reuse
 * through the store, as the prefill side does). The process contributes --segment_size MB
 * (default 0: a storage server provides the memory). The transfer engine reads its tuning from
 * the environment (tools/common/te_env.h).
 *
 * Options are parsed by common/config.h (--flag value or --flag=value; --help lists them with
 * their defaults; a bad one exits 2).
 *
 * One JSON line: role, request, prompt_tokens, the prefill side's tokens_reused /
 * tokens_prefilled or the decode side's tokens_fetched / tokens_recomputed / wait_ms, and for
 * decode and colocated the generated tokens and logits_hash (XXH3-64 of the logits the last
 * token was taken from): equal in both modes means bit-identical. Exit 1 on any failure.
 */
#include "common/alloc.h"
#include "common/config.h"
#include "common/hash.h"
#include "common/time.h"
#include "engine/pd.h"
#include "mooncake/store.h"
#include "cli.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_tokens(const int32_t *out, long n, const float *logits, int32_t vocab)
{
    printf(",\"tokens\":[");
    for (long i = 0; i < n; i++)
        printf("%s%d", i ? "," : "", out[i]);
    printf("],\"logits_hash\":\"%016llx\"",
           (unsigned long long)mc_hash64(logits, (size_t)vocab * sizeof(float)));
}

int main(int argc, char **argv)
{
    int64_t threads = 2, prompt = 1800, decode = 16, block = 512, seed = 1, request = 1,
            segment_mb = 0, timeout_ms = 30000;
    bool tiny = false;
    const char *role = NULL, *master = NULL, *host = "127.0.0.1", *metadata = "P2PHANDSHAKE",
               *kernels = NULL;
    mc_option_t opts[] = {
        {"role", MC_OPT_STRING, &role, NULL, "prefill|decode|colocated (required)", 0, 0},
        {"master", MC_OPT_STRING, &master, NULL,
         "mooncake_master host:port (required for prefill and decode)", 0, 0},
        {"request", MC_OPT_INT, &request, NULL, "request id (seeds the prompt)", 0, INT32_MAX},
        {"prompt", MC_OPT_INT, &prompt, NULL, "prompt tokens", 1, 1 << 20},
        {"decode", MC_OPT_INT, &decode, NULL, "tokens to decode", 1, 4096},
        {"threads", MC_OPT_INT, &threads, NULL, "compute threads", 1, MC_ENGINE_THREADS_MAX},
        {"block", MC_OPT_INT, &block, NULL, "tokens per KV block", 1, 1 << 20},
        {"tiny", MC_OPT_BOOL, &tiny, NULL, "the tiny model (tests) instead of the default", 0, 0},
        {"seed", MC_OPT_INT, &seed, NULL, "model weights seed", 0, INT32_MAX},
        {"kernels", MC_OPT_STRING, &kernels, NULL, "avx2-fma|portable (default: the best)", 0, 0},
        {"local_hostname", MC_OPT_STRING, &host, NULL, "this store client's host", 0, 0},
        {"metadata", MC_OPT_STRING, &metadata, NULL, "TE metadata URI", 0, 0},
        {"segment_size", MC_OPT_INT, &segment_mb, NULL,
         "MB contributed to the pool (0: a storage server provides the memory)", 0, 1 << 20},
        {"timeout_ms", MC_OPT_INT, &timeout_ms, NULL,
         "decode: how long to wait for the request's handoff record", 1, 3600000},
    };
    mc_config_spec_t spec = {"mc_engine_pd",
                             "One request in prefill/decode disaggregation, or colocated; "
                             "prints one JSON line.",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    int is_prefill = role && !strcmp(role, "prefill"), is_decode = role && !strcmp(role, "decode");
    if (!role || (!is_prefill && !is_decode && strcmp(role, "colocated"))) {
        fprintf(stderr, "mc_engine_pd: --role prefill|decode|colocated is required; see --help\n");
        return 2;
    }
    if ((is_prefill || is_decode) && !master) {
        fprintf(stderr, "mc_engine_pd: --role %s needs --master\n", role);
        return 2;
    }

    mc_engine_model_t *m;
    mc_status_t st = mc_engine_model_open(NULL, tiny, (uint64_t)seed, &m);
    if (st != MC_OK) {
        fprintf(stderr, "mc_engine_pd: model: %s\n", mc_status_str(st));
        return 1;
    }
    const mc_engine_config_t cfg = m->cfg;
    if (prompt + decode > cfg.seq_len) {
        fprintf(stderr, "mc_engine_pd: prompt + decode %ld > seq_len %d\n", prompt + decode,
                cfg.seq_len);
        return 2;
    }
    mc_store_t *store = NULL;
    if (master) {
        int rc = mc_tool_store_open("mc_engine_pd", host, metadata, master, NULL,
                                    (uint64_t)segment_mb << 20, &store);
        if (rc != 0)
            return rc;
    }
    mc_engine_t *e;
    mc_engine_kv_t *kv;
    if ((st = mc_engine_create(m, (int)threads, &e)) != MC_OK ||
        (kernels && (st = mc_engine_set_kernels(e, kernels)) != MC_OK) ||
        (st = mc_engine_kv_create(m, (uint32_t)block, &kv)) != MC_OK) {
        fprintf(stderr, "mc_engine_pd: engine: %s\n", mc_status_str(st));
        return 1;
    }
    uint64_t compat = mc_engine_compat_id(m, mc_engine_kernels_name(e), (uint32_t)block, 0, 1);
    int32_t *tok = malloc((size_t)prompt * sizeof(int32_t)), *out = malloc((size_t)decode * 4);
    float *logits = malloc((size_t)cfg.vocab_size * sizeof(float));
    uint64_t s = (uint64_t)request ^ 0x6D635F70645F7271ull; /* "mc_pd_rq" */
    for (long i = 0; i < prompt; i++)
        tok[i] = (int32_t)(mc_engine_splitmix64(&s) % (uint64_t)cfg.vocab_size);
    printf("{\"role\":\"%s\",\"request\":%ld,\"prompt_tokens\":%ld,\"block_tokens\":%ld",
           role, request, prompt, block);
    mc_engine_reuse_stats_t rs;
    uint64_t t0 = mc_now_ns();
    if (is_decode) {
        mc_engine_pd_stats_t ps;
        int32_t *got = NULL;
        st = mc_engine_pd_receive(e, kv, store, compat, (uint64_t)request, (uint32_t)timeout_ms,
                                  &got, logits, &ps);
        if (st == MC_OK && (ps.n_tokens != (uint32_t)prompt ||
                            memcmp(got, tok, (size_t)prompt * sizeof(int32_t)) != 0)) {
            fprintf(stderr, "mc_engine_pd: the handed-off prompt is not this request's\n");
            st = MC_ERR_INVALID_PARAMS;
        }
        free(got);
        if (st == MC_OK) {
            printf(",\"tokens_fetched\":%u,\"tokens_recomputed\":%u,\"wait_ms\":%.1f,"
                   "\"fetch_ms\":%.2f,\"recompute_ms\":%.1f",
                   ps.tokens_fetched, ps.tokens_recomputed, ps.wait_ms, ps.fetch_ms,
                   ps.recompute_ms);
            st = mc_engine_decode(e, kv, logits, out, (uint32_t)decode);
        }
    } else {
        st = is_prefill ? mc_engine_pd_prefill(e, kv, store, compat, NULL, (uint64_t)request, tok,
                                               (uint32_t)prompt, logits, &rs)
                        : mc_engine_prefill_reuse(e, kv, store, compat, tok, (uint32_t)prompt,
                                                  logits, &rs);
        if (st == MC_OK)
            printf(",\"tokens_reused\":%u,\"tokens_prefilled\":%u,\"blocks_put\":%u,"
                   "\"prefill_ms\":%.1f,\"first_token\":%d",
                   rs.tokens_reused, rs.tokens_prefilled, rs.blocks_put, rs.prefill_ms,
                   mc_engine_argmax(logits, cfg.vocab_size));
        if (st == MC_OK && !is_prefill)
            st = mc_engine_decode(e, kv, logits, out, (uint32_t)decode);
    }
    if (st == MC_OK && !is_prefill)
        print_tokens(out, decode, logits, cfg.vocab_size);
    printf(",\"total_ms\":%.1f,\"status\":\"%s\"}\n", (double)(mc_now_ns() - t0) / 1e6,
           mc_status_str(st));
    if (st != MC_OK)
        fprintf(stderr, "mc_engine_pd: %s: %s\n", role, mc_status_str(st));
    free(tok);
    free(out);
    free(logits);
    mc_engine_kv_free(kv);
    mc_engine_destroy(e);
    mc_store_destroy(store);
    mc_engine_model_free(m);
    return st == MC_OK ? 0 : 1;
}
