/* RPC server loop: one epoll thread that accepts connections, reads frames, decodes bodies
 * with protobuf-c, calls the handler registered for the opcode, and writes the responses.
 *
 * Threading: everything (I/O, decoding, handlers, cron) runs on the thread that calls
 * mc_rpc_server_run(). Handlers may therefore own state without locks. Other threads talk to
 * the loop only through mc_rpc_server_post() (queue + eventfd) and mc_rpc_server_stop().
 *
 * Per loop iteration: read all ready connections and dispatch every complete frame, run the
 * cron if due, call before_reply (the master's WAL group commit: fsync once for all requests of
 * the iteration), and only then write the responses. So a response is never on the wire before
 * the state change it acknowledges is durable.
 *
 * Errors: bad magic/version or body_len over the cap -> an error frame (status
 * MC_ERR_PROTOCOL / MC_ERR_TOO_LARGE) and the connection is closed after it is flushed. Unknown
 * opcode -> error frame MC_ERR_NOT_SUPPORTED, connection kept. Undecodable body ->
 * MC_ERR_PROTOCOL, connection kept (the framing is intact). Error frames have no body.
 */
#ifndef MC_RPC_SERVER_H
#define MC_RPC_SERVER_H

#include "mooncake/status.h"
#include "rpc/arena.h"
#include "rpc/opcodes.h"

#include <stdint.h>

typedef struct mc_rpc_server mc_rpc_server_t;

/* One request being handled. Valid only during the handler call. */
typedef struct mc_rpc_call {
    mc_rpc_server_t *srv;
    uint64_t conn_id;       /* unique per accepted connection */
    uint16_t opcode;
    uint64_t req_id;
    mc_rpc_arena_t *arena;  /* for the response message and anything it points to */
} mc_rpc_call_t;

/* Handler. req is the decoded request (arena memory, borrowed for the call). On MC_OK the
 * handler sets *resp_p to a message (arena or static memory; the server packs it and then
 * forgets it). Any other return value is sent as a header-level error with no body. */
typedef mc_status_t (*mc_rpc_handler_fn)(void *ctx, mc_rpc_call_t *call,
                                         const ProtobufCMessage *req, ProtobufCMessage **resp_p);

typedef struct mc_rpc_server_opts {
    const char *host;          /* bind address, e.g. "0.0.0.0" */
    uint16_t port;             /* 0 = ephemeral (see mc_rpc_server_port) */
    void *ctx;                 /* passed to handlers and hooks */
    mc_rpc_handler_fn handlers[MC_OP_MAX];
    uint32_t cron_period_ms;   /* 0 = no cron */
    void (*cron)(void *ctx);
    void (*before_reply)(void *ctx);           /* may be NULL */
    void (*on_request)(void *ctx, uint16_t opcode, int failed); /* counters; may be NULL */
    uint32_t max_body;         /* 0 = MC_RPC_MAX_BODY */
    uint32_t max_conns;        /* 0 = 4096 */
} mc_rpc_server_opts_t;

/* Deferred replies (long polls). A handler that cannot answer yet returns MC_RPC_DEFERRED
 * (no response is sent now, *resp_p is ignored); it keeps (call->conn_id, call->opcode,
 * call->req_id) and later answers with mc_rpc_server_reply() from the loop thread (a handler,
 * the cron, or a posted task). Other requests on the same connection are answered meanwhile,
 * so answers may come out of order (clients match by req_id). The request and the call arena
 * are NOT kept: copy what is needed before returning. */
#define MC_RPC_DEFERRED ((mc_status_t)1)

/* Loop thread only: sends the answer of a deferred call. resp (borrowed; packed before return)
 * is the opcode's response message, or NULL with a non-MC_OK header status.
 * MC_ERR_RPC_FAIL when the connection is gone (nothing to do: the caller forgets the call). */
mc_status_t mc_rpc_server_reply(mc_rpc_server_t *srv, uint64_t conn_id, uint16_t opcode,
                                uint64_t req_id, mc_status_t status, const ProtobufCMessage *resp);

/* Binds and listens now (so the port is known before run). opts is copied. */
mc_status_t mc_rpc_server_create(const mc_rpc_server_opts_t *opts, mc_rpc_server_t **srv_p);
uint16_t mc_rpc_server_port(const mc_rpc_server_t *srv);

/* Runs the loop on the calling thread until mc_rpc_server_stop(). Returns MC_OK. */
mc_status_t mc_rpc_server_run(mc_rpc_server_t *srv);

/* Any thread, async-signal-safe: asks the loop to return. */
void mc_rpc_server_stop(mc_rpc_server_t *srv);

/* Any thread: run fn(arg) on the loop thread soon. MC_ERR_NO_MEMORY if it cannot queue. */
mc_status_t mc_rpc_server_post(mc_rpc_server_t *srv, void (*fn)(void *arg), void *arg);

/* Closes every connection and frees the server. Not while run() is executing. */
void mc_rpc_server_destroy(mc_rpc_server_t *srv);

#endif
