/* Codec of the 32-byte RPC frame header (layout in frame.h and wire-protocol.md). Decoding
 * checks magic, version and body_len against the caller's cap and nothing else; it never
 * allocates and is safe on any 32 bytes. */
#include "rpc/frame.h"

#include "common/bytes.h"

#include <string.h>


void mc_rpc_hdr_encode(const mc_rpc_hdr_t *hdr, uint8_t out[MC_RPC_HDR_SIZE])
{
    mc_put_le32(out + 0, MC_RPC_MAGIC);
    mc_put_le16(out + 4, MC_RPC_VERSION);
    mc_put_le16(out + 6, hdr->opcode);
    mc_put_le16(out + 8, hdr->flags);
    mc_put_le16(out + 10, (uint16_t)((hdr->view & MC_RPC_VIEW_MAX) >> 32));
    mc_put_le32(out + 12, (uint32_t)hdr->status);
    mc_put_le32(out + 16, hdr->body_len);
    mc_put_le64(out + 20, hdr->req_id);
    mc_put_le32(out + 28, (uint32_t)hdr->view);
}

mc_status_t mc_rpc_hdr_decode(const uint8_t in[MC_RPC_HDR_SIZE], uint32_t max_body,
                              mc_rpc_hdr_t *hdr)
{
    memset(hdr, 0, sizeof(*hdr));
    hdr->magic = mc_get_le32(in);
    if (hdr->magic != MC_RPC_MAGIC)
        return MC_ERR_PROTOCOL;
    hdr->version = mc_get_le16(in + 4);
    hdr->opcode = mc_get_le16(in + 6);
    hdr->flags = mc_get_le16(in + 8);
    hdr->status = (int32_t)mc_get_le32(in + 12);
    hdr->body_len = mc_get_le32(in + 16);
    hdr->req_id = mc_get_le64(in + 20);
    hdr->view = (uint64_t)mc_get_le16(in + 10) << 32 | mc_get_le32(in + 28);
    if (hdr->version != MC_RPC_VERSION)
        return MC_ERR_PROTOCOL;
    if (hdr->body_len > max_body)
        return MC_ERR_TOO_LARGE;
    return MC_OK;
}
