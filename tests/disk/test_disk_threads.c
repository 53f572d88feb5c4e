/* The disk store under concurrency (also run under TSan): reader threads read random keys in
 * batches, some with deadlines so short that reads are abandoned and reaped by other calls,
 * while a writer puts (small capacity: buckets are evicted under the readers, the objects they
 * read copied to the open bucket first: the second chance) and a remover removes. No read may ever return wrong bytes or a checksum error; the counts add up. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/time.h"
#include "disk_test.h"
#include "support/test_util.h"

#include <pthread.h>
#include <stdatomic.h>

enum { NKEYS = 600, READERS = 3, READS = 300 };

static char g_dir[256];
static mc_disk_store_t *g_s;
static atomic_ulong g_written;
static atomic_ulong g_wrong;
static atomic_ulong g_evicted;

static size_t tsize(uint64_t i)
{
    return (size_t)(i * 4099 % 60000) + 1;
}

static void on_evict(uint64_t id, const mc_disk_obj_t *objs, size_t n, void *arg)
{
    (void)id;
    (void)objs;
    (void)arg;
    atomic_fetch_add(&g_evicted, n);
}

static void *reader(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg * 7919 + 1;
    enum { B = 8 };
    uint8_t *bufs = aligned_alloc(4096, (size_t)B * 65536);
    char keys[B][64];
    uint64_t ids[B];
    for (int it = 0; it < READS || atomic_load(&g_written) < NKEYS; it++) {
        mc_disk_read_t r[B];
        uint64_t w = atomic_load(&g_written);
        for (int j = 0; j < B; j++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            ids[j] = w ? (seed >> 33) % w : 0;
            dt_key(keys[j], sizeof(keys[j]), ids[j]);
            r[j] = (mc_disk_read_t){.key = keys[j], .key_len = strlen(keys[j]),
                                    .buf = bufs + (size_t)j * 65536, .cap = 65536};
        }
        uint64_t dl = it % 3 == 0 ? 0 : mc_now_ns() + (it % 3 == 1 ? 20000 : 2000000000ull);
        if (mc_disk_store_read_batch(g_s, r, B, dl) != MC_OK)
            atomic_fetch_add(&g_wrong, 1);
        for (int j = 0; j < B; j++) {
            mc_status_t st = r[j].status;
            if (st == MC_OK) {
                uint8_t *want = dt_value(r[j].len, ids[j]);
                if (r[j].len != tsize(ids[j]) || memcmp(want, r[j].buf, r[j].len) != 0)
                    atomic_fetch_add(&g_wrong, 1);
                free(want);
            } else if (st != MC_ERR_OBJECT_NOT_FOUND && st != MC_ERR_TIMEOUT) {
                atomic_fetch_add(&g_wrong, 1);
            }
        }
    }
    free(bufs);
    return NULL;
}

static void *writer(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; i < NKEYS; i++) {
        if (dt_put(g_s, NULL, i, tsize(i)) != MC_OK)
            atomic_fetch_add(&g_wrong, 1);
        atomic_store(&g_written, i + 1);
    }
    return NULL;
}

static void *remover(void *arg)
{
    (void)arg;
    for (uint64_t i = 0; i < NKEYS; i += 5) {
        while (atomic_load(&g_written) <= i)
            sched_yield();
        char k[64];
        dt_key(k, sizeof(k), i);
        mc_status_t st = mc_disk_store_remove(g_s, NULL, k, strlen(k));
        if (st != MC_OK && st != MC_ERR_OBJECT_NOT_FOUND) /* evicted first */
            atomic_fetch_add(&g_wrong, 1);
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    (void)state;
    assert_int_equal(mt_tmpdir(g_dir, sizeof(g_dir)), 0);
    mc_disk_config_t c;
    dt_config(&c);
    c.total_size_limit = 8 << 20;
    c.bucket_size_limit = 512 << 10;
    c.on_evict = on_evict;
    assert_int_equal(mc_disk_store_open(g_dir, &c, &g_s), MC_OK);
    pthread_t th[READERS + 2];
    for (int i = 0; i < READERS; i++)
        assert_int_equal(pthread_create(&th[i], NULL, reader, (void *)(uintptr_t)(i + 1)), 0);
    assert_int_equal(pthread_create(&th[READERS], NULL, writer, NULL), 0);
    assert_int_equal(pthread_create(&th[READERS + 1], NULL, remover, NULL), 0);
    for (int i = 0; i < READERS + 2; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(atomic_load(&g_wrong), 0);
    mc_disk_stats_t st;
    mc_disk_store_stats(g_s, &st);
    assert_int_equal(st.puts, NKEYS);
    assert_true(st.evicted_buckets > 0);
    assert_int_equal(st.evicted_objects, atomic_load(&g_evicted));
    assert_int_equal(st.objects + st.evicted_objects + st.removes, NKEYS);
    assert_int_equal(st.checksum_failures, 0);
    print_message("reads %llu (%llu bytes), timeouts %llu, late completions %llu, evicted buckets "
                  "%llu, second-chance copies %llu\n",
                  (unsigned long long)st.reads, (unsigned long long)st.read_bytes,
                  (unsigned long long)st.read_timeouts, (unsigned long long)st.late_completions,
                  (unsigned long long)st.evicted_buckets, (unsigned long long)st.readmitted_objects);
    assert_true(st.readmitted_objects > 0); /* read objects were copied under the readers */
    assert_true(st.read_bytes > 0);
    assert_true(st.bytes_on_disk <= c.total_size_limit);
    mc_disk_store_close(g_s);
    mt_rmdir(g_dir);
}

int main(void)
{
    dt_require_uring();
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_concurrent)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
