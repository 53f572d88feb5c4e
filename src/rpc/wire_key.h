/* Keys on the wire. Every key field of master.proto and real_client.proto is proto `bytes`
 * (strict parsers refuse non-UTF-8 `string`s; keys are byte strings), at most MC_RPC_MAX_KEY
 * bytes, never empty, and without a NUL byte: the C API takes keys as NUL-terminated strings,
 * so a key that contains one could not be named there (docs/internals/wire-protocol.md). */
#ifndef MC_RPC_WIRE_KEY_H
#define MC_RPC_WIRE_KEY_H

#include "common/alloc.h"
#include "mooncake/status.h"
#include "rpc/arena.h"
#include "rpc/frame.h"

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>
#include <string.h>

/* MC_OK for 1..MC_RPC_MAX_KEY bytes without a NUL byte, else MC_ERR_INVALID_KEY. */
static inline mc_status_t mc_wire_key_check(ProtobufCBinaryData k)
{
    if (k.len == 0 || k.len > MC_RPC_MAX_KEY || !k.data || memchr(k.data, 0, k.len))
        return MC_ERR_INVALID_KEY;
    return MC_OK;
}

/* The key (len bytes at key, borrowed while the message is in use) as a bytes field. */
static inline ProtobufCBinaryData mc_wire_key(const char *key, size_t len)
{
    return (ProtobufCBinaryData){.len = len, .data = (uint8_t *)(uintptr_t)key};
}

/* A NUL-terminated key as a bytes field (the NUL is not sent). */
static inline ProtobufCBinaryData mc_wire_key_str(const char *key)
{
    return mc_wire_key(key, key ? strlen(key) : 0);
}

/* n NUL-terminated keys (borrowed) as bytes fields, in an array the caller frees with
 * mc_free; NULL when out of memory. */
static inline ProtobufCBinaryData *mc_wire_keys(const char *const *keys, size_t n)
{
    ProtobufCBinaryData *out = mc_calloc(n ? n : 1, sizeof(*out));
    for (size_t i = 0; out && i < n; i++)
        out[i] = mc_wire_key_str(keys[i]);
    return out;
}

/* A checked key (mc_wire_key_check) as a NUL-terminated copy in arena memory; NULL when out of
 * memory. */
static inline char *mc_wire_key_dup(mc_rpc_arena_t *a, ProtobufCBinaryData k)
{
    char *s = mc_rpc_arena_alloc(a, k.len + 1);
    if (s) {
        memcpy(s, k.data, k.len);
        s[k.len] = 0;
    }
    return s;
}

#endif
