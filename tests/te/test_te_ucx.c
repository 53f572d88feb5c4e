/* Multi-process tests of the ucx transport (built only with UCX): a te_peer target started with
 * --protocol ucx, this process as initiator with protocol "ucx". UCX is restricted to its
 * shared-memory transports (UCX_TLS=sm,self unless the caller set UCX_TLS), so this checks the
 * UCP RMA path (packed rkeys, endpoints from worker addresses, put + flush, get) on this host;
 * RDMA and GPU memory are not exercised here. If UCX cannot move data at all on this machine,
 * the tests FAIL with a message saying so (they never skip). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "te_harness.h"
#include "support/test_util.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>

static mc_te_t *make_engine(const char *proto, uint32_t timeout_ms)
{
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                          .protocol = proto, .transfer_timeout_ms = timeout_ms};
    mc_te_t *te = NULL;
    mc_status_t st = mc_te_create(&cfg, &te);
    if (st != MC_OK)
        fail_msg("cannot create a %s engine (%s): UCX does not work in this environment "
                 "(UCX_TLS=%s)", proto, mc_status_name(st), getenv("UCX_TLS"));
    return te;
}

static void start_peer(te_peer_t *p, size_t nbuf, size_t size, const char *timeout_ms)
{
    char nb[16], sz[32];
    snprintf(nb, sizeof(nb), "%zu", nbuf);
    snprintf(sz, sizeof(sz), "%zu", size);
    const char *args[] = {"--protocol", "ucx", "--buffers", nb, "--size", sz,
                          timeout_ms ? "--timeout" : NULL, timeout_ms, NULL};
    if (te_peer_start(p, args) != 0)
        fail_msg("te_peer --protocol ucx did not start: UCX does not work in this environment "
                 "(UCX_TLS=%s)", getenv("UCX_TLS"));
}

static double gibps(size_t bytes, uint64_t ns)
{
    return ns ? (double)bytes / (double)ns * 1e9 / (double)(1ull << 30) : 0;
}

/* ---- correctness 1 B .. 64 MiB, selection, registration requirement, 32 MiB rates --------- */

static void test_ucx_rw(void **state)
{
    (void)state;
    te_peer_t p;
    start_peer(&p, 2, BIG, NULL);
    mc_te_t *te = make_engine("ucx", 10000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
    uint8_t *lb = local_buf(BIG);
    mc_te_xfer_status_t st;
    /* ucx is really in use: an unregistered local buffer is refused (tcp/shm accept it) */
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 4096, &st), MC_ERR_INVALID_PARAMS);
    assert_int_equal(st.state, MC_TE_FAILED);
    assert_int_equal(st.error, MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_register(te, lb, BIG, "cpu:0"), MC_OK);
    te_roundtrip_sizes(te, &p, seg, lb, BIG);
    /* a batch of 256 small requests over both buffers */
    enum { N = 256 };
    mc_te_request_t reqs[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (mc_te_request_t){MC_TE_READ, lb + (size_t)i * 4096, seg,
                                    p.addr[0] + (uint64_t)i * 8192, 4096};
    mc_te_xfer_status_t sts[N];
    assert_int_equal(mc_te_transfer_sync(te, reqs, N, sts), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(te_pattern_check(lb + (size_t)i * 4096, 4096, 0, (uint64_t)i * 8192, 1),
                         -1);
    /* 32 MiB rates against single-thread memcpy (warm buffers), measured in this run */
    const size_t M = 32 * MiB;
    if (BIG >= 2 * M) {
        double best_r = 0, best_w = 0, best_m = 0;
        for (int rep = 0; rep < 5; rep++) {
            uint64_t t0 = mc_now_ns();
            assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], M, &st), MC_OK);
            uint64_t t1 = mc_now_ns();
            assert_int_equal(xfer(te, MC_TE_WRITE, lb, seg, p.addr[1], M, &st), MC_OK);
            uint64_t t2 = mc_now_ns();
            memcpy(lb + M, lb, M);
            uint64_t t3 = mc_now_ns();
            double r = gibps(M, t1 - t0), w = gibps(M, t2 - t1), m = gibps(M, t3 - t2);
            best_r = r > best_r ? r : best_r;
            best_w = w > best_w ? w : best_w;
            best_m = m > best_m ? m : best_m;
        }
        print_message("ucx 32 MiB (best of 5): READ %.2f GiB/s, WRITE %.2f GiB/s; memcpy "
                      "1 thread %.2f GiB/s; UCX_TLS=%s\n", best_r, best_w, best_m,
                      getenv("UCX_TLS"));
    }
    /* "auto" never picks ucx: the same target is reached over shm/cma without registration */
    mc_te_t *te2 = make_engine("auto", 5000);
    mc_te_segment_t seg2;
    assert_int_equal(mc_te_segment_open(te2, p.name, &seg2), MC_OK);
    uint8_t small[4096];
    assert_int_equal(xfer(te2, MC_TE_READ, small, seg2, p.addr[0] + 9, sizeof(small), &st), MC_OK);
    assert_int_equal(te_pattern_check(small, sizeof(small), 0, 9, 1), -1);
    mc_te_destroy(te2);
    assert_int_equal(mc_te_unregister(te, lb), MC_OK);
    munmap(lb, BIG);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* ---- out-of-range requests fail cleanly; the endpoint keeps working ------------------------ */

static void test_ucx_errors(void **state)
{
    (void)state;
    te_peer_t p;
    start_peer(&p, 2, MiB, NULL);
    mc_te_t *te = make_engine("ucx", 5000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
    uint8_t *lb = local_buf(4 * MiB);
    assert_int_equal(mc_te_register(te, lb, 4 * MiB, NULL), MC_OK);
    mc_te_xfer_status_t st;
    uint64_t lo = p.addr[0] < p.addr[1] ? p.addr[0] : p.addr[1];
    uint64_t hi = p.addr[0] > p.addr[1] ? p.addr[0] : p.addr[1];
    struct { mc_te_opcode_t op; uint64_t addr; size_t len; } bad[] = {
        {MC_TE_READ, p.addr[0] + MiB - 10, 100},  /* crosses the end */
        {MC_TE_WRITE, lo - 4096, 100},            /* before */
        {MC_TE_WRITE, hi + MiB, 8192},            /* after */
        {MC_TE_READ, UINT64_MAX - 10, 100},       /* overflows */
        {MC_TE_WRITE, p.addr[0] + 1, 2 * MiB},    /* longer than the buffer */
    };
    for (size_t i = 0; i < MC_ARRAY_LEN_T(bad); i++) {
        assert_int_equal(xfer(te, bad[i].op, lb, seg, bad[i].addr, bad[i].len, &st),
                         MC_ERR_OUT_OF_RANGE);
        assert_int_equal(st.state, MC_TE_FAILED);
        assert_int_equal(st.error, MC_ERR_OUT_OF_RANGE);
        assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 7, 4096, &st), MC_OK);
        assert_int_equal(te_pattern_check(lb, 4096, 0, 7, 1), -1);
    }
    /* nothing outside was written: the owner's buffers still hold their pattern */
    char ans[64];
    assert_int_equal(te_peer_cmd(&p, "check 0 0 1048576 1", ans, sizeof(ans), 5000), 0);
    assert_string_equal(ans, "CHECK ok");
    /* local range partly outside the registered local buffer */
    assert_int_equal(xfer(te, MC_TE_READ, lb + 4 * MiB - 100, seg, p.addr[0], 4096, &st),
                     MC_ERR_INVALID_PARAMS);
    /* owner-side unregister: once the initiator refreshes its descriptor, refused */
    assert_int_equal(te_peer_cmd(&p, "unregister 1", ans, sizeof(ans), 10000), 0);
    assert_string_equal(ans, "UNREG 1 OK");
    assert_int_equal(mc_te_segment_close(te, seg), MC_OK);
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[1], 4096, &st), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(te_peer_cmd(&p, "register 1", ans, sizeof(ans), 10000), 0);
    assert_string_equal(ans, "REG 1 OK");
    /* a new registration is found without an explicit close (one refresh on a miss) */
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[1] + 1, 4096, &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, 4096, 1, 1, 1), -1);
    assert_int_equal(mc_te_unregister(te, lb), MC_OK);
    munmap(lb, 4 * MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* ---- peer death: transfers end FAILED/TIMEOUT within the deadline ---------------------- */

typedef struct loop_arg {
    mc_te_t *te;
    mc_te_segment_t seg;
    uint8_t *lb;
    uint64_t addr;
    _Atomic int go;
    _Atomic uint64_t n_ok;
    mc_te_xfer_status_t last;
    uint64_t end_ms;
} loop_arg_t;

static void *xfer_loop(void *v)
{
    loop_arg_t *a = v;
    atomic_store(&a->go, 1);
    for (uint64_t i = 0;; i++) {
        mc_te_request_t r[4];
        for (int k = 0; k < 4; k++)
            r[k] = (mc_te_request_t){(i + (uint64_t)k) & 1 ? MC_TE_WRITE : MC_TE_READ,
                                     a->lb + (size_t)k * 2 * MiB, a->seg,
                                     a->addr + (uint64_t)k * 2 * MiB, 2 * MiB};
        mc_te_xfer_status_t sts[4];
        if (mc_te_transfer_sync(a->te, r, 4, sts) != MC_OK) {
            for (int k = 0; k < 4; k++)
                if (sts[k].state != MC_TE_COMPLETED)
                    a->last = sts[k];
            break;
        }
        atomic_fetch_add(&a->n_ok, 1);
    }
    a->end_ms = mc_now_ms();
    return NULL;
}

static void test_ucx_kill9(void **state)
{
    (void)state;
    te_peer_t p;
    start_peer(&p, 1, 8 * MiB, NULL);
    mc_te_t *te = make_engine("ucx", 2000);
    loop_arg_t a = {.te = te};
    assert_int_equal(mc_te_segment_open(te, p.name, &a.seg), MC_OK);
    a.lb = local_buf(8 * MiB);
    a.addr = p.addr[0];
    assert_int_equal(mc_te_register(te, a.lb, 8 * MiB, NULL), MC_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, xfer_loop, &a), 0);
    uint64_t deadline = mc_now_ms() + 5000;
    while (atomic_load(&a.n_ok) < 3) { /* transfers are flowing */
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(1);
    }
    uint64_t t0 = mc_now_ms();
    te_peer_stop(&p, SIGKILL);
    pthread_join(th, NULL);
    print_message("ucx kill -9: %llu batches completed, the next ended %s (%s) %llu ms after "
                  "the kill\n", (unsigned long long)atomic_load(&a.n_ok),
                  a.last.state == MC_TE_TIMEOUT ? "TIMEOUT" : "FAILED",
                  mc_status_name(a.last.error), (unsigned long long)(a.end_ms - t0));
    assert_true(a.last.state == MC_TE_FAILED || a.last.state == MC_TE_TIMEOUT);
    assert_int_not_equal(a.last.error, MC_OK);
    assert_true(a.end_ms - t0 < 2000 + 1000); /* within the deadline (+ scheduling slack) */
    /* afterwards: fails fast, no hang */
    mc_te_xfer_status_t st;
    t0 = mc_now_ms();
    assert_int_not_equal(xfer(te, MC_TE_READ, a.lb, a.seg, a.addr, 4096, &st), MC_OK);
    assert_true(mc_now_ms() - t0 < 3000);
    assert_int_equal(mc_te_unregister(te, a.lb), MC_OK); /* nothing holds it */
    munmap(a.lb, 8 * MiB);
    mc_te_destroy(te);
}

/* ---- deadline with a stopped target: needs UCX's target-progressed (AM) RMA --------------
 * With cma (UCX_TLS=sm) the initiator copies by itself and a stopped target does not matter.
 * With UCX_TLS=posix,self UCX emulates put/get on user memory with active messages that the
 * target's progress thread must answer: SIGSTOP makes requests reach their deadline. */
static void test_ucx_sigstop_timeout(void **state)
{
    (void)state;
    setenv("UCX_TLS", "posix,self", 1);
    te_peer_t p;
    start_peer(&p, 1, 4 * MiB, NULL);
    mc_te_t *te = make_engine("ucx", 1000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
    uint8_t *lb = local_buf(4 * MiB);
    assert_int_equal(mc_te_register(te, lb, 4 * MiB, NULL), MC_OK);
    mc_te_xfer_status_t st;
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 4 * MiB, &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, 4 * MiB, 0, 0, 1), -1);
    assert_int_equal(mt_freeze(p.pid, 5000), 0);
    mc_te_request_t reqs[4];
    for (int i = 0; i < 4; i++)
        reqs[i] = (mc_te_request_t){i & 1 ? MC_TE_WRITE : MC_TE_READ, lb + (size_t)i * MiB, seg,
                                    p.addr[0] + (uint64_t)i * MiB, MiB};
    mc_te_xfer_status_t sts[4];
    uint64_t t0 = mc_now_ms();
    mc_status_t rs = mc_te_transfer_sync(te, reqs, 4, sts);
    uint64_t el = mc_now_ms() - t0;
    print_message("ucx (posix,self) with the target stopped: %s after %llu ms\n",
                  mc_status_name(rs), (unsigned long long)el);
    assert_int_equal(rs, MC_ERR_TIMEOUT);
    assert_true(el >= 900 && el < 3000);
    for (int i = 0; i < 4; i++)
        assert_true(sts[i].state == MC_TE_TIMEOUT || sts[i].state == MC_TE_COMPLETED);
    /* the local buffer is held until UCX really ended the timed-out requests; then unregister
     * succeeds (late completions touch only the transport's own records) */
    kill(p.pid, SIGCONT);
    uint64_t deadline = mc_now_ms() + 5000;
    while ((rs = xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 5, MiB, &st)) != MC_OK &&
           mc_now_ms() < deadline)
        mc_sleep_ms(20);
    assert_int_equal(rs, MC_OK);
    assert_int_equal(te_pattern_check(lb, MiB, 0, 5, 1), -1);
    assert_int_equal(mc_te_unregister(te, lb), MC_OK);
    munmap(lb, 4 * MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* ---- unregister of a local buffer while UCX operations use it --------------------------- */

typedef struct sub_arg {
    mc_te_t *te;
    mc_te_batch_t b;
    mc_te_request_t *reqs;
    size_t n;
    mc_status_t st;
} sub_arg_t;

static void *submit_thread(void *v)
{
    sub_arg_t *a = v;
    a->st = mc_te_batch_submit(a->te, a->b, a->reqs, a->n);
    return NULL;
}

static void test_ucx_unregister_inflight(void **state)
{
    (void)state;
    te_peer_t p;
    start_peer(&p, 1, BIG, NULL);
    mc_te_t *te = make_engine("ucx", 10000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
    uint8_t *lb = local_buf(BIG);
    assert_int_equal(mc_te_register(te, lb, BIG, NULL), MC_OK);
    enum { N = 24 };
    mc_te_request_t reqs[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (mc_te_request_t){MC_TE_READ, lb, seg, p.addr[0], BIG};
    sub_arg_t a = {.te = te, .reqs = reqs, .n = N};
    assert_int_equal(mc_te_batch_alloc(te, N, &a.b), MC_OK);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, submit_thread, &a), 0);
    /* wait until the first request completed (the others are being issued), then unregister
     * the local buffer */
    mc_te_xfer_status_t st;
    uint64_t deadline = mc_now_ms() + 10000;
    while (mc_te_batch_status(te, a.b, 0, &st) != MC_OK || st.state != MC_TE_COMPLETED) {
        assert_true(mc_now_ms() < deadline);
        sched_yield();
    }
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_te_unregister(te, lb), MC_OK);
    uint64_t el = mc_now_ms() - t0;
    /* unregister returned OK: no operation on lb may still be running. A request that was
     * not final at that moment must never complete: it is refused (INVALID_PARAMS). */
    mc_te_xfer_status_t snap[N], sts[N];
    for (int i = 0; i < N; i++)
        assert_int_equal(mc_te_batch_status(te, a.b, (size_t)i, &snap[i]), MC_OK);
    pthread_join(th, NULL);
    assert_int_equal(a.st, MC_OK);
    assert_int_equal(mc_te_batch_status_all(te, a.b, sts, N), MC_OK);
    int done = 0, refused = 0;
    for (int i = 0; i < N; i++) {
        if (sts[i].state == MC_TE_COMPLETED) {
            assert_int_equal(snap[i].state, MC_TE_COMPLETED);
            done++;
        }
        else if (sts[i].state == MC_TE_FAILED && sts[i].error == MC_ERR_INVALID_PARAMS)
            refused++;
        else
            fail_msg("request %d: state %d error %s", i, sts[i].state,
                     mc_status_name(sts[i].error));
    }
    print_message("ucx unregister in flight: waited %llu ms, %d completed, %d refused after\n",
                  (unsigned long long)el, done, refused);
    assert_int_equal(done + refused, N);
    assert_true(done > 0);
    assert_int_equal(mc_te_batch_free(te, a.b), MC_OK);
    /* the unmapped buffer is no longer usable for ucx */
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 4096, &st), MC_ERR_INVALID_PARAMS);
    munmap(lb, BIG);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    /* UCX over shared memory only (cma for RMA on user memory, posix/sysv for the rest);
     * never UCX tcp. te_peer inherits it. */
    setenv("UCX_TLS", "sm,self", 0);
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ucx_rw),
        cmocka_unit_test(test_ucx_errors),
        cmocka_unit_test(test_ucx_kill9),
        cmocka_unit_test(test_ucx_sigstop_timeout),
        cmocka_unit_test(test_ucx_unregister_inflight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
