/* Cluster authentication: a keyring loaded from a token file, a mutual challenge-response
 * run once at connection setup on every stream port, and HMAC signatures for messages that
 * travel through third parties (HTTP requests, segment descriptors).
 *
 * Token file (--auth_token_file, MC_AUTH_TOKEN_FILE): one secret per line, optionally
 * followed by "tenant=<id>"; '#' starts a comment. A secret is 16..256 printable non-space
 * bytes. A line without tenant= is a cluster token (all tenants, admin operations); a line
 * with it binds whoever proves that secret to that tenant. A server accepts every secret in
 * its file (two lines = rotation); a client proves the FIRST secret of its file. The file
 * must not be readable by others (mode & 004 refused).
 *
 * Handshake (server speaks first; fixed sizes, little-endian, see docs/security.md):
 *   HELLO  S->C 48 B  {u32 magic "MCAU", u16 version 1, u16 flags (bit0 auth required),
 *                      server_nonce[32], 8 B zero}
 *   PROOF  C->S 72 B  {magic, version, u16 flags (bit0 proof present), client_nonce[32],
 *                      mac[32] = HMAC-SHA256(secret, "MCAU1-C" | server_nonce | client_nonce)}
 *   RESULT S->C 48 B  {magic, version, u16 0, i32 status, u32 0,
 *                      server_mac[32] = HMAC-SHA256(secret, "MCAU1-S" | client_nonce | server_nonce)
 *                      or zeros when the server has no keyring}
 * A server without a keyring accepts everyone (flags 0). A client with a keyring refuses a
 * server that cannot prove the same secret (so a forged address cannot swallow writes); a
 * client without one refuses nothing. The secret never crosses the wire; macs are compared
 * in constant time against every key of the ring.
 *
 * Thread-safety: a loaded mc_auth_t is immutable and may be shared by any number of threads.
 */
#ifndef MC_COMMON_AUTH_H
#define MC_COMMON_AUTH_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

#define MC_AUTH_MAGIC 0x5541434Du /* "MCAU" */
#define MC_AUTH_VERSION 1u
#define MC_AUTH_NONCE_SIZE 32u
#define MC_AUTH_MAC_SIZE 32u
#define MC_AUTH_HELLO_SIZE 48u
#define MC_AUTH_PROOF_SIZE 72u
#define MC_AUTH_RESULT_SIZE 48u
#define MC_AUTH_SECRET_MIN 16u
#define MC_AUTH_SECRET_MAX 256u
#define MC_AUTH_MAX_KEYS 64u
#define MC_AUTH_TENANT_MAX 64u
#define MC_AUTH_HANDSHAKE_TIMEOUT_MS 5000u /* servers close a connection that has not proved by then */

typedef struct mc_auth mc_auth_t;

/* Who is on the other end of a connection after the handshake. */
typedef struct mc_auth_peer {
    int authenticated;                  /* proved a secret of the server's ring */
    int admin;                          /* cluster token (or server without a ring) */
    char tenant[MC_AUTH_TENANT_MAX + 1]; /* "" unless the token is tenant-bound */
} mc_auth_peer_t;

/* Loads a token file. path NULL or "" -> MC_OK with *auth_p = NULL (authentication off).
 * Errors (logged with the file name and line): MC_ERR_FILE_OPEN_FAIL, MC_ERR_PERMISSION
 * (readable by others), MC_ERR_INVALID_PARAMS (bad line, short secret, no secret). */
MC_API mc_status_t mc_auth_load(const char *path, mc_auth_t **auth_p);
/* Keyring from one in-memory secret (tests, tools). */
MC_API mc_status_t mc_auth_from_secret(const char *secret, const char *tenant,
                                       mc_auth_t **auth_p);
MC_API void mc_auth_free(mc_auth_t *auth);
/* Number of keys; tenant of the key a client proves (first key; "" when cluster). */
unsigned mc_auth_key_count(const mc_auth_t *auth);
const char *mc_auth_client_tenant(const mc_auth_t *auth);

/* Logs a warning when a listener on a non-loopback address runs without a keyring. */
void mc_auth_warn_if_open(const char *what, const char *bind_host, const mc_auth_t *auth);

/* ---- server side: pure functions, the transport does the I/O ---- */
typedef struct mc_auth_server_hs {
    uint8_t server_nonce[MC_AUTH_NONCE_SIZE];
} mc_auth_server_hs_t;

/* Fresh nonce into hs and the HELLO to send. auth may be NULL (no authentication). */
void mc_auth_server_hello(const mc_auth_t *auth, mc_auth_server_hs_t *hs,
                          uint8_t out[MC_AUTH_HELLO_SIZE]);
/* Checks a PROOF; always fills the RESULT to send (its status tells the client why).
 * MC_OK (peer filled in), MC_ERR_PROTOCOL (not a PROOF), MC_ERR_AUTH (no or wrong proof),
 * MC_ERR_NO_MEMORY (our own proof could not be computed). On failure the caller sends RESULT
 * and closes the connection. */
mc_status_t mc_auth_server_check(const mc_auth_t *auth, const mc_auth_server_hs_t *hs,
                                 const uint8_t in[MC_AUTH_PROOF_SIZE],
                                 uint8_t out[MC_AUTH_RESULT_SIZE], mc_auth_peer_t *peer);

/* ---- client side ---- */
/* Runs the client half on a connected blocking socket until deadline_ns (CLOCK_MONOTONIC,
 * 0 = none). MC_OK; MC_ERR_AUTH (server refused our proof, or could not prove itself
 * while we hold a keyring); MC_ERR_PROTOCOL (not a Mooncake-C server, or version mismatch);
 * MC_ERR_CONNECTION / MC_ERR_TIMEOUT; MC_ERR_NO_MEMORY (OpenSSL could not compute a MAC). */
mc_status_t mc_auth_client_handshake(int fd, const mc_auth_t *auth, uint64_t deadline_ns);
/* mc_net_connect + mc_auth_client_handshake within timeout_ms; closes the socket on error. */
mc_status_t mc_auth_connect(const char *host, uint16_t port, uint32_t timeout_ms,
                            const mc_auth_t *auth, int *fd_p);

/* Pure halves of the client side, for fuzzing and non-blocking callers. */
mc_status_t mc_auth_client_proof(const mc_auth_t *auth, const uint8_t hello[MC_AUTH_HELLO_SIZE],
                                 uint8_t client_nonce[MC_AUTH_NONCE_SIZE],
                                 uint8_t out[MC_AUTH_PROOF_SIZE]);
mc_status_t mc_auth_client_result(const mc_auth_t *auth, const uint8_t hello[MC_AUTH_HELLO_SIZE],
                                  const uint8_t client_nonce[MC_AUTH_NONCE_SIZE],
                                  const uint8_t result[MC_AUTH_RESULT_SIZE]);

/* ---- counters (process-wide, every mc_auth_t; relaxed atomics, one add per handshake) ----
 * client_ok: client halves that completed (mc_auth_client_result MC_OK, so also every
 * mc_auth_client_handshake / mc_auth_connect that succeeded); client_failed: ones that ended
 * with a RESULT refusing us or a server that could not prove our key. server_ok: PROOFs
 * accepted by mc_auth_server_check; server_refused: PROOFs it refused. Handshakes run once
 * per connection, so these count connections set up: benchmarks and tests use them to show
 * what a workload pays for authentication (docs/benchmarks.md, "Authentication"). Keyed:
 * the ones of them that ran the HMAC (a keyring on that side); the rest only exchanged the
 * fixed-size frames. Monotonic; never reset. */
typedef struct mc_auth_counters {
    uint64_t client_ok, client_ok_keyed, client_failed;
    uint64_t server_ok, server_ok_keyed, server_refused;
} mc_auth_counters_t;
void mc_auth_counters(mc_auth_counters_t *out);

/* ---- message signatures (HTTP requests, descriptors) ---- */
/* mac = HMAC-SHA256(client key, label | 0 | msg). MC_ERR_INVALID_PARAMS without a ring,
 * MC_ERR_NO_MEMORY when OpenSSL fails (mac then holds random bytes). */
mc_status_t mc_auth_sign(const mc_auth_t *auth, const char *label, const void *msg, size_t len,
                         uint8_t mac[MC_AUTH_MAC_SIZE]);
/* MC_OK if mac matches any key of the ring (peer filled in if not NULL), else
 * MC_ERR_AUTH. Every key is tried (constant time in which key matched). */
mc_status_t mc_auth_verify(const mc_auth_t *auth, const char *label, const void *msg, size_t len,
                           const uint8_t mac[MC_AUTH_MAC_SIZE], mc_auth_peer_t *peer);

/* The same, with cluster keys only (lines without tenant=): what vouches for shared
 * infrastructure (segment descriptors), which a tenant token must not be able to forge.
 * sign: MC_ERR_PERMISSION when the ring holds no cluster key; verify: MC_ERR_AUTH unless a
 * cluster key made mac. mc_auth_has_cluster_key: whether the ring holds one (NULL: no);
 * mc_auth_has_tenant_key: whether it holds a tenant line (so tenant-bound peers can exist). */
mc_status_t mc_auth_sign_cluster(const mc_auth_t *auth, const char *label, const void *msg,
                                 size_t len, uint8_t mac[MC_AUTH_MAC_SIZE]);
mc_status_t mc_auth_verify_cluster(const mc_auth_t *auth, const char *label, const void *msg,
                                   size_t len, const uint8_t mac[MC_AUTH_MAC_SIZE]);
int mc_auth_has_cluster_key(const mc_auth_t *auth);
int mc_auth_has_tenant_key(const mc_auth_t *auth);

/* Lower-case hex of n bytes into out (2n+1 bytes); parse back exactly 2n lower-case hex
 * digits (anything else, upper case included, MC_ERR_INVALID_PARAMS). */
void mc_auth_hex(const uint8_t *in, size_t n, char *out);
mc_status_t mc_auth_unhex(const char *in, uint8_t *out, size_t n);
/* n random bytes from the kernel. */
void mc_auth_random(uint8_t *out, size_t n);

#endif
