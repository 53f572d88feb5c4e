/* Crash and disk-full tests of the disk store:
 *  - kill -9 mid-write: a child puts (and sometimes removes) objects in a loop and reports each
 *    call that returned through a pipe; the parent SIGKILLs it at a random point, reopens the
 *    store and checks that every recovered object reads back its exact bytes, that every
 *    acknowledged put is there and every acknowledged remove stays removed, and that nothing
 *    else appears (at most the one call in flight). Several rounds on one directory. And one
 *    kill that certainly lands inside a 32 MiB value's write (the parent watches the file grow),
 *    and kills inside the second-chance copies of an evicted bucket's read objects.
 *  - disk full: an 8 MiB tmpfs mounted on a temp directory (unmounted in the teardown, also
 *    after a failure), or, where mounting is refused, RLIMIT_FSIZE: puts fail with
 *    MC_ERR_NO_AVAILABLE_HANDLE, every stored object still reads back, space freed by removes
 *    is used again, and a reopen recovers everything. The test prints which variant ran. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/time.h"
#include "disk_test.h"
#include "support/test_util.h"

#include <errno.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];
static bool g_mounted;

static int setup(void **state)
{
    (void)state;
    g_mounted = false;
    return mt_tmpdir(g_dir, sizeof(g_dir));
}

static int teardown(void **state)
{
    (void)state;
    if (g_mounted && umount2(g_dir, MNT_DETACH) != 0)
        fprintf(stderr, "umount %s: %s\n", g_dir, strerror(errno));
    g_mounted = false;
    mt_rmdir(g_dir);
    return 0;
}

#define REMOVED (1ull << 63)

/* Sizes up to 2 MiB, so that the kill often lands inside a write. */
static size_t crash_size(uint64_t i)
{
    return (size_t)((i * 7919 * 13) % (2u << 20)) + 1;
}

/* Odd rounds write with sync_each_put (a wide window between value and header). */
static void crash_config(mc_disk_config_t *c, int round)
{
    dt_config(c);
    c->bucket_keys_limit = 20;
    c->bucket_size_limit = 8 << 20;
    c->sync_each_put = round % 2;
}

/* The child: puts keys base, base+1, ... and every 7th key removes key i-5; reports each call
 * that returned. Never returns. */
static void writer(int fd, uint64_t base, int round)
{
    mc_disk_config_t c;
    crash_config(&c, round);
    mc_disk_store_t *s = NULL;
    if (mc_disk_store_open(g_dir, &c, &s) != MC_OK)
        _exit(3);
    for (uint64_t i = base;; i++) {
        if (dt_put(s, NULL, i, crash_size(i)) != MC_OK)
            _exit(4);
        if (write(fd, &i, sizeof(i)) != sizeof(i))
            _exit(5);
        if (i % 7 == 0 && i >= base + 5) {
            char k[64];
            dt_key(k, sizeof(k), i - 5);
            if (mc_disk_store_remove(s, NULL, k, strlen(k)) != MC_OK)
                _exit(6);
            uint64_t m = (i - 5) | REMOVED;
            if (write(fd, &m, sizeof(m)) != sizeof(m))
                _exit(5);
        }
    }
}

typedef struct crash_state {
    uint8_t *state; /* per key: 0 never acknowledged, 1 put, 2 removed */
    uint64_t cap;
    uint64_t found, bad;
    mc_disk_store_t *s;
} crash_state_t;

static void check_obj(const mc_disk_obj_t *o, void *arg)
{
    crash_state_t *cs = arg;
    char k[64];
    snprintf(k, sizeof(k), "%.*s", (int)o->key_len, o->key);
    uint64_t i = strtoull(k + 4, NULL, 10);
    cs->found++;
    if (o->loc.data_size != crash_size(i))
        cs->bad++;
}

static void test_kill9(void **state)
{
    (void)state;
    unsigned seed = (unsigned)(mc_now_ns() ^ (uint64_t)getpid());
    print_message("kill -9 test seed %u\n", seed);
    srand(seed);
    crash_state_t cs = {.cap = 1 << 20};
    cs.state = calloc(cs.cap, 1);
    uint64_t base = 0, inflight_max = 0;
    for (int round = 0; round < 6; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            writer(p[1], base, round);
        }
        close(p[1]);
        uint64_t target = 5 + (uint64_t)(rand() % 60), got = 0, v;
        uint64_t until = mc_now_ns() + 60000000000ull;
        while (got < target && mc_now_ns() < until && read(p[0], &v, sizeof(v)) == sizeof(v)) {
            got++;
            assert_true((v & ~REMOVED) < cs.cap);
            cs.state[v & ~REMOVED] = v & REMOVED ? 2 : 1;
        }
        assert_int_equal(got, target);
        /* a random point inside the next call */
        uint64_t spin = mc_now_ns() + (uint64_t)(rand() % 2000) * 1000;
        while (mc_now_ns() < spin)
            ;
        assert_int_equal(kill(pid, SIGKILL), 0);
        int ws;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        assert_true(WIFSIGNALED(ws)); /* it was writing, not failing */
        while (read(p[0], &v, sizeof(v)) == sizeof(v)) /* reported before it died */
            cs.state[v & ~REMOVED] = v & REMOVED ? 2 : 1;
        close(p[0]);
        uint64_t top = base;
        for (uint64_t i = base; i < cs.cap; i++)
            if (cs.state[i])
                top = i + 1;

        mc_disk_config_t c;
        crash_config(&c, round);
        assert_int_equal(mc_disk_store_open(g_dir, &c, &cs.s), MC_OK);
        cs.found = cs.bad = 0;
        mc_disk_store_foreach(cs.s, check_obj, &cs);
        assert_int_equal(cs.bad, 0);
        /* the call in flight at the kill: the put of `top`, or the remove of last-5 */
        uint64_t last = top - 1, rm_inflight = last % 7 == 0 && last >= 5 ? last - 5 : UINT64_MAX;
        for (uint64_t i = 0; i <= top && i < cs.cap; i++) {
            mc_status_t st = dt_get(cs.s, NULL, i, 0, NULL);
            assert_true(st == MC_OK || st == MC_ERR_OBJECT_NOT_FOUND); /* never wrong bytes */
            if (cs.state[i] == 1 && st != MC_OK && i != rm_inflight)
                fail_msg("round %d: acknowledged key %llu lost", round, (unsigned long long)i);
            if (cs.state[i] == 2 && st == MC_OK)
                fail_msg("round %d: removed key %llu came back", round, (unsigned long long)i);
            if (cs.state[i] == 0 && st == MC_OK && i != top)
                fail_msg("round %d: key %llu never put is there", round, (unsigned long long)i);
            if (st == MC_OK)
                cs.state[i] = 1; /* the put in flight made it */
            else if (cs.state[i] == 1)
                cs.state[i] = 2; /* the remove in flight made it */
        }
        mc_disk_stats_t stt;
        mc_disk_store_stats(cs.s, &stt);
        assert_int_equal(stt.recovered_corrupt, 0);
        if (stt.recovered_torn)
            inflight_max++;
        mc_disk_store_close(cs.s);
        base = top + 1;
    }
    print_message("kill -9: %u of 6 rounds cut a write short (torn tail found)\n",
                  (unsigned)inflight_max);
    free(cs.state);
}

/* A kill that certainly lands inside a value's write: the child announces each put, the
 * parent watches the bucket file grow past the announced put's start and kills it there. The
 * torn record is cut away at the reopen; everything acknowledged before it reads back. */
#define START (1ull << 62)
#define BIG (32u << 20)

static void big_writer(int fd)
{
    mc_disk_config_t c;
    dt_config(&c);
    mc_disk_store_t *s = NULL;
    if (mc_disk_store_open(g_dir, &c, &s) != MC_OK)
        _exit(3);
    for (uint64_t i = 0;; i++) {
        uint64_t m = i | START;
        if (write(fd, &m, sizeof(m)) != sizeof(m) || dt_put(s, NULL, i, BIG) != MC_OK ||
            write(fd, &i, sizeof(i)) != sizeof(i))
            _exit(4);
    }
}

static long long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long long)sb.st_size : -1;
}

static void test_kill9_mid_value(void **state)
{
    (void)state;
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        big_writer(p[1]);
    }
    close(p[1]);
    char path[512];
    snprintf(path, sizeof(path), "%s/1.bucket", g_dir);
    uint64_t v, acked = 0, started = 0;
    /* wait for two acknowledged puts and the start of the third */
    while (started < 3 && read(p[0], &v, sizeof(v)) == sizeof(v)) {
        if (v & START)
            started++;
        else
            acked++;
    }
    assert_int_equal(started, 3);
    long long base = file_size(path), now = base;
    uint64_t until = mc_now_ns() + 10000000000ull;
    while (now < base + (4 << 20) && mc_now_ns() < until)
        now = file_size(path);
    assert_int_equal(kill(pid, SIGKILL), 0);
    int ws;
    assert_int_equal(waitpid(pid, &ws, 0), pid);
    while (read(p[0], &v, sizeof(v)) == sizeof(v))
        acked += !(v & START);
    close(p[0]);
    assert_true(now >= base + (4 << 20)); /* the kill came while the value was being written */
    print_message("killed with %lld of the third value's bytes written, %llu puts acknowledged\n",
                  now - base, (unsigned long long)acked);
    mc_disk_config_t c;
    dt_config(&c);
    mc_disk_store_t *s = NULL;
    assert_int_equal(mc_disk_store_open(g_dir, &c, &s), MC_OK);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.recovered_objects, acked);
    if (acked == 2) { /* the third put did not finish: its bytes are a torn tail */
        assert_int_equal(st.recovered_torn, 1);
        assert_int_equal(dt_get(s, NULL, 2, 0, NULL), MC_ERR_OBJECT_NOT_FOUND);
    }
    for (uint64_t i = 0; i < acked; i++)
        assert_int_equal(dt_get(s, NULL, i, 0, NULL), MC_OK);
    mc_disk_store_close(s);
}

/* A kill inside a second-chance rewrite: the child fills buckets 1 and 2 with four 4 MiB
 * values each, reads keys 0-3 (bucket 1), announces, and puts key 8 over total_keys_limit:
 * bucket 1 is the victim and two of its read keys are copied into the new bucket 3 before it
 * is deleted. The parent watches 3.bucket grow past a random point of the copies and kills the
 * child there. At the reopen every key reads back its exact bytes or is absent; while bucket 1's
 * file is still there (the kill came before its deletion) all eight keys are there, and once it
 * is gone both copies are (the last round waits for the deletion before it kills). */
static void readmit_writer(int fd)
{
    mc_disk_config_t c;
    dt_config(&c);
    c.bucket_keys_limit = 4;
    c.total_keys_limit = 8;
    c.watermark_eviction = false;
    c.readmit_pct = 50;
    mc_disk_store_t *s = NULL;
    if (mc_disk_store_open(g_dir, &c, &s) != MC_OK)
        _exit(3);
    for (uint64_t i = 0; i < 8; i++)
        if (dt_put(s, NULL, i, 4u << 20) != MC_OK)
            _exit(4);
    for (uint64_t i = 0; i < 4; i++)
        if (dt_get(s, NULL, i, 0, NULL) != MC_OK)
            _exit(4);
    uint64_t m = START;
    if (write(fd, &m, sizeof(m)) != sizeof(m) || dt_put(s, NULL, 8, 4u << 20) != MC_OK)
        _exit(4);
    m = 8;
    if (write(fd, &m, sizeof(m)) != sizeof(m))
        _exit(5);
    for (;;)
        pause();
}

static void test_kill9_mid_readmit(void **state)
{
    (void)state;
    unsigned seed = (unsigned)(mc_now_ns() ^ (uint64_t)getpid());
    print_message("kill -9 mid-readmit seed %u\n", seed);
    srand(seed);
    int inside = 0;
    for (int round = 0; round < 3; round++) {
        int p[2];
        assert_int_equal(pipe(p), 0);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(p[0]);
            readmit_writer(p[1]);
        }
        close(p[1]);
        uint64_t v = 0;
        assert_int_equal(read(p[0], &v, sizeof(v)), sizeof(v));
        assert_int_equal(v, START);
        /* a point inside the two 4 MiB copies (each a 4 KiB header block and the value) */
        long long at = 4096 + (long long)(rand() % (8 << 20));
        char path[512];
        snprintf(path, sizeof(path), "%s/3.bucket", g_dir);
        long long now = -1;
        uint64_t until = mc_now_ns() + 10000000000ull;
        while ((now = file_size(path)) < at && mc_now_ns() < until)
            ;
        char old[512];
        snprintf(old, sizeof(old), "%s/1.bucket", g_dir);
        while (round == 2 && access(old, F_OK) == 0 && mc_now_ns() < until)
            ; /* the last round: a kill right after bucket 1's deletion */
        assert_int_equal(kill(pid, SIGKILL), 0);
        int ws;
        assert_int_equal(waitpid(pid, &ws, 0), pid);
        close(p[0]);
        assert_true(now >= at);
        bool old_there = access(old, F_OK) == 0;
        inside += old_there;
        mc_disk_config_t c;
        dt_config(&c);
        c.watermark_eviction = false;
        mc_disk_store_t *s = NULL;
        assert_int_equal(mc_disk_store_open(g_dir, &c, &s), MC_OK);
        mc_disk_stats_t st;
        mc_disk_store_stats(s, &st);
        assert_int_equal(st.recovered_corrupt, 0);
        uint64_t ok = 0, ok_read = 0;
        for (uint64_t i = 0; i <= 8; i++) {
            mc_status_t rc = dt_get(s, NULL, i, 0, NULL);
            assert_true(rc == MC_OK || rc == MC_ERR_OBJECT_NOT_FOUND); /* never wrong bytes */
            ok += rc == MC_OK;
            ok_read += i < 4 && rc == MC_OK;
            if (i >= 4 && i < 8)
                assert_int_equal(rc, MC_OK); /* bucket 2 was never touched */
            if (i < 4 && old_there)
                assert_int_equal(rc, MC_OK);
        }
        assert_int_equal(st.objects, ok);
        if (!old_there) /* bucket 1 went only after both copies were committed */
            assert_int_equal(ok_read, 2);
        print_message("round %d: killed at %lld bytes of bucket 3, bucket 1 %s, %llu keys back\n",
                      round, now, old_there ? "still there" : "deleted",
                      (unsigned long long)ok);
        mc_disk_store_close(s);
        mt_rmdir(g_dir);
        assert_int_equal(mt_tmpdir(g_dir, sizeof(g_dir)), 0);
    }
    print_message("kill -9 mid-readmit: %d of 3 kills before the old bucket's deletion\n", inside);
    assert_true(inside < 3); /* the last round waited for it */
}

/* ---- disk full */

static mc_status_t put_until_full(mc_disk_store_t *s, uint64_t *n_p)
{
    mc_status_t st = MC_OK;
    uint64_t n = 0;
    while (n < 1000 && (st = dt_put(s, NULL, n, 1 << 20)) == MC_OK)
        n++;
    *n_p = n;
    return st;
}

static void full_scenario(bool tmpfs)
{
    mc_disk_config_t c;
    dt_config(&c);
    c.bucket_keys_limit = tmpfs ? 2 : 500; /* RLIMIT_FSIZE limits one file */
    mc_disk_store_t *s = NULL;
    assert_int_equal(mc_disk_store_open(g_dir, &c, &s), MC_OK);
    uint64_t n;
    assert_int_equal(put_until_full(s, &n), MC_ERR_NO_AVAILABLE_HANDLE);
    assert_true(n >= 3 && n < 1000);
    mc_disk_stats_t st;
    mc_disk_store_stats(s, &st);
    assert_true(st.disk_full >= 1);
    assert_int_equal(st.objects, n);
    assert_int_equal(dt_put(s, NULL, 5000, 1 << 20), MC_ERR_NO_AVAILABLE_HANDLE);
    for (uint64_t i = 0; i < n; i++)
        assert_int_equal(dt_get(s, NULL, i, i % 2 ? mc_now_ns() + 10000000000ull : 0, NULL), MC_OK);
    if (tmpfs) { /* removes that empty a bucket give its space back */
        for (uint64_t i = 0; i < 2; i++) {
            char k[64];
            dt_key(k, sizeof(k), i);
            assert_int_equal(mc_disk_store_remove(s, NULL, k, strlen(k)), MC_OK);
        }
        assert_int_equal(dt_put(s, NULL, 5000, 1 << 20), MC_OK);
        assert_int_equal(dt_get(s, NULL, 5000, 0, NULL), MC_OK);
    }
    mc_disk_store_close(s);
    assert_int_equal(mc_disk_store_open(g_dir, &c, &s), MC_OK);
    mc_disk_store_stats(s, &st);
    assert_int_equal(st.recovered_objects, tmpfs ? n - 1 : n);
    assert_int_equal(st.recovered_corrupt, 0);
    for (uint64_t i = tmpfs ? 2 : 0; i < n; i++)
        assert_int_equal(dt_get(s, NULL, i, 0, NULL), MC_OK);
    mc_disk_store_close(s);
}

static void test_disk_full(void **state)
{
    (void)state;
    const char *force = getenv("MC_TEST_DISK_FULL_RLIMIT"); /* 1 = skip the mount */
    if (!(force && strcmp(force, "1") == 0) &&
        mount("tmpfs", g_dir, "tmpfs", 0, "size=8m,mode=0700") == 0) {
        g_mounted = true;
        print_message("disk full: 8 MiB tmpfs mounted on %s\n", g_dir);
        full_scenario(true);
        return;
    }
    print_message("disk full: no mount (%s); RLIMIT_FSIZE of 8 MiB instead\n",
                  force ? "MC_TEST_DISK_FULL_RLIMIT=1" : strerror(errno));
    struct rlimit old, lim = {8 << 20, 8 << 20};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim.rlim_max = old.rlim_max;
    if (lim.rlim_max != RLIM_INFINITY && lim.rlim_max < lim.rlim_cur)
        lim.rlim_cur = lim.rlim_max;
    signal(SIGXFSZ, SIG_IGN); /* EFBIG instead of the signal */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    full_scenario(false);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
}

int main(void)
{
    dt_require_uring();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kill9, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill9_mid_value, setup, teardown),
        cmocka_unit_test_setup_teardown(test_kill9_mid_readmit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
