/* libFuzzer target for the segment descriptor parser. Whatever parses must serialize, re-parse
 * to the same struct and serialize to the same text; find() must agree with a linear scan.
 * The signed form too: the input goes through mc_segment_desc_unseal with and without a
 * keyring (what it returns lies inside the input; with the keyring only a value this key
 * sealed passes), and whatever parses, sealed, must unseal to the same bytes with the key and
 * be refused with another key or with any byte flipped. */
#include "common/auth.h"
#include "common/log.h"
#include "te/segment_desc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void check(int cond)
{
    if (!cond)
        abort();
}

static int same(const mc_segment_desc_t *a, const mc_segment_desc_t *b)
{
    if (strcmp(a->name, b->name) || strcmp(a->protocol, b->protocol) ||
        strcmp(a->host_id, b->host_id) || a->pid != b->pid ||
        a->tcp_data_port != b->tcp_data_port || a->timestamp != b->timestamp ||
        a->n_buffers != b->n_buffers)
        return 0;
    if (!a->transport_info != !b->transport_info ||
        (a->transport_info && strcmp(a->transport_info, b->transport_info)))
        return 0;
    for (size_t i = 0; i < a->n_buffers; i++) {
        const mc_buffer_desc_t *x = &a->buffers[i], *y = &b->buffers[i];
        if (strcmp(x->location, y->location) || x->addr != y->addr || x->length != y->length ||
            x->shm_fd != y->shm_fd || x->shm_offset != y->shm_offset)
            return 0;
    }
    return 1;
}

static ptrdiff_t linear_find(const mc_segment_desc_t *d, uint64_t addr, uint64_t len)
{
    for (size_t i = 0; i < d->n_buffers; i++) {
        const mc_buffer_desc_t *b = &d->buffers[i];
        if (len && addr >= b->addr && len <= b->length && addr - b->addr <= b->length - len)
            return (ptrdiff_t)i;
    }
    return -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int init;
    if (!init) {
        mc_log_set_level(MC_LOG_LEVEL_OFF);
        init = 1;
    }
    static mc_auth_t *ka, *kb;
    if (!ka && (mc_auth_from_secret("fuzz-segment-desc-key-A", NULL, &ka) != MC_OK ||
                mc_auth_from_secret("fuzz-segment-desc-key-B", NULL, &kb) != MC_OK))
        abort();
    const char *in = (const char *)data;
    const char *inner;
    size_t il;
    int sig;
    for (int k = 0; k < 2; k++) {
        mc_status_t st = mc_segment_desc_unseal(k ? ka : NULL, in, size, &inner, &il, &sig);
        if (st == MC_OK)
            check(inner >= in && il <= size && (size_t)(inner - in) <= size - il);
        if (k && st == MC_OK) { /* only a mac made with ka: then sealing the body again */
            char *re = NULL;  /* gives the input back byte for byte */
            size_t rl = 0;
            check(mc_segment_desc_seal(ka, inner, il, &re, &rl) == MC_OK);
            check(rl == size && memcmp(re, in, size) == 0);
            free(re);
        }
    }
    mc_segment_desc_t d;
    if (mc_segment_desc_from_json((const char *)data, size, &d) != MC_OK) {
        check(d.buffers == NULL && d.n_buffers == 0 && d.transport_info == NULL);
        return 0;
    }
    for (size_t i = 1; i < d.n_buffers; i++) /* sorted, non-overlapping */
        check(d.buffers[i].addr - d.buffers[i - 1].addr >= d.buffers[i - 1].length &&
              d.buffers[i].addr > d.buffers[i - 1].addr);
    char *j1 = NULL, *j2 = NULL;
    check(mc_segment_desc_to_json(&d, &j1) == MC_OK);
    mc_segment_desc_t d2;
    check(mc_segment_desc_from_json(j1, strlen(j1), &d2) == MC_OK);
    check(same(&d, &d2));
    check(mc_segment_desc_to_json(&d2, &j2) == MC_OK);
    check(strcmp(j1, j2) == 0);
    /* probe find() around every buffer edge */
    for (size_t i = 0; i < d.n_buffers && i < 64; i++) {
        const mc_buffer_desc_t *b = &d.buffers[i];
        uint64_t probes[][2] = {{b->addr, b->length}, {b->addr, 1}, {b->addr + b->length - 1, 1},
                                {b->addr + b->length - 1, 2}, {b->addr - 1, 1},
                                {b->addr, b->length + 1}, {b->addr, UINT64_MAX}};
        for (size_t k = 0; k < sizeof(probes) / sizeof(probes[0]); k++)
            check(mc_segment_desc_find(&d, probes[k][0], probes[k][1]) ==
                  linear_find(&d, probes[k][0], probes[k][1]));
    }
    char *sealed = NULL;
    size_t sl = 0;
    check(mc_segment_desc_seal(ka, j1, strlen(j1), &sealed, &sl) == MC_OK);
    check(mc_segment_desc_unseal(ka, sealed, sl, &inner, &il, &sig) == MC_OK && sig == 1);
    check(il == strlen(j1) && memcmp(inner, j1, il) == 0);
    check(mc_segment_desc_unseal(kb, sealed, sl, &inner, &il, &sig) == MC_ERR_AUTH);
    check(mc_segment_desc_unseal(ka, j1, strlen(j1), &inner, &il, &sig) == MC_ERR_AUTH);
    size_t flip = (size_t)data[0] % sl;
    sealed[flip] ^= 0x01;
    check(mc_segment_desc_unseal(ka, sealed, sl, &inner, &il, &sig) != MC_OK);
    free(sealed);
    free(j1);
    free(j2);
    mc_segment_desc_free(&d);
    mc_segment_desc_free(&d2);
    return 0;
}
