/* The store client's metrics (upstream Mooncake's client metrics: names, types, labels and
 * latency buckets of mooncake-store/include/client_metric.h) and its optional HTTP server.
 * Not installed; the public view is mooncake/store.h (mc_store_metrics*, client_http_*).
 *
 * Everything here is updated from any thread with relaxed atomic adds and never locked: a
 * reader (the text render) may see one operation's bucket before its sum, never a torn value.
 * A histogram keeps per-bucket counts; its _count is their total, so _count always equals the
 * +Inf bucket. Design and what each series counts: docs/internals/store-client.md, "Metrics". */
#ifndef MC_CLIENT_STORE_METRICS_H
#define MC_CLIENT_STORE_METRICS_H

#include "common/auth.h"
#include "common/time.h"
#include "mooncake/status.h"
#include "mooncake/te.h"
#include "rpc/opcodes.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Upstream's kLatencyBucket (microseconds): le bounds, then +Inf. */
#define STORE_LAT_BUCKETS 27
extern const uint64_t store_lat_le_us[STORE_LAT_BUCKETS];

typedef struct store_hist {
    _Atomic uint64_t bucket[STORE_LAT_BUCKETS + 1]; /* not cumulative; [STORE_LAT_BUCKETS] = +Inf */
    _Atomic uint64_t sum_us;
} store_hist_t;

/* The operation histograms (mooncake_transfer_*_latency). */
enum { STORE_OP_GET, STORE_OP_PUT, STORE_OP_BATCH_GET, STORE_OP_BATCH_PUT, STORE_OP_N };

typedef struct store_metrics {
    _Atomic uint64_t read_bytes, write_bytes; /* mooncake_transfer_{read,write}_bytes */
    store_hist_t op[STORE_OP_N];
    _Atomic uint64_t rpc_count[MC_OP_MAX];    /* mooncake_client_rpc_count{rpc_name} */
    store_hist_t rpc_lat[MC_OP_MAX];          /* mooncake_client_rpc_latency{rpc_name} */
    uint64_t start_ns;                        /* creation (summary throughput) */
} store_metrics_t;

/* A zeroed metrics block (mc_free), or NULL without memory. */
store_metrics_t *store_metrics_new(void);

/* One observation of us microseconds. */
static inline void store_hist_observe(store_hist_t *h, uint64_t us)
{
    size_t lo = 0, hi = STORE_LAT_BUCKETS; /* first bound >= us, or +Inf */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (us <= store_lat_le_us[mid])
            hi = mid;
        else
            lo = mid + 1;
    }
    atomic_fetch_add_explicit(&h->bucket[lo], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum_us, us, memory_order_relaxed);
}

/* For timing an operation: 0 when metrics are off (m NULL), else now in ns. */
static inline uint64_t store_metrics_t0(const store_metrics_t *m) { return m ? mc_now_ns() : 0; }

/* Ends the operation timed from t0 (store_metrics_t0) and adds its bytes; no-op for m NULL. */
static inline void store_metrics_op(store_metrics_t *m, int op, uint64_t t0, uint64_t read_bytes,
                                    uint64_t write_bytes)
{
    if (!m)
        return;
    store_hist_observe(&m->op[op], (mc_now_ns() - t0) / 1000);
    if (read_bytes)
        atomic_fetch_add_explicit(&m->read_bytes, read_bytes, memory_order_relaxed);
    if (write_bytes)
        atomic_fetch_add_explicit(&m->write_bytes, write_bytes, memory_order_relaxed);
}

/* Upstream's rpc_name label of an opcode ("GetReplicaList", "PutStart", ...), or NULL. */
const char *store_metrics_rpc_name(uint16_t opcode);

/* Prometheus text 0.0.4 (*text_p malloc'd, NUL-terminated; caller frees with free()). te:
 * the client's Transfer Engine data-port counters (mc_te_conn_stats), NULL = none;
 * stale_views: master answers dropped for an older HA view (mc_master_client_t.view_refused). */
mc_status_t store_metrics_render(const store_metrics_t *m, const mc_te_conn_stats_t *te,
                                 uint64_t stale_views, char **text_p);
/* Upstream's /metrics/summary text (same ownership). */
mc_status_t store_metrics_summary(const store_metrics_t *m, char **text_p);

/* ---- client_http.c: the client HTTP server (/health, /metrics, /metrics/summary) */

struct mc_store;
typedef struct client_http client_http_t;

/* Starts serving store s on host:port (host NULL or "" = every interface, port 0 = a free
 * one). With a keyring (auth, borrowed: the store's, outlives the server) every request must
 * be signed, except /metrics, /metrics/summary and /health with metrics_public.
 * MC_OK with *http_p; MC_ERR_INVALID_PARAMS for a host that is not an IPv4 address;
 * MC_ERR_BUSY when the port is taken (logged with the port); MC_ERR_IO otherwise. */
mc_status_t client_http_start(struct mc_store *s, const char *host, int port,
                              const mc_auth_t *auth, bool metrics_public, client_http_t **http_p);
/* The bound port. */
uint16_t client_http_port(const client_http_t *h);
/* Stops the server (waits for requests in flight) and frees it; NULL is a no-op. */
void client_http_stop(client_http_t *h);

#endif
