#include "client/replica_hint.h"

#include "common/alloc.h"
#include "common/hash.h"

#include <pthread.h>
#include <string.h>

typedef struct slot {
    char *key;     /* owned copy; NULL = empty */
    size_t key_cap;
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
    for (size_t i = 0; i < t->n; i++)
        mc_free(t->slots[i].key);
    mc_free(t->slots);
    mc_free(t);
}

static slot_t *slot_of(mc_hint_table_t *t, const char *key)
{
    return &t->slots[mc_hash_str(key) % t->n];
}

void mc_hint_set(mc_hint_table_t *t, const char *key, const mc_replica_hint_t *h)
{
    size_t elen = strnlen(h->endpoint, MC_HINT_ENDPOINT_MAX), klen = strlen(key);
    if (!t || elen == MC_HINT_ENDPOINT_MAX)
        return;
    slot_t *s = slot_of(t, key);
    pthread_mutex_lock(&t->mu);
    if (!s->key || strcmp(s->key, key) != 0) {
        if (klen >= s->key_cap) { /* keys are capped (MC_STORE_KEY_MAX) */
            char *k = mc_malloc(klen + 1);
            if (!k) {
                pthread_mutex_unlock(&t->mu);
                return;
            }
            mc_free(s->key);
            s->key = k;
            s->key_cap = klen + 1;
        }
        memcpy(s->key, key, klen + 1);
    }
    s->h = *h;
    pthread_mutex_unlock(&t->mu);
}

bool mc_hint_get(mc_hint_table_t *t, const char *key, mc_replica_hint_t *out)
{
    if (!t)
        return false;
    slot_t *s = slot_of(t, key);
    pthread_mutex_lock(&t->mu);
    bool hit = s->key && s->key[0] && strcmp(s->key, key) == 0;
    if (hit)
        *out = s->h;
    pthread_mutex_unlock(&t->mu);
    return hit;
}

void mc_hint_drop(mc_hint_table_t *t, const char *key)
{
    if (!t)
        return;
    slot_t *s = slot_of(t, key);
    pthread_mutex_lock(&t->mu);
    if (s->key && strcmp(s->key, key) == 0)
        s->key[0] = '\0'; /* keep the buffer for the slot's next key */
    pthread_mutex_unlock(&t->mu);
}

void mc_hint_clear(mc_hint_table_t *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    for (size_t i = 0; i < t->n; i++)
        if (t->slots[i].key)
            t->slots[i].key[0] = '\0';
    pthread_mutex_unlock(&t->mu);
}
