/* shm transport: same-host peers copy directly through mapped memfds (design: transport.h).
 *
 * Owner side: one control memfd (layout: shm_ctl.h) of MC_TE_SHM_SLOTS slots, one per
 * registered buffer {state = gen << 1 | registered, serve_until_ns}, and MC_TE_SHM_LANES
 * lanes, one per initiator process, each with its own in-flight counter per slot; published
 * in transport_info as
 *   {"shm_ctl_fd":N,"shm_ctl_slots":S,"shm_ctl_lanes":L,"slots":[[addr,slot,gen],...]}.
 * Initiator side (per peer, cached until the peer's pid changes): the control mapping, one
 * claimed lane, and one mapping per peer buffer, made on first use from
 * /proc/<pid>/fd/<shm_fd>. Buffers that are not memfd-backed, and every buffer while we hold
 * no lane, go to the fallback transport the engine hands us at init (tcp), as CMA requests
 * the owner serves (or as plain requests if CMA is not permitted). An engine is used by the
 * process that created it (a lane names that process).
 */

#include "te/shm_ctl.h"
#include "te/te_hashed.h"
#include "te/transport.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/payload.h"
#include "common/time.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#define SHM_MAX_SLICE (64ull << 20)
#define SHM_LANE_RETRY_NS 1000000000ull /* an initiator without a lane tries again after */

typedef struct shm_ctx {
    mc_te_t *te;
    const mc_te_transport_t *fallback; /* takes the slices we cannot copy (transport.h) */
    int ctl_fd;
    mc_te_shm_ctl_t ctl;
    uint64_t self_id; /* our holder id: marks the lanes we reclaim */
    pthread_mutex_t mu;
    uint64_t next_gen;
    uint8_t used[MC_TE_SHM_SLOTS];
} shm_ctx_t;

/* One peer buffer as we know it: from the descriptor plus transport_info. */
typedef struct shm_rbuf {
    uint64_t addr, len, shm_offset;
    int32_t shm_fd;
    int32_t slot;   /* -1 if unknown */
    uint64_t gen;
    uint8_t *base;  /* our mapping of [addr, addr+len), NULL until first use */
    void *map;
    size_t map_len;
    bool map_failed;
} shm_rbuf_t;

typedef struct shm_peer {
    pthread_rwlock_t lock;
    mc_te_rdesc_t *desc; /* the descriptor rbufs were built from (referenced) */
    int32_t pid;
    int pidfd;
    mc_te_shm_ctl_t ctl; /* our mapping of the owner's control memfd; base NULL if none */
    /* The lane we count our copies in (shm_ctl.h): lane_row NULL while we hold none (copies
     * then go to the owner-served path). lane_id/lane_pid: what we claimed it as. */
    _Atomic uint32_t *lane_row;
    uint32_t lane;
    uint64_t lane_id;
    pid_t lane_pid;
    uint64_t lane_retry_ns; /* no claim attempt before (CLOCK_MONOTONIC) */
    bool cma_ok;
    shm_rbuf_t *bufs;
    size_t n_bufs;
} shm_peer_t;

/* ================================= lanes (both sides) ================================= */

/* Fields 3 (state), 20 (num_threads) and 22 (starttime) of /proc/<pid>/stat. 0, or -1 with
 * errno. The command name (field 2) may hold spaces and parentheses: fields are counted from
 * its last ')'. */
static int proc_stat(pid_t pid, char *state, long *threads, uint64_t *start_ticks)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    int saved = errno;
    close(fd);
    if (n <= 0) {
        errno = n < 0 ? saved : EIO;
        return -1;
    }
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long st = 0;
    /* after ')': state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt
     * utime stime cutime cstime priority nice num_threads(20) itrealvalue starttime(22) */
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                            "%ld %*s %llu", state, threads, &st) != 3) {
        errno = EIO;
        return -1;
    }
    *start_ticks = st;
    return 0;
}

uint64_t mc_te_shm_self_id(void)
{
    pid_t pid = getpid();
    char state;
    long threads;
    uint64_t start;
    if (proc_stat(pid, &state, &threads, &start) != 0 || pid <= 0 ||
        (uint64_t)pid >= 1ull << MC_TE_SHM_PID_BITS || start >= 1ull << MC_TE_SHM_START_BITS)
        return 0;
    return mc_te_shm_holder_id(pid, start);
}

bool mc_te_shm_holder_gone(uint64_t word)
{
    word &= ~MC_TE_SHM_LANE_RECLAIMING;
    pid_t pid = mc_te_shm_holder_pid(word);
    if (pid <= 0)
        return true; /* no holder id of ours looks like this */
    if (kill(pid, 0) != 0 && errno == ESRCH)
        return true;
    char state;
    long threads;
    uint64_t start;
    if (proc_stat(pid, &state, &threads, &start) != 0) /* exists, /proc hides it: alive */
        return kill(pid, 0) != 0 && errno == ESRCH;
    if (start != word >> MC_TE_SHM_PID_BITS)
        return true; /* the pid names another process now */
    /* a zombie whose threads all exited; a leader that exited while other threads run shows
     * 'Z' too, with num_threads > 1 */
    return (state == 'Z' || state == 'X') && threads <= 1;
}

/* Lane k held as w (read from it just before): if that holder is gone, mark the lane
 * reclaiming by self_id, zero its row and free it. True when we did (its counts are void);
 * false when the holder lives or another process changed the lane meanwhile. */
static bool lane_reclaim(const mc_te_shm_ctl_t *ctl, uint32_t k, uint64_t w, uint64_t self_id)
{
    if (!mc_te_shm_holder_gone(w))
        return false;
    uint64_t expect = w;
    if (!atomic_compare_exchange_strong(&ctl->lane[k], &expect,
                                        self_id | MC_TE_SHM_LANE_RECLAIMING))
        return false;
    _Atomic uint32_t *row = mc_te_shm_lane_row(ctl, k);
    for (uint32_t s = 0; s < ctl->slots; s++)
        atomic_store_explicit(&row[s], 0, memory_order_relaxed);
    atomic_store(&ctl->lane[k], 0); /* seq_cst: whoever claims it next sees the zeros */
    MC_LOG_INFO("shm: lane %u of pid %d (gone) reclaimed by pid %d", k,
                (int)mc_te_shm_holder_pid(w), (int)getpid());
    return true;
}

/* ===================================== owner ========================================== */

static mc_status_t shm_init(mc_te_t *te, const mc_te_transport_t *fallback,
                            void **ctx_p)
{
    if (!fallback || !fallback->ops || !fallback->ops->submit)
        return MC_ERR_INVALID_PARAMS; /* it could not serve buffers without a memfd */
    uint64_t self_id = mc_te_shm_self_id();
    if (!self_id) {
        MC_LOG_WARN("shm: cannot read our own /proc/<pid>/stat");
        return MC_ERR_IO;
    }
    shm_ctx_t *c = mc_calloc(1, sizeof(*c));
    if (!c)
        return MC_ERR_NO_MEMORY;
    c->te = te;
    c->fallback = fallback;
    c->self_id = self_id;
    size_t size = mc_te_shm_ctl_size(MC_TE_SHM_SLOTS, MC_TE_SHM_LANES);
    /* sealed at its size: initiators map it without fearing SIGBUS (ctl_map checks) */
    c->ctl_fd = memfd_create("mc-te-ctl", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    void *m = MAP_FAILED;
    if (c->ctl_fd >= 0 && ftruncate(c->ctl_fd, (off_t)size) == 0 &&
        fcntl(c->ctl_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, c->ctl_fd, 0);
    if (m == MAP_FAILED) {
        MC_LOG_WARN("shm: control memfd failed: %m");
        if (c->ctl_fd >= 0)
            close(c->ctl_fd);
        mc_free(c);
        return MC_ERR_IO;
    }
    mc_te_shm_ctl_locate(&c->ctl, m, MC_TE_SHM_SLOTS, MC_TE_SHM_LANES);
    *c->ctl.hdr = (mc_te_shm_ctl_hdr_t){.magic = MC_TE_SHM_CTL_MAGIC,
                                        .version = MC_TE_SHM_CTL_VERSION,
                                        .slots = MC_TE_SHM_SLOTS, .lanes = MC_TE_SHM_LANES};
    pthread_mutex_init(&c->mu, NULL);
    *ctx_p = c;
    return MC_OK;
}

static void shm_fini(void *vctx)
{
    shm_ctx_t *c = vctx;
    if (!c)
        return;
    munmap(c->ctl.base, c->ctl.size);
    close(c->ctl_fd);
    pthread_mutex_destroy(&c->mu);
    mc_free(c);
}

/* Whether no live initiator counts a copy of slot in flight (the ordering argument is at
 * shm_on_unregister). A lane whose holder is gone counts nothing: we reclaim it on the way. */
static bool slot_drained(shm_ctx_t *c, uint32_t slot)
{
    const mc_te_shm_ctl_t *ctl = &c->ctl;
    for (uint32_t k = 0; k < ctl->lanes; k++) {
        uint64_t w = atomic_load(&ctl->lane[k]);
        if (w == 0 || atomic_load(&mc_te_shm_lane_row(ctl, k)[slot]) == 0)
            continue;
        if (!lane_reclaim(ctl, k, w, c->self_id))
            return false;
    }
    return true;
}

static mc_status_t shm_on_register(void *vctx, mc_te_lbuf_t *b)
{
    shm_ctx_t *c = vctx;
    b->slot = -1;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < MC_TE_SHM_SLOTS; i++) {
        if (c->used[i] || !slot_drained(c, (uint32_t)i))
            continue;
        c->used[i] = 1;
        b->slot = i;
        b->gen = ++c->next_gen;
        atomic_store(&c->ctl.slot[i].serve_until_ns, atomic_load(&b->serve_until_ns));
        atomic_store(&c->ctl.slot[i].state, (b->gen << 1) | 1);
        break;
    }
    pthread_mutex_unlock(&c->mu);
    return b->slot >= 0 ? MC_OK : MC_ERR_NO_AVAILABLE_HANDLE;
}

/* Ordering. An initiator copies as
 *     inflight[its lane][slot]++ ; load state ; copy only if it is (gen << 1 | 1) ; inflight--
 * and we unregister as
 *     store state = gen << 1 ; for every lane: load its holder word, then its inflight[slot]
 * all seq_cst, in the shared mapping (lock-free atomics work across processes). In the one
 * total order of seq_cst operations either the initiator's state load comes after our store
 * (it sees the bit cleared and copies nothing) or its increment comes before our load of its
 * counter (we see it and wait). A lane we read free (word 0) is claimed, if at all, after our
 * store, so its holder's copies see the bit cleared. A lane whose holder is gone (shm_ctl.h:
 * the id carries the start time, so a process that reused the pid is not the holder) counts
 * nothing: a process that exited copies nothing more, whatever its counter was left at. */
static mc_status_t shm_on_unregister(void *vctx, mc_te_lbuf_t *b, uint64_t deadline_ns)
{
    shm_ctx_t *c = vctx;
    atomic_store(&c->ctl.slot[b->slot].state, b->gen << 1);
    uint32_t spin = 0;
    while (!slot_drained(c, (uint32_t)b->slot)) {
        if (mc_now_ns() >= deadline_ns)
            return MC_ERR_BUSY;
        if (++spin < 100)
            sched_yield();
        else
            usleep(200);
    }
    return MC_OK;
}

/* The owner's mc_te_set_serve_until, for initiators that copy without asking it. */
static void shm_on_serve_until(void *vctx, mc_te_lbuf_t *b)
{
    shm_ctx_t *c = vctx;
    if (b->slot >= 0)
        atomic_store(&c->ctl.slot[b->slot].serve_until_ns, atomic_load(&b->serve_until_ns));
}

static void shm_on_unregister_abort(void *vctx, mc_te_lbuf_t *b)
{
    shm_ctx_t *c = vctx;
    atomic_store(&c->ctl.slot[b->slot].state, (b->gen << 1) | 1);
}

static void shm_on_unregister_done(void *vctx, mc_te_lbuf_t *b)
{
    shm_ctx_t *c = vctx;
    pthread_mutex_lock(&c->mu);
    c->used[b->slot] = 0;
    pthread_mutex_unlock(&c->mu);
    b->slot = -1;
}

static bool lane_held_by(const mc_te_shm_ctl_t *ctl, uint32_t k, pid_t pid)
{
    uint64_t w = atomic_load(&ctl->lane[k]);
    return w && !(w & MC_TE_SHM_LANE_RECLAIMING) && mc_te_shm_holder_pid(w) == pid;
}

const mc_te_shm_ctl_t *mc_te_shm_owner_ctl(mc_te_t *te)
{
    shm_ctx_t *c = te->tp[MC_TE_TP_SHM].ops ? te->tp[MC_TE_TP_SHM].ctx : NULL;
    return c ? &c->ctl : NULL;
}

uint32_t mc_te_shm_lanes_held(mc_te_t *te, pid_t pid)
{
    shm_ctx_t *c = te->tp[MC_TE_TP_SHM].ops ? te->tp[MC_TE_TP_SHM].ctx : NULL;
    uint32_t n = 0;
    for (uint32_t k = 0; c && k < c->ctl.lanes; k++)
        n += lane_held_by(&c->ctl, k, pid);
    return n;
}

uint64_t mc_te_shm_lane_inflight(mc_te_t *te, const void *addr, pid_t pid)
{
    shm_ctx_t *c = te->tp[MC_TE_TP_SHM].ops ? te->tp[MC_TE_TP_SHM].ctx : NULL;
    if (!c)
        return 0;
    int32_t slot = -1;
    mc_te_table_t *t = &te->table;
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->n; i++)
        if (t->bufs[i]->addr == (uint64_t)(uintptr_t)addr)
            slot = t->bufs[i]->slot;
    pthread_rwlock_unlock(&t->lock);
    uint64_t sum = 0;
    for (uint32_t k = 0; slot >= 0 && k < c->ctl.lanes; k++)
        if (lane_held_by(&c->ctl, k, pid))
            sum += atomic_load(&mc_te_shm_lane_row(&c->ctl, k)[slot]);
    return sum;
}

static char *shm_transport_info(void *vctx)
{
    shm_ctx_t *c = vctx;
    mc_te_table_t *t = &c->te->table;
    json_t *o = json_object();
    json_t *a = json_array();
    json_object_set_new(o, "shm_ctl_fd", json_integer(c->ctl_fd));
    json_object_set_new(o, "shm_ctl_slots", json_integer(MC_TE_SHM_SLOTS));
    json_object_set_new(o, "shm_ctl_lanes", json_integer(MC_TE_SHM_LANES));
    pthread_rwlock_rdlock(&t->lock);
    for (size_t i = 0; i < t->n; i++) {
        const mc_te_lbuf_t *b = t->bufs[i];
        if (b->slot < 0)
            continue;
        json_t *e = json_array();
        json_array_append_new(e, json_integer((json_int_t)b->addr));
        json_array_append_new(e, json_integer(b->slot));
        json_array_append_new(e, json_integer((json_int_t)b->gen));
        json_array_append_new(a, e);
    }
    pthread_rwlock_unlock(&t->lock);
    json_object_set_new(o, "slots", a);
    /* jansson allocates with malloc; mc_free (free) releases it like our own strings */
    char *s = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return s;
}

/* ==================================== initiator ======================================= */

typedef struct shm_info {
    int ctl_fd;
    uint32_t ctl_slots, ctl_lanes;
    json_t *root; /* slots array inside */
} shm_info_t;

/* transport_info of a peer (untrusted): the control fd, and slots and lanes within our own
 * limits (they size what we map). */
static bool parse_info(const char *ti, shm_info_t *out)
{
    memset(out, 0, sizeof(*out));
    if (!ti)
        return false;
    json_error_t err;
    json_t *o = json_loads(ti, 0, &err);
    json_t *fd = o ? json_object_get(o, "shm_ctl_fd") : NULL;
    json_t *ns = o ? json_object_get(o, "shm_ctl_slots") : NULL;
    json_t *nl = o ? json_object_get(o, "shm_ctl_lanes") : NULL;
    if (!json_is_integer(fd) || !json_is_integer(ns) || !json_is_integer(nl) ||
        json_integer_value(fd) < 0 || json_integer_value(fd) > 1 << 24 ||
        json_integer_value(ns) <= 0 || json_integer_value(ns) > MC_TE_SHM_SLOTS ||
        json_integer_value(nl) <= 0 || json_integer_value(nl) > MC_TE_SHM_LANES ||
        !json_is_array(json_object_get(o, "slots"))) {
        json_decref(o);
        return false;
    }
    out->ctl_fd = (int)json_integer_value(fd);
    out->ctl_slots = (uint32_t)json_integer_value(ns);
    out->ctl_lanes = (uint32_t)json_integer_value(nl);
    out->root = o;
    return true;
}

/* Map the control memfd of owner pid that info names, and check it: sealed against
 * shrinking (our mapping can never fault past its end), at least as large as info's slots x
 * lanes need, and its header saying the same layout. MC_OK with *ctl filled, or why not
 * (nothing left mapped). */
static mc_status_t ctl_map(pid_t pid, const shm_info_t *info, mc_te_shm_ctl_t *ctl)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, info->ctl_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        MC_LOG_DEBUG("shm: cannot open %s (%m)", path);
        return MC_ERR_CONNECTION;
    }
    size_t need = mc_te_shm_ctl_size(info->ctl_slots, info->ctl_lanes);
    struct stat sb;
    int seals = fcntl(fd, F_GET_SEALS);
    void *m = MAP_FAILED;
    if (fstat(fd, &sb) == 0 && (uint64_t)sb.st_size >= need && seals >= 0 &&
        (seals & F_SEAL_SHRINK))
        m = mmap(NULL, need, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        MC_LOG_WARN("shm: control memfd of pid %d unusable (size, seals or mmap)", (int)pid);
        return MC_ERR_PROTOCOL;
    }
    mc_te_shm_ctl_hdr_t h = *(const mc_te_shm_ctl_hdr_t *)m;
    if (h.magic != MC_TE_SHM_CTL_MAGIC || h.version != MC_TE_SHM_CTL_VERSION ||
        h.slots != info->ctl_slots || h.lanes != info->ctl_lanes) {
        MC_LOG_WARN("shm: control memfd of pid %d has another layout", (int)pid);
        munmap(m, need);
        return MC_ERR_PROTOCOL;
    }
    mc_te_shm_ctl_locate(ctl, m, info->ctl_slots, info->ctl_lanes);
    return MC_OK;
}

static bool shm_can_reach(void *vctx, const mc_segment_desc_t *d)
{
    shm_info_t info;
    if (!parse_info(d->transport_info, &info))
        return false;
    json_decref(info.root);
    mc_te_shm_ctl_t ctl;
    if (ctl_map(d->pid, &info, &ctl) != MC_OK)
        return false;
    munmap(ctl.base, ctl.size);
    return true;
}

/* Whether pid is in our namespace of kind ns ("pid", "time"). optional: a kernel without that
 * kind of namespace (neither entry exists) counts as the same. */
static bool same_namespace(pid_t pid, const char *ns, bool optional)
{
    char ours[64], theirs[64];
    struct stat a, b;
    snprintf(ours, sizeof(ours), "/proc/self/ns/%s", ns);
    snprintf(theirs, sizeof(theirs), "/proc/%d/ns/%s", (int)pid, ns);
    int ra = stat(ours, &a);
    int ea = errno;
    int rb = stat(theirs, &b);
    if (ra != 0 || rb != 0)
        return optional && ra != 0 && rb != 0 && ea == ENOENT && errno == ENOENT;
    return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* Whether the holder id we put in a lane names us in the owner's /proc: the same pid
 * namespace (the pid), and the same time namespace (/proc/<pid>/stat's start time is shown
 * relative to the reader's boot time). */
static bool owner_sees_our_id(pid_t owner)
{
    return same_namespace(owner, "pid", false) && same_namespace(owner, "time", true);
}

/* Claim a lane of sp's owner for this process (under the write lock, sp->ctl mapped): a free
 * one, else one whose holder is gone (reclaimed). Without one our copies take the
 * owner-served path: all lanes held by live processes (the next submit after
 * SHM_LANE_RETRY_NS tries again), or no id of ours in the owner's /proc (not before the
 * owner changes). */
static void peer_lane_claim(shm_peer_t *sp)
{
    const mc_te_shm_ctl_t *ctl = &sp->ctl;
    bool first = sp->lane_retry_ns == 0; /* log only then */
    uint64_t self = mc_te_shm_self_id();
    if (!self || !owner_sees_our_id(sp->pid)) {
        MC_LOG_WARN("shm: pid %d would not see this process under our id (another pid or "
                    "time namespace); copies go through the owner", (int)sp->pid);
        sp->lane_retry_ns = UINT64_MAX; /* until the owner changes */
        return;
    }
    sp->lane_retry_ns = mc_now_ns() + SHM_LANE_RETRY_NS;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t k = 0; k < ctl->lanes; k++) {
            uint64_t w = atomic_load(&ctl->lane[k]);
            if (w != 0 && (pass == 0 || !lane_reclaim(ctl, k, w, self)))
                continue;
            uint64_t free_word = 0;
            if (atomic_compare_exchange_strong(&ctl->lane[k], &free_word, self)) {
                sp->lane = k;
                sp->lane_id = self;
                sp->lane_pid = mc_te_shm_holder_pid(self);
                sp->lane_row = mc_te_shm_lane_row(ctl, k);
                return;
            }
        }
    }
    if (first)
        MC_LOG_INFO("shm: every lane of pid %d is held by a live process; copies go through "
                    "the owner until one is free", (int)sp->pid);
}

/* Free our lane (under the write lock: no copy of ours runs, so its row is all 0). A process
 * forked from the one that claimed it leaves it alone. */
static void peer_lane_release(shm_peer_t *sp)
{
    if (sp->lane_row && sp->lane_pid == getpid()) {
        uint64_t w = sp->lane_id;
        atomic_compare_exchange_strong(&sp->ctl.lane[sp->lane], &w, 0);
    }
    sp->lane_row = NULL;
    sp->lane_retry_ns = 0;
}

static void rbufs_free(shm_rbuf_t *bufs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (bufs[i].map)
            munmap(bufs[i].map, bufs[i].map_len);
    mc_free(bufs);
}

static void peer_drop(shm_peer_t *sp)
{
    rbufs_free(sp->bufs, sp->n_bufs);
    sp->bufs = NULL;
    sp->n_bufs = 0;
    peer_lane_release(sp);
    if (sp->ctl.base)
        munmap(sp->ctl.base, sp->ctl.size);
    sp->ctl.base = NULL;
    if (sp->pidfd >= 0)
        close(sp->pidfd);
    sp->pidfd = -1;
    mc_te_rdesc_put(sp->desc);
    sp->desc = NULL;
    sp->pid = 0;
}

/* Rebuild sp for descriptor r (under the write lock). Keeps mappings of unchanged buffers
 * when the owner process is the same. */
static mc_status_t peer_rebuild(shm_peer_t *sp, mc_te_rdesc_t *r)
{
    const mc_segment_desc_t *d = &r->d;
    shm_info_t info;
    if (!parse_info(d->transport_info, &info))
        return MC_ERR_PROTOCOL;
    if (sp->pid != d->pid)
        peer_drop(sp);
    mc_status_t st = MC_OK;
    if (!sp->ctl.base) {
        st = ctl_map(d->pid, &info, &sp->ctl);
        if (st == MC_OK) {
            sp->pid = d->pid;
            sp->pidfd = (int)syscall(SYS_pidfd_open, (pid_t)d->pid, 0);
            /* CMA needs ptrace-like permission; probe it once with a 1-byte read */
            sp->cma_ok = true;
            if (d->n_buffers > 0) {
                uint8_t x;
                struct iovec l = {&x, 1}, rr = {(void *)(uintptr_t)d->buffers[0].addr, 1};
                if (process_vm_readv(d->pid, &l, 1, &rr, 1, 0) < 0 && errno == EPERM)
                    sp->cma_ok = false;
            }
            peer_lane_claim(sp);
        }
    }
    shm_rbuf_t *nb = NULL;
    if (st == MC_OK && d->n_buffers > 0) {
        nb = mc_calloc(d->n_buffers, sizeof(*nb));
        if (!nb)
            st = MC_ERR_NO_MEMORY;
    }
    if (st != MC_OK) {
        json_decref(info.root);
        peer_drop(sp);
        return st;
    }
    json_t *slots = json_object_get(info.root, "slots");
    for (size_t i = 0; i < d->n_buffers; i++) {
        shm_rbuf_t *b = &nb[i];
        b->addr = d->buffers[i].addr;
        b->len = d->buffers[i].length;
        b->shm_fd = d->buffers[i].shm_fd;
        b->shm_offset = d->buffers[i].shm_offset;
        b->slot = -1;
        size_t k;
        json_t *e;
        json_array_foreach(slots, k, e) {
            json_t *ja = json_array_get(e, 0), *js = json_array_get(e, 1), *jg = json_array_get(e, 2);
            if (json_is_integer(ja) && json_is_integer(js) && json_is_integer(jg) &&
                (uint64_t)json_integer_value(ja) == b->addr && json_integer_value(js) >= 0 &&
                json_integer_value(js) < (json_int_t)sp->ctl.slots) {
                b->slot = (int32_t)json_integer_value(js);
                b->gen = (uint64_t)json_integer_value(jg);
                break;
            }
        }
        /* reuse an existing mapping of the same registration */
        for (size_t j = 0; j < sp->n_bufs; j++) {
            shm_rbuf_t *o = &sp->bufs[j];
            if (o->map && o->addr == b->addr && o->len == b->len && o->gen == b->gen &&
                o->slot == b->slot && o->shm_fd == b->shm_fd) {
                b->map = o->map;
                b->map_len = o->map_len;
                b->base = o->base;
                o->map = NULL;
            }
        }
    }
    json_decref(info.root);
    rbufs_free(sp->bufs, sp->n_bufs);
    sp->bufs = nb;
    sp->n_bufs = d->n_buffers;
    atomic_fetch_add(&r->refs, 1);
    mc_te_rdesc_put(sp->desc);
    sp->desc = r;
    return MC_OK;
}

/* Map one peer buffer (under the write lock). */
static void rbuf_map(shm_peer_t *sp, shm_rbuf_t *b)
{
    if (b->map || b->map_failed || b->shm_fd < 0 || b->slot < 0)
        return;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)sp->pid, b->shm_fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat sb;
    b->map_failed = true;
    if (fd < 0 || fstat(fd, &sb) != 0 || (uint64_t)sb.st_size < b->shm_offset ||
        (uint64_t)sb.st_size - b->shm_offset < b->len) {
        MC_LOG_WARN("shm: cannot use %s for buffer 0x%llx: %m", path, (unsigned long long)b->addr);
    } else {
        /* from the memfd page at or below the buffer to the page end at or above its end (not
         * past the file's): pages of the memfd's own size (st_blksize), 2 MiB or 1 GiB for
         * one on huge pages (mc_te_alloc_shareable), whose mappings must start and end on
         * them */
        uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);
        if ((uint64_t)sb.st_blksize > pg)
            pg = (uint64_t)sb.st_blksize;
        uint64_t aoff = b->shm_offset & ~(pg - 1), delta = b->shm_offset - aoff;
        uint64_t end = (b->shm_offset + b->len + pg - 1) & ~(pg - 1);
        if (end > (uint64_t)sb.st_size)
            end = (uint64_t)sb.st_size;
        size_t map_len = (size_t)(end - aoff);
        /* the fd number is only trustworthy if the registration is still the one we saw */
        mc_te_shm_slot_t *s = &sp->ctl.slot[b->slot];
        void *m = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)aoff);
        if (m != MAP_FAILED && mc_pages_populate_write(m, map_len) != 0) {
            /* old kernel: at least read-populate the page tables */
            madvise(m, map_len, MADV_WILLNEED);
        }
        if (m == MAP_FAILED) {
            MC_LOG_WARN("shm: mmap of peer buffer failed: %m");
        } else if (atomic_load(&s->state) != ((b->gen << 1) | 1)) {
            munmap(m, map_len);
            b->map_failed = false; /* stale descriptor: caller refreshes */
        } else {
            b->map = m;
            b->map_len = map_len;
            b->base = (uint8_t *)m + delta;
            b->map_failed = false;
        }
    }
    if (fd >= 0)
        close(fd);
}

static shm_peer_t *peer_state(mc_te_peer_t *peer)
{
    /* created under the peer's mutex so two submitters cannot race */
    pthread_mutex_lock(&peer->mu);
    shm_peer_t *sp = peer->tp_state[MC_TE_TP_SHM];
    if (!sp) {
        sp = mc_calloc(1, sizeof(*sp));
        if (sp) {
            pthread_rwlock_init(&sp->lock, NULL);
            sp->pidfd = -1;
            peer->tp_state[MC_TE_TP_SHM] = sp;
        }
    }
    pthread_mutex_unlock(&peer->mu);
    return sp;
}

static bool owner_exited(shm_peer_t *sp)
{
    if (sp->pidfd < 0)
        return kill(sp->pid, 0) != 0 && errno == ESRCH;
    struct pollfd p = {.fd = sp->pidfd, .events = POLLIN};
    return poll(&p, 1, 0) > 0;
}

enum { C_DONE, C_CMA, C_TCP, C_STALE, C_MAP, C_FENCED };

/* Try one slice under the read lock. next: the slice the caller copies after it, or NULL (a
 * hashed read prefetches its start if it lies in the same buffer: mc_te_copy_hashed). */
static int copy_slice(shm_peer_t *sp, mc_te_slice_t *s, const mc_te_slice_t *next,
                      mc_status_t *st_p)
{
    ptrdiff_t i = mc_segment_desc_find(&sp->desc->d, s->remote, s->len);
    if (i < 0)
        return C_STALE;
    shm_rbuf_t *b = &sp->bufs[i];
    if (b->shm_fd < 0 || b->slot < 0 || b->map_failed || !sp->lane_row)
        return sp->cma_ok ? C_CMA : C_TCP;
    if (!b->map)
        return C_MAP;
    /* the ordering this relies on: shm_on_unregister */
    mc_te_shm_slot_t *sl = &sp->ctl.slot[b->slot];
    _Atomic uint32_t *inflight = &sp->lane_row[b->slot];
    atomic_fetch_add(inflight, 1);
    if (atomic_load(&sl->state) != ((b->gen << 1) | 1)) {
        atomic_fetch_sub(inflight, 1);
        return C_STALE;
    }
    uint64_t until = atomic_load(&sl->serve_until_ns); /* the owner's, on the same clock */
    if (until && mc_now_ns() > until) {
        atomic_fetch_sub(inflight, 1);
        *st_p = MC_ERR_SEGMENT_FENCED;
        return C_FENCED;
    }
    uint8_t *remote = b->base + (s->remote - b->addr);
    if (s->opcode == MC_TE_READ && s->hash_out) { /* te_hashed.h: one pass, copy and XXH3 */
        bool ahead = next && next->remote - b->addr < b->len; /* unsigned: below addr too */
        mc_te_copy_hashed(s->hash_out, s->local, remote, s->len,
                          ahead ? b->base + (next->remote - b->addr) : NULL);
    } else if (s->opcode == MC_TE_READ)
        mc_payload_copy(s->local, remote, s->len);
    else
        mc_payload_copy(remote, s->local, s->len);
    atomic_fetch_sub(inflight, 1);
    *st_p = MC_OK;
    return C_DONE;
}

/* Drop *cur (the descriptor this submit works with) from the peer's cache, fetch the current
 * one and rebuild sp for it; *cur is then the new one. MC_OK, or why not (*cur unchanged when
 * the fetch failed). Not under sp->lock (the fetch may go to the network). */
static mc_status_t refresh_desc(mc_te_peer_t *peer, shm_peer_t *sp, mc_te_rdesc_t **cur)
{
    mc_te_peer_invalidate(peer, *cur);
    mc_te_rdesc_t *nr;
    int tp;
    mc_status_t st = mc_te_peer_get_desc(peer, &nr, &tp);
    if (st != MC_OK)
        return st;
    mc_te_rdesc_put(*cur);
    *cur = nr;
    pthread_rwlock_wrlock(&sp->lock);
    st = peer_rebuild(sp, nr);
    pthread_rwlock_unlock(&sp->lock);
    return st;
}

static void shm_submit(void *vctx, mc_te_peer_t *peer, mc_te_rdesc_t *desc,
                       mc_te_slice_t **slices, size_t n)
{
    shm_ctx_t *c = vctx;
    shm_peer_t *sp = peer_state(peer);
    mc_te_slice_t **fwd = mc_calloc(n, sizeof(*fwd));
    if (!sp || !fwd) {
        mc_free(fwd);
        for (size_t i = 0; i < n; i++)
            mc_te_slice_done(slices[i], MC_ERR_NO_MEMORY, 0);
        return;
    }
    size_t nfwd = 0, ncma = 0;
    mc_te_rdesc_t *cur = desc;
    atomic_fetch_add(&cur->refs, 1);
    bool refreshed = false;
    pthread_rwlock_wrlock(&sp->lock);
    mc_status_t st = sp->desc == cur ? MC_OK : peer_rebuild(sp, cur);
    int32_t dead = 0;
    if (st == MC_OK && !sp->lane_row && mc_now_ns() >= sp->lane_retry_ns)
        peer_lane_claim(sp); /* none free when we mapped: try again now and then */
    if (st == MC_OK && owner_exited(sp)) {
        MC_LOG_INFO("shm: owner of %s (pid %d) exited; fetching its descriptor again",
                    peer->name, (int)sp->pid);
        dead = sp->pid;
        peer_drop(sp);
    }
    pthread_rwlock_unlock(&sp->lock);
    if (dead) {
        /* The process our descriptor came from is gone; a new one may serve the segment on the
         * same host:port with a registration of its own. Fetch once (this counts as the
         * submit's one refresh): only a descriptor of another, living process is used. */
        refreshed = true;
        st = refresh_desc(peer, sp, &cur);
        pthread_rwlock_wrlock(&sp->lock);
        if (st == MC_OK && (cur->d.pid == dead || owner_exited(sp))) {
            peer_drop(sp);
            mc_te_peer_invalidate(peer, cur);
            st = MC_ERR_CONNECTION;
        }
        pthread_rwlock_unlock(&sp->lock);
        if (st != MC_OK) {
            MC_LOG_WARN("shm: owner of %s (pid %d) exited and no new one serves it: %s",
                        peer->name, (int)dead, mc_status_name(st));
            st = MC_ERR_CONNECTION;
        }
    }
    for (size_t i = 0; i < n && st != MC_OK; i++)
        mc_te_slice_done(slices[i], st, 0);
    if (st != MC_OK)
        n = 0;
    for (size_t i = 0; i < n; i++) {
        mc_te_slice_t *s = slices[i];
        for (int attempt = 0;; attempt++) {
            mc_status_t cst = MC_ERR_OUT_OF_RANGE;
            pthread_rwlock_rdlock(&sp->lock);
            int r = sp->desc ? copy_slice(sp, s, i + 1 < n ? slices[i + 1] : NULL, &cst)
                             : C_STALE;
            pthread_rwlock_unlock(&sp->lock);
            if (r == C_DONE || r == C_FENCED) {
                mc_te_slice_done(s, cst, r == C_DONE ? s->len : 0);
                break;
            }
            if (r == C_CMA || r == C_TCP) {
                s->cma = r == C_CMA;
                fwd[nfwd++] = s;
                ncma++;
                break;
            }
            if (attempt >= 3) {
                mc_te_slice_done(s, cst, 0);
                break;
            }
            if (r == C_MAP) {
                pthread_rwlock_wrlock(&sp->lock);
                if (sp->desc) {
                    ptrdiff_t k = mc_segment_desc_find(&sp->desc->d, s->remote, s->len);
                    if (k >= 0)
                        rbuf_map(sp, &sp->bufs[k]);
                }
                pthread_rwlock_unlock(&sp->lock);
                continue;
            }
            /* C_STALE: the range is not in our copy of the descriptor, or its registration
             * changed. Fetch the descriptor once more and retry. */
            if (refreshed) {
                mc_te_slice_done(s, MC_ERR_OUT_OF_RANGE, 0);
                break;
            }
            refreshed = true;
            if (refresh_desc(peer, sp, &cur) != MC_OK) {
                mc_te_slice_done(s, MC_ERR_TRANSFER_FAIL, 0);
                break;
            }
        }
    }
    if (nfwd > 0)
        c->fallback->ops->submit(c->fallback->ctx, peer, cur, fwd, nfwd);
    (void)ncma;
    mc_te_rdesc_put(cur);
    mc_free(fwd);
}

static void shm_peer_free(void *vctx, mc_te_peer_t *peer)
{
    shm_peer_t *sp = peer->tp_state[MC_TE_TP_SHM];
    if (!sp)
        return;
    peer_drop(sp);
    pthread_rwlock_destroy(&sp->lock);
    mc_free(sp);
    peer->tp_state[MC_TE_TP_SHM] = NULL;
}

static uint64_t shm_max_slice(void *vctx)
{
    return SHM_MAX_SLICE;
}

const mc_te_transport_ops_t mc_te_shm_ops = {
    .name = "shm",
    .init = shm_init,
    .fini = shm_fini,
    .max_slice = shm_max_slice,
    .can_reach = shm_can_reach,
    .submit = shm_submit,
    .on_register = shm_on_register,
    .on_unregister = shm_on_unregister,
    .on_unregister_abort = shm_on_unregister_abort,
    .on_unregister_done = shm_on_unregister_done,
    .on_serve_until = shm_on_serve_until,
    .transport_info = shm_transport_info,
    .peer_free = shm_peer_free,
};
