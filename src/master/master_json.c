/* JSON views of the master state for the admin HTTP endpoints (owner thread only). */
#include "master/master_int.h"

#include "common/alloc.h"

#include <jansson.h>
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

static char *dump(json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s)
        return NULL;
    char *r = mc_strdup(s); /* hand out mc_free-able memory */
    free(s);
    return r;
}

char *mc_master_query_key_json(mc_master_t *m, const char *key, size_t klen)
{
    if (!key || klen == 0 || klen > 4096)
        return NULL;
    obj_t *o = master_obj_find(m, key, klen, master_key_hash(key, klen));
    if (!o)
        return NULL;
    uint64_t now = master_now(m);
    json_t *j = json_object();
    json_object_set_new(j, "key", json_stringn(key, klen));
    json_object_set_new(j, "state", json_string(o->state == OBJ_WRITING ? "writing" : "readable"));
    json_object_set_new(j, "size", json_integer((json_int_t)o->size));
    char sum[24];
    snprintf(sum, sizeof(sum), "%016llx", (unsigned long long)o->checksum);
    json_object_set_new(j, "checksum", json_string(sum));
    json_object_set_new(j, "leased", json_boolean(o->state == OBJ_READABLE && o->t_lease > now));
    json_object_set_new(j, "hard_pinned", json_boolean(o->flags & OF_HARD_PIN));
    json_object_set_new(j, "soft_pinned", json_boolean((o->flags & OF_SOFT_PIN) && o->t_pin > now));
    json_t *reps = json_array();
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (!s || !s->alloc)
            continue;
        json_t *r = json_object();
        json_object_set_new(r, "segment", json_string(s->name));
        json_object_set_new(r, "endpoint", json_string(s->endpoint));
        json_object_set_new(r, "address",
                            json_integer((json_int_t)mc_master_allocator_addr(s->alloc, o->rep[i].blk)));
        json_object_set_new(r, "segment_state", json_string(seg_state_name(s->state)));
        json_array_append_new(reps, r);
    }
    json_object_set_new(j, "replicas", reps);
    return dump(j);
}

char *mc_master_segments_json(mc_master_t *m)
{
    json_t *arr = json_array();
    for (uint32_t id = 0; id < m->n_segs; id++) {
        segment_t *s = master_seg_slot(m, id);
        if (!s)
            continue;
        json_t *j = json_object();
        json_object_set_new(j, "name", json_string(s->name));
        json_object_set_new(j, "endpoint", json_string(s->endpoint));
        json_object_set_new(j, "host_label", json_string(s->host_label));
        json_object_set_new(j, "state", json_string(seg_state_name(s->state)));
        json_object_set_new(j, "base", json_integer((json_int_t)s->base));
        json_object_set_new(j, "size", json_integer((json_int_t)s->size));
        if (s->alloc) {
            mc_master_allocator_stats_t st;
            mc_master_allocator_stats(s->alloc, &st);
            json_object_set_new(j, "used", json_integer((json_int_t)st.used));
            json_object_set_new(j, "largest_free", json_integer((json_int_t)st.largest_free));
            json_object_set_new(j, "fragmentation", json_real(st.fragmentation));
        }
        json_object_set_new(j, "replicas", json_integer((json_int_t)s->n_replicas));
        json_array_append_new(arr, j);
    }
    json_t *root = json_object();
    json_object_set_new(root, "segments", arr);
    return dump(root);
}
