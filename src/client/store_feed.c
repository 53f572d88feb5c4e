/* Store client placement feed: a thread that long-polls the master's object events for the
 * placements of keys under a prefix and records each as a replica hint with a read lease.
 *
 * Contract: the feed is a shortcut only. A missed event (a gap, a new master, a hint pushed out
 * of the table) means the next get of that key asks the master; a pushed placement is read
 * under the same checksum and lease checks as any cached lease. The feed thread is the only
 * user of feed_master, feed_from and feed_epoch; feed_stop (an atomic) tells it to end, and
 * store_feed_stop joins it before freeing what the feed holds.
 */
#include "client/store_int.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"
#include "rpc/frame.h"

#include <string.h>

static void feed_remember(mc_store_t *s, ProtobufCBinaryData wire_key,
                          const McRpc__ReplicaListResponse *rl, uint64_t t0_ms);
static void feed_pause(mc_store_t *s, uint32_t ms);
static mc_status_t feed_poll(mc_store_t *s, uint64_t from, uint64_t epoch, uint32_t wait_ms,
                             McRpc__PollEventsResponse **r_p, uint64_t *t0_p);
static void *feed_main(void *arg);

/* ------------------------------------------------------------------ placement feed */

/* With placement_feed_prefix set in the store configuration, a thread long-polls the
 * master's object events asking for placements (PollEvents with_placements): every object
 * committed under the prefix arrives with its replicas, checksum and a read lease granted to
 * this client, and is recorded like the answer of a get's lookup (store_hint_remember). This
 * client's first get of such a key then reads the replica without asking the master (one round
 * trip, like a repeated read), verified by checksum as every cached-lease read is. For readers
 * of what others write: a decode instance reading the blocks a prefill instance put. Nothing
 * depends on it: a missed event (a gap, a new master, a key pushed out of the hint table) only
 * means that get asks the master. The master holds each pushed object under a read lease, as
 * if this client had read it (store-client.md, "Placement feed"). A tenant-bound client gets
 * read grants for the placements with each answer and presents them before recording any
 * (a grant the engine no longer holds when the get reads: the read is refused, the get asks
 * the master, as for any failed cached-lease read). */
#define FEED_WAIT_MS 200         /* long-poll wait: also how long close may wait for the thread */
#define FEED_MAX_EVENTS 1024     /* events per answer */
#define FEED_RETRY_MS 100        /* after a failed poll */

/* The placement of key from the feed, answered to a poll sent at t0_ms: recorded as a get's
 * lookup would be, on the replica this client would read first. */
static void feed_remember(mc_store_t *s, ProtobufCBinaryData wire_key,
                          const McRpc__ReplicaListResponse *rl, uint64_t t0_ms)
{
    size_t order[16];
    char key[MC_RPC_MAX_KEY + 1];
    if (mc_wire_key_check(wire_key) != MC_OK)
        return;
    memcpy(key, wire_key.data, wire_key.len);
    key[wire_key.len] = 0;
    if (store_key_check(key) != MC_OK || rl->status != MC_OK ||
        store_replica_order(s, rl->replicas, rl->n_replicas, order, 16, NULL) == 0)
        return;
    const McRpc__ReplicaDesc *rd = rl->replicas[order[0]];
    if (rd->size != rl->size)
        return;
    store_hint_remember(s, key, rd, rl, t0_ms);
    atomic_fetch_add(&s->n_feed_placements, 1);
}

static void feed_pause(mc_store_t *s, uint32_t ms)
{
    for (uint32_t t = 0; t < ms && !atomic_load(&s->feed_stop); t += 10)
        mc_sleep_ms(10);
}

/* One PollEvents call of the feed from (from, epoch), waiting up to wait_ms. On MC_OK, *r_p
 * is the answer (the caller frees it) and *t0_p when it was sent. */
static mc_status_t feed_poll(mc_store_t *s, uint64_t from, uint64_t epoch, uint32_t wait_ms,
                             McRpc__PollEventsResponse **r_p, uint64_t *t0_p)
{
    McRpc__PollEventsRequest q = MC_RPC__POLL_EVENTS_REQUEST__INIT;
    q.from_seq = from;
    q.tenant_id = s->master.tenant;
    q.epoch = epoch;
    q.wait_ms = wait_ms;
    q.max_events = FEED_MAX_EVENTS;
    q.with_placements = 1;
    q.placement_prefix = mc_wire_key_str(s->feed_prefix);
    *t0_p = mc_now_ms(); /* never later than the master's grant of the leases */
    ProtobufCMessage *resp = NULL;
    /* idempotent: a poll asked again after a lost answer only grants its leases again */
    mc_status_t st = mc_master_client_call(&s->feed_master, MC_OP_POLL_EVENTS, &q.base, &resp, 1);
    *r_p = (McRpc__PollEventsResponse *)resp;
    if (st == MC_OK && (*r_p)->status != MC_OK) {
        st = (*r_p)->status;
        mc_rpc_response_free(resp);
        *r_p = NULL;
    }
    return st;
}

/* Where the feed goes on in a new master's stream (r: its answer to a poll of the old one):
 * its last FEED_MAX_EVENTS events held, so that what was committed there while the feed was
 * switching over (a failover takes seconds; puts resume before the feed's next poll) is pushed
 * too, and a master that has been up for long does not push its whole history. */
static uint64_t feed_resume_seq(const McRpc__PollEventsResponse *r)
{
    uint64_t back = r->next_seq > FEED_MAX_EVENTS ? r->next_seq - FEED_MAX_EVENTS : 0;
    return back > r->first_available_seq ? back : r->first_available_seq;
}

static void *feed_main(void *arg)
{
    mc_store_t *s = arg;
    uint64_t from = s->feed_from, epoch = s->feed_epoch;
    while (!atomic_load(&s->feed_stop)) {
        McRpc__PollEventsResponse *r = NULL;
        uint64_t t0;
        mc_status_t st = feed_poll(s, from, epoch, FEED_WAIT_MS, &r, &t0);
        if (st == MC_ERR_NOT_SUPPORTED) {
            MC_LOG_WARN("placement feed: the master keeps no event log (event_buffer_size 0); "
                        "feed stopped");
            break;
        }
        if (st != MC_OK) {
            MC_LOG_DEBUG("placement feed: poll failed: %s", mc_status_str(st));
            feed_pause(s, FEED_RETRY_MS);
            continue;
        }
        if (r->epoch != epoch) { /* a new master: a restart, or with etcd:// a failover that
                                    the feed's master client followed */
            from = feed_resume_seq(r);
            epoch = r->epoch;
            MC_LOG_INFO("placement feed: new master event stream (epoch %llu), from event %llu "
                        "of %llu", (unsigned long long)epoch, (unsigned long long)from,
                        (unsigned long long)r->next_seq);
        } else if (r->gap) { /* events dropped: go on from now (the feed is only a shortcut) */
            from = r->next_seq;
        } else {
            /* a tenant-bound client's grants for the placements, before any get can use them */
            store_grants_present(s, r->grants, r->n_grants);
            for (size_t i = 0; i < r->n_events; i++)
                if (r->events[i]->placement)
                    feed_remember(s, r->events[i]->key, r->events[i]->placement, t0);
            from += r->n_events;
        }
        mc_rpc_response_free(&r->base);
    }
    return NULL;
}

mc_status_t store_feed_start(mc_store_t *s, const char *prefix, const char *master_addr)
{
    if (!prefix)
        return MC_OK;
    if (!s->hints) {
        MC_LOG_WARN("placement_feed_prefix is set but replica hints are off "
                    "(replica_hint_slots): no placement feed");
        return MC_OK;
    }
    if (!s->lease_cache)
        MC_LOG_INFO("placement feed without the lease cache: placements are used as hints only");
    if (!(s->feed_prefix = mc_strdup(prefix)))
        return MC_ERR_NO_MEMORY;
    /* a call's deadline is the client's timeout: the long poll's wait comes on top */
    mc_status_t st = mc_master_client_init(&s->feed_master, master_addr,
                                           s->master.timeout_ms + FEED_WAIT_MS, s->client_id,
                                           s->auth);
    if (st != MC_OK)
        return st;
    /* Where the stream is now, before setup returns: everything committed after that is pushed
     * (a thread that asked later would miss what was put meanwhile). */
    McRpc__PollEventsResponse *r = NULL;
    uint64_t t0;
    st = feed_poll(s, 0, 0, 0, &r, &t0); /* from 0: answered at once with a gap */
    if (st == MC_ERR_NOT_SUPPORTED) {
        MC_LOG_WARN("placement_feed_prefix is set but the master keeps no event log "
                    "(event_buffer_size 0): no placement feed");
        store_feed_stop(s); /* no feed: nothing of it kept */
        return MC_OK;
    }
    if (st != MC_OK) {
        MC_LOG_ERROR("store setup: placement feed: PollEvents failed: %s", mc_status_str(st));
        return st;
    }
    s->feed_from = r->next_seq;
    s->feed_epoch = r->epoch;
    mc_rpc_response_free(&r->base);
    if (pthread_create(&s->feed, NULL, feed_main, s) != 0)
        return MC_ERR_INTERNAL;
    s->feed_started = 1;
    MC_LOG_INFO("placement feed on for keys starting with \"%s\"", prefix);
    return MC_OK;
}

void store_feed_stop(mc_store_t *s)
{
    if (s->feed_started) {
        atomic_store(&s->feed_stop, 1);
        pthread_join(s->feed, NULL);
        s->feed_started = 0;
    }
    mc_master_client_fini(&s->feed_master); /* zeroed when never started: a no-op */
    mc_free(s->feed_prefix);
    s->feed_prefix = NULL;
}
