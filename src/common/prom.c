/* Prometheus text and upstream's summary formatting (contracts in prom.h). */
#include "common/prom.h"

#include "common/auth.h"

#include <stdio.h>
#include <string.h>

void mc_prom_help_type(mc_prom_t *p, const char *name, const char *type, const char *help)
{
    MC_PROM_PRINTF(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void mc_prom_histogram(mc_prom_t *p, const char *name, const char *label, const uint64_t *le,
                       const uint64_t *buckets, size_t n, uint64_t sum, uint64_t count)
{
    uint64_t cum = 0;
    for (size_t i = 0; i < n; i++) {
        cum += buckets[i];
        MC_PROM_PRINTF(p, "%s_bucket{%sle=\"%llu\"} %llu\n", name, label,
                       (unsigned long long)le[i], (unsigned long long)cum);
    }
    size_t len = strlen(label);
    char bare[128] = ""; /* the label without its trailing comma, for _sum and _count */
    if (len > 1 && len < sizeof(bare) - 2)
        snprintf(bare, sizeof(bare), "{%.*s}", (int)(len - 1), label);
    MC_PROM_PRINTF(p, "%s_bucket{%sle=\"+Inf\"} %llu\n%s_sum%s %llu\n%s_count%s %llu\n", name,
                   label, (unsigned long long)count, name, bare, (unsigned long long)sum, name,
                   bare, (unsigned long long)count);
}

void mc_prom_human_bytes(mc_prom_t *p, double v, const char *suffix)
{
    static const char *unit[] = {"K", "M", "G", "T"};
    if (v < 1024) {
        MC_PROM_PRINTF(p, "%.2f %s", v, suffix);
        return;
    }
    int u = -1;
    while (u < 3 && v >= 1024) {
        v /= 1024;
        u++;
    }
    MC_PROM_PRINTF(p, "%.2f %s%s", v, unit[u], suffix);
}

void mc_prom_bytes(mc_prom_t *p, uint64_t v)
{
    if (v < 1024)
        MC_PROM_PRINTF(p, "%llu B", (unsigned long long)v);
    else
        mc_prom_human_bytes(p, (double)v, "B");
}

void mc_prom_auth_counters(mc_prom_t *p)
{
    mc_auth_counters_t c;
    mc_auth_counters(&c);
    const struct {
        const char *name, *help;
        uint64_t v;
    } fam[] = {
        {"mc_auth_client_handshakes_total",
         "Connections this process opened whose handshake completed", c.client_ok},
        {"mc_auth_client_handshake_failures_total",
         "Connections this process opened that the server refused, or whose server could not "
         "prove our token", c.client_failed},
        {"mc_auth_server_handshakes_total",
         "Connections to this process whose handshake completed", c.server_ok},
        {"mc_auth_server_handshake_refusals_total",
         "Connections to this process refused at the handshake (no or wrong proof)",
         c.server_refused},
    };
    for (size_t i = 0; i < sizeof(fam) / sizeof(fam[0]); i++) {
        mc_prom_help_type(p, fam[i].name, "counter", fam[i].help);
        MC_PROM_PRINTF(p, "%s %llu\n", fam[i].name, (unsigned long long)fam[i].v);
    }
}
