/* Prefix reuse of the engine's KV cache through the store (public store API only).
 *
 * Keys: "mc_engine/<compat id>/<chain hash>" (16 hex digits each). The compat id hashes what
 * makes K/V bits interchangeable: the model configuration and its weights hash, block_tokens,
 * dtype (fp32), the kernel variant, the TP rank and size; a different model or layout never
 * shares a key. The chain hash of block i is XXH3-64 of its tokens seeded with the chain hash of
 * block i-1 (block 0: seeded with the compat id), so a key names a whole prefix.
 *
 * One object per block, all layers together: a 64-byte header (mc_engine_kv_hdr_t) then the
 * block exactly as in the cache (model.h). Per-block objects keep one key (one lookup, one
 * transfer) per block_tokens tokens; a block is useless to a prefill without all of its layers.
 *
 * A stored block is used only if the get returned exactly header + block bytes and the header
 * matches: magic, version, dtype, compat id, chain hash, index, shape, and the XXH3-64 of the
 * payload. Reuse stops at the first block that is missing or fails (only the valid contiguous
 * prefix is used); the rest is recomputed, and after the prefill the blocks that were found but
 * rejected are replaced (upsert), the missing ones created (put, create-once). Store errors never
 * fail a request.
 */
#ifndef MC_ENGINE_REUSE_H
#define MC_ENGINE_REUSE_H

#include "engine/model.h"
#include "mooncake/store.h"

#define MC_ENGINE_KV_MAGIC 0x564B434Du /* "MCKV" little-endian */
#define MC_ENGINE_KV_VERSION 1
#define MC_ENGINE_KV_KEY_MAX 64

typedef struct mc_engine_kv_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t dtype;          /* 0 = fp32 */
    uint64_t compat_id;
    uint64_t chain_hash;
    uint32_t block_index;
    uint32_t block_tokens;
    uint32_t n_layers;
    uint32_t kv_dim;
    uint64_t payload_bytes;
    uint64_t payload_hash;   /* XXH3-64 of the payload */
    uint64_t reserved;       /* 0 */
} mc_engine_kv_hdr_t;
_Static_assert(sizeof(mc_engine_kv_hdr_t) == 64, "stored KV header is 64 bytes");

/* kernels: the engine's variant (mc_engine_kernels_name). */
uint64_t mc_engine_compat_id(const mc_engine_model_t *m, const char *kernels,
                             uint32_t block_tokens, uint32_t tp_rank, uint32_t tp_size);
/* out[i] = chain hash of block i, i < n_blocks (tokens holds n_blocks * block_tokens). */
void mc_engine_chain_hashes(uint64_t compat_id, const int32_t *tokens, uint32_t block_tokens,
                            uint32_t n_blocks, uint64_t *out);
void mc_engine_kv_key(uint64_t compat_id, uint64_t chain_hash, char key[MC_ENGINE_KV_KEY_MAX]);

/* Per-instance keys: "mc_engine/<compat id>/<scope>/<chain hash>" (scope NULL or "" = the shared
 * key above). A scope is 1..MC_ENGINE_SCOPE_MAX characters of [A-Za-z0-9_-]. The chain hash
 * stays the text after the last '/', which is how the conductor's index names the block
 * (mc_conductor_key_hash): every instance's copy of a block indexes under the same hash, held
 * by that instance's segment. */
#define MC_ENGINE_SCOPE_MAX 16
bool mc_engine_scope_valid(const char *scope);
void mc_engine_kv_key_scoped(uint64_t compat_id, const char *scope, uint64_t chain_hash,
                             char key[MC_ENGINE_KV_KEY_MAX]);

/* When to fetch (engine-local: the conductor's cost model lives above this layer). Predicted
 * fetch time of k blocks = k * (obj_latency_ms + object bytes / store_bytes_per_ms); predicted
 * recompute time of those k blocks = k * block_tokens / prefill_tokens_per_ms. The engine
 * fetches the largest leading run of found blocks whose predicted fetch time beats their
 * recompute and fits deadline_ms (0 = no deadline); per-block costs are linear, so that is
 * either none or min(found, deadline_ms / per-block fetch time) blocks. A zero field means
 * "unknown": that side of the comparison is not made (all zero = always fetch). */
typedef struct mc_engine_cost {
    double store_bytes_per_ms;    /* measured store get bandwidth */
    double obj_latency_ms;        /* fixed cost per fetched object */
    double prefill_tokens_per_ms; /* measured prefill throughput */
    double deadline_ms;           /* fetch budget of a request; 0 = none */
} mc_engine_cost_t;

/* How many of the found leading blocks to fetch (above); block_bytes includes the header. */
uint32_t mc_engine_cost_blocks_to_fetch(const mc_engine_cost_t *c, uint32_t found,
                                        uint32_t block_tokens, size_t block_bytes,
                                        double *predicted_fetch_ms,
                                        double *predicted_recompute_ms);

/* Measure c's three rates for this engine and store: a prefill of one block (into a scratch
 * cache, after a warm-up) for the throughput; a put of `probe_blocks` block-sized objects
 * under a per-process probe key, a get of one (latency) and of all (bandwidth), then their
 * removal. deadline_ms is left as it is. store may be NULL (then only the prefill rate). */
mc_status_t mc_engine_cost_calibrate(mc_engine_t *eng, mc_store_t *store, uint32_t block_tokens,
                                     uint32_t probe_blocks, mc_engine_cost_t *c);

/* The block transfers behind prefix reuse (also used by pd.c). Block i lives in kv's slot i, is
 * stored under keys[i] with chain[i] in its header. Fetch: gets blocks [0, n) in one batch and
 * returns how many leading ones arrived whole and verified. Put: stores blocks [from, to)
 * (create-once, or upsert to replace), returns how many the store accepted. */
uint32_t mc_engine_kv_fetch_blocks(const mc_engine_model_t *m, mc_engine_kv_t *kv,
                                   mc_store_t *store, uint64_t compat, const uint64_t *chain,
                                   char (*keys)[MC_ENGINE_KV_KEY_MAX], uint32_t n);
uint32_t mc_engine_kv_put_blocks(const mc_engine_model_t *m, const mc_engine_kv_t *kv,
                                 mc_store_t *store, uint64_t compat, const uint64_t *chain,
                                 char (*keys)[MC_ENGINE_KV_KEY_MAX], uint32_t from, uint32_t to,
                                 bool upsert);

typedef struct mc_engine_reuse_stats {
    uint32_t prompt_tokens;
    uint32_t tokens_reused;     /* K/V taken from the store */
    uint32_t tokens_prefilled;  /* computed */
    uint32_t blocks_found;      /* leading blocks the store said it has */
    uint32_t blocks_rejected;   /* of those fetched: failed get or verification */
    uint32_t blocks_put;        /* blocks stored after the prefill (put or replaced) */
    uint32_t blocks_skipped;    /* found but not fetched: the cost model chose recompute */
    double predicted_fetch_ms, predicted_recompute_ms; /* of the found blocks */
    double lookup_ms, fetch_ms, prefill_ms, put_ms;
} mc_engine_reuse_stats_t;

/* Prefill tokens[0..n) into the empty cache kv, reusing the longest valid stored prefix (store
 * NULL = no reuse, no put), then put the complete blocks computed here. At least the last token
 * is always computed (its logits are needed). logits as in mc_engine_prefill. Returns
 * mc_engine_prefill's status, or MC_ERR_NO_MEMORY for the keys; store failures only reduce
 * reuse. */
mc_status_t mc_engine_prefill_reuse(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                    uint64_t compat_id, const int32_t *tokens, uint32_t n,
                                    float *logits, mc_engine_reuse_stats_t *stats);
/* The same with a cost model deciding how much of the found prefix to fetch (cost NULL =
 * always fetch, as mc_engine_prefill_reuse). The tokens not fetched are recomputed; the
 * result is bit-identical either way. */
mc_status_t mc_engine_prefill_reuse_cost(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                         uint64_t compat_id, const mc_engine_cost_t *cost,
                                         const int32_t *tokens, uint32_t n, float *logits,
                                         mc_engine_reuse_stats_t *stats);

/* Where an engine instance keeps its blocks. */
typedef struct mc_engine_reuse_opts {
    const mc_engine_cost_t *cost;  /* NULL = always fetch */
    const char *scope;             /* NULL = shared keys; else per-instance keys (above) */
    const char *preferred_segment; /* puts go to this segment first; NULL = master's placement */
} mc_engine_reuse_opts_t;

/* mc_engine_prefill_reuse_cost with opts (NULL = all defaults). An invalid scope is
 * MC_ERR_INVALID_PARAMS. */
mc_status_t mc_engine_prefill_reuse_opts(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                         uint64_t compat_id, const mc_engine_reuse_opts_t *opts,
                                         const int32_t *tokens, uint32_t n, float *logits,
                                         mc_engine_reuse_stats_t *stats);

#endif
