/* One granted-ranges window per tenant of a tcp server (tenant_windows.h). */
#include "te/tenant_windows.h"

#include "common/alloc.h"
#include "common/auth.h"
#include "te/grant_window.h"

#include <stdio.h>
#include <string.h>

/* Grants whose ranges the window keeps, by their mac's first 8 bytes (direct-mapped: a grant
 * pushed out of this table by another is only added again when presented again). A 64-bit
 * collision between two valid grants can only leave the second one's ranges out (its requests
 * are refused and the client asks the master again), never let anything more in. */
#define SEEN_SLOTS 4096u
#define PREFETCH_AHEAD 8u /* ranges: index slots fetched ahead while a grant's are added */

typedef struct seen {
    uint64_t mac64;
    uint64_t first; /* the window's sequence number of its first range */
} seen_t;

struct mc_tenant_window {
    char tenant[MC_AUTH_TENANT_MAX + 1];
    uint32_t refs;                /* connections holding it (under the table's lock) */
    mc_tenant_window_t *next;     /* the table's list */
    pthread_mutex_t mu;           /* guards what follows */
    mc_grant_window_t ranges;
    seen_t *seen;                 /* SEEN_SLOTS, allocated at the first add */
};

void mc_tenant_windows_init(mc_tenant_windows_t *t)
{
    pthread_mutex_init(&t->mu, NULL);
    t->list = NULL;
}

void mc_tenant_windows_fini(mc_tenant_windows_t *t)
{
    pthread_mutex_destroy(&t->mu);
}

/* The caps follow the connections holding w (called under the table's lock and w's). */
static void window_rescale(mc_tenant_window_t *w)
{
    uint32_t n = w->refs < MC_TENANT_WINDOW_SCALE_MAX ? w->refs : MC_TENANT_WINDOW_SCALE_MAX;
    mc_grant_window_set_scale(&w->ranges, n ? n : 1);
}

mc_tenant_window_t *mc_tenant_window_acquire(mc_tenant_windows_t *t, const char *tenant)
{
    pthread_mutex_lock(&t->mu);
    mc_tenant_window_t *w = t->list;
    while (w && strcmp(w->tenant, tenant) != 0)
        w = w->next;
    if (!w && (w = mc_calloc(1, sizeof(*w)))) {
        snprintf(w->tenant, sizeof(w->tenant), "%s", tenant);
        pthread_mutex_init(&w->mu, NULL);
        w->next = t->list;
        t->list = w;
    }
    if (w) {
        w->refs++;
        pthread_mutex_lock(&w->mu);
        window_rescale(w);
        pthread_mutex_unlock(&w->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return w;
}

void mc_tenant_window_release(mc_tenant_windows_t *t, mc_tenant_window_t *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&t->mu);
    if (--w->refs > 0) {
        pthread_mutex_lock(&w->mu);
        window_rescale(w);
        pthread_mutex_unlock(&w->mu);
        pthread_mutex_unlock(&t->mu);
        return;
    }
    mc_tenant_window_t **pp = &t->list;
    while (*pp != w)
        pp = &(*pp)->next;
    *pp = w->next;
    pthread_mutex_unlock(&t->mu);
    mc_grant_window_clear(&w->ranges);
    mc_free(w->seen);
    pthread_mutex_destroy(&w->mu);
    mc_free(w);
}

mc_tw_add_t mc_tenant_window_add(mc_tenant_window_t *w, const mc_grant_view_t *g,
                                 const uint8_t *mac, uint64_t now_ms)
{
    uint64_t mac64;
    memcpy(&mac64, mac, sizeof(mac64));
    mc_tw_add_t res = MC_TW_ADDED;
    pthread_mutex_lock(&w->mu);
    if (!w->seen)
        w->seen = mc_calloc(SEEN_SLOTS, sizeof(*w->seen));
    seen_t *s = w->seen ? &w->seen[mac64 & (SEEN_SLOTS - 1)] : NULL;
    if (s && s->mac64 == mac64 && mc_grant_window_keeps_since(&w->ranges, s->first)) {
        res = MC_TW_KEPT;
    } else {
        uint64_t first = mc_grant_window_next_seq(&w->ranges);
        for (uint32_t i = 0; i < g->n && res == MC_TW_ADDED; i++) {
            if (i + PREFETCH_AHEAD < g->n)
                mc_grant_window_prefetch(&w->ranges, mc_grant_range(g, i + PREFETCH_AHEAD).addr);
            mc_grant_range_t r = mc_grant_range(g, i);
            if (!mc_grant_window_add(&w->ranges, r.addr, r.len, g->access, g->expiry_ms, now_ms))
                res = MC_TW_NO_MEMORY;
        }
        if (s && res == MC_TW_ADDED)
            *s = (seen_t){.mac64 = mac64, .first = first};
    }
    pthread_mutex_unlock(&w->mu);
    return res;
}

bool mc_tenant_window_allows(mc_tenant_window_t *w, uint64_t *hint, uint64_t addr, uint64_t len,
                             uint8_t access, uint64_t now_ms)
{
    pthread_mutex_lock(&w->mu);
    bool ok = mc_grant_window_allows(&w->ranges, hint, addr, len, access, now_ms);
    pthread_mutex_unlock(&w->mu);
    return ok;
}
