/* Fuzz target: a byte stream as the real-client service (real_service.c) would receive it from
 * a dummy. Frames are split with the header codec under MC_RC_MAX_BODY; every body is decoded
 * as an RcRequest and checked with mc_rc_request_check for its opcode, exactly as the server
 * does before acting, and decoded as an RcResponse too (the dummy's side). */
#include "client/rc_wire.h"
#include "rpc/arena.h"

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
        if (mc_rpc_hdr_decode(data + off, MC_RC_MAX_BODY, &h) != MC_OK)
            break;
        if (size - off - MC_RPC_HDR_SIZE < h.body_len)
            break;
        const uint8_t *body = data + off + MC_RPC_HDR_SIZE;
        McRc__RcRequest *rq = mc_rc__rc_request__unpack(&arena.pb, h.body_len, body);
        if (rq) {
            (void)mc_rc_request_check(h.opcode, rq);
            (void)mc_rc_op_name(h.opcode);
        }
        McRc__RcResponse *resp = mc_rc__rc_response__unpack(NULL, h.body_len, body);
        if (resp)
            mc_rc__rc_response__free_unpacked(resp, NULL);
        mc_rpc_arena_reset(&arena);
        off += MC_RPC_HDR_SIZE + h.body_len;
    }
    mc_rpc_arena_destroy(&arena);
    return 0;
}
