/* Trace reader (trace.h): reads a JSON-lines trace line by line, each line parsed and checked
 * on its own (mc_conductor_trace_parse_line: length, types, ranges, duplicate keys), block ids
 * appended to one array that every request indexes into; bad lines end the load or are counted
 * and skipped (skip_bad). Requests are then sorted by timestamp, ties in file order. Also the
 * trace statistics (distinct blocks, prefix hits). */
#include "conductor/trace.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"
#include "conductor/u64map.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SAFE_INT 9007199254740991LL /* 2^53 - 1 */

void mc_conductor_trace_limits_default(mc_conductor_trace_limits_t *lim_p)
{
    lim_p->max_requests = 10u * 1000 * 1000;
    lim_p->max_line_bytes = 1u << 20;
    lim_p->max_blocks_per_request = 16384;
    lim_p->max_tokens = 16u * 1000 * 1000;
    lim_p->skip_bad = 0;
}

static int get_uint(json_t *obj, const char *name, long long max, long long *v_p)
{
    json_t *v = json_object_get(obj, name);
    if (!v || !json_is_integer(v))
        return -1;
    long long x = json_integer_value(v);
    if (x < 0 || x > max)
        return -1;
    *v_p = x;
    return 0;
}

mc_status_t mc_conductor_trace_parse_line(const char *line, size_t len,
                                          const mc_conductor_trace_limits_t *lim,
                                          mc_conductor_request_t *req_p, uint64_t **blocks_p,
                                          size_t *n_p, size_t *cap_p)
{
    mc_conductor_trace_limits_t def;
    if (!lim) {
        mc_conductor_trace_limits_default(&def);
        lim = &def;
    }
    if (len > lim->max_line_bytes)
        return MC_ERR_TOO_LARGE;
    json_error_t err;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return MC_ERR_PROTOCOL;
    mc_status_t st = MC_ERR_PROTOCOL;
    long long ts, in, out;
    json_t *ids;
    if (!json_is_object(root) || get_uint(root, "timestamp", MAX_SAFE_INT, &ts) ||
        get_uint(root, "input_length", lim->max_tokens, &in) ||
        get_uint(root, "output_length", lim->max_tokens, &out) ||
        !(ids = json_object_get(root, "hash_ids")) || !json_is_array(ids))
        goto out;
    size_t nb = json_array_size(ids);
    if (nb > lim->max_blocks_per_request) {
        st = MC_ERR_TOO_LARGE;
        goto out;
    }
    if (mc_array_reserve(blocks_p, cap_p, *n_p + nb, 1024) != MC_OK) {
        st = MC_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0; i < nb; i++) {
        json_t *h = json_array_get(ids, i);
        if (!json_is_integer(h) || json_integer_value(h) < 0)
            goto out; /* nothing committed yet: *n_p unchanged */
        (*blocks_p)[*n_p + i] = (uint64_t)json_integer_value(h);
    }
    req_p->timestamp_ms = (uint64_t)ts;
    req_p->input_tokens = (uint32_t)in;
    req_p->output_tokens = (uint32_t)out;
    req_p->n_blocks = (uint32_t)nb;
    req_p->blocks_off = *n_p;
    *n_p += nb;
    st = MC_OK;
out:
    json_decref(root);
    return st;
}

static int req_cmp(const void *a, const void *b)
{
    const mc_conductor_request_t *x = a, *y = b;
    if (x->timestamp_ms != y->timestamp_ms)
        return x->timestamp_ms < y->timestamp_ms ? -1 : 1;
    return x->line < y->line ? -1 : (x->line > y->line);
}

mc_status_t mc_conductor_trace_load(const char *path, const mc_conductor_trace_limits_t *lim,
                                    mc_conductor_trace_t **trace_p)
{
    mc_conductor_trace_limits_t def;
    if (!lim) {
        mc_conductor_trace_limits_default(&def);
        lim = &def;
    }
    FILE *f = fopen(path, "r");
    if (!f) {
        MC_LOG_ERROR("trace: cannot open %s: %s", path, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    mc_conductor_trace_t *t = MC_NEW(mc_conductor_trace_t);
    if (!t) {
        fclose(f);
        return MC_ERR_NO_MEMORY;
    }
    size_t req_cap = 0, blk_cap = 0;
    char *line = NULL;
    size_t line_cap = 0;
    ssize_t len;
    uint32_t lineno = 0;
    mc_status_t st = MC_OK;
    while (t->n_reqs < lim->max_requests && (len = getline(&line, &line_cap, f)) >= 0) {
        lineno++;
        if (lineno == UINT32_MAX) {
            st = MC_ERR_TOO_LARGE;
            break;
        }
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            len--;
        size_t k = 0;
        while (k < (size_t)len && (line[k] == ' ' || line[k] == '\t'))
            k++;
        if (k == (size_t)len)
            continue; /* blank line */
        if (mc_array_reserve(&t->reqs, &req_cap, t->n_reqs + 1, 4096) != MC_OK) {
            st = MC_ERR_NO_MEMORY;
            break;
        }
        mc_conductor_request_t *r = &t->reqs[t->n_reqs];
        st = mc_conductor_trace_parse_line(line, (size_t)len, lim, r, &t->blocks, &t->n_blocks,
                                           &blk_cap);
        if (st == MC_ERR_NO_MEMORY)
            break;
        if (st != MC_OK) {
            if (lim->skip_bad) {
                t->skipped_lines++;
                st = MC_OK;
                continue;
            }
            MC_LOG_ERROR("trace: %s line %u: %s", path, lineno, mc_status_name(st));
            break;
        }
        r->line = lineno;
        t->n_reqs++;
    }
    free(line);
    fclose(f);
    if (st != MC_OK) {
        mc_conductor_trace_free(t);
        return st;
    }
    if (t->skipped_lines)
        MC_LOG_WARN("trace: %s: skipped %zu bad lines", path, t->skipped_lines);
    qsort(t->reqs, t->n_reqs, sizeof(*t->reqs), req_cmp);
    *trace_p = t;
    return MC_OK;
}

void mc_conductor_trace_free(mc_conductor_trace_t *trace)
{
    if (!trace)
        return;
    mc_free(trace->reqs);
    mc_free(trace->blocks);
    mc_free(trace);
}

mc_status_t mc_conductor_trace_stats(const mc_conductor_trace_t *t,
                                     mc_conductor_trace_stats_t *s)
{
    memset(s, 0, sizeof(*s));
    mc_conductor_u64map_t seen;
    if (mc_conductor_u64map_init(&seen, t->n_blocks / 2 + 16) != MC_OK)
        return MC_ERR_NO_MEMORY;
    for (size_t i = 0; i < t->n_reqs; i++) {
        const mc_conductor_request_t *r = &t->reqs[i];
        const uint64_t *b = mc_conductor_trace_req_blocks(t, r);
        int prefix = 1;
        for (uint32_t j = 0; j < r->n_blocks; j++) {
            if (mc_conductor_u64map_get(&seen, b[j])) {
                s->any_hit_blocks++;
                if (prefix)
                    s->prefix_hit_blocks++;
            } else {
                prefix = 0;
            }
        }
        for (uint32_t j = 0; j < r->n_blocks; j++) {
            if (mc_conductor_u64map_put(&seen, b[j], 1, NULL) != MC_OK) {
                mc_conductor_u64map_fini(&seen);
                return MC_ERR_NO_MEMORY;
            }
        }
        s->blocks_requested += r->n_blocks;
        s->input_tokens += r->input_tokens;
        s->output_tokens += r->output_tokens;
    }
    s->requests = t->n_reqs;
    s->blocks_distinct = seen.count;
    if (t->n_reqs)
        s->duration_s = (double)(t->reqs[t->n_reqs - 1].timestamp_ms - t->reqs[0].timestamp_ms) /
                        1000.0;
    s->prefix_hit_ratio =
        s->blocks_requested ? (double)s->prefix_hit_blocks / (double)s->blocks_requested : 0;
    mc_conductor_u64map_fini(&seen);
    return MC_OK;
}
