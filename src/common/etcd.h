/* etcd v3 client over etcd's JSON gateway (libcurl through common/http_client.h, no gRPC).
 *
 * Gateway paths (etcd 3.4 and later): /v3/kv/range, /v3/kv/put, /v3/kv/deleterange,
 * /v3/kv/txn, /v3/lease/grant, /v3/lease/keepalive (one request, one result), /v3/watch
 * (a streamed answer: mc_etcd_watch reads it until the first change, then closes it),
 * /v3/kv/lease/revoke. Keys and values travel base64-encoded; the gateway omits fields that
 * are zero/empty/false, so a missing number is 0 and a missing value is empty.
 *
 * Endpoints "h:p;h:p" (';' or ',', at most 16): a call goes to the endpoint that answered
 * last; on a transport error (refused, reset, timeout) or HTTP 503 the next one is tried, each
 * at most once per call, so one call takes at most n x timeout_ms. Because a call whose answer
 * was lost may still have been applied, callers of non-idempotent transactions must check the
 * outcome themselves when a txn reports failure after a failover (see master/ha.c).
 *
 * Caps: every response body is capped at MC_ETCD_MAX_RESP (bigger answers fail with
 * MC_ERR_TOO_LARGE); keys are text up to MC_ETCD_KEY_MAX bytes; a request body (after
 * base64) above MC_ETCD_MAX_REQ is refused with MC_ERR_TOO_LARGE before it is sent, and etcd's
 * own refusal of a request over its --max-request-bytes (1.5 MiB by default) is MC_ERR_TOO_LARGE. Errors: MC_ERR_ETCD_OPERATION_ERROR (etcd refused:
 * the message is logged), MC_ERR_TOO_LARGE, MC_ERR_CONNECTION / MC_ERR_TIMEOUT (no endpoint
 * answered), MC_ERR_PROTOCOL (a malformed answer), MC_ERR_NO_MEMORY.
 *
 * Thread-safe: a client may be used by several threads at once.
 */
#ifndef MC_COMMON_ETCD_H
#define MC_COMMON_ETCD_H

#include "mooncake/status.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#define MC_ETCD_KEY_MAX 1024
#define MC_ETCD_MAX_RESP ((size_t)16 << 20)
#define MC_ETCD_MAX_REQ ((size_t)8 << 20) /* what we send; etcd refuses > 1.5 MiB by default */
#define MC_ETCD_MAX_ENDPOINTS 16

typedef struct mc_etcd mc_etcd_t;

/* endpoints: "h:p;h:p" (borrowed). timeout_ms: per request and endpoint tried (> 0). */
mc_status_t mc_etcd_open(const char *endpoints, uint32_t timeout_ms, mc_etcd_t **e_p);
void mc_etcd_close(mc_etcd_t *e);

typedef struct mc_etcd_kv {
    char *key; /* heap, NUL-terminated */
    char *value; /* heap, NUL appended (not counted in value_len) */
    size_t value_len;
    int64_t create_revision, mod_revision, version, lease;
} mc_etcd_kv_t;

typedef struct mc_etcd_range {
    mc_etcd_kv_t *kvs;
    size_t n;
    int more;         /* more keys matched than `limit` */
    int64_t revision; /* the store's revision when the answer was made (header) */
} mc_etcd_range_t;

void mc_etcd_range_free(mc_etcd_range_t *r);

/* Keys in [key, range_end): range_end NULL = exactly `key`; MC_ETCD_PREFIX = every key that
 * starts with `key`. limit 0 = no limit (the response cap still applies). An absent key is
 * MC_OK with n == 0. */
#define MC_ETCD_PREFIX ((const char *)1)
mc_status_t mc_etcd_range(mc_etcd_t *e, const char *key, const char *range_end, int64_t limit,
                          mc_etcd_range_t *out);
/* One key's value (heap, NUL appended) or MC_ERR_OBJECT_NOT_FOUND. */
mc_status_t mc_etcd_get(mc_etcd_t *e, const char *key, char **value_p, size_t *len_p);
/* Put with an optional lease (0 = none); *revision_p (may be NULL) the new revision. */
mc_status_t mc_etcd_put(mc_etcd_t *e, const char *key, const void *value, size_t len,
                        int64_t lease, int64_t *revision_p);
/* Delete [key, range_end) (same rules as range); *deleted_p (may be NULL) how many. */
mc_status_t mc_etcd_delete(mc_etcd_t *e, const char *key, const char *range_end,
                           int64_t *deleted_p);

/* Waits (a watch: /v3/watch, one stream) until `key` changes at a revision >= start_rev:
 * MC_OK and *rev_p = the revision of the first change (a put or a delete; if start_rev was
 * compacted away, etcd's compact revision: re-read the key), MC_ERR_TIMEOUT when nothing
 * changed within timeout_ms, MC_ERR_CANCELED once *cancel (optional) is nonzero (seen within
 * a second), else an error (on a transport error the next call goes to the next endpoint). */
mc_status_t mc_etcd_watch(mc_etcd_t *e, const char *key, int64_t start_rev, uint32_t timeout_ms,
                          const atomic_int *cancel, int64_t *rev_p);

/* ---- transactions ---- */

typedef enum { MC_ETCD_CREATE, MC_ETCD_MOD, MC_ETCD_VALUE, MC_ETCD_VERSION } mc_etcd_target_t;
typedef enum { MC_ETCD_EQUAL, MC_ETCD_GREATER, MC_ETCD_LESS, MC_ETCD_NOT_EQUAL } mc_etcd_result_t;

typedef struct mc_etcd_cmp {
    const char *key;
    mc_etcd_target_t target;
    mc_etcd_result_t result;
    int64_t rev;       /* CREATE / MOD / VERSION */
    const void *value; /* VALUE */
    size_t value_len;
} mc_etcd_cmp_t;

typedef enum { MC_ETCD_OP_PUT, MC_ETCD_OP_DELETE, MC_ETCD_OP_RANGE } mc_etcd_op_type_t;

typedef struct mc_etcd_op {
    mc_etcd_op_type_t type;
    const char *key;
    const char *range_end; /* DELETE / RANGE: as for mc_etcd_range */
    const void *value;     /* PUT */
    size_t value_len;
    int64_t lease; /* PUT: 0 = none */
    int64_t limit; /* RANGE */
} mc_etcd_op_t;

typedef struct mc_etcd_txn_resp {
    int succeeded;
    int64_t revision;          /* header */
    mc_etcd_range_t *ranges;   /* one per op of the branch taken; filled for RANGE ops only */
    size_t n;
} mc_etcd_txn_resp_t;

void mc_etcd_txn_resp_free(mc_etcd_txn_resp_t *r);

/* If(all cmps) Then success Else failure. resp may be NULL when no answer is needed but
 * whether it succeeded (*succeeded_p, may be NULL). */
mc_status_t mc_etcd_txn(mc_etcd_t *e, const mc_etcd_cmp_t *cmps, size_t ncmp,
                        const mc_etcd_op_t *success, size_t nsuccess, const mc_etcd_op_t *failure,
                        size_t nfailure, int *succeeded_p, mc_etcd_txn_resp_t *resp);

/* ---- leases ---- */

/* Grant a lease of ttl_s seconds (1..3600); *id_p its id. */
mc_status_t mc_etcd_lease_grant(mc_etcd_t *e, int64_t ttl_s, int64_t *id_p);
/* One keepalive; MC_ERR_LEASE_EXPIRED when etcd no longer knows the lease (expired or revoked),
 * else *ttl_p (may be NULL) the TTL etcd restarted it with. */
mc_status_t mc_etcd_lease_keepalive(mc_etcd_t *e, int64_t id, int64_t *ttl_p);
/* Revoke (deletes its keys); an unknown lease is MC_OK. */
mc_status_t mc_etcd_lease_revoke(mc_etcd_t *e, int64_t id);

/* The first key after every key that starts with prefix (etcd's prefix range_end), heap. */
char *mc_etcd_prefix_end(const char *prefix);

#endif
