/* mc_engine_run: run the engine once on a synthetic prompt and print what it did, as JSON.
 *   mc_engine_run [--tiny] [--seed S] [--checkpoint FILE] [--write_checkpoint FILE]
 *             [--threads N] [--prompt N] [--decode N] [--block B] [--kernels NAME]
 * Defaults: the default model (model.h) seeded with 1, 2 threads, an 8192-token prompt of
 * tokens from splitmix64(1), 16 decoded tokens, 512-token KV blocks. */
#include "common/time.h"
#include "engine/model.h"
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --help: to stdout, exit 0; a bad command line: to stderr, exit 2 */
static int usage(FILE *out)
{
    fprintf(out, "usage: mc_engine_run [--tiny] [--seed S] [--checkpoint FILE] "
                    "[--write_checkpoint FILE] [--threads N] [--prompt N] [--decode N] "
                    "[--block B] [--kernels avx2-fma|portable]\n");
    return out == stdout ? 0 : 2;
}

int main(int argc, char **argv)
{
    long threads = 2, prompt = 8192, decode = 16, block = 512, seed = 1;
    int tiny = 0;
    const char *ckpt = NULL, *write_ckpt = NULL, *kernels = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            return usage(stdout);
        long *target = NULL, lo = 1, hi = 1L << 20;
        if (!strcmp(a, "--tiny")) {
            tiny = 1;
            continue;
        } else if (!strcmp(a, "--checkpoint") && v) {
            ckpt = v, i++;
            continue;
        } else if (!strcmp(a, "--kernels") && v) {
            kernels = v, i++;
            continue;
        } else if (!strcmp(a, "--write_checkpoint") && v) {
            write_ckpt = v, i++;
            continue;
        } else if (!strcmp(a, "--threads"))
            target = &threads, hi = MC_ENGINE_THREADS_MAX;
        else if (!strcmp(a, "--prompt"))
            target = &prompt;
        else if (!strcmp(a, "--decode"))
            target = &decode;
        else if (!strcmp(a, "--block"))
            target = &block;
        else if (!strcmp(a, "--seed"))
            target = &seed, lo = 0, hi = INT32_MAX;
        if (!target || !v)
            return usage(stderr);
        if (mc_tool_parse_long("mc_engine_run", v, lo, hi, target) != 0)
            return 2;
        i++;
    }
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
