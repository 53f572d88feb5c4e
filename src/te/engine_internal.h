/* Transfer engine internals shared by engine.c and the transports (tcp_*.c, shm_*.c).
 * Not installed; nothing here is part of the public API. See transport.h for the design.
 */
#ifndef MC_TE_ENGINE_INTERNAL_H
#define MC_TE_ENGINE_INTERNAL_H

#include "mooncake/te.h"

#include "common/auth.h"
#include "common/net.h"
#include "te/metadata.h"
#include "te/segment_desc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#define MC_TE_HUGE_PAGE MC_PAGES_HUGE_2MB /* shareable memory on huge pages when free */
#define MC_TE_SHM_SLOTS 4096          /* control slots per engine (= max registered buffers) */
#define MC_TE_DEFAULT_TIMEOUT_MS 5000
#define MC_TE_DEFAULT_CONNS 4
#define MC_TE_MAX_CONNS 64
#define MC_TE_DEFAULT_WORKERS 2
#define MC_TE_MAX_WORKERS 32
#define MC_TE_DEFAULT_SLICE (1u << 20)
#define MC_TE_MIN_SLICE 4096u
#define MC_TE_MAX_STRIPE MC_TE_MAX_CONNS
#define MC_TE_MIN_SOCKET_BUF 4096u
#define MC_TE_MAX_SOCKET_BUF (1u << 30)
#define MC_TE_DEFAULT_BUSY_POLL_US 50
#define MC_TE_MAX_BUSY_POLL_US 10000
#define MC_TE_DEFAULT_IDLE_S 120
#define MC_TE_MAX_IDLE_S 86400
#define MC_TE_DEFAULT_SRV_CONNS 4096
#define MC_TE_MIN_SRV_CONNS 16
#define MC_TE_MAX_SRV_CONNS 65536

/* ---- local segment table ------------------------------------------------------------ */

/* One locally registered buffer. Heap object owned by the table; its address is stable while
 * registered, so transports may hold a pointer between acquire and release. */
typedef struct mc_te_lbuf {
    uint64_t addr;
    uint64_t len;
    char location[MC_TE_LOCATION_MAX];
    int shm_fd;              /* memfd descriptor of the shareable allocation, or -1 */
    uint64_t shm_offset;
    int32_t slot;            /* shm control slot, -1 if none */
    uint64_t gen;            /* shm control generation of this registration */
    _Atomic uint64_t inflight; /* acquires not yet released (tcp serving, local copies) */
    _Atomic int closing;       /* unregister in progress: acquire refuses */
    _Atomic uint64_t serve_until_ns; /* mc_te_set_serve_until; 0 = no limit */
} mc_te_lbuf_t;

typedef struct mc_te_table {
    pthread_rwlock_t lock;     /* protects bufs/n/cap */
    mc_te_lbuf_t **bufs;       /* sorted by addr, non-overlapping */
    size_t n, cap;
    pthread_mutex_t drain_mu;  /* with drain_cv: wakes unregister when inflight drops */
    pthread_cond_t drain_cv;
} mc_te_table_t;

void mc_te_table_init(mc_te_table_t *t);
/* Frees every entry (callers made sure nothing is in flight). */
void mc_te_table_fini(mc_te_table_t *t);
/* Insert b (heap, ownership passes to the table on MC_OK). MC_ERR_SEGMENT_ALREADY_EXISTS if
 * it overlaps a registered buffer, MC_ERR_TOO_LARGE past MC_SEGMENT_MAX_BUFFERS. */
mc_status_t mc_te_table_insert(mc_te_table_t *t, mc_te_lbuf_t *b);
/* Find the one buffer containing [addr, addr+len) (len > 0, overflow-checked) that is not
 * closing and take an in-flight reference on it. MC_ERR_OUT_OF_RANGE otherwise. The buffer
 * stays registered (and its memory valid) until mc_te_table_release. */
mc_status_t mc_te_table_acquire(mc_te_table_t *t, uint64_t addr, uint64_t len, mc_te_lbuf_t **b_p);
void mc_te_table_release(mc_te_table_t *t, mc_te_lbuf_t *b);
/* As mc_te_table_acquire, to serve the buffer's bytes (to a peer, or a copy within this
 * engine): MC_ERR_SEGMENT_FENCED once its serve_until_ns has passed. */
mc_status_t mc_te_table_acquire_served(mc_te_table_t *t, uint64_t addr, uint64_t len,
                                       mc_te_lbuf_t **b_p);
/* Unregister in three steps: begin (mark closing, new acquires refuse; MC_ERR_OBJECT_NOT_FOUND
 * if no buffer starts at addr, MC_ERR_BUSY if another unregister of it runs), wait for the
 * in-flight count to reach 0 (MC_ERR_BUSY at the deadline), then finish: remove and free on
 * success, or clear `closing` on failure. */
mc_status_t mc_te_table_begin_remove(mc_te_table_t *t, uint64_t addr, mc_te_lbuf_t **b_p);
mc_status_t mc_te_table_wait_drain(mc_te_table_t *t, mc_te_lbuf_t *b, uint64_t deadline_ns);
void mc_te_table_finish_remove(mc_te_table_t *t, mc_te_lbuf_t *b, bool remove);

/* ---- requests and batches ------------------------------------------------------------- */

typedef struct mc_te_req mc_te_req_t;
typedef struct mc_te_batch_impl mc_te_batch_impl_t;

#define MC_TE_SYNC_HELD_MAX 8

/* A piece of a request handed to one transport. Owned by its request; the transport holds it
 * from submit until it calls mc_te_slice_done exactly once. */
typedef struct mc_te_slice {
    mc_te_req_t *req;
    uint8_t *local;
    uint64_t remote;
    uint64_t len;
    uint32_t opcode;           /* MC_TE_READ / MC_TE_WRITE */
    uint32_t cma;              /* tcp: ask the owner for a CMA copy instead of moving bytes */
    uint64_t id;               /* transport-assigned */
    struct mc_te_slice *next;  /* transport queue link */
    uint8_t hdr[40];           /* tcp: encoded request header (+16 bytes CMA body below) */
    uint8_t body[16];
    int32_t resp_status;       /* tcp: response that arrived before our send finished */
    uint8_t resp_ready;
    uint8_t queued;            /* tcp: on a connection's queue (under the connection lock) */
    uint32_t pre_len;          /* tcp: a GRANT frame sent right before this slice's frame: */
    uint8_t *pre;              /* heap, owned by the slice until sent or dropped */
    /* A READ copied in one piece by the submitting thread (shm, local segment) under
     * mc_te_transfer_start_hashed: where its XXH3 goes (te_hashed.h); NULL otherwise. Set
     * only when this slice is the whole request; tcp uses req->hash_out instead. */
    struct mc_te_read_hash *hash_out;
} mc_te_slice_t;

struct mc_te_req {
    _Atomic int state;         /* mc_te_state_t */
    _Atomic int error;         /* first error, MC_OK if none */
    _Atomic uint64_t transferred;
    _Atomic uint32_t remaining; /* slices not yet done */
    uint64_t deadline_ns;
    mc_te_batch_impl_t *batch;
    struct mc_te_peer *peer;   /* submit-time routing */
    struct mc_te_rdesc *desc;  /* submit-time descriptor reference (put after dispatch) */
    int tp;
    mc_te_slice_t inline_slice;
    mc_te_slice_t *slices;     /* == &inline_slice or heap array of n_slices */
    uint32_t n_slices;
    /* A READ under mc_te_transfer_start_hashed, whatever its slices: where its XXH3 goes.
     * A transport that sees every slice's bytes in order (tcp, one connection) fills it
     * before the last slice is done (te_hashed.h). NULL otherwise. */
    struct mc_te_read_hash *hash_out;
};

struct mc_te_batch_impl {
    mc_te_t *te;
    size_t cap;
    size_t n;                  /* requests submitted (under mu) */
    mc_te_req_t *reqs;         /* cap entries */
    _Atomic size_t outstanding; /* submitted requests not final */
    _Atomic int waiters;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* Synchronous batches (mc_te_transfer_start/wait): a thread will wait for the batch, so a
     * transport may let it receive the responses itself (transport.h, sync_wait). held[i] =
     * a transport object (tcp: connection) the batch's slices went to, held_last[i] = the
     * last of them there. Set at submit, used by the waiter; no other thread touches them. */
    bool sync;
    bool reserve;              /* mc_te_transfer_start_reserved: held at submit, not at wait */
    size_t wait_upto;          /* a waiter for requests [0, wait_upto) (under mu; 0 = none) */
    uint32_t n_held;
    void *held[MC_TE_SYNC_HELD_MAX];
    mc_te_slice_t *held_last[MC_TE_SYNC_HELD_MAX];
};

/* Whether requests [0, upto) of b are all final. */
bool mc_te_batch_prefix_final(mc_te_batch_impl_t *b, size_t upto);

/* Report the end of one slice (any thread; exactly once per slice). bytes counted into the
 * request's transferred total. The last slice makes the request final. */
void mc_te_slice_done(mc_te_slice_t *s, mc_status_t st, uint64_t bytes);

/* A hashed READ's bytes are hashed in pieces of this size, each right after it landed (from
 * the second-level cache): tcp's direct receives, and a copy that continues a caller's
 * stream (mc_te_copy_hashed). */
#define MC_TE_HASH_PIECE (64u << 10)
/* Copies n bytes of a READ from src to dst (not overlapping) and fills h (te_hashed.h): the
 * XXH3 of the bytes in the same pass, or, with h->cont, the bytes fed into that stream. next:
 * NULL, or where the caller's next copy reads from (prefetched while this one is hashed:
 * mc_hash64_copy). */
struct mc_te_read_hash;
void mc_te_copy_hashed(struct mc_te_read_hash *h, void *dst, const void *src, size_t n,
                       const void *next);

/* ---- peers (opened segments) ----------------------------------------------------------- */

/* Refcounted immutable snapshot of a remote descriptor. */
typedef struct mc_te_rdesc {
    _Atomic int refs;
    mc_segment_desc_t d;
} mc_te_rdesc_t;
void mc_te_rdesc_put(mc_te_rdesc_t *r);

/* MC_TE_TP_UCX: the optional ucx transport (ucx_transport.c, only with MC_HAVE_UCX). */
enum { MC_TE_TP_TCP = 0, MC_TE_TP_SHM = 1, MC_TE_TP_UCX = 2, MC_TE_TP_COUNT = 3 };

/* Grants an initiator holding a tenant token keeps per peer (mc_te_grant_present), to present
 * on each of its connections to that peer: the newest MC_TE_PEER_GRANTS. */
#define MC_TE_PEER_GRANTS 64
typedef struct mc_te_peer_grant {
    uint8_t *blob;       /* heap copy of the grant (common/grant.h) */
    uint32_t len;
    uint64_t expiry_ms;  /* wall clock */
} mc_te_peer_grant_t;

typedef struct mc_te_peer {
    mc_te_t *te;
    uint32_t idx;                   /* segment handle = idx + 1 */
    char name[MC_TE_NAME_MAX];
    char host[MC_HOST_MAX];
    uint16_t port;                  /* from the name (data port if the descriptor lacks one) */
    bool is_local;
    pthread_mutex_t mu;             /* desc, tp */
    mc_te_rdesc_t *desc;            /* NULL: fetch before next use */
    mc_status_t fail_st;            /* last failed fetch, answered again for 100 ms */
    uint64_t fail_ns;
    int tp;                         /* MC_TE_TP_* chosen for this descriptor */
    void *tp_state[MC_TE_TP_COUNT]; /* per-transport per-peer state, owned by the transport */
    /* Presented grants (tenant-bound engines only): ring of the newest MC_TE_PEER_GRANTS;
     * grant_seq counts every grant ever presented, the newest is at (grant_seq - 1) % N.
     * grant_mu is a leaf lock (taken under a tcp connection's mu). */
    pthread_mutex_t grant_mu;
    uint64_t grant_seq;
    mc_te_peer_grant_t grants[MC_TE_PEER_GRANTS];
} mc_te_peer_t;

/* The peer behind a segment handle, NULL if none (peers live until engine destroy). */
mc_te_peer_t *mc_te_peer_by_handle(mc_te_t *te, mc_te_segment_t seg);

/* Current descriptor of peer (fetching it if needed), with a reference the caller puts.
 * *tp_p gets the transport chosen for it. */
mc_status_t mc_te_peer_get_desc(mc_te_peer_t *p, mc_te_rdesc_t **r_p, int *tp_p);
/* tcp: GRANT frames back to back (tcp_frame.h; headers and bodies, heap, *len_p bytes)
 * carrying the unexpired grants presented to p after *seq_io (at most the newest
 * MC_TE_PEER_GRANTS), oldest first, each frame's body at most MC_TE_FRAME_MAX_GRANT; *seq_io
 * moves to the newest. NULL when there is none. */
uint8_t *mc_te_peer_grant_frame(mc_te_peer_t *p, uint64_t *seq_io, uint32_t *len_p);
/* Forget the cached descriptor if it is still r (r == NULL: unconditionally). */
void mc_te_peer_invalidate(mc_te_peer_t *p, mc_te_rdesc_t *r);

/* ---- engine ------------------------------------------------------------------------------ */

/* A started transport: its ops table (transport.h) and its context (what init returned).
 * ops == NULL: not started. */
typedef struct mc_te_transport_ops mc_te_transport_ops_t;
typedef struct mc_te_transport {
    const mc_te_transport_ops_t *ops;
    void *ctx;
} mc_te_transport_t;

typedef struct mc_te_shareable {
    void *addr;
    size_t len;
    size_t page;  /* the page size it is mapped with */
    int fd;
    struct mc_te_shareable *next;
} mc_te_shareable_t;

struct mc_te {
    char local_name[MC_TE_NAME_MAX];
    char host[MC_HOST_MAX];
    uint16_t port;
    char protocol[16];
    uint32_t timeout_ms;
    uint32_t tcp_conns;
    uint32_t workers;
    uint64_t slice_size;
    bool force_tcp;
    bool hugepages_off;             /* config hugepages == -1 */
    size_t hugepage_size;           /* config hugepage_size: required page size, 0 = none */
    uint32_t tcp_stripe;            /* config tcp_stripe: 0 = tcp picks (tcp_stripe_width) */
    uint32_t tcp_socket_buf;        /* SO_SNDBUF/SO_RCVBUF of data connections; 0 = kernel */
    uint64_t busy_poll_ns;          /* spin budget of waiters and loops; 0 = never spin */
    uint64_t idle_timeout_ns;       /* server connections without a frame this long close */
    uint32_t max_srv_conns;         /* accepted connections open at once */
    mc_auth_t *auth;                /* keyring (auth_token_file), NULL = no authentication */
    bool tenant_bound;              /* our own (first) key is a tenant token: tcp to every
                                     * peer, grants presented (mc_te_grant_present) */
    char host_id[64];
    pid_t pid;
    mc_meta_t *meta;
    int listen_fd;

    mc_te_table_t table;

    pthread_mutex_t desc_mu;        /* published descriptor JSON (GET_DESC answers) */
    char *desc_json;
    size_t desc_json_len;
    pthread_mutex_t reg_mu;         /* serializes register/unregister/publish */

    pthread_mutex_t mu;             /* peers, batches, shareables */
    mc_te_peer_t **peers;
    size_t n_peers, cap_peers;
    mc_te_batch_impl_t **batches;   /* slot table; handle = gen << 32 | (slot + 1) */
    uint32_t *batch_gen;
    size_t n_batch_slots;           /* slots in use by both arrays */
    size_t cap_batches, cap_batch_gen;
    mc_te_shareable_t *shareables;

    /* Started transports by MC_TE_TP_*: tcp always; shm unless it failed to start; ucx only
     * with protocol "ucx". */
    mc_te_transport_t tp[MC_TE_TP_COUNT];
    _Atomic int stopping;

    /* Received notifications (mc_te_notify_*), oldest first; capped by
     * MC_TE_NOTIFY_QUEUE_MAX entries and MC_TE_NOTIFY_QUEUE_BYTES bytes. */
    pthread_mutex_t notify_mu;
    struct mc_te_note *notes_head, *notes_tail;
    size_t n_notes, note_bytes;
    mc_te_notify_stats_t notify_stats;

    /* tcp listener budgets (mc_te_conn_stats) */
    _Atomic uint64_t conn_open, conn_closed_unauth, conn_closed_idle, conn_closed_slow,
        conn_displaced, conn_refused_full, conn_denied, conn_grants_refused,
        conn_grants_shared;
};

/* Queue a received notification (copied; any thread). MC_OK, MC_ERR_BUSY (queue full: counted
 * as refused_full) or MC_ERR_TOO_LARGE / MC_ERR_NO_MEMORY. */
mc_status_t mc_te_notify_push(mc_te_t *te, const char *name, size_t name_len, const char *msg,
                              size_t msg_len);
/* Count a malformed notification that was refused (refused_bad). */
void mc_te_notify_count_bad(mc_te_t *te);
/* Free the queue (engine destroy, after the transports stopped). */
void mc_te_notify_fini(mc_te_t *te);

/* Copy of the current descriptor JSON (heap, caller frees). */
mc_status_t mc_te_desc_json_copy(mc_te_t *te, char **json_p, size_t *len_p);

#endif
