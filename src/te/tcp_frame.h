/* Wire frame of the TE tcp transport (see transport.h and docs/internals/transfer-engine.md).
 *
 * Every message starts with a fixed 40-byte little-endian header:
 *   off  0  u32 magic    0x4554434D ("MCTE" on the wire)
 *   off  4  u16 version  1
 *   off  6  u16 opcode   request: READ 1, WRITE 2, GET_DESC 3, CMA_READ 4, CMA_WRITE 5,
 *                        NOTIFY 6, PROBE 7, GRANT 8; response: request opcode | 0x8000
 *   off  8  u64 id       opaque request id, echoed in the response
 *   off 16  u64 addr     absolute address in the serving process (requests)
 *   off 24  u64 length   bytes to move; for a response, the payload length that follows
 *   off 32  i32 status   mc_status_t (0 in requests)
 *   off 36  u32 aux      reserved, must be 0
 * Payload: WRITE requests carry `length` bytes, READ responses carry `length` bytes
 * (0 on error), GET_DESC responses carry the descriptor JSON, CMA requests carry 16 bytes
 * {u64 initiator pid, u64 initiator address}, NOTIFY requests carry `length` bytes
 * {u32 name_len, u32 msg_len, name, msg} (addr 0, length = 8 + name_len + msg_len, name and msg
 * within MC_TE_NOTIFY_NAME_MAX / MC_TE_NOTIFY_MSG_MAX); PROBE requests carry nothing (addr and
 * length 0). Both are answered with a bare status frame. GRANT requests carry `length` bytes
 * (1..MC_TE_FRAME_MAX_GRANT, addr 0, id 0): grants back to back (common/grant.h); GRANT is the
 * one request the server does not answer (a client pipelines it ahead of the READ/WRITE that
 * need it; a grant that fails to verify makes those fail with PERMISSION_DENIED).
 * Pure functions, no allocation, no I/O.
 */
#ifndef MC_TE_TCP_FRAME_H
#define MC_TE_TCP_FRAME_H

#include "mooncake/status.h"
#include "mooncake/te.h"

#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>

#define MC_TE_FRAME_MAGIC 0x4554434Du
#define MC_TE_FRAME_VERSION 1
#define MC_TE_FRAME_HDR_SIZE 40
#define MC_TE_FRAME_MAX_PAYLOAD (64ull << 20)   /* per READ/WRITE/CMA frame */
#define MC_TE_FRAME_MAX_DESC (4ull << 20)       /* GET_DESC response cap */
#define MC_TE_FRAME_CMA_PAYLOAD 16
#define MC_TE_FRAME_MAX_GRANT (128u << 10)      /* GRANT body cap (gathered in the 256 KiB rx) */
#define MC_TE_NOTIFY_HDR 8                      /* {u32 name_len, u32 msg_len} */
#define MC_TE_FRAME_MAX_NOTIFY (MC_TE_NOTIFY_HDR + MC_TE_NOTIFY_NAME_MAX + MC_TE_NOTIFY_MSG_MAX)

enum {
    MC_TE_OP_READ = 1,
    MC_TE_OP_WRITE = 2,
    MC_TE_OP_GET_DESC = 3,
    MC_TE_OP_CMA_READ = 4,  /* owner copies its memory into the initiator's (process_vm_writev) */
    MC_TE_OP_CMA_WRITE = 5, /* owner copies the initiator's memory into its own */
    MC_TE_OP_NOTIFY = 6,    /* queue a notification for mc_te_notify_drain */
    MC_TE_OP_PROBE = 7,     /* answer at once (mc_te_probe) */
    MC_TE_OP_GRANT = 8,     /* grants for the READ/WRITEs that follow; never answered */
    MC_TE_OP_LAST = MC_TE_OP_GRANT,
    MC_TE_OP_RESPONSE = 0x8000,
};

typedef struct mc_te_frame {
    uint32_t magic;
    uint16_t version;
    uint16_t opcode;
    uint64_t id;
    uint64_t addr;
    uint64_t length;
    int32_t status;
    uint32_t aux;
} mc_te_frame_t;

/* Encode h into out[0..MC_TE_FRAME_HDR_SIZE). */
void mc_te_frame_encode(const mc_te_frame_t *h, uint8_t *out);
/* Decode the first MC_TE_FRAME_HDR_SIZE bytes of buf. MC_ERR_PROTOCOL if len is too short or
 * magic, version, opcode or aux are wrong (framing is lost: the connection must be closed). */
mc_status_t mc_te_frame_decode(const uint8_t *buf, size_t len, mc_te_frame_t *h);
/* Server-side request checks on a decoded header:
 *   MC_ERR_PROTOCOL  not a request, or a frame whose payload length cannot be trusted
 *                    (WRITE over the cap, CMA without its 16-byte body...), or a GRANT that
 *                    is not {addr 0, id 0, status 0, 1 <= length <= the cap} (it has no
 *                    answer to carry an error): close;
 *   MC_ERR_TOO_LARGE READ/CMA over the cap: answer with an error, the connection stays;
 *   MC_ERR_INVALID_PARAMS nonzero status or GET_DESC with addr/length: answer with an error.
 * *payload_p receives the number of request payload bytes that follow the header. */
mc_status_t mc_te_frame_check_request(const mc_te_frame_t *h, uint64_t *payload_p);
/* Bytes of request payload that follow a request header with this opcode/length. */
uint64_t mc_te_frame_request_payload(const mc_te_frame_t *h);

/* Encode a NOTIFY body {u32 name_len, u32 msg_len, name, msg} into out (room for
 * MC_TE_NOTIFY_HDR + name_len + msg_len bytes); returns its length. Lengths must be within the
 * caps (callers check). */
size_t mc_te_notify_encode(uint8_t *out, const char *name, size_t name_len, const char *msg,
                           size_t msg_len);
/* Parse a NOTIFY body of len bytes: MC_ERR_INVALID_PARAMS unless it is exactly
 * {name_len, msg_len, name, msg} with both lengths within their caps. *name_p and *msg_p point
 * into body (not NUL-terminated). */
mc_status_t mc_te_notify_parse(const uint8_t *body, size_t len, const char **name_p,
                               size_t *name_len_p, const char **msg_p, size_t *msg_len_p);

/* Client side: what a decoded header means as the answer to the oldest outstanding request
 * (id `want_id`; `want_len` = the data bytes a successful answer carries: its length for a
 * READ, 0 otherwise; `fully_sent` = its frame and payload are all sent).
 *   MC_TE_RESP_BAD   not a response, another id, an error carrying data, a success of the
 *                    wrong length or before the request was fully sent: framing is lost, close;
 *   MC_TE_RESP_ERROR the request failed (status != 0, no data follows);
 *   MC_TE_RESP_DONE  success, no data follows;
 *   MC_TE_RESP_DATA  success, want_len (> 0) data bytes follow. */
typedef enum {
    MC_TE_RESP_BAD = 0,
    MC_TE_RESP_ERROR,
    MC_TE_RESP_DONE,
    MC_TE_RESP_DATA,
} mc_te_resp_kind_t;
mc_te_resp_kind_t mc_te_frame_classify_response(const mc_te_frame_t *h, uint64_t want_id,
                                                uint64_t want_len, bool fully_sent);

#endif
