/* Unit tests of the transfer engine: local segment table, frame codec, request checks, and
 * in-process engine behaviour (register/unregister, local segment, batch API). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/auth.h"
#include "common/net.h"
#include "common/time.h"
#include "te/shm_ctl.h"
#include "te/transport.h"

#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

static mc_te_lbuf_t *lbuf(uint64_t addr, uint64_t len)
{
    mc_te_lbuf_t *b = calloc(1, sizeof(*b));
    b->addr = addr;
    b->len = len;
    b->shm_fd = -1;
    b->slot = -1;
    return b;
}

static void test_table_insert_overlap(void **state)
{
    mc_te_table_t t;
    mc_te_table_init(&t);
    assert_int_equal(mc_te_table_insert(&t, lbuf(1000, 100)), MC_OK);
    assert_int_equal(mc_te_table_insert(&t, lbuf(2000, 100)), MC_OK);
    assert_int_equal(mc_te_table_insert(&t, lbuf(1100, 900)), MC_OK); /* exactly between */
    mc_te_lbuf_t *x;
    x = lbuf(1099, 2);
    assert_int_equal(mc_te_table_insert(&t, x), MC_ERR_SEGMENT_ALREADY_EXISTS);
    free(x);
    x = lbuf(500, 501); /* ends inside 1000 */
    assert_int_equal(mc_te_table_insert(&t, x), MC_ERR_SEGMENT_ALREADY_EXISTS);
    free(x);
    x = lbuf(900, 5000); /* covers everything */
    assert_int_equal(mc_te_table_insert(&t, x), MC_ERR_SEGMENT_ALREADY_EXISTS);
    free(x);
    x = lbuf(UINT64_MAX - 10, 100); /* wraps */
    assert_int_equal(mc_te_table_insert(&t, x), MC_ERR_INVALID_PARAMS);
    free(x);
    x = lbuf(5000, 0);
    assert_int_equal(mc_te_table_insert(&t, x), MC_ERR_INVALID_PARAMS);
    free(x);
    assert_int_equal(mc_te_table_insert(&t, lbuf(500, 500)), MC_OK); /* ends at 1000 */
    assert_int_equal(t.n, 4);
    for (size_t i = 1; i < t.n; i++)
        assert_true(t.bufs[i - 1]->addr + t.bufs[i - 1]->len <= t.bufs[i]->addr);
    mc_te_table_fini(&t);
}

static void test_table_acquire_ranges(void **state)
{
    mc_te_table_t t;
    mc_te_table_init(&t);
    assert_int_equal(mc_te_table_insert(&t, lbuf(1000, 100)), MC_OK);
    assert_int_equal(mc_te_table_insert(&t, lbuf(1100, 100)), MC_OK); /* adjacent */
    mc_te_lbuf_t *top = lbuf(UINT64_MAX - 99, 100); /* would end at 2^64: refused */
    assert_int_equal(mc_te_table_insert(&t, top), MC_ERR_INVALID_PARAMS);
    free(top);
    assert_int_equal(mc_te_table_insert(&t, lbuf(UINT64_MAX - 199, 100)), MC_OK); /* near top */
    mc_te_lbuf_t *b;
    assert_int_equal(mc_te_table_acquire(&t, 1000, 100, &b), MC_OK);
    assert_int_equal(b->addr, 1000);
    mc_te_table_release(&t, b);
    assert_int_equal(mc_te_table_acquire(&t, 1099, 1, &b), MC_OK);
    mc_te_table_release(&t, b);
    /* spanning two adjacent buffers is refused: one registered buffer only */
    assert_int_equal(mc_te_table_acquire(&t, 1050, 100, &b), MC_ERR_OUT_OF_RANGE);
    assert_null(b);
    assert_int_equal(mc_te_table_acquire(&t, 999, 2, &b), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(mc_te_table_acquire(&t, 1200, 1, &b), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(mc_te_table_acquire(&t, 1000, 0, &b), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(mc_te_table_acquire(&t, 1150, UINT64_MAX, &b), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(mc_te_table_acquire(&t, 0, 1, &b), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(mc_te_table_acquire(&t, UINT64_MAX - 199, 100, &b), MC_OK);
    mc_te_table_release(&t, b);
    assert_int_equal(mc_te_table_acquire(&t, UINT64_MAX - 109, 11, &b), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(mc_te_table_acquire(&t, UINT64_MAX - 9, 11, &b), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(mc_te_table_acquire(&t, UINT64_MAX - 100, 1, &b), MC_OK);
    mc_te_table_release(&t, b);
    mc_te_table_fini(&t);
}

static void *release_later(void *arg)
{
    void **a = arg;
    mc_sleep_ms(100);
    mc_te_table_release(a[0], a[1]);
    return NULL;
}

static void test_table_remove_drain(void **state)
{
    mc_te_table_t t;
    mc_te_table_init(&t);
    assert_int_equal(mc_te_table_insert(&t, lbuf(1000, 100)), MC_OK);
    mc_te_lbuf_t *b, *r;
    assert_int_equal(mc_te_table_begin_remove(&t, 1001, &r), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_te_table_acquire(&t, 1010, 10, &b), MC_OK);
    assert_int_equal(mc_te_table_begin_remove(&t, 1000, &r), MC_OK);
    assert_int_equal(mc_te_table_begin_remove(&t, 1000, &r), MC_ERR_BUSY); /* already closing */
    mc_te_lbuf_t *b2;
    assert_int_equal(mc_te_table_acquire(&t, 1010, 10, &b2), MC_ERR_OUT_OF_RANGE); /* closing */
    uint64_t t0 = mc_now_ns();
    assert_int_equal(mc_te_table_wait_drain(&t, r, t0 + 50000000ull), MC_ERR_BUSY);
    assert_true(mc_now_ns() - t0 >= 50000000ull);
    mc_te_table_finish_remove(&t, r, false); /* refused: stays registered */
    assert_int_equal(mc_te_table_acquire(&t, 1010, 10, &b2), MC_OK);
    mc_te_table_release(&t, b2);
    /* second try: a releaser on another thread lets it drain */
    assert_int_equal(mc_te_table_begin_remove(&t, 1000, &r), MC_OK);
    void *args[2] = {&t, b};
    pthread_t th;
    pthread_create(&th, NULL, release_later, args);
    assert_int_equal(mc_te_table_wait_drain(&t, r, mc_now_ns() + 5000000000ull), MC_OK);
    pthread_join(th, NULL);
    mc_te_table_finish_remove(&t, r, true);
    assert_int_equal(t.n, 0);
    assert_int_equal(mc_te_table_acquire(&t, 1010, 10, &b2), MC_ERR_OUT_OF_RANGE);
    mc_te_table_fini(&t);
}

static void test_frame_codec(void **state)
{
    mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                       .opcode = MC_TE_OP_WRITE, .id = 0x0102030405060708ull,
                       .addr = 0xfffffffffffffff0ull, .length = 12345, .status = -3001};
    uint8_t b[MC_TE_FRAME_HDR_SIZE];
    mc_te_frame_encode(&h, b);
    assert_int_equal(b[0], 0x4D); /* "MCTE" on the wire, little-endian */
    assert_int_equal(b[3], 0x45);
    assert_int_equal(b[8], 0x08);
    mc_te_frame_t d;
    assert_int_equal(mc_te_frame_decode(b, sizeof(b), &d), MC_OK);
    assert_memory_equal(&d, &h, sizeof(h));
    assert_int_equal(mc_te_frame_decode(b, sizeof(b) - 1, &d), MC_ERR_PROTOCOL);
    assert_int_equal(mc_te_frame_decode(NULL, 40, &d), MC_ERR_PROTOCOL);
    uint8_t c[MC_TE_FRAME_HDR_SIZE];
    memcpy(c, b, sizeof(c));
    c[0] ^= 1;
    assert_int_equal(mc_te_frame_decode(c, sizeof(c), &d), MC_ERR_PROTOCOL);
    memcpy(c, b, sizeof(c));
    c[4] = 2; /* version */
    assert_int_equal(mc_te_frame_decode(c, sizeof(c), &d), MC_ERR_PROTOCOL);
    const uint16_t bad_ops[] = {0, 9, 0x8000, 0x8009, 0x4001, 0x0101, 0x0010};
    for (size_t i = 0; i < sizeof(bad_ops) / sizeof(bad_ops[0]); i++) {
        h.opcode = bad_ops[i];
        mc_te_frame_encode(&h, c);
        assert_int_equal(mc_te_frame_decode(c, sizeof(c), &d), MC_ERR_PROTOCOL);
    }
    h.opcode = MC_TE_OP_READ | MC_TE_OP_RESPONSE;
    mc_te_frame_encode(&h, c);
    assert_int_equal(mc_te_frame_decode(c, sizeof(c), &d), MC_OK);
    h.aux = 1;
    mc_te_frame_encode(&h, c);
    assert_int_equal(mc_te_frame_decode(c, sizeof(c), &d), MC_ERR_PROTOCOL);
}

static void test_frame_check_request(void **state)
{
    mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION};
    uint64_t pl;
    h.opcode = MC_TE_OP_WRITE;
    h.length = MC_TE_FRAME_MAX_PAYLOAD;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_OK);
    assert_int_equal(pl, MC_TE_FRAME_MAX_PAYLOAD);
    h.length++;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_PROTOCOL);
    h.opcode = MC_TE_OP_READ;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_TOO_LARGE);
    assert_int_equal(pl, 0);
    h.opcode = MC_TE_OP_CMA_READ;
    h.length = 10;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_OK);
    assert_int_equal(pl, MC_TE_FRAME_CMA_PAYLOAD);
    h.opcode = MC_TE_OP_GET_DESC;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_INVALID_PARAMS);
    h.length = 0;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_OK);
    h.opcode = MC_TE_OP_READ | MC_TE_OP_RESPONSE;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_PROTOCOL);
    h.opcode = MC_TE_OP_WRITE;
    h.length = 100;
    h.status = 5;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_INVALID_PARAMS);
    assert_int_equal(pl, 100); /* the payload still has to be skipped */
    /* GRANT has no answer: only {addr 0, id 0, status 0, 1..cap bytes} is taken, else close */
    h.opcode = MC_TE_OP_GRANT;
    h.status = 0;
    h.length = MC_TE_FRAME_MAX_GRANT;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_OK);
    assert_int_equal(pl, MC_TE_FRAME_MAX_GRANT);
    h.length++;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_PROTOCOL);
    h.length = 0;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_PROTOCOL);
    h.length = 64;
    h.addr = 1;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_PROTOCOL);
    h.addr = 0;
    h.id = 7;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_PROTOCOL);
    h.id = 0;
    h.status = 1;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_PROTOCOL);
}

static mc_te_t *engine(void)
{
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                          .transfer_timeout_ms = 500};
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    return te;
}

/* NOTIFY body codec and the header checks of NOTIFY and PROBE. */
static void test_frame_notify(void **state)
{
    uint8_t body[64];
    size_t n = mc_te_notify_encode(body, "ab", 2, "x\0y", 3);
    assert_int_equal(n, MC_TE_NOTIFY_HDR + 5);
    const char *name, *msg;
    size_t nl, ml;
    assert_int_equal(mc_te_notify_parse(body, n, &name, &nl, &msg, &ml), MC_OK);
    assert_int_equal(nl, 2);
    assert_int_equal(ml, 3);
    assert_memory_equal(name, "ab", 2);
    assert_memory_equal(msg, "x\0y", 3);
    assert_int_equal(mc_te_notify_parse(body, n - 1, &name, &nl, &msg, &ml),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_notify_parse(body, n + 1, &name, &nl, &msg, &ml),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_notify_parse(body, 7, &name, &nl, &msg, &ml), MC_ERR_INVALID_PARAMS);
    n = mc_te_notify_encode(body, NULL, 0, NULL, 0); /* both empty: valid */
    assert_int_equal(mc_te_notify_parse(body, n, &name, &nl, &msg, &ml), MC_OK);
    assert_int_equal(nl + ml, 0);
    /* lengths that add up but exceed a cap */
    uint8_t *big = calloc(1, MC_TE_FRAME_MAX_NOTIFY + 16);
    mc_te_notify_encode(big, NULL, 0, NULL, 0);
    big[0] = (MC_TE_NOTIFY_NAME_MAX + 1) & 0xff;
    big[1] = (MC_TE_NOTIFY_NAME_MAX + 1) >> 8;
    assert_int_equal(mc_te_notify_parse(big, MC_TE_NOTIFY_HDR + MC_TE_NOTIFY_NAME_MAX + 1, &name,
                                        &nl, &msg, &ml),
                     MC_ERR_INVALID_PARAMS);
    free(big);
    /* lengths whose sum wraps 32 bits */
    memset(body, 0xff, 8);
    assert_int_equal(mc_te_notify_parse(body, 6, &name, &nl, &msg, &ml), MC_ERR_INVALID_PARAMS);

    mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                       .opcode = MC_TE_OP_NOTIFY, .length = MC_TE_FRAME_MAX_NOTIFY};
    uint64_t pl;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_OK);
    assert_int_equal(pl, MC_TE_FRAME_MAX_NOTIFY);
    h.length++; /* over the cap: answered, the payload skipped */
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_TOO_LARGE);
    assert_int_equal(pl, h.length);
    h.length = 7;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_INVALID_PARAMS);
    assert_int_equal(pl, 7);
    h.length = 8;
    h.addr = 1;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_INVALID_PARAMS);
    h.addr = 0;
    h.length = MC_TE_FRAME_MAX_PAYLOAD + 1; /* cannot be skipped: close */
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_PROTOCOL);
    h.opcode = MC_TE_OP_PROBE;
    h.length = 0;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_OK);
    assert_int_equal(pl, 0);
    h.length = 1;
    assert_int_equal(mc_te_frame_check_request(&h, &pl), MC_ERR_INVALID_PARAMS);
    assert_int_equal(pl, 0);
}

static void test_engine_create_names(void **state)
{
    mc_te_t *te = engine();
    uint16_t port = mc_te_rpc_port(te);
    assert_true(port >= 12300 && port <= 14300);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%u", port);
    assert_string_equal(mc_te_local_name(te), want);
    /* "host:0" also picks a port; a taken port is refused */
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1:0"};
    mc_te_t *te2;
    assert_int_equal(mc_te_create(&cfg, &te2), MC_OK);
    assert_int_not_equal(mc_te_rpc_port(te2), port);
    cfg.local_server_name = want;
    mc_te_t *te3;
    assert_int_not_equal(mc_te_create(&cfg, &te3), MC_OK);
    cfg.local_server_name = "127.0.0.1";
    cfg.protocol = "carrier-pigeon";
    assert_int_equal(mc_te_create(&cfg, &te3), MC_ERR_INVALID_PARAMS);
    cfg.protocol = NULL;
    cfg.metadata_uri = NULL;
    assert_int_equal(mc_te_create(&cfg, &te3), MC_ERR_INVALID_PARAMS);
    mc_te_destroy(te2);
    mc_te_destroy(te);
}

/* Tuning fields: zero is the default, the ends of each range are taken, one past is refused. */
static void test_engine_config_ranges(void **state)
{
    static const struct {
        const char *field;
        size_t off;
        bool is_signed;
        int64_t bad_lo, ok_lo, ok_hi, bad_hi;
    } f[] = {
#define F(name, s, blo, lo, hi, bhi) {#name, offsetof(mc_te_config_t, name), s, blo, lo, hi, bhi}
        F(slice_size, false, 4095, 4096, 64ll << 20, (64ll << 20) + 1),
        F(force_tcp, false, 2, 0, 1, 2),
        F(hugepages, true, -2, -1, 1, 2),
        F(tcp_stripe, false, 65, 1, 64, 65),
        F(tcp_socket_buf, false, 4095, 4096, 1ll << 30, (1ll << 30) + 1),
        F(busy_poll_us, true, -2, -1, 10000, 10001),
        F(metadata_timeout_ms, false, 99, 100, 600000, 600001),
#undef F
    };
    for (size_t i = 0; i < MC_ARRAY_LEN(f); i++) {
        int64_t vals[4] = {f[i].bad_lo, f[i].ok_lo, f[i].ok_hi, f[i].bad_hi};
        for (int k = 0; k < 4; k++) {
            mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE",
                                  .local_server_name = "127.0.0.1"};
            void *field = (char *)&cfg + f[i].off;
            if (f[i].is_signed)
                *(int32_t *)field = (int32_t)vals[k];
            else
                *(uint32_t *)field = (uint32_t)vals[k];
            mc_te_t *te = NULL;
            mc_status_t st = mc_te_create(&cfg, &te);
            mc_status_t want = k == 1 || k == 2 ? MC_OK : MC_ERR_INVALID_PARAMS;
            if (st != want)
                fail_msg("%s = %lld: %s", f[i].field, (long long)vals[k], mc_status_name(st));
            mc_te_destroy(te);
        }
    }
    mc_net_set_busy_poll_us(50); /* the cases above changed the process-wide budget */
}

/* free_hugepages of the pool of kb-kB pages (0 when unreadable). */
static long free_huge_pages(unsigned long kb)
{
    char path[96];
    snprintf(path, sizeof(path), "/sys/kernel/mm/hugepages/hugepages-%lukB/free_hugepages", kb);
    FILE *f = fopen(path, "r");
    long n = 0;
    if (f) {
        if (fscanf(f, "%ld", &n) != 1)
            n = 0;
        fclose(f);
    }
    return n;
}

/* hugepage_size: 0, 2 MiB and 1 GiB are taken, other sizes refused; a required size the host
 * has too few free pages of makes mc_te_alloc_shareable fail, never fall back to base pages. */
static void test_engine_required_hugepage_size(void **state)
{
    const uint64_t sizes[] = {0, 4096, 2u << 20, 4u << 20, 1u << 30};
    const bool ok[] = {true, false, true, false, true};
    for (size_t i = 0; i < MC_ARRAY_LEN(sizes); i++) {
        mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                              .hugepage_size = sizes[i]};
        mc_te_t *te = NULL;
        assert_int_equal(mc_te_create(&cfg, &te), ok[i] ? MC_OK : MC_ERR_INVALID_PARAMS);
        mc_te_destroy(te);
    }
    long free_1g = free_huge_pages(1048576);
    if (free_1g > 4) {
        print_message("skipped the failure path: %ld free 1 GiB pages\n", free_1g);
        return;
    }
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                          .hugepage_size = 1u << 30};
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    /* one page more than are free; 4 KiB pages would have served it */
    assert_null(mc_te_alloc_shareable(te, (size_t)(free_1g + 1) << 30));
    mc_te_destroy(te);
}

static void test_engine_register_local(void **state)
{
    mc_te_t *te = engine();
    enum { L = 1 << 16 };
    uint8_t *a = malloc(L), *b = malloc(L);
    uint8_t *sh = mc_te_alloc_shareable(te, L);
    assert_non_null(sh);
    /* 64 KiB is under one huge page: base pages; malloc'd memory is no shareable allocation */
    assert_int_equal(mc_te_shareable_page_size(te, sh + L - 1), (uint64_t)sysconf(_SC_PAGESIZE));
    assert_int_equal(mc_te_shareable_page_size(te, a), 0);
    for (int i = 0; i < L; i++)
        a[i] = (uint8_t)i;
    assert_int_equal(mc_te_register(te, a, L, NULL), MC_OK);
    assert_int_equal(mc_te_register(te, a + 10, 10, NULL), MC_ERR_SEGMENT_ALREADY_EXISTS);
    assert_int_equal(mc_te_register(te, NULL, 10, NULL), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_register(te, sh, L, "cpu:1"), MC_OK);
    /* the published descriptor lists both, the shareable one with its memfd */
    char *json;
    size_t len;
    assert_int_equal(mc_te_desc_json_copy(te, &json, &len), MC_OK);
    mc_segment_desc_t d;
    assert_int_equal(mc_segment_desc_from_json(json, len, &d), MC_OK);
    free(json);
    assert_int_equal(d.n_buffers, 2);
    ptrdiff_t k = mc_segment_desc_find(&d, (uint64_t)(uintptr_t)sh, L);
    assert_true(k >= 0);
    assert_true(d.buffers[k].shm_fd >= 0);
    assert_string_equal(d.buffers[k].location, "cpu:1");
    mc_segment_desc_free(&d);
    /* local segment: copies in-process under the same range checks */
    mc_te_segment_t self;
    assert_int_equal(mc_te_segment_open(te, mc_te_local_name(te), &self), MC_OK);
    uint64_t first;
    assert_int_equal(mc_te_segment_first_buffer(te, self, &first), MC_OK);
    mc_te_request_t r = {MC_TE_READ, b, self, (uint64_t)(uintptr_t)a, L};
    mc_te_xfer_status_t st;
    assert_int_equal(mc_te_transfer_sync(te, &r, 1, &st), MC_OK);
    assert_memory_equal(a, b, L);
    r.target_addr += 1;
    assert_int_equal(mc_te_transfer_sync(te, &r, 1, &st), MC_ERR_OUT_OF_RANGE);
    assert_int_equal(st.state, MC_TE_FAILED);
    /* unregister */
    assert_int_equal(mc_te_unregister(te, a + 1), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_te_unregister(te, a), MC_OK);
    assert_int_equal(mc_te_unregister(te, a), MC_ERR_OBJECT_NOT_FOUND);
    r.target_addr -= 1;
    assert_int_equal(mc_te_transfer_sync(te, &r, 1, &st), MC_ERR_OUT_OF_RANGE);
    /* batch API edges */
    mc_te_batch_t bt;
    assert_int_equal(mc_te_batch_alloc(te, 0, &bt), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_batch_alloc(te, MC_TE_MAX_BATCH + 1, &bt), MC_ERR_TOO_LARGE);
    assert_int_equal(mc_te_batch_alloc(te, 2, &bt), MC_OK);
    r.target_addr = (uint64_t)(uintptr_t)sh;
    assert_int_equal(mc_te_batch_submit(te, bt, &r, 1), MC_OK);
    mc_te_xfer_status_t sts[2];
    assert_int_equal(mc_te_batch_status_all(te, bt, sts, 2), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_batch_status_all(te, bt, sts, 1), MC_OK);
    assert_int_equal(sts[0].state, MC_TE_COMPLETED);
    assert_int_equal(sts[0].transferred, L);
    assert_int_equal(mc_te_batch_free(te, bt), MC_OK);
    assert_int_equal(mc_te_batch_status(te, bt, 0, &st), MC_ERR_INVALID_PARAMS);
    mc_te_free_shareable(te, sh); /* unregisters it first */
    assert_int_equal(mc_te_desc_json_copy(te, &json, &len), MC_OK);
    assert_null(strstr(json, "cpu:1"));
    free(json);
    mc_te_destroy(te);
    free(a);
    free(b);
}

/* A shareable buffer of len bytes of te, registered. */
static uint8_t *shareable_registered(mc_te_t *te, size_t len)
{
    uint8_t *sh = mc_te_alloc_shareable(te, len);
    assert_non_null(sh);
    assert_int_equal(mc_te_register(te, sh, len, NULL), MC_OK);
    return sh;
}

/* The owner's control memory as an initiator maps it, from the published transport_info
 * (*ti_p: that transport_info, heap, for the caller to free). Fills *slot and *gen of the
 * buffer registered at sh and *ctl; the caller munmaps ctl->base. */
static void shm_ctl_of(mc_te_t *te, const void *sh, mc_te_shm_ctl_t *ctl, int *slot,
                       uint64_t *gen, char **ti_p)
{
    char *json;
    size_t len;
    assert_int_equal(mc_te_desc_json_copy(te, &json, &len), MC_OK);
    mc_segment_desc_t d;
    assert_int_equal(mc_segment_desc_from_json(json, len, &d), MC_OK);
    free(json);
    assert_non_null(d.transport_info);
    json_error_t err;
    json_t *ti = json_loads(d.transport_info, 0, &err);
    assert_non_null(ti);
    int ctl_fd = (int)json_integer_value(json_object_get(ti, "shm_ctl_fd"));
    uint32_t slots = (uint32_t)json_integer_value(json_object_get(ti, "shm_ctl_slots"));
    uint32_t lanes = (uint32_t)json_integer_value(json_object_get(ti, "shm_ctl_lanes"));
    assert_int_equal(slots, MC_TE_SHM_SLOTS);
    assert_int_equal(lanes, MC_TE_SHM_LANES);
    json_t *slot0 = json_array_get(json_object_get(ti, "slots"), 0);
    assert_int_equal((uint64_t)json_integer_value(json_array_get(slot0, 0)),
                     (uint64_t)(uintptr_t)sh);
    *slot = (int)json_integer_value(json_array_get(slot0, 1));
    *gen = (uint64_t)json_integer_value(json_array_get(slot0, 2));
    json_decref(ti);
    if (ti_p) {
        *ti_p = d.transport_info;
        d.transport_info = NULL;
    }
    mc_segment_desc_free(&d);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)getpid(), ctl_fd);
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    size_t sz = mc_te_shm_ctl_size(slots, lanes);
    void *m = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(m != MAP_FAILED);
    mc_te_shm_ctl_locate(ctl, m, slots, lanes);
    assert_int_equal(ctl->hdr->magic, MC_TE_SHM_CTL_MAGIC);
}

/* The shm control protocol as an initiator sees it: a copy counted in flight in a lane held
 * by a live process (we) makes unregister return BUSY after the timeout, until it is
 * released. A lane whose holder is gone counts as drained and is reclaimed: a pid that is
 * alive but with another start time (a reused pid), also one left marked reclaiming by such
 * a process. Same process, but only through what the descriptor publishes. */
static void test_shm_ctl_unregister_busy(void **state)
{
    mc_te_t *te = engine(); /* transfer timeout 500 ms */
    enum { L = 1 << 16 };
    uint8_t *sh = shareable_registered(te, L);
    mc_te_shm_ctl_t ctl;
    int slot;
    uint64_t gen;
    shm_ctl_of(te, sh, &ctl, &slot, &gen, NULL);
    _Atomic uint64_t *st = &ctl.slot[slot].state;
    assert_int_equal(atomic_load(st), (gen << 1) | 1); /* registered */
    uint64_t self = mc_te_shm_self_id();
    assert_int_not_equal(self, 0);
    assert_int_equal(mc_te_shm_holder_pid(self), getpid());
    const uint32_t k = 5;
    _Atomic uint32_t *inflight = &mc_te_shm_lane_row(&ctl, k)[slot];
    atomic_store(&ctl.lane[k], self); /* we hold lane k and are copying */
    atomic_fetch_add(inflight, 1);
    uint64_t t0 = mc_now_ns();
    assert_int_equal(mc_te_unregister(te, sh), MC_ERR_BUSY);
    assert_true(mc_now_ns() - t0 >= 450000000ull);
    assert_int_equal(atomic_load(st), (gen << 1) | 1); /* restored: still registered */
    assert_int_equal(atomic_load(&ctl.lane[k]), self);  /* a live holder's lane stays */
    atomic_fetch_sub(inflight, 1);
    assert_int_equal(mc_te_unregister(te, sh), MC_OK);
    assert_int_equal(atomic_load(st), gen << 1); /* initiators now see it unregistered */
    atomic_store(&ctl.lane[k], 0);
    /* our pid with another start time: the process that held the lane is gone */
    uint64_t forged[2] = {self + (1ull << MC_TE_SHM_PID_BITS),
                          (self + (1ull << MC_TE_SHM_PID_BITS)) | MC_TE_SHM_LANE_RECLAIMING};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(mc_te_register(te, sh, L, NULL), MC_OK);
        shm_ctl_of(te, sh, &ctl, &slot, &gen, NULL);
        inflight = &mc_te_shm_lane_row(&ctl, k)[slot];
        atomic_store(&ctl.lane[k], forged[i]);
        atomic_store(inflight, 1);
        assert_int_equal(mc_te_unregister(te, sh), MC_OK);
        assert_int_equal(atomic_load(&ctl.lane[k]), 0); /* reclaimed: free, counts zeroed */
        assert_int_equal(atomic_load(inflight), 0);
        munmap(ctl.base, ctl.size);
    }
    mc_te_free_shareable(te, sh);
    mc_te_destroy(te);
}

/* Who counts as a lane's holder: we (alive), our pid with another start time (gone), a
 * child that exited but is not reaped (a zombie: gone), a reaped one (gone). */
static void test_shm_lane_holders(void **state)
{
    uint64_t self = mc_te_shm_self_id();
    assert_int_not_equal(self, 0);
    assert_false(mc_te_shm_holder_gone(self));
    assert_false(mc_te_shm_holder_gone(self | MC_TE_SHM_LANE_RECLAIMING));
    assert_true(mc_te_shm_holder_gone(self + (1ull << MC_TE_SHM_PID_BITS)));
    assert_true(mc_te_shm_holder_gone(0));
    int to_child[2], from_child[2];
    assert_int_equal(pipe(to_child), 0);
    assert_int_equal(pipe(from_child), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(to_child[1]);
        uint64_t id = mc_te_shm_self_id();
        char c;
        if (write(from_child[1], &id, sizeof(id)) != sizeof(id) || read(to_child[0], &c, 1) < 0)
            _exit(1);
        _exit(0); /* when we close our end */
    }
    uint64_t id = 0;
    assert_int_equal(read(from_child[0], &id, sizeof(id)), sizeof(id));
    assert_int_equal(mc_te_shm_holder_pid(id), pid);
    assert_false(mc_te_shm_holder_gone(id));
    close(to_child[1]);
    siginfo_t si;
    assert_int_equal(waitid(P_PID, (id_t)pid, &si, WEXITED | WNOWAIT), 0); /* a zombie now */
    assert_true(mc_te_shm_holder_gone(id));
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(mc_te_shm_holder_gone(id));
    close(to_child[0]);
    close(from_child[0]);
    close(from_child[1]);
}

/* transport_info and control memory come from the peer: a layout we do not know, or numbers
 * past our limits, make can_reach refuse (the engine then takes tcp), never a read out of
 * bounds. */
static void test_shm_ctl_validation(void **state)
{
    mc_te_t *te = engine();
    enum { L = 1 << 16 };
    uint8_t *sh = shareable_registered(te, L);
    mc_te_shm_ctl_t ctl;
    int slot;
    uint64_t gen;
    char *ti;
    shm_ctl_of(te, sh, &ctl, &slot, &gen, &ti);
    munmap(ctl.base, ctl.size);
    mc_segment_desc_t d = {.pid = getpid(), .transport_info = ti};
    assert_true(mc_te_shm_ops.can_reach(NULL, &d));
    static const struct {
        const char *key;
        json_int_t v; /* -1: key removed */
    } bad[] = {{"shm_ctl_lanes", -1},   {"shm_ctl_lanes", 0}, {"shm_ctl_lanes", MC_TE_SHM_LANES + 1},
               {"shm_ctl_lanes", 32},   /* fits, but the header says 64 */
               {"shm_ctl_slots", -1},   {"shm_ctl_slots", MC_TE_SHM_SLOTS + 1},
               {"shm_ctl_slots", 1024}, {"shm_ctl_fd", 0} /* stdin: not our memfd */};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        json_error_t err;
        json_t *o = json_loads(ti, 0, &err);
        assert_non_null(o);
        if (bad[i].v < 0)
            json_object_del(o, bad[i].key);
        else
            json_object_set_new(o, bad[i].key, json_integer(bad[i].v));
        d.transport_info = json_dumps(o, JSON_COMPACT);
        json_decref(o);
        assert_false(mc_te_shm_ops.can_reach(NULL, &d));
        free(d.transport_info);
    }
    free(ti);
    mc_te_free_shareable(te, sh);
    mc_te_destroy(te);
}

static void drain_expect(mc_te_t *te, size_t max, size_t want_n, const char *name0,
                         const char *msg0)
{
    mc_te_notify_t *v = NULL;
    size_t n = 99;
    assert_int_equal(mc_te_notify_drain(te, max, &v, &n), MC_OK);
    assert_int_equal(n, want_n);
    if (want_n == 0) {
        assert_null(v);
        return;
    }
    assert_string_equal(v[0].name, name0);
    assert_string_equal(v[0].msg, msg0);
    mc_te_notify_free(v);
}

/* Two engines in one process: notifications travel over tcp control frames (the data of these
 * same-host peers would go over shm), are drained in order, binary-safe; caps; the probe. */
static void test_engine_notify(void **state)
{
    mc_te_t *a = engine(), *b = engine();
    mc_te_segment_t sb, sa;
    assert_int_equal(mc_te_segment_open(a, mc_te_local_name(b), &sb), MC_OK);
    assert_int_equal(mc_te_segment_open(a, mc_te_local_name(a), &sa), MC_OK);
    drain_expect(b, 0, 0, NULL, NULL);
    assert_int_equal(mc_te_notify_send(a, sb, "n1", 2, "m1", 2), MC_OK);
    assert_int_equal(mc_te_notify_send(a, sb, "n2", 2, "with\0nul", 8), MC_OK);
    assert_int_equal(mc_te_notify_send(a, sb, NULL, 0, NULL, 0), MC_OK);
    mc_te_notify_t *v;
    size_t n;
    assert_int_equal(mc_te_notify_drain(b, 0, &v, &n), MC_OK);
    assert_int_equal(n, 3);
    assert_string_equal(v[0].name, "n1");
    assert_string_equal(v[0].msg, "m1");
    assert_int_equal(v[1].msg_len, 8);
    assert_memory_equal(v[1].msg, "with\0nul", 9);
    assert_int_equal(v[2].name_len + v[2].msg_len, 0);
    assert_string_equal(v[2].name, "");
    mc_te_notify_free(v);
    drain_expect(b, 0, 0, NULL, NULL);
    drain_expect(a, 0, 0, NULL, NULL);

    /* the largest allowed, one byte more refused locally */
    char *big = calloc(1, MC_TE_NOTIFY_MSG_MAX + 1);
    memset(big, 'x', MC_TE_NOTIFY_MSG_MAX);
    assert_int_equal(mc_te_notify_send(a, sb, big, MC_TE_NOTIFY_NAME_MAX, big,
                                       MC_TE_NOTIFY_MSG_MAX), MC_OK);
    assert_int_equal(mc_te_notify_send(a, sb, big, 1, big, MC_TE_NOTIFY_MSG_MAX + 1),
                     MC_ERR_TOO_LARGE);
    assert_int_equal(mc_te_notify_send(a, sb, big, MC_TE_NOTIFY_NAME_MAX + 1, "", 0),
                     MC_ERR_TOO_LARGE);
    assert_int_equal(mc_te_notify_drain(b, 0, &v, &n), MC_OK);
    assert_int_equal(n, 1);
    assert_int_equal(v[0].name_len, MC_TE_NOTIFY_NAME_MAX);
    assert_int_equal(v[0].msg_len, MC_TE_NOTIFY_MSG_MAX);
    mc_te_notify_free(v);
    free(big);

    /* to our own segment */
    assert_int_equal(mc_te_notify_send(a, sa, "self", 4, "m", 1), MC_OK);
    drain_expect(a, 0, 1, "self", "m");
    assert_int_equal(mc_te_notify_send(a, 12345, "x", 1, "y", 1), MC_ERR_INVALID_PARAMS);

    /* probe: live, own, dead (refused at once), not host:port */
    assert_int_equal(mc_te_probe(a, mc_te_local_name(b), 0), MC_OK);
    assert_int_equal(mc_te_probe(a, mc_te_local_name(a), 0), MC_OK);
    char dead[64];
    snprintf(dead, sizeof(dead), "127.0.0.1:%u", mc_te_rpc_port(b));
    mc_te_destroy(b);
    uint64_t t0 = mc_now_ns();
    assert_true(mc_te_probe(a, dead, 300) < 0);
    assert_true(mc_now_ns() - t0 < 1000000000ull);
    assert_true(mc_te_notify_send(a, sb, "n", 1, "m", 1) < 0);
    assert_int_equal(mc_te_probe(a, "nohostport", 0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_probe(a, "127.0.0.1:0", 0), MC_ERR_INVALID_PARAMS);
    mc_te_destroy(a);
}

/* The queue is capped: a full queue refuses (BUSY to the sender, counted), keeps what it holds
 * in order, and accepts again once drained. */
static void test_engine_notify_queue_cap(void **state)
{
    mc_te_t *a = engine(), *b = engine();
    mc_te_segment_t sb, self;
    assert_int_equal(mc_te_segment_open(a, mc_te_local_name(b), &sb), MC_OK);
    assert_int_equal(mc_te_segment_open(b, mc_te_local_name(b), &self), MC_OK);
    char name[32];
    for (int i = 0; i < MC_TE_NOTIFY_QUEUE_MAX; i++) {
        int l = snprintf(name, sizeof(name), "n%d", i);
        assert_int_equal(mc_te_notify_send(b, self, name, (size_t)l, "m", 1), MC_OK);
    }
    assert_int_equal(mc_te_notify_send(b, self, "over", 4, "m", 1), MC_ERR_BUSY);
    assert_int_equal(mc_te_notify_send(a, sb, "over", 4, "m", 1), MC_ERR_BUSY); /* remote too */
    mc_te_notify_stats_t st;
    mc_te_notify_stats(b, &st);
    assert_int_equal(st.queued, MC_TE_NOTIFY_QUEUE_MAX);
    assert_int_equal(st.received, MC_TE_NOTIFY_QUEUE_MAX);
    assert_int_equal(st.refused_full, 2);
    assert_int_equal(st.refused_bad, 0);
    mc_te_notify_t *v;
    size_t n;
    assert_int_equal(mc_te_notify_drain(b, 10, &v, &n), MC_OK);
    assert_int_equal(n, 10);
    assert_string_equal(v[0].name, "n0");
    assert_string_equal(v[9].name, "n9");
    mc_te_notify_free(v);
    assert_int_equal(mc_te_notify_send(a, sb, "after", 5, "m", 1), MC_OK);
    assert_int_equal(mc_te_notify_drain(b, 0, &v, &n), MC_OK);
    assert_int_equal(n, MC_TE_NOTIFY_QUEUE_MAX - 10 + 1);
    assert_string_equal(v[0].name, "n10");
    assert_string_equal(v[n - 1].name, "after");
    mc_te_notify_free(v);
    mc_te_notify_stats(b, &st);
    assert_int_equal(st.queued, 0);
    mc_te_destroy(a);
    mc_te_destroy(b);
}

static void raw_send(int fd, uint16_t op, uint64_t id, uint64_t addr, uint64_t len,
                     const void *body, size_t blen)
{
    uint8_t hdr[MC_TE_FRAME_HDR_SIZE];
    mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                       .opcode = op, .id = id, .addr = addr, .length = len};
    mc_te_frame_encode(&h, hdr);
    uint64_t dl = mc_now_ns() + 2000000000ull;
    assert_int_equal(mc_net_send_all(fd, hdr, sizeof(hdr), dl), MC_OK);
    if (blen)
        assert_int_equal(mc_net_send_all(fd, body, blen, dl), MC_OK);
}

static mc_status_t raw_answer(int fd, uint16_t op, uint64_t id)
{
    uint8_t hdr[MC_TE_FRAME_HDR_SIZE];
    assert_int_equal(mc_net_recv_all(fd, hdr, sizeof(hdr), mc_now_ns() + 2000000000ull), MC_OK);
    mc_te_frame_t h;
    assert_int_equal(mc_te_frame_decode(hdr, sizeof(hdr), &h), MC_OK);
    assert_int_equal(h.opcode, op | MC_TE_OP_RESPONSE);
    assert_int_equal(h.id, id);
    assert_int_equal(h.length, 0);
    return (mc_status_t)h.status;
}

/* Malformed NOTIFY frames are answered with an error and counted; the connection keeps
 * serving the requests that follow (pipelined on the same connection). */
static void test_engine_notify_malformed(void **state)
{
    mc_te_t *b = engine();
    int fd;
    assert_int_equal(mc_auth_connect("127.0.0.1", mc_te_rpc_port(b), 2000, NULL, &fd), MC_OK);
    uint8_t body[64];
    size_t n = mc_te_notify_encode(body, "nm", 2, "msg", 3);
    body[0] = 9; /* name_len does not match the frame */
    raw_send(fd, MC_TE_OP_NOTIFY, 1, 0, n, body, n);
    raw_send(fd, MC_TE_OP_NOTIFY, 2, 0, 4, "abcd", 4);   /* shorter than its own header */
    raw_send(fd, MC_TE_OP_NOTIFY, 3, 7, n, body, n);     /* addr must be 0 */
    size_t big = MC_TE_FRAME_MAX_NOTIFY + 100;           /* over the cap: body skipped */
    uint8_t *junk = calloc(1, big);
    raw_send(fd, MC_TE_OP_NOTIFY, 4, 0, big, junk, big);
    free(junk);
    raw_send(fd, MC_TE_OP_PROBE, 5, 0, 0, NULL, 0);
    n = mc_te_notify_encode(body, "ok", 2, "fine", 4);
    raw_send(fd, MC_TE_OP_NOTIFY, 6, 0, n, body, n);
    assert_int_equal(raw_answer(fd, MC_TE_OP_NOTIFY, 1), MC_ERR_INVALID_PARAMS);
    assert_int_equal(raw_answer(fd, MC_TE_OP_NOTIFY, 2), MC_ERR_INVALID_PARAMS);
    assert_int_equal(raw_answer(fd, MC_TE_OP_NOTIFY, 3), MC_ERR_INVALID_PARAMS);
    assert_int_equal(raw_answer(fd, MC_TE_OP_NOTIFY, 4), MC_ERR_TOO_LARGE);
    assert_int_equal(raw_answer(fd, MC_TE_OP_PROBE, 5), MC_OK);
    assert_int_equal(raw_answer(fd, MC_TE_OP_NOTIFY, 6), MC_OK);
    close(fd);
    drain_expect(b, 0, 1, "ok", "fine");
    mc_te_notify_stats_t st;
    mc_te_notify_stats(b, &st);
    assert_int_equal(st.refused_bad, 4);
    assert_int_equal(st.received, 1);
    mc_te_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_insert_overlap),
        cmocka_unit_test(test_table_acquire_ranges),
        cmocka_unit_test(test_table_remove_drain),
        cmocka_unit_test(test_frame_codec),
        cmocka_unit_test(test_frame_check_request),
        cmocka_unit_test(test_frame_notify),
        cmocka_unit_test(test_engine_create_names),
        cmocka_unit_test(test_engine_config_ranges),
        cmocka_unit_test(test_engine_required_hugepage_size),
        cmocka_unit_test(test_engine_register_local),
        cmocka_unit_test(test_shm_ctl_unregister_busy),
        cmocka_unit_test(test_shm_lane_holders),
        cmocka_unit_test(test_shm_ctl_validation),
        cmocka_unit_test(test_engine_notify),
        cmocka_unit_test(test_engine_notify_queue_cap),
        cmocka_unit_test(test_engine_notify_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
