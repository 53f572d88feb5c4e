/* Metric pages in the Prometheus text format (and upstream's summary text) on a growable
 * buffer, shared by the master's /metrics and the store client's. Rendering appends piece by
 * piece; the first failed append sticks in st, so a page is rendered whole and checked once. */
#ifndef MC_COMMON_PROM_H
#define MC_COMMON_PROM_H

#include "common/buf.h"

#include <stddef.h>
#include <stdint.h>

typedef struct mc_prom {
    mc_buf_t b;
    mc_status_t st; /* MC_OK, or the first append that failed */
} mc_prom_t;

#define MC_PROM_PRINTF(p, ...)                                                                     \
    do {                                                                                           \
        if ((p)->st == MC_OK)                                                                      \
            (p)->st = mc_buf_printf(&(p)->b, __VA_ARGS__);                                         \
    } while (0)

/* "# HELP name help" and "# TYPE name type". */
void mc_prom_help_type(mc_prom_t *p, const char *name, const char *type, const char *help);

/* The series of one histogram (after its HELP/TYPE): name_bucket{<label>le="..."} for each of
 * the n bounds le[] with the cumulated counts of buckets[] (not cumulative, n entries), the +Inf
 * bucket and name_count = count, name_sum = sum. label is "" or `key="value",` (it precedes
 * le; _sum and _count carry it without the comma). */
void mc_prom_histogram(mc_prom_t *p, const char *name, const char *label, const uint64_t *le,
                       const uint64_t *buckets, size_t n, uint64_t sum, uint64_t count);

/* Upstream's byte_size_to_string: "%.2f <suffix>" under 1024, else "%.2f K|M|G|T<suffix>"
 * (1024-based). */
void mc_prom_human_bytes(mc_prom_t *p, double v, const char *suffix);
/* A byte total as upstream prints it: "N B" under 1 KiB, else mc_prom_human_bytes(.., "B"). */
void mc_prom_bytes(mc_prom_t *p, uint64_t v);

/* This process's handshake counters (auth.h, mc_auth_counters) as four counter families:
 * mc_auth_client_handshakes_total, mc_auth_client_handshake_failures_total,
 * mc_auth_server_handshakes_total, mc_auth_server_handshake_refusals_total. Shared by the
 * master's and the store client's /metrics. */
void mc_prom_auth_counters(mc_prom_t *p);

#endif
