/* tcp frame codec (layout in tcp_frame.h): encode/decode of the 40-byte little-endian header,
 * the checks a server applies to a request header before reading its payload
 * (mc_te_frame_check_request, and mc_te_tcp_check_request adding the range check against the
 * local segment table), and the classification of a response a client receives. No I/O and
 * no state: the tcp transport and the frame fuzzer (tests/te/fuzz_tcp_frame.c) both use it.
 */
#include "te/tcp_frame.h"

#include "te/transport.h"

#include "common/bytes.h"

#include <string.h>

void mc_te_frame_encode(const mc_te_frame_t *h, uint8_t *out)
{
    mc_put_le32(out, h->magic);
    mc_put_le16(out + 4, h->version);
    mc_put_le16(out + 6, h->opcode);
    mc_put_le64(out + 8, h->id);
    mc_put_le64(out + 16, h->addr);
    mc_put_le64(out + 24, h->length);
    mc_put_le32(out + 32, (uint32_t)h->status);
    mc_put_le32(out + 36, h->aux);
}

static int opcode_known(uint16_t op)
{
    uint16_t base = op & (uint16_t)~MC_TE_OP_RESPONSE;
    return base >= MC_TE_OP_READ && base <= MC_TE_OP_LAST &&
           (op & ~(MC_TE_OP_RESPONSE | 0xF)) == 0;
}

mc_status_t mc_te_frame_decode(const uint8_t *buf, size_t len, mc_te_frame_t *h)
{
    memset(h, 0, sizeof(*h));
    if (!buf || len < MC_TE_FRAME_HDR_SIZE)
        return MC_ERR_PROTOCOL;
    h->magic = mc_get_le32(buf);
    h->version = mc_get_le16(buf + 4);
    h->opcode = mc_get_le16(buf + 6);
    h->id = mc_get_le64(buf + 8);
    h->addr = mc_get_le64(buf + 16);
    h->length = mc_get_le64(buf + 24);
    h->status = (int32_t)mc_get_le32(buf + 32);
    h->aux = mc_get_le32(buf + 36);
    if (h->magic != MC_TE_FRAME_MAGIC || h->version != MC_TE_FRAME_VERSION ||
        !opcode_known(h->opcode) || h->aux != 0)
        return MC_ERR_PROTOCOL;
    return MC_OK;
}

uint64_t mc_te_frame_request_payload(const mc_te_frame_t *h)
{
    switch (h->opcode) {
    case MC_TE_OP_WRITE:
    case MC_TE_OP_NOTIFY:
    case MC_TE_OP_GRANT:
        return h->length;
    case MC_TE_OP_CMA_READ:
    case MC_TE_OP_CMA_WRITE:
        return MC_TE_FRAME_CMA_PAYLOAD;
    default:
        return 0;
    }
}

mc_status_t mc_te_frame_check_request(const mc_te_frame_t *h, uint64_t *payload_p)
{
    *payload_p = 0;
    if (h->opcode & MC_TE_OP_RESPONSE)
        return MC_ERR_PROTOCOL;
    if ((h->opcode == MC_TE_OP_WRITE || h->opcode == MC_TE_OP_NOTIFY) &&
        h->length > MC_TE_FRAME_MAX_PAYLOAD)
        return MC_ERR_PROTOCOL; /* cannot skip an untrusted payload of that size */
    if (h->opcode == MC_TE_OP_GRANT &&
        (h->addr || h->id || h->status || h->length == 0 || h->length > MC_TE_FRAME_MAX_GRANT))
        return MC_ERR_PROTOCOL; /* unanswered: nothing could carry an error back */
    *payload_p = mc_te_frame_request_payload(h);
    if (h->status != 0)
        return MC_ERR_INVALID_PARAMS;
    switch (h->opcode) {
    case MC_TE_OP_GET_DESC:
    case MC_TE_OP_PROBE:
        return (h->addr || h->length) ? MC_ERR_INVALID_PARAMS : MC_OK;
    case MC_TE_OP_NOTIFY:
        /* the payload is read (and dropped) in every case: the connection stays */
        if (h->length > MC_TE_FRAME_MAX_NOTIFY)
            return MC_ERR_TOO_LARGE;
        return (h->addr || h->length < MC_TE_NOTIFY_HDR) ? MC_ERR_INVALID_PARAMS : MC_OK;
    case MC_TE_OP_READ:
    case MC_TE_OP_CMA_READ:
    case MC_TE_OP_CMA_WRITE:
        return h->length > MC_TE_FRAME_MAX_PAYLOAD ? MC_ERR_TOO_LARGE : MC_OK;
    default:
        return MC_OK;
    }
}

/* Declared in transport.h: frame checks, then the range check against the local table. */
mc_status_t mc_te_tcp_check_request(mc_te_table_t *t, const mc_te_frame_t *h,
                                    uint64_t *payload_p, mc_te_lbuf_t **b_p)
{
    *b_p = NULL;
    mc_status_t st = mc_te_frame_check_request(h, payload_p);
    if (st != MC_OK)
        return st;
    switch (h->opcode) {
    case MC_TE_OP_READ:
    case MC_TE_OP_WRITE:
    case MC_TE_OP_CMA_READ:
    case MC_TE_OP_CMA_WRITE:
        return mc_te_table_acquire_served(t, h->addr, h->length, b_p);
    default:
        return MC_OK;
    }
}

size_t mc_te_notify_encode(uint8_t *out, const char *name, size_t name_len, const char *msg,
                           size_t msg_len)
{
    mc_put_le32(out, (uint32_t)name_len);
    mc_put_le32(out + 4, (uint32_t)msg_len);
    if (name_len)
        memcpy(out + MC_TE_NOTIFY_HDR, name, name_len);
    if (msg_len)
        memcpy(out + MC_TE_NOTIFY_HDR + name_len, msg, msg_len);
    return MC_TE_NOTIFY_HDR + name_len + msg_len;
}

mc_status_t mc_te_notify_parse(const uint8_t *body, size_t len, const char **name_p,
                               size_t *name_len_p, const char **msg_p, size_t *msg_len_p)
{
    if (!body || len < MC_TE_NOTIFY_HDR)
        return MC_ERR_INVALID_PARAMS;
    uint64_t nl = mc_get_le32(body), ml = mc_get_le32(body + 4);
    if (nl > MC_TE_NOTIFY_NAME_MAX || ml > MC_TE_NOTIFY_MSG_MAX ||
        MC_TE_NOTIFY_HDR + nl + ml != len)
        return MC_ERR_INVALID_PARAMS;
    *name_p = (const char *)body + MC_TE_NOTIFY_HDR;
    *name_len_p = (size_t)nl;
    *msg_p = (const char *)body + MC_TE_NOTIFY_HDR + nl;
    *msg_len_p = (size_t)ml;
    return MC_OK;
}

mc_te_resp_kind_t mc_te_frame_classify_response(const mc_te_frame_t *h, uint64_t want_id,
                                                uint64_t want_len, bool fully_sent)
{
    if (!(h->opcode & MC_TE_OP_RESPONSE) || h->id != want_id)
        return MC_TE_RESP_BAD;
    if (h->status != MC_OK)
        return h->length == 0 ? MC_TE_RESP_ERROR : MC_TE_RESP_BAD;
    if (!fully_sent || h->length != want_len)
        return MC_TE_RESP_BAD;
    return want_len > 0 ? MC_TE_RESP_DATA : MC_TE_RESP_DONE;
}
