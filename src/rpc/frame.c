#include "rpc/frame.h"

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
static uint16_t get16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static uint64_t get64(const uint8_t *p) { return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32); }

void mc_rpc_hdr_encode(const mc_rpc_hdr_t *hdr, uint8_t out[MC_RPC_HDR_SIZE])
{
    put32(out + 0, MC_RPC_MAGIC);
    put16(out + 4, MC_RPC_VERSION);
    put16(out + 6, hdr->opcode);
    put16(out + 8, hdr->flags);
    put16(out + 10, 0);
    put32(out + 12, (uint32_t)hdr->status);
    put32(out + 16, hdr->body_len);
    put64(out + 20, hdr->req_id);
    put32(out + 28, 0);
}

mc_status_t mc_rpc_hdr_decode(const uint8_t in[MC_RPC_HDR_SIZE], uint32_t max_body,
                              mc_rpc_hdr_t *hdr)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->magic = get32(in);
    if (hdr->magic != MC_RPC_MAGIC)
        return MC_ERR_PROTOCOL;
    hdr->version = get16(in + 4);
    hdr->opcode = get16(in + 6);
    hdr->flags = get16(in + 8);
    hdr->status = (int32_t)get32(in + 12);
    hdr->body_len = get32(in + 16);
    hdr->req_id = get64(in + 20);
    if (hdr->version != MC_RPC_VERSION)
        return MC_ERR_PROTOCOL;
    if (hdr->body_len > max_body)
        return MC_ERR_TOO_LARGE;
    return MC_OK;
}
