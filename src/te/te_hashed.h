/* Reads that the engine checksums while it copies them: for the store client, which verifies
 * every value it reads against its XXH3-64 (docs/internals/store-client.md). A same-host read
 * is a copy by the submitting thread (shm, or this engine's own segment); hashing the bytes in
 * that same pass (mc_hash64_copy) costs no second read of the value. A tcp read is hashed by
 * whoever receives it, piece by piece right after each recv() landed it (tcp_transport.c,
 * cli_hash_*), when one connection received all of it in order. Internal. */
#ifndef MC_TE_TE_HASHED_H
#define MC_TE_TE_HASHED_H

#include "common/hash.h"
#include "mooncake/te.h"

#include <stdbool.h>
#include <stdint.h>

/* Per request: hashed = the engine saw every byte of the request land, in order (its own copy
 * in one piece, or one tcp connection's receives), and hash is the XXH3-64 (seed 0) of exactly
 * the bytes it wrote to the request's local memory.
 *
 * cont, an input (the caller sets it in every entry; mc_te_transfer_start_hashed keeps it):
 * NULL, or a running XXH3 stream the request's bytes continue, for a value read in ranges one
 * after another. Then, when hashed, the engine has fed exactly the request's bytes, in order,
 * into *cont (hash is left 0); when not hashed, *cont is as the caller left it (a tcp chain
 * works on a copy of it and hands it over only whole). The caller neither reads nor updates
 * *cont until the transfer has been waited for, nor lets two requests in flight share it. */
typedef struct mc_te_read_hash {
    uint64_t hash;
    bool hashed;
    mc_hash_stream_t *cont;
} mc_te_read_hash_t;

/* mc_te_transfer_start (reserved: mc_te_transfer_start_reserved), and for every READ that is
 * copied in one piece by this engine (same host: shm, or our own segment; at most the shm
 * slice size) or received whole on one tcp connection (every slice, in order) hashes[i] is
 * filled before request i becomes final. hashes[i].hashed stays false for every other request
 * (a tcp READ striped over several connections, CMA, ucx, writes, failed copies or receives):
 * the caller hashes those itself. hashes (n entries) must stay valid until the transfer has
 * been waited for; they are cleared here, all but their cont. */
mc_status_t mc_te_transfer_start_hashed(mc_te_t *te, const mc_te_request_t *reqs, size_t n,
                                        bool reserved, mc_te_read_hash_t *hashes,
                                        mc_te_transfer_t **xfer_p);

/* Whether READs from seg, of any size, come back hashed from mc_te_transfer_start_hashed: our
 * own segment, a peer reached over shm (a buffer of it that is not memfd-backed still goes
 * over CMA, unhashed), or a peer reached over tcp when one transfer uses one connection
 * (stripe width 1). False when the peer's descriptor cannot be had. */
bool mc_te_segment_hashes_reads(mc_te_t *te, mc_te_segment_t seg);

#endif
