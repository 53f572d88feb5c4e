#include "te/tcp_frame.h"

#include "te/transport.h"

#include <string.h>

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void mc_te_frame_encode(const mc_te_frame_t *h, uint8_t *out)
{
    put32(out, h->magic);
    put16(out + 4, h->version);
    put16(out + 6, h->opcode);
    put64(out + 8, h->id);
    put64(out + 16, h->addr);
    put64(out + 24, h->length);
    put32(out + 32, (uint32_t)h->status);
    put32(out + 36, h->aux);
}

static int opcode_known(uint16_t op)
{
    uint16_t base = op & (uint16_t)~MC_TE_OP_RESPONSE;
    return base >= MC_TE_OP_READ && base <= MC_TE_OP_CMA_WRITE &&
           (op & ~(MC_TE_OP_RESPONSE | 0x7)) == 0;
}

mc_status_t mc_te_frame_decode(const uint8_t *buf, size_t len, mc_te_frame_t *h)
{
    memset(h, 0, sizeof(*h));
    if (!buf || len < MC_TE_FRAME_HDR_SIZE)
        return MC_ERR_PROTOCOL;
    h->magic = get32(buf);
    h->version = get16(buf + 4);
    h->opcode = get16(buf + 6);
    h->id = get64(buf + 8);
    h->addr = get64(buf + 16);
    h->length = get64(buf + 24);
    h->status = (int32_t)get32(buf + 32);
    h->aux = get32(buf + 36);
    if (h->magic != MC_TE_FRAME_MAGIC || h->version != MC_TE_FRAME_VERSION ||
        !opcode_known(h->opcode) || h->aux != 0)
        return MC_ERR_PROTOCOL;
    return MC_OK;
}

uint64_t mc_te_frame_request_payload(const mc_te_frame_t *h)
{
    switch (h->opcode) {
    case MC_TE_OP_WRITE:
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
    if (h->opcode == MC_TE_OP_WRITE && h->length > MC_TE_FRAME_MAX_PAYLOAD)
        return MC_ERR_PROTOCOL; /* cannot skip an untrusted payload of that size */
    *payload_p = mc_te_frame_request_payload(h);
    if (h->status != 0)
        return MC_ERR_INVALID_PARAMS;
    switch (h->opcode) {
    case MC_TE_OP_GET_DESC:
        return (h->addr || h->length) ? MC_ERR_INVALID_PARAMS : MC_OK;
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
        return mc_te_table_acquire(t, h->addr, h->length, b_p);
    default:
        return MC_OK;
    }
}
