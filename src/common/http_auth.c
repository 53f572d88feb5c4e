/* HTTP challenge-response authentication (contract in http_auth.h). The nonce MAC and the
 * request MAC both go through auth.c (mc_auth_sign / mc_auth_verify): the nonce key is a
 * keyring made from a random per-process secret.
 *
 * Replay cache: a FIFO ring of accepted (nonce, cnonce) keys (16 B of their SHA-256) with the
 * nonce's expiry, indexed by a chained hash table (int32 links inside the ring). Entries are
 * dropped from the ring's head once expired; a ring full of live entries refuses new requests
 * (MC_HTTP_AUTH_BUSY) rather than forget one that could still be replayed. */
#include "common/http_auth.h"

#include "common/alloc.h"
#include "common/time.h"

#include <openssl/sha.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define NONCE_LABEL "MCHTTP1-N"
#define NONCE_SIGNED 16u /* issue time (8) + random (8) */
#define NONCE_HEX (2 * MC_HTTP_AUTH_NONCE_SIZE)
#define CNONCE_HEX (2 * MC_HTTP_AUTH_CNONCE_SIZE)
#define MAC_HEX (2 * MC_AUTH_MAC_SIZE)
#define METHOD_MAX 16u
#define REPLAY_BUCKETS (2 * MC_HTTP_AUTH_REPLAY_MAX)

typedef struct replay_ent {
    uint8_t key[16];
    uint64_t expire_ms;
    int32_t next; /* next ring index in the same bucket, -1 = end */
} replay_ent_t;

struct mc_http_auth_server {
    const mc_auth_t *auth; /* borrowed; NULL = open */
    mc_auth_t *nonce_key;  /* owned, random per process */
    pthread_mutex_t mu;    /* guards the replay cache */
    replay_ent_t *ring;    /* MC_HTTP_AUTH_REPLAY_MAX entries, oldest at head */
    uint32_t head, n;
    int32_t *buckets; /* REPLAY_BUCKETS heads, -1 = empty */
};

/* ---------------------------------------------------------------- parsing */

static int is_ws(char c) { return c == ' ' || c == '\t'; }

static int is_name(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
}

mc_status_t mc_http_auth_parse(const char *value, mc_http_auth_params_t *p)
{
    memset(p, 0, offsetof(mc_http_auth_params_t, buf));
    p->buf[0] = '\0';
    if (!value || strnlen(value, MC_HTTP_AUTH_HEADER_MAX) >= MC_HTTP_AUTH_HEADER_MAX)
        return MC_ERR_INVALID_PARAMS;
    const char *s = value;
    while (is_ws(*s))
        s++;
    size_t sl = strlen(MC_HTTP_AUTH_SCHEME);
    if (strncasecmp(s, MC_HTTP_AUTH_SCHEME, sl) != 0 || (s[sl] && !is_ws(s[sl])))
        return MC_ERR_INVALID_PARAMS;
    s += sl;
    size_t used = 0; /* bytes of buf taken; value is shorter than buf, so copies always fit */
    for (;;) {
        while (is_ws(*s) || *s == ',')
            s++;
        if (!*s)
            break;
        const char *name = s;
        while (is_name(*s))
            s++;
        size_t nlen = (size_t)(s - name);
        while (is_ws(*s))
            s++;
        if (nlen == 0 || *s != '=')
            return MC_ERR_INVALID_PARAMS;
        s++;
        while (is_ws(*s))
            s++;
        const char *v;
        size_t vlen;
        if (*s == '"') {
            v = ++s;
            while (*s && *s != '"' && *s != '\\' && (unsigned char)*s >= 0x20 && *s != 0x7f)
                s++;
            if (*s != '"')
                return MC_ERR_INVALID_PARAMS; /* unterminated, escape or control character */
            vlen = (size_t)(s - v);
            s++;
        } else {
            v = s;
            while (*s && !is_ws(*s) && *s != ',' && (unsigned char)*s > 0x20 && *s != 0x7f &&
                   *s != '"')
                s++;
            vlen = (size_t)(s - v);
            if (*s && !is_ws(*s) && *s != ',')
                return MC_ERR_INVALID_PARAMS;
        }
        while (is_ws(*s))
            s++;
        if (*s && *s != ',')
            return MC_ERR_INVALID_PARAMS;
        const char **slot = NULL;
        if (nlen == 5 && strncasecmp(name, "nonce", 5) == 0)
            slot = &p->nonce;
        else if (nlen == 6 && strncasecmp(name, "cnonce", 6) == 0)
            slot = &p->cnonce;
        else if (nlen == 3 && strncasecmp(name, "mac", 3) == 0)
            slot = &p->mac;
        else if (nlen == 5 && strncasecmp(name, "stale", 5) == 0)
            slot = &p->stale;
        if (!slot)
            continue; /* unknown parameter: ignored */
        if (*slot)
            return MC_ERR_INVALID_PARAMS; /* given twice */
        memcpy(p->buf + used, v, vlen);
        p->buf[used + vlen] = '\0';
        *slot = p->buf + used;
        used += vlen + 1;
    }
    return MC_OK;
}

mc_status_t mc_http_auth_target(const char *url, char *out, size_t n)
{
    const char *sep = url ? strstr(url, "://") : NULL;
    if (!sep || n == 0)
        return MC_ERR_INVALID_PARAMS;
    const char *t = sep + 3;
    t += strcspn(t, "/?#");
    size_t len = strcspn(t, "#");
    int slash = *t != '/'; /* "http://h:1" or "http://h:1?q": the target starts with "/" */
    if (len + (size_t)slash >= n)
        return MC_ERR_INVALID_PARAMS;
    if (slash)
        out[0] = '/';
    memcpy(out + slash, t, len);
    out[len + (size_t)slash] = '\0';
    return MC_OK;
}

void mc_http_auth_body_hash(const void *body, size_t len, uint8_t out[MC_HTTP_AUTH_BODY_HASH_SIZE])
{
    SHA256(len ? body : (const void *)"", len, out);
}

/* The signed message: METHOD \n TARGET \n nonce-hex \n cnonce-hex \n body-hash-hex into out
 * (n bytes). Length, or 0 when method or target are too long. */
static size_t request_msg(const char *method, const char *target, const uint8_t *nonce,
                          const uint8_t *cnonce, const uint8_t *body_hash, char *out, size_t n)
{
    char nh[NONCE_HEX + 1], ch[CNONCE_HEX + 1], bh[2 * MC_HTTP_AUTH_BODY_HASH_SIZE + 1];
    if (strlen(method) > METHOD_MAX || strlen(target) > MC_HTTP_AUTH_TARGET_MAX)
        return 0;
    mc_auth_hex(nonce, MC_HTTP_AUTH_NONCE_SIZE, nh);
    mc_auth_hex(cnonce, MC_HTTP_AUTH_CNONCE_SIZE, ch);
    mc_auth_hex(body_hash, MC_HTTP_AUTH_BODY_HASH_SIZE, bh);
    int len = snprintf(out, n, "%s\n%s\n%s\n%s\n%s", method, target, nh, ch, bh);
    return len > 0 && (size_t)len < n ? (size_t)len : 0;
}

#define MSG_MAX (METHOD_MAX + MC_HTTP_AUTH_TARGET_MAX + NONCE_HEX + CNONCE_HEX + 64 + 8)

/* ---------------------------------------------------------------- server */

mc_status_t mc_http_auth_server_create(const mc_auth_t *auth, mc_http_auth_server_t **srv_p)
{
    *srv_p = NULL;
    mc_http_auth_server_t *s = MC_NEW(mc_http_auth_server_t);
    if (!s)
        return MC_ERR_NO_MEMORY;
    pthread_mutex_init(&s->mu, NULL);
    s->auth = auth;
    if (auth) {
        uint8_t raw[32];
        char secret[65];
        mc_auth_random(raw, sizeof(raw));
        mc_auth_hex(raw, sizeof(raw), secret);
        s->ring = mc_calloc(MC_HTTP_AUTH_REPLAY_MAX, sizeof(*s->ring));
        s->buckets = mc_malloc(REPLAY_BUCKETS * sizeof(*s->buckets));
        if (!s->ring || !s->buckets ||
            mc_auth_from_secret(secret, NULL, &s->nonce_key) != MC_OK) {
            mc_http_auth_server_free(s);
            return MC_ERR_NO_MEMORY;
        }
        memset(s->buckets, 0xff, REPLAY_BUCKETS * sizeof(*s->buckets)); /* all -1 */
    }
    *srv_p = s;
    return MC_OK;
}

void mc_http_auth_server_free(mc_http_auth_server_t *s)
{
    if (!s)
        return;
    mc_auth_free(s->nonce_key);
    mc_free(s->ring);
    mc_free(s->buckets);
    pthread_mutex_destroy(&s->mu);
    mc_free(s);
}

int mc_http_auth_server_enabled(const mc_http_auth_server_t *s) { return s && s->auth; }

const char *mc_http_auth_verdict_str(mc_http_auth_verdict_t v)
{
    switch (v) {
    case MC_HTTP_AUTH_OK: return "ok";
    case MC_HTTP_AUTH_MISSING: return "credentials required";
    case MC_HTTP_AUTH_MALFORMED: return "malformed Authorization header";
    case MC_HTTP_AUTH_STALE: return "stale nonce";
    case MC_HTTP_AUTH_BAD_NONCE: return "unknown nonce";
    case MC_HTTP_AUTH_BAD_MAC: return "bad credentials";
    case MC_HTTP_AUTH_REPLAY: return "replayed request";
    case MC_HTTP_AUTH_BUSY: return "too many recent requests";
    }
    return "?";
}

void mc_http_auth_challenge_at(mc_http_auth_server_t *s, uint64_t now_ms, int stale,
                               char challenge[MC_HTTP_AUTH_CHALLENGE_MAX])
{
    uint8_t nonce[MC_HTTP_AUTH_NONCE_SIZE];
    for (int i = 0; i < 8; i++)
        nonce[i] = (uint8_t)(now_ms >> (56 - 8 * i));
    mc_auth_random(nonce + 8, NONCE_SIGNED - 8);
    if (!s->nonce_key ||
        mc_auth_sign(s->nonce_key, NONCE_LABEL, nonce, NONCE_SIGNED, nonce + NONCE_SIGNED) != MC_OK)
        memset(nonce + NONCE_SIGNED, 0, MC_AUTH_MAC_SIZE); /* open server: never checked */
    char hex[NONCE_HEX + 1];
    mc_auth_hex(nonce, sizeof(nonce), hex);
    snprintf(challenge, MC_HTTP_AUTH_CHALLENGE_MAX, "%s nonce=\"%s\"%s", MC_HTTP_AUTH_SCHEME, hex,
             stale ? ", stale=true" : "");
}

static void replay_key(const uint8_t *nonce, const uint8_t *cnonce, uint8_t key[16])
{
    uint8_t both[MC_HTTP_AUTH_NONCE_SIZE + MC_HTTP_AUTH_CNONCE_SIZE], h[SHA256_DIGEST_LENGTH];
    memcpy(both, nonce, MC_HTTP_AUTH_NONCE_SIZE);
    memcpy(both + MC_HTTP_AUTH_NONCE_SIZE, cnonce, MC_HTTP_AUTH_CNONCE_SIZE);
    SHA256(both, sizeof(both), h);
    memcpy(key, h, 16);
}

static uint32_t bucket_of(const uint8_t key[16])
{
    uint32_t b;
    memcpy(&b, key, sizeof(b));
    return b % REPLAY_BUCKETS;
}

/* Drops expired entries from the ring's head. s->mu held. */
static void replay_expire(mc_http_auth_server_t *s, uint64_t now_ms)
{
    while (s->n && s->ring[s->head].expire_ms <= now_ms) {
        int32_t idx = (int32_t)s->head;
        int32_t *pp = &s->buckets[bucket_of(s->ring[idx].key)];
        while (*pp != idx && *pp >= 0)
            pp = &s->ring[*pp].next;
        if (*pp == idx)
            *pp = s->ring[idx].next;
        s->head = (s->head + 1) % MC_HTTP_AUTH_REPLAY_MAX;
        s->n--;
    }
}

/* Records key unless present: MC_HTTP_AUTH_OK, _REPLAY, or _BUSY (ring full of live ones). */
static mc_http_auth_verdict_t replay_record(mc_http_auth_server_t *s, uint64_t now_ms,
                                            const uint8_t key[16], uint64_t expire_ms)
{
    mc_http_auth_verdict_t v = MC_HTTP_AUTH_OK;
    pthread_mutex_lock(&s->mu);
    replay_expire(s, now_ms);
    uint32_t b = bucket_of(key);
    for (int32_t i = s->buckets[b]; i >= 0; i = s->ring[i].next)
        if (memcmp(s->ring[i].key, key, 16) == 0)
            v = MC_HTTP_AUTH_REPLAY;
    if (v == MC_HTTP_AUTH_OK && s->n == MC_HTTP_AUTH_REPLAY_MAX)
        v = MC_HTTP_AUTH_BUSY;
    if (v == MC_HTTP_AUTH_OK) {
        int32_t idx = (int32_t)((s->head + s->n) % MC_HTTP_AUTH_REPLAY_MAX);
        memcpy(s->ring[idx].key, key, 16);
        s->ring[idx].expire_ms = expire_ms;
        s->ring[idx].next = s->buckets[b];
        s->buckets[b] = idx;
        s->n++;
    }
    pthread_mutex_unlock(&s->mu);
    return v;
}

mc_http_auth_verdict_t mc_http_auth_check_at(mc_http_auth_server_t *s, uint64_t now_ms,
                                             const char *authz, const char *method,
                                             const char *target, const uint8_t *body_hash,
                                             mc_auth_peer_t *peer, char *challenge)
{
    if (!s->auth) {
        if (peer)
            *peer = (mc_auth_peer_t){.authenticated = 0, .admin = 1};
        return MC_HTTP_AUTH_OK;
    }
    mc_http_auth_verdict_t v = MC_HTTP_AUTH_OK;
    mc_http_auth_params_t p;
    uint8_t nonce[MC_HTTP_AUTH_NONCE_SIZE], cnonce[MC_HTTP_AUTH_CNONCE_SIZE],
        mac[MC_AUTH_MAC_SIZE];
    uint64_t issued = 0;
    if (!authz || !*authz)
        v = MC_HTTP_AUTH_MISSING;
    else if (mc_http_auth_parse(authz, &p) != MC_OK || !p.nonce || !p.cnonce || !p.mac ||
             mc_auth_unhex(p.nonce, nonce, sizeof(nonce)) != MC_OK ||
             mc_auth_unhex(p.cnonce, cnonce, sizeof(cnonce)) != MC_OK ||
             mc_auth_unhex(p.mac, mac, sizeof(mac)) != MC_OK)
        v = MC_HTTP_AUTH_MALFORMED;
    else if (mc_auth_verify(s->nonce_key, NONCE_LABEL, nonce, NONCE_SIGNED, nonce + NONCE_SIGNED,
                            NULL) != MC_OK)
        v = MC_HTTP_AUTH_BAD_NONCE;
    if (v == MC_HTTP_AUTH_OK) {
        for (int i = 0; i < 8; i++)
            issued = issued << 8 | nonce[i];
        if (issued > now_ms || now_ms - issued >= MC_HTTP_AUTH_NONCE_TTL_MS)
            v = MC_HTTP_AUTH_STALE;
    }
    if (v == MC_HTTP_AUTH_OK && body_hash) {
        char msg[MSG_MAX];
        size_t len = request_msg(method, target, nonce, cnonce, body_hash, msg, sizeof(msg));
        if (len == 0)
            v = MC_HTTP_AUTH_MALFORMED;
        else if (mc_auth_verify(s->auth, MC_HTTP_AUTH_LABEL, msg, len, mac, peer) != MC_OK)
            v = MC_HTTP_AUTH_BAD_MAC;
    }
    if (v == MC_HTTP_AUTH_OK && body_hash) {
        uint8_t key[16];
        replay_key(nonce, cnonce, key);
        v = replay_record(s, now_ms, key, issued + MC_HTTP_AUTH_NONCE_TTL_MS);
    }
    if (v != MC_HTTP_AUTH_OK && challenge)
        mc_http_auth_challenge_at(s, now_ms, v == MC_HTTP_AUTH_STALE, challenge);
    return v;
}

mc_http_auth_verdict_t mc_http_auth_check(mc_http_auth_server_t *s, const char *authz,
                                          const char *method, const char *target,
                                          const uint8_t *body_hash, mc_auth_peer_t *peer,
                                          char *challenge)
{
    return mc_http_auth_check_at(s, mc_now_ms(), authz, method, target, body_hash, peer,
                                 challenge);
}

/* ---------------------------------------------------------------- client */

mc_status_t mc_http_auth_authorize(const mc_auth_t *auth, const char *nonce_hex,
                                   const char *method, const char *target, const void *body,
                                   size_t body_len, char *out)
{
    uint8_t nonce[MC_HTTP_AUTH_NONCE_SIZE], cnonce[MC_HTTP_AUTH_CNONCE_SIZE];
    uint8_t bh[MC_HTTP_AUTH_BODY_HASH_SIZE], mac[MC_AUTH_MAC_SIZE];
    if (!auth || mc_auth_unhex(nonce_hex, nonce, sizeof(nonce)) != MC_OK)
        return MC_ERR_INVALID_PARAMS;
    mc_auth_random(cnonce, sizeof(cnonce));
    mc_http_auth_body_hash(body, body_len, bh);
    char msg[MSG_MAX];
    size_t len = request_msg(method, target, nonce, cnonce, bh, msg, sizeof(msg));
    if (len == 0)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = mc_auth_sign(auth, MC_HTTP_AUTH_LABEL, msg, len, mac);
    if (st != MC_OK)
        return st;
    char nh[NONCE_HEX + 1], ch[CNONCE_HEX + 1], mh[MAC_HEX + 1];
    mc_auth_hex(nonce, sizeof(nonce), nh);
    mc_auth_hex(cnonce, sizeof(cnonce), ch);
    mc_auth_hex(mac, sizeof(mac), mh);
    snprintf(out, MC_HTTP_AUTH_HEADER_MAX, "%s nonce=\"%s\", cnonce=\"%s\", mac=\"%s\"",
             MC_HTTP_AUTH_SCHEME, nh, ch, mh);
    return MC_OK;
}

int mc_http_auth_client_nonce(mc_http_auth_client_t *c, char *out)
{
    pthread_mutex_lock(&c->mu);
    int have = c->nonce[0] != '\0';
    memcpy(out, c->nonce, sizeof(c->nonce));
    pthread_mutex_unlock(&c->mu);
    return have;
}

void mc_http_auth_client_forget(mc_http_auth_client_t *c)
{
    pthread_mutex_lock(&c->mu);
    c->nonce[0] = '\0';
    pthread_mutex_unlock(&c->mu);
}

int mc_http_auth_client_learn(mc_http_auth_client_t *c, const char *www_authenticate)
{
    mc_http_auth_params_t p;
    uint8_t nonce[MC_HTTP_AUTH_NONCE_SIZE];
    if (mc_http_auth_parse(www_authenticate, &p) != MC_OK || !p.nonce ||
        mc_auth_unhex(p.nonce, nonce, sizeof(nonce)) != MC_OK)
        return -1;
    pthread_mutex_lock(&c->mu);
    mc_auth_hex(nonce, sizeof(nonce), c->nonce);
    pthread_mutex_unlock(&c->mu);
    return 0;
}
