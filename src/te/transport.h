/* Transports of the transfer engine: one ops table per way of moving bytes.
 *
 * Design (full text: docs/internals/transfer-engine.md)
 *
 * Requests and slices. mc_te_batch_submit validates the whole call first (batch handle,
 * capacity, segment handles, opcodes, buffers) and only then dispatches, so a failed submit
 * leaves nothing behind. Each request is cut into slices of at most the transport's
 * max_slice bytes; the transport calls mc_te_slice_done() exactly once per slice; the last
 * slice makes the request final (COMPLETED, or FAILED/TIMEOUT with the first error).
 *
 * Choice per peer (re-made whenever its descriptor is fetched): ucx when protocol is "ucx" and
 * the peer publishes UCX information (never with "auto"); otherwise shm when protocol is
 * auto/shm, the config's force_tcp is not 1, the peer's host_id equals ours and /proc/<pid> is
 * visible; tcp otherwise. A segment named like our own local name is served in-process
 * (memcpy under the local table's in-flight reference).
 *
 * Threads. tcp: `worker_threads` event loops (epoll, level-triggered); worker 0 also owns the
 * listening socket and hands accepted connections round-robin to the loops. The same loops
 * serve incoming requests (server connections) and receive responses for our outgoing
 * requests (client connections). Submitting threads encode and send their frames themselves
 * (sendmsg of many frames under the connection lock, no hand-off); a loop finishes sends that
 * would block (EPOLLOUT). Every loop sweeps its connections every 20 ms: a client connection
 * whose oldest request passed its deadline is closed and its requests end TIMEOUT; a server
 * connection that holds buffer references without progress for the transfer timeout is
 * closed. shm: no threads; copies run in the submitting thread.
 *
 * tcp frames: see tcp_frame.h. Server answers every request with a status frame in request
 * order (READ responses carry the bytes). Client: per peer `tcp_connections` persistent
 * connections, connected lazily on submit (retry at most every 100 ms after a failure),
 * slices spread round-robin, responses matched in FIFO order and checked by id.
 *
 * shm: the owner allocates shareable memory as memfds and keeps one sealed control memfd
 * (shm_ctl.h) of MC_TE_SHM_SLOTS slots {state = gen << 1 | registered, serve_until_ns} and
 * MC_TE_SHM_LANES lanes, one per initiator process: a holder word (pid and process start time
 * in one 64-bit word) and a row of per-slot in-flight counters on cache lines of its own. Its
 * descriptor carries each buffer's shm_fd/shm_offset and, in transport_info, the control fd,
 * the slot and lane counts and the slot of every buffer. An initiator maps the control memfd
 * (size, seals and header checked against the published counts), claims a free lane (CAS 0 ->
 * its id; else reclaims one whose holder is gone; else copies through the owner: CMA or tcp),
 * maps /proc/<pid>/fd/<fd> once per peer buffer (cached), and for every copy:
 * inflight[lane][slot]++ (seq_cst), check state == (gen << 1 | 1), memcpy, inflight--.
 * Unregister clears the registered bit and then waits until every lane's counter for the slot
 * is 0, counting a lane whose holder process is gone (no such pid, another start time, or a
 * zombie without threads) as drained and reclaiming it (zero the row, free the lane); at the
 * deadline MC_ERR_BUSY and the bit is restored. The ordering argument is at
 * shm_on_unregister. Buffers without memfd on a same-host peer are copied by the OWNER with
 * process_vm_readv/writev on a tcp CMA request, so owner-side range checks still apply.
 */
#ifndef MC_TE_TRANSPORT_H
#define MC_TE_TRANSPORT_H

#include "te/engine_internal.h"
#include "te/tcp_frame.h"

/* mc_te_transport_t (a started transport: ops table + context) is in engine_internal.h. */

/* Fallback. A transport may meet requests it cannot serve itself: shm cannot copy a peer
 * buffer that has no memfd (the owner copies it on a CMA request) or whose owner does not
 * allow CMA. Requests shm cannot serve go to the fallback transport the engine hands it at
 * init (the tcp transport): the slices are passed on whole through fallback->ops->submit,
 * with s->cma set when the owner is to copy them. A transport names no other transport's
 * symbols; the engine alone knows which transport backs which. */
struct mc_te_transport_ops {
    const char *name;
    /* Start the transport for te (borrowed for the transport's lifetime). fallback: where
     * slices this transport cannot serve go (borrowed for its lifetime, started before it and
     * stopped after it); NULL for a transport that serves everything it takes. */
    mc_status_t (*init)(mc_te_t *te, const mc_te_transport_t *fallback, void **ctx_p);
    /* Stop threads, end every outstanding slice (FAILED), free everything. */
    void (*fini)(void *ctx);
    /* Largest slice this transport takes. */
    uint64_t (*max_slice)(void *ctx);
    /* Whether this transport can reach the peer described by desc. */
    bool (*can_reach)(void *ctx, const mc_segment_desc_t *desc);
    /* Take n slices for peer (desc borrowed for the call). Never fails as a whole: every slice
     * ends through mc_te_slice_done, possibly before submit returns. */
    void (*submit)(void *ctx, mc_te_peer_t *peer, mc_te_rdesc_t *desc, mc_te_slice_t **slices,
                   size_t n);
    /* Optional: b is synchronous (b->sync) and a thread is about to wait for its requests
     * [0, upto); the transport may use that thread to drive what it noted in b->held at
     * submit (receive responses, enforce deadlines) until they are final, and must hand
     * everything back before returning (keeping b->held for a later wait). The engine then
     * waits on the batch as usual for whatever others drive. */
    void (*sync_wait)(void *ctx, mc_te_batch_impl_t *b, size_t upto);
    /* Optional hooks on local registration (e.g. shm control slots, future UCX rkeys).
     * on_unregister waits until the transport no longer touches b (MC_ERR_BUSY at the
     * deadline); on_unregister_abort undoes it when the unregister is refused. */
    mc_status_t (*on_register)(void *ctx, mc_te_lbuf_t *b);
    mc_status_t (*on_unregister)(void *ctx, mc_te_lbuf_t *b, uint64_t deadline_ns);
    void (*on_unregister_abort)(void *ctx, mc_te_lbuf_t *b);
    void (*on_unregister_done)(void *ctx, mc_te_lbuf_t *b);
    /* Optional: b->serve_until_ns changed (mc_te_set_serve_until); transports whose
     * initiators copy without asking the owner (shm) publish it to them. */
    void (*on_serve_until)(void *ctx, mc_te_lbuf_t *b);
    /* Optional: JSON text for the descriptor's transport_info (heap; caller frees). */
    char *(*transport_info)(void *ctx);
    /* Optional: free peer->tp_state[...] (engine destroy). */
    void (*peer_free)(void *ctx, mc_te_peer_t *peer);
    /* Optional: fetch the peer's descriptor JSON from the peer itself (metadata
     * "P2PHANDSHAKE"), blocking, bounded by the transfer timeout. *json_p: heap
     * NUL-terminated string the caller releases with mc_free. The engine asks the first
     * started transport that has this op (tcp: a GET_DESC frame, tcp_frame.h). */
    mc_status_t (*fetch_desc)(void *ctx, const mc_te_peer_t *peer, char **json_p,
                              size_t *len_p);
    /* Optional: one control request (tcp_frame.h: NOTIFY with its body, PROBE with none) to
     * the engine serving at host:port, on a connection of its own; waits for the answer,
     * bounded by timeout_ms. Returns the answer's status, or why there was none. The engine
     * uses the first started transport that has this op (tcp), for every peer. */
    mc_status_t (*control)(void *ctx, const char *host, uint16_t port, uint16_t opcode,
                           const void *body, size_t len, uint32_t timeout_ms);
    /* Optional: whether every READ this transport serves, whatever its size, fills its
     * request's hash_out (mc_te_transfer_start_hashed, te_hashed.h) when it completes
     * (mc_te_segment_hashes_reads). A transport may still hash some reads without it. */
    bool (*hashes_reads)(void *ctx);
};

extern const mc_te_transport_ops_t mc_te_tcp_ops;
extern const mc_te_transport_ops_t mc_te_shm_ops;
#ifdef MC_HAVE_UCX
/* Optional UCP RMA transport (ucx_transport.c; design in its file comment and in
 * docs/internals/transfer-engine.md). Created only for protocol "ucx". */
extern const mc_te_transport_ops_t mc_te_ucx_ops;
#endif

/* tcp's own, in tcp_frame.c so that the frame fuzzer links it without the transport.
 * Server-side validation of one decoded request header against table t: frame checks, then
 * for READ/WRITE/CMA the range check with an in-flight reference (*b_p, release it with
 * mc_te_table_release). Returns MC_OK, MC_ERR_PROTOCOL (close), or the status to answer. */
mc_status_t mc_te_tcp_check_request(mc_te_table_t *t, const mc_te_frame_t *h,
                                    uint64_t *payload_p, mc_te_lbuf_t **b_p);

#endif
