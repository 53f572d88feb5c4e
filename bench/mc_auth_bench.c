/* What one connection handshake (common/auth.h) costs, measured alone so that
 * docs/benchmarks.md ("Authentication") can bound what authentication adds to any figure:
 * handshakes a client pays (counted by test_store_handshakes) x cost of one / time of the
 * figure's operation.
 *
 * Phases, each --count times (after --warmup untimed ones), one JSON line each with the
 * median, p90, p99 and mean in microseconds:
 *   hmac       the handshake's pure halves in one thread, no I/O: HELLO, PROOF, check,
 *              RESULT, the client's check of the server (3 HMAC-SHA256 and 2 getrandom of
 *              32 bytes): what a keyring adds to a connection
 *   hmac_open  the same halves without a keyring (frames only)
 *   conn_on    a fresh loopback TCP connection through the whole handshake with a keyring on
 *              both ends: mc_auth_connect to a server thread that runs the server half on
 *              accept (connect + one round trip + HMACs), until the client has checked
 *              RESULT
 *   conn_off   the same without keyrings: the handshake a cluster without a token file runs
 *              on every connection too
 *   connect    a plain loopback connect + accept, no handshake (what any connection costs)
 *   grant1, grant128, grant1024
 *              mc_grant_verify of a data grant of 1, 128 and 1,024 ranges (common/grant.h):
 *              what a storage server pays for each GRANT frame a tenant-bound reader sends
 * conn_on - conn_off is what turning authentication on adds per connection.
 *
 * Client and server thread share the machine's CPUs, as a store client and its storage
 * server do on one host. */
#include "common/auth.h"
#include "common/config.h"
#include "common/grant.h"
#include "common/net.h"
#include "common/time.h"
#include "bench_stats.h"

#include <pthread.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SECRET "mc-auth-bench-cluster-secret-0123456789"

typedef struct server {
    int lfd;
    const mc_auth_t *auth;
    int handshake; /* 0: accept and close (the "connect" phase) */
    uint64_t n;    /* connections to serve */
} server_t;

/* Serves n connections one after the other: HELLO, PROOF, RESULT (or nothing), close. */
static void *server_main(void *arg)
{
    server_t *s = arg;
    for (uint64_t i = 0; i < s->n; i++) {
        int fd = accept(s->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        if (s->handshake) {
            uint64_t dl = mc_now_ns() + 5000000000ull;
            mc_auth_server_hs_t hs;
            uint8_t hello[MC_AUTH_HELLO_SIZE], proof[MC_AUTH_PROOF_SIZE],
                result[MC_AUTH_RESULT_SIZE];
            mc_auth_server_hello(s->auth, &hs, hello);
            if (mc_net_send_all(fd, hello, sizeof(hello), dl) == MC_OK &&
                mc_net_recv_all(fd, proof, sizeof(proof), dl) == MC_OK) {
                mc_auth_server_check(s->auth, &hs, proof, result, NULL);
                mc_net_send_all(fd, result, sizeof(result), dl);
            }
        }
        /* the client closes first (it has what it needs): wait for that, so the next
         * connect does not race this socket's teardown */
        char b;
        while (read(fd, &b, 1) > 0) {
        }
        close(fd);
    }
    return NULL;
}

static void report(const char *phase, uint64_t *ns, uint64_t n, const char *date)
{
    qsort(ns, n, sizeof(*ns), mc_bench_cmp_u64);
    double sum = 0;
    for (uint64_t i = 0; i < n; i++)
        sum += (double)ns[i];
    printf("{\"bench\":\"auth_handshake\",\"phase\":\"%s\",\"count\":%llu,\"p50_us\":%.2f,"
           "\"p90_us\":%.2f,\"p99_us\":%.2f,\"mean_us\":%.2f,\"max_us\":%.2f,\"date\":\"%s\"}\n",
           phase, (unsigned long long)n, ns[n / 2] / 1e3, ns[n * 90 / 100] / 1e3,
           ns[n * 99 / 100] / 1e3, sum / (double)n / 1e3, ns[n - 1] / 1e3, date);
    fflush(stdout);
}

/* The pure halves once; returns the status of the client's final check. */
static mc_status_t halves(const mc_auth_t *auth)
{
    mc_auth_server_hs_t hs;
    uint8_t hello[MC_AUTH_HELLO_SIZE], proof[MC_AUTH_PROOF_SIZE], result[MC_AUTH_RESULT_SIZE];
    uint8_t cnonce[MC_AUTH_NONCE_SIZE];
    mc_auth_server_hello(auth, &hs, hello);
    mc_status_t st = mc_auth_client_proof(auth, hello, cnonce, proof);
    if (st == MC_OK)
        st = mc_auth_server_check(auth, &hs, proof, result, NULL);
    if (st == MC_OK)
        st = mc_auth_client_result(auth, hello, cnonce, result);
    return st;
}

static int run_halves(const char *phase, const mc_auth_t *auth, uint64_t warmup, uint64_t n,
                      uint64_t *ns, const char *date)
{
    for (uint64_t i = 0; i < warmup + n; i++) {
        uint64_t t0 = mc_now_ns();
        if (halves(auth) != MC_OK) {
            fprintf(stderr, "mc_auth_bench: %s: handshake failed\n", phase);
            return 1;
        }
        if (i >= warmup)
            ns[i - warmup] = mc_now_ns() - t0;
    }
    report(phase, ns, n, date);
    return 0;
}

/* warmup + n loopback connections to a server thread; handshake 0 = plain connect. */
static int run_conns(const char *phase, const mc_auth_t *auth, int handshake, uint64_t warmup,
                     uint64_t n, uint64_t *ns, const char *date)
{
    int lfd;
    uint16_t port;
    if (mc_net_listen("127.0.0.1", 0, 0, &lfd, &port) != MC_OK) {
        fprintf(stderr, "mc_auth_bench: cannot listen on loopback\n");
        return 1;
    }
    server_t srv = {.lfd = lfd, .auth = auth, .handshake = handshake, .n = warmup + n};
    pthread_t th;
    if (pthread_create(&th, NULL, server_main, &srv) != 0) {
        close(lfd);
        return 1;
    }
    int rc = 0;
    for (uint64_t i = 0; i < warmup + n; i++) {
        int fd = -1;
        uint64_t t0 = mc_now_ns();
        mc_status_t st = handshake ? mc_auth_connect("127.0.0.1", port, 5000, auth, &fd)
                                   : mc_net_connect("127.0.0.1", port, 5000, &fd);
        uint64_t t = mc_now_ns() - t0;
        if (st != MC_OK) {
            fprintf(stderr, "mc_auth_bench: %s: connection %llu failed: %s\n", phase,
                    (unsigned long long)i, mc_status_str(st));
            rc = 1;
            shutdown(lfd, SHUT_RDWR); /* let the server thread out of accept */
            break;
        }
        close(fd);
        if (i >= warmup)
            ns[i - warmup] = t;
    }
    pthread_join(th, NULL);
    close(lfd);
    if (rc == 0)
        report(phase, ns, n, date);
    return rc;
}

/* mc_grant_verify of one signed grant of n_ranges 4 KiB ranges, timed each time. */
static int run_grant(const char *phase, const mc_auth_t *auth, uint32_t n_ranges,
                     uint64_t warmup, uint64_t n, uint64_t *ns, const char *date)
{
    static mc_grant_range_t ranges[MC_GRANT_MAX_RANGES];
    static uint8_t grant[MC_GRANT_MAX_SIZE];
    for (uint32_t i = 0; i < n_ranges; i++)
        ranges[i] = (mc_grant_range_t){.addr = 0x7f0000000000ull + (uint64_t)i * 4096,
                                       .len = 4096};
    size_t len = 0;
    const char *segment = "127.0.0.1:12345", *tenant = "tenant-a";
    if (mc_grant_sign(auth, segment, tenant, 1, mc_now_ms() + 60000, ranges, n_ranges, grant,
                      &len) != MC_OK) {
        fprintf(stderr, "mc_auth_bench: %s: cannot sign a grant\n", phase);
        return 1;
    }
    for (uint64_t i = 0; i < warmup + n; i++) {
        mc_grant_view_t g;
        uint64_t t0 = mc_now_ns();
        mc_status_t st = mc_grant_verify(auth, segment, tenant, grant, len, &g);
        uint64_t t = mc_now_ns() - t0;
        if (st != MC_OK) {
            fprintf(stderr, "mc_auth_bench: %s: verify failed: %s\n", phase, mc_status_str(st));
            return 1;
        }
        if (i >= warmup)
            ns[i - warmup] = t;
    }
    report(phase, ns, n, date);
    return 0;
}

int main(int argc, char **argv)
{
    int64_t count = 2000, warmup = 200;
    const char *phases = "hmac,hmac_open,conn_on,conn_off,connect,grant1,grant128,grant1024";
    mc_option_t opts[] = {
        {"count", MC_OPT_INT, &count, NULL, "timed handshakes per phase", 10, 10000000},
        {"warmup", MC_OPT_INT, &warmup, NULL, "untimed handshakes before each phase", 0,
         1000000},
        {"phases", MC_OPT_STRING, &phases, NULL,
         "comma-separated subset of hmac,hmac_open,conn_on,conn_off,connect,grant1,grant128,"
         "grant1024", 0, 0},
    };
    mc_config_spec_t spec = {"mc_auth_bench",
                             "Cost of one connection handshake (common/auth.h): the HMAC part "
                             "alone and whole loopback handshakes with and without a keyring; "
                             "the verification of a data grant; one JSON line per phase "
                             "(microseconds).",
                             opts, sizeof(opts) / sizeof(opts[0])};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    mc_auth_t *auth = NULL;
    if (mc_auth_from_secret(SECRET, NULL, &auth) != MC_OK)
        return 1;
    uint64_t *ns = malloc((size_t)count * sizeof(*ns));
    if (!ns)
        return 1;
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    printf("{\"bench\":\"auth_handshake_setup\",\"cpus\":%ld,\"count\":%lld,\"warmup\":%lld,"
           "\"date\":\"%s\"}\n",
           cpus, (long long)count, (long long)warmup, date);
    uint64_t n = (uint64_t)count, w = (uint64_t)warmup;
    char list[256];
    snprintf(list, sizeof(list), "%s", phases);
    char *save = NULL;
    for (char *p = strtok_r(list, ",", &save); p && rc <= 0; p = strtok_r(NULL, ",", &save)) {
        if (strcmp(p, "hmac") == 0)
            rc = run_halves(p, auth, w, n, ns, date);
        else if (strcmp(p, "hmac_open") == 0)
            rc = run_halves(p, NULL, w, n, ns, date);
        else if (strcmp(p, "conn_on") == 0)
            rc = run_conns(p, auth, 1, w, n, ns, date);
        else if (strcmp(p, "conn_off") == 0)
            rc = run_conns(p, NULL, 1, w, n, ns, date);
        else if (strcmp(p, "connect") == 0)
            rc = run_conns(p, NULL, 0, w, n, ns, date);
        else if (strncmp(p, "grant", 5) == 0 &&
                 (!strcmp(p + 5, "1") || !strcmp(p + 5, "128") || !strcmp(p + 5, "1024")))
            rc = run_grant(p, auth, (uint32_t)atoi(p + 5), w, n, ns, date);
        else {
            fprintf(stderr, "mc_auth_bench: unknown phase '%s' (--phases: hmac, hmac_open, "
                            "conn_on, conn_off, connect, grant1, grant128, grant1024)\n", p);
            rc = 2;
        }
    }
    free(ns);
    mc_auth_free(auth);
    return rc > 0 ? rc : 0;
}
