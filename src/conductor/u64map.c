/* uint64 -> uint64 hash map (u64map.h): open addressing over power-of-two arrays (keys, values
 * and a used flag, so every key value is allowed), linear probing from a 64-bit mix of the key,
 * doubling when an insert would pass 50% load, and backward-shift deletion so that no
 * tombstones slow later probes. */
#include "conductor/u64map.h"

#include "common/alloc.h"

#include <string.h>

static mc_status_t map_alloc(mc_conductor_u64map_t *m, size_t cap)
{
    m->keys = mc_calloc(cap, sizeof(uint64_t));
    m->vals = mc_calloc(cap, sizeof(uint64_t));
    m->used = mc_calloc(cap, 1);
    if (!m->keys || !m->vals || !m->used) {
        mc_free(m->keys);
        mc_free(m->vals);
        mc_free(m->used);
        m->keys = m->vals = NULL;
        m->used = NULL;
        return MC_ERR_NO_MEMORY;
    }
    m->cap = cap;
    m->count = 0;
    return MC_OK;
}

mc_status_t mc_conductor_u64map_init(mc_conductor_u64map_t *m, size_t hint)
{
    size_t cap = 16;
    while (cap < hint * 2 && cap < ((size_t)1 << 40))
        cap <<= 1;
    memset(m, 0, sizeof(*m));
    return map_alloc(m, cap);
}

void mc_conductor_u64map_fini(mc_conductor_u64map_t *m)
{
    mc_free(m->keys);
    mc_free(m->vals);
    mc_free(m->used);
    memset(m, 0, sizeof(*m));
}

void mc_conductor_u64map_clear(mc_conductor_u64map_t *m)
{
    if (m->used)
        memset(m->used, 0, m->cap);
    m->count = 0;
}

uint64_t *mc_conductor_u64map_get(const mc_conductor_u64map_t *m, uint64_t key)
{
    if (!m->cap)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = mc_conductor_mix64(key) & mask;; i = (i + 1) & mask) {
        if (!m->used[i])
            return NULL;
        if (m->keys[i] == key)
            return &m->vals[i];
    }
}

static mc_status_t map_grow(mc_conductor_u64map_t *m)
{
    mc_conductor_u64map_t n;
    if (map_alloc(&n, m->cap * 2) != MC_OK)
        return MC_ERR_NO_MEMORY;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->used[i])
            mc_conductor_u64map_put(&n, m->keys[i], m->vals[i], NULL);
    }
    mc_conductor_u64map_fini(m);
    *m = n;
    return MC_OK;
}

mc_status_t mc_conductor_u64map_put(mc_conductor_u64map_t *m, uint64_t key, uint64_t val,
                                    int *inserted_p)
{
    if ((m->count + 1) * 2 > m->cap && map_grow(m) != MC_OK)
        return MC_ERR_NO_MEMORY;
    size_t mask = m->cap - 1;
    for (size_t i = mc_conductor_mix64(key) & mask;; i = (i + 1) & mask) {
        if (!m->used[i]) {
            m->used[i] = 1;
            m->keys[i] = key;
            m->vals[i] = val;
            m->count++;
            if (inserted_p)
                *inserted_p = 1;
            return MC_OK;
        }
        if (m->keys[i] == key) {
            m->vals[i] = val;
            if (inserted_p)
                *inserted_p = 0;
            return MC_OK;
        }
    }
}

int mc_conductor_u64map_remove(mc_conductor_u64map_t *m, uint64_t key, uint64_t *val_p)
{
    if (!m->cap)
        return 0;
    size_t mask = m->cap - 1;
    size_t i = mc_conductor_mix64(key) & mask;
    for (;; i = (i + 1) & mask) {
        if (!m->used[i])
            return 0;
        if (m->keys[i] == key)
            break;
    }
    if (val_p)
        *val_p = m->vals[i];
    /* backward-shift deletion */
    size_t j = i;
    for (;;) {
        j = (j + 1) & mask;
        if (!m->used[j])
            break;
        size_t home = mc_conductor_mix64(m->keys[j]) & mask;
        /* can the entry at j move to i? yes if home is not in (i, j] cyclically */
        int in_range = (i <= j) ? (home > i && home <= j) : (home > i || home <= j);
        if (!in_range) {
            m->keys[i] = m->keys[j];
            m->vals[i] = m->vals[j];
            i = j;
        }
    }
    m->used[i] = 0;
    m->count--;
    return 1;
}
