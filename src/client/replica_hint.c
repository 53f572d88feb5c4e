/* Replica hint table (replica_hint.h): a set-associative cache from key to where this client
 * last saw the key's bytes, with the read lease that came with them.
 *
 * Layout: n_sets sets of MC_HINT_WAYS ways; a set's tags (32 bits of a key's XXH3, 0 = empty)
 * and their last-use ticks share one cache line, the entries (two cache lines each: the
 * endpoint is a number into the table's list of endpoints, which is small and stays cached,
 * and a key of under 79 bytes is copied into the entry itself) live in a parallel array. A
 * lookup touches that line, its entry and, for a longer key, the key's heap copy, and a batch
 * prefetches all of them. The
 * memory is allocated at the first set (table_alloc), so a process that only serves never pays
 * for it. The batch calls go through a batch's keys in stages (set lines, then entries, then
 * key copies), prefetching what the next stage reads for every key before any key uses it:
 * in a table of tens of MB each of those is a cache miss, and this way a batch's misses
 * overlap instead of following one another.
 *
 * Ownership and locking: each entry owns a copy of its key (kept across drops for reuse); every
 * public function takes the table's one mutex for a short section and copies hints in or out,
 * so callers never hold pointers into the table. A NULL table (hints off) is valid everywhere:
 * lookups miss, sets and drops do nothing.
 */
#include "client/replica_hint.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/hash.h"

#include <pthread.h>
#include <string.h>

/* Two cache lines, both prefetched by a batch lookup: the hint (its endpoint is ep, an index
 * into the table's endpoint list) and the key copy, held in the entry itself when it is short
 * (strlen < KEY_INLINE), so that comparing it costs no further miss. */
#define KEY_INLINE 79
typedef struct entry {
    _Alignas(64) char *key; /* owned heap copy of a longer key (kept for reuse after a drop) */
    uint32_t key_cap;
    uint32_t ep;
    uint64_t addr, size, checksum, lease_until_ms; /* as mc_replica_hint_t */
    bool key_heap;          /* the key is in key, else in kin */
    char kin[KEY_INLINE];   /* a key of strlen < KEY_INLINE, NUL-terminated */
} entry_t;
_Static_assert(sizeof(entry_t) == 128, "an entry is two cache lines");

static const char *entry_key(const entry_t *en)
{
    return en->key_heap ? en->key : en->kin;
}

/* Endpoints the entries name, each stored once: a list (grown by doubling up to
 * HINT_ENDPOINTS_MAX) and an open-addressed index over it (slot = 1 + list position, 0 =
 * empty; at most half full). A storage server is one endpoint, so the list stays short; a hint
 * for an endpoint beyond the cap is not recorded (only a guess is lost). */
#define HINT_ENDPOINTS_MAX 4096
#define HINT_ENDPOINT_SLOTS (2 * HINT_ENDPOINTS_MAX)
typedef struct endpoint_name {
    char s[MC_HINT_ENDPOINT_MAX]; /* zero-padded */
} endpoint_name_t;

/* One set, one cache line: the ways' tags (0 = empty way; the key's XXH3 picks the set with its
 * high 32 bits and gives the tag with its low 32: a tag match is confirmed by the key copy) and
 * their last-use ticks (the low 32 bits of the table tick at the last set or hit; the way whose
 * tick lies furthest behind the table's goes, which is exact while a set sees a use at least
 * every 2^32 ticks and otherwise only picks a less recent victim: a hint is a guess). */
typedef struct set {
    _Alignas(64) uint32_t tag[MC_HINT_WAYS];
    uint32_t used[MC_HINT_WAYS];
} set_t;
_Static_assert(sizeof(set_t) == 64, "a set is one cache line");

struct mc_hint_table {
    pthread_mutex_t mu;
    size_t n_sets;
    uint64_t tick;
    /* Allocated by the first mc_hint_set (table_alloc), so that a process that never reads
     * (a storage server) neither holds nor, at exit, walks the table. NULL until then. */
    set_t *sets;
    entry_t *entries; /* n_sets * MC_HINT_WAYS, way w of set s at s * MC_HINT_WAYS + w */
    endpoint_name_t *eps; /* n_eps of cap_eps */
    size_t n_eps, cap_eps;
    uint32_t *ep_slots; /* HINT_ENDPOINT_SLOTS, the index over eps (allocated with sets) */
};

static size_t sets_bytes(const mc_hint_table_t *t);
static size_t entries_bytes(const mc_hint_table_t *t);
static bool table_alloc(mc_hint_table_t *t);
static uint64_t key_tag(const char *key);
static size_t set_of(const mc_hint_table_t *t, uint64_t tag);
static uint32_t way_tag(uint64_t tag);
static void touch(mc_hint_table_t *t, size_t e);
static size_t find(mc_hint_table_t *t, const char *key, uint64_t tag);
static void find_many(mc_hint_table_t *t, size_t k, const char *const *keys,
                      const uint64_t *tags, size_t *e);
static size_t claim_locked(mc_hint_table_t *t, uint64_t tag);
static bool endpoint_id(mc_hint_table_t *t, const char *endpoint, uint32_t *id);

mc_hint_table_t *mc_hint_table_new(size_t entries)
{
    if (entries == 0)
        return NULL;
    mc_hint_table_t *t = MC_NEW(mc_hint_table_t);
    if (!t)
        return NULL;
    t->n_sets = (entries + MC_HINT_WAYS - 1) / MC_HINT_WAYS;
    pthread_mutex_init(&t->mu, NULL);
    return t;
}

static size_t sets_bytes(const mc_hint_table_t *t) { return t->n_sets * sizeof(set_t); }
static size_t entries_bytes(const mc_hint_table_t *t)
{
    return t->n_sets * MC_HINT_WAYS * sizeof(entry_t);
}

/* Under t->mu. false when out of memory (the set is then skipped: a hint is only a guess).
 * Faulted in at once: keys land on random sets, so a fresh table would otherwise take a page
 * fault on almost every new key until all of it has been touched (a client's first 20 k
 * batched gets ran 2-4x slower). */
static bool table_alloc(mc_hint_table_t *t)
{
    if (t->sets)
        return true;
    set_t *sets = mc_pages_alloc(sets_bytes(t), 0); /* zeroed, cache-line aligned */
    entry_t *entries = mc_pages_alloc(entries_bytes(t), 0);
    uint32_t *ep_slots = mc_calloc(HINT_ENDPOINT_SLOTS, sizeof(*ep_slots));
    if (!sets || !entries || !ep_slots) {
        mc_pages_free(sets, sets_bytes(t));
        mc_pages_free(entries, entries_bytes(t));
        mc_free(ep_slots);
        return false;
    }
    t->ep_slots = ep_slots;
    mc_pages_prefault_huge(sets, sets_bytes(t));
    mc_pages_prefault_huge(entries, entries_bytes(t));
    t->sets = sets;
    t->entries = entries;
    return true;
}

void mc_hint_table_free(mc_hint_table_t *t)
{
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    if (t->sets) {
        for (size_t i = 0; i < t->n_sets * MC_HINT_WAYS; i++)
            mc_free(t->entries[i].key);
        mc_pages_free(t->entries, entries_bytes(t));
        mc_pages_free(t->sets, sets_bytes(t));
    }
    mc_free(t->eps);
    mc_free(t->ep_slots);
    mc_free(t);
}

/* A key's XXH3 (set_of and way_tag take their halves of it). */
static uint64_t key_tag(const char *key)
{
    return mc_hash_str(key);
}

static size_t set_of(const mc_hint_table_t *t, uint64_t tag)
{
    return (size_t)((tag >> 32) % t->n_sets); /* the low bits stay free for the way's tag */
}

static uint32_t way_tag(uint64_t tag)
{
    uint32_t w = (uint32_t)tag;
    return w ? w : 1; /* 0 marks an empty way */
}

/* Marks entry e as just used. Under t->mu. */
static void touch(mc_hint_table_t *t, size_t e)
{
    t->sets[e / MC_HINT_WAYS].used[e % MC_HINT_WAYS] = (uint32_t)++t->tick;
}

/* Prefetches entry e (both its lines). */
static void prefetch_entry(const mc_hint_table_t *t, size_t e, int rw)
{
    const char *p = (const char *)&t->entries[e];
    if (rw) {
        __builtin_prefetch(p, 1);
        __builtin_prefetch(p + 64, 1);
    } else {
        __builtin_prefetch(p);
        __builtin_prefetch(p + 64);
    }
}

/* The list position of endpoint (NUL within MC_HINT_ENDPOINT_MAX bytes) in *id, added to the
 * list if new; false when the list is full. Under t->mu. */
static bool endpoint_id(mc_hint_table_t *t, const char *endpoint, uint32_t *id)
{
    size_t len = strlen(endpoint);
    size_t mask = HINT_ENDPOINT_SLOTS - 1, i = (size_t)mc_hash64(endpoint, len) & mask;
    for (;; i = (i + 1) & mask) { /* at most half full: ends at an empty slot */
        uint32_t v = t->ep_slots[i];
        if (v == 0)
            break;
        if (memcmp(t->eps[v - 1].s, endpoint, len + 1) == 0) {
            *id = v - 1;
            return true;
        }
    }
    if (t->n_eps == HINT_ENDPOINTS_MAX ||
        mc_array_reserve(&t->eps, &t->cap_eps, t->n_eps + 1, 16) != MC_OK)
        return false;
    endpoint_name_t *en = &t->eps[t->n_eps];
    memset(en->s, 0, sizeof(en->s));
    memcpy(en->s, endpoint, len);
    *id = (uint32_t)t->n_eps++;
    t->ep_slots[i] = *id + 1;
    return true;
}

/* Index of key's entry, or SIZE_MAX. Under t->mu. */
static size_t find(mc_hint_table_t *t, const char *key, uint64_t tag)
{
    if (!t->sets)
        return SIZE_MAX;
    size_t si = set_of(t, tag);
    const set_t *st = &t->sets[si];
    uint32_t wt = way_tag(tag);
    for (int w = 0; w < MC_HINT_WAYS; w++) {
        if (st->tag[w] != wt)
            continue;
        size_t e = si * MC_HINT_WAYS + (size_t)w;
        if (strcmp(entry_key(&t->entries[e]), key) == 0)
            return e;
    }
    return SIZE_MAX;
}

/* find() for keys[0..k) (NULL keys skipped; tags[i] = key_tag(keys[i])) into e[i], in stages:
 * every key's set line, then every candidate entry, then every candidate's key copy are
 * prefetched before any key reads them. Under t->mu, with the table allocated. */
static void find_many(mc_hint_table_t *t, size_t k, const char *const *keys,
                      const uint64_t *tags, size_t *e)
{
    for (size_t i = 0; i < k; i++)
        if (keys[i])
            __builtin_prefetch(&t->sets[set_of(t, tags[i])], 1); /* a hit writes its tick */
    for (size_t i = 0; i < k; i++) { /* the first way with the tag: almost always the key */
        e[i] = SIZE_MAX;
        if (!keys[i])
            continue;
        size_t si = set_of(t, tags[i]);
        uint32_t wt = way_tag(tags[i]);
        for (int w = 0; w < MC_HINT_WAYS; w++) {
            if (t->sets[si].tag[w] == wt) {
                e[i] = si * MC_HINT_WAYS + (size_t)w;
                prefetch_entry(t, e[i], 0);
                break;
            }
        }
    }
    for (size_t i = 0; i < k; i++) /* long keys: their heap copies */
        if (e[i] != SIZE_MAX && t->entries[e[i]].key_heap)
            __builtin_prefetch(t->entries[e[i]].key);
    for (size_t i = 0; i < k; i++) /* two keys with one tag in a set: find() sorts it out */
        if (e[i] != SIZE_MAX && strcmp(entry_key(&t->entries[e[i]]), keys[i]) != 0)
            e[i] = find(t, keys[i], tags[i]);
}

/* A way for a key of this tag that is not in the table: an empty one, else the least recently
 * used (its tick furthest behind the table's); its tag is set (the caller fills the entry).
 * Under t->mu. */
static size_t claim_locked(mc_hint_table_t *t, uint64_t tag)
{
    size_t si = set_of(t, tag), w = 0;
    set_t *st = &t->sets[si];
    uint32_t now = (uint32_t)t->tick, oldest = 0;
    for (size_t c = 0; c < MC_HINT_WAYS; c++) {
        if (st->tag[c] == 0) {
            w = c;
            break;
        }
        uint32_t age = now - st->used[c]; /* modulo 2^32 */
        if (age >= oldest) {
            oldest = age;
            w = c;
        }
    }
    st->tag[w] = way_tag(tag);
    return si * MC_HINT_WAYS + w;
}

void mc_hint_set(mc_hint_table_t *t, const char *key, const mc_replica_hint_t *h)
{
    mc_hint_set_many(t, 1, &key, h);
}

#define CHUNK 64 /* keys per lock hold in the batch calls */

void mc_hint_set_many(mc_hint_table_t *t, size_t n, const char *const *keys,
                      const mc_replica_hint_t *hints)
{
    if (!t)
        return;
    uint64_t tags[CHUNK];
    size_t e[CHUNK];
    bool claimed[CHUNK];
    uint32_t ep[CHUNK];    /* their endpoints' list positions */
    const char *ok[CHUNK]; /* the keys whose hint fits, NULL for the others */
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t k = n - base < CHUNK ? n - base : CHUNK;
        for (size_t i = 0; i < k; i++) {
            const mc_replica_hint_t *h = &hints[base + i];
            bool fits = strnlen(h->endpoint, MC_HINT_ENDPOINT_MAX) < MC_HINT_ENDPOINT_MAX;
            ok[i] = fits ? keys[base + i] : NULL;
            tags[i] = fits ? key_tag(ok[i]) : 0;
        }
        pthread_mutex_lock(&t->mu);
        if (!table_alloc(t)) {
            pthread_mutex_unlock(&t->mu);
            return;
        }
        find_many(t, k, ok, tags, e);
        for (size_t i = 0; i < k; i++) { /* misses take a way (a key twice in the batch: once) */
            claimed[i] = false;
            if (!ok[i])
                continue;
            if (e[i] == SIZE_MAX)
                e[i] = find(t, ok[i], tags[i]); /* its set line is cached by now */
            if (!endpoint_id(t, hints[base + i].endpoint, &ep[i])) {
                /* not recorded: neither may the key's older hint (and lease) stay */
                if (e[i] != SIZE_MAX)
                    t->sets[e[i] / MC_HINT_WAYS].tag[e[i] % MC_HINT_WAYS] = 0;
                ok[i] = NULL;
                continue;
            }
            if (e[i] == SIZE_MAX) {
                e[i] = claim_locked(t, tags[i]);
                claimed[i] = true;
            }
            touch(t, e[i]);
            prefetch_entry(t, e[i], 1);
        }
        for (size_t i = 0; i < k; i++)
            if (claimed[i] && t->entries[e[i]].key && strlen(ok[i]) >= KEY_INLINE)
                __builtin_prefetch(t->entries[e[i]].key, 1);
        for (size_t i = 0; i < k; i++) {
            if (!ok[i])
                continue;
            entry_t *en = &t->entries[e[i]];
            if (claimed[i] && strlen(ok[i]) < KEY_INLINE) {
                memcpy(en->kin, ok[i], strlen(ok[i]) + 1);
                en->key_heap = false;
            } else if (claimed[i]) {
                size_t klen = strlen(ok[i]);
                en->key_heap = false; /* until the copy below is in place */
                if (klen >= en->key_cap) { /* keys are capped (MC_STORE_KEY_MAX) */
                    char *kc = mc_malloc(klen + 1);
                    if (!kc) { /* the way stays empty: a hint is only a guess */
                        t->sets[e[i] / MC_HINT_WAYS].tag[e[i] % MC_HINT_WAYS] = 0;
                        continue;
                    }
                    mc_free(en->key);
                    en->key = kc;
                    en->key_cap = (uint32_t)(klen + 1);
                }
                memcpy(en->key, ok[i], klen + 1);
                en->key_heap = true;
            }
            const mc_replica_hint_t *h = &hints[base + i];
            en->ep = ep[i];
            en->addr = h->addr;
            en->size = h->size;
            en->checksum = h->checksum;
            en->lease_until_ms = h->lease_until_ms;
        }
        pthread_mutex_unlock(&t->mu);
    }
}

bool mc_hint_get(mc_hint_table_t *t, const char *key, mc_replica_hint_t *out)
{
    bool hit = false;
    mc_hint_get_many(t, 1, &key, out, &hit);
    return hit;
}

void mc_hint_get_many(mc_hint_table_t *t, size_t n, const char *const *keys,
                      mc_replica_hint_t *out, bool *hit)
{
    uint64_t tags[CHUNK];
    size_t e[CHUNK];
    for (size_t base = 0; base < n; base += CHUNK) {
        size_t k = n - base < CHUNK ? n - base : CHUNK;
        for (size_t i = 0; i < k; i++) {
            hit[base + i] = false;
            if (t && keys[base + i])
                tags[i] = key_tag(keys[base + i]);
        }
        if (!t)
            continue;
        pthread_mutex_lock(&t->mu);
        if (!t->sets) {
            pthread_mutex_unlock(&t->mu);
            continue;
        }
        find_many(t, k, keys + base, tags, e);
        for (size_t i = 0; i < k; i++) {
            if (e[i] == SIZE_MAX)
                continue;
            const entry_t *en = &t->entries[e[i]];
            mc_replica_hint_t *h = &out[base + i];
            memcpy(h->endpoint, t->eps[en->ep].s, sizeof(h->endpoint));
            h->addr = en->addr;
            h->size = en->size;
            h->checksum = en->checksum;
            h->lease_until_ms = en->lease_until_ms;
            touch(t, e[i]);
            hit[base + i] = true;
        }
        pthread_mutex_unlock(&t->mu);
    }
}

void mc_hint_drop(mc_hint_table_t *t, const char *key)
{
    if (!t)
        return;
    uint64_t tag = key_tag(key);
    pthread_mutex_lock(&t->mu);
    size_t e = find(t, key, tag);
    if (e != SIZE_MAX)
        t->sets[e / MC_HINT_WAYS].tag[e % MC_HINT_WAYS] = 0;
    pthread_mutex_unlock(&t->mu);
}

void mc_hint_clear(mc_hint_table_t *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    if (t->sets)
        memset(t->sets, 0, t->n_sets * sizeof(set_t));
    pthread_mutex_unlock(&t->mu);
}
