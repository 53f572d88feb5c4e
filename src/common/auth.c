/* Cluster authentication (auth.h): token-file keyring, the connection handshake and HMAC
 * signatures. HMAC-SHA256 and the constant-time compare come from OpenSSL's libcrypto. */
#include "common/auth.h"

#include "common/log.h"
#include "common/net.h"
#include "common/time.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <netdb.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct auth_key {
    uint8_t secret[MC_AUTH_SECRET_MAX];
    size_t len;
    char tenant[MC_AUTH_TENANT_MAX + 1];
    /* HMAC-SHA256 keyed with secret, its key pads hashed once (add_key); every MAC works on a
     * copy (EVP_MAC_CTX_dup only reads it, so threads share it). Owned; freed by key_clear. */
    EVP_MAC_CTX *mac;
} auth_key_t;

struct mc_auth {
    unsigned n;
    auth_key_t keys[MC_AUTH_MAX_KEYS];
};

/* mc_auth_counters (auth.h): one relaxed add per finished half-handshake */
static _Atomic uint64_t n_client_ok, n_client_ok_keyed, n_client_failed;
static _Atomic uint64_t n_server_ok, n_server_ok_keyed, n_server_refused;

static void count(_Atomic uint64_t *c) { atomic_fetch_add_explicit(c, 1, memory_order_relaxed); }

void mc_auth_counters(mc_auth_counters_t *out)
{
    out->client_ok = atomic_load_explicit(&n_client_ok, memory_order_relaxed);
    out->client_ok_keyed = atomic_load_explicit(&n_client_ok_keyed, memory_order_relaxed);
    out->client_failed = atomic_load_explicit(&n_client_failed, memory_order_relaxed);
    out->server_ok = atomic_load_explicit(&n_server_ok, memory_order_relaxed);
    out->server_ok_keyed = atomic_load_explicit(&n_server_ok_keyed, memory_order_relaxed);
    out->server_refused = atomic_load_explicit(&n_server_refused, memory_order_relaxed);
}

#define LABEL_CLIENT "MCAU1-C"
#define LABEL_SERVER "MCAU1-S"

static void put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

void mc_auth_random(uint8_t *out, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = getrandom(out + got, n - got, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            MC_LOG_ERROR("auth: getrandom failed: %s", strerror(errno));
            abort(); /* no safe fallback for nonces */
        }
        got += (size_t)r;
    }
}

/* HMAC-SHA256(key, label | 0 | a | b) into mac. False (mac unusable) when OpenSSL fails, e.g.
 * out of memory: a proof is then not sent and a peer's MAC not taken. One copy of the keyed
 * context and three updates: no buffer is gathered, and the key's pads are not hashed again
 * (OpenSSL 3's one-shot HMAC() also looks the algorithm up on every call: a handshake's pure
 * halves took 7.3 us with it against 4.4 us, mc_auth_bench on a 2 vCPU AMD EPYC VM). */
static bool hmac3(const auth_key_t *k, const char *label, const void *a, size_t alen,
                  const void *b, size_t blen, uint8_t mac[MC_AUTH_MAC_SIZE])
{
    EVP_MAC_CTX *c = EVP_MAC_CTX_dup(k->mac);
    size_t out = 0;
    bool ok = c && EVP_MAC_update(c, (const unsigned char *)label, strlen(label) + 1) &&
              (!alen || EVP_MAC_update(c, a, alen)) && (!blen || EVP_MAC_update(c, b, blen)) &&
              EVP_MAC_final(c, mac, &out, MC_AUTH_MAC_SIZE) && out == MC_AUTH_MAC_SIZE;
    EVP_MAC_CTX_free(c);
    if (!ok)
        mc_auth_random(mac, MC_AUTH_MAC_SIZE); /* never a value a peer could have sent */
    return ok;
}

/* k->mac for k->secret; false when OpenSSL cannot make it. */
static bool key_mac_init(auth_key_t *k)
{
    EVP_MAC *hmac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    k->mac = hmac ? EVP_MAC_CTX_new(hmac) : NULL;
    EVP_MAC_free(hmac); /* the context holds its own reference */
    OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST,
                                                            (char *)"SHA256", 0),
                           OSSL_PARAM_construct_end()};
    if (k->mac && EVP_MAC_init(k->mac, k->secret, k->len, params))
        return true;
    EVP_MAC_CTX_free(k->mac);
    k->mac = NULL;
    return false;
}

/* Frees every key's context and wipes the ring (mc_auth_free, failed loads). */
static void ring_clear(mc_auth_t *a)
{
    for (unsigned i = 0; i < a->n; i++)
        EVP_MAC_CTX_free(a->keys[i].mac);
    OPENSSL_cleanse(a, sizeof(*a));
}

static mc_status_t add_key(mc_auth_t *a, const char *secret, size_t slen, const char *tenant,
                           const char *where, unsigned line)
{
    if (slen < MC_AUTH_SECRET_MIN || slen > MC_AUTH_SECRET_MAX) {
        MC_LOG_ERROR("auth: %s:%u: a secret must be %u..%u bytes (got %zu)", where, line,
               MC_AUTH_SECRET_MIN, MC_AUTH_SECRET_MAX, slen);
        return MC_ERR_INVALID_PARAMS;
    }
    if (a->n >= MC_AUTH_MAX_KEYS) {
        MC_LOG_ERROR("auth: %s: more than %u keys", where, MC_AUTH_MAX_KEYS);
        return MC_ERR_INVALID_PARAMS;
    }
    size_t tlen = tenant ? strlen(tenant) : 0;
    if (tlen > MC_AUTH_TENANT_MAX) {
        MC_LOG_ERROR("auth: %s:%u: tenant id longer than %u bytes", where, line,
               MC_AUTH_TENANT_MAX);
        return MC_ERR_INVALID_PARAMS;
    }
    auth_key_t *k = &a->keys[a->n];
    memcpy(k->secret, secret, slen);
    k->len = slen;
    if (tlen)
        memcpy(k->tenant, tenant, tlen);
    k->tenant[tlen] = '\0';
    if (!key_mac_init(k)) {
        MC_LOG_ERROR("auth: %s:%u: OpenSSL could not set up HMAC-SHA256 for the key", where,
                     line);
        OPENSSL_cleanse(k, sizeof(*k));
        return MC_ERR_NO_MEMORY;
    }
    a->n++;
    return MC_OK;
}

/* One line: "<secret> [tenant=<id>]". Blank and comment lines give MC_OK without a key. */
static mc_status_t parse_line(mc_auth_t *a, char *s, const char *path, unsigned lineno)
{
    char *hash = strchr(s, '#');
    if (hash)
        *hash = '\0';
    char *save = NULL;
    char *secret = strtok_r(s, " \t\r\n", &save);
    if (!secret)
        return MC_OK;
    const char *tenant = NULL;
    for (char *tok; (tok = strtok_r(NULL, " \t\r\n", &save));) {
        if (strncmp(tok, "tenant=", 7) == 0 && tok[7] && !tenant) {
            tenant = tok + 7;
        } else {
            MC_LOG_ERROR("auth: %s:%u: unexpected '%s' (a line is: <secret> [tenant=<id>])",
                   path, lineno, tok);
            return MC_ERR_INVALID_PARAMS;
        }
    }
    for (const char *p = secret; *p; p++) {
        if (!isgraph((unsigned char)*p)) {
            MC_LOG_ERROR("auth: %s:%u: secret has a non-printable byte", path, lineno);
            return MC_ERR_INVALID_PARAMS;
        }
    }
    return add_key(a, secret, strlen(secret), tenant, path, lineno);
}

mc_status_t mc_auth_load(const char *path, mc_auth_t **auth_p)
{
    *auth_p = NULL;
    if (!path || !*path)
        return MC_OK;
    FILE *f = fopen(path, "re");
    if (!f) {
        MC_LOG_ERROR("auth: cannot open token file %s: %s", path, strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && (sb.st_mode & S_IROTH)) {
        MC_LOG_ERROR("auth: token file %s is readable by others (mode %03o); chmod 600 it",
               path, (unsigned)(sb.st_mode & 0777));
        fclose(f);
        return MC_ERR_PERMISSION;
    }
    mc_auth_t *a = calloc(1, sizeof(*a));
    if (!a) {
        fclose(f);
        return MC_ERR_NO_MEMORY;
    }
    char line[1024];
    unsigned lineno = 0;
    mc_status_t st = MC_OK;
    while (st == MC_OK && fgets(line, sizeof(line), f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            MC_LOG_ERROR("auth: %s:%u: line too long", path, lineno);
            st = MC_ERR_INVALID_PARAMS;
            break;
        }
        st = parse_line(a, line, path, lineno);
    }
    fclose(f);
    if (st == MC_OK && a->n == 0) {
        MC_LOG_ERROR("auth: token file %s holds no secret", path);
        st = MC_ERR_INVALID_PARAMS;
    }
    if (st != MC_OK) {
        ring_clear(a);
        free(a);
        return st;
    }
    *auth_p = a;
    return MC_OK;
}

mc_status_t mc_auth_from_secret(const char *secret, const char *tenant, mc_auth_t **auth_p)
{
    *auth_p = NULL;
    if (!secret)
        return MC_ERR_INVALID_PARAMS;
    mc_auth_t *a = calloc(1, sizeof(*a));
    if (!a)
        return MC_ERR_NO_MEMORY;
    mc_status_t st = add_key(a, secret, strlen(secret), tenant, "secret", 1);
    if (st != MC_OK) {
        ring_clear(a);
        free(a);
        return st;
    }
    *auth_p = a;
    return MC_OK;
}

void mc_auth_free(mc_auth_t *auth)
{
    if (!auth)
        return;
    ring_clear(auth);
    free(auth);
}

unsigned mc_auth_key_count(const mc_auth_t *auth) { return auth ? auth->n : 0; }

const char *mc_auth_client_tenant(const mc_auth_t *auth)
{
    return auth && auth->n ? auth->keys[0].tenant : "";
}

static int host_is_loopback(const char *host)
{
    if (!host || !*host)
        return 0;
    if (strcmp(host, "localhost") == 0)
        return 1;
    struct in_addr v4;
    if (inet_pton(AF_INET, host, &v4) == 1)
        return (ntohl(v4.s_addr) >> 24) == 127;
    struct in6_addr v6;
    if (inet_pton(AF_INET6, host, &v6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&v6);
    return 0;
}

void mc_auth_warn_if_open(const char *what, const char *bind_host, const mc_auth_t *auth)
{
    if (auth || host_is_loopback(bind_host))
        return;
    MC_LOG_WARN(
           "%s listens on %s without authentication: anyone who reaches it can read, write and "
           "remove data; set --auth_token_file (MC_AUTH_TOKEN_FILE) or bind to 127.0.0.1 "
           "(see docs/security.md)",
           what, bind_host && *bind_host ? bind_host : "all addresses");
}

/* ---- handshake ---- */

static void write_head(uint8_t *p, uint16_t flags)
{
    put_u32(p, MC_AUTH_MAGIC);
    put_u16(p + 4, MC_AUTH_VERSION);
    put_u16(p + 6, flags);
}

static mc_status_t read_head(const uint8_t *p, uint16_t *flags)
{
    if (get_u32(p) != MC_AUTH_MAGIC || get_u16(p + 4) != MC_AUTH_VERSION)
        return MC_ERR_PROTOCOL;
    *flags = get_u16(p + 6);
    return MC_OK;
}

void mc_auth_server_hello(const mc_auth_t *auth, mc_auth_server_hs_t *hs,
                          uint8_t out[MC_AUTH_HELLO_SIZE])
{
    memset(out, 0, MC_AUTH_HELLO_SIZE);
    mc_auth_random(hs->server_nonce, MC_AUTH_NONCE_SIZE);
    write_head(out, auth ? 1u : 0u);
    memcpy(out + 8, hs->server_nonce, MC_AUTH_NONCE_SIZE);
}

static void write_result(uint8_t out[MC_AUTH_RESULT_SIZE], mc_status_t st, const uint8_t *mac)
{
    memset(out, 0, MC_AUTH_RESULT_SIZE);
    write_head(out, 0);
    put_u32(out + 8, (uint32_t)(int32_t)st);
    if (mac)
        memcpy(out + 16, mac, MC_AUTH_MAC_SIZE);
}

/* Index of the key whose mac over (label, a, b) equals mac, or -1. Tries every key (only the
 * cluster keys with cluster_only). */
static int match_keys(const mc_auth_t *auth, const char *label, const void *a, size_t alen,
                      const void *b, size_t blen, const uint8_t mac[MC_AUTH_MAC_SIZE],
                      int cluster_only)
{
    int found = -1;
    for (unsigned i = 0; i < auth->n; i++) {
        if (cluster_only && auth->keys[i].tenant[0])
            continue;
        uint8_t want[MC_AUTH_MAC_SIZE];
        int eq = hmac3(&auth->keys[i], label, a, alen, b, blen, want) &&
                 CRYPTO_memcmp(want, mac, MC_AUTH_MAC_SIZE) == 0;
        if (eq && found < 0)
            found = (int)i;
    }
    return found;
}

static int match_key(const mc_auth_t *auth, const char *label, const void *a, size_t alen,
                     const void *b, size_t blen, const uint8_t mac[MC_AUTH_MAC_SIZE])
{
    return match_keys(auth, label, a, alen, b, blen, mac, 0);
}

/* The first cluster key of the ring, or NULL. */
static const auth_key_t *cluster_key(const mc_auth_t *auth)
{
    for (unsigned i = 0; auth && i < auth->n; i++)
        if (!auth->keys[i].tenant[0])
            return &auth->keys[i];
    return NULL;
}

static void fill_peer(mc_auth_peer_t *peer, const auth_key_t *k)
{
    if (!peer)
        return;
    memset(peer, 0, sizeof(*peer));
    peer->authenticated = k != NULL;
    peer->admin = !k || !k->tenant[0];
    if (k)
        memcpy(peer->tenant, k->tenant, sizeof(peer->tenant));
}

mc_status_t mc_auth_server_check(const mc_auth_t *auth, const mc_auth_server_hs_t *hs,
                                 const uint8_t in[MC_AUTH_PROOF_SIZE],
                                 uint8_t out[MC_AUTH_RESULT_SIZE], mc_auth_peer_t *peer)
{
    uint16_t flags;
    if (read_head(in, &flags) != MC_OK) {
        count(&n_server_refused);
        write_result(out, MC_ERR_PROTOCOL, NULL);
        return MC_ERR_PROTOCOL;
    }
    const uint8_t *cnonce = in + 8;
    const uint8_t *mac = in + 8 + MC_AUTH_NONCE_SIZE;
    if (!auth) {
        count(&n_server_ok);
        fill_peer(peer, NULL);
        write_result(out, MC_OK, NULL);
        return MC_OK;
    }
    int idx = (flags & 1u) ? match_key(auth, LABEL_CLIENT, hs->server_nonce, MC_AUTH_NONCE_SIZE,
                                        cnonce, MC_AUTH_NONCE_SIZE, mac)
                           : -1;
    if (idx < 0) {
        count(&n_server_refused);
        write_result(out, MC_ERR_AUTH, NULL);
        return MC_ERR_AUTH;
    }
    uint8_t smac[MC_AUTH_MAC_SIZE];
    if (!hmac3(&auth->keys[idx], LABEL_SERVER, cnonce, MC_AUTH_NONCE_SIZE, hs->server_nonce,
               MC_AUTH_NONCE_SIZE, smac)) {
        MC_LOG_WARN("auth: cannot compute this server's proof (out of memory?); refusing");
        count(&n_server_refused);
        write_result(out, MC_ERR_NO_MEMORY, NULL);
        return MC_ERR_NO_MEMORY;
    }
    write_result(out, MC_OK, smac);
    fill_peer(peer, &auth->keys[idx]);
    count(&n_server_ok);
    count(&n_server_ok_keyed);
    return MC_OK;
}

mc_status_t mc_auth_client_proof(const mc_auth_t *auth, const uint8_t hello[MC_AUTH_HELLO_SIZE],
                                 uint8_t client_nonce[MC_AUTH_NONCE_SIZE],
                                 uint8_t out[MC_AUTH_PROOF_SIZE])
{
    uint16_t flags;
    if (read_head(hello, &flags) != MC_OK)
        return MC_ERR_PROTOCOL;
    memset(out, 0, MC_AUTH_PROOF_SIZE);
    mc_auth_random(client_nonce, MC_AUTH_NONCE_SIZE);
    write_head(out, auth ? 1u : 0u);
    memcpy(out + 8, client_nonce, MC_AUTH_NONCE_SIZE);
    if (auth && !hmac3(&auth->keys[0], LABEL_CLIENT, hello + 8, MC_AUTH_NONCE_SIZE,
                       client_nonce, MC_AUTH_NONCE_SIZE, out + 8 + MC_AUTH_NONCE_SIZE))
        return MC_ERR_NO_MEMORY;
    return MC_OK;
}

mc_status_t mc_auth_client_result(const mc_auth_t *auth, const uint8_t hello[MC_AUTH_HELLO_SIZE],
                                  const uint8_t client_nonce[MC_AUTH_NONCE_SIZE],
                                  const uint8_t result[MC_AUTH_RESULT_SIZE])
{
    uint16_t flags;
    if (read_head(result, &flags) != MC_OK) {
        count(&n_client_failed);
        return MC_ERR_PROTOCOL;
    }
    int32_t st = (int32_t)get_u32(result + 8);
    if (st != MC_OK) {
        count(&n_client_failed);
        return st == MC_ERR_PROTOCOL ? MC_ERR_PROTOCOL : MC_ERR_AUTH;
    }
    if (!auth) {
        count(&n_client_ok);
        return MC_OK;
    }
    /* we hold a key: the server must prove the same one */
    uint8_t want[MC_AUTH_MAC_SIZE];
    if (!hmac3(&auth->keys[0], LABEL_SERVER, client_nonce, MC_AUTH_NONCE_SIZE, hello + 8,
               MC_AUTH_NONCE_SIZE, want)) {
        count(&n_client_failed);
        return MC_ERR_NO_MEMORY;
    }
    if (CRYPTO_memcmp(want, result + 16, MC_AUTH_MAC_SIZE) != 0) {
        count(&n_client_failed);
        MC_LOG_WARN("auth: the server did not prove our cluster secret; refusing it");
        return MC_ERR_AUTH;
    }
    count(&n_client_ok);
    count(&n_client_ok_keyed);
    return MC_OK;
}

mc_status_t mc_auth_client_handshake(int fd, const mc_auth_t *auth, uint64_t deadline_ns)
{
    uint8_t hello[MC_AUTH_HELLO_SIZE], proof[MC_AUTH_PROOF_SIZE], result[MC_AUTH_RESULT_SIZE];
    uint8_t cnonce[MC_AUTH_NONCE_SIZE];
    mc_status_t st = mc_net_recv_all(fd, hello, sizeof(hello), deadline_ns);
    if (st != MC_OK)
        return st;
    st = mc_auth_client_proof(auth, hello, cnonce, proof);
    if (st != MC_OK)
        return st;
    st = mc_net_send_all(fd, proof, sizeof(proof), deadline_ns);
    if (st != MC_OK)
        return st;
    st = mc_net_recv_all(fd, result, sizeof(result), deadline_ns);
    if (st != MC_OK)
        return st;
    return mc_auth_client_result(auth, hello, cnonce, result);
}

mc_status_t mc_auth_connect(const char *host, uint16_t port, uint32_t timeout_ms,
                            const mc_auth_t *auth, int *fd_p)
{
    uint64_t deadline = mc_now_ns() + (uint64_t)(timeout_ms ? timeout_ms : 5000) * 1000000ull;
    int fd = -1;
    mc_status_t st = mc_net_connect(host, port, timeout_ms, &fd);
    if (st != MC_OK)
        return st;
    st = mc_auth_client_handshake(fd, auth, deadline);
    if (st != MC_OK) {
        if (st == MC_ERR_AUTH)
            MC_LOG_WARN("auth: %s:%u refused the connection's credentials (%s)", host,
                   port, auth ? "token did not match" : "it requires a token");
        close(fd);
        return st;
    }
    *fd_p = fd;
    return MC_OK;
}

/* ---- signatures ---- */

mc_status_t mc_auth_sign(const mc_auth_t *auth, const char *label, const void *msg, size_t len,
                         uint8_t mac[MC_AUTH_MAC_SIZE])
{
    if (!auth || !auth->n)
        return MC_ERR_INVALID_PARAMS;
    return hmac3(&auth->keys[0], label, msg, len, NULL, 0, mac) ? MC_OK : MC_ERR_NO_MEMORY;
}

mc_status_t mc_auth_verify(const mc_auth_t *auth, const char *label, const void *msg, size_t len,
                           const uint8_t mac[MC_AUTH_MAC_SIZE], mc_auth_peer_t *peer)
{
    if (!auth)
        return MC_ERR_AUTH;
    int idx = match_key(auth, label, msg, len, NULL, 0, mac);
    if (idx < 0)
        return MC_ERR_AUTH;
    fill_peer(peer, &auth->keys[idx]);
    return MC_OK;
}

mc_status_t mc_auth_sign_cluster(const mc_auth_t *auth, const char *label, const void *msg,
                                 size_t len, uint8_t mac[MC_AUTH_MAC_SIZE])
{
    const auth_key_t *k = cluster_key(auth);
    if (!k)
        return MC_ERR_PERMISSION;
    return hmac3(k, label, msg, len, NULL, 0, mac) ? MC_OK : MC_ERR_NO_MEMORY;
}

mc_status_t mc_auth_verify_cluster(const mc_auth_t *auth, const char *label, const void *msg,
                                   size_t len, const uint8_t mac[MC_AUTH_MAC_SIZE])
{
    if (!auth || match_keys(auth, label, msg, len, NULL, 0, mac, 1) < 0)
        return MC_ERR_AUTH;
    return MC_OK;
}

int mc_auth_has_cluster_key(const mc_auth_t *auth) { return cluster_key(auth) != NULL; }

int mc_auth_has_tenant_key(const mc_auth_t *auth)
{
    for (unsigned i = 0; auth && i < auth->n; i++)
        if (auth->keys[i].tenant[0])
            return 1;
    return 0;
}

void mc_auth_hex(const uint8_t *in, size_t n, char *out)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[in[i] >> 4];
        out[2 * i + 1] = hex[in[i] & 15];
    }
    out[2 * n] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* upper case too: one spelling per value, so what verifies re-encodes to itself */
}

mc_status_t mc_auth_unhex(const char *in, uint8_t *out, size_t n)
{
    if (!in || strlen(in) != 2 * n)
        return MC_ERR_INVALID_PARAMS;
    for (size_t i = 0; i < n; i++) {
        int hi = hexval(in[2 * i]), lo = hexval(in[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return MC_ERR_INVALID_PARAMS;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return MC_OK;
}
