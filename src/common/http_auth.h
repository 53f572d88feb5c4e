/* HTTP challenge-response authentication with the cluster keyring (auth.h); the secret never
 * crosses the wire. Pure functions over strings: the HTTP servers (libmicrohttpd) and clients
 * (libcurl) do the I/O and call these.
 *
 *   1. A request without valid credentials is answered
 *        401, WWW-Authenticate: Mooncake nonce="<96 hex>"[, stale=true]
 *      The nonce is stateless and self-verifying: 8 B issue time (ms, CLOCK_MONOTONIC, big
 *      endian) | 8 B random | 32 B HMAC-SHA256 of both under a per-process random key. It is
 *      valid for MC_HTTP_AUTH_NONCE_TTL_MS after issue, in the process that issued it only.
 *   2. The client answers with
 *        Authorization: Mooncake nonce="<the nonce>", cnonce="<32 hex, fresh per request>",
 *                       mac="<64 hex>"
 *      mac = HMAC-SHA256(secret, "MCHTTP1" | 0 | METHOD "\n" TARGET "\n" nonce "\n" cnonce "\n"
 *                        hex(SHA-256(body)))
 *      where TARGET is the request target as sent (path and query, e.g. /metadata?key=a%2Fb), so
 *      a captured header is good for no other method, path, query or body.
 *   3. The server refuses a (nonce, cnonce) pair it has accepted before (replay cache of at most
 *      MC_HTTP_AUTH_REPLAY_MAX entries, each kept for the nonce lifetime) and expired nonces
 *      (then the challenge carries stale=true). The client keeps its nonce and reuses it with
 *      fresh cnonces until refused: one extra round trip per nonce lifetime, not per request.
 *
 * Thread-safety: a server context may be shared by any number of threads (the replay cache has
 * its own mutex); a client cache likewise.
 *
 * The MC_API functions are exported from libmooncake.so for the Python package (mooncake._core
 * binds them for the HTTP servers written in Python); they are not part of the public C API
 * in include/mooncake/.
 */
#ifndef MC_COMMON_HTTP_AUTH_H
#define MC_COMMON_HTTP_AUTH_H

#include "common/auth.h"

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define MC_HTTP_AUTH_SCHEME "Mooncake"
#define MC_HTTP_AUTH_LABEL "MCHTTP1"
#define MC_HTTP_AUTH_NONCE_SIZE 48u               /* bytes (96 hex characters) */
#define MC_HTTP_AUTH_CNONCE_SIZE 16u              /* bytes (32 hex characters) */
#define MC_HTTP_AUTH_NONCE_TTL_MS 60000u
#define MC_HTTP_AUTH_REPLAY_MAX 65536u            /* accepted (nonce, cnonce) pairs remembered */
#define MC_HTTP_AUTH_HEADER_MAX 512u              /* longest Authorization we parse */
#define MC_HTTP_AUTH_CHALLENGE_MAX 160u           /* WWW-Authenticate value incl. NUL */
#define MC_HTTP_AUTH_TARGET_MAX 8192u             /* longest request target signed */
#define MC_HTTP_AUTH_BODY_HASH_SIZE 32u           /* SHA-256 */

/* ---- parsing ---- */

/* The parameters of a "Mooncake k="v", ..." header value (WWW-Authenticate or Authorization).
 * Values point into buf (NUL-terminated copies); absent parameters are NULL. */
typedef struct mc_http_auth_params {
    const char *nonce, *cnonce, *mac, *stale;
    char buf[MC_HTTP_AUTH_HEADER_MAX];
} mc_http_auth_params_t;

/* Parses a header value: the scheme "Mooncake" (case-insensitive), then comma-separated
 * name=value pairs (value quoted without escapes, or a token), optional spaces/tabs around
 * them. Unknown names are ignored; a name given twice, a missing '=', an unterminated quote, a
 * control character or a value longer than MC_HTTP_AUTH_HEADER_MAX is refused:
 * MC_ERR_INVALID_PARAMS. */
MC_API mc_status_t mc_http_auth_parse(const char *value, mc_http_auth_params_t *p);

/* The request target (path and query, no fragment) of an absolute http(s) URL, e.g.
 * "http://h:1/a?b#c" -> "/a?b" written into out (n bytes). "/" when the URL has no path.
 * MC_ERR_INVALID_PARAMS for a URL without "scheme://" or a target that does not fit. */
mc_status_t mc_http_auth_target(const char *url, char *out, size_t n);

/* SHA-256 of a request body (len 0: of the empty string). */
MC_API void mc_http_auth_body_hash(const void *body, size_t len,
                                   uint8_t out[MC_HTTP_AUTH_BODY_HASH_SIZE]);

/* ---- server side ---- */

typedef struct mc_http_auth_server mc_http_auth_server_t;

/* A server context over keyring `auth` (borrowed, must outlive it). auth NULL: the context
 * accepts every request (mc_http_auth_check always MC_OK), so callers need no branch. */
MC_API mc_status_t mc_http_auth_server_create(const mc_auth_t *auth,
                                              mc_http_auth_server_t **srv_p);
MC_API void mc_http_auth_server_free(mc_http_auth_server_t *srv);
/* True when the context checks credentials (it has a keyring). NULL -> false. */
MC_API int mc_http_auth_server_enabled(const mc_http_auth_server_t *srv);

/* Why a request was refused (all are answered 401 with a fresh challenge). */
typedef enum mc_http_auth_verdict {
    MC_HTTP_AUTH_OK = 0,
    MC_HTTP_AUTH_MISSING,  /* no Authorization header */
    MC_HTTP_AUTH_MALFORMED, /* not a Mooncake header, bad hex, missing parameter */
    MC_HTTP_AUTH_STALE,    /* nonce expired (client retries with the new one) */
    MC_HTTP_AUTH_BAD_NONCE, /* not a nonce of this process */
    MC_HTTP_AUTH_BAD_MAC,  /* wrong secret, or signed for another request or body */
    MC_HTTP_AUTH_REPLAY,   /* (nonce, cnonce) already used */
    MC_HTTP_AUTH_BUSY,     /* replay cache full of live entries (answered 503) */
} mc_http_auth_verdict_t;

/* Short English reason for a verdict ("stale nonce", ...). */
MC_API const char *mc_http_auth_verdict_str(mc_http_auth_verdict_t v);

/* Checks one request at now_ms (CLOCK_MONOTONIC ms; mc_http_auth_check passes mc_now_ms()).
 * authz: the Authorization header value or NULL; method, target: as received; body_hash: the
 * SHA-256 of the body, or NULL for a headers-only pre-check (parse and nonce only, nothing
 * recorded: lets a server refuse an anonymous upload before buffering it). On success with a
 * body hash the pair is recorded against replay and *peer (if not NULL) tells who signed.
 * On any refusal `challenge` (MC_HTTP_AUTH_CHALLENGE_MAX bytes) receives the WWW-Authenticate
 * value to send with the 401. */
mc_http_auth_verdict_t mc_http_auth_check_at(mc_http_auth_server_t *srv, uint64_t now_ms,
                                             const char *authz, const char *method,
                                             const char *target, const uint8_t *body_hash,
                                             mc_auth_peer_t *peer, char *challenge);
MC_API mc_http_auth_verdict_t mc_http_auth_check(mc_http_auth_server_t *srv,
                                                 const char *authz, const char *method,
                                                 const char *target, const uint8_t *body_hash,
                                                 mc_auth_peer_t *peer, char *challenge);

/* A fresh challenge value ("Mooncake nonce=\"...\"", with ", stale=true" if stale). */
void mc_http_auth_challenge_at(mc_http_auth_server_t *srv, uint64_t now_ms, int stale,
                               char challenge[MC_HTTP_AUTH_CHALLENGE_MAX]);

/* ---- client side ---- */

/* The Authorization value for one request signed with the client key of `auth` over `nonce`
 * (hex, from a challenge) with a fresh random cnonce. out: MC_HTTP_AUTH_HEADER_MAX bytes.
 * MC_ERR_INVALID_PARAMS without a keyring or with a nonce that is not 96 hex characters. */
MC_API mc_status_t mc_http_auth_authorize(const mc_auth_t *auth, const char *nonce,
                                          const char *method, const char *target,
                                          const void *body, size_t body_len, char *out);

/* A client's cached nonce (one per server it talks to, or one per process: a nonce of another
 * server is refused once and replaced). Zero-initialise with MC_HTTP_AUTH_CLIENT_INIT. */
typedef struct mc_http_auth_client {
    pthread_mutex_t mu;
    char nonce[2 * MC_HTTP_AUTH_NONCE_SIZE + 1]; /* "" = none yet */
} mc_http_auth_client_t;
#define MC_HTTP_AUTH_CLIENT_INIT {PTHREAD_MUTEX_INITIALIZER, ""}

/* Copies the cached nonce into out (2*MC_HTTP_AUTH_NONCE_SIZE+1 bytes); 0 if none. */
int mc_http_auth_client_nonce(mc_http_auth_client_t *c, char *out);
/* Takes the nonce of a WWW-Authenticate value into the cache. 0, or -1 if the value is not a
 * Mooncake challenge. */
int mc_http_auth_client_learn(mc_http_auth_client_t *c, const char *www_authenticate);
/* Drops the cached nonce (the next request learns a fresh one). */
void mc_http_auth_client_forget(mc_http_auth_client_t *c);

#endif
