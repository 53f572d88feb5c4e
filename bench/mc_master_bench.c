/* mc_master_bench: the master alone. Prints JSON lines.
 *
 *  1. rss: master RSS per object at --objects (default 1,536,000) committed objects with ~90-byte
 *     keys "model@tp_rank@worker@<64-hex>@bf16" and one replica each (WAL off).
 *  2. core: BatchGetReplicaList / BatchExistKey keys/s, batches of --batch (128), calling the
 *     core directly on this thread (one core).
 *  4. evict: PutStart+PutEnd pairs/s into a segment that holds a quarter of them, so that three
 *     puts in four evict (synchronously, as a put into a full store does).
 *  3. rpc: the same over loopback RPC against an in-process server loop thread, with --window
 *     batches in flight on one connection (the server's loop thread is the measured core).
 *
 * Usage: mc_master_bench [--objects N] [--lookup-objects N] [--batch B] [--seconds S]
 *                        [--window W] [--phase all|rss|core|rpc|evict]
 *                        [--eviction_policy lru|adaptive]   (--help lists them)
 * Every line carries "eviction_policy". 
 */
#include "common/alloc.h"
#include "common/config.h"
#include "common/log.h"
#include "common/time.h"
#include "master/master.h"
#include "master/service.h"
#include "rpc/arena.h"
#include "rpc/rpc_client.h"
#include "rpc/wire_key.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static mc_evict_policy_t g_policy = MC_EVICT_LRU; /* --eviction_policy */

/* Every JSON line starts with the policy it ran under. */
static void line_open(void)
{
    printf("{\"eviction_policy\":\"%s\",", mc_evict_policy_name(g_policy));
}

/* CPU seconds of the calling thread: rates per CPU second do not move when the machine is
 * shared and the thread is preempted (wall-clock rates do). */
static double self_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const uint8_t CID[16] = {0xbe, 0x4c, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};

static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &v) == 1)
            break;
    if (f)
        fclose(f);
    return v;
}

static void make_key(char *out, size_t n, uint64_t i)
{
    /* ~90 bytes like engines build them: model@tp_rank@worker@<64-hex chained hash>@bf16 */
    uint64_t h1 = i * 0x9E3779B97F4A7C15ull, h2 = h1 ^ 0xD1B54A32D192ED03ull,
             h3 = h2 * 0xff51afd7ed558ccdull, h4 = h3 ^ (i << 17);
    snprintf(out, n, "llama3-70b@tp%u@worker%u@%016llx%016llx%016llx%016llx@bf16",
             (unsigned)(i % 8), (unsigned)(i % 4), (unsigned long long)h1,
             (unsigned long long)h2, (unsigned long long)h3, (unsigned long long)h4);
}

/* Precomputed keys so that the timed loops measure the master, not snprintf. */
#define POOL 65536
static char (*g_pool)[128];
static void pool_init(uint64_t objects)
{
    g_pool = malloc((size_t)POOL * 128);
    for (uint64_t i = 0; i < POOL; i++)
        make_key(g_pool[i], 128, (i * 7919) % objects);
}

static void mount_segments(mc_master_t *m, int n, uint64_t size)
{
    for (int s = 0; s < n; s++) {
        char name[32];
        snprintf(name, sizeof(name), "bench-seg-%d", s);
        mc_master_segment_info_t si = {.name = name, .base = (uint64_t)(s + 1) << 42,
                                       .size = size, .host_label = name, .te_endpoint = name};
        memset(si.uuid, s + 1, 16);
        if (mc_master_mount(m, CID, &si, false) != MC_OK) {
            fprintf(stderr, "mount failed\n");
            exit(1);
        }
    }
}

static uint64_t fill(mc_master_t *m, uint64_t n, uint64_t value_size)
{
    char key[128];
    mc_master_replica_t r[8];
    uint32_t nr;
    uint64_t ok = 0;
    for (uint64_t i = 0; i < n; i++) {
        make_key(key, sizeof(key), i);
        size_t kl = strlen(key);
        if (mc_master_put_start(m, CID, key, kl, value_size, NULL, false, r, &nr) == MC_OK &&
            mc_master_put_end(m, CID, key, kl, i) == MC_OK)
            ok++;
    }
    return ok;
}

static void phase_rss(uint64_t objects)
{
    long before = rss_kb();
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.eviction_policy = g_policy;
    mc_master_t *m;
    if (mc_master_create(&cfg, &m) != MC_OK)
        exit(1);
    mount_segments(m, 8, 1ull << 40);
    mc_master_cron(m); /* the policy learns the capacity, as the service's cron does */
    uint64_t t0 = mc_now_ns();
    uint64_t ok = fill(m, objects, 512 << 10);
    double secs = (double)(mc_now_ns() - t0) / 1e9;
    long after = rss_kb();
    char key[128];
    make_key(key, sizeof(key), 0);
    line_open();
    printf("\"bench\":\"master_rss_per_object\",\"objects\":%llu,\"key_bytes\":%zu,"
           "\"replicas\":1,\"rss_before_kb\":%ld,\"rss_after_kb\":%ld,"
           "\"bytes_per_object\":%.1f,\"target_bytes_per_object\":256,"
           "\"put_start_end_pairs_per_s\":%.0f}\n",
           (unsigned long long)ok, strlen(key), before, after,
           (double)(after - before) * 1024.0 / (double)ok, (double)ok / secs);
    fflush(stdout);
    mc_master_destroy(m);
}

static void phase_core(uint64_t objects, int batch, double seconds)
{
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.eviction_policy = g_policy;
    mc_master_t *m;
    if (mc_master_create(&cfg, &m) != MC_OK)
        exit(1);
    mount_segments(m, 8, 1ull << 40);
    mc_master_cron(m); /* the policy learns the capacity, as the service's cron does */
    fill(m, objects, 512 << 10);
    pool_init(objects);
    size_t *klen = malloc(POOL * sizeof(size_t));
    for (int k = 0; k < POOL; k++)
        klen[k] = strlen(g_pool[k]);
    for (int op = 0; op < 2; op++) {
        uint64_t done = 0, hits = 0, i = 0;
        uint64_t t0 = mc_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
        double cpu0 = self_cpu_s();
        const char **bk = malloc((size_t)batch * sizeof(char *));
        size_t *bl = malloc((size_t)batch * sizeof(size_t));
        uint32_t *bh = malloc((size_t)batch * sizeof(uint32_t));
        while (mc_now_ns() < end) {
            for (int b = 0; b < batch; b++) {
                bk[b] = g_pool[(i + (uint64_t)b) % POOL];
                bl[b] = klen[(i + (uint64_t)b) % POOL];
            }
            i += (uint64_t)batch;
            mc_master_lookup_prepare(m, bk, bl, (size_t)batch, bh);
            for (int b = 0; b < batch; b++) {
                const char *key = bk[b];
                size_t kl = bl[b];
                if (op == 0) {
                    mc_master_replica_t r[8];
                    uint32_t n;
                    uint64_t sz, sum;
                    hits += mc_master_get_replicas_h(m, key, kl, bh[b], r, &n, &sz, &sum) == MC_OK;
                } else {
                    hits += mc_master_exist_h(m, key, kl, bh[b]) == MC_OK;
                }
            }
            done += (uint64_t)batch;
        }
        free(bk);
        free(bl);
        free(bh);
        double secs = (double)(mc_now_ns() - t0) / 1e9, cpu = self_cpu_s() - cpu0;
        line_open();
        printf("\"bench\":\"master_core_%s\",\"batch\":%d,\"objects\":%llu,\"keys\":%llu,"
               "\"hits\":%llu,\"seconds\":%.2f,\"keys_per_s\":%.0f,\"keys_per_cpu_s\":%.0f,"
               "\"target_keys_per_s\":1000000}\n",
               op == 0 ? "batch_get_replica_list" : "batch_exist_key", batch,
               (unsigned long long)objects, (unsigned long long)done, (unsigned long long)hits,
               secs, (double)done / secs, (double)done / cpu);
        fflush(stdout);
    }
    free(klen);
    mc_master_destroy(m);
}

static void phase_evict(uint64_t objects)
{
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.eviction_policy = g_policy;
    mc_master_t *m;
    if (mc_master_create(&cfg, &m) != MC_OK)
        exit(1);
    const uint64_t value = 64 << 10;
    mount_segments(m, 1, objects / 4 * value);
    mc_master_cron(m);
    uint64_t t0 = mc_now_ns();
    double cpu0 = self_cpu_s();
    uint64_t ok = fill(m, objects, value);
    double secs = (double)(mc_now_ns() - t0) / 1e9, cpu = self_cpu_s() - cpu0;
    mc_master_metrics_t mt;
    mc_master_metrics_now(m, &mt);
    line_open();
    printf("\"bench\":\"master_core_put_with_eviction\",\"objects\":%llu,\"ok\":%llu,"
           "\"evicted\":%llu,\"seconds\":%.2f,\"put_start_end_pairs_per_s\":%.0f,"
           "\"pairs_per_cpu_s\":%.0f}\n",
           (unsigned long long)objects, (unsigned long long)ok,
           (unsigned long long)mt.evicted_objects, secs, (double)ok / secs, (double)ok / cpu);
    fflush(stdout);
    mc_master_destroy(m);
}

static double thread_cpu_s(pthread_t th)
{
    clockid_t cid;
    struct timespec ts;
    if (pthread_getcpuclockid(th, &cid) != 0 || clock_gettime(cid, &ts) != 0)
        return -1;
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *run_svc(void *arg)
{
    mc_master_service_run(arg);
    return NULL;
}

/* auth: keyring the server requires and the client proves (NULL = authentication off) */
static void phase_rpc(uint64_t objects, int batch, double seconds, int window,
                      const mc_auth_t *auth)
{
    mc_master_service_opts_t o = {.rpc_address = "127.0.0.1", .port = 0, .metrics_port = -1,
                                  .auth = auth};
    mc_master_config_default(&o.cfg);
    o.cfg.eviction_policy = g_policy;
    /* WAL on (fdatasync group commit) so that the put figures include durability */
    char wal[] = "/tmp/mc_master_bench_wal_XXXXXX";
    if (!mkdtemp(wal))
        exit(1);
    o.cfg.wal_dir = wal;
    mc_master_service_t *svc;
    if (mc_master_service_create(&o, &svc) != MC_OK)
        exit(1);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", mc_master_service_port(svc));
    pthread_t th;
    pthread_create(&th, NULL, run_svc, svc);
    mc_rpc_client_t *c;
    mc_rpc_client_opts_t copts = {.auth = auth};
    mc_rpc_client_create(addr, &copts, &c);
    /* mount + fill over RPC with batched puts */
    for (int s = 0; s < 8; s++) {
        char name[32];
        snprintf(name, sizeof(name), "bench-seg-%d", s);
        uint8_t uuid[16];
        memset(uuid, s + 1, 16);
        McRpc__SegmentInfo si = MC_RPC__SEGMENT_INFO__INIT;
        si.name = name;
        si.base_addr = (uint64_t)(s + 1) << 42;
        si.size = 1ull << 40;
        si.host_label = name;
        si.segment_uuid = (ProtobufCBinaryData){16, uuid};
        McRpc__MountSegmentRequest q = MC_RPC__MOUNT_SEGMENT_REQUEST__INIT;
        q.client_id = (ProtobufCBinaryData){16, (uint8_t *)CID};
        q.segment = &si;
        ProtobufCMessage *r;
        if (mc_rpc_client_call(c, MC_OP_MOUNT_SEGMENT, &q.base, &r, 5000) != MC_OK)
            exit(1);
        mc_rpc_response_free(r);
    }
    int fb = 1024;
    char (*kb)[128] = malloc((size_t)fb * 128);
    ProtobufCBinaryData *kp = malloc((size_t)fb * sizeof(*kp));
    uint64_t *sizes = malloc((size_t)fb * sizeof(uint64_t));
    uint64_t tp0 = mc_now_ns();
    for (uint64_t i = 0; i < objects; i += (uint64_t)fb) {
        int n = (int)((objects - i) < (uint64_t)fb ? objects - i : (uint64_t)fb);
        for (int j = 0; j < n; j++) {
            make_key(kb[j], 128, i + (uint64_t)j);
            kp[j] = mc_wire_key_str(kb[j]);
            sizes[j] = 512 << 10;
        }
        McRpc__BatchPutStartRequest ps = MC_RPC__BATCH_PUT_START_REQUEST__INIT;
        ps.client_id = (ProtobufCBinaryData){16, (uint8_t *)CID};
        ps.keys = kp;
        ps.n_keys = (size_t)n;
        ps.value_sizes = sizes;
        ps.n_value_sizes = (size_t)n;
        McRpc__BatchPutEndRequest pe = MC_RPC__BATCH_PUT_END_REQUEST__INIT;
        pe.client_id = ps.client_id;
        pe.keys = kp;
        pe.n_keys = (size_t)n;
        pe.checksums = sizes;
        pe.n_checksums = (size_t)n;
        ProtobufCMessage *r;
        if (mc_rpc_client_call(c, MC_OP_BATCH_PUT_START, &ps.base, &r, 30000) != MC_OK)
            exit(1);
        mc_rpc_response_free(r);
        if (mc_rpc_client_call(c, MC_OP_BATCH_PUT_END, &pe.base, &r, 30000) != MC_OK)
            exit(1);
        mc_rpc_response_free(r);
    }
    double psecs = (double)(mc_now_ns() - tp0) / 1e9;
    line_open();
    printf("\"bench\":\"master_rpc_batch_put_start_end\",\"transport\":\"tcp-loopback\","
           "\"auth\":%s,\"batch\":%d,\"objects\":%llu,\"wal\":\"fdatasync group commit\",\"seconds\":%.2f,"
           "\"objects_per_s\":%.0f}\n",
           auth ? "true" : "false", fb, (unsigned long long)objects, psecs, (double)objects / psecs);
    fflush(stdout);
    /* requests prepared up front: window x batch keys */
    McRpc__BatchKeyRequest *reqs = calloc((size_t)window, sizeof(*reqs));
    ProtobufCBinaryData **keys = calloc((size_t)window, sizeof(*keys));
    pool_init(objects);
    mc_rpc_pending_t *pend = calloc((size_t)window, sizeof(*pend));
    mc_rpc_arena_t arena; /* responses decoded into an arena reset per window */
    mc_rpc_arena_init(&arena, 4u << 20);
    for (int op = 0; op < 2; op++) {
        uint64_t done = 0, hits = 0, i = 0;
        double cpu0 = thread_cpu_s(th);
        uint64_t t0 = mc_now_ns(), end = t0 + (uint64_t)(seconds * 1e9);
        while (mc_now_ns() < end) {
            for (int w = 0; w < window; w++) {
                if (!keys[w])
                    keys[w] = malloc((size_t)batch * sizeof(*keys[w]));
                for (int b = 0; b < batch; b++)
                    keys[w][b] = mc_wire_key_str(g_pool[i++ % POOL]);
                mc_rpc__batch_key_request__init(&reqs[w]);
                reqs[w].keys = keys[w];
                reqs[w].n_keys = (size_t)batch;
                pend[w] = (mc_rpc_pending_t){
                    .opcode = op == 0 ? MC_OP_BATCH_GET_REPLICA_LIST : MC_OP_BATCH_EXIST_KEY,
                    .req = &reqs[w].base,
                    .allocator = &arena.pb};
            }
            if (mc_rpc_client_call_many(c, pend, (size_t)window, 30000) != MC_OK) {
                fprintf(stderr, "rpc failed\n");
                exit(1);
            }
            for (int w = 0; w < window; w++) {
                if (op == 0) {
                    McRpc__BatchReplicaListResponse *r = (void *)pend[w].resp;
                    for (size_t k = 0; k < r->n_results; k++)
                        hits += r->results[k]->status == MC_OK;
                } else {
                    McRpc__BatchStatusResponse *r = (void *)pend[w].resp;
                    for (size_t k = 0; k < r->n_statuses; k++)
                        hits += r->statuses[k] == MC_OK;
                }
            }
            mc_rpc_arena_reset(&arena);
            done += (uint64_t)window * (uint64_t)batch;
        }
        double secs = (double)(mc_now_ns() - t0) / 1e9;
        double cpu = thread_cpu_s(th) - cpu0;
        line_open();
        printf("\"bench\":\"master_rpc_%s\",\"transport\":\"tcp-loopback\",\"auth\":%s,"
               "\"batch\":%d,"
               "\"window\":%d,\"objects\":%llu,\"keys\":%llu,\"hits\":%llu,\"seconds\":%.2f,"
               "\"keys_per_s\":%.0f,\"server_loop_cpu_s\":%.2f,"
               "\"keys_per_server_cpu_s\":%.0f,\"target_keys_per_s\":1000000}\n",
               op == 0 ? "batch_get_replica_list" : "batch_exist_key", auth ? "true" : "false",
               batch, window,
               (unsigned long long)objects, (unsigned long long)done, (unsigned long long)hits,
               secs, (double)done / secs, cpu, cpu > 0 ? (double)done / cpu : 0);
        fflush(stdout);
    }
    mc_rpc_arena_destroy(&arena);
    mc_rpc_client_destroy(c);
    mc_master_service_stop(svc);
    pthread_join(th, NULL);
    mc_master_service_destroy(svc);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", wal);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", wal);
}

int main(int argc, char **argv)
{
    int64_t objects = 1536000, small = 200000, batch = 128, window = 8;
    double seconds = 3;
    const char *phase = "all", *token_file = "", *policy = "lru";
    mc_option_t opts[] = {
        {"objects", MC_OPT_INT, &objects, NULL, "objects for the RSS-per-object phase", 1, 1e9},
        {"lookup-objects", MC_OPT_INT, &small, NULL, "objects the lookup phases read", 1, 1e9},
        {"batch", MC_OPT_INT, &batch, NULL, "keys per batch call", 1, 16384},
        {"seconds", MC_OPT_DOUBLE, &seconds, NULL, "length of each timed phase", 0.1, 3600},
        {"window", MC_OPT_INT, &window, NULL, "RPC calls in flight (rpc phase)", 1, 1024},
        {"phase", MC_OPT_STRING, &phase, NULL, "all, rss, core, evict or rpc", 0, 0},
        {"eviction_policy", MC_OPT_STRING, &policy, NULL, "lru or adaptive (the master's flag)",
         0, 0},
        {"auth_token_file", MC_OPT_STRING, &token_file, "MC_AUTH_TOKEN_FILE",
         "rpc phase with authentication: the master requires, the client proves this token "
         "file (docs/security.md); empty = off", 0, 0},
    };
    mc_config_spec_t spec = {"mc_master_bench",
                             "Master alone: RSS per object, batch lookups in the core and over "
                             "loopback RPC (JSON lines).",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    if (strcmp(phase, "all") && strcmp(phase, "rss") && strcmp(phase, "core") &&
        strcmp(phase, "rpc") && strcmp(phase, "evict")) {
        fprintf(stderr, "mc_master_bench: --phase must be all, rss, core, evict or rpc\n");
        return 2;
    }
    if (mc_evict_policy_parse(policy, &g_policy) != MC_OK ||
        (g_policy != MC_EVICT_LRU && g_policy != MC_EVICT_ADAPTIVE)) {
        fprintf(stderr, "mc_master_bench: --eviction_policy must be lru or adaptive\n");
        return 2;
    }
    mc_log_set_level(MC_LOG_LEVEL_WARN);
    if (!strcmp(phase, "all") || !strcmp(phase, "rss"))
        phase_rss(objects);
    if (!strcmp(phase, "all") || !strcmp(phase, "core"))
        phase_core(small, batch, seconds);
    if (!strcmp(phase, "all") || !strcmp(phase, "evict"))
        phase_evict(small);
    if (!strcmp(phase, "all") || !strcmp(phase, "rpc")) {
        mc_auth_t *auth = NULL;
        if (mc_auth_load(token_file, &auth) != MC_OK) {
            fprintf(stderr, "mc_master_bench: cannot load --auth_token_file %s\n", token_file);
            return 2;
        }
        phase_rpc(small, batch, seconds, window, auth);
        mc_auth_free(auth);
    }
    return 0;
}
