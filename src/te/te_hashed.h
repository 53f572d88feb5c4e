/* Reads that the engine checksums while it copies them: for the store client, which verifies
 * every value it reads against its XXH3-64 (docs/internals/store-client.md). A same-host read
 * is a copy by the submitting thread (shm, or this engine's own segment); hashing the bytes in
 * that same pass (mc_hash64_copy) costs no second read of the value. Internal. */
#ifndef MC_TE_TE_HASHED_H
#define MC_TE_TE_HASHED_H

#include "mooncake/te.h"

#include <stdbool.h>
#include <stdint.h>

/* Per request: hashed = the engine copied the request's bytes itself, in one piece, and hash
 * is the XXH3-64 (seed 0) of exactly the bytes it wrote to the request's local memory. */
typedef struct mc_te_read_hash {
    uint64_t hash;
    bool hashed;
} mc_te_read_hash_t;

/* mc_te_transfer_start (reserved: mc_te_transfer_start_reserved), and for every READ that is
 * copied in one piece by this engine (same host: shm, or our own segment; at most the shm
 * slice size) hashes[i] is filled before request i becomes final. hashes[i].hashed stays false
 * for every other request (tcp, CMA, ucx, writes, failed copies): the caller hashes those
 * itself. hashes (n entries) must stay valid until the transfer has been waited for; they are
 * cleared here. */
mc_status_t mc_te_transfer_start_hashed(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                        bool reserved, mc_te_read_hash_t *hashes,
                                        mc_te_transfer_t **xfer_p);

/* Whether READs from seg are copies by this engine that mc_te_transfer_start_hashed hashes:
 * our own segment, or a peer reached over shm (a buffer of it that is not memfd-backed still
 * goes over CMA or tcp, unhashed). False when the peer's descriptor cannot be had. */
bool mc_te_segment_hashes_reads(mc_te_t *te, mc_te_segment_t seg);

#endif
