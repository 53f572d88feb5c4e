/* The engine's cluster keyring, for same-host services of the engine's owner that authenticate
 * with the same token (the real client's dummy socket, src/client/real_service.c), and the
 * grants a tenant-bound store client presents (src/client/store_xfer.c). Internal. */
#ifndef MC_TE_TE_AUTH_H
#define MC_TE_TE_AUTH_H

#include "common/auth.h"
#include "mooncake/te.h"

#include <stdbool.h>
#include <stddef.h>

/* NULL when the engine runs without a token file. Valid until mc_te_destroy. */
const mc_auth_t *mc_te_keyring(const mc_te_t *te);

/* Whether this engine proves a tenant token (its token file's first line names a tenant): its
 * data requests need grants (docs/security.md, "Data ports and tenants"). */
bool mc_te_tenant_bound(const mc_te_t *te);

/* Hands the engine a grant (common/grant.h, as the master signed it) for peer segment seg: it
 * is presented, ahead of the next READ/WRITE, on every connection to that peer that has not
 * carried it yet (one GRANT frame per connection and submit, not per request). The engine
 * keeps a copy of the newest MC_TE_PEER_GRANTS per peer. A no-op (MC_OK) for an engine that
 * is not tenant-bound and for our own segment. MC_ERR_INVALID_PARAMS: not exactly one
 * well-formed grant, or an unknown handle; MC_ERR_NO_MEMORY. */
mc_status_t mc_te_grant_present(mc_te_t *te, mc_te_segment_t seg, const void *grant, size_t len);

#endif
