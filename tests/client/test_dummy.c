/* Standalone mode end to end: a real mooncake_master and a mooncake_client serving dummy
 * clients (--port), dummies in this process (mooncake/dummy.h). Round trips of every served
 * operation, zero-copy through shared memory, several threads on one dummy, a dummy that goes
 * away (its regions are unmapped), malformed messages on a raw socket (errors, the real client
 * keeps serving), and a real client killed (-9) or frozen (SIGSTOP): the dummy's calls fail
 * within their deadline. Access: another uid is refused before any byte; with a token file
 * the real client serves only dummies that prove it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/rc_wire.h"
#include "common/auth.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/dummy.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256], g_master_addr[64];
static pid_t g_master, g_real;
static uint16_t g_port;

/* Whether the file at path holds needle in its first 64 KiB (now, no waiting). */
static int log_has(const char *path, const char *needle)
{
    static char buf[65536];
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, needle) != NULL;
}

/* Waits until the mooncake_client pid serves dummies on @port: it printed its ready line
 * (after binding the socket: so the name is its own, not a leftover of another process) and
 * a connection to the socket is accepted and greeted with the handshake's HELLO (the server
 * speaks first). Fails the test if pid exits or timeout_ms passes first. */
static void wait_serving(pid_t pid, uint16_t port, const char *log, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    int ready = 0;
    for (;;) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            fail_msg("mooncake_client (pid %d) exited (status 0x%x) before serving on port %u; "
                     "see %s", (int)pid, status, (unsigned)port, log);
        if (!ready)
            ready = log_has(log, "mooncake_client ready");
        if (ready) {
            struct sockaddr_un sa;
            socklen_t sl;
            mc_rc_sockaddr(port, &sa, &sl);
            int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            assert_true(fd >= 0);
            uint8_t hello[MC_AUTH_HELLO_SIZE];
            int ok = connect(fd, (struct sockaddr *)&sa, sl) == 0 &&
                     mc_net_recv_all(fd, hello, sizeof(hello),
                                     mc_now_ns() + 1000000000ull) == MC_OK;
            close(fd);
            if (ok)
                return;
        }
        if (mc_now_ms() >= deadline)
            fail_msg("mooncake_client (pid %d) did not %s within %d ms; see %s", (int)pid,
                     ready ? "greet a connection on its socket" : "print its ready line",
                     timeout_ms, log);
        mc_sleep_ms(20);
    }
}

/* A mooncake_client of master_addr serving dummies on a fresh port; *port_p gets it.
 * token_file: its MC_AUTH_TOKEN_FILE (NULL = none). */
static pid_t start_real_of(const char *master_addr, const char *tag, const char *token_file,
                           uint16_t *port_p)
{
    char bin[512], m[96], portf[32], log[320];
    uint16_t p;
    assert_int_equal(mc_net_free_port(&p), MC_OK);
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", master_addr);
    snprintf(portf, sizeof(portf), "--port=%u", p);
    snprintf(log, sizeof(log), "%s/%s.log", g_dir, tag);
    char *argv[] = {bin, m, "--global_segment_size=128MB", "--local_hostname=127.0.0.1", portf,
                    NULL};
    if (token_file)
        setenv("MC_AUTH_TOKEN_FILE", token_file, 1); /* inherited by the child only */
    pid_t pid = mt_spawn(argv, log);
    unsetenv("MC_AUTH_TOKEN_FILE");
    assert_true(pid > 0);
    wait_serving(pid, p, log, 15000);
    *port_p = p;
    return pid;
}

static pid_t start_real(const char *tag, uint16_t *port_p)
{
    return start_real_of(g_master_addr, tag, NULL, port_p);
}

/* A mooncake_master on a fresh port (address into addr) with the given extra flag (NULL =
 * none), logging to <g_dir>/<tag>.log. */
static pid_t start_master_of(const char *tag, const char *flag, char *addr, size_t addrlen)
{
    char bin[512], port[32], log[320];
    uint16_t p;
    assert_int_equal(mc_net_free_port(&p), MC_OK);
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(port, sizeof(port), "--port=%u", p);
    snprintf(log, sizeof(log), "%s/%s.log", g_dir, tag);
    char *argv[] = {bin, port, "--metrics_port=0", "--wal_dir=", "--default_kv_lease_ttl=200",
                    (char *)flag, NULL};
    pid_t pid = mt_spawn(argv, log);
    assert_true(pid > 0);
    assert_int_equal(mt_wait_log(log, "listening", 10000), 0);
    snprintf(addr, addrlen, "127.0.0.1:%u", p);
    return pid;
}

static int setup_all(void **state)
{
    (void)state;
    if (mt_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return -1;
    g_master = start_master_of("master", NULL, g_master_addr, sizeof(g_master_addr));
    g_real = start_real("real", &g_port);
    return 0;
}

static int teardown_all(void **state)
{
    (void)state;
    mt_stop(g_real, SIGTERM, 5000);
    mt_stop(g_master, SIGTERM, 5000);
    mt_rmdir(g_dir);
    return 0;
}

/* mc_store_create_dummy's status; *d_p the dummy on MC_OK. */
static mc_status_t dummy_try(uint16_t port, const char *token_file, mc_store_t **d_p)
{
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    mc_store_dummy_config_t cfg = {.server_address = addr, .local_buffer_size = 1 << 20,
                                   .call_timeout_ms = 3000, .auth_token_file = token_file};
    *d_p = NULL;
    return mc_store_create_dummy(&cfg, d_p);
}

static mc_store_t *dummy_on(uint16_t port, uint64_t local, uint32_t timeout_ms)
{
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
    mc_store_dummy_config_t cfg = {.server_address = addr, .local_buffer_size = local,
                                   .call_timeout_ms = timeout_ms};
    mc_store_t *d = NULL;
    assert_int_equal(mc_store_create_dummy(&cfg, &d), MC_OK);
    assert_true(mc_store_is_dummy(d));
    return d;
}

static uint64_t regions_now(mc_store_t *d)
{
    mc_real_service_stats_t st;
    assert_int_equal(mc_store_dummy_server_stats(d, &st), MC_OK);
    return st.regions;
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 31 + seed);
}

static void test_round_trip(void **state)
{
    (void)state;
    mc_store_t *d = dummy_on(g_port, 4 << 20, 0);
    assert_int_equal(mc_store_health(d), MC_STORE_HEALTHY);
    assert_string_equal(mc_store_hostname(d), "");
    struct iovec v = {"hello", 5};
    assert_int_equal(mc_store_put(d, "rt/a", &v, 1, NULL), MC_OK);
    void *got = NULL;
    size_t len = 0;
    assert_int_equal(mc_store_get(d, "rt/a", &got, &len), MC_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(got, "hello", 5);
    free(got);
    assert_int_equal(mc_store_get_size(d, "rt/a"), 5);
    assert_int_equal(mc_store_exists(d, "rt/a"), 1);
    assert_int_equal(mc_store_exists(d, "rt/none"), 0);
    const char *keys[] = {"rt/a", "rt/none"};
    int32_t r[2];
    assert_int_equal(mc_store_batch_exists(d, 2, keys, r), MC_OK);
    assert_int_equal(r[0], 1);
    assert_int_equal(r[1], 0);
    assert_int_equal(mc_store_get(d, "rt/none", &got, &len), MC_ERR_OBJECT_NOT_FOUND);
    /* a key that is not UTF-8 (RcRequest.keys is bytes) */
    static const char bin[] = "rt/\xff\xfe\x80";
    assert_int_equal(mc_store_put(d, bin, &v, 1, NULL), MC_OK);
    assert_int_equal(mc_store_get(d, bin, &got, &len), MC_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(got, "hello", 5);
    free(got);
    assert_int_equal(mc_store_remove(d, bin, true), MC_OK);
    assert_int_equal(protobuf_c_message_descriptor_get_field_by_name(&mc_rc__rc_request__descriptor,
                                                                     "keys")->type,
                     PROTOBUF_C_TYPE_BYTES);
    /* a byte put over the message cap is refused and the dummy goes on */
    size_t huge = (64u << 20) + 1;
    char *hv = calloc(1, huge);
    struct iovec hiov = {hv, huge};
    assert_int_equal(mc_store_put(d, "rt/huge", &hiov, 1, NULL), MC_ERR_TOO_LARGE);
    free(hv);
    assert_int_equal(mc_store_exists(d, "rt/a"), 1);
    mc_replica_desc_t *descs;
    size_t nd;
    assert_int_equal(mc_store_replica_desc(d, "rt/a", &descs, &nd),
                     MC_ERR_UNAVAILABLE_IN_CURRENT_MODE);

    /* zero copy through shared memory */
    size_t n = 4u << 20;
    uint8_t *src = mc_shm_alloc(n), *dst = mc_shm_alloc(n);
    assert_non_null(src);
    assert_non_null(dst);
    uint8_t *heap = malloc(n);
    assert_int_equal(mc_store_register_buffer(d, heap, n), MC_ERR_INVALID_PARAMS); /* not shared */
    free(heap);
    assert_int_equal(mc_store_register_buffer(d, src, n), MC_OK);
    assert_int_equal(mc_store_register_buffer(d, dst, n), MC_OK);
    fill(src, n, 7);
    struct iovec is = {src, n}, id = {dst, n};
    assert_int_equal(mc_store_put(d, "rt/big", &is, 1, NULL), MC_OK);
    memset(dst, 0, n);
    assert_int_equal(mc_store_get_into(d, "rt/big", &id, 1), (int64_t)n);
    assert_memory_equal(dst, src, n);
    /* a buffer too small */
    struct iovec small = {dst, 100};
    assert_int_equal(mc_store_get_into(d, "rt/big", &small, 1), MC_ERR_BUFFER_OVERFLOW);

    /* batches: three keys, pieces of both buffers */
    const char *bk[] = {"rt/b0", "rt/b1", "rt/b2"};
    struct iovec p0 = {src, 1000}, p1[2] = {{src + 5000, 300}, {src + 9000, 700}},
                 p2 = {src + n - 4096, 4096};
    const struct iovec *pp[] = {&p0, p1, &p2};
    size_t np[] = {1, 2, 1};
    int32_t pr[3];
    assert_int_equal(mc_store_batch_put(d, 3, bk, pp, np, NULL, false, pr), MC_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(pr[i], MC_OK);
    memset(dst, 0, n);
    struct iovec g0 = {dst, 1000}, g1 = {dst + 1000, 1000}, g2 = {dst + 2000, 4096};
    const struct iovec *gp[] = {&g0, &g1, &g2};
    size_t gn[] = {1, 1, 1};
    int64_t gr[3];
    assert_int_equal(mc_store_batch_get_into(d, 3, bk, gp, gn, gr), MC_OK);
    assert_int_equal(gr[0], 1000);
    assert_int_equal(gr[1], 1000);
    assert_int_equal(gr[2], 4096);
    assert_memory_equal(dst, src, 1000);
    assert_memory_equal(dst + 1000, src + 5000, 300);
    assert_memory_equal(dst + 1300, src + 9000, 700);
    assert_memory_equal(dst + 2000, src + n - 4096, 4096);
    void *vals[3];
    int64_t vr[3];
    assert_int_equal(mc_store_batch_get(d, 3, bk, vals, vr), MC_OK);
    assert_int_equal(vr[1], 1000);
    assert_memory_equal((uint8_t *)vals[1] + 300, src + 9000, 700);
    for (int i = 0; i < 3; i++)
        free(vals[i]);

    /* removes (forced: our own gets hold read leases) */
    assert_int_equal(mc_store_remove(d, "rt/a", true), MC_OK);
    assert_int_equal(mc_store_exists(d, "rt/a"), 0);
    int32_t rr[3];
    assert_int_equal(mc_store_batch_remove(d, 3, bk, true, rr), MC_OK);
    assert_int_equal(rr[0], MC_OK);
    assert_int_equal(mc_store_remove_by_regex(d, "^rt/big$", true), 1);
    assert_int_equal(mc_store_exists(d, "rt/big"), 0);

    assert_int_equal(mc_store_unregister_buffer(d, src), MC_OK);
    assert_int_equal(mc_store_unregister_buffer(d, src), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_shm_free(src), 0);
    assert_int_equal(mc_shm_free(dst), 0); /* unregisters it from d first */
    assert_int_equal(mc_shm_free(dst), -1);
    mc_store_destroy(d);
}

/* A dummy that goes away: its regions are unmapped and the count returns to where it was. */
static void test_dummy_gone_unmaps(void **state)
{
    (void)state;
    mc_store_t *a = dummy_on(g_port, 1 << 20, 0);
    uint64_t before = regions_now(a);
    mc_store_t *b = dummy_on(g_port, 2 << 20, 0);
    void *buf = mc_shm_alloc(1 << 20);
    assert_int_equal(mc_store_register_buffer(b, buf, 1 << 20), MC_OK);
    assert_int_equal(regions_now(a), before + 2);
    mc_store_destroy(b);
    uint64_t deadline = mc_now_ms() + 5000;
    while (regions_now(a) != before && mc_now_ms() < deadline)
        mc_sleep_ms(10);
    assert_int_equal(regions_now(a), before);
    mc_shm_free(buf);
    mc_store_destroy(a);
}

typedef struct {
    mc_store_t *d;
    int id;
    int failures;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    size_t n = 256u << 10;
    uint8_t *src = mc_shm_alloc(n), *dst = mc_shm_alloc(n);
    if (!src || !dst || mc_store_register_buffer(w->d, src, n) != MC_OK ||
        mc_store_register_buffer(w->d, dst, n) != MC_OK) {
        w->failures++;
        return NULL;
    }
    for (int i = 0; i < 20; i++) {
        char key[64];
        snprintf(key, sizeof(key), "thr/%d/%d", w->id, i);
        fill(src, n, (unsigned)(w->id * 100 + i));
        struct iovec is = {src, n}, id = {dst, n};
        if (mc_store_put(w->d, key, &is, 1, NULL) != MC_OK ||
            mc_store_get_into(w->d, key, &id, 1) != (int64_t)n || memcmp(src, dst, n) != 0 ||
            mc_store_exists(w->d, key) != 1)
            w->failures++;
        mc_store_remove(w->d, key, true);
    }
    mc_store_unregister_buffer(w->d, src);
    mc_shm_free(src);
    mc_shm_free(dst);
    return NULL;
}

static void test_threads_share_one_dummy(void **state)
{
    (void)state;
    mc_store_t *d = dummy_on(g_port, 0, 0);
    pthread_t th[6];
    worker_t w[6];
    for (int i = 0; i < 6; i++) {
        w[i] = (worker_t){.d = d, .id = i};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    mc_store_destroy(d);
}

/* ---- raw socket ---------------------------------------------------------------------------- */

static int raw_connect(uint16_t port)
{
    struct sockaddr_un sa;
    socklen_t sl;
    mc_rc_sockaddr(port, &sa, &sl);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sl), 0);
    /* every connection starts with the cluster handshake (this real client has no token) */
    assert_int_equal(mc_auth_client_handshake(fd, NULL, mc_now_ns() + 5000000000ull), MC_OK);
    return fd;
}

/* Sends rq as op (with pass_fd), returns the answer's status; *resp_p if asked. */
static mc_status_t raw_call(int fd, uint16_t op, const McRc__RcRequest *rq, int pass_fd,
                            McRc__RcResponse **resp_p)
{
    uint64_t dl = mc_now_ns() + 5000000000ull;
    mc_status_t st = mc_rc_send(fd, op, 0, 0, 42, rq ? &rq->base : NULL, pass_fd, dl);
    if (st != MC_OK)
        return st;
    mc_rpc_hdr_t h;
    uint8_t *body = NULL;
    st = mc_rc_recv(fd, &h, &body, NULL, dl, dl);
    if (st != MC_OK)
        return st;
    assert_int_equal(h.req_id, 42);
    McRc__RcResponse *resp = mc_rc__rc_response__unpack(NULL, h.body_len, body);
    free(body);
    assert_non_null(resp);
    if (resp_p)
        *resp_p = resp;
    else
        mc_rc__rc_response__free_unpacked(resp, NULL);
    return h.status;
}

/* The connection was closed by the real client (EOF within 5 s). */
static void assert_closed(int fd)
{
    uint8_t b[64];
    uint64_t deadline = mc_now_ms() + 5000;
    for (;;) {
        ssize_t n = recv(fd, b, sizeof(b), MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN))
            break;
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(10);
    }
    close(fd);
}

static void test_malformed_messages(void **state)
{
    (void)state;
    mc_store_t *good = dummy_on(g_port, 1 << 20, 0);
    uint64_t regions0 = regions_now(good);

    /* garbage instead of a header */
    int fd = raw_connect(g_port);
    assert_int_equal(send(fd, "GET / HTTP/1.0\r\n\r\n0123456789abcdef", 34, MSG_NOSIGNAL), 34);
    assert_closed(fd);

    /* a header announcing more than the cap */
    fd = raw_connect(g_port);
    uint8_t hdr[MC_RPC_HDR_SIZE];
    mc_rpc_hdr_t h = {.opcode = MC_RC_OP_HELLO, .body_len = MC_RC_MAX_BODY + 1, .req_id = 1};
    mc_rpc_hdr_encode(&h, hdr);
    assert_int_equal(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
    assert_closed(fd);

    /* an operation before hello */
    fd = raw_connect(g_port);
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    assert_int_equal(raw_call(fd, MC_RC_OP_STATS, &rq, -1, NULL), MC_ERR_PROTOCOL);
    assert_closed(fd);

    /* attach to a dummy that does not exist */
    fd = raw_connect(g_port);
    rq.client_id = 999999;
    assert_int_equal(raw_call(fd, MC_RC_OP_ATTACH, &rq, -1, NULL), MC_ERR_CLIENT_NOT_FOUND);
    assert_closed(fd);
    rq.client_id = 0;

    /* a proper hello, then bad requests on a connection that keeps serving */
    fd = raw_connect(g_port);
    assert_int_equal(raw_call(fd, MC_RC_OP_HELLO, &rq, -1, NULL), MC_OK);
    /* an undecodable body */
    uint8_t junk[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0a};
    h = (mc_rpc_hdr_t){.opcode = MC_RC_OP_GET, .body_len = sizeof(junk), .req_id = 42};
    mc_rpc_hdr_encode(&h, hdr);
    assert_int_equal(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
    assert_int_equal(send(fd, junk, sizeof(junk), MSG_NOSIGNAL), (ssize_t)sizeof(junk));
    mc_rpc_hdr_t rh;
    uint8_t *body = NULL;
    assert_int_equal(mc_rc_recv(fd, &rh, &body, NULL, mc_now_ns() + 5000000000ull, 0), MC_OK);
    assert_int_equal(rh.status, MC_ERR_PROTOCOL);
    free(body);
    /* an unknown opcode */
    assert_int_equal(raw_call(fd, 999, &rq, -1, NULL), MC_ERR_INVALID_PARAMS);
    /* a key over the cap; no keys; a PUT with fewer values than keys */
    char *longkey = malloc(MC_STORE_KEY_MAX + 2);
    memset(longkey, 'k', MC_STORE_KEY_MAX + 1);
    longkey[MC_STORE_KEY_MAX + 1] = 0;
    ProtobufCBinaryData keys[] = {mc_wire_key_str(longkey)};
    rq.n_keys = 1;
    rq.keys = keys;
    assert_int_equal(raw_call(fd, MC_RC_OP_EXIST, &rq, -1, NULL), MC_ERR_TOO_LARGE);
    free(longkey);
    /* a key with a NUL byte inside (keys are bytes on the wire, NUL-terminated in the API) */
    keys[0] = mc_wire_key("a\0b", 3);
    assert_int_equal(raw_call(fd, MC_RC_OP_EXIST, &rq, -1, NULL), MC_ERR_INVALID_KEY);
    rq.n_keys = 0;
    assert_int_equal(raw_call(fd, MC_RC_OP_EXIST, &rq, -1, NULL), MC_ERR_INVALID_PARAMS);
    ProtobufCBinaryData k1[] = {mc_wire_key_str("bad/k")};
    rq.n_keys = 1;
    rq.keys = k1;
    assert_int_equal(raw_call(fd, MC_RC_OP_PUT, &rq, -1, NULL), MC_ERR_INVALID_PARAMS);
    /* slices that do not add up, and slices outside any registered region */
    McRc__RcSlice sl = MC_RC__RC_SLICE__INIT;
    McRc__RcSlice *slp[] = {&sl};
    sl.addr = 0x10000;
    sl.len = 4096;
    uint32_t counts[] = {2};
    rq.n_slices = 1;
    rq.slices = slp;
    rq.n_slice_counts = 1;
    rq.slice_counts = counts;
    assert_int_equal(raw_call(fd, MC_RC_OP_GET_INTO, &rq, -1, NULL), MC_ERR_INVALID_PARAMS);
    counts[0] = 1;
    McRc__RcResponse *resp = NULL;
    assert_int_equal(raw_call(fd, MC_RC_OP_PUT_FROM, &rq, -1, &resp), MC_OK);
    assert_int_equal(resp->n_results, 1);
    assert_int_equal(resp->results[0], MC_ERR_INVALID_PARAMS);
    mc_rc__rc_response__free_unpacked(resp, NULL);
    sl.addr = UINT64_MAX - 10; /* wraps */
    assert_int_equal(raw_call(fd, MC_RC_OP_GET_INTO, &rq, -1, NULL), MC_ERR_INVALID_PARAMS);
    /* registration: no descriptor, a region larger than its memfd, an unsealed memfd */
    McRc__RcRequest reg = MC_RC__RC_REQUEST__INIT;
    reg.region_base = 0x7f0000000000ull;
    reg.region_size = 1 << 20;
    assert_int_equal(raw_call(fd, MC_RC_OP_REGISTER, &reg, -1, NULL), MC_ERR_INVALID_PARAMS);
    int mfd = memfd_create("t", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    assert_int_equal(ftruncate(mfd, 4096), 0);
    assert_int_equal(raw_call(fd, MC_RC_OP_REGISTER, &reg, mfd, NULL), MC_ERR_INVALID_PARAMS);
    reg.region_size = 4096;
    assert_int_equal(raw_call(fd, MC_RC_OP_REGISTER, &reg, mfd, NULL), MC_ERR_INVALID_PARAMS);
    /* sealed: accepted; then a slice past its end is refused, one inside it is not */
    assert_int_equal(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
    assert_int_equal(raw_call(fd, MC_RC_OP_REGISTER, &reg, mfd, NULL), MC_OK);
    close(mfd);
    sl.addr = reg.region_base + 4000;
    sl.len = 200;
    assert_int_equal(raw_call(fd, MC_RC_OP_GET_INTO, &rq, -1, &resp), MC_OK);
    assert_int_equal(resp->results[0], MC_ERR_INVALID_PARAMS);
    mc_rc__rc_response__free_unpacked(resp, NULL);
    sl.addr = reg.region_base;
    assert_int_equal(raw_call(fd, MC_RC_OP_PUT_FROM, &rq, -1, &resp), MC_OK);
    assert_int_equal(resp->results[0], MC_OK);
    mc_rc__rc_response__free_unpacked(resp, NULL);
    assert_int_equal(regions_now(good), regions0 + 1);
    /* unregister of something never registered */
    reg.region_base = 0x1000;
    assert_int_equal(raw_call(fd, MC_RC_OP_UNREGISTER, &reg, -1, NULL), MC_ERR_INVALID_PARAMS);

    /* the good dummy was served all along */
    struct iovec v = {"fine", 4};
    assert_int_equal(mc_store_put(good, "bad/fine", &v, 1, NULL), MC_OK);
    assert_int_equal(mc_store_exists(good, "bad/k"), 1); /* the raw put_from */
    assert_int_equal(mc_store_exists(good, "bad/fine"), 1);
    /* the raw dummy goes away: its region is unmapped */
    close(fd);
    uint64_t deadline = mc_now_ms() + 5000;
    while (regions_now(good) != regions0 && mc_now_ms() < deadline)
        mc_sleep_ms(10);
    assert_int_equal(regions_now(good), regions0);
    mc_store_destroy(good);
}

/* A real client killed or frozen: calls fail with RPC_FAIL within the deadline. */
static void check_fails_fast(mc_store_t *d, uint64_t limit_ms)
{
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_store_exists(d, "gone/x"), MC_ERR_RPC_FAIL);
    void *v;
    size_t len;
    assert_int_equal(mc_store_get(d, "gone/x", &v, &len), MC_ERR_RPC_FAIL);
    struct iovec iv = {"x", 1};
    assert_int_equal(mc_store_put(d, "gone/x", &iv, 1, NULL), MC_ERR_RPC_FAIL);
    uint64_t took = mc_now_ms() - t0;
    print_message("calls failed after %llu ms\n", (unsigned long long)took);
    assert_true(took <= limit_ms);
    assert_int_equal(mc_store_health(d), MC_STORE_MASTER_UNREACHABLE);
}

static void test_real_client_killed(void **state)
{
    (void)state;
    uint16_t port;
    pid_t real = start_real("killed", &port);
    mc_store_t *d = dummy_on(port, 1 << 20, 2000);
    assert_int_equal(mc_store_exists(d, "gone/x"), 0);
    kill(real, SIGKILL);
    mt_stop(real, SIGKILL, 5000);
    check_fails_fast(d, 2500);
    mc_store_destroy(d);
}

static void test_real_client_frozen(void **state)
{
    (void)state;
    uint16_t port;
    pid_t real = start_real("frozen", &port);
    mc_store_t *d = dummy_on(port, 1 << 20, 2000);
    assert_int_equal(mc_store_exists(d, "gone/x"), 0);
    assert_int_equal(mt_freeze(real, 5000), 0);
    check_fails_fast(d, 2500); /* the first call waits out its deadline, the others fail at once */
    mc_store_destroy(d);       /* must not hang on the frozen peer either */
    kill(real, SIGCONT);
    mt_stop(real, SIGTERM, 5000);
}

/* The real client's socket is for its own uid (and root): a process of another uid is closed
 * on before any byte, while one of ours gets the handshake's HELLO. The other uid is a child
 * running as nobody, so the test needs root; without root it fails (it cannot check). */
static void test_other_uid_refused(void **state)
{
    (void)state;
    if (geteuid() != 0)
        fail_msg("test_other_uid_refused must run as root: it runs a child as uid 65534 to "
                 "connect from another uid");
    struct sockaddr_un sa;
    socklen_t sl;
    mc_rc_sockaddr(g_port, &sa, &sl);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* exit 0: refused (EOF, no byte); 1: served; 2: could not become nobody/connect */
        if (setresgid(65534, 65534, 65534) != 0 || setresuid(65534, 65534, 65534) != 0 ||
            getuid() != 65534)
            _exit(2);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sl) != 0)
            _exit(2);
        uint8_t b[MC_AUTH_HELLO_SIZE];
        mc_status_t st = mc_net_recv_all(fd, b, 1, mc_now_ns() + 5000000000ull);
        _exit(st == MC_ERR_CONNECTION ? 0 : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 2)
        fail_msg("the child could not switch to uid 65534 or connect");
    assert_int_equal(WEXITSTATUS(status), 0);
    /* control: our own uid is greeted (HELLO) and served */
    int fd = raw_connect(g_port);
    close(fd);
}

/* A real client with a token file serves only dummies proving it: no token and the wrong one
 * are refused (MC_ERR_AUTH, nothing served), a raw connection sending a frame instead of the
 * handshake's PROOF is closed unanswered; a dummy with the token works. A dummy with a token
 * also refuses a real client without one. */
static void test_dummy_auth(void **state)
{
    (void)state;
    char tok_a[320], tok_b[320];
    snprintf(tok_a, sizeof(tok_a), "%s/a.token", g_dir);
    snprintf(tok_b, sizeof(tok_b), "%s/b.token", g_dir);
    const char *secrets[] = {"dummy-cluster-secret-AAAA\n", "dummy-cluster-secret-BBBB\n"};
    const char *paths[] = {tok_a, tok_b};
    for (int i = 0; i < 2; i++) {
        int fd = open(paths[i], O_WRONLY | O_CREAT | O_TRUNC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, secrets[i], strlen(secrets[i])), (ssize_t)strlen(secrets[i]));
        close(fd);
    }
    /* a cluster of its own: the real client proves tok_a to its master too */
    char master_addr[64], flag[400];
    snprintf(flag, sizeof(flag), "--auth_token_file=%s", tok_a);
    pid_t master = start_master_of("master-auth", flag, master_addr, sizeof(master_addr));
    uint16_t port;
    pid_t real = start_real_of(master_addr, "auth", tok_a, &port);
    mc_store_t *d = NULL;
    assert_int_equal(dummy_try(port, NULL, &d), MC_ERR_AUTH);
    assert_null(d);
    assert_int_equal(dummy_try(port, tok_b, &d), MC_ERR_AUTH);
    assert_null(d);
    /* a raw client skipping the handshake: a HELLO frame where the PROOF belongs */
    struct sockaddr_un sa;
    socklen_t sl;
    mc_rc_sockaddr(port, &sa, &sl);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sl), 0);
    McRc__RcRequest rq = MC_RC__RC_REQUEST__INIT;
    uint64_t dl = mc_now_ns() + 5000000000ull;
    (void)mc_rc_send(fd, MC_RC_OP_HELLO, 0, 0, 1, &rq.base, -1, dl);
    uint8_t junk[MC_AUTH_PROOF_SIZE];
    memset(junk, 0, sizeof(junk));
    (void)mc_net_send_all(fd, junk, sizeof(junk), dl);
    size_t got = 0;
    uint8_t b[256];
    for (;;) {
        ssize_t n = recv(fd, b, sizeof(b), 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(fd);
    assert_int_equal(got, MC_AUTH_HELLO_SIZE + MC_AUTH_RESULT_SIZE); /* HELLO, refusing RESULT */
    /* the token: served, and the whole path (dummy -> real client -> master, TE) works */
    assert_int_equal(dummy_try(port, tok_a, &d), MC_OK);
    assert_int_equal(mc_store_exists(d, "auth/none"), 0);
    char value[] = "bytes behind three authenticated hops";
    struct iovec v = {value, sizeof(value)};
    assert_int_equal(mc_store_put(d, "auth/k", &v, 1, NULL), MC_OK);
    void *back = NULL;
    size_t got_len = 0;
    assert_int_equal(mc_store_get(d, "auth/k", &back, &got_len), MC_OK);
    assert_int_equal(got_len, sizeof(value));
    assert_memory_equal(back, value, sizeof(value));
    free(back);
    mc_real_service_stats_t rs;
    assert_int_equal(mc_store_dummy_server_stats(d, &rs), MC_OK);
    assert_int_equal(rs.dummies, 1);
    assert_int_equal(rs.regions, 1); /* its local buffer, shared through the socket */
    mc_store_destroy(d);
    /* a dummy with a token refuses the real client without one (it cannot prove it) */
    assert_int_equal(dummy_try(g_port, tok_a, &d), MC_ERR_AUTH);
    assert_null(d);
    mt_stop(real, SIGTERM, 5000);
    mt_stop(master, SIGTERM, 5000);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_dummy_gone_unmaps),
        cmocka_unit_test(test_threads_share_one_dummy),
        cmocka_unit_test(test_malformed_messages),
        cmocka_unit_test(test_real_client_killed),
        cmocka_unit_test(test_real_client_frozen),
        cmocka_unit_test(test_other_uid_refused),
        cmocka_unit_test(test_dummy_auth),
    };
    return cmocka_run_group_tests(tests, setup_all, teardown_all);
}
