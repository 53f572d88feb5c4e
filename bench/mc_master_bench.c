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
 *  5. batch_lookup: one BatchGetReplicaList of --batch keys at a time (window 1) over loopback
 *     RPC, as a store client's first read of a batch makes it: round-trip p50/p99 in µs, and
 *     the parts measured alone on this thread (client encode, server decode, core lookups,
 *     server encode, client decode; the rest is syscalls and wake-ups), and the server loop's
 *     and the caller's CPU per call. --compact (default on; also phase 3's BatchGetReplicaList) asks for the
 *     compact answer as the store client does; --compact=false for the usual one.
 *  6. promote (only when named): a standby core applies a leader's log of --promote-objects
 *     (1,000,000) puts and is promoted; the apply rate and the promotion's time (what a
 *     takeover adds after the election).
 *
 * Usage: mc_master_bench [--objects N] [--lookup-objects N] [--batch B] [--seconds S]
 *                        [--window W] [--phase all|rss|core|rpc|evict|batch_lookup|promote]
 *                        [--eviction_policy lru|adaptive]   (--help lists them)
 * Every line carries "eviction_policy". 
 */
#include "bench_stats.h"
#include "common/alloc.h"
#include "common/config.h"
#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "master/master.h"
#include "master/service.h"
#include "rpc/arena.h"
#include "rpc/replica_lists.h"
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

/* A standby's share of a failover: a leader (its WAL in a temporary directory, records kept
 * for the replicated log) puts `objects` objects of 512 KiB on 8 segments; a standby core
 * applies the whole log (mc_master_follow_apply, one call) and is then promoted
 * (mc_master_follow_promote: allocators built from the replicas, the state a restart ends
 * in). Times both; the promotion is what a takeover adds after the election. */
static void phase_promote(uint64_t objects)
{
    char dir[] = "/tmp/mc_master_bench_promote_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.eviction_policy = g_policy;
    cfg.wal_dir = dir;
    mc_master_t *m, *f;
    if (mc_master_create(&cfg, &m) != MC_OK)
        exit(1);
    mc_master_ha_log_enable(m);
    mount_segments(m, 8, 1ull << 40);
    uint64_t ok = fill(m, objects, 512 << 10);
    bool lost, space;
    mc_buf_t *log = mc_master_ha_log(m, &lost, &space);
    mc_master_config_t fcfg = cfg;
    fcfg.wal_dir = NULL;
    if (lost || mc_master_create(&fcfg, &f) != MC_OK || mc_master_follow_begin(f) != MC_OK)
        exit(1);
    size_t len = mc_buf_unread(log), used = 0;
    uint64_t records = 0, t0 = mc_now_ns();
    if (mc_master_follow_apply(f, mc_buf_head(log), len, &used, &records, NULL) != MC_OK ||
        used != len) {
        fprintf(stderr, "the standby could not apply the log\n");
        exit(1);
    }
    uint64_t t1 = mc_now_ns();
    mc_master_destroy(m);
    uint64_t t2 = mc_now_ns();
    if (mc_master_follow_promote(f, NULL, 1) != MC_OK) {
        fprintf(stderr, "the promotion failed\n");
        exit(1);
    }
    uint64_t t3 = mc_now_ns();
    line_open();
    printf("\"bench\":\"master_promote\",\"objects\":%llu,\"segments\":8,"
           "\"log_bytes\":%zu,\"records\":%llu,\"apply_s\":%.3f,"
           "\"apply_records_per_s\":%.0f,\"promote_ms\":%.1f,"
           "\"promote_ns_per_object\":%.0f}\n",
           (unsigned long long)ok, len, (unsigned long long)records, (double)(t1 - t0) / 1e9,
           (double)records / ((double)(t1 - t0) / 1e9), (double)(t3 - t2) / 1e6,
           ok ? (double)(t3 - t2) / (double)ok : 0);
    fflush(stdout);
    mc_master_destroy(f);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
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
            uint64_t now = mc_master_lookup_prepare(m, bk, bl, (size_t)batch, bh);
            for (int b = 0; b < batch; b++) {
                const char *key = bk[b];
                size_t kl = bl[b];
                if (op == 0) {
                    mc_master_replica_t r[8];
                    uint32_t n;
                    uint64_t sz, sum;
                    hits += mc_master_get_replicas_h(m, key, kl, bh[b], now, r, &n, &sz, &sum) == MC_OK;
                } else {
                    hits += mc_master_exist_h(m, key, kl, bh[b], now) == MC_OK;
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

/* Mean ns of fn(arg) over enough runs to last ~20 ms. */
static double time_ns(void (*fn)(void *), void *arg)
{
    uint64_t runs = 0, t0 = mc_now_ns(), t;
    do {
        fn(arg);
        runs++;
    } while ((t = mc_now_ns()) - t0 < 20000000ull);
    return (double)(t - t0) / (double)runs;
}

typedef struct lat_part {
    const ProtobufCMessage *msg;   /* encode: the message packed */
    const ProtobufCMessageDescriptor *desc; /* decode: the type of buf */
    uint8_t *buf;
    size_t len;
    mc_rpc_arena_t *arena;
    mc_master_t *m;               /* lookups: the core and the batch */
    const char **keys;
    size_t *klens;
    int n;
    size_t n_keys;                /* decode of an answer: keys asked (expanded as the client does) */
} lat_part_t;

static void part_encode(void *arg)
{
    lat_part_t *p = arg;
    size_t n = protobuf_c_message_get_packed_size(p->msg);
    protobuf_c_message_pack(p->msg, p->buf);
    p->len = n;
}

static void part_decode(void *arg)
{
    lat_part_t *p = arg;
    ProtobufCMessage *m = protobuf_c_message_unpack(p->desc, &p->arena->pb, p->len, p->buf);
    if (p->n_keys) /* an answer: as the store client reads it */
        mc_rpc_replicas_expand(&p->arena->pb, p->n_keys, (void *)m);
    mc_rpc_arena_reset(p->arena);
}

static void part_lookup(void *arg)
{
    lat_part_t *p = arg;
    uint32_t h[16384];
    uint64_t now = mc_master_lookup_prepare(p->m, p->keys, p->klens, (size_t)p->n, h);
    for (int b = 0; b < p->n; b++) {
        mc_master_replica_t r[8];
        uint32_t nr;
        uint64_t sz, sum;
        mc_master_get_replicas_h(p->m, p->keys[b], p->klens[b], h[b], now, r, &nr, &sz, &sum);
    }
}

/* Phase 5 (see the top), first half: the round trips on c, whose master holds the pool's
 * keys. Keeps the last request and answer in *lb for lookup_parts. */
typedef struct lookup_bench {
    int batch;
    bool auth, compact;
    ProtobufCBinaryData *keys;
    McRpc__BatchKeyRequest req;
    ProtobufCMessage *resp; /* in arena */
    mc_rpc_arena_t arena;
    uint64_t *lat, hits;
    size_t n;
    double server_cpu_s; /* the server loop thread's CPU over the round trips */
    double client_cpu_s; /* this thread's (the caller's, spin included) */
} lookup_bench_t;

static void lookup_rtt(mc_rpc_client_t *c, lookup_bench_t *lb, int batch, double seconds,
                       bool auth, bool compact)
{
    *lb = (lookup_bench_t){.batch = batch, .auth = auth, .compact = compact};
    lb->keys = malloc((size_t)batch * sizeof(*lb->keys));
    size_t cap = (size_t)seconds * 200000 + 16;
    lb->lat = malloc(cap * sizeof(*lb->lat));
    mc_rpc_arena_init(&lb->arena, 1u << 20);
    mc_rpc__batch_key_request__init(&lb->req);
    lb->req.keys = lb->keys;
    lb->req.n_keys = (size_t)batch;
    lb->req.compact_replicas = compact;
    uint64_t i = 0, end = mc_now_ns() + (uint64_t)(seconds * 1e9);
    while (mc_now_ns() < end && lb->n < cap) {
        for (int b = 0; b < batch; b++)
            lb->keys[b] = mc_wire_key_str(g_pool[i++ % POOL]);
        mc_rpc_arena_reset(&lb->arena);
        uint64_t t0 = mc_now_ns();
        if (mc_rpc_client_call_with(c, MC_OP_BATCH_GET_REPLICA_LIST, &lb->req.base, &lb->resp,
                                    30000, &lb->arena.pb) != MC_OK) {
            fprintf(stderr, "rpc failed\n");
            exit(1);
        }
        McRpc__BatchReplicaListResponse *r = (void *)lb->resp;
        if (mc_rpc_replicas_expand(&lb->arena.pb, (size_t)batch, r) != MC_OK)
            exit(1);
        lb->lat[lb->n++] = mc_now_ns() - t0;
        for (size_t k = 0; k < r->n_results; k++)
            lb->hits += r->results[k]->status == MC_OK;
    }
}

/* Second half, once the server loop has stopped (the core is then this thread's): the parts
 * alone on the last request and answer, and the JSON line. Frees lb. */
static void lookup_parts(lookup_bench_t *lb, mc_master_t *m)
{
    int batch = lb->batch;
    const char **ck = malloc((size_t)batch * sizeof(*ck));
    size_t *cl = malloc((size_t)batch * sizeof(*cl));
    size_t rq_len = protobuf_c_message_get_packed_size(&lb->req.base);
    McRpc__BatchReplicaListResponse *rr = (void *)lb->resp;
    if (lb->compact) { /* the answer as it came: the expanded results were not sent */
        rr->results = NULL;
        rr->n_results = 0;
    }
    size_t rs_len = protobuf_c_message_get_packed_size(lb->resp);
    uint8_t *buf = malloc(rq_len + rs_len);
    mc_rpc_arena_t a2;
    mc_rpc_arena_init(&a2, 1u << 20);
    for (int b = 0; b < batch; b++) {
        ck[b] = (const char *)lb->keys[b].data;
        cl[b] = lb->keys[b].len;
    }
    lat_part_t prq = {.msg = &lb->req.base, .desc = &mc_rpc__batch_key_request__descriptor,
                      .buf = buf, .arena = &a2},
               prs = {.msg = lb->resp,
                      .desc = &mc_rpc__batch_replica_list_response__descriptor, .buf = buf,
                      .arena = &a2, .n_keys = (size_t)batch},
               plk = {.m = m, .keys = ck, .klens = cl, .n = batch};
    double enc_rq = time_ns(part_encode, &prq), dec_rq = time_ns(part_decode, &prq);
    double enc_rs = time_ns(part_encode, &prs), dec_rs = time_ns(part_decode, &prs);
    double look = time_ns(part_lookup, &plk);
    double p50 = mc_bench_pct_us(lb->lat, lb->n, 0.5), p99 = mc_bench_pct_us(lb->lat, lb->n, 0.99);
    line_open();
    printf("\"bench\":\"master_rpc_batch_lookup\",\"transport\":\"tcp-loopback\",\"auth\":%s,"
           "\"compact\":%s,\"batch\":%d,\"window\":1,\"calls\":%zu,\"hits\":%llu,\"p50_us\":%.1f,"
           "\"p99_us\":%.1f,\"request_bytes\":%zu,\"answer_bytes\":%zu,"
           "\"client_encode_us\":%.1f,\"server_decode_us\":%.1f,\"core_lookups_us\":%.1f,"
           "\"server_encode_us\":%.1f,\"client_decode_us\":%.1f,"
           "\"server_cpu_us_per_call\":%.1f,\"client_cpu_us_per_call\":%.1f}\n",
           lb->auth ? "true" : "false", lb->compact ? "true" : "false", batch, lb->n, (unsigned long long)lb->hits, p50, p99,
           rq_len, rs_len, enc_rq / 1e3, dec_rq / 1e3, look / 1e3, enc_rs / 1e3, dec_rs / 1e3,
           lb->n ? lb->server_cpu_s * 1e6 / (double)lb->n : 0,
           lb->n ? lb->client_cpu_s * 1e6 / (double)lb->n : 0);
    fflush(stdout);
    mc_rpc_arena_destroy(&lb->arena);
    mc_rpc_arena_destroy(&a2);
    free(buf);
    free(lb->lat);
    free(lb->keys);
    free(ck);
    free(cl);
}

/* auth: keyring the server requires and the client proves (NULL = authentication off) */
static void phase_rpc(uint64_t objects, int batch, double seconds, int window,
                      const mc_auth_t *auth, bool throughput, bool lookup, bool compact)
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
    if (mc_master_create(&o.cfg, &o.core) != MC_OK) /* the service owns it from here */
        exit(1);
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
    for (int op = 0; op < (throughput ? 2 : 0); op++) {
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
                reqs[w].compact_replicas = op == 0 && compact;
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
                    if (mc_rpc_replicas_expand(&arena.pb, (size_t)batch, r) != MC_OK)
                        exit(1);
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
               "\"compact\":%s,\"batch\":%d,"
               "\"window\":%d,\"objects\":%llu,\"keys\":%llu,\"hits\":%llu,\"seconds\":%.2f,"
               "\"keys_per_s\":%.0f,\"server_loop_cpu_s\":%.2f,"
               "\"keys_per_server_cpu_s\":%.0f,\"target_keys_per_s\":1000000}\n",
               op == 0 ? "batch_get_replica_list" : "batch_exist_key", auth ? "true" : "false",
               op == 0 && compact ? "true" : "false", batch, window,
               (unsigned long long)objects, (unsigned long long)done, (unsigned long long)hits,
               secs, (double)done / secs, cpu, cpu > 0 ? (double)done / cpu : 0);
        fflush(stdout);
    }
    mc_rpc_arena_destroy(&arena);
    lookup_bench_t lb;
    if (lookup) {
        double cpu0 = thread_cpu_s(th), ccpu0 = self_cpu_s();
        lookup_rtt(c, &lb, batch, seconds, auth != NULL, compact);
        lb.server_cpu_s = thread_cpu_s(th) - cpu0;
        lb.client_cpu_s = self_cpu_s() - ccpu0;
    }
    mc_rpc_client_destroy(c);
    mc_master_service_stop(svc);
    pthread_join(th, NULL);
    if (lookup)
        lookup_parts(&lb, o.core);
    mc_master_service_destroy(svc);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", wal);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", wal);
}

int main(int argc, char **argv)
{
    int64_t objects = 1536000, small = 200000, batch = 128, window = 8, promote = 1000000;
    double seconds = 3;
    const char *phase = "all", *token_file = "", *policy = "lru";
    bool compact = true;
    int64_t busy_poll_us = -1;
    mc_option_t opts[] = {
        {"objects", MC_OPT_INT, &objects, NULL, "objects for the RSS-per-object phase", 1, 1e9},
        {"lookup-objects", MC_OPT_INT, &small, NULL, "objects the lookup phases read", 1, 1e9},
        {"promote-objects", MC_OPT_INT, &promote, NULL,
         "objects the promote phase's standby applies and is promoted with", 1, 1e9},
        {"batch", MC_OPT_INT, &batch, NULL, "keys per batch call", 1, 16384},
        {"seconds", MC_OPT_DOUBLE, &seconds, NULL, "length of each timed phase", 0.1, 3600},
        {"window", MC_OPT_INT, &window, NULL, "RPC calls in flight (rpc phase)", 1, 1024},
        {"phase", MC_OPT_STRING, &phase, NULL,
         "all, rss, core, evict, rpc, batch_lookup, or promote (only when named)", 0, 0},
        {"compact", MC_OPT_BOOL, &compact, NULL,
         "rpc and batch_lookup: BatchGetReplicaList asks for the compact answer "
         "(BatchKeyRequest.compact_replicas), as the store client does", 0, 0},
        {"busy_poll_us", MC_OPT_INT, &busy_poll_us, NULL,
         "the RPC client's spin before it sleeps on an answer (-1 = the default)", -1, 10000},
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
        strcmp(phase, "rpc") && strcmp(phase, "evict") && strcmp(phase, "batch_lookup") &&
        strcmp(phase, "promote")) {
        fprintf(stderr, "mc_master_bench: --phase must be all, rss, core, evict, rpc, "
                        "batch_lookup or promote\n");
        return 2;
    }
    if (mc_evict_policy_parse(policy, &g_policy) != MC_OK ||
        (g_policy != MC_EVICT_LRU && g_policy != MC_EVICT_ADAPTIVE)) {
        fprintf(stderr, "mc_master_bench: --eviction_policy must be lru or adaptive\n");
        return 2;
    }
    mc_log_set_level(MC_LOG_LEVEL_WARN);
    if (busy_poll_us >= 0)
        mc_net_set_busy_poll_us((uint32_t)busy_poll_us);
    if (!strcmp(phase, "promote"))
        phase_promote((uint64_t)promote);
    if (!strcmp(phase, "all") || !strcmp(phase, "rss"))
        phase_rss(objects);
    if (!strcmp(phase, "all") || !strcmp(phase, "core"))
        phase_core(small, batch, seconds);
    if (!strcmp(phase, "all") || !strcmp(phase, "evict"))
        phase_evict(small);
    bool rpc = !strcmp(phase, "all") || !strcmp(phase, "rpc");
    bool lookup = !strcmp(phase, "all") || !strcmp(phase, "batch_lookup");
    if (rpc || lookup) {
        mc_auth_t *auth = NULL;
        if (mc_auth_load(token_file, &auth) != MC_OK) {
            fprintf(stderr, "mc_master_bench: cannot load --auth_token_file %s\n", token_file);
            return 2;
        }
        phase_rpc(small, batch, seconds, window, auth, rpc, lookup, compact);
        mc_auth_free(auth);
    }
    return 0;
}
