/* Wire of the standalone real-client service (mooncake_client serving dummy clients on the same
 * host): socket name, opcodes, caps, framed send/receive with SCM_RIGHTS, request checks.
 * Shared by the server (real_service.c), the dummy (dummy_client.c) and the fuzz target.
 *
 * A message is the master RPC's 32-byte frame header (rpc/frame.h: magic, version, opcode,
 * flags, status, body_len <= MC_RC_MAX_BODY, req_id) followed by a protobuf-c body
 * (src/rpc/proto/real_client.proto): RcRequest from the dummy, RcResponse back (flag
 * MC_RPC_FLAG_RESPONSE, the request's opcode and req_id echoed). A REGISTER request carries one
 * memfd as SCM_RIGHTS on its header. docs/internals/store-client.md, "Standalone real client and
 * dummy clients". */
#ifndef MC_CLIENT_RC_WIRE_H
#define MC_CLIENT_RC_WIRE_H

#include "mooncake/status.h"
#include "rpc/frame.h"
#include "rpc/real_client.pb-c.h"
#include "rpc/wire_key.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/* Abstract Unix socket name (no file): "\0mooncake_client_<port>.sock", as upstream. */
#define MC_RC_SOCK_FMT "mooncake_client_%u.sock"
#define MC_RC_DEFAULT_PORT 50052

typedef enum mc_rc_op {
    MC_RC_OP_HELLO = 1,        /* a new dummy: answer client_id */
    MC_RC_OP_ATTACH = 2,       /* one more connection of dummy client_id */
    MC_RC_OP_REGISTER = 3,     /* map + TE-register a memfd region (fd as SCM_RIGHTS) */
    MC_RC_OP_UNREGISTER = 4,   /* unregister + unmap the region at region_base */
    MC_RC_OP_PING = 5,         /* liveness; status = the store's health */
    MC_RC_OP_PUT = 6,          /* keys + values (bytes shipped in the message) */
    MC_RC_OP_GET = 7,          /* keys -> values (bytes shipped back) */
    MC_RC_OP_PUT_FROM = 8,     /* keys + slices of registered regions */
    MC_RC_OP_GET_INTO = 9,     /* keys + slices of registered regions -> bytes per key */
    MC_RC_OP_EXIST = 10,       /* keys -> 1/0/negative */
    MC_RC_OP_GET_SIZE = 11,    /* keys -> size or negative */
    MC_RC_OP_REMOVE = 12,      /* keys (+ force) -> status per key */
    MC_RC_OP_REMOVE_REGEX = 13,/* regex (+ force) -> count */
    MC_RC_OP_REMOVE_ALL = 14,  /* (+ force) -> count */
    MC_RC_OP_STATS = 15,       /* regions, dummies, region_bytes */
    MC_RC_OP_MAX
} mc_rc_op_t;

/* Caps. Everything over a cap is refused (MC_ERR_TOO_LARGE / MC_ERR_INVALID_PARAMS) and the
 * connection keeps serving when the framing is intact. */
#define MC_RC_MAX_BODY (64u << 20)       /* one message (both directions); byte put/get values */
#define MC_RC_MAX_KEYS 16384u            /* keys per request */
#define MC_RC_MAX_SLICES 65536u          /* slices per request (all keys) */
#define MC_RC_MAX_SLICES_PER_KEY 1024u
#define MC_RC_MAX_REGIONS 1024u          /* regions per dummy */
#define MC_RC_MAX_REGION_SIZE (1ull << 40)
#define MC_RC_MAX_DUMMIES 256u           /* dummies attached at once */
#define MC_RC_MAX_CONNS 512u             /* connections at once, all dummies */
#define MC_RC_MAX_PREFERRED 64u

/* Timing. */
#define MC_RC_PING_MS 1000u              /* a dummy pings this often */
#define MC_RC_DUMMY_TTL_MS 10000u        /* a dummy silent this long is dropped (regions unmapped) */
#define MC_RC_FRAME_MS 10000u            /* the rest of a frame, once its first byte arrived */
#define MC_RC_CALL_MS 30000u             /* default deadline of a dummy's call */

/* Fills sa with the abstract address of port; *len_p is the length to pass to bind/connect. */
void mc_rc_sockaddr(uint16_t port, struct sockaddr_un *sa, socklen_t *len_p);

/* Sends header + packed msg (msg may be NULL: empty body) and, if pass_fd >= 0, that fd as
 * SCM_RIGHTS on the first byte. Waits at most until deadline_ns (0 = none). */
mc_status_t mc_rc_send(int fd, uint16_t op, uint16_t flags, int32_t status, uint64_t req_id,
                       const ProtobufCMessage *msg, int pass_fd, uint64_t deadline_ns);

/* Receives one frame: the header into *h, the body into *body_p (malloc'd, caller frees; NULL
 * when empty). A descriptor that came with it goes to *fd_p (else -1; with fd_p NULL any
 * descriptor received is closed). MC_ERR_PROTOCOL / MC_ERR_TOO_LARGE: the stream is broken;
 * MC_ERR_CONNECTION on EOF; MC_ERR_TIMEOUT. first_deadline_ns bounds the wait for the first
 * byte (0 = none), then the rest of the frame has until rest_deadline_ns (absolute), or
 * MC_RC_FRAME_MS after the first byte when rest_deadline_ns is 0. */
mc_status_t mc_rc_recv(int fd, mc_rpc_hdr_t *h, uint8_t **body_p, int *fd_p,
                       uint64_t first_deadline_ns, uint64_t rest_deadline_ns);

/* Checks a decoded request of op against the caps: key counts and lengths (non-empty, at most
 * MC_STORE_KEY_MAX, no NUL), one value per key (PUT), slice counts adding up (PUT_FROM /
 * GET_INTO) and no empty or wrapping slice, preferred segments. MC_OK, MC_ERR_TOO_LARGE or
 * MC_ERR_INVALID_PARAMS. Does not look at regions (the server does). */
mc_status_t mc_rc_request_check(uint16_t op, const McRc__RcRequest *r);

/* pthread_create for the service's and the dummy's threads, which take no asynchronous
 * signals: a program's handler (mooncake_client's SIGTERM) runs on its own threads, never on
 * one of these. Returns pthread_create's result. */
int mc_rc_thread_start(pthread_t *t, void *(*fn)(void *), void *arg);

/* Opcode name for logs ("?" for unknown). */
const char *mc_rc_op_name(uint16_t op);

#endif
