/* Store soak: mixed put/upsert/get/remove/exist from several threads while storage servers are
 * killed (-9), frozen (-STOP for a while) and restarted, and the master is killed and
 * restarted once. Every value is self-describing (key hash, version, length, body derived
 * from them), so any byte a get returns that was not committed under that key is detected.
 *
 * Pass criteria: zero wrong values; gets succeeded both before and after the master restart.
 * Usage: store_soak [seconds] (default 40; bounded by the ctest timeout). */
#include "common/alloc.h"
#include "common/hash.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_SERVERS 3
#define N_WORKERS 4
#define N_KEYS 400
#define MAX_VALUE (192 * 1024)

typedef struct value_hdr {
    uint64_t key_hash;
    uint64_t version;
    uint64_t len;
    uint64_t body_hash;
} value_hdr_t;

static char work[256], master_addr[64];
static uint16_t master_port;
static pid_t master_pid, server_pid[N_SERVERS];
static pthread_mutex_t proc_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_int stop;
static atomic_ullong n_ok_gets, n_ok_puts, n_wrong, n_errors, gets_after_restart;
static atomic_int master_restarted;

static void start_master(void)
{
    char bin[512], port[32], wal[300], log[300];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(port, sizeof(port), "--port=%u", master_port);
    snprintf(wal, sizeof(wal), "--wal_dir=%s/wal", work);
    snprintf(log, sizeof(log), "%s/master.log", work);
    unlink(log);
    char *argv[] = {bin, port, "--metrics_port=0", wal, "--client_ttl=2", "--log_level=warn", NULL};
    master_pid = mt_spawn(argv, log);
    if (master_pid < 0 || mt_wait_log(log, "listening", 10000) != 0) {
        fprintf(stderr, "soak: master did not start\n");
        exit(1);
    }
}

static void start_server(int i)
{
    char bin[512], m[96], log[300], label[32];
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", master_addr);
    snprintf(label, sizeof(label), "--host_label=h%d", i);
    snprintf(log, sizeof(log), "%s/server%d.log", work, i);
    unlink(log);
    char *argv[] = {bin, m, "--global_segment_size=48MB", label, "--log_level=error", NULL};
    server_pid[i] = mt_spawn(argv, log);
    if (server_pid[i] < 0 || mt_wait_log(log, "mooncake_client ready", 15000) != 0) {
        fprintf(stderr, "soak: storage server %d did not start\n", i);
        exit(1);
    }
}

static size_t make_value(char *buf, const char *key, uint64_t version, uint64_t seed)
{
    size_t len = sizeof(value_hdr_t) + 64 + (size_t)(seed % (MAX_VALUE - sizeof(value_hdr_t) - 64));
    char *body = buf + sizeof(value_hdr_t);
    size_t blen = len - sizeof(value_hdr_t);
    uint64_t x = mc_hash_str(key) ^ (version * 0x9E3779B97F4A7C15ull);
    for (size_t i = 0; i + 8 <= blen; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(body + i, &x, 8);
    }
    value_hdr_t h = {mc_hash_str(key), version, len, mc_hash64(body, blen)};
    memcpy(buf, &h, sizeof(h));
    return len;
}

/* 1 if buf[0..len) is a value that was written under `key` (any version), else 0. */
static int value_ok(const char *buf, size_t len, const char *key)
{
    value_hdr_t h;
    if (len < sizeof(h))
        return 0;
    memcpy(&h, buf, sizeof(h));
    if (h.key_hash != mc_hash_str(key) || h.len != len)
        return 0;
    return mc_hash64(buf + sizeof(h), len - sizeof(h)) == h.body_hash;
}

static void *worker(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg * 7919u + 1;
    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .protocol = "tcp", .master_server_addr = master_addr,
                             .rpc_timeout_ms = 2000, .transfer_timeout_ms = 1500};
    mc_store_t *s = NULL;
    if (mc_store_create(&cfg, &s) != MC_OK) {
        atomic_fetch_add(&n_errors, 1000000);
        return NULL;
    }
    char *buf = mc_malloc(MAX_VALUE);
    uint64_t version = (uint64_t)(uintptr_t)arg << 40;
    while (!atomic_load(&stop)) {
        char key[32];
        snprintf(key, sizeof(key), "soak-%u", rand_r(&seed) % N_KEYS);
        unsigned op = rand_r(&seed) % 100;
        if (op < 40) {
            size_t len = make_value(buf, key, ++version, rand_r(&seed));
            struct iovec iov = {buf, len};
            mc_replicate_config_t rc = {.replica_num = 1 + rand_r(&seed) % 2};
            mc_status_t st = op < 20 ? mc_store_put(s, key, &iov, 1, &rc)
                                     : mc_store_upsert(s, key, &iov, 1, &rc);
            if (st == MC_OK)
                atomic_fetch_add(&n_ok_puts, 1);
        } else if (op < 85) {
            struct iovec iov = {buf, MAX_VALUE};
            int64_t n = mc_store_get_into(s, key, &iov, 1);
            if (n >= 0) {
                if (!value_ok(buf, (size_t)n, key)) {
                    atomic_fetch_add(&n_wrong, 1);
                    fprintf(stderr, "soak: WRONG BYTES for %s (%lld bytes)\n", key, (long long)n);
                } else {
                    atomic_fetch_add(&n_ok_gets, 1);
                    if (atomic_load(&master_restarted))
                        atomic_fetch_add(&gets_after_restart, 1);
                }
            }
        } else if (op < 95) {
            mc_store_remove(s, key, false);
        } else {
            mc_store_exists(s, key);
        }
    }
    mc_free(buf);
    mc_store_destroy(s);
    return NULL;
}

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 40;
    signal(SIGPIPE, SIG_IGN);
    if (mt_tmpdir(work, sizeof(work)) != 0 || mc_net_free_port(&master_port) != MC_OK)
        return 1;
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", master_port);
    start_master();
    for (int i = 0; i < N_SERVERS; i++)
        start_server(i);

    pthread_t tids[N_WORKERS];
    for (uintptr_t i = 0; i < N_WORKERS; i++)
        pthread_create(&tids[i], NULL, worker, (void *)(i + 1));

    /* Chaos schedule, one event every ~seconds/8: kill -9 / -STOP servers, one master restart. */
    uint64_t end = mc_now_ms() + (uint64_t)seconds * 1000;
    unsigned seed = 12345;
    int step = 0;
    uint64_t gets_before_restart = 0;
    while (mc_now_ms() < end) {
        mc_sleep_ms((uint32_t)(seconds * 1000 / 8));
        int victim = (int)(rand_r(&seed) % N_SERVERS);
        pthread_mutex_lock(&proc_lock);
        switch (step++ % 4) {
        case 0:
            fprintf(stderr, "soak: kill -9 storage server %d\n", victim);
            mt_stop(server_pid[victim], SIGKILL, 5000);
            start_server(victim);
            break;
        case 1:
            fprintf(stderr, "soak: kill -STOP storage server %d for 2 s\n", victim);
            mt_freeze(server_pid[victim], 5000);
            mc_sleep_ms(2000);
            kill(server_pid[victim], SIGCONT);
            break;
        case 2:
            if (!atomic_load(&master_restarted)) {
                gets_before_restart = atomic_load(&n_ok_gets);
                fprintf(stderr, "soak: kill -9 master and restart it\n");
                mt_stop(master_pid, SIGKILL, 5000);
                start_master();
                atomic_store(&master_restarted, 1);
            }
            break;
        default:
            break;
        }
        pthread_mutex_unlock(&proc_lock);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < N_WORKERS; i++)
        pthread_join(tids[i], NULL);
    for (int i = 0; i < N_SERVERS; i++)
        mt_stop(server_pid[i], SIGTERM, 5000);
    mt_stop(master_pid, SIGTERM, 5000);
    mt_rmdir(work);

    unsigned long long wrong = atomic_load(&n_wrong), ok = atomic_load(&n_ok_gets),
                       after = atomic_load(&gets_after_restart);
    printf("soak: %d s, %llu puts ok, %llu verified gets (%llu before the master restart, %llu "
           "after), %llu wrong values\n",
           seconds, (unsigned long long)atomic_load(&n_ok_puts), ok,
           (unsigned long long)gets_before_restart, after, wrong);
    int pass = wrong == 0 && gets_before_restart > 0 && after > 0 && atomic_load(&master_restarted) &&
               atomic_load(&n_errors) < 1000000;
    printf("%d passed, %d failed\n", pass, !pass);
    return pass ? 0 : 1;
}
