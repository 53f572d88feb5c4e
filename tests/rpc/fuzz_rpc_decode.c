/* Fuzz target: a byte stream as a master connection would receive it. Frames are split with
 * the header codec, every body is decoded with the opcode's request message (and, to cover the
 * client side, its response message), exactly as rpc_server.c / rpc_client.c do. A
 * BatchReplicaListResponse is also rebuilt from its compact form (rpc/replica_lists.h) as
 * mc_master_client does, for as many keys as it has statuses and for the frame's req_id
 * (mod 64) keys. */
#include "rpc/arena.h"
#include "rpc/frame.h"
#include "rpc/opcodes.h"
#include "rpc/replica_lists.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mc_rpc_arena_t arena;
    mc_rpc_arena_init(&arena, 4096);
    size_t off = 0;
    while (size - off >= MC_RPC_HDR_SIZE) {
        mc_rpc_hdr_t h;
        if (mc_rpc_hdr_decode(data + off, MC_RPC_MAX_BODY, &h) != MC_OK)
            break;
        if (size - off - MC_RPC_HDR_SIZE < h.body_len)
            break;
        const uint8_t *body = data + off + MC_RPC_HDR_SIZE;
        const mc_rpc_op_info_t *info = mc_rpc_op_info(h.opcode);
        if (info) {
            ProtobufCMessage *m = protobuf_c_message_unpack(info->req, &arena.pb, h.body_len, body);
            if (m) {
                /* re-encode: must not crash and must fit the cap it came from */
                size_t n = protobuf_c_message_get_packed_size(m);
                (void)n;
            }
            ProtobufCMessage *r = protobuf_c_message_unpack(info->resp, NULL, h.body_len, body);
            if (r)
                protobuf_c_message_free_unpacked(r, NULL);
            if (info->resp == &mc_rpc__batch_replica_list_response__descriptor) {
                for (int k = 0; k < 2; k++) {
                    McRpc__BatchReplicaListResponse *b =
                        mc_rpc__batch_replica_list_response__unpack(&arena.pb, h.body_len, body);
                    if (b)
                        mc_rpc_replicas_expand(&arena.pb, k ? h.req_id % 64 : b->n_statuses, b);
                }
            }
        }
        mc_rpc_arena_reset(&arena);
        off += MC_RPC_HDR_SIZE + h.body_len;
    }
    mc_rpc_arena_destroy(&arena);
    return 0;
}
