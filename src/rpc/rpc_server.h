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
 * the state change it acknowledges is durable. before_reply may instead hand out a ticket (a
 * replicated append still in flight): the iteration's answers are then held, in order per
 * connection, until that ticket is released, while the loop goes on serving; answers a
 * handler marked light (mc_rpc_call_t.light) wait only for a second, earlier ticket.
 *
 * Authentication: every accepted connection first gets the auth HELLO (common/auth.h); the
 * first MC_AUTH_PROOF_SIZE bytes it sends are the PROOF, answered with the RESULT. Frames are
 * read only after a valid PROOF; a bad one gets its RESULT and the connection is closed, and
 * one that has not proved within handshake_timeout_ms is closed. Without a keyring (auth NULL)
 * every well-formed PROOF passes and the peer is admin.
 *
 * Budgets (mc_rpc_limits_t; 0 = the default named there): the bytes of buffered requests
 * (received, plus the rest of a declared incomplete frame) and queued answers of all
 * connections are counted against mem_budget. A frame over 4 KiB whose declared size does not
 * fit in what is left of it is refused (error frame MC_ERR_BUSY; nothing of its body is
 * buffered) and the connection closed. A connection is not read (nor are its buffered frames
 * run) while its queued answers exceed conn_out_cap, or while the server is over its budget
 * and the connection has answers not yet delivered; one that stays so, or is closing with
 * bytes it cannot deliver, without its answers draining for blocked_timeout_ms is closed. A
 * request arriving while max_inflight of the connection's requests are deferred is answered
 * MC_ERR_BUSY. A connection with no complete frame and no deferred answer for idle_timeout_ms
 * (and nothing deferred or queued) is closed, and so is one with a frame started but
 * incomplete after slow_timeout_ms. At max_conns, the oldest connection that has not completed the handshake
 * is closed to make room; when there is none, the new connection is refused.
 *
 * Errors: bad magic/version or body_len over the cap -> an error frame (status
 * MC_ERR_PROTOCOL / MC_ERR_TOO_LARGE) and the connection is closed after it is flushed. Unknown
 * opcode -> error frame MC_ERR_NOT_SUPPORTED, connection kept. Undecodable body ->
 * MC_ERR_PROTOCOL, connection kept (the framing is intact). Error frames have no body.
 */
#ifndef MC_RPC_SERVER_H
#define MC_RPC_SERVER_H

#include "mooncake/status.h"
#include "common/auth.h"
#include "common/tenant.h"
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
    const mc_auth_peer_t *peer; /* who proved what on this connection; NULL = in-process caller */
    /* The tenant the request acts for, set by the application's authorization before its
     * handler runs (the master: master_rpc.c, authorize); NULL = not decided. */
    const mc_tenant_scope_t *scope;
    /* Set by the handler (default false): the answer acknowledges no change and depends only
     * on changes that before_reply's *light_p ticket covers, so it is held only for that
     * ticket (or behind earlier answers of its connection: order). */
    bool light;
    /* Set by the handler (default false): the answer shows no change that is not durable
     * yet (an HA standby's log fetch, whose acknowledgement the held answers wait for; an HA
     * leader's read of keys no append in flight changed), so it is never held; it still
     * leaves after the answers queued before it on its connection. */
    bool unheld;
} mc_rpc_call_t;

/* Handler. req is the decoded request (arena memory, borrowed for the call). On MC_OK the
 * handler sets *resp_p to a message (arena or static memory; the server packs it and then
 * forgets it). Any other return value is sent as a header-level error with no body. */
typedef mc_status_t (*mc_rpc_handler_fn)(void *ctx, mc_rpc_call_t *call,
                                         const ProtobufCMessage *req, ProtobufCMessage **resp_p);

/* Caps and timeouts of the server (0 = the default). */
#define MC_RPC_DEFAULT_MEM_BUDGET (256ull << 20)
#define MC_RPC_DEFAULT_CONN_OUT_CAP (1u << 20)
#define MC_RPC_DEFAULT_BLOCKED_TIMEOUT_MS 30000u
#define MC_RPC_DEFAULT_MAX_INFLIGHT 64u
#define MC_RPC_DEFAULT_IDLE_TIMEOUT_MS 120000u
#define MC_RPC_DEFAULT_SLOW_TIMEOUT_MS 30000u
#define MC_RPC_DEFAULT_MAX_CONNS 4096u
typedef struct mc_rpc_limits {
    uint64_t mem_budget;          /* bytes of buffered requests + queued answers, all conns */
    uint32_t conn_out_cap;        /* queued answer bytes past which a conn is not read */
    uint32_t blocked_timeout_ms;  /* not read and not draining this long -> closed */
    uint32_t max_inflight;        /* deferred requests per conn; more -> MC_ERR_BUSY */
    uint32_t idle_timeout_ms;     /* no complete frame nor deferred answer this long -> closed */
    uint32_t slow_timeout_ms;     /* a frame started, incomplete this long -> closed */
    uint32_t handshake_timeout_ms; /* 0 = MC_AUTH_HANDSHAKE_TIMEOUT_MS */
    uint32_t max_conns;           /* open connections */
} mc_rpc_limits_t;

/* Counters (monotonic unless noted), readable from any thread (mc_rpc_server_stats). */
typedef struct mc_rpc_server_stats {
    uint64_t conns;            /* open now */
    uint64_t buffered_bytes;   /* buffered requests + queued answers now */
    uint64_t backpressure;     /* times a connection stopped being read */
    uint64_t busy;             /* requests answered MC_ERR_BUSY (max_inflight) */
    uint64_t closed_idle, closed_slow, closed_blocked, closed_budget;
    uint64_t closed_unauth;    /* no valid PROOF in time, or closed at max_conns unproven */
    uint64_t auth_failed;      /* PROOFs refused (wrong or missing token, not a PROOF) */
    uint64_t refused;          /* accepted and closed at max_conns (nobody unproven to close) */
} mc_rpc_server_stats_t;

typedef struct mc_rpc_server_opts {
    const char *host;          /* bind address, e.g. "0.0.0.0" */
    uint16_t port;             /* 0 = ephemeral (see mc_rpc_server_port) */
    /* NULL, or a socket already bound and not listening (mc_net_reserve; an HA standby's
     * reserved RPC address): the server listens on it instead of binding host:port (which then
     * only name it). Ownership moves only when the server is created: *bound_fd is then set
     * to -1 and the server closes the socket; on failure it stays the caller's. */
    int *bound_fd;
    void *ctx;                 /* passed to handlers and hooks */
    mc_rpc_handler_fn handlers[MC_OP_MAX];
    uint32_t cron_period_ms;   /* 0 = no cron */
    void (*cron)(void *ctx);
    /* may be NULL; called once per loop iteration that has answers to write: returns 0 when
     * they may be written now, or a ticket: they (and every later answer of the same
     * connections) are held until mc_rpc_server_release(ticket). *light_p (preset to the
     * returned ticket; a larger value counts as it) is the ticket for this iteration's light
     * answers (mc_rpc_call_t.light). */
    uint64_t (*before_reply)(void *ctx, uint64_t *light_p);
    void (*on_request)(void *ctx, uint16_t opcode, int failed); /* counters; may be NULL */
    uint32_t max_body;         /* 0 = MC_RPC_MAX_BODY */
    const mc_auth_t *auth;     /* keyring (borrowed, outlives the server); NULL = open */
    mc_rpc_limits_t limits;
    uint64_t view;             /* HA leader: its view version, carried in the header of every
                                  answer (frame.h; <= MC_RPC_VIEW_MAX); 0 = no HA */
    /* After the last event, the loop polls its sockets without sleeping for up to this long
     * (at most MC_RPC_BUSY_POLL_MAX_US) before it blocks: a request arriving meanwhile does not
     * wait for the loop thread to be woken (15-30 us on a VM whose idle vCPU halts). Costs a
     * core while requests come less than this far apart. 0 = block at once. */
    uint32_t busy_poll_us;
} mc_rpc_server_opts_t;
#define MC_RPC_BUSY_POLL_MAX_US 10000u

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

/* The same for an answer that is never held (mc_rpc_call_t.unheld). */
mc_status_t mc_rpc_server_reply_unheld(mc_rpc_server_t *srv, uint64_t conn_id, uint16_t opcode,
                                       uint64_t req_id, mc_status_t status,
                                       const ProtobufCMessage *resp);

/* Any thread: answers held for tickets <= ticket may be written (the loop is woken; called on
 * the loop thread itself, the loop applies it without a wake-up before it next waits). Tickets
 * are released in increasing order; held answers count against mem_budget and conn_out_cap
 * like queued ones, so a connection with too many held answers is not read. */
void mc_rpc_server_release(mc_rpc_server_t *srv, uint64_t ticket);

/* Binds (or takes opts->bound_fd) and listens now (so the port is known before run). opts is
 * copied. */
mc_status_t mc_rpc_server_create(const mc_rpc_server_opts_t *opts, mc_rpc_server_t **srv_p);
uint16_t mc_rpc_server_port(const mc_rpc_server_t *srv);
/* The keyring the server checks peers with (opts.auth); NULL = open. */
const mc_auth_t *mc_rpc_server_keyring(const mc_rpc_server_t *srv);

/* Runs the loop on the calling thread until mc_rpc_server_stop(). Returns MC_OK. */
mc_status_t mc_rpc_server_run(mc_rpc_server_t *srv);

/* Any thread: a snapshot of the counters. */
void mc_rpc_server_stats(const mc_rpc_server_t *srv, mc_rpc_server_stats_t *out);

/* Any thread, async-signal-safe: asks the loop to return. */
void mc_rpc_server_stop(mc_rpc_server_t *srv);

/* Any thread: run fn(arg) on the loop thread soon. MC_ERR_NO_MEMORY if it cannot queue. */
mc_status_t mc_rpc_server_post(mc_rpc_server_t *srv, void (*fn)(void *arg), void *arg);

/* Closes every connection and frees the server. Not while run() is executing. */
void mc_rpc_server_destroy(mc_rpc_server_t *srv);

#endif
