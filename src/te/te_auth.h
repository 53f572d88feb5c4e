/* The engine's cluster keyring, for same-host services of the engine's owner that authenticate
 * with the same token (the real client's dummy socket, src/client/real_service.c). Internal. */
#ifndef MC_TE_TE_AUTH_H
#define MC_TE_TE_AUTH_H

#include "common/auth.h"
#include "mooncake/te.h"

/* NULL when the engine runs without a token file. Valid until mc_te_destroy. */
const mc_auth_t *mc_te_keyring(const mc_te_t *te);

#endif
