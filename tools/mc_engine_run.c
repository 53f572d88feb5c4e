/* mc_engine_run: run the engine once on a synthetic prompt and print what it did, as JSON.
 *   mc_engine_run [--tiny] [--seed S] [--checkpoint FILE] [--write_checkpoint FILE]
 *             [--threads N] [--prompt N] [--decode N] [--block B] [--kernels NAME]
 * Defaults: the default model (model.h) seeded with 1, 2 threads, an 8192-token prompt of
 * tokens from splitmix64(1), 16 decoded tokens, 512-token KV blocks. Options are parsed by
 * common/config.h (--flag value or --flag=value; --help lists them with their defaults; a
 * bad one exits 2). */
#include "common/alloc.h"
#include "common/config.h"
#include "common/time.h"
#include "engine/model.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    int64_t threads = 2, prompt = 8192, decode = 16, block = 512, seed = 1;
    bool tiny = false;
    const char *ckpt = NULL, *write_ckpt = NULL, *kernels = NULL;
    mc_option_t opts[] = {
        {"tiny", MC_OPT_BOOL, &tiny, NULL, "the tiny model (tests) instead of the default", 0, 0},
        {"seed", MC_OPT_INT, &seed, NULL, "model weights and prompt tokens seed", 0, INT32_MAX},
        {"checkpoint", MC_OPT_STRING, &ckpt, NULL, "load the model from this checkpoint", 0, 0},
        {"write_checkpoint", MC_OPT_STRING, &write_ckpt, NULL,
         "save the model to this checkpoint first", 0, 0},
        {"threads", MC_OPT_INT, &threads, NULL, "compute threads", 1, MC_ENGINE_THREADS_MAX},
        {"prompt", MC_OPT_INT, &prompt, NULL, "prompt tokens", 1, 1 << 20},
        {"decode", MC_OPT_INT, &decode, NULL, "tokens to decode", 1, 1 << 20},
        {"block", MC_OPT_INT, &block, NULL, "tokens per KV block", 1, 1 << 20},
        {"kernels", MC_OPT_STRING, &kernels, NULL, "avx2-fma|portable (default: the best)", 0, 0},
    };
    mc_config_spec_t spec = {"mc_engine_run",
                             "Runs the engine once on a synthetic prompt and prints what it "
                             "did as one JSON line.",
                             opts, MC_ARRAY_LEN(opts)};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    mc_engine_config_t cfg;
    mc_engine_model_t *m;
    mc_status_t st;
    st = mc_engine_model_open(ckpt, tiny, (uint64_t)seed, &m);
    if (st != MC_OK) {
        fprintf(stderr, "mc_engine_run: model: %s\n", mc_status_str(st));
        return 1;
    }
    cfg = m->cfg;
    if (write_ckpt && (st = mc_engine_model_save(m, write_ckpt)) != MC_OK) {
        fprintf(stderr, "mc_engine_run: write %s: %s\n", write_ckpt, mc_status_str(st));
        return 1;
    }
    if (prompt + decode > cfg.seq_len) {
        fprintf(stderr, "mc_engine_run: prompt + decode %ld > seq_len %d\n", prompt + decode,
                cfg.seq_len);
        return 2;
    }
    mc_engine_t *e;
    mc_engine_kv_t *kv;
    if ((st = mc_engine_create(m, (int)threads, &e)) != MC_OK ||
        (st = mc_engine_kv_create(m, (uint32_t)block, &kv)) != MC_OK ||
        (kernels && (st = mc_engine_set_kernels(e, kernels)) != MC_OK)) {
        fprintf(stderr, "mc_engine_run: %s\n", mc_status_str(st));
        return 1;
    }
    int32_t *tok = malloc((size_t)prompt * sizeof(int32_t)), *out = malloc((size_t)decode * 4);
    float *logits = malloc((size_t)cfg.vocab_size * sizeof(float));
    uint64_t s = (uint64_t)seed;
    for (long i = 0; i < prompt; i++)
        tok[i] = (int32_t)(mc_engine_splitmix64(&s) % (uint64_t)cfg.vocab_size);
    uint64_t t0 = mc_now_ns();
    st = mc_engine_prefill(e, kv, tok, (uint32_t)prompt, logits);
    uint64_t t1 = mc_now_ns();
    if (st == MC_OK)
        st = mc_engine_decode(e, kv, logits, out, (uint32_t)decode);
    uint64_t t2 = mc_now_ns();
    if (st != MC_OK) {
        fprintf(stderr, "mc_engine_run: run: %s\n", mc_status_str(st));
        return 1;
    }
    printf("{\"dim\":%d,\"hidden_dim\":%d,\"n_layers\":%d,\"n_heads\":%d,\"n_kv_heads\":%d,"
           "\"vocab_size\":%d,\"seq_len\":%d,\"params\":%zu,\"kernels\":\"%s\",\"threads\":%ld,"
           "\"block_tokens\":%ld,\"block_bytes\":%zu,\"prompt_tokens\":%ld,\"prefill_ms\":%.1f,"
           "\"decode_tokens\":%ld,\"decode_ms_per_token\":%.2f,\"tokens\":[",
           cfg.dim, cfg.hidden_dim, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.vocab_size,
           cfg.seq_len, m->n_floats, mc_engine_kernels_name(e), threads, block,
           mc_engine_kv_block_bytes(kv), prompt, (double)(t1 - t0) / 1e6, decode,
           decode > 1 ? (double)(t2 - t1) / 1e6 / (double)(decode - 1) : 0.0);
    for (long i = 0; i < decode; i++)
        printf("%s%d", i ? "," : "", out[i]);
    printf("]}\n");
    free(tok);
    free(out);
    free(logits);
    mc_engine_kv_free(kv);
    mc_engine_destroy(e);
    mc_engine_model_free(m);
    return 0;
}
