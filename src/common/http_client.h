/* Shared HTTP client (libcurl) and base64 (http_client.c): the metadata backends (te) and
 * the etcd client (common/etcd.h) send their requests through it. */
#ifndef MC_COMMON_HTTP_CLIENT_H
#define MC_COMMON_HTTP_CLIENT_H

#include "common/http_auth.h"

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>


/* curl_global_init, once per process; backends call it at open, not inside a request. */
void mc_http_client_init(void);

typedef struct mc_http_resp {
    long code;   /* HTTP status, 0 if none */
    char *body;  /* heap, NUL-terminated (mc_free), never NULL on MC_OK */
    size_t len;
} mc_http_resp_t;

/* One HTTP request, bounded by timeout_ms in total and min(2000, timeout_ms) to connect.
 * method "GET"/"PUT"/"POST"/"DELETE"; body may be NULL (borrowed for the call); content_type
 * may be NULL. Response bodies above max_resp bytes abort the transfer
 * with MC_ERR_TOO_LARGE. Transport errors: MC_ERR_CONNECTION (refused, reset, unresolvable,
 * no connection within the connect timeout), MC_ERR_TIMEOUT (connected but no complete answer
 * in time). On MC_OK the caller owns resp->body. Thread-safe (handles come from a pool). */
mc_status_t mc_http_request(const char *method, const char *url, const char *body,
                            size_t body_len, const char *content_type, size_t max_resp,
                            uint32_t timeout_ms, mc_http_resp_t *resp);
/* The same, signed with `auth` (NULL = unsigned, exactly as above): the cached nonce of
 * `cache` is used when there is one; a 401 carrying a Mooncake challenge makes the request be
 * re-signed with the new nonce (cached) and sent once more. A final 401 is returned as a
 * response (resp->code 401), not as an error. */
mc_status_t mc_http_request_auth(const mc_auth_t *auth, mc_http_auth_client_t *cache,
                                 const char *method, const char *url, const char *body,
                                 size_t body_len, const char *content_type, size_t max_resp,
                                 uint32_t timeout_ms, mc_http_resp_t *resp);

/* A streamed request (e.g. an etcd watch), unsigned: after each chunk of the response body,
 * on_data gets the whole body so far (NUL-terminated, at most max_resp bytes); when it returns
 * nonzero the transfer stops and MC_OK is returned (*code_p = the HTTP status). Otherwise:
 * MC_OK when the body ended (on_data had its last look), MC_ERR_TIMEOUT after timeout_ms
 * (not logged: the normal end of a quiet stream), MC_ERR_CANCELED once *cancel (optional,
 * polled by libcurl while it waits, at least once a second) is nonzero, or the errors of
 * mc_http_request. */
mc_status_t mc_http_stream(const char *method, const char *url, const char *body,
                           size_t body_len, const char *content_type, size_t max_resp,
                           uint32_t timeout_ms, int (*on_data)(void *ctx, const char *body,
                                                               size_t len),
                           void *ctx, const atomic_int *cancel, long *code_p);

/* URL-escape s (RFC 3986 unreserved kept). Heap string, mc_free it; NULL on no memory. */
char *mc_http_url_escape(const char *s);

/* ---- base64 (RFC 4648, standard alphabet, padded) ---- */

/* Encoded length including padding (no NUL). */
size_t mc_b64_encoded_len(size_t n);
/* Encode n bytes; returns a heap NUL-terminated string (mc_free) or NULL on no memory. */
char *mc_b64_encode(const void *data, size_t n);
/* Strict decode: length a multiple of 4, only alphabet characters, '=' only as 1-2 trailing
 * padding, non-zero pad bits refused. Returns a heap buffer with a NUL appended (mc_free);
 * *out_len excludes it. MC_ERR_PROTOCOL on bad input, MC_ERR_NO_MEMORY. */
mc_status_t mc_b64_decode(const char *s, size_t n, char **out_p, size_t *out_len_p);

#endif
