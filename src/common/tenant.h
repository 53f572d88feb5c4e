/* Tenant names, shared by the store client (checks its own at setup) and the master (checks
 * every request's). Upstream's rules (tenant_id.h) plus a length cap:
 *   - NULL or "" means "default";
 *   - then 1..MC_TENANT_MAX bytes (64, the length a tenant-bound token may name), not
 *     starting with '_', without control characters (bytes < 0x20) or DEL (0x7f).
 * The master keeps keys of tenants other than "default" under an internal key
 * MC_TENANT_MARK tenant MC_TENANT_MARK user_key (docs/internals/master.md, "Tenants"), so
 * user keys must not start with MC_TENANT_MARK. */
#ifndef MC_COMMON_TENANT_H
#define MC_COMMON_TENANT_H

#include "common/auth.h"

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define MC_TENANT_DEFAULT "default"
#define MC_TENANT_MAX MC_AUTH_TENANT_MAX
#define MC_TENANT_MARK '\x01'
/* bytes an internal key adds to the user key at most (two marks and the tenant) */
#define MC_TENANT_KEY_EXTRA (MC_TENANT_MAX + 2u)

/* t, or "default" for NULL / "". */
static inline const char *mc_tenant_or_default(const char *t)
{
    return t && t[0] ? t : MC_TENANT_DEFAULT;
}

/* NULL when t (after mc_tenant_or_default) is a valid tenant name, else why not (a static
 * string for error messages). */
static inline const char *mc_tenant_invalid(const char *t)
{
    t = mc_tenant_or_default(t);
    size_t n = strlen(t);
    if (n > MC_TENANT_MAX)
        return "longer than 64 bytes";
    if (t[0] == '_')
        return "starts with '_' (reserved)";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)t[i] < 0x20 || (unsigned char)t[i] == 0x7f)
            return "contains a control character";
    return NULL;
}

static inline bool mc_tenant_is_default(const char *t)
{
    return strcmp(mc_tenant_or_default(t), MC_TENANT_DEFAULT) == 0;
}

/* A tenant's part of the master's key space. */
typedef struct mc_tenant_scope {
    char prefix[MC_TENANT_KEY_EXTRA + 1]; /* MARK tenant MARK; "" for "default" */
    size_t plen;                          /* 0 for "default" */
} mc_tenant_scope_t;

/* The scope of a valid tenant name (mc_tenant_invalid(t) == NULL). */
static inline void mc_tenant_scope_init(mc_tenant_scope_t *s, const char *t)
{
    t = mc_tenant_or_default(t);
    s->plen = 0;
    s->prefix[0] = 0;
    if (strcmp(t, MC_TENANT_DEFAULT) == 0)
        return;
    size_t n = strlen(t);
    s->prefix[0] = MC_TENANT_MARK;
    memcpy(s->prefix + 1, t, n);
    s->prefix[n + 1] = MC_TENANT_MARK;
    s->prefix[n + 2] = 0;
    s->plen = n + 2;
}

/* The internal key of user key (ukey, ulen) in scope s (NULL = the key as it is) into out
 * (cap bytes): its length, or 0 when the user key is empty, starts with MC_TENANT_MARK
 * (reserved: no user key may look like another tenant's internal key) or does not fit. */
static inline size_t mc_tenant_key(const mc_tenant_scope_t *s, const char *ukey, size_t ulen,
                                   char *out, size_t cap)
{
    size_t plen = s ? s->plen : 0;
    if (ulen == 0 || ukey[0] == MC_TENANT_MARK || plen + ulen > cap)
        return 0;
    memcpy(out, s ? s->prefix : "", plen);
    memcpy(out + plen, ukey, ulen);
    return plen + ulen;
}

/* Whether the internal key (ikey, ilen) belongs to scope s (NULL = every key); when it does,
 * *ukey_p / *ulen_p (optional) are the user's key inside it. */
static inline bool mc_tenant_scope_key(const mc_tenant_scope_t *s, const char *ikey, size_t ilen,
                                       const char **ukey_p, size_t *ulen_p)
{
    size_t skip = 0;
    if (s && s->plen == 0 && ilen && ikey[0] == MC_TENANT_MARK)
        return false; /* another tenant's key */
    if (s && s->plen) {
        if (ilen <= s->plen || memcmp(ikey, s->prefix, s->plen) != 0)
            return false;
        skip = s->plen;
    }
    if (ukey_p)
        *ukey_p = ikey + skip;
    if (ulen_p)
        *ulen_p = ilen - skip;
    return true;
}

/* The tenant of an internal key (*t_p: tlen_p bytes, not NUL-terminated; "default" for keys
 * without the mark). */
static inline void mc_tenant_of_key(const char *ikey, size_t ilen, const char **t_p,
                                    size_t *tlen_p)
{
    const char *end = ilen > 1 && ikey[0] == MC_TENANT_MARK ? memchr(ikey + 1, MC_TENANT_MARK, ilen - 1)
                                                           : NULL;
    *t_p = end ? ikey + 1 : MC_TENANT_DEFAULT;
    *tlen_p = end ? (size_t)(end - ikey - 1) : sizeof(MC_TENANT_DEFAULT) - 1;
}

#endif
