/* Transfer-engine tuning from the environment (contract and variable table in te_env.h). */
#include "te_env.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { V_UINT, V_SWITCH, V_HUGEPAGES, V_BUSY_POLL, V_USER, V_SECRET, V_PATH } var_kind_t;

typedef struct te_env_var {
    const char *name;
    size_t off;        /* field in mc_te_config_t (uint32_t, int32_t for the signed ones,
                          const char * for V_USER and V_SECRET) */
    var_kind_t kind;
    uint64_t lo, hi;   /* accepted numbers (V_UINT, V_BUSY_POLL) */
    const char *what;  /* "a number of milliseconds", "a size in bytes", ... */
} te_env_var_t;

#define FIELD(f) offsetof(mc_te_config_t, f)
#define TE_ENV_STR_MAX 1024 /* bytes of a user name or password */

static const te_env_var_t g_vars[] = {
    {"MC_TE_TIMEOUT_MS", FIELD(transfer_timeout_ms), V_UINT, 1, UINT32_MAX,
     "a number of milliseconds"},
    {"MC_TE_TCP_CONNECTIONS", FIELD(tcp_connections), V_UINT, 1, 64, "a number of connections"},
    {"MC_TE_WORKERS", FIELD(worker_threads), V_UINT, 1, 32, "a number of threads"},
    {"MC_TE_SLICE_SIZE", FIELD(slice_size), V_UINT, 4096, 64u << 20, "a size in bytes"},
    {"MC_FORCE_TCP", FIELD(force_tcp), V_SWITCH, 0, 1, "0 or 1"},
    {"MC_TE_HUGEPAGES", FIELD(hugepages), V_HUGEPAGES, 0, 1, "0 or 1"},
    {"MC_TE_TCP_STRIPE", FIELD(tcp_stripe), V_UINT, 1, 64, "a number of connections"},
    {"MC_TE_TCP_BUF", FIELD(tcp_socket_buf), V_UINT, 4096, 1u << 30, "a size in bytes"},
    {"MC_BUSY_POLL_US", FIELD(busy_poll_us), V_BUSY_POLL, 0, 10000, "a number of microseconds"},
    {"MC_META_TIMEOUT_MS", FIELD(metadata_timeout_ms), V_UINT, 100, 600000,
     "a number of milliseconds"},
    {"MC_REDIS_USERNAME", FIELD(redis_username), V_USER, 1, TE_ENV_STR_MAX, "a Redis user name"},
    {"MC_REDIS_PASSWORD", FIELD(redis_password), V_SECRET, 1, TE_ENV_STR_MAX, "a Redis password"},
    {"MC_REDIS_DB_INDEX", FIELD(redis_db_index), V_UINT, 0, 255, "a Redis database number"},
    {"MC_AUTH_TOKEN_FILE", FIELD(auth_token_file), V_PATH, 1, 4096, "a file path"},
    {"MC_TE_IDLE_TIMEOUT_S", FIELD(tcp_idle_timeout_s), V_UINT, 1, 86400, "a number of seconds"},
    {"MC_TE_MAX_SERVER_CONNS", FIELD(tcp_max_server_conns), V_UINT, 16, 65536,
     "a number of connections"},
};

/* Decimal digits only (no sign, no blanks, no unit), at most UINT64_MAX. */
static int parse_u64(const char *s, uint64_t *v_p)
{
    if (!*s)
        return -1;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9')
            return -1;
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *v_p = v;
    return 0;
}

/* A user name (no blanks), password or path: 1..hi bytes, no control characters. The
 * message never shows a password. 0 ok, -1 (message in err) if refused. */
static int string_ok(const te_env_var_t *v, const char *s, char *err, size_t errlen)
{
    size_t n = strlen(s);
    bool bad = n > v->hi;
    for (const unsigned char *p = (const unsigned char *)s; *p && !bad; p++)
        bad = *p < 0x20 || *p == 0x7f || (v->kind == V_USER && *p == ' ');
    if (!bad)
        return 0;
    if (errlen) {
        if (v->kind == V_SECRET)
            snprintf(err, errlen, "%s must be %s of at most %llu bytes without control "
                     "characters (value not shown)", v->name, v->what, (unsigned long long)v->hi);
        else
            snprintf(err, errlen, "%s must be %s of at most %llu bytes without blanks or "
                     "control characters, got '%.64s'", v->name, v->what,
                     (unsigned long long)v->hi, s);
    }
    return -1;
}

/* The field value for text s of variable v; -1 (message in err) if s is not accepted. */
static int var_value(const te_env_var_t *v, const char *s, int64_t *val_p, char *err,
                     size_t errlen)
{
    uint64_t n;
    if (parse_u64(s, &n) != 0 || n < v->lo || n > v->hi) {
        if (errlen) {
            if (v->kind == V_SWITCH || v->kind == V_HUGEPAGES)
                snprintf(err, errlen, "%s must be %s, got '%s'", v->name, v->what, s);
            else
                snprintf(err, errlen, "%s must be %s between %llu and %llu, got '%s'", v->name,
                         v->what, (unsigned long long)v->lo, (unsigned long long)v->hi, s);
        }
        return -1;
    }
    switch (v->kind) {
    case V_HUGEPAGES:
        *val_p = n == 0 ? -1 : 1; /* 0: never; 1: when the host has them (the default) */
        break;
    case V_BUSY_POLL:
        *val_p = n == 0 ? -1 : (int64_t)n; /* 0 means never spin; the field's 0 is 50 µs */
        break;
    default:
        *val_p = (int64_t)n;
        break;
    }
    return 0;
}

mc_status_t mc_tool_te_config_from_env(mc_te_config_t *cfg, char *err, size_t errlen)
{
    if (errlen)
        err[0] = '\0';
    if (!cfg)
        return MC_ERR_INVALID_PARAMS;
    mc_te_config_t out = *cfg; /* cfg changes only when every variable is accepted */
    for (size_t i = 0; i < sizeof(g_vars) / sizeof(g_vars[0]); i++) {
        const te_env_var_t *v = &g_vars[i];
        const char *s = getenv(v->name);
        if (!s || !*s)
            continue;
        void *field = (char *)&out + v->off;
        if (v->kind == V_USER || v->kind == V_SECRET || v->kind == V_PATH) {
            if (string_ok(v, s, err, errlen) != 0)
                return MC_ERR_INVALID_PARAMS;
            memcpy(field, &s, sizeof(s)); /* the environment's string: lives as long */
            continue;
        }
        int64_t val;
        if (var_value(v, s, &val, err, errlen) != 0)
            return MC_ERR_INVALID_PARAMS;
        if (v->kind == V_HUGEPAGES || v->kind == V_BUSY_POLL) {
            int32_t x = (int32_t)val;
            memcpy(field, &x, sizeof(x));
        } else {
            uint32_t x = (uint32_t)val;
            memcpy(field, &x, sizeof(x));
        }
    }
    *cfg = out;
    return MC_OK;
}
