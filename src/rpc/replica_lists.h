/* The compact form of a BatchGetReplicaList answer (master.proto, BatchReplicaListResponse
 * fields 4-15), one place for both ends.
 *
 * The usual answer is one ReplicaListResponse sub-message per key with one ReplicaDesc
 * sub-message per replica, each carrying its segment name and endpoint strings: protobuf-c
 * sizes nested messages once per level when packing and allocates every sub-message and
 * string when unpacking, which made a 128-key answer cost tens of µs at each end. The compact
 * form carries the same values as flat packed arrays and every distinct string once.
 *
 * A client asks for it with BatchKeyRequest.compact_replicas; a master that predates the field
 * ignores it and answers with `results`, which mc_rpc_replicas_expand leaves as they are. */
#ifndef MC_RPC_REPLICA_LISTS_H
#define MC_RPC_REPLICA_LISTS_H

#include "mooncake/status.h"
#include "rpc/arena.h"
#include "rpc/master.pb-c.h"

#include <stddef.h>

/* Replicas per key the compact form carries at most (the master's MC_MASTER_MAX_REPLICAS). */
#define MC_RPC_MAX_KEY_REPLICAS 8u

/* Master: moves r's results (built in arena a, as for the usual answer) into the compact
 * fields and empties `results`; the strings stay borrowed (segment table) and `grants` is left
 * as it is. MC_ERR_INVALID_PARAMS when a result has more than MC_RPC_MAX_KEY_REPLICAS replicas
 * (r unchanged: the usual answer goes out), MC_ERR_NO_MEMORY when a is exhausted. */
mc_status_t mc_rpc_replicas_compact(mc_rpc_arena_t *a, McRpc__BatchReplicaListResponse *r);

/* Client: when r (unpacked with alloc) is in the compact form, rebuilds r->results from it
 * with alloc, n_keys entries (the keys asked, in order), the strings pointing into r->names.
 * The result is released only with the allocator as a whole (an mc_rpc_arena_t: reset or
 * destroy), never with protobuf_c_message_free_unpacked. An answer with `results`, or with a
 * whole-batch status, is left as it is. MC_ERR_PROTOCOL when the compact fields do not agree
 * with each other or with n_keys (an array of the wrong length, a count over
 * MC_RPC_MAX_KEY_REPLICAS, a name index out of range, client ids that are not 16 bytes per
 * LOCAL_DISK replica, results and compact fields both present); MC_ERR_NO_MEMORY. */
mc_status_t mc_rpc_replicas_expand(ProtobufCAllocator *alloc, size_t n_keys,
                                   McRpc__BatchReplicaListResponse *r);

#endif
