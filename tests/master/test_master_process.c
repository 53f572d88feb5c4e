/* The real mooncake_master process over RPC: state machine, leases, eviction under pressure,
 * client death, bad input, kill -9 + restart with the WAL, HTTP metrics/admin endpoints. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/net.h"
#include "common/time.h"
#include "rpc/frame.h"
#include "rpc/rpc_client.h"

#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include <unistd.h>

typedef struct master_proc {
    pid_t pid;
    uint16_t port, mport;
    char addr[64];
    char wal[128];
} master_proc_t;

static master_proc_t *g_live; /* killed by the teardown if a test fails midway */

/* Starts the master; returns false only when may_refuse and it exited with status 2 (a flag
 * this build does not support). */
static bool start_master_ex(master_proc_t *mp, const char *extra, bool may_refuse)
{
    g_live = mp;
    const char *bindir = getenv("MC_BIN_DIR");
    assert_non_null(bindir);
    if (!mp->port) {
        assert_int_equal(mc_net_free_port(&mp->port), MC_OK);
        assert_int_equal(mc_net_free_port(&mp->mport), MC_OK);
    }
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "exec %s/mooncake_master --rpc_address=127.0.0.1 --port=%u --metrics_port=%u "
             "--wal_dir=%s --wal_fsync=false --log_level=warn %s",
             bindir, mp->port, mp->mport, mp->wal, extra ? extra : "");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int devnull = open("/dev/null", 1);
        dup2(devnull, 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    mp->pid = pid;
    snprintf(mp->addr, sizeof(mp->addr), "127.0.0.1:%u", mp->port);
    /* poll until it answers ServiceReady */
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(mp->addr, NULL, &c), MC_OK);
    uint64_t deadline = mc_now_ms() + 10000;
    for (;;) {
        McRpc__ServiceReadyRequest q = MC_RPC__SERVICE_READY_REQUEST__INIT;
        ProtobufCMessage *r;
        if (mc_rpc_client_call(c, MC_OP_SERVICE_READY, &q.base, &r, 500) == MC_OK) {
            mc_rpc_response_free(r);
            break;
        }
        assert_true(mc_now_ms() < deadline);
        int st;
        if (may_refuse && waitpid(pid, &st, WNOHANG) == pid) {
            mc_rpc_client_destroy(c);
            mp->pid = 0;
            assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 2);
            return false;
        }
        assert_int_equal(waitpid(pid, &st, WNOHANG), 0); /* still alive */
        mc_sleep_ms(20);
    }
    mc_rpc_client_destroy(c);
    return true;
}

static void start_master(master_proc_t *mp, const char *extra)
{
    start_master_ex(mp, extra, false);
}

static void stop_master(master_proc_t *mp, int sig)
{
    if (mp->pid <= 0)
        return;
    kill(mp->pid, sig);
    int st;
    waitpid(mp->pid, &st, 0);
    if (sig == SIGTERM) /* clean stop */
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    mp->pid = 0;
}

static void new_wal_dir(master_proc_t *mp)
{
    snprintf(mp->wal, sizeof(mp->wal), "/tmp/mc_master_test_XXXXXX");
    assert_non_null(mkdtemp(mp->wal));
}

static void rm_wal(master_proc_t *mp)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", mp->wal);
    assert_int_equal(system(cmd), 0);
}

/* ---------------------------------------------------------------- tiny typed wrappers */

static uint8_t CA[16] = {0xa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
static uint8_t CB[16] = {0xb, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

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

static int32_t mount(mc_rpc_client_t *c, uint8_t *cid, const char *name, uint64_t base,
                     uint64_t size, uint8_t uuid_b, bool remount)
{
    McRpc__SegmentInfo si = MC_RPC__SEGMENT_INFO__INIT;
    si.name = (char *)name;
    si.base_addr = base;
    si.size = size;
    si.host_label = (char *)name;
    si.te_endpoint = (char *)name;
    uint8_t uuid[16];
    memset(uuid, uuid_b, 16);
    si.segment_uuid = (ProtobufCBinaryData){16, uuid};
    if (remount) {
        McRpc__SegmentInfo *arr[1] = {&si};
        McRpc__ReMountSegmentRequest q = MC_RPC__RE_MOUNT_SEGMENT_REQUEST__INIT;
        q.client_id = (ProtobufCBinaryData){16, cid};
        q.segments = arr;
        q.n_segments = 1;
        return call_status(c, MC_OP_REMOUNT_SEGMENT, &q.base);
    }
    McRpc__MountSegmentRequest q = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, cid};
    q.segment = &si;
    return call_status(c, MC_OP_MOUNT_SEGMENT, &q.base);
}

static int32_t put_start(mc_rpc_client_t *c, uint8_t *cid, const char *key, uint64_t size,
                         uint32_t nrep, uint64_t *addr_p)
{
    McRpc__ReplicateConfig cfg = MC_RPC__REPLICATE_CONFIG__INIT;
    cfg.replica_num = nrep;
    McRpc__PutStartRequest q = MC_RPC__PUT_START_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, cid};
    q.key = (char *)key;
    q.value_size = size;
    q.config = &cfg;
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, MC_OP_PUT_START, &q.base, &r, 3000);
    if (st != MC_OK)
        return st;
    McRpc__PutStartResponse *p = (void *)r;
    int32_t s = p->status;
    if (s == MC_OK && addr_p)
        *addr_p = p->replicas[0]->buffer_address;
    mc_rpc_response_free(r);
    return s;
}

static int32_t put_end(mc_rpc_client_t *c, uint8_t *cid, const char *key, uint64_t sum)
{
    McRpc__PutEndRequest q = MC_RPC__PUT_END_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, cid};
    q.key = (char *)key;
    q.checksum = sum;
    return call_status(c, MC_OP_PUT_END, &q.base);
}

static int32_t key_op(mc_rpc_client_t *c, uint16_t op, uint8_t *cid, const char *key, bool force)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    if (cid)
        q.client_id = (ProtobufCBinaryData){16, cid};
    q.key = (char *)key;
    q.force = force;
    return call_status(c, op, &q.base);
}

static int32_t get(mc_rpc_client_t *c, const char *key, uint64_t *addr_p, uint64_t *sum_p,
                   uint32_t *n_p)
{
    McRpc__KeyRequest q = MC_RPC__KEY_REQUEST__INIT;
    q.key = (char *)key;
    ProtobufCMessage *r;
    mc_status_t st = mc_rpc_client_call(c, MC_OP_GET_REPLICA_LIST, &q.base, &r, 3000);
    if (st != MC_OK)
        return st;
    McRpc__ReplicaListResponse *p = (void *)r;
    int32_t s = p->status;
    if (s == MC_OK) {
        if (addr_p)
            *addr_p = p->replicas[0]->buffer_address;
        if (sum_p)
            *sum_p = p->checksum;
        if (n_p)
            *n_p = (uint32_t)p->n_replicas;
        for (size_t i = 0; i < p->n_replicas; i++)
            assert_int_equal(p->replicas[i]->status, MC_RPC__REPLICA_STATUS__REPLICA_COMPLETE);
    }
    mc_rpc_response_free(r);
    return s;
}

static int ping(mc_rpc_client_t *c, uint8_t *cid)
{
    McRpc__PingRequest q = MC_RPC__PING_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, cid};
    ProtobufCMessage *r;
    assert_int_equal(mc_rpc_client_call(c, MC_OP_PING, &q.base, &r, 3000), MC_OK);
    int cs = ((McRpc__PingResponse *)r)->client_status;
    mc_rpc_response_free(r);
    return cs;
}

/* ---------------------------------------------------------------- tests */

static void test_state_machine(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--default_kv_lease_ttl=300");
    mc_rpc_client_t *a, *b;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &b), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    assert_int_equal(put_start(a, CA, "k", 1000, 1, NULL), MC_OK);
    assert_int_equal(get(b, "k", NULL, NULL, NULL), MC_ERR_REPLICA_IS_NOT_READY);
    assert_int_equal(put_end(b, CB, "k", 1), MC_ERR_ILLEGAL_CLIENT);
    assert_int_equal(put_end(a, CA, "k", 42), MC_OK);
    assert_int_equal(put_end(a, CA, "k", 42), MC_ERR_INVALID_WRITE);
    assert_int_equal(key_op(a, MC_OP_PUT_REVOKE, CA, "k", false), MC_ERR_INVALID_WRITE);
    uint64_t sum = 0;
    assert_int_equal(get(b, "k", NULL, &sum, NULL), MC_OK);
    assert_true(sum == 42);
    assert_int_equal(key_op(b, MC_OP_REMOVE, CB, "k", false), MC_ERR_OBJECT_HAS_LEASE);
    /* lease expiry: poll (bounded) until remove succeeds */
    uint64_t deadline = mc_now_ms() + 5000;
    int32_t st;
    while ((st = key_op(b, MC_OP_REMOVE, CB, "k", false)) == MC_ERR_OBJECT_HAS_LEASE &&
           mc_now_ms() < deadline)
        mc_sleep_ms(50);
    assert_int_equal(st, MC_OK);
    assert_int_equal(put_start(a, CA, "k2", 10, 1, NULL), MC_OK);
    assert_int_equal(put_end(a, CA, "k2", 1), MC_OK);
    assert_int_equal(get(b, "k2", NULL, NULL, NULL), MC_OK);
    assert_int_equal(key_op(b, MC_OP_REMOVE, CB, "k2", true), MC_OK); /* force */
    assert_int_equal(put_start(a, CA, "", 10, 1, NULL), MC_ERR_INVALID_KEY);
    assert_int_equal(put_start(a, CA, "z", 0, 1, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(put_start(a, CA, "z", (1ull << 40) + 1, 1, NULL), MC_ERR_INVALID_PARAMS);

    /* eviction under pressure: 1 MiB segment, 64 KiB objects (14 = 87.5%, below the 90%
     * watermark), ExistKey storm (#2187), then puts that only fit by evicting. */
    char key[32];
    for (int i = 0; i < 14; i++) {
        snprintf(key, sizeof(key), "e%d", i);
        assert_int_equal(put_start(a, CA, key, 64 << 10, 1, NULL), MC_OK);
        assert_int_equal(put_end(a, CA, key, (uint64_t)i), MC_OK);
    }
    for (int r = 0; r < 20; r++)
        for (int i = 0; i < 14; i++) {
            snprintf(key, sizeof(key), "e%d", i);
            assert_int_equal(key_op(b, MC_OP_EXIST_KEY, NULL, key, false), MC_OK);
        }
    for (int i = 0; i < 40; i++) {
        snprintf(key, sizeof(key), "p%d", i);
        assert_int_equal(put_start(a, CA, key, 64 << 10, 1, NULL), MC_OK);
        assert_int_equal(put_end(a, CA, key, (uint64_t)i), MC_OK);
    }
    /* the existence-checked objects were evictable: the oldest is gone */
    assert_int_equal(key_op(b, MC_OP_EXIST_KEY, NULL, "e0", false), MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_client_destroy(a);
    mc_rpc_client_destroy(b);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static void test_client_death(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--client_ttl=1");
    mc_rpc_client_t *a, *b;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &b), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    assert_int_equal(mount(b, CB, "segB", 2ull << 30, 1 << 20, 2, false), MC_OK);
    assert_int_equal(put_start(b, CB, "two", 1000, 2, NULL), MC_OK);
    assert_int_equal(put_end(b, CB, "two", 7), MC_OK);
    uint32_t n = 0;
    assert_int_equal(get(b, "two", NULL, NULL, &n), MC_OK);
    assert_int_equal(n, 2);
    McRpc__ReplicateConfig cfg = MC_RPC__REPLICATE_CONFIG__INIT;
    cfg.preferred_segment = "segA";
    McRpc__PutStartRequest q = MC_RPC__PUT_START_REQUEST__INIT;
    q.client_id = (ProtobufCBinaryData){16, CB};
    q.key = "onlyA";
    q.value_size = 100;
    q.config = &cfg;
    assert_int_equal(call_status(b, MC_OP_PUT_START, &q.base), MC_OK);
    assert_int_equal(put_end(b, CB, "onlyA", 8), MC_OK);
    /* A goes silent; B pings; poll until A's segment is gone */
    uint64_t deadline = mc_now_ms() + 8000;
    while (key_op(b, MC_OP_EXIST_KEY, NULL, "onlyA", false) == MC_OK) {
        assert_true(mc_now_ms() < deadline);
        assert_int_equal(ping(b, CB), MC_RPC__CLIENT_STATUS__CLIENT_OK);
        mc_sleep_ms(100);
    }
    assert_int_equal(get(b, "two", NULL, NULL, &n), MC_OK);
    assert_int_equal(n, 1);
    /* A comes back: NEED_REMOUNT */
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, true), MC_OK);
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_OK);
    mc_rpc_client_destroy(a);
    mc_rpc_client_destroy(b);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static void test_bad_input_keeps_serving(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, NULL);
    mc_rpc_client_t *c;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &c), MC_OK);
    for (int round = 0; round < 20; round++) {
        int fd;
        assert_int_equal(mc_net_connect("127.0.0.1", mp.port, 2000, &fd), MC_OK);
        uint8_t junk[256];
        for (size_t i = 0; i < sizeof(junk); i++)
            junk[i] = (uint8_t)(i * 31 + round);
        if (round % 3 == 0)
            memcpy(junk, "MCRP\x01\x00", 6); /* valid magic, garbage rest */
        ssize_t w = send(fd, junk, sizeof(junk), MSG_NOSIGNAL);
        (void)w;
        close(fd);
        assert_int_equal(key_op(c, MC_OP_EXIST_KEY, NULL, "x", false), MC_ERR_OBJECT_NOT_FOUND);
    }
    /* unknown opcode through the client API: header-level NOT_SUPPORTED */
    McRpc__ServiceReadyRequest q = MC_RPC__SERVICE_READY_REQUEST__INIT;
    ProtobufCMessage *r;
    assert_int_equal(mc_rpc_client_call(c, 60, &q.base, &r, 2000), MC_ERR_NOT_SUPPORTED);
    assert_int_equal(key_op(c, MC_OP_EXIST_KEY, NULL, "x", false), MC_ERR_OBJECT_NOT_FOUND);
    mc_rpc_client_destroy(c);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static void test_kill9_restart(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, "--client_ttl=5");
    mc_rpc_client_t *a;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 64 << 20, 0x5a, false), MC_OK);
    uint64_t addrs[100];
    char key[32];
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        assert_int_equal(put_start(a, CA, key, 4096 + (uint64_t)i, 1, &addrs[i]), MC_OK);
        assert_int_equal(put_end(a, CA, key, 0x1000 + (uint64_t)i), MC_OK);
    }
    assert_int_equal(key_op(a, MC_OP_REMOVE, CA, "obj7", true), MC_OK);
    assert_int_equal(put_start(a, CA, "inflight", 4096, 1, NULL), MC_OK);
    stop_master(&mp, SIGKILL);
    start_master(&mp, "--client_ttl=5");
    /* before re-mount: nothing readable, the client learns it must re-mount */
    assert_int_equal(key_op(a, MC_OP_EXIST_KEY, NULL, "obj1", false), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 64 << 20, 0x5a, true), MC_OK);
    for (int i = 0; i < 100; i++) {
        snprintf(key, sizeof(key), "obj%d", i);
        uint64_t addr = 0, sum = 0;
        if (i == 7) {
            assert_int_equal(get(a, key, NULL, NULL, NULL), MC_ERR_OBJECT_NOT_FOUND);
            continue;
        }
        assert_int_equal(get(a, key, &addr, &sum, NULL), MC_OK);
        assert_true(addr == addrs[i]);
        assert_true(sum == 0x1000 + (uint64_t)i);
    }
    assert_int_equal(get(a, "inflight", NULL, NULL, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put_start(a, CA, "inflight", 4096, 1, NULL), MC_OK);
    assert_int_equal(put_end(a, CA, "inflight", 1), MC_OK);
    /* and once more, after a clean stop (snapshot + log) */
    stop_master(&mp, SIGTERM);
    start_master(&mp, "--client_ttl=5");
    assert_int_equal(ping(a, CA), MC_RPC__CLIENT_STATUS__CLIENT_NEED_REMOUNT);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 64 << 20, 0x5a, true), MC_OK);
    assert_int_equal(get(a, "inflight", NULL, NULL, NULL), MC_OK);
    assert_int_equal(get(a, "obj99", NULL, NULL, NULL), MC_OK);
    mc_rpc_client_destroy(a);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static int curl_get(uint16_t port, const char *path, char *out, size_t n)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "curl -s -m 5 -o - -w '\\n%%{http_code}' 'http://127.0.0.1:%u%s'",
             port, path);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t got = fread(out, 1, n - 1, p);
    out[got] = 0;
    pclose(p);
    char *nl = strrchr(out, '\n');
    if (!nl)
        return -1;
    int code = atoi(nl + 1);
    *nl = 0;
    return code;
}

static double metric_value(const char *text, const char *name)
{
    char pat[128];
    snprintf(pat, sizeof(pat), "\n%s ", name);
    const char *p = strstr(text, pat);
    return p ? atof(p + strlen(pat)) : -1;
}

static void test_http(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, NULL);
    static char buf[1 << 20];
    assert_int_equal(curl_get(mp.mport, "/health", buf, sizeof(buf)), 200);
    assert_int_equal(curl_get(mp.mport, "/role", buf, sizeof(buf)), 200);
    assert_int_equal(curl_get(mp.mport, "/metrics", buf, sizeof(buf)), 200);
    assert_true(metric_value(buf, "master_key_count") == 0);
    assert_non_null(strstr(buf, "master_put_start_requests_total"));
    mc_rpc_client_t *a;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    assert_int_equal(put_start(a, CA, "hk", 1000, 1, NULL), MC_OK);
    assert_int_equal(put_end(a, CA, "hk", 1), MC_OK);
    uint64_t deadline = mc_now_ms() + 5000;
    for (;;) {
        assert_int_equal(curl_get(mp.mport, "/metrics", buf, sizeof(buf)), 200);
        if (metric_value(buf, "master_key_count") == 1)
            break;
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    assert_true(metric_value(buf, "master_put_start_requests_total") == 1);
    assert_true(metric_value(buf, "master_total_capacity_bytes") == 1 << 20);
    assert_true(metric_value(buf, "master_allocated_bytes") == 1024);
    assert_true(metric_value(buf, "master_active_clients") == 1);
    assert_int_equal(curl_get(mp.mport, "/query_key?key=hk", buf, sizeof(buf)), 200);
    assert_non_null(strstr(buf, "\"segment\":\"segA\""));
    assert_int_equal(curl_get(mp.mport, "/query_key?key=nope", buf, sizeof(buf)), 404);
    assert_int_equal(curl_get(mp.mport, "/get_all_segments", buf, sizeof(buf)), 200);
    assert_non_null(strstr(buf, "\"name\":\"segA\""));
    mc_rpc_client_destroy(a);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* --enable_http_metadata_server: the TE metadata store served by the master, persisted next to
 * the WAL so that it survives kill -9 (upstream #2246). Skipped when this build lacks it. */
static void test_http_metadata_server(void **state)
{
    (void)state;
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    uint16_t hp;
    assert_int_equal(mc_net_free_port(&hp), MC_OK);
    char extra[128];
    snprintf(extra, sizeof(extra), "--enable_http_metadata_server --http_metadata_server_port=%u",
             hp);
    if (!start_master_ex(&mp, extra, true)) {
        fprintf(stderr, "built without the HTTP metadata server; skipping\n");
        skip();
    }
    char cmd[256], out[4096];
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -m 5 -X PUT -d '{\"name\":\"seg\"}' "
             "'http://127.0.0.1:%u/metadata?key=mooncake/ram/seg'", hp);
    assert_int_equal(system(cmd), 0);
    /* the metadata server is on its own port: read through curl_get's helper */
    uint64_t deadline = mc_now_ms() + 5000;
    while (curl_get(hp, "/metadata?key=mooncake/ram/seg", out, sizeof(out)) != 200)
        assert_true(mc_now_ms() < deadline);
    assert_non_null(strstr(out, "\"seg\""));
    stop_master(&mp, SIGKILL);
    start_master(&mp, extra);
    deadline = mc_now_ms() + 5000;
    while (curl_get(hp, "/metadata?key=mooncake/ram/seg", out, sizeof(out)) != 200)
        assert_true(mc_now_ms() < deadline);
    assert_non_null(strstr(out, "\"seg\""));
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

/* A real Prometheus server scrapes the master; master_key_count must change in its TSDB. */
static pid_t g_prom;
static char g_prom_dir[128];

static double prom_query(uint16_t port, const char *q)
{
    static char buf[65536];
    char path[256];
    snprintf(path, sizeof(path), "/api/v1/query?query=%s", q);
    if (curl_get(port, path, buf, sizeof(buf)) != 200)
        return -1;
    /* ..."value":[1690000000.123,"1"]... */
    const char *v = strstr(buf, "\"value\":[");
    if (!v)
        return -1;
    v = strchr(v, ',');
    if (!v || v[1] != '"')
        return -1;
    return atof(v + 2);
}

static void test_prometheus(void **state)
{
    (void)state;
    if (access("/usr/bin/prometheus", X_OK) != 0) {
        fprintf(stderr, "prometheus not installed; skipping\n");
        skip();
    }
    static master_proc_t mp;
    memset(&mp, 0, sizeof(mp));
    new_wal_dir(&mp);
    start_master(&mp, NULL);
    snprintf(g_prom_dir, sizeof(g_prom_dir), "/tmp/mc_prom_XXXXXX");
    assert_non_null(mkdtemp(g_prom_dir));
    char cfg[256];
    snprintf(cfg, sizeof(cfg), "%s/prometheus.yml", g_prom_dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f, "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
               "scrape_configs:\n  - job_name: mooncake_master\n    static_configs:\n"
               "      - targets: ['127.0.0.1:%u']\n", mp.mport);
    fclose(f);
    uint16_t pport;
    assert_int_equal(mc_net_free_port(&pport), MC_OK);
    g_prom = fork();
    assert_true(g_prom >= 0);
    if (g_prom == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        char a1[300], a2[300], a3[64];
        snprintf(a1, sizeof(a1), "--config.file=%s", cfg);
        snprintf(a2, sizeof(a2), "--storage.tsdb.path=%s/data", g_prom_dir);
        snprintf(a3, sizeof(a3), "--web.listen-address=127.0.0.1:%u", pport);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 1);
        dup2(devnull, 2);
        execl("/usr/bin/prometheus", "prometheus", a1, a2, a3, (char *)NULL);
        _exit(127);
    }
    uint64_t deadline = mc_now_ms() + 30000;
    while (prom_query(pport, "master_key_count") != 0) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(200);
    }
    mc_rpc_client_t *a;
    assert_int_equal(mc_rpc_client_create(mp.addr, NULL, &a), MC_OK);
    assert_int_equal(mount(a, CA, "segA", 1 << 30, 1 << 20, 1, false), MC_OK);
    for (int i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof(key), "pk%d", i);
        assert_int_equal(put_start(a, CA, key, 1000, 1, NULL), MC_OK);
        assert_int_equal(put_end(a, CA, key, 1), MC_OK);
    }
    while (prom_query(pport, "master_key_count") != 3) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(200);
    }
    assert_true(prom_query(pport, "master_put_end_requests_total") == 3);
    mc_rpc_client_destroy(a);
    stop_master(&mp, SIGTERM);
    rm_wal(&mp);
}

static int teardown(void **state)
{
    (void)state;
    if (g_live && g_live->pid > 0) {
        kill(g_live->pid, SIGKILL);
        waitpid(g_live->pid, NULL, 0);
        g_live->pid = 0;
    }
    if (g_live && g_live->wal[0]) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_live->wal);
        if (system(cmd) != 0)
            return -1;
    }
    g_live = NULL;
    if (g_prom > 0) {
        kill(g_prom, SIGTERM);
        waitpid(g_prom, NULL, 0);
        g_prom = 0;
    }
    if (g_prom_dir[0]) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", g_prom_dir);
        if (system(cmd) != 0)
            return -1;
        g_prom_dir[0] = 0;
    }
    return 0;
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_state_machine, teardown),
        cmocka_unit_test_teardown(test_client_death, teardown),
        cmocka_unit_test_teardown(test_bad_input_keeps_serving, teardown),
        cmocka_unit_test_teardown(test_kill9_restart, teardown),
        cmocka_unit_test_teardown(test_http, teardown),
        cmocka_unit_test_teardown(test_prometheus, teardown),
        cmocka_unit_test_teardown(test_http_metadata_server, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
