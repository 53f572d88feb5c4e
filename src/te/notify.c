/* Transfer engine notifications and probes (te.h, "notifications"): the receive queue, the
 * send and drain calls, and the probe. Both travel as tcp control frames (NOTIFY 6, PROBE 7 in
 * tcp_frame.h) on a connection of their own, through the first started transport with the
 * `control` op (tcp), whatever transport carries the peer's data, so same-host shm peers are
 * reached the same way. The tcp server validates a NOTIFY (mc_te_notify_parse) and queues it
 * here (mc_te_notify_push). Design: docs/internals/transfer-engine.md, "Notifications and
 * probes".
 */
#include "te/transport.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/net.h"

#include <string.h>

typedef struct mc_te_note {
    struct mc_te_note *next;
    size_t name_len, msg_len;
    char data[]; /* name, NUL, msg, NUL */
} mc_te_note_t;

static mc_te_transport_t *control_transport(mc_te_t *te)
{
    for (int k = 0; k < MC_TE_TP_COUNT; k++)
        if (te->tp[k].ops && te->tp[k].ops->control)
            return &te->tp[k];
    return NULL;
}

mc_status_t mc_te_notify_push(mc_te_t *te, const char *name, size_t name_len, const char *msg,
                              size_t msg_len)
{
    if (name_len > MC_TE_NOTIFY_NAME_MAX || msg_len > MC_TE_NOTIFY_MSG_MAX) {
        mc_te_notify_count_bad(te);
        return MC_ERR_TOO_LARGE;
    }
    size_t bytes = name_len + msg_len;
    pthread_mutex_lock(&te->notify_mu);
    bool full = te->n_notes >= MC_TE_NOTIFY_QUEUE_MAX ||
                te->note_bytes + bytes > MC_TE_NOTIFY_QUEUE_BYTES;
    if (full) {
        uint64_t refused = ++te->notify_stats.refused_full;
        pthread_mutex_unlock(&te->notify_mu);
        /* once, then every 1024th: a sender hammering a full queue does not flood the log */
        if ((refused & 1023) == 1)
            MC_LOG_WARN("te: notification queue full (%d entries or %u bytes): refused %llu "
                        "so far; drain it (get_notifies)", MC_TE_NOTIFY_QUEUE_MAX,
                        (unsigned)MC_TE_NOTIFY_QUEUE_BYTES, (unsigned long long)refused);
        return MC_ERR_BUSY;
    }
    pthread_mutex_unlock(&te->notify_mu);
    mc_te_note_t *n = mc_malloc(sizeof(*n) + bytes + 2);
    if (!n)
        return MC_ERR_NO_MEMORY;
    n->next = NULL;
    n->name_len = name_len;
    n->msg_len = msg_len;
    if (name_len)
        memcpy(n->data, name, name_len);
    n->data[name_len] = '\0';
    if (msg_len)
        memcpy(n->data + name_len + 1, msg, msg_len);
    n->data[name_len + 1 + msg_len] = '\0';
    pthread_mutex_lock(&te->notify_mu);
    /* checked again: another thread may have filled the queue meanwhile */
    if (te->n_notes >= MC_TE_NOTIFY_QUEUE_MAX ||
        te->note_bytes + bytes > MC_TE_NOTIFY_QUEUE_BYTES) {
        te->notify_stats.refused_full++;
        pthread_mutex_unlock(&te->notify_mu);
        mc_free(n);
        return MC_ERR_BUSY;
    }
    if (te->notes_tail)
        te->notes_tail->next = n;
    else
        te->notes_head = n;
    te->notes_tail = n;
    te->n_notes++;
    te->note_bytes += bytes;
    te->notify_stats.received++;
    pthread_mutex_unlock(&te->notify_mu);
    return MC_OK;
}

void mc_te_notify_count_bad(mc_te_t *te)
{
    pthread_mutex_lock(&te->notify_mu);
    te->notify_stats.refused_bad++;
    pthread_mutex_unlock(&te->notify_mu);
}

void mc_te_notify_fini(mc_te_t *te)
{
    while (te->notes_head) {
        mc_te_note_t *n = te->notes_head;
        te->notes_head = n->next;
        mc_free(n);
    }
    te->notes_tail = NULL;
    te->n_notes = 0;
    te->note_bytes = 0;
}

mc_status_t mc_te_notify_drain(mc_te_t *te, size_t max, mc_te_notify_t **notes_p, size_t *n_p)
{
    if (!te || !notes_p || !n_p)
        return MC_ERR_INVALID_PARAMS;
    *notes_p = NULL;
    *n_p = 0;
    pthread_mutex_lock(&te->notify_mu);
    size_t n = te->n_notes;
    if (max && n > max)
        n = max;
    size_t bytes = 0;
    mc_te_note_t *first = te->notes_head, *last = NULL;
    /* detach the first n entries */
    mc_te_note_t *x = first;
    for (size_t i = 0; i < n; i++) {
        bytes += x->name_len + x->msg_len + 2;
        last = x;
        x = x->next;
    }
    if (n == 0) {
        pthread_mutex_unlock(&te->notify_mu);
        return MC_OK;
    }
    te->notes_head = x;
    if (!x)
        te->notes_tail = NULL;
    te->n_notes -= n;
    te->note_bytes -= bytes - 2 * n;
    last->next = NULL;
    pthread_mutex_unlock(&te->notify_mu);

    /* one block: the entries, then their strings */
    mc_te_notify_t *out = mc_malloc(n * sizeof(*out) + bytes);
    if (!out) {
        /* put them back in front, in order */
        pthread_mutex_lock(&te->notify_mu);
        last->next = te->notes_head;
        te->notes_head = first;
        if (!te->notes_tail)
            te->notes_tail = last;
        te->n_notes += n;
        te->note_bytes += bytes - 2 * n;
        pthread_mutex_unlock(&te->notify_mu);
        return MC_ERR_NO_MEMORY;
    }
    char *p = (char *)(out + n);
    size_t i = 0;
    for (mc_te_note_t *e = first; e; i++) {
        size_t sz = e->name_len + e->msg_len + 2;
        memcpy(p, e->data, sz);
        out[i].name = p;
        out[i].name_len = e->name_len;
        out[i].msg = p + e->name_len + 1;
        out[i].msg_len = e->msg_len;
        p += sz;
        mc_te_note_t *next = e->next;
        mc_free(e);
        e = next;
    }
    *notes_p = out;
    *n_p = n;
    return MC_OK;
}

void mc_te_notify_free(mc_te_notify_t *notes)
{
    mc_free(notes);
}

void mc_te_notify_stats(mc_te_t *te, mc_te_notify_stats_t *stats_p)
{
    if (!te || !stats_p)
        return;
    pthread_mutex_lock(&te->notify_mu);
    *stats_p = te->notify_stats;
    stats_p->queued = te->n_notes;
    pthread_mutex_unlock(&te->notify_mu);
}

mc_status_t mc_te_notify_send(mc_te_t *te, mc_te_segment_t seg, const char *name,
                              size_t name_len, const char *msg, size_t msg_len)
{
    if (!te || (!name && name_len) || (!msg && msg_len))
        return MC_ERR_INVALID_PARAMS;
    if (name_len > MC_TE_NOTIFY_NAME_MAX || msg_len > MC_TE_NOTIFY_MSG_MAX) {
        MC_LOG_WARN("te: notification over its cap (name %zu of %d bytes, msg %zu of %d)",
                    name_len, MC_TE_NOTIFY_NAME_MAX, msg_len, MC_TE_NOTIFY_MSG_MAX);
        return MC_ERR_TOO_LARGE;
    }
    mc_te_peer_t *p = mc_te_peer_by_handle(te, seg);
    if (!p)
        return MC_ERR_INVALID_PARAMS;
    if (p->is_local)
        return mc_te_notify_push(te, name, name_len, msg, msg_len);
    mc_te_transport_t *t = control_transport(te);
    if (!t)
        return MC_ERR_NOT_SUPPORTED;
    size_t len = MC_TE_NOTIFY_HDR + name_len + msg_len;
    uint8_t *body = mc_malloc(len);
    if (!body)
        return MC_ERR_NO_MEMORY;
    mc_te_notify_encode(body, name, name_len, msg, msg_len);
    mc_status_t st = t->ops->control(t->ctx, p->host, p->port, MC_TE_OP_NOTIFY, body, len,
                                     te->timeout_ms);
    mc_free(body);
    if (st != MC_OK)
        MC_LOG_WARN("te: notification to %s not delivered: %s", p->name, mc_status_name(st));
    return st;
}

mc_status_t mc_te_probe(mc_te_t *te, const char *server_name, uint32_t timeout_ms)
{
    char host[MC_HOST_MAX];
    uint16_t port = 0;
    if (!te || !server_name || strlen(server_name) >= MC_TE_NAME_MAX ||
        mc_net_split_hostport(server_name, host, &port) != MC_OK || port == 0) {
        MC_LOG_WARN("te: probe: '%s' is not host:port", server_name ? server_name : "(null)");
        return MC_ERR_INVALID_PARAMS;
    }
    mc_te_transport_t *t = control_transport(te);
    if (!t)
        return MC_ERR_NOT_SUPPORTED;
    mc_status_t st = t->ops->control(t->ctx, host, port, MC_TE_OP_PROBE, NULL, 0,
                                     timeout_ms ? timeout_ms : te->timeout_ms);
    if (st != MC_OK)
        MC_LOG_DEBUG("te: probe of %s: %s", server_name, mc_status_name(st));
    return st;
}
