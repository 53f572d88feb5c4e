/* Tenant quotas in the master core (strict multi-tenant mode): registration, the charge of
 * memory replicas (in-flight ones included, every replica), eviction of the tenant's own
 * objects before refusing, TENANT_QUOTA_EXCEEDED / TENANT_NOT_REGISTERED / TENANT_NOT_EMPTY,
 * refunds on revoke and remove, and usage rebuilt by WAL recovery. Keys are internal keys
 * (common/tenant.h), as the RPC layer hands them to the core. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "policy_env.h"
#include "common/alloc.h"
#include "master/master.h"
#include "master/tenant_policy.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static uint64_t g_now = 1000000;
static uint64_t fake_clock(void *ctx)
{
    (void)ctx;
    return g_now;
}

static const uint8_t CA[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
static const uint8_t CB[16] = {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2};

static mc_master_t *mk(bool strict, const char *wal_dir)
{
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    cfg.clock = fake_clock;
    cfg.multi_tenants = strict;
    cfg.wal_dir = wal_dir;
    cfg.wal_fsync = false;
    cfg.default_kv_lease_ttl_ms = 100;
    mc_master_t *m;
    test_policy_from_env(&cfg);
    assert_int_equal(mc_master_create(&cfg, &m), MC_OK);
    mc_master_set_seed(m, 7);
    return m;
}

static void mount(mc_master_t *m, const uint8_t *cid, const char *name, uint64_t base,
                  const char *label, uint8_t uuid_byte)
{
    mc_master_segment_info_t si = {.name = name, .base = base, .size = 1 << 20,
                                   .host_label = label, .te_endpoint = name};
    memset(si.uuid, uuid_byte, 16);
    assert_int_equal(mc_master_mount(m, cid, &si, false), MC_OK);
}

/* tenant's internal key for user key k (static buffer per call site: copy if kept) */
static const char *ik(const char *tenant, const char *k, size_t *len_p)
{
    static char buf[8][256];
    static int slot;
    char *b = buf[slot++ % 8];
    mc_tenant_scope_t sc;
    mc_tenant_scope_init(&sc, tenant);
    *len_p = mc_tenant_key(&sc, k, strlen(k), b, 256);
    return b;
}

static mc_status_t put_start(mc_master_t *m, const char *tenant, const char *k, uint64_t size,
                             uint32_t replicas)
{
    size_t kl;
    const char *key = ik(tenant, k, &kl);
    mc_master_put_opts_t o = {.replica_num = replicas};
    mc_master_replica_t r[8];
    uint32_t n;
    return mc_master_put_start(m, CA, key, kl, size, &o, false, r, &n);
}

static mc_status_t put(mc_master_t *m, const char *tenant, const char *k, uint64_t size)
{
    mc_status_t st = put_start(m, tenant, k, size, 1);
    if (st != MC_OK)
        return st;
    size_t kl;
    const char *key = ik(tenant, k, &kl);
    return mc_master_put_end(m, CA, key, kl, 0);
}

static mc_master_tenant_info_t info(mc_master_t *m, const char *tenant)
{
    mc_master_tenant_info_t t;
    memset(&t, 0, sizeof(t));
    mc_status_t st = mc_master_tenant_get(m, tenant, &t);
    assert_true(st == MC_OK || st == MC_ERR_OBJECT_NOT_FOUND);
    return t;
}

static void test_off_by_default(void **state)
{
    (void)state;
    mc_master_t *m = mk(false, NULL);
    mount(m, CA, "segA", 0x100000, "hA", 1);
    assert_int_equal(mc_master_tenant_set_quota(m, "a", 1000), MC_ERR_UNAVAILABLE_IN_CURRENT_MODE);
    assert_int_equal(put(m, "a", "k", 5000), MC_OK); /* no quota, no registration */
    assert_int_equal(put(m, NULL, "k", 5000), MC_OK);
    assert_int_equal(info(m, "a").used, 0);          /* nothing kept */
    mc_master_destroy(m);
}

static void test_registration_and_charge(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, NULL);
    mount(m, CA, "segA", 0x100000, "hA", 1);
    mount(m, CB, "segB", 0x900000, "hB", 2);
    assert_int_equal(put(m, NULL, "k", 100), MC_ERR_TENANT_NOT_REGISTERED); /* default too */
    assert_int_equal(put(m, "a", "k", 100), MC_ERR_TENANT_NOT_REGISTERED);
    assert_int_equal(mc_master_tenant_set_quota(m, "a", 0), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_tenant_set_quota(m, "_a", 10), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_tenant_set_quota(m, "a", MC_MASTER_TENANT_QUOTA_MAX + 1),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_master_tenant_set_quota(m, "a", 10000), MC_OK);
    /* in flight: charged from PutStart, every replica */
    assert_int_equal(put_start(m, "a", "two", 1000, 2), MC_OK);
    assert_int_equal(info(m, "a").used, 2000);
    assert_int_equal(info(m, "a").objects, 1);
    size_t kl;
    const char *key = ik("a", "two", &kl);
    assert_int_equal(mc_master_put_revoke(m, CA, key, kl), MC_OK); /* refunded */
    assert_int_equal(info(m, "a").used, 0);
    assert_int_equal(info(m, "a").objects, 0);
    assert_int_equal(put(m, "a", "k1", 4000), MC_OK);
    assert_int_equal(put(m, "a", "k2", 4000), MC_OK);
    assert_int_equal(info(m, "a").used, 8000);
    /* a put over the quota: too big even for an empty tenant -> refused, nothing evicted */
    assert_int_equal(put(m, "a", "huge", 10001), MC_ERR_TENANT_QUOTA_EXCEEDED);
    assert_int_equal(info(m, "a").rejects, 1);
    assert_int_equal(info(m, "a").used, 8000);
    key = ik("a", "k1", &kl);
    assert_int_equal(mc_master_remove(m, key, kl, true, NULL), MC_OK);
    assert_int_equal(info(m, "a").used, 4000);
    /* the quota goes while it owns objects: refused; once empty: dropped */
    assert_int_equal(mc_master_tenant_clear_quota(m, "a"), MC_ERR_TENANT_NOT_EMPTY);
    assert_int_equal(mc_master_tenant_clear_quota(m, "b"), MC_ERR_OBJECT_NOT_FOUND);
    uint64_t cnt = 0;
    mc_tenant_scope_t sc;
    mc_tenant_scope_init(&sc, "a");
    assert_int_equal(mc_master_remove_scoped(m, &sc, NULL, true, &cnt, NULL), MC_OK);
    assert_int_equal(cnt, 1);
    assert_int_equal(info(m, "a").used, 0);
    assert_int_equal(mc_master_tenant_clear_quota(m, "a"), MC_OK);
    mc_master_tenant_info_t t;
    assert_int_equal(mc_master_tenant_get(m, "a", &t), MC_ERR_OBJECT_NOT_FOUND);
    assert_int_equal(put(m, "a", "k", 100), MC_ERR_TENANT_NOT_REGISTERED);
    mc_master_destroy(m);
}

/* Over quota: the tenant's own least recently used evictable objects go first; other tenants'
 * objects and its leased or hard-pinned ones stay. */
static void test_quota_evicts_own_objects(void **state)
{
    (void)state;
    mc_master_t *m = mk(true, NULL);
    mount(m, CA, "segA", 0x100000, "hA", 1);
    assert_int_equal(mc_master_tenant_set_quota(m, "a", 3000), MC_OK);
    assert_int_equal(mc_master_tenant_set_quota(m, "b", 100000), MC_OK);
    assert_int_equal(put(m, "b", "b1", 1000), MC_OK); /* older than a's: would go first */
    assert_int_equal(put(m, "a", "a1", 1000), MC_OK);
    assert_int_equal(put(m, "a", "a2", 1000), MC_OK);
    assert_int_equal(put(m, "a", "a3", 1000), MC_OK);
    assert_int_equal(put(m, "a", "a4", 1500), MC_OK); /* evicts a1 and a2 (LRU) */
    size_t kl;
    const char *key = ik("a", "a1", &kl);
    assert_int_equal(mc_master_exist(m, key, kl), MC_ERR_OBJECT_NOT_FOUND);
    key = ik("a", "a2", &kl);
    assert_int_equal(mc_master_exist(m, key, kl), MC_ERR_OBJECT_NOT_FOUND);
    key = ik("a", "a3", &kl);
    assert_int_equal(mc_master_exist(m, key, kl), MC_OK);
    key = ik("b", "b1", &kl);
    assert_int_equal(mc_master_exist(m, key, kl), MC_OK);
    assert_int_equal(info(m, "a").used, 2500);
    assert_int_equal(info(m, "a").rejects, 0);
    /* leased objects are not evicted: a3 and a4 read now, so a 1000-byte put cannot fit */
    mc_master_replica_t r[8];
    uint32_t n;
    key = ik("a", "a3", &kl);
    assert_int_equal(mc_master_get_replicas(m, key, kl, r, &n, NULL, NULL), MC_OK);
    key = ik("a", "a4", &kl);
    assert_int_equal(mc_master_get_replicas(m, key, kl, r, &n, NULL, NULL), MC_OK);
    assert_int_equal(put(m, "a", "a5", 1000), MC_ERR_TENANT_QUOTA_EXCEEDED);
    assert_int_equal(info(m, "a").rejects, 1);
    g_now += 1000; /* leases over */
    assert_int_equal(put(m, "a", "a5", 1000), MC_OK);
    assert_true(info(m, "a").used <= 3000);
    mc_master_tenant_info_t *list = NULL;
    size_t nt = 0;
    assert_int_equal(mc_master_tenant_list(m, &list, &nt), MC_OK);
    assert_int_equal(nt, 2);
    assert_string_equal(list[0].name, "a");
    assert_string_equal(list[1].name, "b");
    assert_int_equal(list[1].used, 1000);
    mc_free(list);
    mc_master_cron(m); /* publishes */
    assert_int_equal(mc_master_tenant_metrics_snapshot(m, &list, &nt), MC_OK);
    assert_int_equal(nt, 2);
    assert_int_equal(list[0].rejects, 1);
    mc_free(list);
    mc_master_destroy(m);
}

/* Usage comes back with the objects WAL recovery restores (quotas are the policy's, set again
 * after start). */
static void test_usage_after_recovery(void **state)
{
    (void)state;
    char dir[] = "/tmp/mc_master_tenants_XXXXXX";
    assert_non_null(mkdtemp(dir));
    mc_master_t *m = mk(true, dir);
    mount(m, CA, "segA", 0x100000, "hA", 1);
    assert_int_equal(mc_master_tenant_set_quota(m, "a", 100000), MC_OK);
    assert_int_equal(put(m, "a", "k1", 1000), MC_OK);
    assert_int_equal(put(m, "a", "k2", 3000), MC_OK);
    assert_int_equal(mc_master_wal_sync(m), MC_OK);
    mc_master_destroy(m);
    m = mk(true, dir);
    mc_master_tenant_info_t t = info(m, "a");
    assert_int_equal(t.used, 4000);
    assert_int_equal(t.objects, 2);
    assert_int_equal(t.quota, 0);
    assert_int_equal(mc_master_tenant_clear_quota(m, "a"), MC_ERR_OBJECT_NOT_FOUND);
    mc_master_destroy(m);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
}

static void test_policy_parse(void **state)
{
    (void)state;
    const char *ok = "# tenants of the cluster\n"
                     "version: 1\n"
                     "\n"
                     "tenants:\n"
                     "  - name: tenant-a   # comment\n"
                     "    quota: 200GB\n"
                     "\n"
                     "  - quota: 1KB\n"
                     "    name: \"b \\\"x\\\"\"\n"
                     "  - name: 'c''d'\n"
                     "    quota: 42\n";
    mc_tenant_policy_t pol;
    char err[256] = "";
    assert_int_equal(mc_tenant_policy_parse(ok, strlen(ok), &pol, err, sizeof(err)), MC_OK);
    assert_int_equal(pol.n, 3);
    assert_string_equal(pol.t[0].name, "tenant-a");
    assert_int_equal(pol.t[0].quota, 200ull << 30);
    assert_string_equal(pol.t[1].name, "b \"x\"");
    assert_int_equal(pol.t[1].quota, 1024);
    assert_string_equal(pol.t[2].name, "c'd");
    assert_int_equal(pol.t[2].quota, 42);
    /* written back and read again: the same */
    char path[] = "/tmp/mc_tenant_policy_XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(mc_tenant_policy_save(path, pol.t, pol.n), MC_OK);
    mc_tenant_policy_t back;
    assert_int_equal(mc_tenant_policy_load(path, &back, err, sizeof(err)), MC_OK);
    assert_int_equal(back.n, 3);
    for (size_t i = 0; i < 3; i++) {
        assert_string_equal(back.t[i].name, pol.t[i].name);
        assert_int_equal(back.t[i].quota, pol.t[i].quota);
    }
    mc_tenant_policy_free(&back);
    assert_int_equal(mc_tenant_policy_save(path, NULL, 0), MC_OK); /* empty: "tenants: []" */
    assert_int_equal(mc_tenant_policy_load(path, &back, err, sizeof(err)), MC_OK);
    assert_int_equal(back.n, 0);
    unlink(path);
    assert_int_equal(mc_tenant_policy_load(path, &back, err, sizeof(err)), MC_ERR_FILE_OPEN_FAIL);
    mc_tenant_policy_free(&pol);
    const char *flush = "version: 1\ntenants:\n- name: a\n  quota: 1\n";
    assert_int_equal(mc_tenant_policy_parse(flush, strlen(flush), &pol, err, sizeof(err)), MC_OK);
    assert_int_equal(pol.n, 1);
    mc_tenant_policy_free(&pol);

    static const struct { const char *text, *why; } bad[] = {
        {"tenants: []\n", "version: 1"},
        {"version: 2\n", "unsupported version"},
        {"version: 1\nversion: 1\n", "twice"},
        {"version: 1\nowner: x\n", "unknown key"},
        {"version: 1\ntenants: [{name: a, quota: 1}]\n", "block list"},
        {"version: 1\ntenants:\n  - name: a\n", "both name and quota"},
        {"version: 1\ntenants:\n  - name: a\n    quota: 0\n", "1 byte"},
        {"version: 1\ntenants:\n  - name: a\n    quota: 10PB\n", "unit"},
        {"version: 1\ntenants:\n  - name: a\n    quota: -1\n", "positive integer"},
        {"version: 1\ntenants:\n  - name: a\n    quota: 99999999999TB\n", "2^63-1"},
        {"version: 1\ntenants:\n  - name: _a\n    quota: 1\n", "invalid"},
        {"version: 1\ntenants:\n  - name: \"\"\n    quota: 1\n", "empty"},
        {"version: 1\ntenants:\n  - name: a\n    quota: 1\n  - name: a\n    quota: 2\n",
         "twice"},
        {"version: 1\ntenants:\n  - name: a\n    quota: 1\n    owner: me\n", "unknown tenant field"},
        {"version: 1\ntenants:\n  - name: a\n      quota: 1\n", "line up"},
        {"version: 1\ntenants:\n\t- name: a\n", "tabs"},
        {"version: 1\ntenants:\n  - name: \"a\n    quota: 1\n", "unterminated"},
        {"version: 1\ntenants:\n  - name: &x a\n    quota: 1\n", "not supported"},
        {"version: 1\n  indented: 1\n", "indentation"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err[0] = 0;
        assert_int_equal(mc_tenant_policy_parse(bad[i].text, strlen(bad[i].text), &pol, err,
                                                sizeof(err)),
                         MC_ERR_INVALID_PARAMS);
        if (!strstr(err, bad[i].why))
            fail_msg("case %zu: '%s' lacks '%s'", i, err, bad[i].why);
        assert_int_equal(pol.n, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_by_default),
        cmocka_unit_test(test_registration_and_charge),
        cmocka_unit_test(test_quota_evicts_own_objects),
        cmocka_unit_test(test_usage_after_recovery),
        cmocka_unit_test(test_policy_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
