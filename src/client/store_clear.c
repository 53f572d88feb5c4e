/* mc_store_batch_replica_clear: upstream's BatchReplicaClear (drop the replicas of objects
 * this client wrote that no reader holds a lease on; all of them, or those in one segment).
 * The master decides per key (mc_master_replica_clear, master.h); this file only validates,
 * sends one MC_OP_BATCH_REPLICA_CLEAR and drops the cleared keys' replica hints.
 * docs/internals/store-client.md, "Replica clear". */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/log.h"

#include <string.h>

mc_status_t mc_store_batch_replica_clear(mc_store_t *s, size_t n, const char *const *keys,
                                         const char *segment, int32_t *results)
{
    mc_status_t st = store_batch_args_check(s, n, keys);
    if (st != MC_OK || n == 0)
        return st;
    if (s->dummy) {
        MC_LOG_ERROR("batch replica clear: not available on a dummy client");
        return MC_ERR_NOT_SUPPORTED;
    }
    if (!results || !segment)
        return MC_ERR_INVALID_PARAMS;
    if (strnlen(segment, MC_STORE_KEY_MAX + 1) > MC_STORE_KEY_MAX)
        return MC_ERR_INVALID_PARAMS;
    /* keys that cannot name an object (empty, too long) are answered here, the rest sent */
    ProtobufCBinaryData *send = mc_calloc(n, sizeof(*send));
    size_t *where = mc_calloc(n, sizeof(*where));
    if (!send || !where) {
        mc_free(send);
        mc_free(where);
        return MC_ERR_NO_MEMORY;
    }
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        results[i] = store_key_check(keys[i]);
        if (results[i] == MC_OK) {
            send[m] = mc_wire_key_str(keys[i]);
            where[m++] = i;
        }
    }
    if (m) {
        McRpc__BatchReplicaClearRequest req = MC_RPC__BATCH_REPLICA_CLEAR_REQUEST__INIT;
        req.client_id = mc_master_client_id(&s->master);
        req.tenant_id = s->master.tenant;
        req.n_keys = m;
        req.keys = send;
        req.segment_name = (char *)segment;
        ProtobufCMessage *resp = NULL;
        st = mc_master_client_call(&s->master, MC_OP_BATCH_REPLICA_CLEAR, &req.base, &resp, 0);
        McRpc__BatchStatusResponse *br = (McRpc__BatchStatusResponse *)resp;
        st = store_batch_reply_status(st, br ? br->status : 0, br ? br->n_statuses : 0, m);
        for (size_t j = 0; j < m; j++) {
            results[where[j]] = st == MC_OK ? br->statuses[j] : st;
            if (results[where[j]] == MC_OK)
                mc_hint_drop(s->hints, keys[where[j]]);
        }
        mc_rpc_response_free(resp);
        if (st != MC_OK)
            MC_LOG_ERROR("batch replica clear of %zu keys failed: %s", m, mc_status_str(st));
    }
    mc_free(send);
    mc_free(where);
    return st;
}
