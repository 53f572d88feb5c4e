/* Replica hint table (src/client/replica_hint.h): exact keys, sets with least-recently-used
 * replacement, batch records and lookups, drop and clear, and a table that was never written
 * (its arrays are allocated by the first set) answering every call with a miss. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "client/replica_hint.h"

#include <stdio.h>
#include <string.h>

static mc_replica_hint_t hint(uint64_t addr)
{
    mc_replica_hint_t h = {.addr = addr, .size = 4096, .checksum = addr * 7};
    snprintf(h.endpoint, sizeof(h.endpoint), "127.0.0.1:%llu", (unsigned long long)addr);
    return h;
}

static void test_untouched_table_misses(void **state)
{
    (void)state;
    mc_hint_table_t *t = mc_hint_table_new(1024);
    assert_non_null(t);
    mc_replica_hint_t out;
    assert_false(mc_hint_get(t, "k", &out));
    const char *keys[3] = {"a", NULL, "b"};
    mc_replica_hint_t outs[3];
    bool hit[3] = {true, true, true};
    mc_hint_get_many(t, 3, keys, outs, hit);
    assert_false(hit[0] || hit[1] || hit[2]);
    mc_hint_drop(t, "k");
    mc_hint_clear(t);
    mc_hint_table_free(t);
    assert_null(mc_hint_table_new(0));
    mc_hint_table_free(NULL);
}

static void test_set_get_exact(void **state)
{
    (void)state;
    mc_hint_table_t *t = mc_hint_table_new(4096);
    char key[64];
    for (uint64_t i = 1; i <= 1000; i++) {
        snprintf(key, sizeof(key), "model@0@w@%llu@bf16", (unsigned long long)i);
        mc_replica_hint_t h = hint(i);
        mc_hint_set(t, key, &h);
    }
    mc_replica_hint_t out;
    int hits = 0;
    for (uint64_t i = 1; i <= 1000; i++) {
        snprintf(key, sizeof(key), "model@0@w@%llu@bf16", (unsigned long long)i);
        /* 1000 keys in 512 sets of 8: a set may overflow, but a hit is always this key's */
        if (mc_hint_get(t, key, &out)) {
            mc_replica_hint_t want = hint(i);
            assert_memory_equal(&out, &want, sizeof(out));
            hits++;
        }
    }
    assert_true(hits >= 990);
    assert_false(mc_hint_get(t, "model@0@w@1@bf1", &out)); /* a prefix is another key */
    /* replacing keeps one entry per key, with the new value */
    mc_replica_hint_t h = hint(99999);
    mc_hint_set(t, "model@0@w@5@bf16", &h);
    assert_true(mc_hint_get(t, "model@0@w@5@bf16", &out));
    assert_int_equal(out.addr, 99999);
    mc_hint_drop(t, "model@0@w@5@bf16");
    assert_false(mc_hint_get(t, "model@0@w@5@bf16", &out));
    mc_hint_set(t, "model@0@w@5@bf16", &h); /* a dropped key can come back */
    assert_true(mc_hint_get(t, "model@0@w@5@bf16", &out));
    mc_hint_clear(t);
    assert_false(mc_hint_get(t, "model@0@w@5@bf16", &out));
    mc_hint_table_free(t);
}

/* One set (8 entries): the 9th key pushes out the least recently used, and a get counts as a
 * use. */
static void test_lru_within_set(void **state)
{
    (void)state;
    mc_hint_table_t *t = mc_hint_table_new(MC_HINT_WAYS);
    char key[32];
    for (int i = 0; i < MC_HINT_WAYS; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        mc_replica_hint_t h = hint((uint64_t)i + 1);
        mc_hint_set(t, key, &h);
    }
    mc_replica_hint_t out;
    assert_true(mc_hint_get(t, "key-0", &out)); /* key-1 is now the least recent */
    mc_replica_hint_t h = hint(100);
    mc_hint_set(t, "key-new", &h);
    assert_false(mc_hint_get(t, "key-1", &out));
    assert_true(mc_hint_get(t, "key-0", &out));
    assert_int_equal(out.addr, 1);
    for (int i = 2; i < MC_HINT_WAYS; i++) {
        snprintf(key, sizeof(key), "key-%d", i);
        assert_true(mc_hint_get(t, key, &out));
        assert_int_equal(out.addr, (uint64_t)i + 1);
    }
    assert_true(mc_hint_get(t, "key-new", &out));
    /* a longer key reuses a shorter one's slot (the owned copy grows) */
    char long_key[300];
    memset(long_key, 'x', sizeof(long_key) - 1);
    long_key[sizeof(long_key) - 1] = '\0';
    mc_hint_set(t, long_key, &h);
    assert_true(mc_hint_get(t, long_key, &out));
    mc_hint_table_free(t);
}

static void test_get_many(void **state)
{
    (void)state;
    mc_hint_table_t *t = mc_hint_table_new(1 << 16);
    enum { N = 200 };
    char names[N][32];
    const char *keys[N], *set_keys[N];
    mc_replica_hint_t set_hints[N];
    size_t n_set = 0;
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "blk-%d", i);
        keys[i] = names[i];
        if (i % 3 != 0) { /* every third key is never set */
            set_keys[n_set] = keys[i];
            set_hints[n_set++] = hint((uint64_t)i + 1);
        }
    }
    /* a hint whose endpoint has no NUL is not recorded */
    set_keys[n_set] = "bad-endpoint";
    set_hints[n_set] = hint(5);
    memset(set_hints[n_set++].endpoint, 'e', MC_HINT_ENDPOINT_MAX);
    mc_hint_set_many(t, n_set, set_keys, set_hints);
    mc_replica_hint_t bad;
    assert_false(mc_hint_get(t, "bad-endpoint", &bad));
    keys[7] = NULL;
    mc_replica_hint_t out[N];
    bool hit[N];
    mc_hint_get_many(t, N, keys, out, hit);
    for (int i = 0; i < N; i++) {
        bool want = i != 7 && i % 3 != 0;
        assert_int_equal(hit[i], want);
        if (want)
            assert_int_equal(out[i].addr, (uint64_t)i + 1);
    }
    mc_hint_table_free(t);
}

/* Entries name their endpoint by its place in the table's endpoint list (4096 at most): with
 * the list full, a hint for a new endpoint is not recorded, and the key's older hint (and its
 * lease) goes too, while hints for listed endpoints still are; every endpoint reads back
 * exactly. */
static void test_endpoint_list_full(void **state)
{
    (void)state;
    mc_hint_table_t *t = mc_hint_table_new(1 << 16);
    char key[32];
    for (uint64_t i = 1; i <= 4096; i++) { /* 4096 endpoints: the list is full */
        snprintf(key, sizeof(key), "ep-%llu", (unsigned long long)i);
        mc_replica_hint_t h = hint(i);
        mc_hint_set(t, key, &h);
    }
    mc_replica_hint_t leased = hint(17), out;
    leased.lease_until_ms = 12345;
    mc_hint_set(t, "k", &leased);
    assert_true(mc_hint_get(t, "k", &out));
    assert_memory_equal(&out, &leased, sizeof(out));
    mc_replica_hint_t fresh = hint(5000); /* a 4097th endpoint */
    mc_hint_set(t, "k", &fresh);
    assert_false(mc_hint_get(t, "k", &out)); /* neither the new hint nor the old lease */
    mc_hint_set(t, "k", &leased);            /* a listed endpoint: recorded */
    assert_true(mc_hint_get(t, "k", &out));
    assert_memory_equal(&out, &leased, sizeof(out));
    mc_hint_table_free(t);
}

/* Keys under 79 bytes are kept in the entry, longer ones on the heap: keys on either side of
 * that length that differ only in their last byte each find their own hint, and a way taken
 * over by a key of the other kind (one set of 8: every new key evicts) answers for the new key
 * only. */
static void test_key_lengths(void **state)
{
    (void)state;
    mc_hint_table_t *t = mc_hint_table_new(8); /* one set */
    /* per round, the key lengths of its 8 keys (a key takes the way of the one 8 before it):
     * inline over longer inline, heap over inline, inline over heap, both sides of 79 */
    static const size_t lens[3][8] = {{78, 77, 60, 50, 80, 90, 100, 120},
                                      {40, 30, 78, 70, 20, 10, 79, 200},
                                      {77, 78, 5, 1, 120, 80, 60, 50}};
    char keys[24][256];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 8; i++) {
            int k = round * 8 + i;
            size_t len = lens[round][i];
            memset(keys[k], 'k', len);
            keys[k][len - 1] = (char)('a' + k); /* differs in the last byte only */
            keys[k][len] = '\0';
            mc_replica_hint_t h = hint((uint64_t)k + 1);
            mc_hint_set(t, keys[k], &h);
        }
        for (int i = 0; i < 8; i++) {
            int k = round * 8 + i;
            mc_replica_hint_t out, want = hint((uint64_t)k + 1);
            assert_true(mc_hint_get(t, keys[k], &out));
            assert_memory_equal(&out, &want, sizeof(out));
            if (round > 0) /* the previous round's keys were evicted */
                assert_false(mc_hint_get(t, keys[k - 8], &out));
        }
    }
    mc_hint_table_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_untouched_table_misses),
        cmocka_unit_test(test_set_get_exact),
        cmocka_unit_test(test_lru_within_set),
        cmocka_unit_test(test_get_many),
        cmocka_unit_test(test_endpoint_list_full),
        cmocka_unit_test(test_key_lengths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
