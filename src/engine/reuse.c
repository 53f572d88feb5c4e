/* Prefix reuse through the store (reuse.h). */
#include "engine/reuse.h"

#include "common/hash.h"
#include "common/log.h"
#include "common/time.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

uint64_t mc_engine_compat_id(const mc_engine_model_t *m, const char *kernels,
                             uint32_t block_tokens, uint32_t tp_rank, uint32_t tp_size)
{
    const mc_engine_config_t *c = &m->cfg;
    uint64_t v[] = {MC_ENGINE_KV_MAGIC, MC_ENGINE_KV_VERSION, (uint64_t)c->dim,
                    (uint64_t)c->hidden_dim, (uint64_t)c->n_layers, (uint64_t)c->n_heads,
                    (uint64_t)c->n_kv_heads, (uint64_t)c->vocab_size, (uint64_t)c->seq_len,
                    (uint64_t)c->shared_classifier, m->weights_hash, block_tokens,
                    0 /* dtype fp32 */, mc_hash_str(kernels), tp_rank, tp_size};
    return mc_hash64(v, sizeof(v));
}

void mc_engine_chain_hashes(uint64_t compat_id, const int32_t *tokens, uint32_t block_tokens,
                            uint32_t n_blocks, uint64_t *out)
{
    uint64_t h = compat_id;
    for (uint32_t i = 0; i < n_blocks; i++) {
        h = mc_hash64_seed(tokens + (size_t)i * block_tokens, block_tokens * sizeof(int32_t), h);
        out[i] = h;
    }
}

void mc_engine_kv_key(uint64_t compat_id, uint64_t chain_hash, char key[MC_ENGINE_KV_KEY_MAX])
{
    mc_engine_kv_key_scoped(compat_id, NULL, chain_hash, key);
}

bool mc_engine_scope_valid(const char *scope)
{
    if (!scope || !*scope)
        return true;
    size_t n = strlen(scope);
    if (n > MC_ENGINE_SCOPE_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)scope[i]) && scope[i] != '_' && scope[i] != '-')
            return false;
    return true;
}

void mc_engine_kv_key_scoped(uint64_t compat_id, const char *scope, uint64_t chain_hash,
                             char key[MC_ENGINE_KV_KEY_MAX])
{
    if (scope && *scope)
        snprintf(key, MC_ENGINE_KV_KEY_MAX, "mc_engine/%016llx/%s/%016llx",
                 (unsigned long long)compat_id, scope, (unsigned long long)chain_hash);
    else
        snprintf(key, MC_ENGINE_KV_KEY_MAX, "mc_engine/%016llx/%016llx",
                 (unsigned long long)compat_id, (unsigned long long)chain_hash);
}

static mc_engine_kv_hdr_t make_hdr(const mc_engine_model_t *m, const mc_engine_kv_t *kv,
                                   uint64_t compat, uint64_t chain, uint32_t index,
                                   uint64_t payload_hash)
{
    return (mc_engine_kv_hdr_t){.magic = MC_ENGINE_KV_MAGIC, .version = MC_ENGINE_KV_VERSION,
                                .compat_id = compat, .chain_hash = chain, .block_index = index,
                                .block_tokens = kv->block_tokens,
                                .n_layers = (uint32_t)m->cfg.n_layers,
                                .kv_dim = (uint32_t)m->kv_dim,
                                .payload_bytes = mc_engine_kv_block_bytes(kv),
                                .payload_hash = payload_hash};
}

static double ms_since(uint64_t t0)
{
    return (double)(mc_now_ns() - t0) / 1e6;
}

uint32_t mc_engine_kv_fetch_blocks(const mc_engine_model_t *m, mc_engine_kv_t *kv,
                                   mc_store_t *store, uint64_t compat, const uint64_t *chain,
                                   char (*keys)[MC_ENGINE_KV_KEY_MAX], uint32_t n)
{
    size_t bb = mc_engine_kv_block_bytes(kv);
    mc_engine_kv_hdr_t *hdrs = calloc(n, sizeof(*hdrs));
    struct iovec *iov = calloc((size_t)n * 2, sizeof(*iov));
    const struct iovec **parts = calloc(n, sizeof(*parts));
    size_t *n_parts = calloc(n, sizeof(*n_parts));
    const char **kp = calloc(n, sizeof(*kp));
    int64_t *res = calloc(n, sizeof(*res));
    uint32_t valid = 0;
    if (!hdrs || !iov || !parts || !n_parts || !kp || !res)
        goto out;
    for (uint32_t i = 0; i < n; i++) {
        iov[2 * i] = (struct iovec){&hdrs[i], sizeof(hdrs[i])};
        iov[2 * i + 1] = (struct iovec){mc_engine_kv_block(kv, i), bb};
        parts[i] = &iov[2 * i];
        n_parts[i] = 2;
        kp[i] = keys[i];
    }
    mc_status_t st = mc_store_batch_get_into(store, n, kp, parts, n_parts, res);
    if (st != MC_OK) {
        MC_LOG_WARN("engine: fetching %u KV blocks failed (%s); recomputing", n, mc_status_str(st));
        goto out;
    }
    for (; valid < n; valid++) {
        uint32_t i = valid;
        if (res[i] != (int64_t)(sizeof(mc_engine_kv_hdr_t) + bb)) {
            MC_LOG_WARN("engine: KV block %u (%s): %s; recomputing from there", i, keys[i],
                        res[i] < 0 ? mc_status_str((int)res[i]) : "wrong size");
            break;
        }
        mc_engine_kv_hdr_t want = make_hdr(m, kv, compat, chain[i], i, hdrs[i].payload_hash);
        if (memcmp(&want, &hdrs[i], sizeof(want)) != 0 ||
            mc_hash64(mc_engine_kv_block(kv, i), bb) != hdrs[i].payload_hash) {
            MC_LOG_WARN("engine: KV block %u (%s) does not verify; recomputing from there", i,
                        keys[i]);
            break;
        }
    }
out:
    free(hdrs);
    free(iov);
    free(parts);
    free(n_parts);
    free(kp);
    free(res);
    return valid;
}

/* mc_engine_kv_put_blocks with a placement (cfg NULL = the master's default). */
static uint32_t put_blocks_cfg(const mc_engine_model_t *m, const mc_engine_kv_t *kv,
                               mc_store_t *store, uint64_t compat, const uint64_t *chain,
                               char (*keys)[MC_ENGINE_KV_KEY_MAX], uint32_t from, uint32_t to,
                               bool upsert, const mc_replicate_config_t *cfg)
{
    if (from >= to)
        return 0;
    uint32_t n = to - from, ok = 0;
    size_t bb = mc_engine_kv_block_bytes(kv);
    mc_engine_kv_hdr_t *hdrs = calloc(n, sizeof(*hdrs));
    struct iovec *iov = calloc((size_t)n * 2, sizeof(*iov));
    const struct iovec **parts = calloc(n, sizeof(*parts));
    size_t *n_parts = calloc(n, sizeof(*n_parts));
    const char **kp = calloc(n, sizeof(*kp));
    int32_t *res = calloc(n, sizeof(*res));
    if (!hdrs || !iov || !parts || !n_parts || !kp || !res)
        goto out;
    for (uint32_t j = 0; j < n; j++) {
        uint32_t i = from + j;
        float *blk = mc_engine_kv_block(kv, i);
        hdrs[j] = make_hdr(m, kv, compat, chain[i], i, mc_hash64(blk, bb));
        iov[2 * j] = (struct iovec){&hdrs[j], sizeof(hdrs[j])};
        iov[2 * j + 1] = (struct iovec){blk, bb};
        parts[j] = &iov[2 * j];
        n_parts[j] = 2;
        kp[j] = keys[i];
    }
    mc_status_t st = mc_store_batch_put(store, n, kp, parts, n_parts, cfg, upsert, res);
    if (st != MC_OK) {
        MC_LOG_WARN("engine: storing %u KV blocks failed: %s", n, mc_status_str(st));
        goto out;
    }
    for (uint32_t j = 0; j < n; j++)
        ok += res[j] == MC_OK;
out:
    free(hdrs);
    free(iov);
    free(parts);
    free(n_parts);
    free(kp);
    free(res);
    return ok;
}

uint32_t mc_engine_kv_put_blocks(const mc_engine_model_t *m, const mc_engine_kv_t *kv,
                                 mc_store_t *store, uint64_t compat, const uint64_t *chain,
                                 char (*keys)[MC_ENGINE_KV_KEY_MAX], uint32_t from, uint32_t to,
                                 bool upsert)
{
    return put_blocks_cfg(m, kv, store, compat, chain, keys, from, to, upsert, NULL);
}

uint32_t mc_engine_cost_blocks_to_fetch(const mc_engine_cost_t *c, uint32_t found,
                                        uint32_t block_tokens, size_t block_bytes,
                                        double *predicted_fetch_ms,
                                        double *predicted_recompute_ms)
{
    double fetch = c->obj_latency_ms +
                   (c->store_bytes_per_ms > 0 ? (double)block_bytes / c->store_bytes_per_ms : 0);
    double recompute = c->prefill_tokens_per_ms > 0
                           ? (double)block_tokens / c->prefill_tokens_per_ms : 0;
    *predicted_fetch_ms = fetch * found;
    *predicted_recompute_ms = recompute * found;
    if (c->prefill_tokens_per_ms > 0 && fetch >= recompute)
        return 0; /* recompute is at least as fast */
    if (c->deadline_ms > 0 && fetch > 0 && fetch * found > c->deadline_ms) {
        double fit = c->deadline_ms / fetch;
        return fit < (double)found ? (uint32_t)fit : found;
    }
    return found;
}

mc_status_t mc_engine_cost_calibrate(mc_engine_t *eng, mc_store_t *store, uint32_t block_tokens,
                                     uint32_t probe_blocks, mc_engine_cost_t *c)
{
    const mc_engine_model_t *m = mc_engine_model(eng);
    if (block_tokens == 0 || probe_blocks == 0 || block_tokens > (uint32_t)m->cfg.seq_len)
        return MC_ERR_INVALID_PARAMS;
    mc_engine_kv_t *kv;
    mc_status_t st = mc_engine_kv_create(m, block_tokens, &kv);
    if (st != MC_OK)
        return st;
    int32_t *tok = malloc(block_tokens * sizeof(int32_t));
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof(float));
    size_t bytes = sizeof(mc_engine_kv_hdr_t) + mc_engine_kv_block_bytes(kv);
    unsigned char *buf = malloc(bytes * probe_blocks);
    if (!tok || !logits || !buf) {
        st = MC_ERR_NO_MEMORY;
        goto out;
    }
    uint64_t s = 0x636f7374ull;
    for (uint32_t i = 0; i < block_tokens; i++)
        tok[i] = (int32_t)(mc_engine_splitmix64(&s) % (uint64_t)m->cfg.vocab_size);
    /* prefill: warm-up, then the measured run */
    double best = 0;
    for (int rep = 0; rep < 2 && st == MC_OK; rep++) {
        kv->n_tokens = 0;
        uint64_t t0 = mc_now_ns();
        st = mc_engine_prefill(eng, kv, tok, block_tokens, logits);
        best = ms_since(t0);
    }
    if (st != MC_OK)
        goto out;
    c->prefill_tokens_per_ms = best > 0 ? block_tokens / best : 0;
    if (!store)
        goto out;
    memset(buf, 0xA5, bytes * probe_blocks);
    char (*keys)[MC_ENGINE_KV_KEY_MAX] = calloc(probe_blocks, MC_ENGINE_KV_KEY_MAX);
    const char **kp = calloc(probe_blocks, sizeof(*kp));
    struct iovec *iov = calloc(probe_blocks, sizeof(*iov));
    const struct iovec **parts = calloc(probe_blocks, sizeof(*parts));
    size_t *np = calloc(probe_blocks, sizeof(*np));
    int32_t *pres = calloc(probe_blocks, sizeof(*pres));
    int64_t *gres = calloc(probe_blocks, sizeof(*gres));
    if (keys && kp && iov && parts && np && pres && gres) {
        for (uint32_t i = 0; i < probe_blocks; i++) {
            snprintf(keys[i], MC_ENGINE_KV_KEY_MAX, "mc_engine/probe/%d/%llx/%u", (int)getpid(),
                     (unsigned long long)mc_now_ns(), i);
            kp[i] = keys[i];
            iov[i] = (struct iovec){buf + i * bytes, bytes};
            parts[i] = &iov[i];
            np[i] = 1;
        }
        if (mc_store_batch_put(store, probe_blocks, kp, parts, np, NULL, true, pres) == MC_OK) {
            uint64_t t0 = mc_now_ns();
            mc_status_t g1 = mc_store_batch_get_into(store, 1, kp, parts, np, gres);
            double one = ms_since(t0);
            t0 = mc_now_ns();
            mc_status_t gn = mc_store_batch_get_into(store, probe_blocks, kp, parts, np, gres);
            double all = ms_since(t0);
            bool ok = g1 == MC_OK && gn == MC_OK;
            for (uint32_t i = 0; i < probe_blocks; i++)
                ok = ok && gres[i] == (int64_t)bytes;
            if (ok && all > one && probe_blocks > 1) {
                /* all = lat + n*b/bw and one = lat + b/bw (latency paid once per batch) */
                c->store_bytes_per_ms = (double)bytes * (probe_blocks - 1) / (all - one);
                double per = one - (double)bytes / c->store_bytes_per_ms;
                c->obj_latency_ms = per > 0 ? per / probe_blocks : 0;
            } else if (ok) {
                c->store_bytes_per_ms = one > 0 ? (double)bytes / one : 0;
                c->obj_latency_ms = 0;
            } else {
                MC_LOG_WARN("engine: store calibration get failed; fetch cost unknown");
            }
            for (uint32_t i = 0; i < probe_blocks; i++)
                (void)mc_store_remove(store, keys[i], true);
        } else {
            MC_LOG_WARN("engine: store calibration put failed; fetch cost unknown");
        }
    } else {
        st = MC_ERR_NO_MEMORY;
    }
    free(keys);
    free(kp);
    free(iov);
    free(parts);
    free(np);
    free(pres);
    free(gres);
out:
    free(tok);
    free(logits);
    free(buf);
    mc_engine_kv_free(kv);
    return st;
}

mc_status_t mc_engine_prefill_reuse(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                    uint64_t compat, const int32_t *tokens, uint32_t n,
                                    float *logits, mc_engine_reuse_stats_t *stats)
{
    return mc_engine_prefill_reuse_cost(eng, kv, store, compat, NULL, tokens, n, logits, stats);
}

mc_status_t mc_engine_prefill_reuse_cost(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                         uint64_t compat, const mc_engine_cost_t *cost,
                                         const int32_t *tokens, uint32_t n, float *logits,
                                         mc_engine_reuse_stats_t *stats)
{
    mc_engine_reuse_opts_t o = {.cost = cost};
    return mc_engine_prefill_reuse_opts(eng, kv, store, compat, &o, tokens, n, logits, stats);
}

mc_status_t mc_engine_prefill_reuse_opts(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                         uint64_t compat, const mc_engine_reuse_opts_t *opts,
                                         const int32_t *tokens, uint32_t n, float *logits,
                                         mc_engine_reuse_stats_t *stats)
{
    const mc_engine_model_t *m = mc_engine_model(eng);
    const mc_engine_cost_t *cost = opts ? opts->cost : NULL;
    const char *scope = opts ? opts->scope : NULL;
    mc_replicate_config_t place = {.replica_num = 1,
                                   .preferred_segment = opts ? opts->preferred_segment : NULL};
    const mc_replicate_config_t *pcfg = place.preferred_segment ? &place : NULL;
    uint32_t B = kv->block_tokens;
    *stats = (mc_engine_reuse_stats_t){.prompt_tokens = n};
    if (n == 0 || kv->n_tokens != 0 || n > (uint64_t)kv->n_blocks * B || !mc_engine_scope_valid(scope))
        return MC_ERR_INVALID_PARAMS;
    uint32_t full = n / B, reusable = (n - 1) / B, valid = 0;
    uint64_t *chain = calloc(full ? full : 1, sizeof(uint64_t));
    char(*keys)[MC_ENGINE_KV_KEY_MAX] = calloc(full ? full : 1, MC_ENGINE_KV_KEY_MAX);
    if (!chain || !keys) {
        free(chain);
        free(keys);
        return MC_ERR_NO_MEMORY;
    }
    mc_engine_chain_hashes(compat, tokens, B, full, chain);
    for (uint32_t i = 0; i < full; i++)
        mc_engine_kv_key_scoped(compat, scope, chain[i], keys[i]);
    if (store && reusable > 0) {
        uint64_t t0 = mc_now_ns();
        const char **kp = calloc(reusable, sizeof(*kp));
        int32_t *ex = calloc(reusable, sizeof(*ex));
        if (kp && ex) {
            for (uint32_t i = 0; i < reusable; i++)
                kp[i] = keys[i];
            if (mc_store_batch_exists(store, reusable, kp, ex) == MC_OK)
                while (stats->blocks_found < reusable && ex[stats->blocks_found] == 1)
                    stats->blocks_found++;
        }
        free(kp);
        free(ex);
        stats->lookup_ms = ms_since(t0);
        uint32_t want = stats->blocks_found;
        if (cost && want > 0)
            want = mc_engine_cost_blocks_to_fetch(
                cost, want, B, sizeof(mc_engine_kv_hdr_t) + mc_engine_kv_block_bytes(kv),
                &stats->predicted_fetch_ms, &stats->predicted_recompute_ms);
        stats->blocks_skipped = stats->blocks_found - want;
        if (want > 0) {
            t0 = mc_now_ns();
            valid = mc_engine_kv_fetch_blocks(m, kv, store, compat, chain, keys, want);
            stats->fetch_ms = ms_since(t0);
            stats->blocks_rejected = want - valid;
        }
    }
    kv->n_tokens = valid * B;
    stats->tokens_reused = valid * B;
    stats->tokens_prefilled = n - valid * B;
    uint64_t t0 = mc_now_ns();
    mc_status_t st = mc_engine_prefill(eng, kv, tokens + kv->n_tokens, n - kv->n_tokens, logits);
    stats->prefill_ms = ms_since(t0);
    if (st == MC_OK && store && full > valid) {
        t0 = mc_now_ns();
        /* blocks fetched but rejected are replaced, blocks found but not fetched (the cost
         * model's choice) are left as they are, the ones after them are created */
        uint32_t bad_end = valid + stats->blocks_rejected;
        uint32_t found = stats->blocks_found > valid ? stats->blocks_found : valid;
        stats->blocks_put =
            put_blocks_cfg(m, kv, store, compat, chain, keys, valid, bad_end, true, pcfg) +
            put_blocks_cfg(m, kv, store, compat, chain, keys, found, full, false, pcfg);
        stats->put_ms = ms_since(t0);
    }
    free(chain);
    free(keys);
    return st;
}
