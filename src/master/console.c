/* The operator console (contract in console.h): embedded assets, browser sessions, and the
 * event stream's JSON. Sessions and codes are kept in memory only (a restarted master forgets
 * them: the operator mints a new link); the stored ids are compared in constant time. */
#include "master/console.h"

#include "common/alloc.h"
#include "common/auth.h"
#include "common/buf.h"
#include "common/embedded.h"
#include "common/time.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

extern const mc_embedded_asset_t mc_console_assets[]; /* generated: console_assets.c */

typedef struct {
    char id[65];      /* 64 hex digits; "" = free slot */
    uint64_t expires; /* mc_now_ms() deadline */
} ticket_t;

struct mc_console {
    pthread_mutex_t mu;
    ticket_t codes[MC_CONSOLE_MAX_CODES];
    ticket_t sessions[MC_CONSOLE_MAX_SESSIONS];
};

mc_console_t *mc_console_create(void)
{
    mc_console_t *c = MC_NEW(mc_console_t);
    if (c)
        pthread_mutex_init(&c->mu, NULL);
    return c;
}

void mc_console_free(mc_console_t *c)
{
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    mc_free(c);
}

const char *mc_console_asset(const char *url, size_t *len_p, const char **type_p)
{
    const char *name;
    if (!strcmp(url, "/console") || !strcmp(url, "/console/"))
        name = "index.html";
    else if (!strncmp(url, "/console/", 9))
        name = url + 9;
    else
        return NULL;
    for (const mc_embedded_asset_t *a = mc_console_assets; a->name; a++) {
        if (strcmp(a->name, name) != 0)
            continue;
        const char *dot = strrchr(name, '.');
        *type_p = !strcmp(dot, ".html") ? "text/html; charset=utf-8"
                  : !strcmp(dot, ".js") ? "text/javascript; charset=utf-8"
                                        : "text/css; charset=utf-8";
        *len_p = a->len;
        return (const char *)a->data;
    }
    return NULL;
}

/* constant-time comparison of two 64-hex ids */
static bool id_eq(const char *a, const char *b)
{
    unsigned char d = 0;
    for (size_t i = 0; i < 64; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static void new_id(char out[65])
{
    uint8_t r[32];
    mc_auth_random(r, sizeof(r));
    for (size_t i = 0; i < sizeof(r); i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
}

/* Stores a fresh id in the table: a free or expired slot, else the one expiring first. */
static void ticket_add(ticket_t *t, size_t n, uint64_t ttl_ms, char id[65])
{
    uint64_t now = mc_now_ms();
    size_t pick = 0;
    for (size_t i = 0; i < n; i++) {
        if (!t[i].id[0] || t[i].expires <= now) {
            pick = i;
            break;
        }
        if (t[i].expires < t[pick].expires)
            pick = i;
    }
    new_id(id);
    memcpy(t[pick].id, id, 65);
    t[pick].expires = now + ttl_ms;
}

/* The live slot holding id (64 hex digits), or NULL. */
static ticket_t *ticket_find(ticket_t *t, size_t n, const char *id)
{
    if (!id || strlen(id) != 64)
        return NULL;
    uint64_t now = mc_now_ms();
    for (size_t i = 0; i < n; i++)
        if (t[i].id[0] && t[i].expires > now && id_eq(t[i].id, id))
            return &t[i];
    return NULL;
}

bool mc_console_session_ok(mc_console_t *c, struct MHD_Connection *conn)
{
    const char *sid = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, MC_CONSOLE_COOKIE);
    pthread_mutex_lock(&c->mu);
    bool ok = ticket_find(c->sessions, MC_CONSOLE_MAX_SESSIONS, sid) != NULL;
    pthread_mutex_unlock(&c->mu);
    return ok;
}

void mc_console_new_code(mc_console_t *c, char code[65])
{
    pthread_mutex_lock(&c->mu);
    ticket_add(c->codes, MC_CONSOLE_MAX_CODES, MC_CONSOLE_CODE_TTL_MS, code);
    pthread_mutex_unlock(&c->mu);
}

bool mc_console_login(mc_console_t *c, const char *code, char sid[65])
{
    pthread_mutex_lock(&c->mu);
    ticket_t *t = ticket_find(c->codes, MC_CONSOLE_MAX_CODES, code);
    if (t) {
        memset(t, 0, sizeof(*t)); /* one use */
        ticket_add(c->sessions, MC_CONSOLE_MAX_SESSIONS, MC_CONSOLE_SESSION_TTL_MS, sid);
    }
    pthread_mutex_unlock(&c->mu);
    return t != NULL;
}

/* A response with a static (persistent) body; extra header pair (name, value) may be NULL. */
static enum MHD_Result answer(struct MHD_Connection *c, unsigned code, const char *type,
                              const char *body, size_t len, const char *hname,
                              const char *hval)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (type)
        MHD_add_response_header(r, "Content-Type", type);
    if (hname)
        MHD_add_response_header(r, hname, hval);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    enum MHD_Result ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result answer_error(struct MHD_Connection *c, unsigned code, const char *msg)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf), "{\"success\":false,\"error\":\"%s\"}", msg);
    return answer(c, code, "application/json", buf, (size_t)n, NULL, NULL);
}

enum MHD_Result mc_console_http(mc_console_t *con, struct MHD_Connection *c, const char *url,
                                bool auth)
{
    char id[65], buf[160];
    if (!strcmp(url, "/console/login_link")) {
        if (!auth)
            return answer_error(c, 409, "no token file: the console is open without a login");
        mc_console_new_code(con, id);
        int n = snprintf(buf, sizeof(buf),
                         "{\"path\":\"/console/login?code=%s\",\"expires_in_s\":%u}", id,
                         MC_CONSOLE_CODE_TTL_MS / 1000);
        return answer(c, 200, "application/json", buf, (size_t)n, NULL, NULL);
    }
    if (!strcmp(url, "/console/login")) {
        const char *code = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "code");
        if (!auth)
            return answer(c, 303, "text/plain", "no login needed\n", 16, "Location", "/console");
        if (!mc_console_login(con, code, id))
            return answer_error(c, 403, "unknown, used or expired login code");
        snprintf(buf, sizeof(buf), MC_CONSOLE_COOKIE "=%s; Path=/; Max-Age=%u; HttpOnly; "
                 "SameSite=Strict", id, MC_CONSOLE_SESSION_TTL_MS / 1000);
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, "Set-Cookie", buf);
        MHD_add_response_header(r, "Location", "/console");
        MHD_add_response_header(r, "Cache-Control", "no-store");
        enum MHD_Result ret = MHD_queue_response(c, 303, r);
        MHD_destroy_response(r);
        return ret;
    }
    size_t len;
    const char *type;
    const char *body = mc_console_asset(url, &len, &type);
    if (!body)
        return answer_error(c, 404, "no such endpoint");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    /* everything the page uses comes from this origin */
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ret = MHD_queue_response(c, 200, r);
    MHD_destroy_response(r);
    return ret;
}

/* A JSON string of n bytes: printable ASCII kept (\" and \\ escaped), other bytes \xNN
 * (written as the text \\xNN, so any key renders and the JSON stays valid). */
static void put(mc_buf_t *b, bool *bad, const char *s, size_t n)
{
    *bad |= mc_buf_append(b, s, n) != MC_OK;
}

static void json_str(mc_buf_t *b, bool *bad, const char *s, size_t n)
{
    put(b, bad, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        char e[8];
        if (ch == '"' || ch == '\\')
            snprintf(e, sizeof(e), "\\%c", ch);
        else if (ch >= 0x20 && ch < 0x7f)
            snprintf(e, sizeof(e), "%c", ch);
        else
            snprintf(e, sizeof(e), "\\\\x%02x", ch);
        put(b, bad, e, strlen(e));
    }
    put(b, bad, "\"", 1);
}

char *mc_console_events_json(mc_master_t *m, uint64_t from_seq)
{
    static const char *const kinds[] = {"", "committed", "evicted", "removed", "segment_lost"};
    mc_master_event_t ev[MC_CONSOLE_EVENTS_MAX];
    size_t n = 0;
    mc_master_events_info_t info = {0};
    mc_status_t st = mc_master_events_read(m, from_seq ? from_seq : 1, 0,
                                           MC_CONSOLE_EVENTS_MAX, ev, &n, &info);
    mc_buf_t b = {0};
    bool bad = false;
    char head[256];
    snprintf(head, sizeof(head),
             "{\"enabled\":%s,\"epoch\":%llu,\"first_seq\":%llu,\"next_seq\":%llu,"
             "\"gap\":%s,\"events\":[",
             st == MC_OK ? "true" : "false", (unsigned long long)info.epoch,
             (unsigned long long)info.first_seq, (unsigned long long)info.next_seq,
             info.gap ? "true" : "false");
    put(&b, &bad, head, strlen(head));
    for (size_t i = 0; st == MC_OK && i < n; i++) {
        int k = ev[i].kind >= 1 && ev[i].kind <= 4 ? ev[i].kind : 0;
        snprintf(head, sizeof(head), "%s{\"seq\":%llu,\"kind\":\"%s\",\"size\":%llu,\"key\":",
                 i ? "," : "", (unsigned long long)ev[i].seq, kinds[k],
                 (unsigned long long)ev[i].size);
        put(&b, &bad, head, strlen(head));
        json_str(&b, &bad, ev[i].key, ev[i].klen);
        put(&b, &bad, ",\"segment\":", 11);
        json_str(&b, &bad, ev[i].segment, strlen(ev[i].segment));
        put(&b, &bad, ",\"host\":", 8);
        json_str(&b, &bad, ev[i].host, strlen(ev[i].host));
        put(&b, &bad, "}", 1);
    }
    put(&b, &bad, "]}", 2);
    char *r = bad ? NULL : mc_buf_take_str(&b);
    if (!r)
        mc_buf_free(&b);
    return r;
}
