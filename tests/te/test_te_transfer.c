/* Multi-process transfer engine tests: a te_peer target process, this process as initiator.
 * Metadata: P2PHANDSHAKE (descriptors fetched from the peer over GET_DESC). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "te_harness.h"
#include "support/test_util.h"

#include "common/auth.h"
#include "common/hash.h"
#include "common/net.h"
#include "te/shm_ctl.h"
#include "te/tcp_frame.h"
#include "te/te_hashed.h"

#include <netinet/in.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>

/* tcp_stripe: the config field (0 = the engine's default). */
static mc_te_t *make_engine_striped(const char *proto, uint32_t timeout_ms, uint32_t tcp_stripe)
{
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                          .protocol = proto, .transfer_timeout_ms = timeout_ms,
                          .tcp_stripe = tcp_stripe};
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    assert_non_null(te);
    return te;
}

static mc_te_t *make_engine(const char *proto, uint32_t timeout_ms)
{
    return make_engine_striped(proto, timeout_ms, 0);
}

/* Starts a target peer with args and an engine of proto connected to its segment (*seg). */
static mc_te_t *start_peer_and_engine(te_peer_t *p, const char *const *args, const char *proto,
                                      uint32_t timeout_ms, mc_te_segment_t *seg)
{
    assert_int_equal(te_peer_start(p, args), 0);
    mc_te_t *te = make_engine(proto, timeout_ms);
    assert_int_equal(mc_te_segment_open(te, p->name, seg), MC_OK);
    return te;
}

/* ---- correctness over a range of sizes ------------------------------------------------ */

static void rw_sizes(const char *proto, int shareable)
{
    const size_t bsz = BIG;
    char size_arg[32];
    snprintf(size_arg, sizeof(size_arg), "%zu", bsz);
    const char *args[] = {"--buffers", "2", "--size", size_arg, shareable ? "--shareable" : NULL,
                          NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, proto, 10000, &seg);
    uint64_t first;
    assert_int_equal(mc_te_segment_first_buffer(te, seg, &first), MC_OK);
    assert_true(first == p.addr[0] || first == p.addr[1]);
    uint8_t *lb = local_buf(bsz);
    te_roundtrip_sizes(te, &p, seg, lb, bsz);
    /* many small requests in one batch, spread over both buffers */
    enum { N = 256 };
    mc_te_request_t reqs[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (mc_te_request_t){MC_TE_READ, lb + (size_t)i * 4096, seg,
                                    p.addr[i & 1] + (uint64_t)i * 8192, 4096};
    mc_te_batch_t b;
    assert_int_equal(mc_te_batch_alloc(te, N, &b), MC_OK);
    assert_int_equal(mc_te_batch_submit(te, b, reqs, N / 2), MC_OK);
    assert_int_equal(mc_te_batch_submit(te, b, reqs + N / 2, N / 2), MC_OK);
    assert_int_equal(mc_te_batch_submit(te, b, reqs, 1), MC_ERR_TOO_LARGE); /* full */
    mc_te_xfer_status_t sts[N];
    uint64_t deadline = mc_now_ms() + 10000;
    while (mc_te_batch_status_all(te, b, sts, N) != MC_OK && mc_now_ms() < deadline)
        mc_sleep_ms(1);
    for (int i = 0; i < N; i++) {
        assert_int_equal(sts[i].state, MC_TE_COMPLETED);
        unsigned bi = (unsigned)(i & 1);
        uint64_t off = (uint64_t)i * 8192;
        if (bi == 1) /* buffer 1 was overwritten with seed 7 around the small offsets */
            continue;
        assert_int_equal(te_pattern_check(lb + (size_t)i * 4096, 4096, bi, off, 1), -1);
    }
    assert_int_equal(mc_te_batch_free(te, b), MC_OK);
    assert_int_equal(mc_te_batch_free(te, b), MC_ERR_INVALID_PARAMS); /* stale handle */
    munmap(lb, bsz);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

static void test_rw_tcp(void **state)
{
    rw_sizes("tcp", 0);
}
/* TCP connections owned by this process in /proc/net/tcp state `state` (01 established,
 * 08 close-wait): the socket inodes in /proc/self/fd that /proc/net/tcp lists so. */
static int own_tcp_in_state(unsigned state)
{
    char line[512];
    unsigned long inodes[1024];
    int n = 0;
    FILE *f = fopen("/proc/net/tcp", "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f) && n < 1024) {
        unsigned st;
        unsigned long ino;
        if (sscanf(line, " %*d: %*s %*s %x %*s %*s %*s %*s %*s %lu", &st, &ino) == 2 &&
            st == state)
            inodes[n++] = ino;
    }
    fclose(f);
    int count = 0;
    for (int fd = 0; fd < 4096; fd++) {
        char path[64], target[64];
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
        ssize_t l = readlink(path, target, sizeof(target) - 1);
        unsigned long ino;
        if (l <= 0)
            continue;
        target[l] = '\0';
        if (sscanf(target, "socket:[%lu]", &ino) != 1)
            continue;
        for (int i = 0; i < n; i++)
            count += inodes[i] == ino;
    }
    return count;
}

/* tcp_stripe (MC_TE_TCP_STRIPE in the tools): one 8 MiB read opens that many data connections
 * (1 or all 4 of the pool), and striped transfers move the right bytes. */
static void test_rw_tcp_striped(void **state)
{
    (void)state;
    const char *args[] = {"--buffers", "2", "--size", "16777216", NULL};
    const char *widths[] = {"1", "4"};
    for (int k = 0; k < 2; k++) {
        te_peer_t p;
        mc_te_segment_t seg;
        assert_int_equal(te_peer_start(&p, args), 0);
        mc_te_t *te = make_engine_striped("tcp", 10000, (uint32_t)atoi(widths[k]));
        assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
        uint8_t *lb = local_buf(16 * MiB);
        int before = own_tcp_in_state(1);
        mc_te_xfer_status_t st;
        assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 8 * MiB, &st), MC_OK);
        assert_int_equal(te_pattern_check(lb, 8 * MiB, 0, 0, 1), -1);
        assert_int_equal(own_tcp_in_state(1) - before, atoi(widths[k]));
        te_roundtrip_sizes(te, &p, seg, lb, 16 * MiB);
        munmap(lb, 16 * MiB);
        mc_te_destroy(te);
        te_peer_stop(&p, 0);
    }
}

/* A connection a synchronous transfer left parked (no epoll interest) is still closed soon
 * after its peer dies: the loop's sweep re-arms it and sees the end of stream (without that,
 * it would sit in CLOSE_WAIT until the next transfer tried it). */
static void test_parked_peer_close(void **state)
{
    (void)state;
    const char *args[] = {"--buffers", "1", "--size", "1048576", NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, "tcp", 5000, &seg);
    uint8_t *lb = local_buf(MiB);
    mc_te_xfer_status_t st;
    for (int i = 0; i < 50; i++)
        assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 64 * (uint64_t)i, 4096, &st),
                         MC_OK);
    assert_true(own_tcp_in_state(1) >= 1);
    te_peer_stop(&p, SIGKILL);
    uint64_t deadline = mc_now_ms() + 2000; /* a sweep is 20 ms */
    int close_wait;
    while ((close_wait = own_tcp_in_state(8)) > 0 && mc_now_ms() < deadline)
        mc_sleep_ms(5);
    assert_int_equal(close_wait, 0);
    munmap(lb, MiB);
    mc_te_destroy(te);
}

static void test_rw_shm(void **state)
{
    rw_sizes("auto", 1);
}

/* mc_te_transfer_start_hashed: reads come back with the XXH3 of exactly the bytes delivered
 * (sizes across XXH3's classes, unaligned local memory, over and under the streaming-store
 * size), same-host (shm, our own segment) and over tcp with one connection per transfer;
 * writes come back unhashed. */
static void hashed_reads(mc_te_t *te, te_peer_t *p, mc_te_segment_t seg, bool expect_hashed)
{
    static const size_t sizes[] = {1, 240, 241, 1024, 1025, 4096, (1u << 20) + 37, 4u << 20};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    uint8_t *lb = local_buf(16 * MiB);
    mc_te_request_t reqs[N + 1];
    size_t loff = 0;
    uint64_t roff = 4096 + 3;
    for (size_t i = 0; i < N; i++) {
        reqs[i] = (mc_te_request_t){MC_TE_READ, lb + loff + (i & 1), seg, p->addr[0] + roff,
                                    sizes[i]};
        loff += sizes[i] + 64;
        roff += sizes[i] + 5;
    }
    uint8_t stamp[16] = {0};
    reqs[N] = (mc_te_request_t){MC_TE_WRITE, stamp, seg, p->addr[1], sizeof(stamp)};
    mc_te_read_hash_t hashes[N + 1];
    memset(hashes, 0xff, sizeof(hashes)); /* cleared by the start, all but cont (an input) */
    for (size_t i = 0; i < N + 1; i++)
        hashes[i].cont = NULL;
    mc_te_transfer_t *x = NULL;
    assert_int_equal(mc_te_transfer_start_hashed(te, reqs, N + 1, true, hashes, &x), MC_OK);
    assert_int_equal(mc_te_transfer_wait(te, x, NULL), MC_OK);
    for (size_t i = 0; i < N; i++) {
        uint64_t off = reqs[i].target_addr - p->addr[0];
        assert_int_equal(te_pattern_check(reqs[i].local, sizes[i], 0, off, 1), -1);
        assert_int_equal(hashes[i].hashed, expect_hashed);
        if (expect_hashed)
            assert_int_equal(hashes[i].hash, mc_hash64(reqs[i].local, sizes[i]));
    }
    assert_false(hashes[N].hashed);
    assert_int_equal(mc_te_transfer_start_hashed(te, reqs, 1, false, NULL, &x),
                     MC_ERR_INVALID_PARAMS);
    munmap(lb, 16 * MiB);
}

static void test_start_hashed(void **state)
{
    (void)state;
    const char *args[] = {"--buffers", "2", "--size", "16777216", "--shareable", NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, "auto", 10000, &seg);
    hashed_reads(te, &p, seg, true); /* shm */
    mc_te_destroy(te);
    te = make_engine_striped("tcp", 10000, 1);
    assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
    hashed_reads(te, &p, seg, true);
    /* our own segment: a copy by this thread, hashed */
    uint8_t *own = local_buf(MiB), *dst = local_buf(MiB);
    for (size_t i = 0; i < MiB; i++)
        own[i] = (uint8_t)(i * 131 + 7);
    assert_int_equal(mc_te_register(te, own, MiB, NULL), MC_OK);
    mc_te_segment_t self;
    assert_int_equal(mc_te_segment_open(te, mc_te_local_name(te), &self), MC_OK);
    mc_te_request_t r = {MC_TE_READ, dst, self, (uint64_t)(uintptr_t)own + 1, MiB - 1};
    mc_te_read_hash_t h = {0};
    mc_te_transfer_t *x = NULL;
    assert_int_equal(mc_te_transfer_start_hashed(te, &r, 1, false, &h, &x), MC_OK);
    assert_int_equal(mc_te_transfer_wait(te, x, NULL), MC_OK);
    assert_memory_equal(dst, own + 1, MiB - 1);
    assert_true(h.hashed);
    assert_int_equal(h.hash, mc_hash64(own + 1, MiB - 1));
    assert_int_equal(mc_te_unregister(te, own), MC_OK);
    munmap(own, MiB);
    munmap(dst, MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* XXH3 of len bytes of the target's buffer `buf` (pattern seed 1) at off, from the pattern
 * itself: a hash of any other bytes (a wrong offset, the receive buffer) does not match it. */
static uint64_t pattern_hash(unsigned buf, uint64_t off, size_t len)
{
    uint8_t *tmp = malloc(len ? len : 1);
    assert_non_null(tmp);
    te_pattern_fill(tmp, len, buf, off, 1);
    uint64_t h = mc_hash64(tmp, len);
    free(tmp);
    return h;
}

/* Hashed tcp READs, n requests in one transfer (their answers back to back on one connection
 * at stripe 1). Each must come back with its bytes and either unhashed or with the XXH3 of
 * the target's pattern; *hashed_p counts the hashed ones. */
static void hashed_tcp_batch(mc_te_t *te, te_peer_t *p, mc_te_segment_t seg, uint8_t *lb,
                             const size_t *sizes, size_t n, size_t *hashed_p,
                             mc_te_read_hash_t *hashes)
{
    mc_te_request_t *reqs = calloc(n, sizeof(*reqs));
    assert_non_null(reqs);
    size_t loff = 0;
    uint64_t roff = 3;
    for (size_t i = 0; i < n; i++) {
        reqs[i] = (mc_te_request_t){MC_TE_READ, lb + loff + (i & 1), seg, p->addr[0] + roff,
                                    sizes[i]};
        loff += sizes[i] + 64;
        roff += sizes[i] + 4093;
    }
    memset(lb, 0xee, loff);
    mc_te_transfer_t *x = NULL;
    assert_int_equal(mc_te_transfer_start_hashed(te, reqs, n, false, hashes, &x), MC_OK);
    assert_int_equal(mc_te_transfer_wait(te, x, NULL), MC_OK);
    *hashed_p = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t off = reqs[i].target_addr - p->addr[0];
        assert_int_equal(te_pattern_check(reqs[i].local, sizes[i], 0, off, 1), -1);
        if (hashes[i].hashed) {
            assert_int_equal(hashes[i].hash, pattern_hash(0, off, sizes[i]));
            (*hashed_p)++;
        }
    }
    free(reqs);
}

/* Hashed tcp READs (te_hashed.h: the engine hashes each piece as it lands): at stripe 1 every
 * READ of 1 B .. 33 MiB is hashed, alone or among others in one transfer (through the receive
 * buffer, straight into the destination, across slice edges), and the predicate says so; at
 * stripe 4 a one-slice READ is still hashed, and a 33 MiB READ striped over 4 connections is
 * not (no connection saw all of it), never wrongly. */
static void test_start_hashed_tcp(void **state)
{
    (void)state;
    const char *args[] = {"--buffers", "1", "--size", "41943040", NULL};
    /* around the receive pieces too: a hashed direct recv takes 64 KiB while 128 KiB or more
     * are left, else the rest (tcp_transport.c, HASH_PIECE) */
    static const size_t sizes[] = {1, 17, 240, 241, 4096, 4097, 65535, 65536 + 7,
                                   128 * 1024 - 1, 128 * 1024, 128 * 1024 + 1, 320 * 1024 + 3,
                                   MiB - 1, MiB, MiB + 1, 3 * MiB + 5, 4096, 33};
    enum { N = sizeof(sizes) / sizeof(sizes[0]), SMALL = 128 };
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    uint8_t *lb = local_buf(40 * MiB);
    size_t small[SMALL], big[2] = {33 * MiB, 4096}, one[1], hashed;
    for (size_t i = 0; i < SMALL; i++)
        small[i] = 4096;
    mc_te_read_hash_t hashes[SMALL] = {{0}}; /* no cont: each READ hashed on its own */
    for (int k = 0; k < 2; k++) {
        uint32_t stripe = k == 0 ? 1 : 4;
        mc_te_t *te = make_engine_striped("tcp", 10000, stripe);
        mc_te_segment_t seg;
        assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
        assert_int_equal(mc_te_segment_hashes_reads(te, seg), stripe == 1);
        hashed_tcp_batch(te, &p, seg, lb, sizes, N, &hashed, hashes);
        if (stripe == 1) {
            assert_int_equal(hashed, N);
        } else {
            for (size_t i = 0; i < N; i++)
                if (sizes[i] <= MiB)
                    assert_true(hashes[i].hashed);
        }
        hashed_tcp_batch(te, &p, seg, lb, small, SMALL, &hashed, hashes);
        assert_int_equal(hashed, SMALL);
        for (size_t i = 0; i < N; i++) { /* one READ per transfer */
            one[0] = sizes[i];
            hashed_tcp_batch(te, &p, seg, lb, one, 1, &hashed, hashes);
            if (stripe == 1 || sizes[i] <= MiB)
                assert_int_equal(hashed, 1);
        }
        hashed_tcp_batch(te, &p, seg, lb, big, 1, &hashed, hashes);
        assert_int_equal(hashed, stripe == 1 ? 1 : 0);
        hashed_tcp_batch(te, &p, seg, lb, big, 2, &hashed, hashes);
        assert_int_equal(hashed, stripe == 1 ? 2 : 1);
        /* a READ whose later slices are refused (it crosses the buffer's end) is not hashed,
         * and the READ behind it on the same connection still is, rightly */
        mc_te_request_t bad[2] = {
            {MC_TE_READ, lb, seg, p.addr[0] + 40 * MiB - 3 * MiB / 2, 3 * MiB},
            {MC_TE_READ, lb + 3 * MiB, seg, p.addr[0] + 5, 2 * MiB + 3}};
        mc_te_xfer_status_t sts[2];
        mc_te_transfer_t *x = NULL;
        assert_int_equal(mc_te_transfer_start_hashed(te, bad, 2, false, hashes, &x), MC_OK);
        assert_int_not_equal(mc_te_transfer_wait(te, x, sts), MC_OK);
        assert_int_equal(sts[0].state, MC_TE_FAILED);
        assert_false(hashes[0].hashed);
        assert_int_equal(sts[1].state, MC_TE_COMPLETED);
        assert_int_equal(te_pattern_check(lb + 3 * MiB, 2 * MiB + 3, 0, 5, 1), -1);
        if (stripe == 1 || hashes[1].hashed) {
            assert_true(hashes[1].hashed);
            assert_int_equal(hashes[1].hash, pattern_hash(0, 5, 2 * MiB + 3));
        }
        mc_te_destroy(te);
    }
    munmap(lb, 40 * MiB);
    te_peer_stop(&p, 0);
}

/* A value read in ranges one after another, each range its own transfer whose READ continues
 * one running XXH3 stream (te_hashed.h, cont): V bytes of the target's buffer `buf` at 0 into
 * lb. A range the engine did not hash is added here, as a caller does. Returns the final hash
 * of the stream; *hashed_p: which ranges (bit i) the engine hashed. */
static const size_t cont_ranges[] = {1, 240, 65536 + 7, MiB, 3 * MiB / 2 + 3, 33 * MiB, 458514};
enum { N_CONT = sizeof(cont_ranges) / sizeof(cont_ranges[0]) };
#define CONT_V (36 * MiB + 13) /* the sum of cont_ranges */

static uint64_t read_in_ranges(mc_te_t *te, te_peer_t *p, mc_te_segment_t seg, unsigned buf,
                               uint8_t *lb, unsigned *hashed_p)
{
    mc_hash_stream_t hs;
    assert_int_equal(mc_hash_stream_init(&hs), 0);
    memset(lb, 0xee, CONT_V);
    uint64_t off = 0;
    *hashed_p = 0;
    for (size_t i = 0; i < N_CONT; i++) {
        mc_te_request_t r = {MC_TE_READ, lb + off, seg, p->addr[buf] + off, cont_ranges[i]};
        mc_te_read_hash_t h = {.hash = 7, .hashed = true, .cont = &hs}; /* cleared but cont */
        mc_te_transfer_t *x = NULL;
        assert_int_equal(mc_te_transfer_start_hashed(te, &r, 1, false, &h, &x), MC_OK);
        assert_int_equal(mc_te_transfer_wait(te, x, NULL), MC_OK);
        assert_ptr_equal(h.cont, &hs);
        if (h.hashed)
            *hashed_p |= 1u << i;
        else
            mc_hash_stream_update(&hs, lb + off, cont_ranges[i]);
        off += cont_ranges[i];
    }
    assert_int_equal(off, CONT_V);
    return mc_hash_stream_final(&hs);
}

/* Hashed READs that continue the caller's stream (te_hashed.h, cont): over shm, over tcp at
 * stripe 1 every range is hashed on receipt, and the stream's hash equals the one-shot hash of
 * the value; at stripe 4 the 33 MiB range is striped, comes back unhashed and leaves the
 * stream as it was (the caller's own update then still gives the right hash). A byte changed
 * in a later range at the target shows in the hash (it is of the bytes that landed). */
static void test_start_hashed_cont(void **state)
{
    (void)state;
    const char *args[] = {"--buffers", "2", "--size", "41943040", "--shareable", NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, "auto", 10000, &seg);
    uint8_t *lb = local_buf(40 * MiB);
    const uint64_t want = pattern_hash(0, 0, CONT_V), all = (1u << N_CONT) - 1;
    /* a byte of buffer 1 in the 33 MiB range changed: its pattern's hash no longer matches */
    const uint64_t bad_at = 3 * MiB;
    uint8_t bad = 0;
    te_pattern_fill(&bad, 1, 1, bad_at, 1);
    bad ^= 0x5a;
    for (int k = 0; k < 3; k++) {
        if (k > 0) { /* tcp at stripe 1, then 4 */
            mc_te_destroy(te);
            te = make_engine_striped("tcp", 10000, k == 1 ? 1 : 4);
            assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
        }
        unsigned hashed;
        assert_int_equal(read_in_ranges(te, &p, seg, 0, lb, &hashed), want);
        assert_int_equal(te_pattern_check(lb, CONT_V, 0, 0, 1), -1);
        if (k < 2)
            assert_int_equal(hashed, all);
        else
            /* ranges of up to 1 MiB are one slice, the 33 MiB range is striped (the 1.5 MiB
             * one may be) */
            assert_int_equal(hashed & ~(1u << 4), all & ~(3u << 4));
        if (k == 0) {
            mc_te_request_t w = {MC_TE_WRITE, &bad, seg, p.addr[1] + bad_at, 1};
            mc_te_transfer_t *x = NULL;
            assert_int_equal(mc_te_transfer_start(te, &w, 1, &x), MC_OK);
            assert_int_equal(mc_te_transfer_wait(te, x, NULL), MC_OK);
        }
        uint64_t h = read_in_ranges(te, &p, seg, 1, lb, &hashed);
        assert_int_equal(lb[bad_at], bad);
        assert_int_not_equal(h, pattern_hash(1, 0, CONT_V));
        assert_int_equal(h, mc_hash64(lb, CONT_V));
    }
    mc_te_destroy(te);
    munmap(lb, 40 * MiB);
    te_peer_stop(&p, 0);
}

/* A number from a /proc or /sys file, -1 if unreadable. */
static long read_long_file(const char *path)
{
    FILE *f = fopen(path, "r");
    long v = -1;
    if (f) {
        if (fscanf(f, "%ld", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

static bool write_long_file(const char *path, long v)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return false;
    bool ok = fprintf(f, "%ld\n", v) > 0;
    return fclose(f) == 0 && ok;
}

#define HUGEPAGES_PATH "/proc/sys/vm/nr_hugepages"
#define HUGEPAGES_FREE_PATH "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"

static long hugepages_orig = -1; /* vm.nr_hugepages before the test raised it, or -1 */

static int hugepages_restore(void **state)
{
    (void)state;
    if (hugepages_orig >= 0 && !write_long_file(HUGEPAGES_PATH, hugepages_orig))
        return -1;
    hugepages_orig = -1;
    return 0;
}

/* Shareable memory on huge pages (mc_te_alloc_shareable): with 2 MiB pages free (reserved here
 * for the test and given back by hugepages_restore; ctest runs it alone), a peer's 8 MiB
 * shareable buffers (8 MiB + 4 KiB the second time) are on 2 MiB pages, and an initiator maps
 * them directly (also a registration that starts 4 KiB into one: its mapping starts on the
 * huge page below) and moves the right bytes. Exits 77 (ctest: skipped, not passed) when the
 * host gives no huge pages. */
static void test_rw_shm_hugepages(void **state)
{
    enum { NEED = 2 * 10 / 2 + 2 }; /* two buffers of up to 10 MiB, 2 MiB pages, a spare */
    long orig = read_long_file(HUGEPAGES_PATH), free_now = read_long_file(HUGEPAGES_FREE_PATH);
    if (orig >= 0 && free_now >= 0 && free_now < NEED &&
        write_long_file(HUGEPAGES_PATH, orig + NEED - free_now))
        hugepages_orig = orig;
    if (read_long_file(HUGEPAGES_FREE_PATH) < NEED) {
        hugepages_restore(state);
        fprintf(stderr, "test_rw_shm_hugepages: no %d free huge pages and cannot reserve them "
                        "(%s): skipped\n", NEED, HUGEPAGES_PATH);
        exit(77);
    }
    for (int k = 0; k < 2; k++) {
        /* The previous round's pages come back only when the kernel drops the last reference:
         * the peer's memfd may still sit in a closed socket's queue of passed descriptors,
         * which the kernel collects asynchronously. Wait for them (nothing else runs: serial). */
        uint64_t pages_deadline = mc_now_ms() + 10000;
        while (read_long_file(HUGEPAGES_FREE_PATH) < NEED) {
            assert_true(mc_now_ms() < pages_deadline);
            mc_sleep_ms(10);
        }
        const char *args[] = {"--buffers", "2", "--size", k ? "8392704" : "8388608",
                              "--shareable", "--register_offset", k ? "4096" : "0", NULL};
        te_peer_t p;
        mc_te_segment_t seg;
        mc_te_t *te = start_peer_and_engine(&p, args, "auto", 10000, &seg);
        assert_int_equal(mt_mapping_page_kb(p.pid, p.addr[0], NULL), 2048);
        assert_int_equal(p.len[0], 8 * MiB); /* the registered part */
        uint8_t *lb = local_buf(8 * MiB);
        te_roundtrip_sizes(te, &p, seg, lb, p.len[0]);
        /* the bytes came through our own mapping of the peer's huge pages, not the owner */
        assert_int_equal(mt_mapping_page_kb(getpid(), 0, "mc-te-shareable"), 2048);
        munmap(lb, 8 * MiB);
        mc_te_destroy(te);
        te_peer_stop(&p, 0);
    }
}

static void test_rw_cma(void **state)
{
    rw_sizes("auto", 0); /* same host, plain anonymous memory: owner-side CMA copies */
}

/* ---- errors: ranges, overflow, unknown segment; the target keeps serving --------------- */

static void errors(const char *proto, int shareable)
{
    const char *args[] = {"--buffers", "2", "--size", "1048576", shareable ? "--shareable" : NULL,
                          NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, proto, 5000, &seg);
    uint8_t *lb = local_buf(2 * MiB);
    mc_te_xfer_status_t st;
    struct { mc_te_opcode_t op; uint64_t addr; size_t len; } bad[] = {
        {MC_TE_READ, p.addr[0] + MiB - 10, 100},      /* crosses the end */
        {MC_TE_READ, (p.addr[0] < p.addr[1] ? p.addr[0] : p.addr[1]) - 4096, 100}, /* before */
        {MC_TE_READ, UINT64_MAX - 10, 100},           /* overflows */
        {MC_TE_READ, UINT64_MAX - 4095, 4096},        /* ends exactly at 2^64: overflow too */
        {MC_TE_WRITE, (p.addr[0] > p.addr[1] ? p.addr[0] : p.addr[1]) + MiB, 8192}, /* after */
        {MC_TE_WRITE, p.addr[0] + 1, 2 * MiB},        /* too long, sliced */
    };
    for (size_t i = 0; i < MC_ARRAY_LEN_T(bad); i++) {
        assert_int_equal(xfer(te, bad[i].op, lb, seg, bad[i].addr, bad[i].len, &st),
                         MC_ERR_OUT_OF_RANGE);
        assert_int_equal(st.state, MC_TE_FAILED);
        assert_int_equal(st.error, MC_ERR_OUT_OF_RANGE);
        /* the same connections still work */
        assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 7, 4096, &st), MC_OK);
        assert_int_equal(te_pattern_check(lb, 4096, 0, 7, 1), -1);
    }
    /* a big READ refused, pipelined with a good one on the same connection: the client reads
     * the error header and the next answer in one go (cli_recv_header_and_data moves them back) */
    mc_te_request_t pair[2] = {
        {MC_TE_READ, lb, seg, p.addr[0] + MiB - 65536, 2 * 65536},
        {MC_TE_READ, lb + MiB, seg, p.addr[0] + 4096, 4096},
    };
    mc_te_xfer_status_t ps[2];
    for (int round = 0; round < 20; round++) {
        memset(lb + MiB, 0, 4096);
        assert_int_equal(mc_te_transfer_sync(te, pair, 2, ps), MC_ERR_OUT_OF_RANGE);
        assert_int_equal(ps[0].error, MC_ERR_OUT_OF_RANGE);
        assert_int_equal(ps[1].state, MC_TE_COMPLETED);
        assert_int_equal(te_pattern_check(lb + MiB, 4096, 0, 4096, 1), -1);
    }
    /* zero-length requests complete without touching anything */
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, 0, 0, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_COMPLETED);
    /* unknown segment */
    uint16_t port;
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    char name[64];
    snprintf(name, sizeof(name), "127.0.0.1:%u", port);
    mc_te_segment_t s2;
    assert_int_equal(mc_te_segment_open(te, name, &s2), MC_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(mc_te_segment_open(te, "no-port", &s2), MC_ERR_INVALID_PARAMS);
    /* bad handle / bad opcode: submit fails and nothing of it is left in the batch */
    mc_te_batch_t b;
    assert_int_equal(mc_te_batch_alloc(te, 4, &b), MC_OK);
    mc_te_request_t r[2] = {{MC_TE_READ, lb, seg, p.addr[0], 16}, {MC_TE_READ, lb, 999, 0, 16}};
    assert_int_equal(mc_te_batch_submit(te, b, r, 2), MC_ERR_INVALID_PARAMS);
    r[1].target = seg;
    r[1].opcode = (mc_te_opcode_t)7;
    assert_int_equal(mc_te_batch_submit(te, b, r, 2), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_batch_status(te, b, 0, &st), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_batch_free(te, b), MC_OK);
    /* a second client is served normally */
    mc_te_t *te2 = make_engine(proto, 5000);
    mc_te_segment_t seg2;
    assert_int_equal(mc_te_segment_open(te2, p.name, &seg2), MC_OK);
    assert_int_equal(xfer(te2, MC_TE_READ, lb, seg2, p.addr[1] + 100, 1000, &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, 1000, 1, 100, 1), -1);
    mc_te_destroy(te2);
    munmap(lb, 2 * MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* One transfer whose requests alternate between two peers, with a zero-length and an
 * overflowing request among them: each request reads from its own peer (the submit groups
 * slices by peer, and a request lends its descriptor only to the next one to the same peer),
 * the failing one fails alone. */
static void mixed_peers(const char *proto, int shareable)
{
    const char *args[] = {"--buffers", "2", "--size", "1048576", shareable ? "--shareable" : NULL,
                          NULL};
    te_peer_t p1, p2;
    assert_int_equal(te_peer_start(&p1, args), 0);
    assert_int_equal(te_peer_start(&p2, args), 0);
    mc_te_t *te = make_engine(proto, 10000);
    mc_te_segment_t s1, s2;
    assert_int_equal(mc_te_segment_open(te, p1.name, &s1), MC_OK);
    assert_int_equal(mc_te_segment_open(te, p2.name, &s2), MC_OK);
    enum { N = 48, BAD = 17, EMPTY = 30 };
    uint8_t *lb = local_buf((size_t)N * 4096);
    mc_te_request_t reqs[N];
    for (int round = 0; round < 2; round++) {
        memset(lb, 0, (size_t)N * 4096);
        for (int i = 0; i < N; i++) { /* p1's buffer 0, p2's buffer 1 (another pattern) */
            int second = round == 0 ? i % 2 : (i / 3) % 2; /* ABAB..., then AAABBB... */
            reqs[i] = (mc_te_request_t){MC_TE_READ, lb + (size_t)i * 4096, second ? s2 : s1,
                                        (second ? p2.addr[1] : p1.addr[0]) + (uint64_t)i * 4096,
                                        4096};
        }
        reqs[BAD].target_addr = UINT64_MAX - 100; /* overflows: fails before dispatch */
        reqs[EMPTY].length = 0;
        mc_te_xfer_status_t sts[N];
        assert_int_equal(mc_te_transfer_sync(te, reqs, N, sts), MC_ERR_OUT_OF_RANGE);
        for (int i = 0; i < N; i++) {
            if (i == BAD) {
                assert_int_equal(sts[i].error, MC_ERR_OUT_OF_RANGE);
                continue;
            }
            assert_int_equal(sts[i].state, MC_TE_COMPLETED);
            if (i == EMPTY)
                continue;
            int second = reqs[i].target == s2;
            assert_int_equal(te_pattern_check(lb + (size_t)i * 4096, 4096, second ? 1 : 0,
                                              (uint64_t)i * 4096, 1),
                             -1);
        }
    }
    munmap(lb, (size_t)N * 4096);
    mc_te_destroy(te);
    te_peer_stop(&p1, 0);
    te_peer_stop(&p2, 0);
}

static void test_mixed_peers_tcp(void **state)
{
    mixed_peers("tcp", 0);
}
static void test_mixed_peers_shm(void **state)
{
    mixed_peers("auto", 1);
}

static void test_errors_tcp(void **state)
{
    errors("tcp", 0);
}
static void test_errors_shm(void **state)
{
    errors("auto", 1);
}

/* ---- hostile frames on a raw socket ----------------------------------------------------- */

static int raw_connect(const char *name, int rcvbuf)
{
    char host[MC_HOST_MAX];
    uint16_t port;
    assert_int_equal(mc_net_split_hostport(name, host, &port), MC_OK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    if (rcvbuf)
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(0x7f000001)};
    assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    /* every connection starts with the handshake (the peer has no keyring: any proof) */
    assert_int_equal(mc_auth_client_handshake(fd, NULL, mc_now_ns() + 5000000000ull), MC_OK);
    return fd;
}

static void raw_send(int fd, uint16_t op, uint64_t id, uint64_t addr, uint64_t len, uint32_t magic)
{
    mc_te_frame_t h = {.magic = magic, .version = MC_TE_FRAME_VERSION, .opcode = op, .id = id,
                       .addr = addr, .length = len};
    uint8_t b[MC_TE_FRAME_HDR_SIZE];
    mc_te_frame_encode(&h, b);
    assert_int_equal(mc_net_send_all(fd, b, sizeof(b), mc_now_ns() + 5000000000ull), MC_OK);
}

static void raw_recv_hdr(int fd, mc_te_frame_t *h)
{
    uint8_t b[MC_TE_FRAME_HDR_SIZE];
    assert_int_equal(mc_net_recv_all(fd, b, sizeof(b), mc_now_ns() + 5000000000ull), MC_OK);
    assert_int_equal(mc_te_frame_decode(b, sizeof(b), h), MC_OK);
}

static void assert_closed(int fd)
{
    uint8_t b[64];
    assert_int_equal(mc_net_recv_all(fd, b, sizeof(b), mc_now_ns() + 5000000000ull),
                     MC_ERR_CONNECTION);
    close(fd);
}

static void test_raw_frames(void **state)
{
    const char *args[] = {"--buffers", "1", "--size", "65536", NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    int fd = raw_connect(p.name, 0);
    mc_te_frame_t h;
    /* out of range: error frame, connection stays */
    raw_send(fd, MC_TE_OP_READ, 1, p.addr[0] + 65530, 100, MC_TE_FRAME_MAGIC);
    raw_recv_hdr(fd, &h);
    assert_int_equal(h.opcode, MC_TE_OP_READ | MC_TE_OP_RESPONSE);
    assert_int_equal(h.id, 1);
    assert_int_equal(h.status, MC_ERR_OUT_OF_RANGE);
    assert_int_equal(h.length, 0);
    /* READ over the frame cap: refused with TOO_LARGE, connection stays */
    raw_send(fd, MC_TE_OP_READ, 2, p.addr[0], MC_TE_FRAME_MAX_PAYLOAD + 1, MC_TE_FRAME_MAGIC);
    raw_recv_hdr(fd, &h);
    assert_int_equal(h.status, MC_ERR_TOO_LARGE);
    /* overflowing range */
    raw_send(fd, MC_TE_OP_READ, 3, UINT64_MAX - 1, 16, MC_TE_FRAME_MAGIC);
    raw_recv_hdr(fd, &h);
    assert_int_equal(h.status, MC_ERR_OUT_OF_RANGE);
    /* out-of-range WRITE: its payload is skipped, then a valid READ works */
    raw_send(fd, MC_TE_OP_WRITE, 4, 16, 1000, MC_TE_FRAME_MAGIC);
    uint8_t junk[1000];
    memset(junk, 0xAB, sizeof(junk));
    assert_int_equal(mc_net_send_all(fd, junk, sizeof(junk), 0), MC_OK);
    raw_recv_hdr(fd, &h);
    assert_int_equal(h.id, 4);
    assert_int_equal(h.status, MC_ERR_OUT_OF_RANGE);
    raw_send(fd, MC_TE_OP_READ, 5, p.addr[0] + 100, 32, MC_TE_FRAME_MAGIC);
    raw_recv_hdr(fd, &h);
    assert_int_equal(h.status, MC_OK);
    assert_int_equal(h.length, 32);
    uint8_t data[32];
    assert_int_equal(mc_net_recv_all(fd, data, 32, mc_now_ns() + 5000000000ull), MC_OK);
    assert_int_equal(te_pattern_check(data, 32, 0, 100, 1), -1);
    /* GET_DESC */
    raw_send(fd, MC_TE_OP_GET_DESC, 6, 0, 0, MC_TE_FRAME_MAGIC);
    raw_recv_hdr(fd, &h);
    assert_int_equal(h.status, MC_OK);
    assert_true(h.length > 10 && h.length < 100000);
    char *json = calloc(1, h.length + 1);
    assert_int_equal(mc_net_recv_all(fd, json, h.length, mc_now_ns() + 5000000000ull), MC_OK);
    assert_non_null(strstr(json, "\"buffers\""));
    free(json);
    /* CMA: the owner copies into the process that holds this connection, and only into it */
    uint8_t cma_dst[64];
    memset(cma_dst, 0, sizeof(cma_dst));
    uint8_t body[16];
    uint64_t pids[2] = {1, (uint64_t)getpid()}; /* pid 1 does not own this socket */
    for (int k = 0; k < 2; k++) {
        uint64_t la = (uint64_t)(uintptr_t)cma_dst;
        for (int b = 0; b < 8; b++) {
            body[b] = (uint8_t)(pids[k] >> (8 * b));
            body[8 + b] = (uint8_t)(la >> (8 * b));
        }
        raw_send(fd, MC_TE_OP_CMA_READ, 10 + k, p.addr[0] + 200, sizeof(cma_dst),
                 MC_TE_FRAME_MAGIC);
        assert_int_equal(mc_net_send_all(fd, body, sizeof(body), 0), MC_OK);
        raw_recv_hdr(fd, &h);
        assert_int_equal(h.id, 10 + k);
        assert_int_equal(h.length, 0);
        if (k == 0) {
            assert_int_equal(h.status, MC_ERR_PERMISSION);
            assert_int_equal(cma_dst[0] | cma_dst[63], 0);
        } else {
            assert_int_equal(h.status, MC_OK);
            assert_int_equal(te_pattern_check(cma_dst, sizeof(cma_dst), 0, 200, 1), -1);
        }
    }
    /* unknown opcode: framing is lost, connection closed */
    raw_send(fd, 9, 7, 0, 0, MC_TE_FRAME_MAGIC);
    assert_closed(fd);
    /* bad magic */
    fd = raw_connect(p.name, 0);
    raw_send(fd, MC_TE_OP_READ, 1, p.addr[0], 16, 0x12345678);
    assert_closed(fd);
    /* WRITE over the cap: its payload cannot be skipped safely: closed */
    fd = raw_connect(p.name, 0);
    raw_send(fd, MC_TE_OP_WRITE, 1, p.addr[0], MC_TE_FRAME_MAX_PAYLOAD + 1, MC_TE_FRAME_MAGIC);
    assert_closed(fd);
    /* a response opcode sent as a request */
    fd = raw_connect(p.name, 0);
    raw_send(fd, MC_TE_OP_READ | MC_TE_OP_RESPONSE, 1, p.addr[0], 16, MC_TE_FRAME_MAGIC);
    assert_closed(fd);
    /* truncated frame then EOF: the server just drops the connection */
    fd = raw_connect(p.name, 0);
    assert_int_equal(send(fd, "MCTE", 4, MSG_NOSIGNAL), 4);
    close(fd);
    /* the target still serves an engine */
    mc_te_t *te = make_engine("tcp", 5000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
    mc_te_xfer_status_t st;
    assert_int_equal(xfer(te, MC_TE_READ, data, seg, p.addr[0] + 1, 32, &st), MC_OK);
    assert_int_equal(te_pattern_check(data, 32, 0, 1, 1), -1);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* ---- peer death and hangs ---------------------------------------------------------------- */

static void wait_final(mc_te_t *te, mc_te_batch_t b, mc_te_xfer_status_t *sts, size_t n,
                       uint64_t max_ms)
{
    uint64_t deadline = mc_now_ms() + max_ms;
    while (mc_te_batch_status_all(te, b, sts, n) != MC_OK) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(2);
    }
}

static void test_kill9_reconnect(void **state)
{
    uint16_t port;
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    char name[64];
    snprintf(name, sizeof(name), "127.0.0.1:%u", port);
    const char *args[] = {"--name", name, "--buffers", "1", "--size", "16777216", NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    assert_string_equal(p.name, name);
    mc_te_t *te = make_engine("tcp", 4000);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, name, &seg), MC_OK);
    uint8_t *lb = local_buf(16 * MiB);
    mc_te_xfer_status_t st;
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 4096, &st), MC_OK); /* connected */
    /* freeze it so that requests are surely in flight, then kill it */
    assert_int_equal(mt_freeze(p.pid, 5000), 0);
    enum { N = 8 };
    mc_te_request_t reqs[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (mc_te_request_t){i & 1 ? MC_TE_WRITE : MC_TE_READ, lb + (size_t)i * 2 * MiB,
                                    seg, p.addr[0] + (uint64_t)i * 2 * MiB, 2 * MiB};
    mc_te_batch_t b;
    assert_int_equal(mc_te_batch_alloc(te, N, &b), MC_OK);
    assert_int_equal(mc_te_batch_submit(te, b, reqs, N), MC_OK);
    assert_int_equal(mc_te_batch_free(te, b), MC_ERR_BUSY); /* still in flight */
    uint64_t t0 = mc_now_ms();
    te_peer_stop(&p, SIGKILL);
    mc_te_xfer_status_t sts[N];
    wait_final(te, b, sts, N, 3000); /* connection reset: well before the 4 s deadline */
    assert_true(mc_now_ms() - t0 < 3000);
    for (int i = 0; i < N; i++) {
        assert_int_equal(sts[i].state, MC_TE_FAILED);
        assert_int_not_equal(sts[i].error, MC_OK);
    }
    assert_int_equal(mc_te_batch_free(te, b), MC_OK);
    /* nobody there: fails fast */
    assert_int_not_equal(xfer(te, MC_TE_READ, lb, seg, 4096, 4096, &st), MC_OK);
    /* a new target on the same port: the same segment handle works again */
    assert_int_equal(te_peer_start(&p, args), 0);
    uint64_t first = 0;
    uint64_t deadline = mc_now_ms() + 5000;
    while (mc_te_segment_first_buffer(te, seg, &first) != MC_OK && mc_now_ms() < deadline)
        mc_sleep_ms(20);
    assert_int_equal(first, p.addr[0]);
    mc_status_t rs;
    while ((rs = xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 5, MiB, &st)) != MC_OK &&
           mc_now_ms() < deadline)
        mc_sleep_ms(20);
    assert_int_equal(rs, MC_OK);
    assert_int_equal(te_pattern_check(lb, MiB, 0, 5, 1), -1);
    munmap(lb, 16 * MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* A target killed (-9) while the initiator is idle and a new one started on the same port with
 * a different registration: the initiator's cached descriptor belongs to the dead process. The
 * next read of a range valid in the new buffer must succeed through the same handle (no
 * mc_te_segment_first_buffer or close in between), with the new process's bytes, and a range
 * registered only by the old process must still be refused. meta: the metadata URI of both
 * sides (NULL: P2PHANDSHAKE), where the dead process's descriptor stays until the new one
 * publishes its own. */
static void restart_new_registration(const char *proto, int shareable, const char *meta)
{
    uint16_t port;
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    char name[64];
    snprintf(name, sizeof(name), "127.0.0.1:%u", port);
    const char *sh = shareable ? "--shareable" : NULL;
    const char *old_args[] = {"--name", name, "--buffers", "1", "--size", "16777216",
                              meta ? "--meta" : sh, meta ? meta : NULL, sh, NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, old_args), 0);
    mc_te_config_t cfg = {.metadata_uri = meta ? meta : "P2PHANDSHAKE",
                          .local_server_name = "127.0.0.1", .protocol = proto,
                          .transfer_timeout_ms = 4000};
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, name, &seg), MC_OK);
    uint8_t *lb = local_buf(MiB);
    mc_te_xfer_status_t st;
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 4096, 4096, &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, 4096, 0, 4096, 1), -1);
    uint64_t old_addr = p.addr[0], old_len = p.len[0];
    te_peer_stop(&p, SIGKILL);
    /* the new incarnation: smaller buffer (elsewhere), other bytes (seed 9) */
    const char *new_args[] = {"--name", name, "--buffers", "1", "--size", "4194304", "--seed", "9",
                              meta ? "--meta" : sh, meta ? meta : NULL, sh, NULL};
    assert_int_equal(te_peer_start(&p, new_args), 0);
    assert_string_equal(p.name, name);
    uint64_t off = p.len[0] - 8192; /* near the end of the new buffer */
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + off, 8192, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_COMPLETED);
    assert_int_equal(te_pattern_check(lb, 8192, 0, off, 9), -1);
    /* 4 KiB of the old buffer outside the new one: refused, with nothing delivered */
    uint64_t stale = old_addr + 4096 + 4096 <= p.addr[0] || old_addr + 4096 >= p.addr[0] + p.len[0]
                         ? old_addr + 4096
                         : old_addr + old_len - 4096;
    assert_true(stale + 4096 <= p.addr[0] || stale >= p.addr[0] + p.len[0]);
    assert_int_not_equal(xfer(te, MC_TE_READ, lb, seg, stale, 4096, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_FAILED);
    assert_int_equal(st.error, MC_ERR_OUT_OF_RANGE);
    assert_int_equal(st.transferred, 0);
    /* and the handle keeps working */
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 4096, &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, 4096, 0, 0, 9), -1);
    munmap(lb, MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

static void test_restart_new_registration_tcp(void **state)
{
    restart_new_registration("tcp", 0, NULL);
}

static void test_restart_new_registration_shm(void **state)
{
    restart_new_registration("auto", 1, NULL);
}

static void test_restart_new_registration_cma(void **state)
{
    restart_new_registration("auto", 0, NULL);
}

static void test_restart_new_registration_http_meta(void **state)
{
    uint16_t port;
    char uri[128];
    pid_t srv = te_meta_server_start(&port, uri, sizeof(uri));
    restart_new_registration("tcp", 0, uri);
    restart_new_registration("auto", 1, uri);
    kill(srv, SIGTERM);
    int status;
    waitpid(srv, &status, 0);
}

/* One connection, a batch whose responses (128 MiB) exceed the server's 64 MiB send backlog:
 * the server pauses parsing, drains, and must resume on the requests still buffered even
 * though the peer sends nothing more (regression: this stalled until the deadline). */
static void test_backlog_resume(void **state)
{
    const char *args[] = {"--buffers", "1", "--size", "134217728", NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                          .protocol = "tcp", .transfer_timeout_ms = 20000, .tcp_connections = 1};
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
    enum { N = 128 };
    uint8_t *lb = local_buf((size_t)N * MiB);
    mc_te_request_t reqs[N];
    for (int i = 0; i < N; i++)
        reqs[i] = (mc_te_request_t){MC_TE_READ, lb + (size_t)i * MiB, seg,
                                    p.addr[0] + (uint64_t)i * MiB, MiB};
    for (int round = 0; round < 3; round++) {
        memset(lb, 0, (size_t)N * MiB);
        assert_int_equal(mc_te_transfer_sync(te, reqs, N, NULL), MC_OK);
        assert_int_equal(te_pattern_check(lb, (size_t)N * MiB, 0, 0, 1), -1);
    }
    munmap(lb, (size_t)N * MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* mc_te_transfer_start/wait: transfers started and not yet waited for (more of them than there
 * are connections) hold nothing up, not even a synchronous transfer of the same thread; their
 * waits later return the right results and bytes; wait_some consumes a transfer in order. */
static void test_start_wait(void **state)
{
    const char *args[] = {"--buffers", "1", "--size", "8388608", NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, "tcp", 3000, &seg);
    uint8_t *lb = local_buf(8 * MiB);
    enum { K = 12, PIECE = 65536 };
    mc_te_transfer_t *x[K];
    for (int k = 0; k < K; k++) {
        mc_te_request_t r = {MC_TE_READ, lb + (size_t)k * PIECE, seg,
                             p.addr[0] + (uint64_t)k * PIECE, PIECE};
        assert_int_equal(mc_te_transfer_start(te, &r, 1, &x[k]), MC_OK);
        assert_non_null(x[k]);
    }
    mc_te_xfer_status_t st;
    assert_int_equal(xfer(te, MC_TE_READ, lb + 4 * MiB, seg, p.addr[0] + 5 * MiB, 2 * MiB, &st),
                     MC_OK);
    assert_int_equal(te_pattern_check(lb + 4 * MiB, 2 * MiB, 0, 5 * MiB, 1), -1);
    for (int k = K - 1; k >= 0; k--) { /* any order */
        assert_int_equal(mc_te_transfer_wait(te, x[k], &st), MC_OK);
        assert_int_equal(st.state, MC_TE_COMPLETED);
        assert_int_equal(st.transferred, PIECE);
    }
    assert_int_equal(te_pattern_check(lb, (size_t)K * PIECE, 0, 0, 1), -1);
    /* consumed in order: wait_some(k) reports requests [0, k) final and correct */
    enum { C = 8, CHUNK = 512 * 1024 };
    mc_te_request_t cr[C];
    for (int k = 0; k < C; k++)
        cr[k] = (mc_te_request_t){MC_TE_READ, lb + (size_t)k * CHUNK, seg,
                                  p.addr[0] + (uint64_t)k * CHUNK, CHUNK};
    memset(lb, 0, (size_t)C * CHUNK);
    mc_te_transfer_t *y;
    assert_int_equal(mc_te_transfer_start(te, cr, C, &y), MC_OK);
    mc_te_xfer_status_t cs[C];
    for (size_t k = 1; k <= C; k++) {
        assert_int_equal(mc_te_transfer_wait_some(te, y, k, cs), MC_OK);
        assert_int_equal(cs[k - 1].state, MC_TE_COMPLETED);
        assert_int_equal(te_pattern_check(lb + (k - 1) * CHUNK, CHUNK, 0, (k - 1) * CHUNK, 1), -1);
    }
    assert_int_equal(mc_te_transfer_wait_some(te, y, C + 1, cs), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_transfer_wait(te, y, cs), MC_OK);
    /* nothing to do, and bad input: nothing is left behind */
    mc_te_transfer_t *z = (mc_te_transfer_t *)&st;
    assert_int_equal(mc_te_transfer_start(te, NULL, 0, &z), MC_OK);
    assert_null(z);
    assert_int_equal(mc_te_transfer_wait(te, NULL, NULL), MC_OK);
    mc_te_request_t bad = {MC_TE_READ, lb, 999, p.addr[0], 16};
    z = (mc_te_transfer_t *)&st;
    assert_int_equal(mc_te_transfer_start(te, &bad, 1, &z), MC_ERR_INVALID_PARAMS);
    assert_null(z);
    /* a range error comes back through wait */
    mc_te_request_t oob = {MC_TE_READ, lb, seg, p.addr[0] + 8 * MiB - 10, 100};
    assert_int_equal(mc_te_transfer_start(te, &oob, 1, &z), MC_OK);
    assert_int_equal(mc_te_transfer_wait(te, z, &st), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(st.state, MC_TE_FAILED);
    munmap(lb, 8 * MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

static void test_sigstop_timeout(void **state)
{
    const char *args[] = {"--buffers", "1", "--size", "4194304", NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, "tcp", 1000, &seg);
    uint8_t *lb = local_buf(4 * MiB);
    assert_int_equal(mt_freeze(p.pid, 5000), 0);
    mc_te_request_t reqs[4];
    for (int i = 0; i < 4; i++)
        reqs[i] = (mc_te_request_t){MC_TE_READ, lb + (size_t)i * MiB, seg,
                                    p.addr[0] + (uint64_t)i * MiB, MiB};
    uint64_t t0 = mc_now_ms();
    mc_te_xfer_status_t sts[4];
    assert_int_equal(mc_te_transfer_sync(te, reqs, 4, sts), MC_ERR_TIMEOUT);
    uint64_t el = mc_now_ms() - t0;
    assert_true(el >= 900 && el < 3000);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(sts[i].state, MC_TE_TIMEOUT);
        assert_int_equal(sts[i].error, MC_ERR_TIMEOUT);
    }
    kill(p.pid, SIGCONT);
    uint64_t deadline = mc_now_ms() + 5000;
    mc_status_t rs;
    while ((rs = mc_te_transfer_sync(te, reqs, 4, sts)) != MC_OK && mc_now_ms() < deadline)
        mc_sleep_ms(20);
    assert_int_equal(rs, MC_OK);
    assert_int_equal(te_pattern_check(lb, 4 * MiB, 0, 0, 1), -1);
    munmap(lb, 4 * MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* shm needs nothing from the owner process: a stopped owner is still readable */
static void test_shm_stopped_owner(void **state)
{
    const char *args[] = {"--buffers", "1", "--size", "1048576", "--shareable", NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, "auto", 1000, &seg);
    uint8_t lb[4096];
    mc_te_xfer_status_t st;
    assert_int_equal(mt_freeze(p.pid, 5000), 0);
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 3, sizeof(lb), &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, sizeof(lb), 0, 3, 1), -1);
    kill(p.pid, SIGCONT);
    /* after the owner unregisters, the same range is refused */
    char ans[64];
    assert_int_equal(te_peer_cmd(&p, "unregister 0", ans, sizeof(ans), 5000), 0);
    assert_string_equal(ans, "UNREG 0 OK");
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 3, sizeof(lb), &st),
                     MC_ERR_OUT_OF_RANGE);
    assert_int_equal(te_peer_cmd(&p, "register 0", ans, sizeof(ans), 5000), 0);
    assert_string_equal(ans, "REG 0 OK");
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 3, sizeof(lb), &st), MC_OK);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

/* ---- serving limit (mc_te_set_serve_until) ----------------------------------------------- */

static void peer_serve(te_peer_t *p, const char *how)
{
    char cmd[64], ans[64];
    snprintf(cmd, sizeof(cmd), "serve 0 %s", how);
    assert_int_equal(te_peer_cmd(p, cmd, ans, sizeof(ans), 5000), 0);
    assert_string_equal(ans, "SERVE 0 OK");
}

/* Past its serving limit a buffer is refused to peers (reads and writes) with SEGMENT_FENCED,
 * over tcp, CMA and shm alike; a limit still ahead or none serves. Over shm the initiator
 * checks the limit itself, so it holds while the owner is stopped. */
static void serve_until(const char *proto, int shareable)
{
    const char *args[] = {"--buffers", "1", "--size", "1048576", shareable ? "--shareable" : NULL,
                          NULL};
    te_peer_t p;
    mc_te_segment_t seg;
    mc_te_t *te = start_peer_and_engine(&p, args, proto, 2000, &seg);
    uint8_t lb[4096];
    mc_te_xfer_status_t st;
    peer_serve(&p, "60000");
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 5, sizeof(lb), &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, sizeof(lb), 0, 5, 1), -1);
    peer_serve(&p, "past");
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 5, sizeof(lb), &st),
                     MC_ERR_SEGMENT_FENCED);
    assert_int_equal(st.error, MC_ERR_SEGMENT_FENCED);
    memset(lb, 0xee, sizeof(lb));
    assert_int_equal(xfer(te, MC_TE_WRITE, lb, seg, p.addr[0], sizeof(lb), &st),
                     MC_ERR_SEGMENT_FENCED);
    if (shareable) { /* the owner cannot answer anything now: the initiator refuses alone */
        assert_int_equal(mt_freeze(p.pid, 5000), 0);
        mc_status_t fs = xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 5, sizeof(lb), &st);
        kill(p.pid, SIGCONT);
        assert_int_equal(fs, MC_ERR_SEGMENT_FENCED);
    }
    peer_serve(&p, "none");
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0] + 5, sizeof(lb), &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, sizeof(lb), 0, 5, 1), -1); /* the write was refused */
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
}

static void test_serve_until_tcp(void **state)
{
    serve_until("tcp", 0);
}
static void test_serve_until_cma(void **state)
{
    serve_until("auto", 0);
}
static void test_serve_until_shm(void **state)
{
    serve_until("auto", 1);
}

/* ---- unregister while a transfer holds the buffer ---------------------------------------- */

static void test_unregister_inflight(void **state)
{
    const char *args[] = {"--buffers", "2", "--size", "67108864", "--timeout", "1000", NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    /* a client that asks for 64 MiB and does not read: the server holds buffer 0 */
    int fd = raw_connect(p.name, 4096);
    raw_send(fd, MC_TE_OP_READ, 1, p.addr[0], 64 * MiB, MC_TE_FRAME_MAGIC);
    mc_sleep_ms(50); /* let the request arrive; the answer below does not depend on it */
    char ans[64];
    uint64_t t0 = mc_now_ms();
    assert_int_equal(te_peer_cmd(&p, "unregister 0", ans, sizeof(ans), 10000), 0);
    assert_string_equal(ans, "UNREG 0 BUSY");
    assert_true(mc_now_ms() - t0 >= 900);
    /* the server drops the stalled client after 2x the timeout; then unregister succeeds */
    uint64_t deadline = mc_now_ms() + 8000;
    for (;;) {
        assert_int_equal(te_peer_cmd(&p, "unregister 0", ans, sizeof(ans), 10000), 0);
        if (!strcmp(ans, "UNREG 0 OK"))
            break;
        assert_true(mc_now_ms() < deadline);
    }
    close(fd);
    te_peer_stop(&p, 0);
    /* the unregister waits for an in-flight READ and completes once it drains (a long
     * timeout here, so that the drain is what ends the wait) */
    const char *args2[] = {"--buffers", "2", "--size", "67108864", "--timeout", "10000", NULL};
    assert_int_equal(te_peer_start(&p, args2), 0);
    fd = raw_connect(p.name, 4096);
    raw_send(fd, MC_TE_OP_READ, 2, p.addr[1], 64 * MiB, MC_TE_FRAME_MAGIC);
    mc_sleep_ms(50);
    assert_int_equal(write(p.in_fd, "unregister 1\n", 13), 13);
    assert_int_equal(te_peer_line(&p, ans, sizeof(ans), 200), -1); /* still waiting */
    int big = 8 << 20; /* now drain it quickly, well within the owner's 1 s wait */
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    mc_te_frame_t h;
    raw_recv_hdr(fd, &h);
    assert_int_equal(h.status, MC_OK);
    uint8_t *sink = malloc(64 * MiB);
    assert_int_equal(mc_net_recv_all(fd, sink, 64 * MiB, mc_now_ns() + 20000000000ull), MC_OK);
    assert_int_equal(te_pattern_check(sink, 64 * MiB, 1, 0, 1), -1);
    free(sink);
    assert_int_equal(te_peer_line(&p, ans, sizeof(ans), 10000), 0);
    assert_string_equal(ans, "UNREG 1 OK");
    /* now refused */
    raw_send(fd, MC_TE_OP_READ, 3, p.addr[1], 16, MC_TE_FRAME_MAGIC);
    raw_recv_hdr(fd, &h);
    assert_int_equal(h.status, MC_ERR_OUT_OF_RANGE);
    close(fd);
    te_peer_stop(&p, 0);
}

/* ---- an initiator killed in the middle of a shm copy ------------------------------------ */

/* Starts a te_peer that READs [sh, sh+len) of te's segment again and again, and waits until
 * its lane in te's control memory shows a copy in flight (so it reads over shm, not CMA). */
static void start_shm_reader(te_peer_t *p, mc_te_t *te, uint8_t *sh, size_t len)
{
    const char *args[] = {"--buffers", "1", "--size", "4096", NULL};
    assert_int_equal(te_peer_start(p, args), 0);
    char cmd[256], ans[64];
    snprintf(cmd, sizeof(cmd), "readloop %s %llu %zu", mc_te_local_name(te),
             (unsigned long long)(uintptr_t)sh, len);
    assert_int_equal(te_peer_cmd(p, cmd, ans, sizeof(ans), 20000), 0);
    assert_string_equal(ans, "READLOOP ok");
    uint64_t deadline = mc_now_ms() + 10000;
    while (mc_te_shm_lane_inflight(te, sh, p->pid) == 0) {
        assert_true(mc_now_ms() < deadline);
        sched_yield();
    }
}

/* kill -9 of a reader in the middle of a copy (its lane's in-flight count stays behind):
 * the owner's unregister still succeeds, the lane is reclaimed, and after a re-register a
 * new reader claims a lane and copies again. */
static void test_shm_dead_initiator(void **state)
{
    mc_te_t *te = make_engine("auto", 10000); /* unregister would wait 10 s, then BUSY */
    const size_t len = BIG;
    uint8_t *sh = mc_te_alloc_shareable(te, len);
    assert_non_null(sh);
    te_pattern_fill(sh, len, 0, 0, 1);
    assert_int_equal(mc_te_register(te, sh, len, "cpu:0"), MC_OK);
    te_peer_t p;
    uint64_t stuck = 0;
    for (int attempt = 0; attempt < 10 && stuck == 0; attempt++) {
        start_shm_reader(&p, te, sh, len);
        kill(p.pid, SIGKILL);
        siginfo_t si;
        /* until it is a zombie (not reaped: the owner must tell that it is gone) */
        assert_int_equal(waitid(P_PID, (id_t)p.pid, &si, WEXITED | WNOWAIT), 0);
        stuck = mc_te_shm_lane_inflight(te, sh, p.pid);
        if (stuck == 0) /* its copy had ended just before the kill: again */
            te_peer_stop(&p, SIGKILL);
    }
    assert_true(stuck > 0);
    assert_int_equal(mc_te_shm_lanes_held(te, p.pid), 1);
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_te_unregister(te, sh), MC_OK);
    print_message("unregister with a dead reader's count in flight: OK in %llu ms\n",
                  (unsigned long long)(mc_now_ms() - t0));
    assert_int_equal(mc_te_shm_lanes_held(te, p.pid), 0); /* its lane was reclaimed */
    te_peer_stop(&p, SIGKILL);                            /* reaps it */
    /* the buffer gets a slot again and a new reader a lane */
    assert_int_equal(mc_te_register(te, sh, len, "cpu:0"), MC_OK);
    start_shm_reader(&p, te, sh, len);
    te_peer_stop(&p, SIGKILL);
    assert_int_equal(mc_te_unregister(te, sh), MC_OK);
    mc_te_free_shareable(te, sh);
    mc_te_destroy(te);
}

/* While every lane is held by a live process (we write our own id into all of them), a new
 * reader copies through the owner and still gets the right bytes; once a lane is free it
 * claims it and copies over shm. */
static void test_shm_lanes_full(void **state)
{
    mc_te_t *te = make_engine("auto", 5000);
    const size_t len = MiB;
    uint8_t *sh = mc_te_alloc_shareable(te, len);
    assert_non_null(sh);
    te_pattern_fill(sh, len, 0, 0, 1);
    assert_int_equal(mc_te_register(te, sh, len, "cpu:0"), MC_OK);
    const mc_te_shm_ctl_t *ctl = mc_te_shm_owner_ctl(te);
    assert_non_null(ctl);
    uint64_t self = mc_te_shm_self_id();
    assert_int_not_equal(self, 0);
    for (uint32_t k = 0; k < ctl->lanes; k++)
        atomic_store(&ctl->lane[k], self);
    const char *args[] = {"--buffers", "1", "--size", "4096", NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    char cmd[256], ans[64];
    snprintf(cmd, sizeof(cmd), "readloop %s %llu %zu", mc_te_local_name(te),
             (unsigned long long)(uintptr_t)sh, len);
    assert_int_equal(te_peer_cmd(&p, cmd, ans, sizeof(ans), 20000), 0);
    assert_string_equal(ans, "READLOOP ok"); /* through the owner */
    assert_int_equal(mc_te_shm_lanes_held(te, p.pid), 0);
    atomic_store(&ctl->lane[7], 0);
    uint64_t deadline = mc_now_ms() + 10000; /* it tries again once a second */
    while (mc_te_shm_lanes_held(te, p.pid) == 0) {
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(10);
    }
    assert_int_equal(mc_te_shm_holder_pid(atomic_load(&ctl->lane[7])), p.pid);
    while (mc_te_shm_lane_inflight(te, sh, p.pid) == 0) { /* and copies over shm */
        assert_true(mc_now_ms() < deadline);
        sched_yield();
    }
    te_peer_stop(&p, SIGKILL);
    for (uint32_t k = 0; k < ctl->lanes; k++)
        if (k != 7)
            atomic_store(&ctl->lane[k], 0);
    assert_int_equal(mc_te_unregister(te, sh), MC_OK);
    mc_te_free_shareable(te, sh);
    mc_te_destroy(te);
}

/* ---- metadata through the HTTP metadata server (when built) ------------------------------ */

static void test_http_meta(void **state)
{
    uint16_t port;
    char uri[128];
    pid_t srv = te_meta_server_start(&port, uri, sizeof(uri));
    for (int shm = 0; shm <= 1; shm++) {
        const char *args[] = {"--meta", uri, "--buffers", "1", "--size", "4194304",
                              shm ? "--shareable" : NULL, NULL};
        te_peer_t p;
        assert_int_equal(te_peer_start(&p, args), 0);
        mc_te_config_t cfg = {.metadata_uri = uri, .local_server_name = "127.0.0.1",
                              .protocol = shm ? "auto" : "tcp", .transfer_timeout_ms = 5000};
        mc_te_t *te;
        assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
        mc_te_segment_t seg;
        assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
        uint8_t *lb = local_buf(4 * MiB);
        mc_te_xfer_status_t st;
        assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 4 * MiB, &st), MC_OK);
        assert_int_equal(te_pattern_check(lb, 4 * MiB, 0, 0, 1), -1);
        /* the engine's own segment is published too */
        mc_te_segment_t self;
        assert_int_equal(mc_te_segment_open(te, mc_te_local_name(te), &self), MC_OK);
        /* the owner unpublishes on exit: a fresh lookup no longer finds it */
        te_peer_stop(&p, 0);
        assert_int_equal(mc_te_segment_close(te, seg), MC_OK);
        assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_ERR_SEGMENT_NOT_FOUND);
        munmap(lb, 4 * MiB);
        mc_te_destroy(te);
    }
    kill(srv, SIGTERM);
    int status;
    waitpid(srv, &status, 0);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rw_tcp),
        cmocka_unit_test(test_rw_tcp_striped),
        cmocka_unit_test(test_parked_peer_close),
        cmocka_unit_test(test_rw_shm),
        cmocka_unit_test(test_rw_cma),
        cmocka_unit_test(test_errors_tcp),
        cmocka_unit_test(test_errors_shm),
        cmocka_unit_test(test_mixed_peers_tcp),
        cmocka_unit_test(test_mixed_peers_shm),
        cmocka_unit_test(test_raw_frames),
        cmocka_unit_test(test_kill9_reconnect),
        cmocka_unit_test(test_restart_new_registration_tcp),
        cmocka_unit_test(test_restart_new_registration_shm),
        cmocka_unit_test(test_restart_new_registration_cma),
        cmocka_unit_test(test_restart_new_registration_http_meta),
        cmocka_unit_test(test_sigstop_timeout),
        cmocka_unit_test(test_start_wait),
        cmocka_unit_test(test_start_hashed),
        cmocka_unit_test(test_start_hashed_tcp),
        cmocka_unit_test(test_start_hashed_cont),
        cmocka_unit_test(test_backlog_resume),
        cmocka_unit_test(test_shm_stopped_owner),
        cmocka_unit_test(test_shm_dead_initiator),
        cmocka_unit_test(test_shm_lanes_full),
        cmocka_unit_test_teardown(test_rw_shm_hugepages, hugepages_restore),
        cmocka_unit_test(test_unregister_inflight),
        cmocka_unit_test(test_serve_until_tcp),
        cmocka_unit_test(test_serve_until_cma),
        cmocka_unit_test(test_serve_until_shm),
        cmocka_unit_test(test_http_meta),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
