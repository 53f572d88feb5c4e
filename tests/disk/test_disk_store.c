/* Unit tests of the disk tier's storage engine (disk/disk_store.h): round trips of many sizes
 * through every read path (direct into aligned memory, registered buffers, store-owned buffers
 * for unaligned memory and deadlines, batches), a batch started on one thread and finished on
 * another (mc_disk_store_read_start / _finish), refusals (duplicates, bad keys and checksums,
 * small buffers), restart recovery (objects, tombstones, torn tails, corrupted records),
 * corrupted value bytes (an error, never data), watermark eviction (FIFO, LRU, none) with the
 * eviction callback, the second chance of read objects (re-appended before their bucket is
 * dropped, found once by a restart, also with the old bucket's file left behind), reads abandoned at their deadline (the caller's buffer is never written
 * afterwards; a bucket file outlives the reads in flight on it), and the configuration and
 * environment checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/time.h"
#include "disk/disk_format.h"
#include "disk_test.h"
#include "support/test_util.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[256];

static int setup(void **state)
{
    (void)state;
    return mt_tmpdir(g_dir, sizeof(g_dir));
}

static int teardown(void **state)
{
    (void)state;
    mt_rmdir(g_dir);
    return 0;
}

static mc_disk_store_t *open_store(const mc_disk_config_t *c)
{
    mc_disk_store_t *s = NULL;
    assert_int_equal(mc_disk_store_open(g_dir, c, &s), MC_OK);
    return s;
}

/* around the engine's pieces: 1 MiB, and a last piece of 256 KiB of its own past 512 KiB */
static const size_t sizes[] = {0,     1,         100,       4095,          4096,
                               4097,  65536,     512u << 10, (512u << 10) + 1, 1u << 20,
                               (1u << 20) + 3, 4u << 20, (9u << 20) + 17};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void test_round_trip(void **state)
{
    (void)state;
    mc_disk_config_t c;
    dt_config(&c);
    mc_disk_store_t *s = open_store(&c);
    for (size_t i = 0; i < NSIZES; i++)
        assert_int_equal(dt_put(s, NULL, i, sizes[i]), MC_OK);
    for (size_t i = 0; i < NSIZES; i++) {
        size_t len = 0;
        assert_int_equal(dt_get(s, NULL, i, 0, &len), MC_OK); /* direct */
        assert_int_equal(len, sizes[i]);
        assert_int_equal(dt_get(s, NULL, i, mc_now_ns() + 10000000000ull, &len), MC_OK);
    }
    /* unaligned destination of exactly the value's size: through a store buffer */
    for (size_t i = 0; i < NSIZES; i++) {
        char k[64];
        dt_key(k, sizeof(k), i);
        uint8_t *raw = malloc(sizes[i] + 1);
        mc_disk_read_t r = {.key = k, .key_len = strlen(k), .buf = raw + 1, .cap = sizes[i]};
        assert_int_equal(mc_disk_store_read_batch(s, &r, 1, 0), MC_OK);
        assert_int_equal(r.status, MC_OK);
        uint8_t *want = dt_value(sizes[i], i);
        assert_memory_equal(raw + 1, want, sizes[i]);
        free(want);
        free(raw);
    }
    /* one batch of everything, into a registered buffer */
    size_t total = 0;
    for (size_t i = 0; i < NSIZES; i++)
        total += mc_disk_round(sizes[i]);
    uint8_t *reg = aligned_alloc(4096, total);
    assert_int_equal(mc_disk_store_register_buffer(s, reg, total), MC_OK);
    mc_disk_read_t rs[NSIZES];
    char keys[NSIZES][64];
    size_t off = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        dt_key(keys[i], sizeof(keys[i]), i);
        rs[i] = (mc_disk_read_t){.key = keys[i], .key_len = strlen(keys[i]), .buf = reg + off,
                                 .cap = mc_disk_round(sizes[i])};
        off += mc_disk_round(sizes[i]);
    }
    assert_int_equal(mc_disk_store_read_batch(s, rs, NSIZES, 0), MC_OK);
    off = 0;
    for (size_t i = 0; i < NSIZES; i++) {
        assert_int_equal(rs[i].status, MC_OK);
        assert_int_equal(rs[i].len, sizes[i]);
        uint8_t *want = dt_value(sizes[i], i);
        assert_memory_equal(reg + off, want, sizes[i]);
        free(want);
        off += mc_disk_round(sizes[i]);
    }
    assert_int_equal(mc_disk_store_unregister_buffer(s, reg), MC_OK);
    assert_int_equal(mc_disk_store_unregister_buffer(s, reg), MC_ERR_INVALID_PARAMS);
    free(reg);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.objects, NSIZES);
    assert_int_equal(st.puts, NSIZES);
    assert_int_equal(st.read_errors, 0);
    assert_true(st.direct_io);
    uint64_t hist = 0;
    for (int i = 0; i < MC_DISK_LAT_BUCKETS; i++)
        hist += st.read_lat_us[i];
    assert_int_equal(hist, st.reads);
    mc_disk_store_close(s);
}

static void test_refusals(void **state)
{
    (void)state;
    mc_disk_store_t *s = open_store(NULL);
    uint8_t v[100];
    dt_fill(v, sizeof(v), 1);
    uint64_t h = mc_hash64(v, sizeof(v));
    assert_int_equal(mc_disk_store_put(s, NULL, "a", 1, v, sizeof(v), h), MC_OK);
    assert_int_equal(mc_disk_store_put(s, NULL, "a", 1, v, sizeof(v), h), MC_ERR_OBJECT_ALREADY_EXISTS);
    assert_int_equal(mc_disk_store_put(s, "default", "a", 1, v, sizeof(v), h),
                     MC_ERR_OBJECT_ALREADY_EXISTS); /* NULL tenant is "default" */
    assert_int_equal(mc_disk_store_put(s, "t1", "a", 1, v, sizeof(v), h), MC_OK);
    assert_int_equal(mc_disk_store_put(s, NULL, "b", 1, v, sizeof(v), h + 1), MC_ERR_CHECKSUM);
    assert_int_equal(mc_disk_store_put(s, NULL, "", 0, v, sizeof(v), h), MC_ERR_INVALID_KEY);
    assert_int_equal(mc_disk_store_put(s, "_sys", "a", 1, v, sizeof(v), h), MC_ERR_INVALID_KEY);
    char big[MC_DISK_USER_KEY_MAX + 1];
    memset(big, 'k', sizeof(big));
    assert_int_equal(mc_disk_store_put(s, NULL, big, sizeof(big), v, sizeof(v), h), MC_ERR_INVALID_KEY);
    assert_int_equal(mc_disk_store_put(s, NULL, big, MC_DISK_USER_KEY_MAX, v, sizeof(v), h), MC_OK);
    mc_disk_loc_t loc;
    assert_int_equal(mc_disk_store_lookup(s, NULL, big, MC_DISK_USER_KEY_MAX, &loc), MC_OK);
    assert_int_equal(loc.key_size, 8 + MC_DISK_USER_KEY_MAX);
    assert_int_equal(loc.data_size, sizeof(v));
    /* reads: small buffer, missing key, other tenant */
    uint8_t out[100];
    mc_disk_read_t r[3] = {{.key = "a", .key_len = 1, .buf = out, .cap = 99},
                           {.key = "zz", .key_len = 2, .buf = out, .cap = 100},
                           {.tenant = "t2", .key = "a", .key_len = 1, .buf = out, .cap = 100}};
    assert_int_equal(mc_disk_store_read_batch(s, r, 3, 0), MC_OK);
    assert_int_equal(r[0].status, MC_ERR_BUFFER_OVERFLOW);
    assert_int_equal(r[0].len, 100);
    assert_int_equal(r[1].status, MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(r[2].status, MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(mc_disk_store_read_batch(s, NULL, 1, 0), MC_ERR_INVALID_PARAMS);
    /* a second store on the same directory */
    mc_disk_store_t *s2 = NULL;
    assert_int_equal(mc_disk_store_open(g_dir, NULL, &s2), MC_ERR_BUSY);
    assert_null(s2);
    mc_disk_store_close(s);
    /* the longest key (an 8 KiB header block) and both tenants come back after a restart */
    s = open_store(NULL);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.recovered_objects, 3);
    assert_int_equal(mc_disk_store_lookup(s, NULL, big, MC_DISK_USER_KEY_MAX, &loc), MC_OK);
    mc_disk_read_t rb = {.key = big, .key_len = MC_DISK_USER_KEY_MAX, .buf = out, .cap = 100};
    assert_int_equal(mc_disk_store_read_batch(s, &rb, 1, 0), MC_OK);
    assert_int_equal(rb.status, MC_OK);
    assert_memory_equal(out, v, sizeof(v));
    assert_int_equal(mc_disk_store_lookup(s, "t1", "a", 1, &loc), MC_OK);
    mc_disk_store_close(s);
}

typedef struct seen {
    size_t n;
    size_t tenant_t1;
} seen_t;

static void count_obj(const mc_disk_obj_t *o, void *arg)
{
    seen_t *s = arg;
    s->n++;
    if (o->tenant_len == 2 && memcmp(o->tenant, "t1", 2) == 0)
        s->tenant_t1++;
}

static void test_restart(void **state)
{
    (void)state;
    mc_disk_config_t c;
    dt_config(&c);
    c.bucket_keys_limit = 100;
    mc_disk_store_t *s = open_store(&c);
    const uint64_t n = 450;
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(dt_put(s, i % 3 ? NULL : "t1", i, 1000 + (size_t)i * 37), MC_OK);
    for (uint64_t i = 0; i < n; i += 10) { /* tombstones must survive the restart */
        char k[64];
        dt_key(k, sizeof(k), i);
        assert_int_equal(mc_disk_store_remove(s, i % 3 ? NULL : "t1", k, strlen(k)), MC_OK);
        assert_int_equal(mc_disk_store_remove(s, i % 3 ? NULL : "t1", k, strlen(k)),
                         MC_ERR_OBJECT_NOT_FOUND);
    }
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.objects, n - n / 10);
    assert_true(st.buckets >= 4);
    uint64_t bytes = st.bytes_on_disk;
    mc_disk_store_close(s);

    for (int round = 0; round < 2; round++) {
        s = open_store(&c);
        mc_disk_store_stats(s, &st);
        assert_int_equal(st.recovered_objects, n - n / 10);
        assert_int_equal(st.recovered_corrupt, 0);
        assert_int_equal(st.recovered_torn, 0);
        assert_int_equal(st.bytes_on_disk, bytes);
        seen_t seen = {0};
        assert_int_equal(mc_disk_store_foreach(s, count_obj, &seen), n - n / 10);
        assert_int_equal(seen.n, n - n / 10);
        assert_int_equal(seen.tenant_t1, n / 3 - n / 30);
        for (uint64_t i = 0; i < n; i++)
            assert_int_equal(dt_get(s, i % 3 ? NULL : "t1", i, 0, NULL),
                             i % 10 ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
        mc_disk_store_close(s);
    }
    /* a put after the restart goes to a new bucket and is recovered too */
    s = open_store(&c);
    assert_int_equal(dt_put(s, NULL, 10, 5000), MC_OK); /* key 10 was removed: may come back */
    mc_disk_store_close(s);
    s = open_store(&c);
    assert_int_equal(dt_get(s, NULL, 10, 0, NULL), MC_OK);
    mc_disk_store_close(s);
}

/* Path of the bucket file of (tenant, key i) and the offset of its record. */
static void where(mc_disk_store_t *s, uint64_t i, char *path, size_t cap, mc_disk_loc_t *loc)
{
    char k[64];
    dt_key(k, sizeof(k), i);
    assert_int_equal(mc_disk_store_lookup(s, NULL, k, strlen(k), loc), MC_OK);
    snprintf(path, cap, "%s/%llu.bucket", g_dir, (unsigned long long)loc->bucket_id);
}

static void flip_byte(const char *path, uint64_t off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t b;
    assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
    b ^= 0x20;
    assert_int_equal(pwrite(fd, &b, 1, (off_t)off), 1);
    close(fd);
}

static void test_corrupt_value(void **state)
{
    (void)state;
    mc_disk_store_t *s = open_store(NULL);
    for (uint64_t i = 0; i < 5; i++)
        assert_int_equal(dt_put(s, NULL, i, 100000), MC_OK);
    char path[512];
    mc_disk_loc_t loc;
    where(s, 2, path, sizeof(path), &loc);
    mc_disk_store_close(s);
    flip_byte(path, loc.offset + mc_disk_hdr_len(loc.key_size) + 77777);
    s = open_store(NULL);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.recovered_objects, 5); /* the header is fine: found at the scan */
    assert_int_equal(dt_get(s, NULL, 2, 0, NULL), MC_ERR_CHECKSUM);
    assert_int_equal(dt_get(s, NULL, 2, 0, NULL), MC_ERR_OBJECT_NOT_FOUND); /* dropped */
    for (uint64_t i = 0; i < 5; i++)
        if (i != 2)
            assert_int_equal(dt_get(s, NULL, i, mc_now_ns() + 5000000000ull, NULL), MC_OK);
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.checksum_failures, 1);
    assert_int_equal(st.objects, 4);
    /* also while open, through the deadline (store buffer) path */
    where(s, 3, path, sizeof(path), &loc);
    flip_byte(path, loc.offset + mc_disk_hdr_len(loc.key_size));
    assert_int_equal(dt_get(s, NULL, 3, mc_now_ns() + 5000000000ull, NULL), MC_ERR_CHECKSUM);
    mc_disk_store_close(s);
}

/* What the progress callback reported for one read. */
typedef struct prog {
    size_t calls, first_ready, last_ready, done_calls, done_ready;
    mc_status_t done_status;
    bool ordered;  /* every report extends the last and lies within the value */
    uint8_t *buf;  /* the read's buf: its prefix is checked against the value at each report */
    const uint8_t *want;
} prog_t;

static void on_progress(mc_disk_read_t *q, size_t ready, bool done)
{
    prog_t *p = q->arg;
    p->calls++;
    if (done) {
        p->done_calls++;
        p->done_ready = ready;
        p->done_status = q->status;
        return;
    }
    p->ordered = p->ordered && ready > p->last_ready && ready <= q->len &&
                 memcmp(p->buf, p->want, ready) == 0;
    if (!p->first_ready)
        p->first_ready = ready;
    p->last_ready = ready;
}

/* A read reports each landed piece in order (the bytes are in buf when reported): 1 MiB
 * pieces, then its last 256 KiB (of the 4 KiB-rounded length with O_DIRECT) as a piece of its
 * own; then its verdict: OK with the whole length, or CHECKSUM for a byte flipped in its last
 * piece (reported after the earlier pieces: a prefix is never a verdict). A read straight into
 * buf reports each piece as it lands, before hashing it, so the whole length is reported
 * before the verdict; a read through the store's buffer (a deadline without late_ok) reports
 * a piece once it is hashed and copied, the last one with the verdict. With late_ok and a
 * deadline the bytes still arrive whole. */
static void test_progress(void **state)
{
    (void)state;
    mc_disk_store_t *s = open_store(NULL);
    size_t len = (3u << 20) + 5000;
    assert_int_equal(dt_put(s, NULL, 0, len), MC_OK);
    assert_int_equal(dt_put(s, NULL, 1, len), MC_OK);
    uint8_t *buf = aligned_alloc(4096, mc_disk_round(len)), *want = dt_value(len, 0);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    /* the prefix before the last piece: 2 MiB + 768 KiB (+ the rounding) */
    size_t before_last = (st.direct_io ? mc_disk_round(len) : len) - (256u << 10);
    for (int mode = 0; mode < 3; mode++) { /* direct, deadline, deadline with late_ok */
        char k[64];
        dt_key(k, sizeof(k), 0);
        memset(buf, 0, len);
        prog_t p = {.ordered = true, .buf = buf, .want = want};
        mc_disk_read_t r = {.key = k, .key_len = strlen(k), .buf = buf,
                            .cap = mc_disk_round(len), .late_ok = mode == 2,
                            .progress = on_progress, .arg = &p};
        assert_int_equal(
            mc_disk_store_read_batch(s, &r, 1, mode ? mc_now_ns() + 10000000000ull : 0), MC_OK);
        assert_int_equal(r.status, MC_OK);
        assert_true(p.ordered);
        if (mode == 1) { /* bounced: pieces 1..3 reported once copied, then the verdict */
            assert_int_equal(p.last_ready, before_last);
            assert_int_equal(p.calls, 4);
        } else { /* direct: every piece as it lands (completions reaped together report
                    together), the last one before the verdict */
            assert_int_equal(p.last_ready, len);
            assert_true(p.calls >= 2 && p.calls <= 5);
        }
        assert_int_equal(p.done_calls, 1);
        assert_int_equal(p.done_ready, len);
        assert_int_equal(p.done_status, MC_OK);
        assert_memory_equal(buf, want, len);
    }
    free(want);
    /* a flipped byte in the last piece: every piece is reported as it landed (the flipped
     * byte too: progress is not a verdict), the verdict fails */
    char path[512];
    mc_disk_loc_t loc;
    where(s, 1, path, sizeof(path), &loc);
    flip_byte(path, loc.offset + mc_disk_hdr_len(loc.key_size) + (3u << 20) + 10);
    want = dt_value(len, 1);
    want[(3u << 20) + 10] ^= 0x20; /* what landed */
    char k[64];
    dt_key(k, sizeof(k), 1);
    prog_t p = {.ordered = true, .buf = buf, .want = want};
    mc_disk_read_t r = {.key = k, .key_len = strlen(k), .buf = buf, .cap = mc_disk_round(len),
                        .late_ok = true, .progress = on_progress, .arg = &p};
    assert_int_equal(mc_disk_store_read_batch(s, &r, 1, mc_now_ns() + 10000000000ull), MC_OK);
    assert_int_equal(r.status, MC_ERR_CHECKSUM);
    assert_true(p.ordered);
    assert_int_equal(p.last_ready, len);
    assert_int_equal(p.done_calls, 1);
    assert_int_equal(p.done_ready, 0);
    assert_int_equal(p.done_status, MC_ERR_CHECKSUM);
    free(want);
    free(buf);
    mc_disk_store_close(s);
}

/* A batch finished on another thread than the one that started it. */
typedef struct finisher {
    mc_disk_batch_t *b;
    pthread_t thread;
    mc_status_t st;
} finisher_t;

static void *finish_main(void *arg)
{
    finisher_t *f = arg;
    f->thread = pthread_self();
    f->st = mc_disk_store_read_finish(f->b);
    return NULL;
}

/* Records the thread of each progress call (on_progress's checks too). */
static pthread_t g_progress_thread;
static void on_progress_thread(mc_disk_read_t *q, size_t ready, bool done)
{
    g_progress_thread = pthread_self();
    on_progress(q, ready, done);
}

/* mc_disk_store_read_start submits the reads before it returns (the bytes land in buf with
 * nobody waiting for them), holds its ring until _finish, which settles the reads on its own
 * thread (progress there, checksum verified) and frees the batch; while every ring is held
 * _start answers BUSY and does nothing, and a plain read_batch waits for a ring. */
static void test_read_start_finish(void **state)
{
    (void)state;
    mc_disk_config_t c;
    mc_disk_config_default(&c);
    c.rings = 1;
    mc_disk_store_t *s = open_store(&c);
    size_t len = (3u << 20) + 5000; /* four pieces: all submitted by _start */
    assert_int_equal(dt_put(s, NULL, 0, len), MC_OK);
    assert_int_equal(dt_put(s, NULL, 1, 4096), MC_OK);
    uint8_t *buf = aligned_alloc(4096, mc_disk_round(len)), *want = dt_value(len, 0);
    memset(buf, 0, len);
    char k[64], k1[64];
    dt_key(k, sizeof(k), 0);
    dt_key(k1, sizeof(k1), 1);
    prog_t p = {.ordered = true, .buf = buf, .want = want};
    mc_disk_read_t r[2] = {
        {.key = k, .key_len = strlen(k), .buf = buf, .cap = mc_disk_round(len),
         .late_ok = true, .progress = on_progress_thread, .arg = &p},
        {.key = "missing", .key_len = 7}};
    mc_disk_batch_t *b = NULL;
    assert_int_equal(mc_disk_store_read_start(s, r, 2, mc_now_ns() + 10000000000ull, &b), MC_OK);
    assert_non_null(b);
    assert_int_equal(r[1].status, MC_ERR_OBJECT_NOT_FOUND); /* settled at lookup */
    /* submitted: the value lands although nobody reaps */
    uint64_t dl = mc_now_ms() + 10000;
    bool landed;
    while (!(landed = memcmp(buf, want, len) == 0) && mc_now_ms() < dl)
        mc_sleep_ms(1);
    assert_true(landed);
    assert_int_equal(p.calls, 0); /* nothing reported before _finish */
    /* the one ring is held: _start refuses, nothing done */
    mc_disk_batch_t *b2 = (void *)1;
    mc_disk_read_t r2 = {.key = k1, .key_len = strlen(k1), .buf = buf, .cap = 4096};
    assert_int_equal(mc_disk_store_read_start(s, &r2, 1, 0, &b2), MC_ERR_BUSY);
    assert_null(b2);
    finisher_t f = {.b = b};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, finish_main, &f), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_int_equal(f.st, MC_OK);
    assert_int_equal(r[0].status, MC_OK);
    assert_int_equal(r[0].len, len);
    assert_true(p.ordered);
    assert_int_equal(p.done_calls, 1);
    assert_int_equal(p.done_status, MC_OK);
    assert_true(pthread_equal(g_progress_thread, f.thread));
    assert_memory_equal(buf, want, len);
    /* the ring is free again */
    uint8_t *small = aligned_alloc(4096, 4096);
    r2.buf = small;
    assert_int_equal(mc_disk_store_read_start(s, &r2, 1, 0, &b2), MC_OK);
    assert_int_equal(mc_disk_store_read_finish(b2), MC_OK);
    assert_int_equal(r2.status, MC_OK);
    uint8_t *w1 = dt_value(4096, 1);
    assert_memory_equal(small, w1, 4096);
    assert_int_equal(mc_disk_store_read_start(s, NULL, 0, 0, &b2), MC_ERR_INVALID_PARAMS);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.reads, 3);
    free(w1);
    free(small);
    free(want);
    free(buf);
    mc_disk_store_close(s);
}

/* Reads are cut into pieces a device request holds whole: at most 1 MiB, at most one 4 KiB
 * page per segment the device takes and at most its request size, at least 64 KiB, 4 KiB
 * multiples; the store's piece (from its directory's device) is what its reads use: a read
 * through the store's buffer reports its first piece once hashed, exactly that long. */
static void test_piece_bytes(void **state)
{
    (void)state;
    assert_int_equal(mc_disk_piece_bytes(0, 0), 1u << 20);        /* unknown */
    assert_int_equal(mc_disk_piece_bytes(254, 4096), 1016u << 10); /* virtio-blk: 254 segs */
    assert_int_equal(mc_disk_piece_bytes(256, 0), 1u << 20);
    assert_int_equal(mc_disk_piece_bytes(128, 1280), 512u << 10);
    assert_int_equal(mc_disk_piece_bytes(1024, 256), 256u << 10);  /* request size */
    assert_int_equal(mc_disk_piece_bytes(300, 1023), 1020u << 10); /* 4 KiB multiple */
    assert_int_equal(mc_disk_piece_bytes(1, 4), 64u << 10);        /* the floor */
    mc_disk_store_t *s = open_store(NULL);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_true(st.read_piece_bytes >= (64u << 10) && st.read_piece_bytes <= (1u << 20));
    assert_int_equal(st.read_piece_bytes % 4096, 0);
    size_t len = (3u << 20) + 5000;
    assert_int_equal(dt_put(s, NULL, 0, len), MC_OK);
    uint8_t *buf = malloc(len), *want = dt_value(len, 0);
    char k[64];
    dt_key(k, sizeof(k), 0);
    prog_t p = {.ordered = true, .buf = buf, .want = want};
    mc_disk_read_t r = {.key = k, .key_len = strlen(k), .buf = buf, .cap = len,
                        .progress = on_progress, .arg = &p};
    assert_int_equal(mc_disk_store_read_batch(s, &r, 1, mc_now_ns() + 10000000000ull), MC_OK);
    assert_int_equal(r.status, MC_OK);
    assert_true(p.ordered);
    assert_int_equal(p.first_ready, st.read_piece_bytes);
    assert_memory_equal(buf, want, len);
    free(want);
    free(buf);
    mc_disk_store_close(s);
}

static void test_corrupt_header_and_torn_tail(void **state)
{
    (void)state;
    mc_disk_store_t *s = open_store(NULL);
    for (uint64_t i = 0; i < 6; i++)
        assert_int_equal(dt_put(s, NULL, i, 20000 + (size_t)i), MC_OK);
    char path[512];
    mc_disk_loc_t loc, last;
    where(s, 2, path, sizeof(path), &loc);
    where(s, 5, path, sizeof(path), &last);
    mc_disk_store_close(s);
    flip_byte(path, loc.offset + 20); /* inside the header of key 2 */
    /* a torn write at the tail: value bytes without their header */
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    off_t size0 = sb.st_size;
    int fd = open(path, O_RDWR);
    uint8_t junk[12288];
    dt_fill(junk, sizeof(junk), 99);
    assert_int_equal(pwrite(fd, junk, sizeof(junk), size0 + 4096), (ssize_t)sizeof(junk));
    close(fd);
    s = open_store(NULL);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.recovered_objects, 5);
    assert_int_equal(st.recovered_corrupt, 1);
    assert_int_equal(st.recovered_torn, 1);
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_size, size0); /* cut back */
    for (uint64_t i = 0; i < 6; i++)
        assert_int_equal(dt_get(s, NULL, i, 0, NULL), i == 2 ? MC_ERR_OBJECT_NOT_FOUND : MC_OK);
    mc_disk_store_close(s);
    /* a record whose value the file does not hold entirely: not committed */
    assert_int_equal(truncate(path, (off_t)(last.offset + 8192)), 0);
    s = open_store(NULL);
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.recovered_objects, 4);
    assert_int_equal(dt_get(s, NULL, 5, 0, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(dt_get(s, NULL, 4, 0, NULL), MC_OK);
    mc_disk_store_close(s);
}

typedef struct evlog {
    uint64_t keys[4096];
    size_t n, calls;
} evlog_t;

static void on_evict(uint64_t bucket_id, const mc_disk_obj_t *objs, size_t n, void *arg)
{
    evlog_t *e = arg;
    (void)bucket_id;
    e->calls++;
    for (size_t i = 0; i < n; i++) {
        char k[64];
        snprintf(k, sizeof(k), "%.*s", (int)objs[i].key_len, objs[i].key);
        assert_int_equal(objs[i].tenant_len, 7); /* "default" */
        e->keys[e->n++] = strtoull(k + 4, NULL, 10);
    }
}

static void test_eviction(void **state)
{
    (void)state;
    for (int pol = 0; pol < 3; pol++) {
        mc_disk_config_t c;
        dt_config(&c);
        c.total_size_limit = 1 << 20;
        c.bucket_size_limit = 64 << 10; /* 3 records of 16 KiB per bucket */
        c.policy = (mc_disk_evict_policy_t)pol;
        static evlog_t ev;
        memset(&ev, 0, sizeof(ev));
        c.on_evict = on_evict;
        c.on_evict_arg = &ev;
        mc_disk_store_t *s = open_store(&c);
        uint64_t n = 200, stored = 0;
        mc_disk_stats_t st;
        for (uint64_t i = 0; i < n; i++) {
            mc_status_t rc = dt_put(s, NULL, i, 12288);
            if (pol == MC_DISK_EVICT_NONE && rc == MC_ERR_NO_AVAILABLE_HANDLE)
                break;
            assert_int_equal(rc, MC_OK);
            stored++;
            mc_disk_store_stats(s, &st);
            assert_true(st.bytes_on_disk <= c.total_size_limit);
            if (pol != MC_DISK_EVICT_NONE)
                assert_true(st.bytes_on_disk <= 0.9 * c.total_size_limit + (64 << 10));
            if (pol == MC_DISK_EVICT_LRU)
                assert_int_equal(dt_get(s, NULL, 0, 0, NULL), MC_OK); /* key 0 stays hot */
        }
        mc_disk_store_stats(s, &st);
        if (pol == MC_DISK_EVICT_NONE) {
            assert_true(stored < n);
            assert_int_equal(st.evicted_buckets, 0);
            assert_true(st.disk_full >= 1);
            assert_int_equal(st.objects, stored);
            mc_disk_store_close(s);
            mt_rmdir(g_dir);
            assert_int_equal(mt_tmpdir(g_dir, sizeof(g_dir)), 0);
            continue;
        }
        assert_true(st.evicted_buckets > 0);
        assert_int_equal(st.evicted_buckets, ev.calls);
        assert_int_equal(st.evicted_objects, ev.n);
        assert_int_equal(st.objects + ev.n, n);
        /* every reported key is gone, every other key is readable */
        static bool gone[200];
        memset(gone, 0, sizeof(gone));
        for (size_t i = 0; i < ev.n; i++)
            gone[ev.keys[i]] = true;
        for (uint64_t i = 0; i < n; i++)
            assert_int_equal(dt_get(s, NULL, i, 0, NULL), gone[i] ? MC_ERR_OBJECT_NOT_FOUND : MC_OK);
        if (pol == MC_DISK_EVICT_FIFO) /* oldest first: the evicted keys are a prefix */
            for (size_t i = 0; i < ev.n; i++)
                assert_true(ev.keys[i] < ev.n);
        else
            assert_false(gone[0]); /* the bucket read most recently stays */
        mc_disk_store_close(s);
        mt_rmdir(g_dir);
        assert_int_equal(mt_tmpdir(g_dir, sizeof(g_dir)), 0);
    }
}

/* Copies file from to to (the test's stand-in for a bucket file a crash left behind). */
static void copy_file(const char *from, const char *to)
{
    int in = open(from, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(in >= 0 && out >= 0);
    char buf[65536];
    ssize_t n;
    while ((n = read(in, buf, sizeof(buf))) > 0)
        assert_int_equal(write(out, buf, (size_t)n), n);
    assert_int_equal(n, 0);
    close(in);
    close(out);
}

static void count_all(const mc_disk_obj_t *o, void *arg)
{
    (void)o;
    (*(size_t *)arg)++;
}

/* Second chance: keys 0-11 fill buckets 1-3 (four records of 16 KiB each), keys 0, 1 and 2 of
 * bucket 1 are read, and the put of key 12 (over total_keys_limit) makes bucket 1 the victim.
 * With readmit_pct 50 two of the three read keys fit in half of bucket 1: they are re-appended
 * to the new bucket 4 and read back with their exact bytes after bucket 1's file is gone; the
 * third read key and the unread key 3 are evicted and reported. With 0 (off) all four go.
 * Then a restart finds the copies (no second entry), also when bucket 1's file is put back as
 * a crash between the copies and the deletion would have left it; and a copy that is not read
 * again is evicted when its turn comes (its second chance is spent). */
static void test_readmit(void **state)
{
    (void)state;
    for (uint32_t pct = 0; pct <= 50; pct += 50) {
        mc_disk_config_t c;
        dt_config(&c);
        c.bucket_keys_limit = 4;
        c.total_keys_limit = 12;
        c.watermark_eviction = false;
        c.readmit_pct = pct;
        static evlog_t ev;
        memset(&ev, 0, sizeof(ev));
        c.on_evict = on_evict;
        c.on_evict_arg = &ev;
        mc_disk_store_t *s = open_store(&c);
        for (uint64_t i = 0; i < 12; i++)
            assert_int_equal(dt_put(s, NULL, i, 12288), MC_OK);
        for (uint64_t i = 0; i < 3; i++)
            assert_int_equal(dt_get(s, NULL, i, 0, NULL), MC_OK);
        char old_path[512], saved[512];
        mc_disk_loc_t loc;
        where(s, 0, old_path, sizeof(old_path), &loc);
        assert_int_equal(loc.bucket_id, 1);
        snprintf(saved, sizeof(saved), "%s/saved", g_dir);
        copy_file(old_path, saved);

        assert_int_equal(dt_put(s, NULL, 12, 12288), MC_OK);
        assert_int_equal(access(old_path, F_OK), -1); /* bucket 1 is deleted */
        mc_disk_stats_t st;
        mc_disk_store_stats(s, &st);
        assert_int_equal(st.evicted_buckets, 1);
        assert_int_equal(ev.calls, 1);
        bool kept[13] = {false};
        size_t nkept = 0;
        for (uint64_t i = 0; i < 13; i++) {
            mc_status_t rc = dt_get(s, NULL, i, 0, NULL); /* MC_ERR_INTERNAL: wrong bytes */
            assert_true(rc == MC_OK || rc == MC_ERR_OBJECT_NOT_FOUND);
            kept[i] = rc == MC_OK;
            if (i < 4 && kept[i]) {
                nkept++;
                assert_true(i < 3); /* only read keys get a second chance */
                where(s, i, old_path, sizeof(old_path), &loc);
                assert_int_equal(loc.bucket_id, 4);
            }
        }
        for (uint64_t i = 4; i < 13; i++)
            assert_true(kept[i]);
        assert_int_equal(nkept, pct ? 2 : 0);
        assert_int_equal(st.readmitted_objects, nkept);
        assert_int_equal(st.readmitted_bytes, nkept * 12288);
        assert_int_equal(st.evicted_objects, 4 - nkept);
        assert_int_equal(ev.n, 4 - nkept);
        for (size_t i = 0; i < ev.n; i++)
            assert_false(kept[ev.keys[i]]); /* reported keys are the ones gone */
        assert_int_equal(st.objects, 13 - (4 - nkept));
        mc_disk_store_close(s);

        /* restart: the copies are found once, in bucket 4 */
        s = open_store(&c);
        mc_disk_store_stats(s, &st);
        size_t n = 0;
        assert_int_equal(mc_disk_store_foreach(s, count_all, &n), 13 - (4 - nkept));
        assert_int_equal(st.recovered_objects, n);
        for (uint64_t i = 0; i < 13; i++)
            assert_int_equal(dt_get(s, NULL, i, 0, NULL), kept[i] ? MC_OK : MC_ERR_OBJECT_NOT_FOUND);
        mc_disk_store_close(s);

        /* bucket 1 left behind by a crash after the copies: its records come back, the copies
         * (newer bucket) win, no key twice */
        snprintf(old_path, sizeof(old_path), "%s/1.bucket", g_dir);
        assert_int_equal(rename(saved, old_path), 0);
        s = open_store(&c);
        mc_disk_store_stats(s, &st);
        n = 0;
        mc_disk_store_foreach(s, count_all, &n);
        assert_int_equal(n, 13);
        assert_int_equal(st.objects, 13);
        for (uint64_t i = 0; i < 13; i++) {
            assert_int_equal(dt_get(s, NULL, i, 0, NULL), MC_OK);
            where(s, i, old_path, sizeof(old_path), &loc);
            if (i < 4)
                assert_int_equal(loc.bucket_id, kept[i] ? 4 : 1);
        }
        mc_disk_store_close(s);

        /* a copy not read again is evicted when its bucket's turn comes */
        s = open_store(&c);
        memset(&ev, 0, sizeof(ev));
        for (uint64_t i = 13; i < 40; i++)
            assert_int_equal(dt_put(s, NULL, i, 12288), MC_OK);
        for (uint64_t i = 0; i < 4; i++)
            assert_int_equal(dt_get(s, NULL, i, 0, NULL), MC_ERR_OBJECT_NOT_FOUND);
        mc_disk_stats_t st2;
        mc_disk_store_stats(s, &st2);
        assert_int_equal(st2.readmitted_objects, 0);
        mc_disk_store_close(s);
        mt_rmdir(g_dir);
        assert_int_equal(mt_tmpdir(g_dir, sizeof(g_dir)), 0);
    }
}

/* A removed second-chance copy stays removed even when its bucket goes with the removal (no
 * tombstone would be needed for a plain record there) and a crash left the victim's file with
 * the old record behind: keys 0 and 1 are copied from bucket 1 into bucket 4 (with keys 12,
 * 13), bucket 4 is sealed, all four are removed (bucket 4 is deleted as empty), then bucket 1's
 * file is put back as a crash before its deletion would have left it. */
static void test_readmit_remove(void **state)
{
    (void)state;
    mc_disk_config_t c;
    dt_config(&c);
    c.bucket_keys_limit = 4;
    c.total_keys_limit = 12;
    c.watermark_eviction = false;
    c.readmit_pct = 50;
    mc_disk_store_t *s = open_store(&c);
    for (uint64_t i = 0; i < 12; i++)
        assert_int_equal(dt_put(s, NULL, i, 12288), MC_OK);
    for (uint64_t i = 0; i < 2; i++)
        assert_int_equal(dt_get(s, NULL, i, 0, NULL), MC_OK);
    char path[512], saved[512], b4[512];
    mc_disk_loc_t loc;
    where(s, 0, path, sizeof(path), &loc);
    snprintf(saved, sizeof(saved), "%s/saved", g_dir);
    copy_file(path, saved);
    for (uint64_t i = 12; i < 15; i++) /* 12: bucket 1 evicted (0, 1 copied); 14: seals 4 */
        assert_int_equal(dt_put(s, NULL, i, 12288), MC_OK);
    where(s, 0, b4, sizeof(b4), &loc);
    assert_int_equal(loc.bucket_id, 4);
    where(s, 13, b4, sizeof(b4), &loc);
    assert_int_equal(loc.bucket_id, 4);
    static const uint64_t order[] = {12, 13, 0, 1};
    for (size_t i = 0; i < 4; i++) {
        char k[64];
        dt_key(k, sizeof(k), order[i]);
        assert_int_equal(mc_disk_store_remove(s, NULL, k, strlen(k)), MC_OK);
    }
    assert_int_equal(access(b4, F_OK), -1); /* emptied and deleted by the last removal */
    mc_disk_store_close(s);
    assert_int_equal(rename(saved, path), 0);
    s = open_store(&c);
    for (uint64_t i = 0; i < 2; i++)
        assert_int_equal(dt_get(s, NULL, i, 0, NULL), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(dt_get(s, NULL, 14, 0, NULL), MC_OK);
    mc_disk_store_close(s);
}

/* Limits smaller than one bucket: the bucket being appended to is sealed and evicted too. */
static void test_limits_below_one_bucket(void **state)
{
    (void)state;
    mc_disk_config_t c;
    dt_config(&c);
    c.total_keys_limit = 10; /* fewer than bucket_keys_limit (500) */
    static evlog_t ev;
    memset(&ev, 0, sizeof(ev));
    c.on_evict = on_evict;
    c.on_evict_arg = &ev;
    mc_disk_store_t *s = open_store(&c);
    for (uint64_t i = 0; i < 35; i++)
        assert_int_equal(dt_put(s, NULL, i, 1000), MC_OK);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_true(st.objects <= 10);
    assert_int_equal(st.objects + ev.n, 35);
    assert_int_equal(dt_get(s, NULL, 34, 0, NULL), MC_OK);
    mc_disk_store_close(s);
}

static void test_remove_deletes_empty_bucket(void **state)
{
    (void)state;
    mc_disk_config_t c;
    dt_config(&c);
    c.bucket_keys_limit = 3;
    mc_disk_store_t *s = open_store(&c);
    for (uint64_t i = 0; i < 7; i++)
        assert_int_equal(dt_put(s, NULL, i, 5000), MC_OK);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.buckets, 3);
    char path[512];
    mc_disk_loc_t loc;
    where(s, 0, path, sizeof(path), &loc);
    for (uint64_t i = 0; i < 3; i++) {
        char k[64];
        dt_key(k, sizeof(k), i);
        assert_int_equal(mc_disk_store_remove(s, NULL, k, strlen(k)), MC_OK);
    }
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.buckets, 2); /* the first bucket held only keys 0-2 */
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(st.objects, 4);
    mc_disk_store_close(s);
}

/* A bucket emptied while a read on it is still in flight (abandoned at its deadline, not yet
 * reaped) keeps its file until that read's completion is reaped. */
static void test_no_delete_under_read(void **state)
{
    (void)state;
    mc_disk_config_t c;
    dt_config(&c);
    c.rings = 1;
    c.bucket_keys_limit = 3;
    mc_disk_store_t *s = open_store(&c);
    for (uint64_t i = 0; i < 4; i++) /* keys 0-2 in bucket 1 (sealed), key 3 in bucket 2 */
        assert_int_equal(dt_put(s, NULL, i, 300000), MC_OK);
    char path[512];
    mc_disk_loc_t loc;
    where(s, 0, path, sizeof(path), &loc);
    char k[64];
    dt_key(k, sizeof(k), 0);
    uint8_t *buf = aligned_alloc(4096, mc_disk_round(300000));
    mc_disk_read_t r = {.key = k, .key_len = strlen(k), .buf = buf, .cap = 300000};
    assert_int_equal(mc_disk_store_read_batch(s, &r, 1, mc_now_ns()), MC_OK);
    assert_int_equal(r.status, MC_ERR_TIMEOUT);
    for (uint64_t i = 0; i < 3; i++) {
        dt_key(k, sizeof(k), i);
        assert_int_equal(mc_disk_store_remove(s, NULL, k, strlen(k)), MC_OK);
    }
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.buckets, 1);       /* bucket 1 is gone from the store ... */
    assert_int_equal(access(path, F_OK), 0); /* ... but its file waits for the read */
    assert_int_equal(dt_get(s, NULL, 3, 0, NULL), MC_OK); /* reaps the late completion */
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.late_completions, 1);
    assert_int_equal(access(path, F_OK), -1);
    free(buf);
    mc_disk_store_close(s);
}

static void test_deadline(void **state)
{
    (void)state;
    mc_disk_config_t c;
    dt_config(&c);
    c.rings = 1;
    mc_disk_store_t *s = open_store(&c);
    enum { N = 8, SZ = 1 << 20 };
    char keys[N][64];
    mc_disk_read_t r[N];
    uint8_t *bufs = aligned_alloc(4096, (size_t)N * SZ);
    memset(bufs, 0xAA, (size_t)N * SZ);
    for (uint64_t i = 0; i < N; i++) {
        assert_int_equal(dt_put(s, NULL, i, SZ), MC_OK);
        dt_key(keys[i], sizeof(keys[i]), i);
        r[i] = (mc_disk_read_t){.key = keys[i], .key_len = strlen(keys[i]),
                                .buf = bufs + i * SZ, .cap = SZ};
    }
    /* a deadline that has passed when the reads are in flight: every read is abandoned;
     * their completions are reaped by later calls and the caller's buffers stay untouched
     * (whether the device finishes a read or the cancel stops it first varies, so rounds) */
    mc_disk_stats_t st;
    for (int round = 1; round <= 8; round++) {
        assert_int_equal(mc_disk_store_read_batch(s, r, N, mc_now_ns()), MC_OK);
        for (int i = 0; i < N; i++)
            assert_int_equal(r[i].status, MC_ERR_TIMEOUT);
        mc_disk_store_stats(s, &st);
        assert_int_equal(st.read_timeouts, (uint64_t)round * N);
        uint64_t until = mc_now_ns() + 10000000000ull;
        do {
            assert_int_equal(dt_get(s, NULL, 0, 0, NULL), MC_OK);
            mc_disk_store_stats(s, &st);
        } while (st.late_completions < (uint64_t)round * N && mc_now_ns() < until);
        assert_int_equal(st.late_completions, (uint64_t)round * N);
        for (size_t i = 0; i < (size_t)N * SZ; i++)
            if (bufs[i] != 0xAA)
                fail_msg("round %d: byte %zu of a timed-out read's buffer was written", round, i);
    }
    /* a generous deadline succeeds */
    assert_int_equal(mc_disk_store_read_batch(s, r, N, mc_now_ns() + 30000000000ull), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(r[i].status, MC_OK);
    /* abandoned reads still in flight at close: close waits for them */
    assert_int_equal(mc_disk_store_read_batch(s, r, N, mc_now_ns()), MC_OK);
    free(bufs);
    mc_disk_store_close(s);
}

/* ---- configuration */

typedef struct kv {
    const char *k, *v;
} kv_t;

static const char *lookup(const char *name, void *arg)
{
    for (const kv_t *e = arg; e->k; e++)
        if (strcmp(e->k, name) == 0)
            return e->v;
    return NULL;
}

static void test_config(void **state)
{
    (void)state;
    mc_disk_config_t c;
    mc_disk_config_default(&c);
    assert_int_equal(c.total_size_limit, 2ull << 40);
    assert_int_equal(c.total_keys_limit, 10000000);
    assert_int_equal(c.bucket_keys_limit, 500);
    assert_int_equal(c.bucket_size_limit, 256u << 20);
    assert_true(c.watermark_eviction);
    assert_true(c.high_watermark == 0.90 && c.low_watermark == 0.80);
    assert_int_equal(c.policy, MC_DISK_EVICT_FIFO);
    assert_int_equal(c.readmit_pct, 50);
    char err[256];
    assert_int_equal(mc_disk_config_check(&c, err, sizeof(err)), MC_OK);
    mc_disk_config_t bad = c;
    bad.low_watermark = 0.95;
    assert_int_equal(mc_disk_config_check(&bad, err, sizeof(err)), MC_ERR_INVALID_PARAMS);
    assert_non_null(strstr(err, "watermark"));
    bad = c;
    bad.bucket_size_limit = 3ull << 40;
    assert_int_equal(mc_disk_config_check(&bad, err, sizeof(err)), MC_ERR_INVALID_PARAMS);
    mc_disk_store_t *s = NULL;
    assert_int_equal(mc_disk_store_open(g_dir, &bad, &s), MC_ERR_INVALID_PARAMS);

    kv_t good[] = {{"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", "/data/x"},
                   {"MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR", "bucket_storage_backend"},
                   {"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "64GiB"},
                   {"MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT", "1000"},
                   {"MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", "50"},
                   {"MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", "16 MiB"},
                   {"MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION", "false"},
                   {"MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO", "0.7"},
                   {"MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO", "0.5"},
                   {"MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "lru"},
                   {"MOONCAKE_OFFLOAD_USE_URING", "true"},
                   {"MC_DISK_SYNC_EACH_PUT", "1"},
                   {"MC_DISK_IO_DEPTH", "128"},
                   {"MC_DISK_READMIT_PCT", "0"},
                   {NULL, NULL}};
    const char *dir = NULL;
    mc_disk_config_default(&c);
    assert_int_equal(mc_disk_config_from_env(&c, lookup, good, &dir, err, sizeof(err)), MC_OK);
    assert_string_equal(dir, "/data/x");
    assert_int_equal(c.total_size_limit, 64ull << 30);
    assert_int_equal(c.total_keys_limit, 1000);
    assert_int_equal(c.bucket_keys_limit, 50);
    assert_int_equal(c.bucket_size_limit, 16u << 20);
    assert_false(c.watermark_eviction);
    assert_true(c.high_watermark == 0.7 && c.low_watermark == 0.5);
    assert_int_equal(c.policy, MC_DISK_EVICT_LRU);
    assert_true(c.sync_each_put);
    assert_int_equal(c.io_depth, 128);
    assert_int_equal(c.readmit_pct, 0);

    /* every bad value is refused with the variable's name, nothing falls back silently */
    static const kv_t bads[] = {
        {"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "lots"},
        {"MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", "100"},          /* < 1 MiB */
        {"MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT", "-5"},
        {"MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT", "0"},
        {"MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", "99999999999"},
        {"MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", "1KiB"},
        {"MOONCAKE_OFFLOAD_ENABLE_DISK_WATERMARK_EVICTION", "maybe"},
        {"MOONCAKE_OFFLOAD_DISK_EVICTION_HIGH_WATERMARK_RATIO", "1.5"},
        {"MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO", "0.95"}, /* >= high */
        {"MOONCAKE_OFFLOAD_DISK_EVICTION_LOW_WATERMARK_RATIO", "abc"},
        {"MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", "random"},
        {"MOONCAKE_OFFLOAD_USE_URING", "2"},
        {"MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", ""},
        {"MC_DISK_IO_DEPTH", "0"},
        {"MC_DISK_RINGS", "1000"},
        {"MC_DISK_READMIT_PCT", "91"},
        {"MC_DISK_READMIT_PCT", "-1"},
    };
    for (size_t i = 0; i < sizeof(bads) / sizeof(bads[0]); i++) {
        kv_t one[] = {bads[i], {NULL, NULL}};
        mc_disk_config_default(&c);
        err[0] = 0;
        assert_int_equal(mc_disk_config_from_env(&c, lookup, one, &dir, err, sizeof(err)),
                         MC_ERR_INVALID_PARAMS);
        if (!strstr(err, bads[i].k)) /* the message names the variable */
            fail_msg("%s=%s refused without naming it: %s", bads[i].k, bads[i].v, err);
    }
    kv_t other[] = {{"MOONCAKE_OFFLOAD_STORAGE_BACKEND_DESCRIPTOR", "file_per_key_storage_backend"},
                    {NULL, NULL}};
    assert_int_equal(mc_disk_config_from_env(&c, lookup, other, NULL, err, sizeof(err)),
                     MC_ERR_NOT_SUPPORTED);
    assert_non_null(strstr(err, "bucket_storage_backend"));
}

int main(void)
{
    dt_require_uring();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_progress, setup, teardown),
        cmocka_unit_test_setup_teardown(test_read_start_finish, setup, teardown),
        cmocka_unit_test_setup_teardown(test_piece_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_header_and_torn_tail, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readmit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_readmit_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_limits_below_one_bucket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remove_deletes_empty_bucket, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_delete_under_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
