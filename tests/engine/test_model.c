/* mc_engine model: checkpoint round trip, and the determinism contract (model.h): prefill of a
 * whole prompt vs prefill of a prefix then the rest (split at block boundaries and mid-block,
 * several block sizes and thread counts) give bit-identical logits and decoded tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/model.h"
#include "support/test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N_PROMPT 150
#define N_DECODE 12

static void prompt_tokens(int32_t *t, int n, int vocab, uint64_t seed)
{
    uint64_t s = seed;
    for (int i = 0; i < n; i++)
        t[i] = (int32_t)(mc_engine_splitmix64(&s) % (uint64_t)vocab);
}

static const char *g_kernels; /* the kernel variant the runs use; NULL = the default */

typedef struct run_out {
    float *logits;          /* final logits (after decode) */
    float *prefill_logits;  /* logits of the last prompt token */
    int32_t tokens[N_DECODE];
} run_out_t;

/* Prefill tokens[0..split) then tokens[split..n) (split 0 = one call), then decode. */
static void run(const mc_engine_model_t *m, int threads, uint32_t block, const int32_t *tokens,
                uint32_t n, uint32_t split, run_out_t *out)
{
    mc_engine_t *e;
    mc_engine_kv_t *kv;
    assert_int_equal(mc_engine_create(m, threads, &e), MC_OK);
    assert_int_equal(mc_engine_set_kernels(e, g_kernels), MC_OK);
    assert_int_equal(mc_engine_kv_create(m, block, &kv), MC_OK);
    size_t V = (size_t)m->cfg.vocab_size;
    out->logits = malloc(V * sizeof(float));
    out->prefill_logits = malloc(V * sizeof(float));
    if (split > 0)
        assert_int_equal(mc_engine_prefill(e, kv, tokens, split, NULL), MC_OK);
    assert_int_equal(mc_engine_prefill(e, kv, tokens + split, n - split, out->logits), MC_OK);
    memcpy(out->prefill_logits, out->logits, V * sizeof(float));
    assert_int_equal(mc_engine_decode(e, kv, out->logits, out->tokens, N_DECODE), MC_OK);
    assert_int_equal(kv->n_tokens, n + N_DECODE - 1);
    mc_engine_kv_free(kv);
    mc_engine_destroy(e);
}

static void run_free(run_out_t *o)
{
    free(o->logits);
    free(o->prefill_logits);
}

static void assert_same(const run_out_t *a, const run_out_t *b, int vocab)
{
    assert_memory_equal(a->prefill_logits, b->prefill_logits, (size_t)vocab * sizeof(float));
    assert_memory_equal(a->logits, b->logits, (size_t)vocab * sizeof(float));
    assert_memory_equal(a->tokens, b->tokens, sizeof(a->tokens));
}

static void test_split_and_threads_identical(void **state)
{
    mc_engine_config_t cfg;
    mc_engine_config_tiny(&cfg);
    mc_engine_model_t *m;
    assert_int_equal(mc_engine_model_seeded(&cfg, 42, &m), MC_OK);
    int32_t tokens[N_PROMPT];
    prompt_tokens(tokens, N_PROMPT, cfg.vocab_size, 7);

    run_out_t ref;
    run(m, 1, 16, tokens, N_PROMPT, 0, &ref);
    /* the greedy tokens are not degenerate (a test of identity needs varied output) */
    int distinct = 0;
    for (int i = 1; i < N_DECODE; i++)
        distinct += ref.tokens[i] != ref.tokens[0];
    assert_true(distinct > 0);

    static const uint32_t splits[] = {1, 15, 16, 17, 32, 64, 100, 149};
    static const uint32_t blocks[] = {16, 7, 32};
    static const int threads[] = {1, 2, 3};
    for (size_t b = 0; b < 3; b++)
        for (size_t s = 0; s < sizeof(splits) / sizeof(splits[0]); s++) {
            run_out_t o;
            run(m, threads[(b + s) % 3], blocks[b], tokens, N_PROMPT, splits[s], &o);
            assert_same(&ref, &o, cfg.vocab_size);
            run_free(&o);
        }
    /* whole prompt with each thread count */
    for (size_t t = 0; t < 3; t++) {
        run_out_t o;
        run(m, threads[t] + 1, 16, tokens, N_PROMPT, 0, &o);
        assert_same(&ref, &o, cfg.vocab_size);
        run_free(&o);
    }
    /* a prompt that differs in one token gives different logits (the comparison can fail) */
    tokens[3] = (tokens[3] + 1) % cfg.vocab_size;
    run_out_t other;
    run(m, 2, 16, tokens, N_PROMPT, 0, &other);
    assert_memory_not_equal(ref.prefill_logits, other.prefill_logits,
                            (size_t)cfg.vocab_size * sizeof(float));
    run_free(&other);
    run_free(&ref);
    mc_engine_model_free(m);
}

/* A prefill longer than one scratch chunk (256 tokens) split across chunk boundaries. */
static void test_long_prompt_chunks(void **state)
{
    mc_engine_config_t cfg;
    mc_engine_config_tiny(&cfg);
    cfg.seq_len = 700;
    mc_engine_model_t *m;
    assert_int_equal(mc_engine_model_seeded(&cfg, 3, &m), MC_OK);
    int32_t tokens[600];
    prompt_tokens(tokens, 600, cfg.vocab_size, 11);
    run_out_t ref, a, b;
    run(m, 2, 64, tokens, 600, 0, &ref);
    run(m, 1, 64, tokens, 600, 256, &a);
    run(m, 3, 64, tokens, 600, 300, &b);
    assert_same(&ref, &a, cfg.vocab_size);
    assert_same(&ref, &b, cfg.vocab_size);
    run_free(&ref);
    run_free(&a);
    run_free(&b);
    mc_engine_model_free(m);
}

/* The same contract with the portable kernels (the variant of CPUs without AVX2+FMA). */
static void test_portable_kernels(void **state)
{
    g_kernels = "portable";
    test_split_and_threads_identical(state);
    test_long_prompt_chunks(state);
    g_kernels = NULL;
    mc_engine_t *e;
    mc_engine_config_t cfg;
    mc_engine_config_tiny(&cfg);
    mc_engine_model_t *m;
    assert_int_equal(mc_engine_model_seeded(&cfg, 1, &m), MC_OK);
    assert_int_equal(mc_engine_create(m, 1, &e), MC_OK);
    assert_int_equal(mc_engine_set_kernels(e, "nonesuch"), MC_ERR_NOT_SUPPORTED);
    assert_int_equal(mc_engine_set_kernels(e, "portable"), MC_OK);
    assert_string_equal(mc_engine_kernels_name(e), "portable");
    mc_engine_destroy(e);
    mc_engine_model_free(m);
}

static void test_checkpoint_roundtrip(void **state)
{
    char dir[256], path[300], path2[300];
    assert_int_equal(mt_tmpdir(dir, sizeof(dir)), 0);
    snprintf(path, sizeof(path), "%s/model.bin", dir);
    snprintf(path2, sizeof(path2), "%s/model2.bin", dir);
    for (int shared = 0; shared < 2; shared++) {
        mc_engine_config_t cfg;
        mc_engine_config_tiny(&cfg);
        cfg.shared_classifier = shared;
        mc_engine_model_t *m, *l;
        assert_int_equal(mc_engine_model_seeded(&cfg, 99, &m), MC_OK);
        assert_int_equal(mc_engine_model_save(m, path), MC_OK);
        assert_int_equal(mc_engine_model_load(path, &l), MC_OK);
        assert_int_equal(l->cfg.dim, m->cfg.dim);
        assert_int_equal(l->cfg.hidden_dim, m->cfg.hidden_dim);
        assert_int_equal(l->cfg.n_layers, m->cfg.n_layers);
        assert_int_equal(l->cfg.n_heads, m->cfg.n_heads);
        assert_int_equal(l->cfg.n_kv_heads, m->cfg.n_kv_heads);
        assert_int_equal(l->cfg.vocab_size, m->cfg.vocab_size);
        assert_int_equal(l->cfg.seq_len, m->cfg.seq_len);
        assert_int_equal(l->cfg.shared_classifier, m->cfg.shared_classifier);
        assert_int_equal(l->n_floats, m->n_floats);
        assert_memory_equal(l->mem, m->mem, m->n_floats * sizeof(float));
        assert_true(l->weights_hash == m->weights_hash);
        /* the header's vocab sign carries the classifier sharing */
        FILE *f = fopen(path, "rb");
        int32_t h[7];
        assert_int_equal(fread(h, sizeof(h), 1, f), 1);
        fclose(f);
        assert_int_equal(h[5], shared ? cfg.vocab_size : -cfg.vocab_size);
        /* writing the loaded model gives the same file */
        assert_int_equal(mc_engine_model_save(l, path2), MC_OK);
        char cmd[700];
        snprintf(cmd, sizeof(cmd), "cmp -s %s %s", path, path2);
        assert_int_equal(system(cmd), 0);
        mc_engine_model_free(l);
        mc_engine_model_free(m);
    }
    /* a truncated file and a bad header are refused */
    assert_int_equal(truncate(path, 1000), 0);
    mc_engine_model_t *bad = NULL;
    assert_int_equal(mc_engine_model_load(path, &bad), MC_ERR_INVALID_PARAMS);
    FILE *f = fopen(path, "wb");
    int32_t h[7] = {63, 176, 2, 4, 2, 256, 256}; /* dim not a multiple of 8 */
    assert_int_equal(fwrite(h, sizeof(h), 1, f), 1);
    fclose(f);
    assert_int_equal(mc_engine_model_load(path, &bad), MC_ERR_INVALID_PARAMS);
    assert_null(bad);
    mt_rmdir(dir);
}

static void test_bad_inputs(void **state)
{
    mc_engine_config_t cfg;
    mc_engine_config_tiny(&cfg);
    mc_engine_model_t *m;
    assert_int_equal(mc_engine_model_seeded(&cfg, 1, &m), MC_OK);
    mc_engine_t *e;
    mc_engine_kv_t *kv;
    assert_int_equal(mc_engine_create(m, 0, &e), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_engine_create(m, 2, &e), MC_OK);
    assert_int_equal(mc_engine_kv_create(m, 16, &kv), MC_OK);
    int32_t bad_tok = cfg.vocab_size;
    assert_int_equal(mc_engine_prefill(e, kv, &bad_tok, 1, NULL), MC_ERR_INVALID_PARAMS);
    int32_t *many = calloc((size_t)cfg.seq_len + 1, sizeof(int32_t));
    assert_int_equal(mc_engine_prefill(e, kv, many, (uint32_t)cfg.seq_len + 1, NULL),
                     MC_ERR_INVALID_PARAMS);
    assert_int_equal(kv->n_tokens, 0);
    free(many);
    mc_engine_kv_free(kv);
    mc_engine_destroy(e);
    mc_engine_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_and_threads_identical),
        cmocka_unit_test(test_long_prompt_chunks),
        cmocka_unit_test(test_portable_kernels),
        cmocka_unit_test(test_checkpoint_roundtrip),
        cmocka_unit_test(test_bad_inputs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
