#include "client/replica_hint.h"

#include "common/alloc.h"
#include "common/hash.h"

#include <pthread.h>
#include <string.h>

typedef struct slot {
    uint64_t tag; /* XXH3 of the key; 0 = empty */
    mc_replica_hint_t h;
} slot_t;

struct mc_hint_table {
    pthread_mutex_t mu;
    size_t n;
    slot_t *slots;
};

mc_hint_table_t *mc_hint_table_new(size_t slots)
{
    if (slots == 0)
        return NULL;
    mc_hint_table_t *t = MC_NEW(mc_hint_table_t);
    if (!t)
        return NULL;
    t->slots = mc_calloc(slots, sizeof(*t->slots));
    if (!t->slots) {
        mc_free(t);
        return NULL;
    }
    t->n = slots;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

void mc_hint_table_free(mc_hint_table_t *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    mc_free(t->slots);
    mc_free(t);
}

static uint64_t key_tag(const char *key)
{
    uint64_t h = mc_hash_str(key);
    return h ? h : 1;
}

void mc_hint_set(mc_hint_table_t *t, const char *key, const char *endpoint, uint64_t addr,
                 uint64_t size)
{
    size_t len = strlen(endpoint);
    if (!t || len >= MC_HINT_ENDPOINT_MAX)
        return;
    uint64_t tag = key_tag(key);
    slot_t *s = &t->slots[tag % t->n];
    pthread_mutex_lock(&t->mu);
    s->tag = tag;
    memcpy(s->h.endpoint, endpoint, len + 1);
    s->h.addr = addr;
    s->h.size = size;
    pthread_mutex_unlock(&t->mu);
}

bool mc_hint_get(mc_hint_table_t *t, const char *key, mc_replica_hint_t *out)
{
    if (!t)
        return false;
    uint64_t tag = key_tag(key);
    slot_t *s = &t->slots[tag % t->n];
    pthread_mutex_lock(&t->mu);
    bool hit = s->tag == tag;
    if (hit)
        *out = s->h;
    pthread_mutex_unlock(&t->mu);
    return hit;
}

void mc_hint_drop(mc_hint_table_t *t, const char *key)
{
    if (!t)
        return;
    uint64_t tag = key_tag(key);
    slot_t *s = &t->slots[tag % t->n];
    pthread_mutex_lock(&t->mu);
    if (s->tag == tag)
        s->tag = 0;
    pthread_mutex_unlock(&t->mu);
}
