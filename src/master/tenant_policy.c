/* The tenant quota policy file: a hand parser for the YAML subset of tenant_policy.h and its
 * writer. Every refusal names the line and the reason. */
#include "master/tenant_policy.h"

#include "common/alloc.h"
#include "common/buf.h"
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct parser {
    char *err;
    size_t errlen;
    int line;
} parser_t;

static mc_status_t fail(parser_t *p, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(p->err, p->errlen, "line %d: %s", p->line, msg);
    return MC_ERR_INVALID_PARAMS;
}

/* A scalar (plain, "double" or 'single' quoted) into out (cap bytes, NUL-terminated). */
static mc_status_t scalar(parser_t *p, const char *s, char *out, size_t cap)
{
    size_t n = 0;
    if (*s == '"' || *s == '\'') {
        char q = *s++;
        for (;; s++) {
            if (!*s)
                return fail(p, "unterminated quoted value");
            if (*s == q && !(q == '\'' && s[1] == '\'')) {
                s++;
                break;
            }
            char c = *s;
            if (q == '\'' && c == '\'')
                s++; /* '' is one quote */
            else if (q == '"' && c == '\\') {
                if (s[1] != '"' && s[1] != '\\')
                    return fail(p, "only \\\" and \\\\ escapes are supported");
                c = *++s;
            }
            if (n + 1 >= cap)
                return fail(p, "value too long");
            out[n++] = c;
        }
        while (*s == ' ')
            s++;
        if (*s)
            return fail(p, "text after a quoted value");
    } else {
        if (strchr("[]{}&*!|>%@`,", *s) && *s)
            return fail(p, "flow collections, anchors and block scalars are not supported");
        n = strlen(s);
        if (n + 1 >= cap)
            return fail(p, "value too long");
        memcpy(out, s, n);
    }
    out[n] = 0;
    return MC_OK;
}

/* Splits "key: value" (or "key:") in place; *val_p is "" when there is no value. */
static mc_status_t key_value(parser_t *p, char *s, char **key_p, char **val_p)
{
    char *colon = strchr(s, ':');
    if (!colon || (colon[1] && colon[1] != ' '))
        return fail(p, "expected 'key: value'");
    *colon = 0;
    for (char *k = s; *k; k++)
        if (!((*k >= 'a' && *k <= 'z') || *k == '_'))
            return fail(p, "unexpected key '%.40s'", s);
    char *v = colon + 1;
    while (*v == ' ')
        v++;
    *key_p = s;
    *val_p = v;
    return MC_OK;
}

/* upstream's quota: digits and an optional B, KB, MB, GB or TB (powers of 1024) */
static mc_status_t quota_value(parser_t *p, const char *s, uint64_t *q_p)
{
    uint64_t v = 0;
    const char *d = s;
    for (; *d >= '0' && *d <= '9'; d++) {
        if (v > (UINT64_MAX - 9) / 10)
            return fail(p, "quota too large");
        v = v * 10 + (uint64_t)(*d - '0');
    }
    if (d == s)
        return fail(p, "quota must be a positive integer with an optional B, KB, MB, GB or TB");
    static const struct { const char *u; unsigned shift; } units[] = {
        {"", 0}, {"B", 0}, {"KB", 10}, {"MB", 20}, {"GB", 30}, {"TB", 40}};
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(d, units[i].u) != 0)
            continue;
        if (v == 0 || v > (MC_MASTER_TENANT_QUOTA_MAX >> units[i].shift))
            return fail(p, "quota must be 1 byte to 2^63-1 bytes");
        *q_p = v << units[i].shift;
        return MC_OK;
    }
    return fail(p, "unsupported quota unit '%.8s' (B, KB, MB, GB, TB)", d);
}

/* The line in place: indentation counted, comment and trailing blanks cut. NULL-like "" for a
 * blank line; tabs refused. */
static mc_status_t clean_line(parser_t *p, char *s, size_t *indent_p, char **text_p)
{
    if (strchr(s, '\t'))
        return fail(p, "tabs are not allowed");
    size_t ind = 0;
    while (s[ind] == ' ')
        ind++;
    char q = 0;
    for (char *c = s + ind; *c; c++) {
        if (q) {
            if (*c == q)
                q = 0;
        } else if (*c == '"' || *c == '\'') {
            q = *c;
        } else if (*c == '#' && (c == s + ind || c[-1] == ' ')) {
            *c = 0;
            break;
        }
    }
    size_t n = strlen(s);
    while (n > ind && (s[n - 1] == ' ' || s[n - 1] == '\r'))
        s[--n] = 0;
    *indent_p = ind;
    *text_p = s + ind;
    return MC_OK;
}

typedef struct item {
    bool has_name, has_quota;
    int line;
} item_t;

static mc_status_t item_end(parser_t *p, const item_t *it, mc_tenant_policy_t *out)
{
    if (!it->line)
        return MC_OK;
    if (!it->has_name || !it->has_quota) {
        p->line = it->line;
        return fail(p, "a tenant needs both name and quota");
    }
    for (size_t i = 0; i + 1 < out->n; i++)
        if (strcmp(out->t[i].name, out->t[out->n - 1].name) == 0) {
            p->line = it->line;
            return fail(p, "tenant '%s' listed twice", out->t[out->n - 1].name);
        }
    return MC_OK;
}

/* One "key: value" of the current tenant. */
static mc_status_t item_field(parser_t *p, char *s, item_t *it, mc_tenant_policy_t *out)
{
    char *k, *v;
    mc_status_t st = key_value(p, s, &k, &v);
    if (st != MC_OK)
        return st;
    mc_master_tenant_info_t *t = &out->t[out->n - 1];
    char val[128];
    if ((st = scalar(p, v, val, sizeof(val))) != MC_OK)
        return st;
    if (strcmp(k, "name") == 0) {
        if (it->has_name)
            return fail(p, "name given twice");
        const char *why = val[0] ? mc_tenant_invalid(val) : "empty";
        if (why)
            return fail(p, "tenant name '%.70s' is invalid: %s", val, why);
        size_t n = strlen(val); /* a valid name fits: mc_tenant_invalid caps its length */
        if (n >= sizeof(t->name))
            return fail(p, "tenant name longer than %zu bytes", sizeof(t->name) - 1);
        memcpy(t->name, val, n + 1);
        it->has_name = true;
        return MC_OK;
    }
    if (strcmp(k, "quota") == 0) {
        if (it->has_quota)
            return fail(p, "quota given twice");
        it->has_quota = true;
        return quota_value(p, val, &t->quota);
    }
    return fail(p, "unknown tenant field '%.40s' (name, quota)", k);
}

static mc_status_t parse_lines(parser_t *p, char *text, mc_tenant_policy_t *out)
{
    bool has_version = false, has_tenants = false, in_list = false;
    item_t it = {0};
    size_t item_indent = 0, field_indent = 0, cap = 0;
    char *save = NULL;
    mc_status_t st = MC_OK;
    p->line = 0;
    for (char *s = text; s && st == MC_OK; s = save) {
        p->line++;
        save = strchr(s, '\n');
        if (save)
            *save++ = 0;
        size_t ind = 0;
        char *t = s;
        if ((st = clean_line(p, s, &ind, &t)) != MC_OK)
            break;
        if (!*t)
            continue;
        /* in the list: a "- " line starts a tenant (the first sets the items' indentation), a
         * more indented line continues it; anything else ends the list */
        bool dash = t[0] == '-' && (t[1] == ' ' || !t[1]);
        bool new_item = dash && (!it.line || ind == item_indent);
        if (in_list && (new_item || (!dash && it.line && ind > item_indent))) {
            if (dash) {
                if ((st = item_end(p, &it, out)) != MC_OK)
                    break;
                if (out->n >= MC_MASTER_MAX_TENANTS) {
                    st = fail(p, "more than %u tenants", MC_MASTER_MAX_TENANTS);
                    break;
                }
                if (mc_array_reserve(&out->t, &cap, out->n + 1, 16) != MC_OK) {
                    st = MC_ERR_NO_MEMORY;
                    break;
                }
                memset(&out->t[out->n++], 0, sizeof(out->t[0]));
                item_indent = ind;
                it = (item_t){.line = p->line};
                char *f = t + 1;
                while (*f == ' ')
                    f++;
                if (!*f) {
                    st = fail(p, "expected '- name: ...'");
                    break;
                }
                field_indent = ind + (size_t)(f - t);
                st = item_field(p, f, &it, out);
            } else if (ind != field_indent) {
                st = fail(p, "tenant fields must line up");
            } else {
                st = item_field(p, t, &it, out);
            }
            continue;
        }
        if ((st = item_end(p, &it, out)) != MC_OK)
            break;
        it = (item_t){0};
        in_list = false;
        if (ind != 0) {
            st = fail(p, "unexpected indentation");
            break;
        }
        char *k, *v;
        if ((st = key_value(p, t, &k, &v)) != MC_OK)
            break;
        if (strcmp(k, "version") == 0) {
            if (has_version) {
                st = fail(p, "version given twice");
                break;
            }
            has_version = true;
            if (strcmp(v, "1") != 0 && strcmp(v, "\"1\"") != 0)
                st = fail(p, "unsupported version '%.20s' (1)", v);
        } else if (strcmp(k, "tenants") == 0) {
            if (has_tenants) {
                st = fail(p, "tenants given twice");
                break;
            }
            has_tenants = true;
            if (strcmp(v, "[]") == 0)
                continue;
            if (*v) {
                st = fail(p, "tenants must be a block list ('- name: ...' lines) or []");
                break;
            }
            in_list = true;
            item_indent = 0;
        } else {
            st = fail(p, "unknown key '%.40s' (version, tenants)", k);
        }
    }
    if (st == MC_OK)
        st = item_end(p, &it, out);
    if (st == MC_OK && !has_version) {
        snprintf(p->err, p->errlen, "the policy needs 'version: 1'");
        st = MC_ERR_INVALID_PARAMS;
    }
    return st;
}

mc_status_t mc_tenant_policy_parse(const char *text, size_t len, mc_tenant_policy_t *out,
                                   char *err, size_t errlen)
{
    *out = (mc_tenant_policy_t){0};
    parser_t p = {.err = err, .errlen = errlen};
    if (len > MC_TENANT_POLICY_MAX_BYTES || memchr(text, 0, len)) {
        snprintf(err, errlen, "over %u bytes or holds a NUL byte", MC_TENANT_POLICY_MAX_BYTES);
        return MC_ERR_INVALID_PARAMS;
    }
    char *copy = mc_malloc(len + 1);
    if (!copy)
        return MC_ERR_NO_MEMORY;
    memcpy(copy, text, len);
    copy[len] = 0;
    mc_status_t st = parse_lines(&p, copy, out);
    mc_free(copy);
    if (st != MC_OK)
        mc_tenant_policy_free(out);
    return st;
}

mc_status_t mc_tenant_policy_load(const char *path, mc_tenant_policy_t *out, char *err,
                                  size_t errlen)
{
    *out = (mc_tenant_policy_t){0};
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
        return MC_ERR_FILE_OPEN_FAIL;
    }
    char *buf = mc_malloc(MC_TENANT_POLICY_MAX_BYTES + 1);
    size_t n = buf ? fread(buf, 1, MC_TENANT_POLICY_MAX_BYTES + 1, f) : 0;
    bool bad = !buf || ferror(f);
    fclose(f);
    mc_status_t st;
    if (bad) {
        snprintf(err, errlen, "cannot read");
        st = buf ? MC_ERR_FILE_READ_FAIL : MC_ERR_NO_MEMORY;
    } else {
        st = mc_tenant_policy_parse(buf, n, out, err, errlen);
    }
    mc_free(buf);
    return st;
}

mc_status_t mc_tenant_policy_format(const mc_master_tenant_info_t *list, size_t n, mc_buf_t *b)
{
    mc_status_t st = mc_buf_printf(b, "version: 1\n\ntenants:%s\n", n ? "" : " []");
    for (size_t i = 0; i < n && st == MC_OK; i++) {
        if (!list[i].quota)
            continue;
        st = mc_buf_append(b, "  - name: \"", 11);
        for (const char *c = list[i].name; *c && st == MC_OK; c++) /* valid names: no controls */
            st = *c == '"' || *c == '\\' ? mc_buf_printf(b, "\\%c", *c) : mc_buf_append(b, c, 1);
        if (st == MC_OK)
            st = mc_buf_printf(b, "\"\n    quota: %llu\n", (unsigned long long)list[i].quota);
    }
    return st;
}

mc_status_t mc_tenant_policy_save(const char *path, const mc_master_tenant_info_t *list, size_t n)
{
    mc_buf_t b = {0};
    mc_status_t st = mc_tenant_policy_format(list, n, &b);
    char tmp[4096 + 8];
    if (st == MC_OK && snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        st = MC_ERR_FILE_WRITE_FAIL;
    int fd = st == MC_OK ? open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644) : -1;
    if (st == MC_OK && (fd < 0 || write(fd, b.data, b.len) != (ssize_t)b.len || fsync(fd) != 0 ||
                        rename(tmp, path) != 0)) {
        MC_LOG_ERROR("master: cannot write the tenant quota policy %s: %s", path, strerror(errno));
        st = MC_ERR_FILE_WRITE_FAIL;
        if (fd >= 0)
            unlink(tmp);
    }
    if (fd >= 0)
        close(fd);
    mc_buf_free(&b);
    return st;
}

void mc_tenant_policy_free(mc_tenant_policy_t *p)
{
    mc_free(p->t);
    *p = (mc_tenant_policy_t){0};
}
