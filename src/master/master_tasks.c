/* Replica copy/move tasks (upstream's CreateCopyTask, CreateMoveTask, QueryTask, FetchTasks,
 * MarkTaskToComplete, Copy/Move Start/End/Revoke): docs/internals/master.md, "Replica tasks".
 *
 * A task names a key (internal), a source segment and target segments, and is assigned to the
 * client that mounted the source segment, which fetches it (PENDING -> PROCESSING), runs it
 * (Start: the master allocates the new replicas and holds them in the task, invisible to
 * readers; the client writes the verified bytes; End: they join the object, a move's source
 * replica leaves it, logged as a COMMIT; Revoke: they are freed) and marks it SUCCESS or
 * FAILED. Tasks are volatile (not logged); finished ones are kept for QueryTask up to
 * max_total_finished_tasks. The table is a plain array in creation order: every operation is
 * linear in the tasks held (at most the three caps together). Owner thread only. */
#include "master/master_int.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/time.h"

#include <string.h>
#include <sys/types.h>

enum { STEP_FETCHED = 0, STEP_STARTED = 1, STEP_ENDED = 2 };

typedef struct master_task {
    uint64_t id[2];
    uint8_t type, status;
    uint8_t step;                 /* PROCESSING: STEP_FETCHED, STEP_STARTED, STEP_ENDED */
    uint8_t client[16];
    uint64_t created_wall, updated_wall;
    uint64_t since_ms;            /* master clock: entered its current status */
    char *key;                    /* internal key, klen bytes (NUL-terminated) */
    size_t klen;
    char *source;
    char *targets[MC_MASTER_MAX_REPLICAS];
    uint32_t n_targets;
    uint64_t size, checksum;      /* the value as of the Start */
    obj_rep_t pend[MC_MASTER_MAX_REPLICAS]; /* allocated by the Start, not in the object */
    uint32_t n_pend;
    char *message;                /* NULL = "" */
} master_task_t;

static bool name_ok(const char *s)
{
    return s && s[0] && strnlen(s, MC_MASTER_NAME_MAX) < MC_MASTER_NAME_MAX;
}

static ssize_t task_index(mc_master_t *m, const uint64_t id[2])
{
    for (size_t i = 0; i < m->n_tasks; i++)
        if (m->tasks[i]->id[0] == id[0] && m->tasks[i]->id[1] == id[1])
            return (ssize_t)i;
    return -1;
}

static void task_free(master_task_t *t)
{
    mc_free(t->key);
    mc_free(t->source);
    for (uint32_t i = 0; i < t->n_targets; i++)
        mc_free(t->targets[i]);
    mc_free(t->message);
    mc_free(t);
}

/* The new replicas a task holds go: freed now (the owner is done with them), or parked for
 * the put release timeout (a task that timed out: its owner may still be writing them). */
static void pend_drop(mc_master_t *m, master_task_t *t, bool park)
{
    uint64_t now = master_now(m);
    for (uint32_t i = 0; i < t->n_pend; i++) {
        obj_rep_t *r = &t->pend[i];
        if (r->seg == SEG_NONE)
            continue;
        if (park)
            master_park_block(m, r->seg, r->blk, now + m->cfg.put_start_release_timeout_ms);
        else
            master_rep_free_block(m, r);
    }
    t->n_pend = 0;
}

/* Forgets the oldest finished tasks beyond the cap. */
static void prune_finished(mc_master_t *m)
{
    size_t i = 0;
    while (m->n_task_finished > m->cfg.max_total_finished_tasks && i < m->n_tasks) {
        master_task_t *t = m->tasks[i];
        if (t->status != MC_MASTER_TASK_FAILED && t->status != MC_MASTER_TASK_SUCCESS) {
            i++;
            continue;
        }
        task_free(t);
        memmove(&m->tasks[i], &m->tasks[i + 1], (m->n_tasks - i - 1) * sizeof(*m->tasks));
        m->n_tasks--;
        m->n_task_finished--;
    }
}

/* t (PENDING or PROCESSING) ends with status and message (copied, capped). */
static void task_finish(mc_master_t *m, master_task_t *t, int status, const char *msg, bool park)
{
    pend_drop(m, t, park);
    if (t->status == MC_MASTER_TASK_PENDING)
        m->n_task_pending--;
    else
        m->n_task_processing--;
    t->status = (uint8_t)status;
    t->updated_wall = mc_wall_ms();
    t->since_ms = master_now(m);
    mc_free(t->message);
    t->message = msg ? mc_strndup(msg, strnlen(msg, MC_MASTER_TASK_MESSAGE_MAX)) : NULL;
    m->n_task_finished++;
    if (status == MC_MASTER_TASK_SUCCESS)
        m->cnt.tasks_succeeded++;
    else
        m->cnt.tasks_failed++;
    prune_finished(m);
}

static void task_info(const master_task_t *t, mc_master_task_info_t *out)
{
    out->id[0] = t->id[0];
    out->id[1] = t->id[1];
    out->type = t->type;
    out->status = t->status;
    out->created_ms = t->created_wall;
    out->updated_ms = t->updated_wall;
    memcpy(out->client, t->client, 16);
    out->message = t->message ? t->message : "";
    out->key = t->key;
    out->klen = t->klen;
    out->source = t->source;
    out->targets = (const char *const *)t->targets;
    out->n_targets = t->n_targets;
}

/* A new PENDING task for the owner of segment src (strings copied). */
static mc_status_t task_add(mc_master_t *m, int type, const obj_t *o, const segment_t *src,
                            const char *const *targets, size_t n, uint64_t id[2])
{
    if (m->n_task_pending >= m->cfg.max_total_pending_tasks)
        return MC_ERR_TASK_PENDING_LIMIT_EXCEEDED;
    if (mc_array_reserve(&m->tasks, &m->cap_tasks, m->n_tasks + 1, 64) != MC_OK)
        return MC_ERR_NO_MEMORY;
    master_task_t *t = mc_calloc(1, sizeof(*t));
    if (!t)
        return MC_ERR_NO_MEMORY;
    t->type = (uint8_t)type;
    t->status = MC_MASTER_TASK_PENDING;
    memcpy(t->client, src->owner_id, 16);
    t->created_wall = t->updated_wall = mc_wall_ms();
    t->since_ms = master_now(m);
    t->key = mc_strndup(obj_key((obj_t *)o), o->klen);
    t->klen = o->klen;
    t->source = mc_strdup(src->name);
    bool ok = t->key && t->source;
    for (size_t i = 0; i < n; i++) {
        t->targets[t->n_targets++] = mc_strdup(targets[i]);
        ok = ok && t->targets[i];
    }
    if (!ok) {
        task_free(t);
        return MC_ERR_NO_MEMORY;
    }
    do { /* a fresh random UUID, never (0, 0) */
        t->id[0] = master_rand(m);
        t->id[1] = master_rand(m);
    } while ((t->id[0] == 0 && t->id[1] == 0) || task_index(m, t->id) >= 0);
    m->tasks[m->n_tasks++] = t;
    m->n_task_pending++;
    id[0] = t->id[0];
    id[1] = t->id[1];
    return MC_OK;
}

/* The committed object of key for a task: OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY. */
static mc_status_t task_obj(mc_master_t *m, const char *key, size_t klen, obj_t **o_p)
{
    if (!key || klen == 0 || klen > MASTER_KEY_MAX)
        return MC_ERR_INVALID_KEY;
    obj_t *o = master_obj_find(m, key, klen, master_key_hash(key, klen));
    if (!o)
        return MC_ERR_OBJECT_NOT_FOUND;
    *o_p = o;
    return o->state == OBJ_READABLE ? MC_OK : MC_ERR_REPLICA_IS_NOT_READY;
}

/* Index in o->rep of its replica on segment id, or -1. */
static int rep_on(const obj_t *o, uint32_t id)
{
    for (uint32_t i = 0; i < o->n_rep; i++)
        if (o->rep[i].seg == id)
            return (int)i;
    return -1;
}

/* A target of a new task: a mounted segment (INVALID_PARAMS), not draining
 * (UNAVAILABLE_IN_CURRENT_STATUS), as upstream answers. */
static mc_status_t target_check(mc_master_t *m, const char *name)
{
    if (!name_ok(name))
        return MC_ERR_INVALID_PARAMS;
    uint32_t id;
    segment_t *s = master_seg_named(m, name, &id);
    if (!s || (s->state != SEG_MOUNTED && s->state != SEG_DRAINING))
        return MC_ERR_INVALID_PARAMS;
    return s->state == SEG_DRAINING ? MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS : MC_OK;
}

mc_status_t mc_master_create_copy_task(mc_master_t *m, const char *key, size_t klen,
                                       const char *const *targets, size_t n, uint64_t id[2])
{
    obj_t *o = NULL;
    mc_status_t st = task_obj(m, key, klen, &o);
    if (st != MC_OK)
        return st;
    if (n == 0 || n > MC_MASTER_MAX_REPLICAS || !targets)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++) {
        if ((st = target_check(m, targets[i])) != MC_OK)
            return st;
        for (size_t j = 0; j < i; j++)
            if (strcmp(targets[i], targets[j]) == 0)
                return MC_ERR_INVALID_PARAMS;
    }
    /* the source: a replica on a mounted (or draining) segment, at random */
    uint32_t cand[MC_MASTER_MAX_REPLICAS], nc = 0;
    for (uint32_t i = 0; i < o->n_rep; i++) {
        segment_t *s = master_seg_slot(m, o->rep[i].seg);
        if (s && (s->state == SEG_MOUNTED || s->state == SEG_DRAINING))
            cand[nc++] = o->rep[i].seg;
    }
    if (!nc)
        return MC_ERR_REPLICA_IS_NOT_READY;
    segment_t *src = master_seg_slot(m, cand[master_rand(m) % nc]);
    return task_add(m, MC_MASTER_TASK_COPY, o, src, targets, n, id);
}

mc_status_t mc_master_create_move_task(mc_master_t *m, const char *key, size_t klen,
                                       const char *source, const char *target, uint64_t id[2])
{
    obj_t *o = NULL;
    mc_status_t st = task_obj(m, key, klen, &o);
    if (st != MC_OK)
        return st;
    if (!name_ok(source) || !name_ok(target) || strcmp(source, target) == 0)
        return MC_ERR_INVALID_PARAMS;
    if ((st = target_check(m, target)) != MC_OK)
        return st;
    uint32_t sid;
    segment_t *src = master_seg_named(m, source, &sid);
    if (!src || (src->state != SEG_MOUNTED && src->state != SEG_DRAINING) || rep_on(o, sid) < 0)
        return MC_ERR_INVALID_PARAMS; /* source holds no readable replica of key */
    return task_add(m, MC_MASTER_TASK_MOVE, o, src, &target, 1, id);
}

mc_status_t mc_master_query_task(mc_master_t *m, const uint64_t id[2], mc_master_task_info_t *out)
{
    ssize_t i = task_index(m, id);
    if (i < 0)
        return MC_ERR_TASK_NOT_FOUND;
    task_info(m->tasks[i], out);
    return MC_OK;
}

bool mc_master_tasks_pending(mc_master_t *m, const uint8_t cid[16])
{
    if (!m->n_task_pending)
        return false;
    for (size_t i = 0; i < m->n_tasks; i++)
        if (m->tasks[i]->status == MC_MASTER_TASK_PENDING &&
            memcmp(m->tasks[i]->client, cid, 16) == 0)
            return true;
    return false;
}

mc_status_t mc_master_fetch_tasks(mc_master_t *m, const uint8_t cid[16], uint32_t max,
                                  mc_master_task_info_t *out, uint32_t *n_p)
{
    *n_p = 0;
    if (max == 0 || max > MC_MASTER_TASK_FETCH_MAX)
        max = MC_MASTER_TASK_FETCH_MAX;
    uint64_t now = master_now(m);
    for (size_t i = 0; i < m->n_tasks && *n_p < max && m->n_task_pending; i++) {
        master_task_t *t = m->tasks[i];
        if (t->status != MC_MASTER_TASK_PENDING || memcmp(t->client, cid, 16) != 0)
            continue;
        if (m->n_task_processing >= m->cfg.max_total_processing_tasks)
            break;
        t->status = MC_MASTER_TASK_PROCESSING;
        t->since_ms = now;
        t->updated_wall = mc_wall_ms();
        m->n_task_pending--;
        m->n_task_processing++;
        task_info(t, &out[(*n_p)++]);
    }
    return MC_OK;
}

/* The PROCESSING task id of client cid, of type type. */
static mc_status_t task_mine(mc_master_t *m, const uint8_t cid[16], const uint64_t id[2],
                             int type, master_task_t **t_p)
{
    ssize_t i = task_index(m, id);
    if (i < 0)
        return MC_ERR_TASK_NOT_FOUND;
    master_task_t *t = m->tasks[i];
    if (memcmp(t->client, cid, 16) != 0)
        return MC_ERR_ILLEGAL_CLIENT;
    if (t->status != MC_MASTER_TASK_PROCESSING || (type >= 0 && t->type != type))
        return MC_ERR_INVALID_PARAMS;
    *t_p = t;
    return MC_OK;
}

mc_status_t mc_master_task_start(mc_master_t *m, const uint8_t cid[16], const uint64_t id[2],
                                 int type, mc_master_replica_t *src, mc_master_replica_t *reps,
                                 uint32_t *n_p, uint64_t *size_p, uint64_t *checksum_p)
{
    *n_p = 0;
    master_task_t *t;
    mc_status_t st = task_mine(m, cid, id, type, &t);
    if (st != MC_OK)
        return st;
    if (t->step != STEP_FETCHED)
        return MC_ERR_INVALID_PARAMS; /* one Start per task */
    obj_t *o = NULL;
    if ((st = task_obj(m, t->key, t->klen, &o)) != MC_OK)
        return st;
    uint32_t sid;
    segment_t *ss = master_seg_named(m, t->source, &sid);
    int si = ss && (ss->state == SEG_MOUNTED || ss->state == SEG_DRAINING) &&
                     memcmp(ss->owner_id, cid, 16) == 0
                 ? rep_on(o, sid)
                 : -1;
    if (si < 0)
        return MC_ERR_SEGMENT_NOT_FOUND; /* the source replica is gone */
    /* the targets that hold no replica yet get one each */
    uint32_t tid[MC_MASTER_MAX_REPLICAS], nt = 0;
    for (uint32_t i = 0; i < t->n_targets; i++) {
        segment_t *s = master_seg_named(m, t->targets[i], &tid[nt]);
        if (!s || s->state != SEG_MOUNTED || !s->alloc)
            return s && s->state == SEG_DRAINING ? MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS
                                                 : MC_ERR_SEGMENT_NOT_FOUND;
        if (rep_on(o, tid[nt]) < 0)
            nt++;
    }
    if (t->type == MC_MASTER_TASK_COPY && o->n_rep + nt > MC_MASTER_MAX_REPLICAS)
        return MC_ERR_INVALID_PARAMS;
    /* the owner reads the source under a read lease, as a get would; leased first, so that
     * the quota admission below cannot evict the object itself */
    uint64_t now = master_now(m);
    master_obj_lease_read(m, o, now);
    if (t->type == MC_MASTER_TASK_COPY &&
        (st = master_tenant_admit_bytes(m, t->key, t->klen, o->size * nt)) != MC_OK)
        return st;
    for (uint32_t i = 0; i < nt; i++) {
        segment_t *s = m->segs[tid[i]];
        uint32_t blk;
        if (now < s->reuse_after_ms || mc_master_allocator_alloc(s->alloc, o->size, &blk) != MC_OK) {
            pend_drop(m, t, false);
            return MC_ERR_NO_AVAILABLE_HANDLE;
        }
        s->n_replicas++;
        t->pend[t->n_pend++] = (obj_rep_t){tid[i], blk};
    }
    t->step = STEP_STARTED;
    t->size = o->size;
    t->checksum = o->checksum;
    master_fill_rep(m, o, &o->rep[si], src, 2);
    for (uint32_t i = 0; i < t->n_pend; i++)
        master_fill_rep(m, o, &t->pend[i], &reps[i], 1);
    *n_p = t->n_pend;
    *size_p = o->size;
    *checksum_p = o->checksum;
    return MC_OK;
}

/* End of a started task: its new replicas join o (a move: replacing the source replica). */
static mc_status_t task_commit(mc_master_t *m, master_task_t *t)
{
    obj_t *o = NULL;
    mc_status_t st = task_obj(m, t->key, t->klen, &o);
    if (st != MC_OK)
        return st;
    if (o->size != t->size || o->checksum != t->checksum)
        return MC_ERR_INVALID_WRITE; /* replaced since the Start */
    for (uint32_t i = 0; i < t->n_pend; i++)
        if (t->pend[i].seg == SEG_NONE || rep_on(o, t->pend[i].seg) >= 0)
            return MC_ERR_SEGMENT_NOT_FOUND; /* a target went (or got a replica meanwhile) */
    uint32_t sid;
    int si = -1;
    if (t->type == MC_MASTER_TASK_MOVE) {
        segment_t *ss = master_seg_named(m, t->source, &sid);
        si = ss ? rep_on(o, sid) : -1;
        if (si < 0)
            return MC_ERR_SEGMENT_NOT_FOUND;
    }
    uint32_t n = o->n_rep;
    if (si >= 0) { /* a move: the source leaves the object, its space once readers are done */
        obj_rep_t gone = o->rep[si];
        if (t->n_pend) /* else the target held a replica already */
            o->rep[si] = t->pend[0];
        else
            o->rep[si] = o->rep[--n];
        master_events_obj_seg(m, MC_MASTER_EV_REMOVED, o, gone.seg);
        master_rep_release_after_leases(m, o, &gone);
    } else {
        if (n + t->n_pend > MC_MASTER_MAX_REPLICAS)
            return MC_ERR_INVALID_PARAMS;
        if (n + t->n_pend > o->rep_cap) {
            obj_t *g = master_obj_grow(m, o, n + t->n_pend);
            if (!g)
                return MC_ERR_NO_MEMORY;
            o = g;
        }
        for (uint32_t i = 0; i < t->n_pend; i++)
            o->rep[n++] = t->pend[i];
    }
    for (uint32_t i = 0; i < t->n_pend; i++)
        master_events_obj_seg(m, MC_MASTER_EV_COMMITTED, o, t->pend[i].seg);
    t->n_pend = 0;
    master_obj_set_nrep(m, o, n);
    master_wal_log_commit(m, o, si >= 0);
    return MC_OK;
}

mc_status_t mc_master_task_end(mc_master_t *m, const uint8_t cid[16], const uint64_t id[2],
                               int type, bool commit)
{
    master_task_t *t;
    mc_status_t st = task_mine(m, cid, id, type, &t);
    if (st != MC_OK)
        return st;
    if (t->step != STEP_STARTED)
        return MC_ERR_INVALID_PARAMS;
    t->step = STEP_ENDED;
    st = commit ? task_commit(m, t) : MC_OK;
    pend_drop(m, t, false); /* what is left: a revoke's, or a failed End's */
    return st;
}

mc_status_t mc_master_task_complete(mc_master_t *m, const uint8_t cid[16], const uint64_t id[2],
                                    int status, const char *message)
{
    master_task_t *t;
    mc_status_t st = task_mine(m, cid, id, -1, &t);
    if (st != MC_OK)
        return st;
    if (status != MC_MASTER_TASK_SUCCESS && status != MC_MASTER_TASK_FAILED)
        return MC_ERR_INVALID_PARAMS;
    task_finish(m, t, status, message, false);
    return MC_OK;
}

void master_tasks_seg_gone(mc_master_t *m, uint32_t seg_id)
{
    for (size_t i = 0; i < m->n_tasks; i++) {
        master_task_t *t = m->tasks[i];
        for (uint32_t j = 0; j < t->n_pend; j++)
            if (t->pend[j].seg == seg_id)
                t->pend[j].seg = SEG_NONE; /* the allocator goes with the segment */
    }
}

void master_tasks_cron(mc_master_t *m, uint64_t now)
{
    if (!m->n_task_pending && !m->n_task_processing)
        return;
    for (size_t i = 0; i < m->n_tasks; i++) {
        master_task_t *t = m->tasks[i];
        uint64_t limit = t->status == MC_MASTER_TASK_PENDING      ? m->cfg.pending_task_timeout_ms
                         : t->status == MC_MASTER_TASK_PROCESSING ? m->cfg.processing_task_timeout_ms
                                                                  : 0;
        if (!limit || now - t->since_ms < limit)
            continue;
        bool pending = t->status == MC_MASTER_TASK_PENDING;
        MC_LOG_WARN("master: replica task of '%.*s' %s for %llu ms: failed", (int)t->klen,
                    t->key, pending ? "not fetched" : "not completed",
                    (unsigned long long)(now - t->since_ms));
        task_finish(m, t,  MC_MASTER_TASK_FAILED,
                    pending ? "pending timeout: its client did not fetch it in time"
                            : "processing timeout: its client did not complete it in time",
                    true);
        /* task_finish may have pruned entries before i: start over (rare) */
        i = (size_t)-1;
        if (!m->n_task_pending && !m->n_task_processing)
            break;
    }
}

size_t master_tasks_blocks(mc_master_t *m, obj_rep_t *out, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; i < m->n_tasks; i++)
        for (uint32_t j = 0; j < m->tasks[i]->n_pend; j++)
            if (m->tasks[i]->pend[j].seg != SEG_NONE) {
                if (n < cap)
                    out[n] = m->tasks[i]->pend[j];
                n++;
            }
    return n;
}

void master_tasks_free(mc_master_t *m)
{
    for (size_t i = 0; i < m->n_tasks; i++)
        task_free(m->tasks[i]);
    mc_free(m->tasks);
    m->tasks = NULL;
    m->n_tasks = m->cap_tasks = 0;
}
