/* Prefill/decode disaggregation through the store: a prefill process computes a request's KV and
 * hands it to a decode process (another host) through the store.
 *
 * What the prefill side stores (mc_engine_pd_prefill):
 *  - every complete block under its shared prefix key (reuse.h; blocks already stored are
 *    reused, not written again);
 *  - the last partial block, if any, under the request-scoped key
 *    "mc_engine/<compat id>/req/<request id>/tail" (a partial block is never shared: another
 *    request continuing the same tokens would compute different positions after it), with the
 *    same 64-byte header as a shared block (its chain hash: XXH3-64 of the tail's tokens seeded
 *    with the previous block's chain hash);
 *  - last, the handoff record under "mc_engine/<compat id>/req/<request id>/handoff": a
 *    64-byte mc_engine_pd_hdr_t (request id, compat id = the layout, token count, block size,
 *    block counts, vocab size, hashes of the tokens and of the logits, completion status), then
 *    the prompt's token ids (int32), then the last token's logits (fp32). Written after the KV,
 *    so a record that exists means the KV was stored.
 *
 * The decode side (mc_engine_pd_receive) polls for the record until its deadline, refuses a
 * record that is malformed, too large for its cache, of another layout (compat id) or vocab, or
 * whose hashes do not match (MC_ERR_PROTOCOL / MC_ERR_INVALID_PARAMS / MC_ERR_CHECKSUM), fetches
 * the blocks with the same verification as prefix reuse, recomputes from the first block that is
 * missing or fails (the recomputed logits must hash to the record's: MC_ERR_CHECKSUM
 * otherwise), then removes the request-scoped keys. The result is bit-identical to a colocated
 * prefill. */
#ifndef MC_ENGINE_PD_H
#define MC_ENGINE_PD_H

#include "engine/reuse.h"

#define MC_ENGINE_PD_MAGIC 0x44504D4Du /* "MMPD" little-endian */
#define MC_ENGINE_PD_VERSION 1

typedef struct mc_engine_pd_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t status;       /* 0 = prefill complete */
    uint64_t compat_id;
    uint64_t request_id;
    uint32_t n_tokens;
    uint32_t block_tokens;
    uint32_t n_full;       /* complete blocks, under shared keys */
    uint32_t tail_tokens;  /* tokens in the request-scoped tail block (0 = none) */
    uint32_t vocab_size;
    uint32_t reserved;     /* 0 */
    uint64_t tokens_hash;  /* XXH3-64 of the n_tokens int32 token ids */
    uint64_t logits_hash;  /* XXH3-64 of the vocab_size fp32 logits */
} mc_engine_pd_hdr_t;
_Static_assert(sizeof(mc_engine_pd_hdr_t) == 64, "handoff header is 64 bytes");

/* "mc_engine/<compat>/req/<request id>/<what>" (what: "tail" or "handoff"; 55 bytes at most). */
void mc_engine_pd_key(uint64_t compat_id, uint64_t request_id, const char *what,
                      char key[MC_ENGINE_KV_KEY_MAX]);

/* Prefill tokens[0..n) into the empty cache kv with prefix reuse (cost may be NULL), store the
 * complete blocks, the tail block and then the handoff record. logits receives the last token's
 * logits. Returns the prefill's status, or the store's status if the tail or the record could
 * not be stored (then no decode process can take the request). */
mc_status_t mc_engine_pd_prefill(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                 uint64_t compat_id, const mc_engine_cost_t *cost,
                                 uint64_t request_id, const int32_t *tokens, uint32_t n,
                                 float *logits, mc_engine_reuse_stats_t *stats);

typedef struct mc_engine_pd_stats {
    uint32_t n_tokens;
    uint32_t tokens_fetched;    /* K/V taken from the store */
    uint32_t tokens_recomputed; /* missing or rejected blocks recomputed here */
    double wait_ms, fetch_ms, recompute_ms;
} mc_engine_pd_stats_t;

/* Wait up to timeout_ms for request_id's handoff record, then fill the empty cache kv with its
 * KV (kv->n_tokens = the prompt's length) and logits with the last token's logits, ready for
 * mc_engine_decode. *tokens_p (owned, free) receives the prompt. MC_ERR_TIMEOUT when no record
 * appeared in time. */
mc_status_t mc_engine_pd_receive(mc_engine_t *eng, mc_engine_kv_t *kv, mc_store_t *store,
                                 uint64_t compat_id, uint64_t request_id, uint32_t timeout_ms,
                                 int32_t **tokens_p, float *logits, mc_engine_pd_stats_t *stats);

#endif
