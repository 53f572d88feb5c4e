/* Object event log of the master (committed / evicted / removed / segment_lost) and the paged
 * object listing used by subscribers to resynchronise. Owner thread only, like the rest of the
 * core. See docs/internals/conductor.md §2 for the stream's contract.
 *
 * Storage: a ring of `cap` pointers; slot (seq - 1) % cap holds the event with that seq. Each
 * event is ONE allocation: a small header followed by key, segment and host, each
 * NUL-terminated (so the RPC layer can hand them to protobuf-c without copying). When the ring
 * is full the oldest event is freed and first_seq advances: a subscriber still asking for it
 * is told "gap" and resynchronises. An allocation failure drops every stored event (the stream
 * becomes a gap for everybody) rather than losing one silently. */
#include "master/master_int.h"

#include "common/alloc.h"
#include "common/log.h"

#include <string.h>

struct master_ev {
    uint64_t size;
    uint16_t klen;
    uint8_t kind, seg_len, host_len;
    char data[]; /* key \0 segment \0 host \0 */
};

mc_status_t master_events_init(mc_master_t *m, uint32_t cap)
{
    m->ev_cap = cap;
    m->ev_first = m->ev_next = 1;
    if (!cap)
        return MC_OK;
    m->ev_ring = mc_calloc(cap, sizeof(*m->ev_ring));
    return m->ev_ring ? MC_OK : MC_ERR_NO_MEMORY;
}

void master_events_free(mc_master_t *m)
{
    if (m->ev_ring) {
        for (uint32_t i = 0; i < m->ev_cap; i++)
            mc_free(m->ev_ring[i]);
    }
    mc_free(m->ev_ring);
    m->ev_ring = NULL;
}

static void ev_drop_all(mc_master_t *m)
{
    for (uint32_t i = 0; i < m->ev_cap; i++) {
        mc_free(m->ev_ring[i]);
        m->ev_ring[i] = NULL;
    }
    m->ev_first = m->ev_next;
}

/* Appends one event. key may be NULL (segment_lost). Strings are copied. */
static void ev_append(mc_master_t *m, int kind, const char *key, size_t klen, uint64_t size,
                      const segment_t *s)
{
    if (!m->ev_cap)
        return;
    size_t sl = strlen(s->name), hl = strlen(s->host_label);
    if (klen > UINT16_MAX || sl > UINT8_MAX || hl > UINT8_MAX) /* mount/put_start cap these */
        klen = sl = hl = 0;
    struct master_ev *e = mc_malloc(sizeof(*e) + klen + sl + hl + 3);
    uint64_t seq = m->ev_next++;
    m->cnt.events++;
    if (!e) {
        MC_LOG_ERROR("master: no memory for an object event; subscribers will resync");
        ev_drop_all(m);
        return;
    }
    e->size = size;
    e->klen = (uint16_t)klen;
    e->kind = (uint8_t)kind;
    e->seg_len = (uint8_t)sl;
    e->host_len = (uint8_t)hl;
    char *p = e->data;
    if (klen)
        memcpy(p, key, klen);
    p[klen] = 0;
    p += klen + 1;
    memcpy(p, s->name, sl + 1);
    p += sl + 1;
    memcpy(p, s->host_label, hl + 1);
    uint32_t slot = (uint32_t)((seq - 1) % m->ev_cap);
    if (m->ev_ring[slot]) { /* full: the oldest event goes */
        mc_free(m->ev_ring[slot]);
        m->ev_first = seq - m->ev_cap + 1;
    }
    m->ev_ring[slot] = e;
}

void master_events_obj(mc_master_t *m, int kind, obj_t *o)
{
    if (!m->ev_cap)
        return;
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (s)
            ev_append(m, kind, obj_key(o), o->klen, o->size, s);
    }
}

void master_events_obj_seg(mc_master_t *m, int kind, obj_t *o, uint32_t seg_id)
{
    segment_t *s = master_seg_slot(m, seg_id);
    if (s)
        ev_append(m, kind, obj_key(o), o->klen, o->size, s);
}

void master_events_segment_lost(mc_master_t *m, uint32_t seg_id)
{
    segment_t *s = m->segs[seg_id];
    if (s)
        ev_append(m, MC_MASTER_EV_SEGMENT_LOST, NULL, 0, 0, s);
}

mc_status_t mc_master_events_read(mc_master_t *m, uint64_t from_seq, uint64_t epoch, size_t max,
                                  mc_master_event_t *out, size_t *n_p,
                                  mc_master_events_info_t *info_p)
{
    *n_p = 0;
    info_p->epoch = m->epoch;
    info_p->first_seq = m->ev_first;
    info_p->next_seq = m->ev_next;
    info_p->gap = false;
    if (!m->ev_cap)
        return MC_ERR_NOT_SUPPORTED;
    if ((epoch && epoch != m->epoch) || from_seq < m->ev_first || from_seq > m->ev_next) {
        info_p->gap = true;
        return MC_OK;
    }
    size_t n = 0;
    for (uint64_t seq = from_seq; seq < m->ev_next && n < max; seq++) {
        const struct master_ev *e = m->ev_ring[(seq - 1) % m->ev_cap];
        mc_master_event_t *o = &out[n++];
        o->seq = seq;
        o->kind = e->kind;
        o->key = e->data;
        o->klen = e->klen;
        o->size = e->size;
        o->segment = e->data + e->klen + 1;
        o->host = o->segment + e->seg_len + 1;
    }
    *n_p = n;
    return MC_OK;
}

bool mc_master_events_pending(const mc_master_t *m, uint64_t from_seq, uint64_t epoch)
{
    if (!m->ev_cap)
        return true; /* answer at once (NOT_SUPPORTED) */
    return (epoch && epoch != m->epoch) || from_seq < m->ev_first || from_seq != m->ev_next;
}

mc_status_t mc_master_list_objects(mc_master_t *m, uint64_t cursor, size_t max,
                                   mc_master_list_fn fn, void *ctx, uint64_t *next_cursor_p,
                                   bool *done_p, uint64_t *seq_p, uint64_t *epoch_p)
{
    *seq_p = m->ev_next;
    *epoch_p = m->epoch;
    *done_p = false;
    *next_cursor_p = cursor;
    size_t n = 0;
    uint64_t b = cursor;
    /* Whole buckets only, so that a page never splits a chain (chains are short: load <= 1). */
    for (; b < m->n_buckets && n < max; b++) {
        for (obj_t *o = m->buckets[b]; o; o = o->hnext) {
            if (o->state != OBJ_READABLE)
                continue;
            const char *segs[MC_MASTER_MAX_REPLICAS], *hosts[MC_MASTER_MAX_REPLICAS];
            uint32_t k = 0;
            for (uint32_t i = 0; i < o->n_rep && k < MC_MASTER_MAX_REPLICAS; i++) {
                segment_t *s = master_seg_slot(m, o->rep[i].seg);
                if (!s || (s->state != SEG_MOUNTED && s->state != SEG_DRAINING))
                    continue;
                segs[k] = s->name;
                hosts[k] = s->host_label;
                k++;
            }
            if (!k)
                continue;
            mc_status_t st = fn(ctx, obj_key(o), o->klen, o->size, segs, hosts, k);
            if (st != MC_OK)
                return st;
            n++;
        }
    }
    *next_cursor_p = b;
    *done_p = b >= m->n_buckets;
    return MC_OK;
}
