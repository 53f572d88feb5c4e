/* RPC frame header codec.
 *
 * Every message on a master connection is a 32-byte little-endian header followed by
 * body_len bytes of protobuf-c body (see docs/internals/wire-protocol.md):
 *
 *   off size field
 *     0    4 magic    'M' 'C' 'R' 'P' (0x5052434D as LE u32)
 *     4    2 version  MC_RPC_VERSION
 *     6    2 opcode   mc_rpc_opcode_t
 *     8    2 flags    MC_RPC_FLAG_*
 *    10    2 view_hi  responses only: bits 32..47 of the answering server's HA view (else 0)
 *    12    4 status   i32; responses only: transport-level status (0 = body is the response)
 *    16    4 body_len u32; <= MC_RPC_MAX_BODY
 *    20    8 req_id   u64 chosen by the caller, echoed in the response
 *    28    4 view_lo  responses only: bits 0..31 of that view (else 0)
 *
 * The view (48 bits) is the HA leader's view version (docs/internals/ha.md); 0 = a server
 * without HA, and every request. Both fields were reserved (0, ignored by decoders) before, so
 * peers that do not know them interoperate.
 *
 * Pure functions, no allocation, safe on hostile input.
 */
#ifndef MC_RPC_FRAME_H
#define MC_RPC_FRAME_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

#define MC_RPC_MAGIC 0x5052434Du /* bytes "MCRP" */
#define MC_RPC_VERSION 1u
#define MC_RPC_HDR_SIZE 32u
#define MC_RPC_MAX_BODY (64u << 20)       /* 64 MiB */
#define MC_RPC_MAX_KEY 4096u              /* bytes; empty keys are refused too */
#define MC_RPC_MAX_BATCH 16384u           /* keys per batch request */
#define MC_RPC_MAX_VALUE (1ull << 40)     /* 1 TiB */
#define MC_RPC_MAX_REPLICAS 8u
#define MC_RPC_MAX_RETIRED 65536u         /* replicas one answer lists as retired (RetiredReplicas) */

#define MC_RPC_FLAG_RESPONSE 0x1u
#define MC_RPC_VIEW_MAX ((1ull << 48) - 1) /* the largest view a header carries */

typedef struct mc_rpc_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t opcode;
    uint16_t flags;
    int32_t status;
    uint32_t body_len;
    uint64_t req_id;
    uint64_t view;   /* responses: the server's HA view, <= MC_RPC_VIEW_MAX (0 = none) */
} mc_rpc_hdr_t;

/* Writes hdr into out (32 bytes); magic and version are filled in here. */
void mc_rpc_hdr_encode(const mc_rpc_hdr_t *hdr, uint8_t out[MC_RPC_HDR_SIZE]);

/* Reads 32 bytes. MC_OK; MC_ERR_PROTOCOL on bad magic/version (the stream cannot be trusted
 * any more: close it); MC_ERR_TOO_LARGE if body_len > max_body (also fatal for the stream).
 * hdr is filled in every case where the magic matched, so that the error can echo req_id. */
mc_status_t mc_rpc_hdr_decode(const uint8_t in[MC_RPC_HDR_SIZE], uint32_t max_body,
                              mc_rpc_hdr_t *hdr);

#endif
