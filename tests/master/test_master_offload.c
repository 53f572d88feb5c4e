/* The local-disk tier's RPCs on the real mooncake_master: refused (UNABLE_OFFLOAD) without
 * --enable_offload; with it a storage server mounts its disk, pulls the eager offload task of a
 * committed put, confirms it, and the object stays readable as LOCAL_DISK once its memory
 * segment is gone; after a master restart the replica is served from the WAL until the owner
 * mounts again and re-registers it, and a replica it does not name again is dropped at the end
 * of its re-registration (recovery_done); the metrics. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "rpc/frame.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"
#include "master_proc.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

static uint8_t CA[16] = {0xa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static int32_t call_status(mc_rpc_client_t *c, uint16_t op, ProtobufCMessage *q)
{
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, op, q, &r, 3000);
    if (st != MC_OK)
        return st;
    const ProtobufCFieldDescriptor *f = protobuf_c_message_descriptor_get_field(r->descriptor, 1);
    int32_t s = *(int32_t *)((char *)r + f->offset);
    mc_rpc_response_free(r);
    return s;
}

static int32_t mount_disk(mc_rpc_client_t *c, const char *ep)
{
    McRpc__MountLocalDiskRequest q = MC_RPC__MOUNT_LOCAL_DISK_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CA};
    q.enable_offloading = true;
    q.transport_endpoint = (char *)ep;
    return call_status(c, MC_OP_MOUNT_LOCAL_DISK, &q.base);
}

static int32_t mount_seg(mc_rpc_client_t *c)
{
    McRpc__SegmentInfo si = MC_RPC__SEGMENT_INFO__INIT;
    si.name = "segA";
    si.base_addr = 0x100000;
    si.size = 1 << 20;
    si.te_endpoint = "segA";
    uint8_t uuid[16];
    memset(uuid, 0x5a, 16);
    si.segment_uuid = (ProtobufCBinaryData){16, uuid};
    McRpc__MountSegmentRequest q = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CA};
    q.segment = &si;
    return call_status(c, MC_OP_MOUNT_SEGMENT, &q.base);
}

static void put(mc_rpc_client_t *c, const char *key, uint64_t size, uint64_t sum)
{
    McRpc__PutStartRequest q = MC_RPC__PUT_START_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CA};
    q.key = mc_wire_key_str(key);
    q.value_size = size;
    assert_int_equal(call_status(c, MC_OP_PUT_START, &q.base), MC_OK);
    McRpc__PutEndRequest e = MC_RPC__PUT_END_REQUEST__INIT;
    e.client_id = (ProtobufCBinaryData){16, CA};
    e.key = mc_wire_key_str(key);
    e.checksum = sum;
    assert_int_equal(call_status(c, MC_OP_PUT_END, &e.base), MC_OK);
}

/* NotifyOffloadSuccess of one key (done: the end marker of a re-registration, recovery_done):
 * its per-object status, or the batch's status when that is not OK. */
static int32_t notify_done(mc_rpc_client_t *c, const char *key, uint64_t size, uint64_t sum,
                           bool recovered, bool done)
{
    McRpc__StorageObjectMetadata o = MC_RPC__STORAGE_OBJECT_METADATA__INIT;
    o.key = mc_wire_key_str(key);
    o.data_size = size;
    o.checksum = sum;
    McRpc__StorageObjectMetadata *arr[1] = {&o};
    McRpc__NotifyOffloadSuccessRequest q = MC_RPC__NOTIFY_OFFLOAD_SUCCESS_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CA};
    q.objects = arr;
    q.n_objects = 1;
    q.recovered = recovered;
    q.recovery_done = done;
    ProtobufCMessage *r;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_NOTIFY_OFFLOAD_SUCCESS, &q.base, &r, 3000),
                     MC_OK);
    McRpc__BatchStatusResponse *b = (void *)r;
    int32_t s = b->status ? b->status : b->statuses[0];
    mc_rpc_response_free(r);
    return s;
}

static int32_t notify(mc_rpc_client_t *c, const char *key, uint64_t size, uint64_t sum,
                      bool recovered)
{
    return notify_done(c, key, size, sum, recovered, false);
}

/* Waits (5 s at most) until the master's /metrics shows name == v. */
static void wait_metric(master_proc_t *mp, const char *name, double v)
{
    static char text[1 << 17];
    uint64_t deadline = mc_now_ms() + 5000;
    for (;;) {
        assert_int_equal(curl_get(mp->mport, "/metrics", text, sizeof(text)), 200);
        if (metric_value(text, name) == v)
            return;
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
}

/* GetReplicaList: status; the first replica's type and endpoint. */
static int32_t get(mc_rpc_client_t *c, const char *key, int *type_p, char *ep, size_t n)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.key = mc_wire_key_str(key);
    ProtobufCMessage *r;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_GET_REPLICA_LIST, &q.base, &r, 3000), MC_OK);
    McRpc__ReplicaListResponse *p = (void *)r;
    int32_t s = p->status;
    if (s == MC_OK) {
        *type_p = p->replicas[0]->replica_type;
        snprintf(ep, n, "%s", p->replicas[0]->transport_endpoint);
        if (*type_p == MC_RPC__REPLICA_TYPE__LOCAL_DISK) {
            assert_int_equal(p->replicas[0]->client_id.len, 16);
            assert_memory_equal(p->replicas[0]->client_id.data, CA, 16);
        }
    }
    mc_rpc_response_free(r);
    return s;
}

static void test_refused_without_flag(void **state)
{
    (void)state;
    master_proc_t mp = {0};
    new_wal_dir(&mp);
    start_master(&mp, NULL);
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &c), MC_OK);
    assert_int_equal(mount_disk(c, "127.0.0.1:1"), MC_ERR_UNABLE_OFFLOAD);
    mc_rpc_client_destroy(c);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static void test_offload_flow(void **state)
{
    (void)state;
    master_proc_t mp = {0};
    new_wal_dir(&mp);
    start_master(&mp, "--enable_offload=true");
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &c), MC_OK);
    assert_int_equal(mount_disk(c, ""), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mount_disk(c, "127.0.0.1:7001"), MC_OK);
    McRpc__ReportSsdCapacityRequest cap = MC_RPC__REPORT_SSD_CAPACITY_REQUEST__INIT;
    cap.client_id = (ProtobufCBinaryData){16, CA};
    cap.capacity_bytes = 1ull << 30;
    assert_int_equal(call_status(c, MC_OP_REPORT_SSD_CAPACITY, &cap.base), MC_OK);
    assert_int_equal(mount_seg(c), MC_OK);
    put(c, "k1", 4096, 0x1234);
    /* the heartbeat hands out the eager offload of k1, with its place in our segment */
    McRpc__OffloadHeartbeatRequest hb = MC_RPC__OFFLOAD_HEARTBEAT_REQUEST__INIT;
    hb.client_id = (ProtobufCBinaryData){16, CA};
    hb.enable_offloading = true;
    ProtobufCMessage *r;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_OFFLOAD_HEARTBEAT, &hb.base, &r, 3000), MC_OK);
    McRpc__OffloadHeartbeatResponse *h = (void *)r;
    assert_int_equal(h->status, MC_OK);
    assert_int_equal(h->n_tasks, 1);
    assert_int_equal(h->tasks[0]->key.len, 2);
    assert_memory_equal(h->tasks[0]->key.data, "k1", 2);
    assert_int_equal(h->tasks[0]->size, 4096);
    assert_int_equal(h->tasks[0]->checksum, 0x1234);
    assert_string_equal(h->tasks[0]->segment_name, "segA");
    assert_true(h->tasks[0]->buffer_address >= 0x100000);
    mc_rpc_response_free(r);
    assert_int_equal(notify(c, "k1", 4096, 0x1234, false), MC_OK);
    int type;
    char ep[64];
    assert_int_equal(get(c, "k1", &type, ep, sizeof(ep)), MC_OK);
    assert_int_equal(type, MC_RPC__REPLICA_TYPE__MEMORY);
    /* the cron publishes the disk tier's numbers */
    static char text[1 << 17];
    uint64_t deadline = mc_now_ms() + 5000;
    for (;;) {
        assert_int_equal(curl_get(mp.mport, "/metrics", text, sizeof(text)), 200);
        if (metric_value(text, "master_local_disk_key_count") == 1)
            break;
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    assert_true(metric_value(text, "master_allocated_file_size_bytes") == 4096);
    assert_true(metric_value(text, "master_total_file_capacity_bytes") == (double)(1ull << 30));
    assert_true(metric_value(text, "master_offload_success_total") == 1);
    assert_true(metric_value(text, "master_offload_queue_depth") == 0);
    /* the memory segment goes: k1 is read from the disk's owner */
    McRpc__UnmountSegmentRequest u = MC_RPC__UNMOUNT_SEGMENT_REQUEST__INIT;
    u.client_id = (ProtobufCBinaryData){16, CA};
    u.segment_name = "segA";
    assert_int_equal(call_status(c, MC_OP_UNMOUNT_SEGMENT, &u.base), MC_OK);
    assert_int_equal(get(c, "k1", &type, ep, sizeof(ep)), MC_OK);
    assert_int_equal(type, MC_RPC__REPLICA_TYPE__LOCAL_DISK);
    assert_string_equal(ep, "127.0.0.1:7001");
    /* k2: a disk-only copy the owner's disk will have lost across the restart */
    assert_int_equal(notify(c, "k2", 4096, 0x55, true), MC_OK);
    /* a restarted master knows the disk replicas from its WAL and serves them at once; the
     * owner's disk RPCs ask it to mount again and re-register its disk */
    stop_master(&mp, SIGTERM);
    start_master(&mp, "--enable_offload=true");
    mc_rpc_client_destroy(c);
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &c), MC_OK);
    assert_int_equal(get(c, "k1", &type, ep, sizeof(ep)), MC_OK);
    assert_int_equal(type, MC_RPC__REPLICA_TYPE__LOCAL_DISK);
    assert_string_equal(ep, "127.0.0.1:7001");
    assert_int_equal(notify(c, "k1", 4096, 0x1234, true), MC_ERR_UNABLE_OFFLOADING);
    assert_int_equal(get(c, "k2", &type, ep, sizeof(ep)), MC_OK);
    assert_int_equal(mount_disk(c, "127.0.0.1:7001"), MC_OK);
    /* it names k1 only, in its last batch (recovery_done): k2 is dropped */
    assert_int_equal(notify_done(c, "k1", 4096, 0x1234, true, true), MC_OK);
    assert_int_equal(get(c, "k1", &type, ep, sizeof(ep)), MC_OK);
    assert_int_equal(type, MC_RPC__REPLICA_TYPE__LOCAL_DISK);
    assert_int_equal(get(c, "k2", &type, ep, sizeof(ep)), MC_ERR_OBJECT_NOT_FOUND);
    wait_metric(&mp, "master_disk_reconcile_dropped_total", 1);
    /* the owner evicts it from its disk */
    ProtobufCBinaryData keys[1] = {mc_wire_key_str("k1")};
    McRpc__BatchEvictDiskReplicaRequest ev = MC_RPC__BATCH_EVICT_DISK_REPLICA_REQUEST__INIT;
    ev.client_id = (ProtobufCBinaryData){16, CA};
    ev.keys = keys;
    ev.n_keys = 1;
    ev.replica_type = MC_RPC__REPLICA_TYPE__MEMORY;
    assert_int_equal(call_status(c, MC_OP_BATCH_EVICT_DISK_REPLICA, &ev.base),
                     MC_ERR_INVALID_PARAMS);
    ev.replica_type = MC_RPC__REPLICA_TYPE__LOCAL_DISK;
    assert_int_equal(call_status(c, MC_OP_BATCH_EVICT_DISK_REPLICA, &ev.base), MC_OK);
    assert_int_equal(get(c, "k1", &type, ep, sizeof(ep)), MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_client_destroy(c);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static int teardown(void **state)
{
    (void)state;
    return master_proc_teardown();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_refused_without_flag, teardown),
        cmocka_unit_test_teardown(test_offload_flow, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
