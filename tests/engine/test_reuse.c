/* mc_engine prefix reuse against a real mooncake_master and storage server: a request sharing a
 * prefix with an earlier one fetches those blocks (fewer tokens prefilled) and its logits and
 * decoded tokens are bit-identical to a run without the store; a missing or corrupted middle
 * block makes it recompute from there (still identical); another model never reuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/net.h"
#include "engine/pd.h"
#include "engine/reuse.h"
#include "mooncake/store.h"
#include "support/test_util.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define B 16
#define N_DECODE 8

static char dir[256], master_addr[64];
static pid_t master_pid, server_pid;
static mc_store_t *store;
static mc_engine_model_t *model;

static pid_t start(char *const argv[], const char *log, const char *ready)
{
    pid_t pid = mt_spawn(argv, log);
    assert_true(pid > 0);
    assert_int_equal(mt_wait_log(log, ready, 10000), 0);
    return pid;
}

static int setup(void **state)
{
    uint16_t port;
    assert_int_equal(mt_tmpdir(dir, sizeof(dir)), 0);
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    snprintf(master_addr, sizeof(master_addr), "127.0.0.1:%u", port);
    char bin[512], p[32], wal[300], log[300], m[128];
    mt_bin_path("mooncake_master", bin, sizeof(bin));
    snprintf(p, sizeof(p), "--port=%u", port);
    snprintf(wal, sizeof(wal), "--wal_dir=%s", dir);
    snprintf(log, sizeof(log), "%s/master.log", dir);
    char *margv[] = {bin, p, "--metrics_port=0", wal, NULL};
    master_pid = start(margv, log, "mooncake_master listening");
    mt_bin_path("mooncake_client", bin, sizeof(bin));
    snprintf(m, sizeof(m), "--master_server_address=%s", master_addr);
    snprintf(log, sizeof(log), "%s/server.log", dir);
    char *sargv[] = {bin, m, "--global_segment_size=64MB", "--local_hostname=127.0.0.1", NULL};
    server_pid = start(sargv, log, "mooncake_client ready");
    mc_store_config_t cfg = {.local_hostname = "127.0.0.1", .metadata_server = "P2PHANDSHAKE",
                             .local_buffer_size = 16u << 20, .protocol = "tcp",
                             .master_server_addr = master_addr, .transfer_timeout_ms = 2000};
    assert_int_equal(mc_store_create(&cfg, &store), MC_OK);
    mc_engine_config_t mc;
    mc_engine_config_tiny(&mc);
    assert_int_equal(mc_engine_model_seeded(&mc, 5, &model), MC_OK);
    return 0;
}

static int teardown(void **state)
{
    mc_engine_model_free(model);
    mc_store_destroy(store);
    mt_stop(server_pid, SIGTERM, 5000);
    mt_stop(master_pid, SIGTERM, 5000);
    mt_rmdir(dir);
    return 0;
}

typedef struct result {
    float logits[256];
    int32_t tokens[N_DECODE];
    mc_engine_reuse_stats_t stats;
} result_t;

/* One request: prefill (through the store when s is not NULL), then greedy decode. */
static void request_opts(const mc_engine_model_t *m, mc_store_t *s,
                         const mc_engine_reuse_opts_t *opts, const int32_t *prompt, uint32_t n,
                         result_t *r)
{
    mc_engine_t *e;
    mc_engine_kv_t *kv;
    assert_int_equal(mc_engine_create(m, 2, &e), MC_OK);
    assert_int_equal(mc_engine_kv_create(m, B, &kv), MC_OK);
    assert_int_equal(m->cfg.vocab_size, 256);
    uint64_t compat = mc_engine_compat_id(m, mc_engine_kernels_name(e), B, 0, 1);
    assert_int_equal(
        mc_engine_prefill_reuse_opts(e, kv, s, compat, opts, prompt, n, r->logits, &r->stats),
        MC_OK);
    assert_int_equal(mc_engine_decode(e, kv, r->logits, r->tokens, N_DECODE), MC_OK);
    mc_engine_kv_free(kv);
    mc_engine_destroy(e);
}

static void request_cost(const mc_engine_model_t *m, mc_store_t *s, const mc_engine_cost_t *cost,
                         const int32_t *prompt, uint32_t n, result_t *r)
{
    mc_engine_reuse_opts_t o = {.cost = cost};
    request_opts(m, s, &o, prompt, n, r);
}

static void request(const mc_engine_model_t *m, mc_store_t *s, const int32_t *prompt, uint32_t n,
                    result_t *r)
{
    request_cost(m, s, NULL, prompt, n, r);
}

static void assert_identical(const result_t *a, const result_t *b)
{
    assert_memory_equal(a->logits, b->logits, sizeof(a->logits));
    assert_memory_equal(a->tokens, b->tokens, sizeof(a->tokens));
}

static void make_prompt(int32_t *t, uint32_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (uint32_t i = 0; i < n; i++)
        t[i] = (int32_t)(mc_engine_splitmix64(&s) % 256);
}

static void block_key(const int32_t *prompt, uint32_t block, char key[MC_ENGINE_KV_KEY_MAX])
{
    uint64_t compat = mc_engine_compat_id(model, mc_engine_kernel_variant(), B, 0, 1),
             chain[16];
    mc_engine_chain_hashes(compat, prompt, B, block + 1, chain);
    mc_engine_kv_key(compat, chain[block], key);
}

static void test_prefix_reuse_identical(void **state)
{
    int32_t p1[150], p2[160];
    make_prompt(p1, 150, 1);
    memcpy(p2, p1, 128 * sizeof(int32_t)); /* 8 shared blocks, then a different tail */
    make_prompt(p2 + 128, 32, 2);
    static result_t ref1, ref2, r;
    request(model, NULL, p1, 150, &ref1);
    request(model, NULL, p2, 160, &ref2);

    request(model, store, p1, 150, &r); /* cold: computes all, stores the 9 full blocks */
    assert_int_equal(r.stats.tokens_reused, 0);
    assert_int_equal(r.stats.tokens_prefilled, 150);
    assert_int_equal(r.stats.blocks_put, 9);
    assert_identical(&ref1, &r);

    request(model, store, p2, 160, &r); /* shares 8 blocks */
    assert_int_equal(r.stats.blocks_found, 8);
    assert_int_equal(r.stats.tokens_reused, 128);
    assert_int_equal(r.stats.tokens_prefilled, 32);
    assert_int_equal(r.stats.blocks_put, 2);
    assert_identical(&ref2, &r);

    request(model, store, p1, 150, &r); /* all 9 full blocks (the last token is computed) */
    assert_int_equal(r.stats.tokens_reused, 144);
    assert_int_equal(r.stats.tokens_prefilled, 6);
    assert_identical(&ref1, &r);

    request(model, store, p2, 160, &r); /* 160 = 10 blocks: the last one is recomputed */
    assert_int_equal(r.stats.tokens_reused, 144);
    assert_int_equal(r.stats.tokens_prefilled, 16);
    assert_identical(&ref2, &r);
}

/* Per-instance keys: an instance reuses only what it stored itself; the chain hash stays the
 * key's last component (the conductor's block hash); a bad scope is refused. */
static void test_scoped_keys(void **state)
{
    (void)state;
    int32_t p[100];
    make_prompt(p, 100, 23); /* a prompt no other test uses */
    static result_t ref, r;
    request(model, NULL, p, 100, &ref);
    mc_engine_reuse_opts_t a = {.scope = "inst-a"}, b = {.scope = "inst_b"};
    request_opts(model, store, &a, p, 100, &r); /* cold: 6 blocks under inst-a's keys */
    assert_int_equal(r.stats.tokens_reused, 0);
    assert_int_equal(r.stats.blocks_put, 6);
    assert_identical(&ref, &r);
    request_opts(model, store, &b, p, 100, &r); /* another instance: its own cache is empty */
    assert_int_equal(r.stats.tokens_reused, 0);
    assert_int_equal(r.stats.blocks_put, 6);
    assert_identical(&ref, &r);
    request_opts(model, store, &a, p, 100, &r); /* the holder reuses */
    assert_int_equal(r.stats.tokens_reused, 96);
    assert_identical(&ref, &r);
    request(model, store, p, 100, &r); /* the shared keys were never written */
    assert_int_equal(r.stats.tokens_reused, 0);

    char key[MC_ENGINE_KV_KEY_MAX];
    mc_engine_kv_key_scoped(0x12, "inst-a", 0xabcdef0123456789ull, key);
    assert_string_equal(key, "mc_engine/0000000000000012/inst-a/abcdef0123456789");
    mc_engine_kv_key_scoped(0x12, "", 0x1, key);
    assert_string_equal(key, "mc_engine/0000000000000012/0000000000000001");
    assert_true(mc_engine_scope_valid(NULL));
    assert_true(mc_engine_scope_valid("abcdefghijklmnop"));  /* 16 */
    assert_false(mc_engine_scope_valid("abcdefghijklmnopq")); /* 17 */
    assert_false(mc_engine_scope_valid("a/b"));
    assert_false(mc_engine_scope_valid("a b"));
    mc_engine_t *e;
    mc_engine_kv_t *kv;
    assert_int_equal(mc_engine_create(model, 1, &e), MC_OK);
    assert_int_equal(mc_engine_kv_create(model, B, &kv), MC_OK);
    mc_engine_reuse_opts_t bad = {.scope = "a/b"};
    assert_int_equal(mc_engine_prefill_reuse_opts(e, kv, store, 1, &bad, p, 100, r.logits, &r.stats),
                     MC_ERR_INVALID_PARAMS);
    mc_engine_kv_free(kv);
    mc_engine_destroy(e);
}

static void test_missing_and_corrupt_blocks(void **state)
{
    int32_t p[150];
    make_prompt(p, 150, 3);
    static result_t ref, r;
    request(model, NULL, p, 150, &ref);
    request(model, store, p, 150, &r);
    assert_int_equal(r.stats.blocks_put, 9);

    char key[MC_ENGINE_KV_KEY_MAX];
    block_key(p, 3, key); /* a missing middle block: reuse blocks 0-2 only */
    assert_int_equal(mc_store_remove(store, key, true), MC_OK);
    request(model, store, p, 150, &r);
    assert_int_equal(r.stats.blocks_found, 3);
    assert_int_equal(r.stats.tokens_reused, 48);
    assert_int_equal(r.stats.tokens_prefilled, 102);
    assert_int_equal(r.stats.blocks_put, 6); /* block 3 again; 4..8 were there (create-once) */
    assert_identical(&ref, &r);

    /* a corrupted middle block (payload changed under a valid header): blocks 0-4 only */
    block_key(p, 5, key);
    void *val;
    size_t len;
    assert_int_equal(mc_store_get(store, key, &val, &len), MC_OK);
    assert_true(len > sizeof(mc_engine_kv_hdr_t));
    ((unsigned char *)val)[sizeof(mc_engine_kv_hdr_t) + 100] ^= 0x01;
    struct iovec iov = {val, len};
    assert_int_equal(mc_store_upsert(store, key, &iov, 1, NULL), MC_OK);
    request(model, store, p, 150, &r);
    assert_int_equal(r.stats.blocks_found, 9);
    assert_int_equal(r.stats.blocks_rejected, 4);
    assert_int_equal(r.stats.tokens_reused, 80);
    assert_identical(&ref, &r);
    /* that request replaced the bad block: the whole prefix is used again */
    request(model, store, p, 150, &r);
    assert_int_equal(r.stats.tokens_reused, 144);
    assert_identical(&ref, &r);

    /* a block stored under the wrong index in its header is refused too */
    mc_engine_kv_hdr_t *h = val;
    ((unsigned char *)val)[sizeof(mc_engine_kv_hdr_t) + 100] ^= 0x01; /* payload right again */
    h->block_index = 6;
    assert_int_equal(mc_store_upsert(store, key, &iov, 1, NULL), MC_OK);
    request(model, store, p, 150, &r);
    assert_int_equal(r.stats.tokens_reused, 80);
    assert_identical(&ref, &r);
    free(val);
}

static void test_other_model_never_reuses(void **state)
{
    int32_t p[150];
    make_prompt(p, 150, 4);
    static result_t r;
    request(model, store, p, 150, &r);
    assert_int_equal(r.stats.blocks_put, 9);
    mc_engine_config_t cfg;
    mc_engine_config_tiny(&cfg);
    mc_engine_model_t *other;
    assert_int_equal(mc_engine_model_seeded(&cfg, 6, &other), MC_OK); /* other weights */
    request(other, store, p, 150, &r);
    assert_int_equal(r.stats.tokens_reused, 0);
    mc_engine_model_free(other);
    /* another block size, TP rank or kernel variant gives another identity */
    const char *kv = mc_engine_kernel_variant();
    uint64_t id = mc_engine_compat_id(model, kv, B, 0, 1);
    assert_true(id != mc_engine_compat_id(model, kv, 32, 0, 1));
    assert_true(id != mc_engine_compat_id(model, kv, B, 1, 2));
    assert_true(id != mc_engine_compat_id(model, strcmp(kv, "portable") ? "portable" : "avx2-fma",
                                          B, 0, 1));
}

/* The cost model: a slow store (or a deadline too short for any block) means recompute, a
 * deadline fitting k blocks means k; the tokens and logits are the same bits either way. */
static void test_cost_model(void **state)
{
    mc_engine_cost_t c = {.store_bytes_per_ms = 1000, .obj_latency_ms = 1,
                          .prefill_tokens_per_ms = 1};
    double pf, pr;
    /* per block: fetch 1 + 2000/1000 = 3 ms, recompute 16 ms */
    assert_int_equal(mc_engine_cost_blocks_to_fetch(&c, 5, 16, 2000, &pf, &pr), 5);
    assert_true(pf == 15.0 && pr == 80.0);
    c.deadline_ms = 10; /* fits 3 blocks */
    assert_int_equal(mc_engine_cost_blocks_to_fetch(&c, 5, 16, 2000, &pf, &pr), 3);
    c.deadline_ms = 0;
    c.prefill_tokens_per_ms = 8; /* recompute 2 ms per block: cheaper */
    assert_int_equal(mc_engine_cost_blocks_to_fetch(&c, 5, 16, 2000, &pf, &pr), 0);
    mc_engine_cost_t unknown = {0};
    assert_int_equal(mc_engine_cost_blocks_to_fetch(&unknown, 5, 16, 2000, &pf, &pr), 5);

    int32_t p[150];
    make_prompt(p, 150, 7);
    static result_t ref, r;
    request(model, NULL, p, 150, &ref);
    request(model, store, p, 150, &r); /* stores the 9 full blocks */
    assert_int_equal(r.stats.blocks_put, 9);

    mc_engine_cost_t slow = {.store_bytes_per_ms = 1e-3, .prefill_tokens_per_ms = 1e3};
    request_cost(model, store, &slow, p, 150, &r);
    assert_int_equal(r.stats.blocks_found, 9);
    assert_int_equal(r.stats.blocks_skipped, 9);
    assert_int_equal(r.stats.tokens_reused, 0);
    assert_int_equal(r.stats.tokens_prefilled, 150);
    assert_int_equal(r.stats.blocks_put, 0); /* the skipped blocks stay as they are */
    assert_true(r.stats.predicted_fetch_ms > r.stats.predicted_recompute_ms);
    assert_identical(&ref, &r);

    mc_engine_cost_t deadline = {.obj_latency_ms = 1, .prefill_tokens_per_ms = 1e-3,
                                 .deadline_ms = 3.5};
    request_cost(model, store, &deadline, p, 150, &r);
    assert_int_equal(r.stats.blocks_skipped, 6);
    assert_int_equal(r.stats.tokens_reused, 48);
    assert_identical(&ref, &r);

    /* measured rates on this store: all positive, and with them this tiny model's prefill of a
     * 16-token block is compared with a real fetch (either choice gives the same bits) */
    mc_engine_t *e;
    assert_int_equal(mc_engine_create(model, 2, &e), MC_OK);
    mc_engine_cost_t meas = {0};
    assert_int_equal(mc_engine_cost_calibrate(e, store, B, 4, &meas), MC_OK);
    mc_engine_destroy(e);
    assert_true(meas.prefill_tokens_per_ms > 0);
    assert_true(meas.store_bytes_per_ms > 0);
    assert_true(meas.obj_latency_ms >= 0);
    request_cost(model, store, &meas, p, 150, &r);
    assert_int_equal(r.stats.tokens_reused + r.stats.tokens_prefilled, 150);
    assert_identical(&ref, &r);
}

/* One request handed from a prefill engine to a decode engine through the store. */
static mc_status_t pd_request(uint64_t req, const int32_t *prompt, uint32_t n, uint32_t block,
                              result_t *r, mc_engine_pd_stats_t *ps)
{
    mc_engine_t *e;
    mc_engine_kv_t *kv;
    int32_t *got = NULL;
    assert_int_equal(mc_engine_create(model, 2, &e), MC_OK);
    assert_int_equal(mc_engine_kv_create(model, block, &kv), MC_OK);
    uint64_t compat = mc_engine_compat_id(model, mc_engine_kernels_name(e), block, 0, 1);
    mc_status_t st = mc_engine_pd_receive(e, kv, store, compat, req, 500, &got, r->logits, ps);
    if (st == MC_OK) {
        assert_int_equal(ps->n_tokens, n);
        assert_memory_equal(got, prompt, n * sizeof(int32_t));
        assert_int_equal(mc_engine_decode(e, kv, r->logits, r->tokens, N_DECODE), MC_OK);
    }
    free(got);
    mc_engine_kv_free(kv);
    mc_engine_destroy(e);
    return st;
}

static void pd_prefill(uint64_t req, const int32_t *prompt, uint32_t n)
{
    mc_engine_t *e;
    mc_engine_kv_t *kv;
    static float logits[256];
    mc_engine_reuse_stats_t rs;
    assert_int_equal(mc_engine_create(model, 1, &e), MC_OK);
    assert_int_equal(mc_engine_kv_create(model, B, &kv), MC_OK);
    uint64_t compat = mc_engine_compat_id(model, mc_engine_kernels_name(e), B, 0, 1);
    assert_int_equal(
        mc_engine_pd_prefill(e, kv, store, compat, NULL, req, prompt, n, logits, &rs), MC_OK);
    mc_engine_kv_free(kv);
    mc_engine_destroy(e);
}

/* Disaggregated prefill/decode gives the colocated bits: with a tail block, without one, with
 * the tail corrupted (recomputed); a decode side of another layout refuses the hand-off; a
 * request never prefilled times out; the request-scoped keys are gone after the hand-off. */
static void test_pd_handoff(void **state)
{
    int32_t p[200];
    make_prompt(p, 200, 11);
    static result_t ref, ref192, r;
    mc_engine_pd_stats_t ps;
    request(model, NULL, p, 200, &ref); /* colocated, no store */
    request(model, NULL, p, 192, &ref192);

    pd_prefill(101, p, 200); /* 12 blocks + an 8-token tail */
    assert_int_equal(pd_request(101, p, 200, B, &r, &ps), MC_OK);
    assert_int_equal(ps.tokens_fetched, 200);
    assert_int_equal(ps.tokens_recomputed, 0);
    assert_identical(&ref, &r);
    uint64_t compat = mc_engine_compat_id(model, mc_engine_kernel_variant(), B, 0, 1);
    char key[MC_ENGINE_KV_KEY_MAX];
    mc_engine_pd_key(compat, 101, "tail", key);
    assert_int_equal(mc_store_exists(store, key), 0);
    mc_engine_pd_key(compat, 101, "handoff", key);
    assert_int_equal(mc_store_exists(store, key), 0);

    pd_prefill(102, p, 192); /* exactly 12 blocks: no tail */
    assert_int_equal(pd_request(102, p, 192, B, &r, &ps), MC_OK);
    assert_int_equal(ps.tokens_fetched, 192);
    assert_identical(&ref192, &r);

    pd_prefill(103, p, 200); /* tail corrupted: recomputed, same bits */
    mc_engine_pd_key(compat, 103, "tail", key);
    void *val;
    size_t len;
    assert_int_equal(mc_store_get(store, key, &val, &len), MC_OK);
    ((unsigned char *)val)[sizeof(mc_engine_kv_hdr_t) + 4] ^= 0x10;
    struct iovec iov = {val, len};
    assert_int_equal(mc_store_upsert(store, key, &iov, 1, NULL), MC_OK);
    free(val);
    assert_int_equal(pd_request(103, p, 200, B, &r, &ps), MC_OK);
    assert_int_equal(ps.tokens_fetched, 192);
    assert_int_equal(ps.tokens_recomputed, 8);
    assert_identical(&ref, &r);

    pd_prefill(104, p, 200); /* a decode side with 32-token blocks: another layout */
    assert_int_equal(pd_request(104, p, 200, 32, &r, &ps), MC_ERR_TIMEOUT); /* its own key */
    uint64_t other = mc_engine_compat_id(model, mc_engine_kernel_variant(), 32, 0, 1);
    char okey[MC_ENGINE_KV_KEY_MAX];
    mc_engine_pd_key(compat, 104, "handoff", key);
    mc_engine_pd_key(other, 104, "handoff", okey);
    assert_int_equal(mc_store_get(store, key, &val, &len), MC_OK); /* planted under its key */
    iov = (struct iovec){val, len};
    assert_int_equal(mc_store_upsert(store, okey, &iov, 1, NULL), MC_OK);
    free(val);
    assert_int_equal(pd_request(104, p, 200, 32, &r, &ps), MC_ERR_INVALID_PARAMS);

    assert_int_equal(pd_request(105, p, 200, B, &r, &ps), MC_ERR_TIMEOUT); /* never prefilled */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefix_reuse_identical),
        cmocka_unit_test(test_scoped_keys),
        cmocka_unit_test(test_missing_and_corrupt_blocks),
        cmocka_unit_test(test_other_model_never_reuses),
        cmocka_unit_test(test_cost_model),
        cmocka_unit_test(test_pd_handoff),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
