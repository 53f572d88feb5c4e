/* Views of the master state for the admin HTTP endpoints (owner thread only; service.c posts
 * the calls to the loop). Bodies follow upstream Mooncake's admin server (field names, newline
 * lists); the endpoints and their caps are described in docs/internals/master.md, "HTTP". */
#include "master/master_int.h"

#include "common/alloc.h"
#include "common/buf.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

static const char *seg_state_name(int st)
{
    switch (st) {
    case SEG_MOUNTED: return "mounted";
    case SEG_RECOVERING: return "recovering";
    case SEG_DRAINING: return "draining";
    default: return "unknown";
    }
}

/* Upstream's SegmentStatus names (RECOVERING is ours: a segment known from the WAL that its
 * owner has not re-mounted yet). */
static const char *seg_status_upstream(int st)
{
    switch (st) {
    case SEG_MOUNTED: return "OK";
    case SEG_RECOVERING: return "RECOVERING";
    case SEG_DRAINING: return "GRACEFULLY_UNMOUNTING";
    default: return "UNDEFINED";
    }
}

static char *dump(json_t *j)
{
    if (!j)
        return NULL;
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        return NULL;
    char *r = mc_strdup(s); /* hand out mc_free-able memory */
    free(s);
    return r;
}

/* Upstream's AllocatedBuffer::Descriptor of one replica. Our segments do not record a
 * transport (the client picks tcp, shm or ucx per peer); "tcp" is the one every peer has. */
static json_t *descriptor(const mc_master_replica_t *r)
{
    json_t *d = json_object();
    json_object_set_new(d, "size_", json_integer((json_int_t)r->size));
    json_object_set_new(d, "buffer_address_", json_integer((json_int_t)r->addr));
    json_object_set_new(d, "protocol_", json_string("tcp"));
    json_object_set_new(d, "transport_endpoint_", json_string(r->endpoint));
    return d;
}

char *mc_master_query_key_json(mc_master_t *m, const mc_tenant_scope_t *scope, const char *key,
                               size_t klen, mc_status_t *st_p)
{
    mc_master_replica_t reps[MC_MASTER_MAX_REPLICAS];
    uint32_t n = 0;
    uint64_t size = 0;
    char ik[MASTER_KEY_MAX];
    size_t iklen = mc_tenant_key(scope, key, klen, ik, sizeof(ik));
    *st_p = mc_master_peek_replicas(m, ik, iklen, reps, &n, &size); /* 0: INVALID_KEY */
    if (*st_p != MC_OK)
        return NULL;
    obj_t *o = master_obj_find(m, ik, iklen, master_key_hash(ik, iklen));
    uint64_t now = master_now(m);
    json_t *j = json_object();
    json_object_set_new(j, "success", json_true());
    json_t *data = json_array();
    for (uint32_t i = 0; i < n; i++)
        json_array_append_new(data, descriptor(&reps[i]));
    json_object_set_new(j, "data", data);
    /* ours, after upstream's two fields: the object and where its replicas live */
    json_object_set_new(j, "key", json_stringn(key, klen));
    json_object_set_new(j, "size", json_integer((json_int_t)size));
    char sum[24];
    snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)o->checksum);
    json_object_set_new(j, "checksum", json_string(sum));
    json_object_set_new(j, "leased", json_boolean(o->t_lease > now));
    json_object_set_new(j, "hard_pinned", json_boolean(o->flags & OF_HARD_PIN));
    json_object_set_new(j, "soft_pinned", json_boolean((o->flags & OF_SOFT_PIN) && o->t_pin > now));
    json_t *rl = json_array();
    for (uint32_t i = 0; i < n; i++) {
        json_t *r = json_object();
        json_object_set_new(r, "segment", json_string(reps[i].segment_name));
        json_object_set_new(r, "endpoint", json_string(reps[i].endpoint));
        json_object_set_new(r, "address", json_integer((json_int_t)reps[i].addr));
        json_array_append_new(rl, r);
    }
    json_object_set_new(j, "replicas", rl);
    char *s = dump(j);
    if (!s)
        *st_p = MC_ERR_NO_MEMORY;
    return s;
}

char *mc_master_batch_query_keys_json(mc_master_t *m, const mc_tenant_scope_t *scope,
                                      const char *const *keys, const size_t *klens, size_t n)
{
    json_t *data = json_object();
    for (size_t i = 0; i < n; i++) {
        mc_master_replica_t reps[MC_MASTER_MAX_REPLICAS];
        uint32_t nr = 0;
        char ik[MASTER_KEY_MAX];
        size_t iklen = mc_tenant_key(scope, keys[i], klens[i], ik, sizeof(ik));
        mc_status_t st = mc_master_peek_replicas(m, ik, iklen, reps, &nr, NULL);
        json_t *item = json_object();
        json_object_set_new(item, "ok", json_boolean(st == MC_OK));
        if (st == MC_OK) {
            json_t *values = json_array();
            for (uint32_t k = 0; k < nr; k++)
                json_array_append_new(values, descriptor(&reps[k]));
            json_object_set_new(item, "values", values);
        } else {
            json_object_set_new(item, "error", json_string(mc_status_name(st)));
        }
        /* keys were checked to be UTF-8 by the caller; a repeated key appears once */
        json_object_setn_new(data, keys[i], klens[i], item);
    }
    json_t *j = json_object();
    json_object_set_new(j, "success", json_true());
    json_object_set_new(j, "data", data);
    return dump(j);
}

typedef struct key_list {
    const mc_tenant_scope_t *scope; /* NULL = every key */
    mc_buf_t b;
    size_t max_bytes, n;
    bool truncated;
} key_list_t;

static mc_status_t key_list_one(void *ctx, const char *key, size_t klen, uint64_t size,
                                const char *const *segments, const char *const *hosts, uint32_t n)
{
    (void)size;
    (void)segments;
    (void)hosts;
    (void)n;
    key_list_t *kl = ctx;
    if (!mc_tenant_scope_key(kl->scope, key, klen, &key, &klen))
        return MC_OK;
    if (kl->b.len + klen + 1 > kl->max_bytes) {
        kl->truncated = true;
        return MC_ERR_BUSY; /* stops the listing */
    }
    mc_status_t st = mc_buf_append(&kl->b, key, klen);
    if (st == MC_OK)
        st = mc_buf_append(&kl->b, "\n", 1);
    kl->n++;
    return st;
}

char *mc_master_key_list(mc_master_t *m, const mc_tenant_scope_t *scope, size_t max_bytes,
                         size_t *n_p, bool *truncated_p)
{
    key_list_t kl = {.scope = scope, .max_bytes = max_bytes};
    uint64_t next = 0, seq, epoch;
    bool done = false;
    mc_status_t st = mc_master_list_objects(m, 0, SIZE_MAX, key_list_one, &kl, &next, &done,
                                            &seq, &epoch);
    char *s = NULL;
    if ((st == MC_OK || kl.truncated) && (s = mc_buf_take_str(&kl.b)) != NULL) {
        *n_p = kl.n;
        *truncated_p = kl.truncated;
    }
    mc_buf_free(&kl.b);
    return s;
}

/* Segments new allocations may still read from: mounted and draining. */
static bool seg_listed(const segment_t *s)
{
    return s && (s->state == SEG_MOUNTED || s->state == SEG_DRAINING);
}

char *mc_master_segment_names(mc_master_t *m)
{
    mc_buf_t b = {0};
    mc_status_t st = MC_OK;
    for (uint32_t id = 0; id < m->n_segs && st == MC_OK; id++) {
        segment_t *s = master_seg_slot(m, id);
        if (seg_listed(s))
            st = mc_buf_printf(&b, "%s\n", s->name);
    }
    char *r = st == MC_OK ? mc_buf_take_str(&b) : NULL;
    mc_buf_free(&b);
    return r;
}

static void uuid_str(const uint8_t u[16], char out[48])
{
    uint64_t a, b;
    memcpy(&a, u, 8);
    memcpy(&b, u + 8, 8);
    snprintf(out, 48, "%llu-%llu", (unsigned long long)a, (unsigned long long)b);
}

/* A client's local-disk (SSD) tier as JSON: its STORED LOCAL_DISK replicas, their bytes, the
 * capacity it reported, whether it takes offloads, its queued tasks. */
static json_t *disk_tier_json(const client_t *c)
{
    char buf[48];
    json_t *j = json_object();
    uuid_str(c->id, buf);
    json_object_set_new(j, "client_id", json_string(buf));
    json_object_set_new(j, "endpoint", json_string(c->disk_endpoint ? c->disk_endpoint : ""));
    json_object_set_new(j, "objects", json_integer((json_int_t)c->disk_objects));
    json_object_set_new(j, "bytes", json_integer((json_int_t)c->disk_bytes));
    json_object_set_new(j, "capacity_bytes", json_integer((json_int_t)c->disk_capacity));
    json_object_set_new(j, "offloading", json_boolean(c->disk_offloading));
    json_object_set_new(j, "queued_tasks", json_integer((json_int_t)c->dq_n));
    return j;
}

/* The client with a mounted disk whose id is id, or NULL. */
static const client_t *disk_owner(mc_master_t *m, const uint8_t id[16])
{
    for (size_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].disk_mounted && !memcmp(m->clients[i].id, id, 16))
            return &m->clients[i];
    return NULL;
}

char *mc_master_segments_detail_json(mc_master_t *m)
{
    json_t *arr = json_array();
    size_t total = 0;
    for (uint32_t id = 0; id < m->n_segs; id++) {
        segment_t *s = master_seg_slot(m, id);
        if (!s)
            continue;
        total++;
        mc_master_allocator_stats_t st = {0};
        if (s->alloc)
            mc_master_allocator_stats(s->alloc, &st);
        uint64_t cap = s->alloc ? mc_master_allocator_capacity(s->alloc) : s->size;
        char buf[64];
        json_t *j = json_object();
        /* upstream's fields */
        json_object_set_new(j, "segment_name", json_string(s->name));
        uuid_str(s->uuid, buf);
        json_object_set_new(j, "segment_id", json_string(buf));
        uuid_str(s->owner_id, buf);
        json_object_set_new(j, "client_id", json_string(buf));
        snprintf(buf, sizeof(buf), "0x%llx", (unsigned long long)s->base);
        json_object_set_new(j, "base_address", json_string(buf));
        json_object_set_new(j, "size_bytes", json_integer((json_int_t)s->size));
        snprintf(buf, sizeof(buf), "%g GiB", (double)s->size / 1024.0 / 1024.0 / 1024.0);
        json_object_set_new(j, "size_human", json_string(buf));
        json_object_set_new(j, "te_endpoint", json_string(s->endpoint));
        json_object_set_new(j, "protocol", json_string("tcp"));
        json_object_set_new(j, "status", json_string(seg_status_upstream(s->state)));
        json_object_set_new(j, "allocator_used_bytes", json_integer((json_int_t)st.used));
        json_object_set_new(j, "allocator_capacity_bytes", json_integer((json_int_t)cap));
        json_object_set_new(j, "allocator_usage_percent",
                            json_real(cap ? (double)st.used / (double)cap * 100.0 : 0.0));
        /* ours */
        json_object_set_new(j, "name", json_string(s->name));
        json_object_set_new(j, "endpoint", json_string(s->endpoint));
        json_object_set_new(j, "host_label", json_string(s->host_label));
        json_object_set_new(j, "state", json_string(seg_state_name(s->state)));
        json_object_set_new(j, "base", json_integer((json_int_t)s->base));
        json_object_set_new(j, "size", json_integer((json_int_t)s->size));
        if (s->alloc) {
            json_object_set_new(j, "used", json_integer((json_int_t)st.used));
            json_object_set_new(j, "largest_free", json_integer((json_int_t)st.largest_free));
            json_object_set_new(j, "fragmentation", json_real(st.fragmentation));
        }
        json_object_set_new(j, "replicas", json_integer((json_int_t)s->n_replicas));
        /* the page size its memory was mapped with (0 = not reported by its client) */
        json_object_set_new(j, "page_size", json_integer((json_int_t)s->page_size));
        json_object_set_new(j, "huge_pages", json_boolean(s->page_size > 4096));
        const client_t *dc = disk_owner(m, s->owner_id);
        if (dc)
            json_object_set_new(j, "disk", disk_tier_json(dc));
        json_array_append_new(arr, j);
    }
    json_t *tiers = json_array();
    for (size_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].disk_mounted)
            json_array_append_new(tiers, disk_tier_json(&m->clients[i]));
    json_t *root = json_object();
    json_object_set_new(root, "total_segments", json_integer((json_int_t)total));
    json_object_set_new(root, "segments", arr);
    json_object_set_new(root, "disk_tiers", tiers);
    return dump(root);
}

char *mc_master_query_segment_text(mc_master_t *m, const char *name, mc_status_t *st_p)
{
    mc_master_segment_status_t ss;
    *st_p = mc_master_query_segment(m, name, &ss);
    if (*st_p != MC_OK)
        return NULL;
    mc_buf_t b = {0};
    char *r = NULL;
    if (mc_buf_printf(&b, "%s\nUsed(bytes): %llu\nCapacity(bytes) : %llu\n", name,
                      (unsigned long long)ss.used, (unsigned long long)ss.capacity) == MC_OK)
        r = mc_buf_take_str(&b);
    mc_buf_free(&b);
    if (!r)
        *st_p = MC_ERR_NO_MEMORY;
    return r;
}

/* A tenant name as a JSON string: names are bytes (no controls); bytes that are not UTF-8
 * become '?' so that the document stays valid. */
static json_t *tenant_name_json(const char *name)
{
    json_t *j = json_string(name);
    if (j)
        return j;
    char copy[MC_TENANT_MAX + 1];
    size_t i = 0;
    for (; name[i] && i < MC_TENANT_MAX; i++)
        copy[i] = (unsigned char)name[i] < 0x80 ? name[i] : '?';
    copy[i] = 0;
    return json_string(copy);
}

static json_t *tenant_json(const mc_master_tenant_info_t *t)
{
    json_t *j = json_object();
    json_object_set_new(j, "tenant_id", tenant_name_json(t->name));
    json_object_set_new(j, "requested_quota_bytes", json_integer((json_int_t)t->quota));
    json_object_set_new(j, "effective_quota_bytes", json_integer((json_int_t)t->quota));
    json_object_set_new(j, "charged_bytes", json_integer((json_int_t)t->used));
    json_object_set_new(j, "admission_closed", json_boolean(t->quota == 0));
    json_object_set_new(j, "over_quota", json_boolean(t->used > t->quota));
    json_object_set_new(j, "has_explicit_policy", json_boolean(t->quota != 0));
    /* ours */
    json_object_set_new(j, "objects", json_integer((json_int_t)t->objects));
    json_object_set_new(j, "quota_reject_total", json_integer((json_int_t)t->rejects));
    return j;
}

char *mc_master_tenants_json(const mc_master_tenant_info_t *t, size_t n, bool one)
{
    json_t *data = one ? tenant_json(t) : json_array();
    for (size_t i = 0; !one && i < n; i++)
        json_array_append_new(data, tenant_json(&t[i]));
    json_t *j = json_object();
    json_object_set_new(j, "success", json_true());
    json_object_set_new(j, "data", data);
    return dump(j);
}
