/* A tcp server's granted ranges, one window per tenant: the verified ranges of the grants that
 * any connection proved with that tenant's token presented (docs/security.md, "Data ports and
 * tenants"; the windows themselves: grant_window.h).
 *
 * Shared by the tenant's connections: a grant is a bearer token for its tenant and segment
 * (common/grant.h), so a range one of them presented may be read through any of them, and a
 * grant presented again on another connection (an initiator catches up each new connection on
 * the grants it holds) is verified but its ranges are not kept twice. Its caps are those of one
 * connection's window times the tenant's connections now, at most MC_TENANT_WINDOW_SCALE_MAX
 * times. A window lives while a connection of its tenant is open.
 *
 * Thread-safe: the table's lock guards the list and the reference counts, each window's lock
 * its ranges (held for one add or one check). */
#ifndef MC_TE_TENANT_WINDOWS_H
#define MC_TE_TENANT_WINDOWS_H

#include "common/grant.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#define MC_TENANT_WINDOW_SCALE_MAX 8u /* at most 8 x 65,536 ranges per tenant (~66 MiB) */

typedef struct mc_tenant_window mc_tenant_window_t;

typedef struct mc_tenant_windows {
    pthread_mutex_t mu;
    mc_tenant_window_t *list;
} mc_tenant_windows_t;

void mc_tenant_windows_init(mc_tenant_windows_t *t);
/* Every window must have been released. */
void mc_tenant_windows_fini(mc_tenant_windows_t *t);

/* The window of `tenant` (created empty if none is open), held for one more connection until
 * mc_tenant_window_release. NULL when memory ran out. */
mc_tenant_window_t *mc_tenant_window_acquire(mc_tenant_windows_t *t, const char *tenant);
void mc_tenant_window_release(mc_tenant_windows_t *t, mc_tenant_window_t *w);

/* What mc_tenant_window_add did. */
typedef enum {
    MC_TW_ADDED,     /* the grant's ranges are kept */
    MC_TW_KEPT,      /* presented before (another connection) and all its ranges still kept */
    MC_TW_NO_MEMORY  /* not (all) kept: the requests under it are refused */
} mc_tw_add_t;

/* Keeps the ranges of grant g (verified, unexpired; mac: its MC_AUTH_MAC_SIZE mac bytes) unless
 * the window already keeps all of them from an earlier presentation. */
mc_tw_add_t mc_tenant_window_add(mc_tenant_window_t *w, const mc_grant_view_t *g,
                                 const uint8_t *mac, uint64_t now_ms);

/* Whether a kept range of `access` contains [addr, addr + len) at now_ms (grant_window.h);
 * *hint: the caller's (one per connection, 0 at first). */
bool mc_tenant_window_allows(mc_tenant_window_t *w, uint64_t *hint, uint64_t addr, uint64_t len,
                             uint8_t access, uint64_t now_ms);

#endif
