/* The shm transport's control memory (design: transport.h, "shm"): one memfd per engine,
 * written by the owner of the registered buffers and by the initiators that copy from them.
 * Internal to the transfer engine; shm_transport.c and the tests use it.
 *
 * Layout (every part 64-byte aligned; all numbers native-endian, same host):
 *   header   {magic, version, slots, lanes}
 *   slot[S]  {state = gen << 1 | registered, serve_until_ns}   written by the owner only
 *   lane[L]  holder word (below)                               claimed by initiators
 *   inflight[L][S]  u32 copies in flight, one row per lane, each row on cache lines of its
 *                   own: an initiator writes only its lane's row
 * The holder word of a lane: 0 = free; holder id = start_ticks << 22 | pid (pid < 2^22 =
 * PID_MAX_LIMIT; start_ticks = field 22 of /proc/<pid>/stat, so that a reused pid is another
 * holder); holder id | MC_TE_SHM_LANE_RECLAIMING = the process of that id is zeroing the
 * lane's row because its holder is gone (then frees it). One word: a claim is one CAS, no
 * half-claimed state. */
#ifndef MC_TE_SHM_CTL_H
#define MC_TE_SHM_CTL_H

#include "te/engine_internal.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define MC_TE_SHM_LANES 64 /* initiator processes copying from one engine's buffers at once */
#define MC_TE_SHM_CTL_MAGIC 0x4354434du /* "MCTC" */
#define MC_TE_SHM_CTL_VERSION 2u

#define MC_TE_SHM_PID_BITS 22
#define MC_TE_SHM_START_BITS 41
#define MC_TE_SHM_LANE_RECLAIMING (1ull << 63)

typedef struct mc_te_shm_ctl_hdr {
    uint32_t magic, version, slots, lanes;
} mc_te_shm_ctl_hdr_t;

typedef struct mc_te_shm_slot {
    _Atomic uint64_t state;
    _Atomic uint64_t serve_until_ns; /* CLOCK_MONOTONIC (one clock per host); 0 = no limit */
} mc_te_shm_slot_t;

/* One mapping of a control memfd with its parts located (both sides). */
typedef struct mc_te_shm_ctl {
    void *base;
    size_t size;
    uint32_t slots, lanes;
    size_t row_stride; /* bytes from one lane's inflight row to the next */
    mc_te_shm_ctl_hdr_t *hdr;
    mc_te_shm_slot_t *slot;
    _Atomic uint64_t *lane;
    uint8_t *inflight;
} mc_te_shm_ctl_t;

static inline size_t mc_te_shm_align64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Byte offsets of the parts for slots x lanes; returns the total size. */
static inline size_t mc_te_shm_ctl_offsets(uint32_t slots, uint32_t lanes, size_t *slot_off,
                                           size_t *lane_off, size_t *inflight_off,
                                           size_t *row_stride)
{
    *slot_off = mc_te_shm_align64(sizeof(mc_te_shm_ctl_hdr_t));
    *lane_off = mc_te_shm_align64(*slot_off + (size_t)slots * sizeof(mc_te_shm_slot_t));
    *inflight_off = mc_te_shm_align64(*lane_off + (size_t)lanes * sizeof(uint64_t));
    *row_stride = mc_te_shm_align64((size_t)slots * sizeof(uint32_t));
    return *inflight_off + (size_t)lanes * *row_stride;
}

static inline size_t mc_te_shm_ctl_size(uint32_t slots, uint32_t lanes)
{
    size_t a, b, c, d;
    return mc_te_shm_ctl_offsets(slots, lanes, &a, &b, &c, &d);
}

/* Fill ctl for a mapping at base of a control memory of slots x lanes (the caller checked
 * that the mapping is at least mc_te_shm_ctl_size(slots, lanes) bytes). */
static inline void mc_te_shm_ctl_locate(mc_te_shm_ctl_t *ctl, void *base, uint32_t slots,
                                        uint32_t lanes)
{
    size_t so, lo, io;
    ctl->base = base;
    ctl->size = mc_te_shm_ctl_offsets(slots, lanes, &so, &lo, &io, &ctl->row_stride);
    ctl->slots = slots;
    ctl->lanes = lanes;
    ctl->hdr = base;
    ctl->slot = (mc_te_shm_slot_t *)((uint8_t *)base + so);
    ctl->lane = (_Atomic uint64_t *)((uint8_t *)base + lo);
    ctl->inflight = (uint8_t *)base + io;
}

/* Lane k's in-flight counters, indexed by slot. */
static inline _Atomic uint32_t *mc_te_shm_lane_row(const mc_te_shm_ctl_t *ctl, uint32_t k)
{
    return (_Atomic uint32_t *)(ctl->inflight + (size_t)k * ctl->row_stride);
}

static inline uint64_t mc_te_shm_holder_id(pid_t pid, uint64_t start_ticks)
{
    return start_ticks << MC_TE_SHM_PID_BITS | (uint64_t)pid;
}

static inline pid_t mc_te_shm_holder_pid(uint64_t word)
{
    return (pid_t)(word & ((1ull << MC_TE_SHM_PID_BITS) - 1));
}

/* Our holder id (getpid and its start time), or 0 when it cannot be had or does not fit. */
uint64_t mc_te_shm_self_id(void);
/* Whether the process named by a lane's holder word (reclaiming bit ignored) is gone: no
 * such pid, another start time, or every thread of it exited (zombie). A process that
 * exists but whose /proc entry cannot be read counts as alive. */
bool mc_te_shm_holder_gone(uint64_t word);
/* Tests, on the owner's engine: the copies counted in flight for the buffer registered at
 * addr in the lanes held by pid (0 when none, or no shm transport); the lanes pid holds. */
uint64_t mc_te_shm_lane_inflight(mc_te_t *te, const void *addr, pid_t pid);
uint32_t mc_te_shm_lanes_held(mc_te_t *te, pid_t pid);
/* Tests: the owner's own mapping of its control memory (NULL without shm transport). */
const mc_te_shm_ctl_t *mc_te_shm_owner_ctl(mc_te_t *te);

#endif
