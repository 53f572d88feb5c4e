/* The compact form of BatchGetReplicaList answers (contract in replica_lists.h). */
#include "rpc/replica_lists.h"

#include "common/log.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define KIND(status, type) ((uint32_t)(status) | (uint32_t)(type) << 8)

/* Distinct strings by pointer (the master's replica strings point into its segment table, so
 * equal strings mostly share a pointer; equal strings at different addresses are sent twice,
 * which is correct, only less compact). Open addressing, at most half full. */
typedef struct names {
    const char **slot_key;
    uint32_t *slot_idx;
    size_t mask;
    char **list; /* the answer's `names` */
    size_t n;
} names_t;

static uint32_t name_index(names_t *t, const char *s)
{
    if (!s)
        s = protobuf_c_empty_string;
    size_t h = (size_t)(((uintptr_t)s >> 3) * 0x9E3779B97F4A7C15ull >> 20) & t->mask;
    while (t->slot_key[h] && t->slot_key[h] != s)
        h = (h + 1) & t->mask;
    if (!t->slot_key[h]) {
        t->slot_key[h] = s;
        t->slot_idx[h] = (uint32_t)t->n;
        t->list[t->n++] = (char *)s;
    }
    return t->slot_idx[h];
}

mc_status_t mc_rpc_replicas_compact(mc_rpc_arena_t *a, McRpc__BatchReplicaListResponse *r)
{
    size_t n = r->n_results, total = 0, n_disk = 0;
    for (size_t i = 0; i < n; i++) {
        const McRpc__ReplicaListResponse *x = r->results[i];
        if (x->status)
            continue;
        if (x->n_replicas > MC_RPC_MAX_KEY_REPLICAS)
            return MC_ERR_INVALID_PARAMS;
        for (size_t j = 0; j < x->n_replicas; j++) {
            const McRpc__ReplicaDesc *d = x->replicas[j];
            if (d->replica_type == MC_RPC__REPLICA_TYPE__LOCAL_DISK) {
                if (d->client_id.len != 16)
                    return MC_ERR_INVALID_PARAMS;
                n_disk++;
            }
        }
        total += x->n_replicas;
    }
    names_t t = {.mask = 15};
    while (t.mask + 1 < 4 * total) /* two strings per replica, at most half full */
        t.mask = t.mask * 2 + 1;
    int32_t *st = mc_rpc_arena_alloc(a, (n ? n : 1) * sizeof(*st));
    uint64_t *sizes = mc_rpc_arena_alloc(a, (n ? n : 1) * sizeof(*sizes));
    uint64_t *sums = mc_rpc_arena_alloc(a, (n ? n : 1) * sizeof(*sums));
    uint32_t *counts = mc_rpc_arena_alloc(a, (n ? n : 1) * sizeof(*counts));
    size_t rt = total ? total : 1;
    uint32_t *segs = mc_rpc_arena_alloc(a, rt * sizeof(*segs));
    uint32_t *eps = mc_rpc_arena_alloc(a, rt * sizeof(*eps));
    uint32_t *kinds = mc_rpc_arena_alloc(a, rt * sizeof(*kinds));
    uint64_t *addrs = mc_rpc_arena_alloc(a, rt * sizeof(*addrs));
    uint64_t *rsizes = mc_rpc_arena_alloc(a, rt * sizeof(*rsizes));
    uint8_t *cids = mc_rpc_arena_alloc(a, (n_disk ? n_disk : 1) * 16);
    t.list = mc_rpc_arena_alloc(a, 2 * rt * sizeof(*t.list));
    t.slot_key = mc_rpc_arena_calloc(a, t.mask + 1, sizeof(*t.slot_key));
    t.slot_idx = mc_rpc_arena_alloc(a, (t.mask + 1) * sizeof(*t.slot_idx));
    if (!st || !sizes || !sums || !counts || !segs || !eps || !kinds || !addrs || !rsizes ||
        !cids || !t.list || !t.slot_key || !t.slot_idx)
        return MC_ERR_NO_MEMORY;
    size_t k = 0, nd = 0;
    for (size_t i = 0; i < n; i++) {
        const McRpc__ReplicaListResponse *x = r->results[i];
        st[i] = x->status;
        sizes[i] = x->size;
        sums[i] = x->checksum;
        counts[i] = x->status ? 0 : (uint32_t)x->n_replicas;
        if (!x->status)
            r->lease_ttl_ms = x->lease_ttl_ms; /* the same for every key of the answer */
        for (size_t j = 0; j < counts[i]; j++, k++) {
            const McRpc__ReplicaDesc *d = x->replicas[j];
            segs[k] = name_index(&t, d->segment_name);
            eps[k] = name_index(&t, d->transport_endpoint);
            addrs[k] = d->buffer_address;
            rsizes[k] = d->size;
            kinds[k] = KIND(d->status, d->replica_type);
            if (d->replica_type == MC_RPC__REPLICA_TYPE__LOCAL_DISK)
                memcpy(cids + 16 * nd++, d->client_id.data, 16);
        }
    }
    r->statuses = st;
    r->n_statuses = r->n_sizes = r->n_checksums = r->n_replica_counts = n;
    r->sizes = sizes;
    r->checksums = sums;
    r->replica_counts = counts;
    r->names = t.list;
    r->n_names = t.n;
    r->replica_segments = segs;
    r->replica_endpoints = eps;
    r->replica_addrs = addrs;
    r->replica_sizes = rsizes;
    r->replica_kinds = kinds;
    r->n_replica_segments = r->n_replica_endpoints = r->n_replica_addrs = r->n_replica_sizes =
        r->n_replica_kinds = total;
    r->replica_client_ids = (ProtobufCBinaryData){.len = 16 * n_disk, .data = cids};
    r->results = NULL;
    r->n_results = 0;
    return MC_OK;
}

static bool has_compact_fields(const McRpc__BatchReplicaListResponse *r)
{
    return r->n_statuses || r->n_sizes || r->n_checksums || r->n_replica_counts || r->n_names ||
           r->n_replica_segments || r->n_replica_endpoints || r->n_replica_addrs ||
           r->n_replica_sizes || r->n_replica_kinds || r->replica_client_ids.len;
}

static mc_status_t refuse(const char *why)
{
    MC_LOG_ERROR("master answer: bad compact replica lists: %s", why);
    return MC_ERR_PROTOCOL;
}

mc_status_t mc_rpc_replicas_expand(ProtobufCAllocator *alloc, size_t n_keys,
                                   McRpc__BatchReplicaListResponse *r)
{
    if (r->status != 0)
        return MC_OK;
    if (r->n_results)
        return has_compact_fields(r) ? refuse("both forms") : MC_OK;
    if (!n_keys)
        return MC_OK;
    if (r->n_statuses != n_keys || r->n_sizes != n_keys || r->n_checksums != n_keys ||
        r->n_replica_counts != n_keys)
        return refuse("per-key arrays do not match the keys asked");
    size_t total = 0, n_disk = 0;
    for (size_t i = 0; i < n_keys; i++) {
        if (r->replica_counts[i] > MC_RPC_MAX_KEY_REPLICAS ||
            (r->statuses[i] && r->replica_counts[i]))
            return refuse("replica count");
        total += r->replica_counts[i];
    }
    if (r->n_replica_segments != total || r->n_replica_endpoints != total ||
        r->n_replica_addrs != total || r->n_replica_sizes != total || r->n_replica_kinds != total)
        return refuse("per-replica arrays do not match the counts");
    for (size_t k = 0; k < total; k++) {
        uint32_t status = r->replica_kinds[k] & 0xff, type = r->replica_kinds[k] >> 8;
        if (r->replica_segments[k] >= r->n_names || r->replica_endpoints[k] >= r->n_names)
            return refuse("name index");
        if (status > MC_RPC__REPLICA_STATUS__REPLICA_COMPLETE ||
            type > MC_RPC__REPLICA_TYPE__LOCAL_DISK)
            return refuse("replica kind");
        n_disk += type == MC_RPC__REPLICA_TYPE__LOCAL_DISK;
    }
    if (r->replica_client_ids.len != 16 * n_disk)
        return refuse("client ids");
    McRpc__ReplicaListResponse **res = alloc->alloc(alloc->allocator_data, n_keys * sizeof(*res));
    McRpc__ReplicaListResponse *items = alloc->alloc(alloc->allocator_data,
                                                     n_keys * sizeof(*items));
    size_t rt = total ? total : 1;
    McRpc__ReplicaDesc **ptrs = alloc->alloc(alloc->allocator_data, rt * sizeof(*ptrs));
    McRpc__ReplicaDesc *descs = alloc->alloc(alloc->allocator_data, rt * sizeof(*descs));
    if (!res || !items || !ptrs || !descs)
        return MC_ERR_NO_MEMORY;
    static const McRpc__ReplicaListResponse item0 = MC_RPC__REPLICA_LIST_RESPONSE__INIT;
    static const McRpc__ReplicaDesc desc0 = MC_RPC__REPLICA_DESC__INIT;
    size_t k = 0, nd = 0;
    for (size_t i = 0; i < n_keys; i++) {
        McRpc__ReplicaListResponse *x = &items[i];
        *x = item0;
        x->status = r->statuses[i];
        x->size = r->sizes[i];
        x->checksum = r->checksums[i];
        x->lease_ttl_ms = x->status ? 0 : r->lease_ttl_ms;
        x->n_replicas = r->replica_counts[i];
        x->replicas = &ptrs[k];
        for (size_t j = 0; j < x->n_replicas; j++, k++) {
            McRpc__ReplicaDesc *d = &descs[k];
            *d = desc0;
            d->segment_name = r->names[r->replica_segments[k]];
            d->transport_endpoint = r->names[r->replica_endpoints[k]];
            d->buffer_address = r->replica_addrs[k];
            d->size = r->replica_sizes[k];
            d->status = (McRpc__ReplicaStatus)(r->replica_kinds[k] & 0xff);
            d->replica_type = (McRpc__ReplicaType)(r->replica_kinds[k] >> 8);
            if (d->replica_type == MC_RPC__REPLICA_TYPE__LOCAL_DISK)
                d->client_id = (ProtobufCBinaryData){.len = 16,
                                                     .data = r->replica_client_ids.data + 16 * nd++};
            ptrs[k] = d;
        }
        res[i] = x;
    }
    r->results = res;
    r->n_results = n_keys;
    return MC_OK;
}
