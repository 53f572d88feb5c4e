/* libFuzzer target for the segment descriptor parser. Whatever parses must serialize, re-parse
 * to the same struct and serialize to the same text; find() must agree with a linear scan. */
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
    free(j1);
    free(j2);
    mc_segment_desc_free(&d);
    mc_segment_desc_free(&d2);
    return 0;
}
