/* RPC client: one TCP connection to a server ("host:port"), thread-safe, pipelined.
 *
 * Calls are serialized on the connection by a mutex (one caller at a time owns the socket for
 * the duration of its call or batch); use several clients for parallelism across threads.
 * A batch (mc_rpc_client_call_many) writes every request before reading, and matches the
 * answers by req_id, so N requests cost about one round trip.
 *
 * Every connection starts with the auth handshake (mc_auth_connect with opts->auth). A server
 * that refuses our proof, or cannot prove our secret while we hold one, fails the call with
 * MC_ERR_AUTH (the connection is not kept; the next call tries again).
 *
 * Failure model: a transport failure (connect refused, reset, EOF, bad frame from the server)
 * returns MC_ERR_RPC_FAIL and closes the socket; a deadline returns MC_ERR_RPC_TIMEOUT and
 * also closes the socket (late answers must not be mistaken for later calls). The next call
 * reconnects. Nothing is retried automatically: the caller knows which operations are
 * idempotent. A header-level error from the server (MC_ERR_NOT_SUPPORTED, MC_ERR_PROTOCOL,
 * MC_ERR_TOO_LARGE) is returned as is; operation results are in the response body's status.
 *
 * Memory: responses are unpacked with protobuf-c's default allocator; the caller owns them and
 * frees them with mc_rpc_response_free(). Requests are borrowed for the duration of the call.
 */
#ifndef MC_RPC_CLIENT_H
#define MC_RPC_CLIENT_H

#include "common/auth.h"
#include "mooncake/status.h"
#include "rpc/opcodes.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct mc_rpc_client mc_rpc_client_t;

typedef struct mc_rpc_client_opts {
    uint32_t connect_timeout_ms;  /* 0 = 3000; covers connect + auth handshake */
    const mc_auth_t *auth;        /* keyring proved to the server (borrowed: must outlive the
                                     client); NULL = no token (a server with a keyring
                                     refuses us) */
    uint32_t max_body;            /* cap on response bodies; 0 = MC_RPC_MAX_BODY */
} mc_rpc_client_opts_t;

/* Creates a client for addr ("host:port"); does not connect yet (the first call does).
 * opts may be NULL. MC_ERR_INVALID_PARAMS if addr does not parse. */
mc_status_t mc_rpc_client_create(const char *addr, const mc_rpc_client_opts_t *opts,
                                 mc_rpc_client_t **cli_p);
/* Closes the connection and frees the client. No call may be in progress. */
void mc_rpc_client_destroy(mc_rpc_client_t *cli);

/* Connects now if not connected (optional; calls connect on demand). */
mc_status_t mc_rpc_client_connect(mc_rpc_client_t *cli);

/* Drops the current connection (the next call reconnects). */
void mc_rpc_client_disconnect(mc_rpc_client_t *cli);

/* "host:port" of the server (as given to create), truncated to len - 1 bytes. */
void mc_rpc_client_peer(const mc_rpc_client_t *cli, char *out, size_t len);

/* Synchronous call: sends req (whose descriptor must be the opcode's request type) and waits
 * at most timeout_ms (0 = 10 s) for the answer. On MC_OK, *resp_p is the decoded response
 * (of the opcode's response type), owned by the caller. On error *resp_p is NULL. */
mc_status_t mc_rpc_client_call(mc_rpc_client_t *cli, uint16_t opcode, const ProtobufCMessage *req,
                               ProtobufCMessage **resp_p, uint32_t timeout_ms);
/* The same, the response unpacked with `alloc` (NULL = malloc; see mc_rpc_pending_t). */
mc_status_t mc_rpc_client_call_with(mc_rpc_client_t *cli, uint16_t opcode,
                                    const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                    uint32_t timeout_ms, ProtobufCAllocator *alloc);
/* The same, and *view_p = the answer's HA view (mc_rpc_pending_t.view; 0 without answer). */
mc_status_t mc_rpc_client_call_view(mc_rpc_client_t *cli, uint16_t opcode,
                                    const ProtobufCMessage *req, ProtobufCMessage **resp_p,
                                    uint32_t timeout_ms, ProtobufCAllocator *alloc,
                                    uint64_t *view_p);

typedef struct mc_rpc_pending {
    uint16_t opcode;               /* in */
    const ProtobufCMessage *req;   /* in, borrowed */
    ProtobufCAllocator *allocator; /* in, optional: unpack the response with it (e.g. an
                                      mc_rpc_arena_t's .pb, reset by the caller afterwards)
                                      instead of malloc; then do not call mc_rpc_response_free */
    ProtobufCMessage *resp;        /* out: owned by the caller when status == MC_OK */
    mc_status_t status;            /* out: as for mc_rpc_client_call */
    uint64_t view;                 /* out: the answer header's HA view (frame.h; 0 = none, or
                                      no answer) */
} mc_rpc_pending_t;

/* Pipelined: sends all n requests, then collects the n answers (in any order) until the shared
 * deadline. Returns MC_OK if every call got an answer (check each .status), otherwise the
 * transport error; unanswered entries carry that error and resp NULL. */
mc_status_t mc_rpc_client_call_many(mc_rpc_client_t *cli, mc_rpc_pending_t *calls, size_t n,
                                    uint32_t timeout_ms);

/* mc_rpc_client_call_many in two halves, so that the caller can work while the server answers
 * (the store's batch get reads one sub-batch's objects while the next one is looked up).
 * call_send frames and starts sending the n requests, then returns with the connection held
 * (f describes the calls in flight; calls and their requests stay borrowed); call_recv
 * finishes sending, collects the answers until the deadline (timeout_ms from call_recv: the
 * server has had at least that long, however long the caller worked in between) and
 * releases the connection, with call_many's results. Every successful call_send must be
 * followed by exactly one call_recv on the same thread, and that thread must not call this
 * client in between (it would wait for itself); other threads' calls on this client wait. On
 * an error call_send returns it, with call_many's per-call statuses, and holds nothing. With
 * nowait, a connection another caller holds gives MC_ERR_BUSY at once (nothing sent). */
typedef struct mc_rpc_inflight {
    /* private: filled by call_send, read by call_recv */
    mc_rpc_client_t *c;
    mc_rpc_pending_t *calls;
    size_t n;
    uint8_t *done;     /* done[i]: calls[i] has its answer */
    size_t answered;
    uint64_t base;     /* req_id of calls[0]; calls[i] is base + i */
    uint8_t *tx;       /* every request frame, back to back */
    size_t total, sent;
    uint64_t timeout_ns;
    uint64_t t_sent;   /* mc_now_ns() when the requests were framed (just before sending) */
} mc_rpc_inflight_t;
mc_status_t mc_rpc_client_call_send(mc_rpc_client_t *cli, mc_rpc_pending_t *calls, size_t n,
                                    uint32_t timeout_ms, bool nowait, mc_rpc_inflight_t *f);
mc_status_t mc_rpc_client_call_recv(mc_rpc_inflight_t *f);

/* How long a wait for a lone call's answer spins before it sleeps, given the busy-poll budget
 * (spin_ns, mc_net_busy_poll_ns; 0 = never spin) and when the answer is expected (due_in_ns from
 * now, by the opcode's recent answers; 0 = due or unknown): the budget when the answer is due
 * within it; until one budget past the due time when that is within MC_RPC_SPIN_AHEAD_NS (a
 * batch lookup of 128 keys takes a master 50-90 us on a 2-vCPU VM, and a thread that sleeps
 * through it is woken by the master's send, ~15-30 us more there); 0 (sleep at once) for an
 * answer due later, where a spin would only take the CPU from the server and other threads. */
#define MC_RPC_SPIN_AHEAD_NS (200u * 1000u)
uint64_t mc_rpc_spin_for(uint64_t spin_ns, uint64_t due_in_ns);

/* Frees a response returned by the calls above. NULL is a no-op. */
void mc_rpc_response_free(ProtobufCMessage *resp);

#endif
