/* Global prefix index (model and event contract in index.h). A u64map takes each block hash to
 * an entry listing the segments holding it (up to 4 inline, more in a heap array); freed entries
 * are chained for reuse. Segments and hosts are interned by name to small ids, the segment
 * carrying its host and tier. Events apply only in sequence: a gap turns the index stale until
 * a resync replaces its content. Also here: the store-key -> block-hash rule and the JSON event
 * parser of mooncake_conductor's input. Not thread-safe: callers serialise access. */
#include "conductor/index.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/hash.h"
#include "common/log.h"
#include "conductor/u64map.h"

#include <ctype.h>
#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define INLINE_HOLDERS 4
#define MAX_QUERY_HOSTS 4096

typedef struct idx_entry {
    uint64_t hash;
    uint32_t n, cap; /* cap == 0: free entry (next free in inl[0]) */
    union {
        uint32_t inl[INLINE_HOLDERS];
        uint32_t *ext;
    } h;
} idx_entry_t;

typedef struct idx_segment {
    char *name;
    uint32_t host;
    mc_conductor_tier_t tier;
    uint64_t holders;
} idx_segment_t;

struct mc_conductor_index {
    mc_conductor_index_config_t cfg;
    mc_conductor_u64map_t blocks; /* hash -> entry index */
    idx_entry_t *entries;
    size_t n_entries, cap_entries;
    uint32_t free_head; /* UINT32_MAX: none */
    mc_conductor_u64map_t seg_by_name, host_by_name;
    idx_segment_t *segs;
    size_t n_segs, cap_segs;
    char **hosts;
    size_t n_hosts, cap_hosts;
    mc_conductor_index_stats_t st;
};

static inline uint32_t *entry_holders(idx_entry_t *e)
{
    return e->cap > INLINE_HOLDERS ? e->h.ext : e->h.inl;
}
static inline const uint32_t *entry_holders_c(const idx_entry_t *e)
{
    return e->cap > INLINE_HOLDERS ? e->h.ext : e->h.inl;
}

void mc_conductor_index_config_default(mc_conductor_index_config_t *cfg_p)
{
    memset(cfg_p, 0, sizeof(*cfg_p));
    cfg_p->first_seq = 1;
    cfg_p->max_blocks = 64u << 20;
    cfg_p->max_segments = 65536;
    cfg_p->max_hosts = 65536;
    cfg_p->size_hint = 1024;
}

mc_status_t mc_conductor_index_create(const mc_conductor_index_config_t *cfg,
                                      mc_conductor_index_t **idx_p)
{
    mc_conductor_index_t *idx = MC_NEW(mc_conductor_index_t);
    if (!idx)
        return MC_ERR_NO_MEMORY;
    if (cfg)
        idx->cfg = *cfg;
    else
        mc_conductor_index_config_default(&idx->cfg);
    if (idx->cfg.max_blocks == 0 || idx->cfg.max_blocks > UINT32_MAX - 1)
        idx->cfg.max_blocks = UINT32_MAX - 1;
    if (idx->cfg.max_segments == 0 || idx->cfg.max_segments > UINT32_MAX - 1)
        idx->cfg.max_segments = 65536;
    if (idx->cfg.max_hosts == 0 || idx->cfg.max_hosts > UINT32_MAX - 1)
        idx->cfg.max_hosts = 65536;
    idx->free_head = UINT32_MAX;
    idx->st.next_seq = idx->cfg.first_seq;
    if (mc_conductor_u64map_init(&idx->blocks, idx->cfg.size_hint) != MC_OK ||
        mc_conductor_u64map_init(&idx->seg_by_name, 64) != MC_OK ||
        mc_conductor_u64map_init(&idx->host_by_name, 64) != MC_OK) {
        mc_conductor_index_destroy(idx);
        return MC_ERR_NO_MEMORY;
    }
    *idx_p = idx;
    return MC_OK;
}

static void index_clear_blocks(mc_conductor_index_t *idx)
{
    for (size_t i = 0; i < idx->n_entries; i++) {
        if (idx->entries[i].cap > INLINE_HOLDERS)
            mc_free(idx->entries[i].h.ext);
    }
    idx->n_entries = 0;
    idx->free_head = UINT32_MAX;
    mc_conductor_u64map_clear(&idx->blocks);
    for (size_t i = 0; i < idx->n_segs; i++)
        idx->segs[i].holders = 0;
    idx->st.holders = 0;
}

void mc_conductor_index_destroy(mc_conductor_index_t *idx)
{
    if (!idx)
        return;
    index_clear_blocks(idx);
    mc_free(idx->entries);
    for (size_t i = 0; i < idx->n_segs; i++)
        mc_free(idx->segs[i].name);
    mc_free(idx->segs);
    for (size_t i = 0; i < idx->n_hosts; i++)
        mc_free(idx->hosts[i]);
    mc_free(idx->hosts);
    mc_conductor_u64map_fini(&idx->blocks);
    mc_conductor_u64map_fini(&idx->seg_by_name);
    mc_conductor_u64map_fini(&idx->host_by_name);
    mc_free(idx);
}

const char *mc_conductor_index_state_name(mc_conductor_index_state_t s)
{
    switch (s) {
    case MC_CONDUCTOR_INDEX_OK: return "ok";
    case MC_CONDUCTOR_INDEX_STALE: return "stale";
    case MC_CONDUCTOR_INDEX_RESYNCING: return "resyncing";
    }
    return "?";
}

const char *mc_conductor_event_kind_name(mc_conductor_event_kind_t kind)
{
    switch (kind) {
    case MC_CONDUCTOR_EV_COMMITTED: return "committed";
    case MC_CONDUCTOR_EV_EVICTED: return "evicted";
    case MC_CONDUCTOR_EV_REMOVED: return "removed";
    case MC_CONDUCTOR_EV_SEGMENT_LOST: return "segment_lost";
    }
    return "?";
}

mc_status_t mc_conductor_tier_parse(const char *s, mc_conductor_tier_t *tier_p)
{
    if (strcmp(s, "local") == 0)
        *tier_p = MC_CONDUCTOR_TIER_LOCAL;
    else if (strcmp(s, "pool") == 0 || strcmp(s, "dram") == 0)
        *tier_p = MC_CONDUCTOR_TIER_POOL;
    else if (strcmp(s, "ssd") == 0)
        *tier_p = MC_CONDUCTOR_TIER_SSD;
    else
        return MC_ERR_INVALID_PARAMS;
    return MC_OK;
}

/* Interned names: map from XXH3(name) to id; a (practically impossible) collision between two
 * different names is refused rather than merged. */
static mc_status_t name_find(const mc_conductor_u64map_t *m, char *const *names_of, size_t stride,
                             const char *name, uint32_t *id_p, int *found_p)
{
    uint64_t *v = mc_conductor_u64map_get(m, mc_hash_str(name));
    *found_p = 0;
    if (!v)
        return MC_OK;
    const char *stored = *(char *const *)((const char *)names_of + stride * (size_t)*v);
    if (strcmp(stored, name) != 0)
        return MC_ERR_INVALID_KEY;
    *id_p = (uint32_t)*v;
    *found_p = 1;
    return MC_OK;
}

mc_status_t mc_conductor_index_host_id(mc_conductor_index_t *idx, const char *host,
                                       uint32_t *id_p)
{
    if (!host || !*host || strlen(host) > MC_CONDUCTOR_NAME_MAX)
        return MC_ERR_INVALID_PARAMS;
    int found;
    mc_status_t st = name_find(&idx->host_by_name, idx->hosts, sizeof(char *), host, id_p, &found);
    if (st != MC_OK || found)
        return st;
    if (idx->n_hosts >= idx->cfg.max_hosts)
        return MC_ERR_TOO_LARGE;
    if (mc_array_reserve(&idx->hosts, &idx->cap_hosts, idx->n_hosts + 1, 16) != MC_OK)
        return MC_ERR_NO_MEMORY;
    char *copy = mc_strdup(host);
    if (!copy)
        return MC_ERR_NO_MEMORY;
    if (mc_conductor_u64map_put(&idx->host_by_name, mc_hash_str(host), idx->n_hosts, NULL) !=
        MC_OK) {
        mc_free(copy);
        return MC_ERR_NO_MEMORY;
    }
    idx->hosts[idx->n_hosts] = copy;
    *id_p = (uint32_t)idx->n_hosts++;
    idx->st.hosts = idx->n_hosts;
    return MC_OK;
}

static mc_status_t seg_find(const mc_conductor_index_t *idx, const char *segment, uint32_t *id_p,
                            int *found_p)
{
    return name_find(&idx->seg_by_name, (char *const *)&idx->segs[0].name, sizeof(idx_segment_t),
                     segment, id_p, found_p);
}

static mc_status_t seg_intern(mc_conductor_index_t *idx, const char *segment, const char *host,
                              mc_conductor_tier_t tier, uint32_t *id_p)
{
    if (!segment || !*segment || strlen(segment) > MC_CONDUCTOR_NAME_MAX)
        return MC_ERR_INVALID_PARAMS;
    int found = 0;
    mc_status_t st = idx->n_segs ? seg_find(idx, segment, id_p, &found) : MC_OK;
    if (st != MC_OK || found)
        return st;
    if (tier > MC_CONDUCTOR_TIER_SSD)
        return MC_ERR_INVALID_PARAMS;
    if (idx->n_segs >= idx->cfg.max_segments)
        return MC_ERR_TOO_LARGE;
    uint32_t host_id;
    st = mc_conductor_index_host_id(idx, host, &host_id);
    if (st != MC_OK)
        return st;
    if (mc_array_reserve(&idx->segs, &idx->cap_segs, idx->n_segs + 1, 16) != MC_OK)
        return MC_ERR_NO_MEMORY;
    char *copy = mc_strdup(segment);
    if (!copy)
        return MC_ERR_NO_MEMORY;
    if (mc_conductor_u64map_put(&idx->seg_by_name, mc_hash_str(segment), idx->n_segs, NULL) !=
        MC_OK) {
        mc_free(copy);
        return MC_ERR_NO_MEMORY;
    }
    idx->segs[idx->n_segs] = (idx_segment_t){copy, host_id, tier, 0};
    *id_p = (uint32_t)idx->n_segs++;
    idx->st.segments = idx->n_segs;
    return MC_OK;
}

static mc_status_t entry_add_holder(mc_conductor_index_t *idx, uint64_t hash, uint32_t seg)
{
    uint64_t *slot = mc_conductor_u64map_get(&idx->blocks, hash);
    idx_entry_t *e;
    if (!slot) {
        if (mc_conductor_u64map_get(&idx->blocks, hash) == NULL &&
            idx->blocks.count >= idx->cfg.max_blocks)
            return MC_ERR_TOO_LARGE;
        uint32_t ei;
        if (idx->free_head != UINT32_MAX) {
            ei = idx->free_head;
            idx->free_head = idx->entries[ei].h.inl[0];
        } else {
            if (mc_array_reserve(&idx->entries, &idx->cap_entries, idx->n_entries + 1, 1024) !=
                MC_OK)
                return MC_ERR_NO_MEMORY;
            ei = (uint32_t)idx->n_entries++;
        }
        e = &idx->entries[ei];
        memset(e, 0, sizeof(*e));
        e->hash = hash;
        e->cap = INLINE_HOLDERS;
        if (mc_conductor_u64map_put(&idx->blocks, hash, ei, NULL) != MC_OK) {
            e->cap = 0;
            e->h.inl[0] = idx->free_head;
            idx->free_head = ei;
            return MC_ERR_NO_MEMORY;
        }
    } else {
        e = &idx->entries[*slot];
    }
    uint32_t *hs = entry_holders(e);
    for (uint32_t i = 0; i < e->n; i++) {
        if (hs[i] == seg)
            return MC_OK; /* idempotent */
    }
    if (e->n == e->cap) {
        uint32_t ncap = e->cap * 2;
        uint32_t *n = mc_malloc(ncap * sizeof(uint32_t));
        if (!n)
            return MC_ERR_NO_MEMORY;
        memcpy(n, hs, e->n * sizeof(uint32_t));
        if (e->cap > INLINE_HOLDERS)
            mc_free(e->h.ext);
        e->h.ext = n;
        e->cap = ncap;
        hs = n;
    }
    hs[e->n++] = seg;
    idx->segs[seg].holders++;
    idx->st.holders++;
    return MC_OK;
}

static void entry_free(mc_conductor_index_t *idx, uint32_t ei)
{
    idx_entry_t *e = &idx->entries[ei];
    mc_conductor_u64map_remove(&idx->blocks, e->hash, NULL);
    if (e->cap > INLINE_HOLDERS)
        mc_free(e->h.ext);
    e->cap = 0;
    e->n = 0;
    e->h.inl[0] = idx->free_head;
    idx->free_head = ei;
}

/* Remove seg from entry ei; frees the entry when empty. Returns 1 if it was there. */
static int entry_drop_holder(mc_conductor_index_t *idx, uint32_t ei, uint32_t seg)
{
    idx_entry_t *e = &idx->entries[ei];
    uint32_t *hs = entry_holders(e);
    for (uint32_t i = 0; i < e->n; i++) {
        if (hs[i] == seg) {
            hs[i] = hs[--e->n];
            idx->segs[seg].holders--;
            idx->st.holders--;
            if (e->n == 0)
                entry_free(idx, ei);
            return 1;
        }
    }
    return 0;
}

static mc_status_t index_apply_body(mc_conductor_index_t *idx, const mc_conductor_event_t *ev)
{
    uint32_t seg;
    int found = 0;
    mc_status_t st;
    switch (ev->kind) {
    case MC_CONDUCTOR_EV_COMMITTED:
        st = seg_intern(idx, ev->segment, ev->host, ev->tier, &seg);
        if (st != MC_OK)
            return st;
        return entry_add_holder(idx, ev->block_hash, seg);
    case MC_CONDUCTOR_EV_EVICTED:
    case MC_CONDUCTOR_EV_REMOVED: {
        if (!ev->segment || !*ev->segment || strlen(ev->segment) > MC_CONDUCTOR_NAME_MAX)
            return MC_ERR_INVALID_PARAMS;
        if (idx->n_segs && (st = seg_find(idx, ev->segment, &seg, &found)) != MC_OK)
            return st;
        uint64_t *slot = found ? mc_conductor_u64map_get(&idx->blocks, ev->block_hash) : NULL;
        if (!slot || !entry_drop_holder(idx, (uint32_t)*slot, seg))
            idx->st.events_unknown++;
        return MC_OK;
    }
    case MC_CONDUCTOR_EV_SEGMENT_LOST: {
        if (!ev->segment || !*ev->segment || strlen(ev->segment) > MC_CONDUCTOR_NAME_MAX)
            return MC_ERR_INVALID_PARAMS;
        if (idx->n_segs && (st = seg_find(idx, ev->segment, &seg, &found)) != MC_OK)
            return st;
        if (!found) {
            idx->st.events_unknown++;
            return MC_OK;
        }
        for (size_t i = 0; i < idx->n_entries && idx->segs[seg].holders; i++) {
            if (idx->entries[i].cap)
                entry_drop_holder(idx, (uint32_t)i, seg);
        }
        MC_LOG_INFO("conductor index: segment %s lost, its blocks dropped", ev->segment);
        return MC_OK;
    }
    }
    return MC_ERR_INVALID_PARAMS;
}

mc_status_t mc_conductor_index_apply(mc_conductor_index_t *idx, const mc_conductor_event_t *ev)
{
    if (idx->st.state != MC_CONDUCTOR_INDEX_OK) {
        idx->st.events_refused++;
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    if (ev->seq < idx->st.next_seq) {
        idx->st.events_duplicate++;
        return MC_OK;
    }
    if (ev->seq > idx->st.next_seq) {
        idx->st.gaps++;
        idx->st.gap_expected = idx->st.next_seq;
        idx->st.gap_got = ev->seq;
        idx->st.state = MC_CONDUCTOR_INDEX_STALE;
        idx->st.events_refused++;
        MC_LOG_WARN("conductor index: event gap (expected seq %llu, got %llu): index stale, "
                    "resync required",
                    (unsigned long long)idx->st.gap_expected, (unsigned long long)ev->seq);
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    }
    idx->st.next_seq++;
    if ((int)ev->kind == 0) /* another tenant's event (KV_EVENT_UNDEFINED): only its seq */
        return MC_OK;
    mc_status_t st = index_apply_body(idx, ev);
    if (st == MC_OK) {
        idx->st.events_applied++;
    } else if (st == MC_ERR_TOO_LARGE || st == MC_ERR_NO_MEMORY) {
        /* We can no longer represent the store's content: stale until a resync. */
        idx->st.state = MC_CONDUCTOR_INDEX_STALE;
        idx->st.events_refused++;
        MC_LOG_ERROR("conductor index: %s applying seq %llu: index stale",
                     mc_status_name(st), (unsigned long long)ev->seq);
    } else {
        idx->st.events_refused++;
        MC_LOG_WARN("conductor index: refused event seq %llu (%s): %s",
                    (unsigned long long)ev->seq, mc_conductor_event_kind_name(ev->kind),
                    mc_status_name(st));
    }
    return st;
}

mc_status_t mc_conductor_index_resync_begin(mc_conductor_index_t *idx)
{
    index_clear_blocks(idx);
    idx->st.state = MC_CONDUCTOR_INDEX_RESYNCING;
    return MC_OK;
}

mc_status_t mc_conductor_index_snapshot_add(mc_conductor_index_t *idx, uint64_t block_hash,
                                            const char *segment, const char *host,
                                            mc_conductor_tier_t tier)
{
    if (idx->st.state != MC_CONDUCTOR_INDEX_RESYNCING)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    uint32_t seg;
    mc_status_t st = seg_intern(idx, segment, host, tier, &seg);
    if (st != MC_OK)
        return st;
    return entry_add_holder(idx, block_hash, seg);
}

mc_status_t mc_conductor_index_resync_end(mc_conductor_index_t *idx, uint64_t next_seq)
{
    if (idx->st.state != MC_CONDUCTOR_INDEX_RESYNCING)
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    idx->st.next_seq = next_seq;
    idx->st.state = MC_CONDUCTOR_INDEX_OK;
    idx->st.resyncs++;
    return MC_OK;
}

mc_status_t mc_conductor_index_query(const mc_conductor_index_t *idx, const uint64_t *hashes,
                                     size_t n, const uint32_t *hosts, size_t n_hosts,
                                     unsigned flags, mc_conductor_prefix_t *out)
{
    if (n_hosts > MAX_QUERY_HOSTS)
        return MC_ERR_TOO_LARGE;
    memset(out, 0, n_hosts * sizeof(*out));
    if (idx->st.state != MC_CONDUCTOR_INDEX_OK && !(flags & MC_CONDUCTOR_QUERY_ALLOW_STALE))
        return MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS;
    /* alive bits per candidate: 1 local, 2 pool, 4 any */
    uint8_t alive[MAX_QUERY_HOSTS];
    memset(alive, 7, n_hosts);
    size_t n_alive = n_hosts;
    for (size_t i = 0; i < n && n_alive; i++) {
        const uint64_t *slot = mc_conductor_u64map_get(&idx->blocks, hashes[i]);
        if (!slot)
            break;
        const idx_entry_t *e = &idx->entries[*slot];
        const uint32_t *hs = entry_holders_c(e);
        int has_pool = 0, has_ssd = 0;
        for (uint32_t k = 0; k < e->n; k++) {
            mc_conductor_tier_t t = idx->segs[hs[k]].tier;
            has_pool |= t == MC_CONDUCTOR_TIER_POOL;
            has_ssd |= t == MC_CONDUCTOR_TIER_SSD;
        }
        for (size_t c = 0; c < n_hosts; c++) {
            if (!alive[c])
                continue;
            int on_host = 0;
            for (uint32_t k = 0; k < e->n && !on_host; k++) {
                const idx_segment_t *s = &idx->segs[hs[k]];
                on_host = s->host == hosts[c] && s->tier != MC_CONDUCTOR_TIER_SSD;
            }
            if (alive[c] & 1) {
                if (on_host)
                    out[c].local++;
                else
                    alive[c] &= (uint8_t)~1;
            }
            if (alive[c] & 2) {
                if (on_host || has_pool)
                    out[c].pool++;
                else
                    alive[c] &= (uint8_t)~2;
            }
            if (alive[c] & 4) {
                if (on_host || has_pool || has_ssd)
                    out[c].any++;
                else
                    alive[c] &= (uint8_t)~4;
            }
            if (!alive[c])
                n_alive--;
        }
    }
    return MC_OK;
}

int mc_conductor_index_holds(const mc_conductor_index_t *idx, uint64_t block_hash,
                             const char *segment)
{
    uint32_t seg;
    int found = 0;
    if (!idx->n_segs || seg_find(idx, segment, &seg, &found) != MC_OK || !found)
        return 0;
    const uint64_t *slot = mc_conductor_u64map_get(&idx->blocks, block_hash);
    if (!slot)
        return 0;
    const idx_entry_t *e = &idx->entries[*slot];
    const uint32_t *hs = entry_holders_c(e);
    for (uint32_t k = 0; k < e->n; k++) {
        if (hs[k] == seg)
            return 1;
    }
    return 0;
}

void mc_conductor_index_get_stats(const mc_conductor_index_t *idx,
                                  mc_conductor_index_stats_t *stats_p)
{
    *stats_p = idx->st;
    stats_p->blocks = idx->blocks.count;
}

uint64_t mc_conductor_key_hash(const char *key)
{
    const char *p = strrchr(key, '/');
    p = p ? p + 1 : key;
    size_t len = strlen(p);
    if (len > 0) {
        int hex = 0;
        const char *d = p;
        if (len > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
            hex = 1;
            d = p + 2;
        } else if (len == 16) {
            hex = 1;
        }
        size_t dl = strlen(d);
        int ok = dl > 0 && dl <= (hex ? 16u : 20u);
        for (size_t i = 0; ok && i < dl; i++)
            ok = hex ? isxdigit((unsigned char)d[i]) : isdigit((unsigned char)d[i]);
        if (ok) {
            errno = 0;
            char *end;
            unsigned long long v = strtoull(d, &end, hex ? 16 : 10);
            if (!errno && *end == '\0')
                return (uint64_t)v;
        }
    }
    return mc_hash_str(key);
}

static mc_status_t copy_name(json_t *v, char *buf)
{
    if (!v)
        return MC_OK;
    if (!json_is_string(v))
        return MC_ERR_PROTOCOL;
    size_t l = json_string_length(v);
    if (l > MC_CONDUCTOR_NAME_MAX)
        return MC_ERR_TOO_LARGE;
    const char *s = json_string_value(v);
    if (memchr(s, '\0', l))
        return MC_ERR_PROTOCOL;
    memcpy(buf, s, l + 1);
    return MC_OK;
}

mc_status_t mc_conductor_event_parse_json(const char *line, size_t len,
                                          mc_conductor_event_t *ev, char *segment_buf,
                                          char *host_buf)
{
    if (len > 64 * 1024)
        return MC_ERR_TOO_LARGE;
    json_error_t err;
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES, &err);
    if (!root)
        return MC_ERR_PROTOCOL;
    mc_status_t st = MC_ERR_PROTOCOL;
    memset(ev, 0, sizeof(*ev));
    segment_buf[0] = host_buf[0] = '\0';
    json_t *v;
    if (!json_is_object(root))
        goto out;
    v = json_object_get(root, "seq");
    if (!v || !json_is_integer(v) || json_integer_value(v) < 0)
        goto out;
    ev->seq = (uint64_t)json_integer_value(v);
    v = json_object_get(root, "kind");
    if (!v || !json_is_string(v))
        goto out;
    const char *k = json_string_value(v);
    if (strcmp(k, "committed") == 0)
        ev->kind = MC_CONDUCTOR_EV_COMMITTED;
    else if (strcmp(k, "evicted") == 0)
        ev->kind = MC_CONDUCTOR_EV_EVICTED;
    else if (strcmp(k, "removed") == 0)
        ev->kind = MC_CONDUCTOR_EV_REMOVED;
    else if (strcmp(k, "segment_lost") == 0)
        ev->kind = MC_CONDUCTOR_EV_SEGMENT_LOST;
    else
        goto out;
    v = json_object_get(root, "hash");
    json_t *key = json_object_get(root, "key");
    if (v && json_is_integer(v) && json_integer_value(v) >= 0) {
        ev->block_hash = (uint64_t)json_integer_value(v);
    } else if (v && json_is_string(v)) {
        const char *s = json_string_value(v);
        char *end;
        errno = 0;
        size_t sl = strlen(s);
        if (sl == 0 || sl > 18)
            goto out;
        unsigned long long h = strtoull(s, &end, 0);
        if (errno || *end || s[0] == '-')
            goto out;
        ev->block_hash = (uint64_t)h;
    } else if (v) {
        goto out;
    } else if (key && json_is_string(key) && json_string_length(key) <= 4096) {
        ev->block_hash = mc_conductor_key_hash(json_string_value(key));
    } else if (ev->kind != MC_CONDUCTOR_EV_SEGMENT_LOST) {
        goto out;
    }
    v = json_object_get(root, "size");
    if (v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0)
            goto out;
        ev->size = (uint64_t)json_integer_value(v);
    }
    if ((st = copy_name(json_object_get(root, "segment"), segment_buf)) != MC_OK ||
        (st = copy_name(json_object_get(root, "host"), host_buf)) != MC_OK)
        goto out;
    st = MC_ERR_PROTOCOL;
    if (!segment_buf[0])
        goto out;
    ev->segment = segment_buf;
    ev->host = host_buf[0] ? host_buf : NULL;
    ev->tier = MC_CONDUCTOR_TIER_POOL;
    v = json_object_get(root, "tier");
    if (v && (!json_is_string(v) || mc_conductor_tier_parse(json_string_value(v), &ev->tier)))
        goto out;
    st = MC_OK;
out:
    json_decref(root);
    return st;
}
