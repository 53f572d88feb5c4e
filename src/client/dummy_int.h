/* Dummy-client side of the standalone mode (dummy_client.c): the mc_store_* entry points
 * forward here when the handle is a dummy (mc_store_t.dummy != NULL; mooncake/dummy.h). Same
 * contracts as the store.h functions they serve. Internal to src/client. */
#ifndef MC_CLIENT_DUMMY_INT_H
#define MC_CLIENT_DUMMY_INT_H

#include "mooncake/dummy.h"

typedef struct mc_dummy mc_dummy_t;

void mc_dummy_destroy(mc_dummy_t *d);
mc_store_health_t mc_dummy_health(mc_dummy_t *d);
mc_status_t mc_dummy_register_buffer(mc_dummy_t *d, void *addr, size_t len);
mc_status_t mc_dummy_unregister_buffer(mc_dummy_t *d, void *addr);
mc_status_t mc_dummy_put(mc_dummy_t *d, const char *key, const struct iovec *parts,
                         size_t n_parts, const mc_replicate_config_t *cfg, bool upsert);
mc_status_t mc_dummy_batch_put(mc_dummy_t *d, size_t n, const char *const *keys,
                               const struct iovec *const *parts, const size_t *n_parts,
                               const mc_replicate_config_t *cfg, bool upsert, int32_t *results);
mc_status_t mc_dummy_get(mc_dummy_t *d, const char *key, void **value_p, size_t *len_p);
mc_status_t mc_dummy_batch_get(mc_dummy_t *d, size_t n, const char *const *keys, void **values,
                               int64_t *results);
int64_t mc_dummy_get_into(mc_dummy_t *d, const char *key, const struct iovec *parts,
                          size_t n_parts);
mc_status_t mc_dummy_batch_get_into(mc_dummy_t *d, size_t n, const char *const *keys,
                                    const struct iovec *const *parts, const size_t *n_parts,
                                    int64_t *results);
int mc_dummy_exists(mc_dummy_t *d, const char *key);
mc_status_t mc_dummy_batch_exists(mc_dummy_t *d, size_t n, const char *const *keys,
                                  int32_t *results);
int64_t mc_dummy_get_size(mc_dummy_t *d, const char *key);
mc_status_t mc_dummy_remove(mc_dummy_t *d, const char *key, bool force);
mc_status_t mc_dummy_batch_remove(mc_dummy_t *d, size_t n, const char *const *keys, bool force,
                                  int32_t *results);
int64_t mc_dummy_remove_by_regex(mc_dummy_t *d, const char *regex, bool force);
int64_t mc_dummy_remove_all(mc_dummy_t *d, bool force);

#endif
