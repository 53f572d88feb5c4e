/* Prefill/decode hand-off through the store (pd.h). */
#include "engine/pd.h"

#include "common/hash.h"
#include "common/log.h"
#include "common/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POLL_MS 2 /* the decode side's polling interval for the handoff record */

void mc_engine_pd_key(uint64_t compat_id, uint64_t request_id, const char *what,
                      char key[MC_ENGINE_KV_KEY_MAX])
{
    snprintf(key, MC_ENGINE_KV_KEY_MAX, "mc_engine/%016llx/req/%016llx/%s",
             (unsigned long long)compat_id, (unsigned long long)request_id, what);
}

/* Chain hashes and keys of a request's blocks: the n/B complete ones (shared keys), then the
 * tail (request-scoped key) if n is not a multiple of B. Returns the number of blocks. */
static uint32_t request_blocks(uint64_t compat, uint64_t request_id, const int32_t *tokens,
                               uint32_t n, uint32_t B, uint64_t *chain,
                               char (*keys)[MC_ENGINE_KV_KEY_MAX])
{
    uint32_t full = n / B, tail = n % B;
    mc_engine_chain_hashes(compat, tokens, B, full, chain);
    for (uint32_t i = 0; i < full; i++)
        mc_engine_kv_key(compat, chain[i], keys[i]);
    if (tail == 0)
        return full;
    chain[full] = mc_hash64_seed(tokens + (size_t)full * B, tail * sizeof(int32_t),
                                 full ? chain[full - 1] : compat);
    mc_engine_pd_key(compat, request_id, "tail", keys[full]);
    return full + 1;
}

mc_status_t mc_engine_pd_prefill(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                 uint64_t compat, const mc_engine_cost_t *cost,
                                 uint64_t request_id, const int32_t *tokens, uint32_t n,
                                 float *logits, mc_engine_reuse_stats_t *stats)
{
    if (!store)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st =
        mc_engine_prefill_reuse_cost(eng, kv, store, compat, cost, tokens, n, logits, stats);
    if (st != MC_OK)
        return st;
    const mc_engine_model_t *m = mc_engine_model(eng);
    uint32_t B = kv->block_tokens, full = n / B;
    size_t vocab = (size_t)m->cfg.vocab_size;
    size_t rec_len = sizeof(mc_engine_pd_hdr_t) + (size_t)n * sizeof(int32_t) +
                     vocab * sizeof(float);
    uint64_t *chain = calloc(full + 1, sizeof(*chain));
    char(*keys)[MC_ENGINE_KV_KEY_MAX] = calloc(full + 1, MC_ENGINE_KV_KEY_MAX);
    unsigned char *rec = malloc(rec_len);
    if (!chain || !keys || !rec) {
        st = MC_ERR_NO_MEMORY;
        goto out;
    }
    uint32_t nb = request_blocks(compat, request_id, tokens, n, B, chain, keys);
    if (nb > full &&
        mc_engine_kv_put_blocks(m, kv, store, compat, chain, keys, full, nb, true) != 1) {
        MC_LOG_WARN("engine: request %016llx: storing the tail block failed",
                    (unsigned long long)request_id);
        st = MC_ERR_WRITE_FAIL;
        goto out;
    }
    mc_engine_pd_hdr_t h = {.magic = MC_ENGINE_PD_MAGIC, .version = MC_ENGINE_PD_VERSION,
                            .compat_id = compat, .request_id = request_id, .n_tokens = n,
                            .block_tokens = B, .n_full = full, .tail_tokens = n % B,
                            .vocab_size = (uint32_t)vocab,
                            .tokens_hash = mc_hash64(tokens, (size_t)n * sizeof(int32_t)),
                            .logits_hash = mc_hash64(logits, vocab * sizeof(float))};
    memcpy(rec, &h, sizeof(h));
    memcpy(rec + sizeof(h), tokens, (size_t)n * sizeof(int32_t));
    memcpy(rec + sizeof(h) + (size_t)n * sizeof(int32_t), logits, vocab * sizeof(float));
    char key[MC_ENGINE_KV_KEY_MAX];
    mc_engine_pd_key(compat, request_id, "handoff", key);
    struct iovec iov = {rec, rec_len};
    st = mc_store_upsert(store, key, &iov, 1, NULL);
    if (st != MC_OK)
        MC_LOG_WARN("engine: request %016llx: storing the handoff record failed: %s",
                    (unsigned long long)request_id, mc_status_str(st));
out:
    free(chain);
    free(keys);
    free(rec);
    return st;
}

/* Checks a handoff record against this decode side; returns its status. */
static mc_status_t check_record(const unsigned char *rec, size_t len, uint64_t compat,
                                uint64_t request_id, const mc_engine_model_t *m,
                                const mc_engine_kv_t *kv)
{
    mc_engine_pd_hdr_t h;
    if (len < sizeof(h))
        return MC_ERR_PROTOCOL;
    memcpy(&h, rec, sizeof(h));
    if (h.magic != MC_ENGINE_PD_MAGIC || h.version != MC_ENGINE_PD_VERSION || h.status != 0 ||
        h.reserved != 0 || h.request_id != request_id)
        return MC_ERR_PROTOCOL;
    if (h.compat_id != compat || h.block_tokens != kv->block_tokens ||
        h.vocab_size != (uint32_t)m->cfg.vocab_size) {
        MC_LOG_ERROR("engine: request %016llx: handoff of another model or layout (compat "
                     "%016llx, block %u, vocab %u)",
                     (unsigned long long)request_id, (unsigned long long)h.compat_id,
                     h.block_tokens, h.vocab_size);
        return MC_ERR_INVALID_PARAMS;
    }
    uint64_t cap = (uint64_t)kv->n_blocks * kv->block_tokens;
    if (h.n_tokens == 0 || h.n_tokens > cap || h.n_tokens > (uint32_t)m->cfg.seq_len ||
        h.n_full != h.n_tokens / h.block_tokens || h.tail_tokens != h.n_tokens % h.block_tokens ||
        len != sizeof(h) + (size_t)h.n_tokens * sizeof(int32_t) +
                   (size_t)h.vocab_size * sizeof(float))
        return MC_ERR_PROTOCOL;
    const int32_t *tok = (const int32_t *)(rec + sizeof(h));
    for (uint32_t i = 0; i < h.n_tokens; i++)
        if (tok[i] < 0 || tok[i] >= m->cfg.vocab_size)
            return MC_ERR_PROTOCOL;
    if (mc_hash64(tok, (size_t)h.n_tokens * sizeof(int32_t)) != h.tokens_hash ||
        mc_hash64(tok + h.n_tokens, (size_t)h.vocab_size * sizeof(float)) != h.logits_hash)
        return MC_ERR_CHECKSUM;
    return MC_OK;
}

mc_status_t mc_engine_pd_receive(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                 uint64_t compat, uint64_t request_id, uint32_t timeout_ms,
                                 int32_t **tokens_p, float *logits, mc_engine_pd_stats_t *stats)
{
    const mc_engine_model_t *m = mc_engine_model(eng);
    *stats = (mc_engine_pd_stats_t){0};
    *tokens_p = NULL;
    if (!store || kv->n_tokens != 0)
        return MC_ERR_INVALID_PARAMS;
    char hkey[MC_ENGINE_KV_KEY_MAX];
    mc_engine_pd_key(compat, request_id, "handoff", hkey);
    uint64_t t0 = mc_now_ns(), deadline = t0 + (uint64_t)timeout_ms * 1000000u;
    void *val = NULL;
    size_t len = 0;
    mc_status_t st;
    while ((st = mc_store_get(store, hkey, &val, &len)) != MC_OK) {
        if (mc_now_ns() >= deadline) {
            MC_LOG_ERROR("engine: request %016llx: no handoff within %u ms (last: %s)",
                         (unsigned long long)request_id, timeout_ms, mc_status_str(st));
            return MC_ERR_TIMEOUT;
        }
        mc_sleep_ms(POLL_MS);
    }
    stats->wait_ms = (double)(mc_now_ns() - t0) / 1e6;
    uint64_t *chain = NULL;
    char(*keys)[MC_ENGINE_KV_KEY_MAX] = NULL;
    int32_t *tokens = NULL;
    if ((st = check_record(val, len, compat, request_id, m, kv)) != MC_OK) {
        MC_LOG_ERROR("engine: request %016llx: handoff record refused: %s",
                     (unsigned long long)request_id, mc_status_str(st));
        goto out;
    }
    mc_engine_pd_hdr_t h;
    memcpy(&h, val, sizeof(h));
    uint32_t n = h.n_tokens, B = kv->block_tokens;
    size_t vocab_bytes = (size_t)h.vocab_size * sizeof(float);
    chain = calloc(h.n_full + 1, sizeof(*chain));
    keys = calloc(h.n_full + 1, MC_ENGINE_KV_KEY_MAX);
    tokens = malloc((size_t)n * sizeof(int32_t));
    if (!chain || !keys || !tokens) {
        st = MC_ERR_NO_MEMORY;
        goto out;
    }
    memcpy(tokens, (unsigned char *)val + sizeof(h), (size_t)n * sizeof(int32_t));
    uint32_t nb = request_blocks(compat, request_id, tokens, n, B, chain, keys);
    t0 = mc_now_ns();
    uint32_t valid = mc_engine_kv_fetch_blocks(m, kv, store, compat, chain, keys, nb);
    stats->fetch_ms = (double)(mc_now_ns() - t0) / 1e6;
    stats->n_tokens = n;
    if (valid == nb) {
        kv->n_tokens = n;
        stats->tokens_fetched = n;
        memcpy(logits, (unsigned char *)val + sizeof(h) + (size_t)n * sizeof(int32_t),
               vocab_bytes);
    } else { /* recompute from the first block that is missing or failed */
        kv->n_tokens = valid * B;
        stats->tokens_fetched = valid * B;
        stats->tokens_recomputed = n - valid * B;
        t0 = mc_now_ns();
        st = mc_engine_prefill(eng, kv, tokens + valid * B, n - valid * B, logits);
        stats->recompute_ms = (double)(mc_now_ns() - t0) / 1e6;
        if (st != MC_OK)
            goto out;
        if (mc_hash64(logits, vocab_bytes) != h.logits_hash) {
            MC_LOG_ERROR("engine: request %016llx: recomputed logits differ from the prefill "
                         "side's", (unsigned long long)request_id);
            st = MC_ERR_CHECKSUM;
            goto out;
        }
    }
    /* the request-scoped keys have served their one reader */
    if (h.tail_tokens)
        (void)mc_store_remove(store, keys[h.n_full], true);
    (void)mc_store_remove(store, hkey, true);
    *tokens_p = tokens;
    tokens = NULL;
out:
    free(val);
    free(chain);
    free(keys);
    free(tokens);
    return st;
}
