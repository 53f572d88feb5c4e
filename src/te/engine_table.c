/* Local segment table: registered buffers, range checks with in-flight references, and the
 * three-step unregister (see engine_internal.h). Also compiled directly into the tcp frame
 * fuzzer. */
#include "te/engine_internal.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/time.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ===================================== table ========================================== */

void mc_te_table_init(mc_te_table_t *t)
{
    memset(t, 0, sizeof(*t));
    pthread_rwlock_init(&t->lock, NULL);
    pthread_mutex_init(&t->drain_mu, NULL);
    pthread_cond_init(&t->drain_cv, NULL);
}

void mc_te_table_fini(mc_te_table_t *t)
{
    for (size_t i = 0; i < t->n; i++)
        mc_free(t->bufs[i]);
    mc_free(t->bufs);
    pthread_rwlock_destroy(&t->lock);
    pthread_mutex_destroy(&t->drain_mu);
    pthread_cond_destroy(&t->drain_cv);
    memset(t, 0, sizeof(*t));
}

/* Index of the first buffer whose addr > a (upper bound). Under lock. */
static size_t table_upper(const mc_te_table_t *t, uint64_t a)
{
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->bufs[mid]->addr <= a)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

mc_status_t mc_te_table_insert(mc_te_table_t *t, mc_te_lbuf_t *b)
{
    if (b->len == 0 || b->addr + b->len < b->addr)
        return MC_ERR_INVALID_PARAMS;
    pthread_rwlock_wrlock(&t->lock);
    mc_status_t st = MC_OK;
    size_t pos = table_upper(t, b->addr);
    /* neighbour before must end at or before b->addr, the one at pos must start at or after
     * b's end */
    if (pos > 0) {
        const mc_te_lbuf_t *p = t->bufs[pos - 1];
        if (b->addr - p->addr < p->len)
            st = MC_ERR_SEGMENT_ALREADY_EXISTS;
    }
    if (st == MC_OK && pos < t->n && t->bufs[pos]->addr - b->addr < b->len)
        st = MC_ERR_SEGMENT_ALREADY_EXISTS;
    if (st == MC_OK && t->n >= MC_SEGMENT_MAX_BUFFERS)
        st = MC_ERR_TOO_LARGE;
    if (st == MC_OK)
        st = mc_array_reserve(&t->bufs, &t->cap, t->n + 1, 16);
    if (st == MC_OK) {
        memmove(&t->bufs[pos + 1], &t->bufs[pos], (t->n - pos) * sizeof(*t->bufs));
        t->bufs[pos] = b;
        t->n++;
    }
    pthread_rwlock_unlock(&t->lock);
    return st;
}

mc_status_t mc_te_table_acquire(mc_te_table_t *t, uint64_t addr, uint64_t len, mc_te_lbuf_t **b_p)
{
    *b_p = NULL;
    if (len == 0 || addr + len < addr)
        return MC_ERR_OUT_OF_RANGE;
    mc_status_t st = MC_ERR_OUT_OF_RANGE;
    pthread_rwlock_rdlock(&t->lock);
    size_t pos = table_upper(t, addr);
    if (pos > 0) {
        mc_te_lbuf_t *b = t->bufs[pos - 1];
        uint64_t off = addr - b->addr;
        if (off < b->len && len <= b->len - off && !atomic_load(&b->closing)) {
            atomic_fetch_add(&b->inflight, 1);
            *b_p = b;
            st = MC_OK;
        }
    }
    pthread_rwlock_unlock(&t->lock);
    return st;
}

mc_status_t mc_te_table_acquire_served(mc_te_table_t *t, uint64_t addr, uint64_t len,
                                       mc_te_lbuf_t **b_p)
{
    mc_status_t st = mc_te_table_acquire(t, addr, len, b_p);
    if (st == MC_OK) {
        uint64_t until = atomic_load(&(*b_p)->serve_until_ns);
        if (until && mc_now_ns() > until) {
            mc_te_table_release(t, *b_p);
            *b_p = NULL;
            st = MC_ERR_SEGMENT_FENCED;
        }
    }
    return st;
}

void mc_te_table_release(mc_te_table_t *t, mc_te_lbuf_t *b)
{
    if (atomic_load(&b->closing)) {
        /* an unregister waits: decrement under drain_mu so it cannot free b before we
         * are done with it (it reads inflight only under drain_mu) */
        pthread_mutex_lock(&t->drain_mu);
        atomic_fetch_sub(&b->inflight, 1);
        pthread_cond_broadcast(&t->drain_cv);
        pthread_mutex_unlock(&t->drain_mu);
    } else {
        atomic_fetch_sub(&b->inflight, 1);
    }
}

mc_status_t mc_te_table_begin_remove(mc_te_table_t *t, uint64_t addr, mc_te_lbuf_t **b_p)
{
    mc_status_t st = MC_ERR_OBJECT_NOT_FOUND;
    pthread_rwlock_wrlock(&t->lock);
    size_t pos = table_upper(t, addr);
    if (pos > 0 && t->bufs[pos - 1]->addr == addr) {
        mc_te_lbuf_t *b = t->bufs[pos - 1];
        int z = 0;
        if (atomic_compare_exchange_strong(&b->closing, &z, 1)) {
            *b_p = b;
            st = MC_OK;
        } else {
            st = MC_ERR_BUSY;
        }
    }
    pthread_rwlock_unlock(&t->lock);
    return st;
}

mc_status_t mc_te_table_wait_drain(mc_te_table_t *t, mc_te_lbuf_t *b, uint64_t deadline_ns)
{
    mc_status_t st = MC_OK;
    pthread_mutex_lock(&t->drain_mu);
    while (atomic_load(&b->inflight) > 0) {
        uint64_t now = mc_now_ns();
        if (now >= deadline_ns) {
            st = MC_ERR_BUSY;
            break;
        }
        /* condvar uses CLOCK_REALTIME; wait in short steps against our monotonic deadline */
        uint64_t step = deadline_ns - now;
        if (step > 10000000ull)
            step = 10000000ull;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)step;
        while (ts.tv_nsec >= 1000000000L) {
            ts.tv_nsec -= 1000000000L;
            ts.tv_sec++;
        }
        pthread_cond_timedwait(&t->drain_cv, &t->drain_mu, &ts);
    }
    pthread_mutex_unlock(&t->drain_mu);
    return st;
}

void mc_te_table_finish_remove(mc_te_table_t *t, mc_te_lbuf_t *b, bool remove)
{
    pthread_rwlock_wrlock(&t->lock);
    if (!remove) {
        atomic_store(&b->closing, 0);
        pthread_rwlock_unlock(&t->lock);
        return;
    }
    for (size_t i = 0; i < t->n; i++) {
        if (t->bufs[i] == b) {
            memmove(&t->bufs[i], &t->bufs[i + 1], (t->n - i - 1) * sizeof(*t->bufs));
            t->n--;
            break;
        }
    }
    pthread_rwlock_unlock(&t->lock);
    /* wait out a releaser that is still inside its drain_mu section */
    pthread_mutex_lock(&t->drain_mu);
    pthread_mutex_unlock(&t->drain_mu);
    mc_free(b);
}

