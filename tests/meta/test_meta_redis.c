/* The redis metadata backend against a REAL redis-server (Debian redis-server) started here on
 * free loopback ports with a temporary dir, stopped by PID: one open server and one with a
 * password (requirepass) and an ACL user. Keys and values are read back with a raw hiredis
 * connection and compared with upstream Mooncake's layout (plain strings at
 * "mooncake/ram/<segment>", the descriptor JSON as value). Fails (does not skip) when
 * redis-server is not installed: scripts/install-deps.sh installs it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "common/log.h"
#include "common/net.h"
#include "common/time.h"
#include "mooncake/te.h"
#include "support/test_util.h"
#include "te/metadata.h"
#include "meta_check.h"
#include "te/segment_desc.h"
#include "te_env.h" /* tools/common */

#include <hiredis/hiredis.h>
#include <jansson.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define PASS "s3cr3t-pw"
#define ALICE_PASS "al1ce-pw"

static char g_dir[256];
static pid_t g_open = -1, g_auth = -1;
static uint16_t g_port, g_auth_port;

/* ---------------------------------------------------------------- log capture */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char g_log[1 << 20];
static size_t g_log_len;

static void capture_sink(mc_log_level_t level, const char *file, int line, const char *msg,
                         void *arg)
{
    (void)level, (void)file, (void)line, (void)arg;
    pthread_mutex_lock(&g_log_mu);
    size_t n = strlen(msg);
    if (g_log_len + n + 2 < sizeof(g_log)) {
        memcpy(g_log + g_log_len, msg, n);
        g_log_len += n;
        g_log[g_log_len++] = '\n';
        g_log[g_log_len] = '\0';
    }
    pthread_mutex_unlock(&g_log_mu);
    if (getenv("MC_TEST_LOG"))
        fprintf(stderr, "log: %s\n", msg);
}

static void log_reset(void)
{
    pthread_mutex_lock(&g_log_mu);
    g_log_len = 0;
    g_log[0] = '\0';
    pthread_mutex_unlock(&g_log_mu);
}

static bool log_has(const char *needle)
{
    pthread_mutex_lock(&g_log_mu);
    bool r = strstr(g_log, needle) != NULL;
    pthread_mutex_unlock(&g_log_mu);
    return r;
}

/* ---------------------------------------------------------------- servers */

static const char *find_redis(void)
{
    static const char *paths[] = {"/usr/bin/redis-server", "/usr/local/bin/redis-server",
                                  "/usr/sbin/redis-server"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
        if (access(paths[i], X_OK) == 0)
            return paths[i];
    return NULL;
}

/* Raw hiredis connection for checks (AUTH when pass is set). */
static redisContext *raw(uint16_t port, const char *user, const char *pass)
{
    struct timeval tv = {2, 0};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c || c->err) {
        if (c)
            redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (pass) {
        redisReply *r = user ? redisCommand(c, "AUTH %s %s", user, pass)
                             : redisCommand(c, "AUTH %s", pass);
        bool ok = r && r->type == REDIS_REPLY_STATUS;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

static pid_t spawn_redis(uint16_t port, bool auth, const char *log)
{
    const char *bin = find_redis();
    if (!bin) {
        fprintf(stderr, "FAIL: redis-server not installed (run scripts/install-deps.sh)\n");
        return -1;
    }
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%u", port);
    char *argv[32];
    int k = 0;
    argv[k++] = (char *)bin;
    argv[k++] = "--port";
    argv[k++] = portstr;
    argv[k++] = "--bind";
    argv[k++] = "127.0.0.1";
    argv[k++] = "--save";
    argv[k++] = "";
    argv[k++] = "--appendonly";
    argv[k++] = "no";
    argv[k++] = "--dir";
    argv[k++] = g_dir;
    if (auth) {
        argv[k++] = "--requirepass";
        argv[k++] = PASS;
        argv[k++] = "--user";
        argv[k++] = "alice";
        argv[k++] = "on";
        argv[k++] = ">" ALICE_PASS;
        argv[k++] = "~*";
        argv[k++] = "&*";
        argv[k++] = "+@all";
    }
    argv[k] = NULL;
    pid_t pid = mt_spawn(argv, log);
    if (pid < 0)
        return -1;
    uint64_t deadline = mc_now_ms() + 10000;
    while (mc_now_ms() < deadline) {
        redisContext *c = raw(port, NULL, auth ? PASS : NULL);
        if (c) {
            redisReply *r = redisCommand(c, "PING");
            bool ok = r && r->type == REDIS_REPLY_STATUS;
            if (r)
                freeReplyObject(r);
            redisFree(c);
            if (ok)
                return pid;
        }
        mc_sleep_ms(30);
    }
    fprintf(stderr, "FAIL: redis-server did not become ready; its log:\n");
    FILE *f = fopen(log, "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f))
        fputs(line, stderr);
    if (f)
        fclose(f);
    mt_stop(pid, SIGKILL, 2000);
    return -1;
}

static int start_servers(void **state)
{
    (void)state;
    if (mt_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return -1;
    if (mc_net_free_port(&g_port) != MC_OK || mc_net_free_port(&g_auth_port) != MC_OK)
        return -1;
    char log[320];
    snprintf(log, sizeof(log), "%s/open.log", g_dir);
    g_open = spawn_redis(g_port, false, log);
    snprintf(log, sizeof(log), "%s/auth.log", g_dir);
    g_auth = g_open > 0 ? spawn_redis(g_auth_port, true, log) : -1;
    if (g_open < 0 || g_auth < 0) {
        if (g_open > 0)
            mt_stop(g_open, SIGKILL, 2000);
        mt_rmdir(g_dir);
        return -1;
    }
    return 0;
}

static int stop_servers(void **state)
{
    (void)state;
    if (g_open > 0)
        mt_stop(g_open, SIGTERM, 5000);
    if (g_auth > 0)
        mt_stop(g_auth, SIGTERM, 5000);
    g_open = g_auth = -1;
    mt_rmdir(g_dir);
    return 0;
}

/* ---------------------------------------------------------------- helpers */

static mc_meta_t *open_uri(const char *fmt, uint16_t port, const mc_meta_opts_t *opts)
{
    char uri[256];
    snprintf(uri, sizeof(uri), fmt, port);
    mc_meta_t *m = NULL;
    mc_status_t st = mc_meta_open_opts(uri, opts, &m);
    if (st != MC_OK)
        fail_msg("open %s: %s", uri, mc_status_name(st));
    return m;
}

/* The raw string at key on c (heap, NULL if absent); fails on a non-string. */
static char *raw_get(redisContext *c, const char *key, size_t *len_p)
{
    redisReply *r = redisCommand(c, "GET %s", key);
    assert_non_null(r);
    char *out = NULL;
    if (r->type == REDIS_REPLY_STRING) {
        out = malloc(r->len + 1);
        memcpy(out, r->str, r->len);
        out[r->len] = '\0';
        if (len_p)
            *len_p = r->len;
    } else {
        assert_int_equal(r->type, REDIS_REPLY_NIL);
    }
    freeReplyObject(r);
    return out;
}

static long long raw_int(redisContext *c, const char *cmd, const char *key)
{
    redisReply *r = redisCommand(c, "%s %s", cmd, key);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

static void raw_ok(redisContext *c, redisReply *r)
{
    (void)c;
    assert_non_null(r);
    if (r->type == REDIS_REPLY_ERROR)
        fail_msg("redis: %s", r->str);
    freeReplyObject(r);
}

/* ---------------------------------------------------------------- tests */

static void test_crud_and_layout(void **state)
{
    (void)state;
    mc_meta_t *m = open_uri("redis://127.0.0.1:%u", g_port, NULL);
    redisContext *c = raw(g_port, NULL, NULL);
    assert_non_null(c);
    const char *key = "mooncake/ram/127.0.0.1:12345";
    check_value(m, key, NULL);
    const char *desc = "{\"name\":\"127.0.0.1:12345\",\"protocol\":\"tcp\",\"buffers\":"
                       "[{\"name\":\"cpu:0\",\"addr\":1,\"length\":2}]}";
    assert_int_equal(mc_meta_put(m, key, desc), MC_OK);
    check_value(m, key, desc);
    /* upstream's layout: a plain string under the key itself, the JSON text as value */
    redisReply *r = redisCommand(c, "TYPE %s", key);
    assert_non_null(r);
    assert_string_equal(r->str, "string");
    freeReplyObject(r);
    char *v = raw_get(c, key, NULL);
    assert_string_equal(v, desc);
    free(v);
    r = redisCommand(c, "KEYS *");
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 1);
    assert_string_equal(r->element[0]->str, key);
    freeReplyObject(r);

    /* overwrite, delete, delete again */
    assert_int_equal(mc_meta_put(m, key, "v2"), MC_OK);
    check_value(m, key, "v2");
    assert_int_equal(mc_meta_del(m, key), MC_OK);
    assert_int_equal(raw_int(c, "EXISTS", key), 0);
    check_value(m, key, NULL);
    assert_int_equal(mc_meta_del(m, key), MC_OK);

    /* empty, binary-ish and unicode keys/values, a key with a space */
    assert_int_equal(mc_meta_put(m, "empty", ""), MC_OK);
    check_value(m, "empty", "");
    assert_int_equal(mc_meta_put(m, "ключ/ü\x01 x", "значение\x7f\r\n"), MC_OK);
    check_value(m, "ключ/ü\x01 x", "значение\x7f\r\n");

    /* a value as upstream writes it (Json::FastWriter: trailing newline) reads back as is and
     * parses (upstream's "timestamp" is a date string, which our codec refuses: left out) */
    const char *up = "{\"buffers\":[{\"addr\":140000000,\"length\":4096,\"lkey\":[],\"name\":"
                     "\"cpu:0\",\"rkey\":[]}],\"name\":\"10.0.0.1:12001\",\"protocol\":\"tcp\","
                     "\"tcp_data_port\":15000}\n";
    raw_ok(c, redisCommand(c, "SET %s %s", "mooncake/ram/10.0.0.1:12001", up));
    v = NULL;
    assert_int_equal(mc_meta_get(m, "mooncake/ram/10.0.0.1:12001", &v), MC_OK);
    assert_string_equal(v, up);
    mc_segment_desc_t d;
    assert_int_equal(mc_segment_desc_from_json(v, strlen(v), &d), MC_OK);
    assert_string_equal(d.name, "10.0.0.1:12001");
    assert_int_equal(d.tcp_data_port, 15000);
    mc_segment_desc_free(&d);
    free(v);

    /* exactly the value cap round-trips; a larger value stored by someone else is refused
     * with TOO_LARGE (and the connection is not reused half-read) */
    size_t n = MC_META_VALUE_MAX;
    char *big = malloc(n + 2);
    for (size_t i = 0; i < n; i++)
        big[i] = (char)('A' + i % 50);
    big[n] = '\0';
    assert_int_equal(mc_meta_put(m, "big", big), MC_OK);
    check_value(m, "big", big);
    big[n] = 'x';
    big[n + 1] = '\0';
    assert_int_equal(mc_meta_put(m, "big", big), MC_ERR_TOO_LARGE); /* front-end cap */
    raw_ok(c, redisCommand(c, "SET %s %b", "huge", big, n + 1));
    v = NULL;
    assert_int_equal(mc_meta_get(m, "huge", &v), MC_ERR_TOO_LARGE);
    assert_null(v);
    check_value(m, "empty", "");
    free(big);
    /* far larger: refused while arriving, before it is buffered whole */
    big = calloc(1, 16u << 20);
    raw_ok(c, redisCommand(c, "SET %s %b", "huge", big, (size_t)(16u << 20)));
    free(big);
    log_reset();
    assert_int_equal(mc_meta_get(m, "huge", &v), MC_ERR_TOO_LARGE);
    assert_null(v);
    assert_true(log_has("answer exceeds"));
    check_value(m, "empty", "");

    /* a non-string key: a clear error, not a crash */
    raw_ok(c, redisCommand(c, "HSET %s f v", "ahash"));
    v = NULL;
    assert_int_equal(mc_meta_get(m, "ahash", &v), MC_ERR_INTERNAL);
    assert_null(v);
    check_value(m, "empty", "");

    raw_ok(c, redisCommand(c, "FLUSHALL"));
    redisFree(c);
    mc_meta_close(m);
}

static void test_uri_forms(void **state)
{
    (void)state;
    static const char *bad[] = {
        "redis://",            "redis://:1",           "redis://h:0",
        "redis://h:65536",     "redis://h:12a",        "redis://h:",
        "redis://h:1/abc",     "redis://h:1/256",      "redis://h:1/1/2",
        "redis://user@h:1",    "redis://h:1?db=2",     "redis://::1:6379",
        "redis://[::1",        "redis://[::1]x",       "redis://%zz:p@h",
        "redis://u:p%00@h",    "redis://u:p%4@h",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        mc_meta_t *m = (mc_meta_t *)1;
        mc_status_t st = mc_meta_open(bad[i], &m);
        if (st != MC_ERR_INVALID_PARAMS)
            fail_msg("'%s': want INVALID_PARAMS, got %s", bad[i], mc_status_name(st));
        assert_null(m);
    }
    static const char *good[] = {"redis://localhost",       "REDIS://h:6379",
                                 "redis://[::1]:6379/",     "redis://[::1]",
                                 "redis://h:1/0",           "redis://h:1/255",
                                 "redis://:p@h:1",          "redis://u:p%40x@h:1/3",
                                 "redis://u:p:with:colons@h"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        mc_meta_t *m = NULL;
        mc_status_t st = mc_meta_open(good[i], &m);
        if (st != MC_OK)
            fail_msg("'%s': %s", good[i], mc_status_name(st));
        assert_false(mc_meta_is_p2p(m));
        mc_meta_close(m);
    }
    /* a value given both in the string and in the options is refused */
    mc_meta_opts_t o = {.redis_password = "x"};
    mc_meta_t *m = NULL;
    assert_int_equal(mc_meta_open_opts("redis://:y@h", &o, &m), MC_ERR_INVALID_PARAMS);
    o = (mc_meta_opts_t){.redis_username = "x", .redis_password = "p"};
    assert_int_equal(mc_meta_open_opts("redis://u:y@h", &o, &m), MC_ERR_INVALID_PARAMS);
    o = (mc_meta_opts_t){.redis_db_index = 2};
    assert_int_equal(mc_meta_open_opts("redis://h/3", &o, &m), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_meta_open_opts("redis://h/2", &o, &m), MC_OK);
    mc_meta_close(m);
    o = (mc_meta_opts_t){.redis_db_index = 256};
    assert_int_equal(mc_meta_open_opts("redis://h", &o, &m), MC_ERR_INVALID_PARAMS);
    /* the other backends ignore the redis options */
    o = (mc_meta_opts_t){.redis_password = "x", .redis_db_index = 3};
    assert_int_equal(mc_meta_open_opts("http://127.0.0.1:1/metadata", &o, &m), MC_OK);
    mc_meta_close(m);

    /* credentials never reach a log line */
    char buf[128];
    assert_string_equal(mc_meta_uri_for_log("redis://u:" PASS "@h:1/2", buf, sizeof(buf)),
                        "redis://***@h:1/2");
    assert_string_equal(mc_meta_uri_for_log("redis://h:1", buf, sizeof(buf)), "redis://h:1");
    assert_string_equal(mc_meta_uri_for_log("redis://:pa/ss@h", buf, sizeof(buf)),
                        "redis://***@h");
    assert_string_equal(mc_meta_uri_for_log("http://h:1/a@b", buf, sizeof(buf)),
                        "http://***@b"); /* over-redacted: harmless */
    assert_string_equal(mc_meta_uri_for_log("P2PHANDSHAKE", buf, sizeof(buf)), "P2PHANDSHAKE");
    log_reset();
    assert_int_equal(mc_meta_open("rediss://u:" PASS "@h", &m), MC_ERR_INVALID_PARAMS);
    mc_te_config_t cfg = {.metadata_uri = "rediss://u:" PASS "@h",
                          .local_server_name = "127.0.0.1"};
    mc_te_t *te = NULL;
    assert_int_not_equal(mc_te_create(&cfg, &te), MC_OK);
    assert_true(log_has("rediss://***@h"));
    assert_false(log_has(PASS));
}

static void test_password(void **state)
{
    (void)state;
    log_reset();
    mc_meta_opts_t o = {.timeout_ms = 2000};
    char *v = NULL;
    /* no password: the server says NOAUTH */
    mc_meta_t *m = open_uri("redis://127.0.0.1:%u", g_auth_port, &o);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_PERMISSION);
    assert_int_equal(mc_meta_get(m, "k", &v), MC_ERR_PERMISSION);
    assert_true(log_has("MC_REDIS_PASSWORD"));
    mc_meta_close(m);
    /* wrong password */
    o.redis_password = "wrong-" PASS;
    m = open_uri("redis://127.0.0.1:%u", g_auth_port, &o);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_PERMISSION);
    assert_true(log_has("authentication failed"));
    mc_meta_close(m);
    /* a password where the server has none */
    o.redis_password = PASS;
    m = open_uri("redis://127.0.0.1:%u", g_port, &o);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_PERMISSION);
    mc_meta_close(m);
    /* right password (option, then in the string) */
    o.redis_password = PASS;
    m = open_uri("redis://127.0.0.1:%u", g_auth_port, &o);
    assert_int_equal(mc_meta_put(m, "mooncake/ram/a", "v1"), MC_OK);
    check_value(m, "mooncake/ram/a", "v1");
    mc_meta_close(m);
    m = open_uri("redis://:" PASS "@127.0.0.1:%u", g_auth_port, NULL);
    check_value(m, "mooncake/ram/a", "v1");
    mc_meta_close(m);
    /* ACL user: right and wrong user, a username alone is ignored (as upstream) */
    o = (mc_meta_opts_t){.redis_username = "alice", .redis_password = ALICE_PASS};
    m = open_uri("redis://127.0.0.1:%u", g_auth_port, &o);
    check_value(m, "mooncake/ram/a", "v1");
    mc_meta_close(m);
    m = open_uri("redis://alice:al1ce%%2Dpw@127.0.0.1:%u", g_auth_port, NULL);
    check_value(m, "mooncake/ram/a", "v1");
    mc_meta_close(m);
    o.redis_username = "bob";
    m = open_uri("redis://127.0.0.1:%u", g_auth_port, &o);
    assert_int_equal(mc_meta_get(m, "mooncake/ram/a", &v), MC_ERR_PERMISSION);
    mc_meta_close(m);
    o = (mc_meta_opts_t){.redis_username = "alice"};
    m = open_uri("redis://127.0.0.1:%u", g_port, &o);
    check_value(m, "nothing", NULL);
    mc_meta_close(m);

    /* database index: SELECTed on every connection; out of the server's range is an error */
    o = (mc_meta_opts_t){.redis_password = PASS, .redis_db_index = 3};
    m = open_uri("redis://127.0.0.1:%u", g_auth_port, &o);
    assert_int_equal(mc_meta_put(m, "mooncake/ram/db3", "x"), MC_OK);
    mc_meta_close(m);
    redisContext *c = raw(g_auth_port, NULL, PASS);
    assert_non_null(c);
    assert_int_equal(raw_int(c, "EXISTS", "mooncake/ram/db3"), 0);
    raw_ok(c, redisCommand(c, "SELECT 3"));
    assert_int_equal(raw_int(c, "EXISTS", "mooncake/ram/db3"), 1);
    redisFree(c);
    o.redis_db_index = 200; /* redis-server has 16 databases by default */
    m = open_uri("redis://127.0.0.1:%u", g_auth_port, &o);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_INVALID_PARAMS);
    assert_true(log_has("MC_REDIS_DB_INDEX"));
    mc_meta_close(m);

    /* a TE with the wrong password fails to start; with the right one it publishes */
    mc_te_config_t cfg = {.local_server_name = "127.0.0.1", .protocol = "tcp",
                          .metadata_timeout_ms = 2000, .redis_password = "nope"};
    char uri[64];
    snprintf(uri, sizeof(uri), "redis://127.0.0.1:%u", g_auth_port);
    cfg.metadata_uri = uri;
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_ERR_PERMISSION);
    assert_null(te);
    cfg.redis_password = PASS;
    cfg.redis_db_index = 256;
    assert_int_equal(mc_te_create(&cfg, &te), MC_ERR_INVALID_PARAMS);
    cfg.redis_db_index = 0;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    char key[MC_TE_NAME_MAX + 32];
    snprintf(key, sizeof(key), "mooncake/ram/%s", mc_te_local_name(te));
    c = raw(g_auth_port, NULL, PASS);
    assert_int_equal(raw_int(c, "EXISTS", key), 1);
    mc_te_destroy(te);
    assert_int_equal(raw_int(c, "EXISTS", key), 0);
    raw_ok(c, redisCommand(c, "FLUSHALL"));
    redisFree(c);

    /* no password in any log line */
    assert_false(log_has(PASS));
    assert_false(log_has(ALICE_PASS));
}

/* A listener that accepts nothing: connect succeeds (backlog), no answer ever comes. */
static void test_unresponsive_and_closed(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(listen(fd, 16), 0);
    socklen_t al = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    uint16_t silent = ntohs(a.sin_port);

    mc_meta_opts_t o = {.timeout_ms = 300};
    mc_meta_t *m = open_uri("redis://127.0.0.1:%u", silent, &o);
    char *v = NULL;
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_meta_get(m, "k", &v), MC_ERR_TIMEOUT);
    uint64_t dt = mc_now_ms() - t0;
    assert_true(dt >= 250 && dt < 2000);
    t0 = mc_now_ms();
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_TIMEOUT);
    assert_true(mc_now_ms() - t0 < 2000);
    mc_meta_close(m);
    /* with a password the AUTH is what times out: same bound */
    o.redis_password = PASS;
    m = open_uri("redis://127.0.0.1:%u", silent, &o);
    t0 = mc_now_ms();
    assert_int_equal(mc_meta_del(m, "k"), MC_ERR_TIMEOUT);
    assert_true(mc_now_ms() - t0 < 2000);
    mc_meta_close(m);
    close(fd);

    /* nobody listening: a connection error at once */
    uint16_t dead;
    assert_int_equal(mc_net_free_port(&dead), MC_OK);
    m = open_uri("redis://127.0.0.1:%u", dead, NULL);
    t0 = mc_now_ms();
    assert_int_equal(mc_meta_get(m, "k", &v), MC_ERR_CONNECTION);
    assert_int_equal(mc_meta_put(m, "k", "v"), MC_ERR_CONNECTION);
    assert_true(mc_now_ms() - t0 < 2000);
    mc_meta_close(m);
    /* and a TE pointed at it fails to start, quickly */
    char uri[64];
    snprintf(uri, sizeof(uri), "redis://127.0.0.1:%u", dead);
    mc_te_config_t cfg = {.metadata_uri = uri, .local_server_name = "127.0.0.1",
                          .protocol = "tcp"};
    mc_te_t *te = NULL;
    t0 = mc_now_ms();
    assert_int_equal(mc_te_create(&cfg, &te), MC_ERR_CONNECTION);
    assert_true(mc_now_ms() - t0 < 5000);
}

/* Two engines on this host find each other through redis and move bytes both ways. */
static void test_two_engines_transfer(void **state)
{
    (void)state;
    char uri[64];
    snprintf(uri, sizeof(uri), "redis://127.0.0.1:%u", g_port);
    mc_te_config_t cfg = {.metadata_uri = uri, .local_server_name = "127.0.0.1",
                          .protocol = "tcp"};
    mc_te_t *a = NULL, *b = NULL;
    assert_int_equal(mc_te_create(&cfg, &a), MC_OK);
    assert_int_equal(mc_te_create(&cfg, &b), MC_OK);
    enum { L = 1 << 20 };
    uint8_t *abuf = malloc(L), *bbuf = malloc(L);
    for (size_t i = 0; i < L; i++) {
        abuf[i] = (uint8_t)(i * 7 + 1);
        bbuf[i] = 0;
    }
    assert_int_equal(mc_te_register(a, abuf, L, "cpu:0"), MC_OK);

    /* a's descriptor in upstream's place and shape */
    redisContext *c = raw(g_port, NULL, NULL);
    assert_non_null(c);
    char key[MC_TE_NAME_MAX + 32];
    snprintf(key, sizeof(key), "mooncake/ram/%s", mc_te_local_name(a));
    size_t jlen = 0;
    char *json = raw_get(c, key, &jlen);
    assert_non_null(json);
    json_error_t jerr;
    json_t *j = json_loadb(json, jlen, 0, &jerr);
    assert_non_null(j);
    assert_string_equal(json_string_value(json_object_get(j, "name")), mc_te_local_name(a));
    json_t *bufs = json_object_get(j, "buffers");
    assert_int_equal(json_array_size(bufs), 1);
    json_t *b0 = json_array_get(bufs, 0);
    assert_string_equal(json_string_value(json_object_get(b0, "name")), "cpu:0");
    assert_int_equal(json_integer_value(json_object_get(b0, "addr")), (json_int_t)(uintptr_t)abuf);
    assert_int_equal(json_integer_value(json_object_get(b0, "length")), L);
    assert_non_null(json_string_value(json_object_get(j, "protocol")));
    json_decref(j);
    free(json);
    snprintf(key, sizeof(key), "mooncake/ram/%s", mc_te_local_name(b));
    assert_int_equal(raw_int(c, "EXISTS", key), 1);

    /* b reads a's buffer, then writes into it */
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(b, mc_te_local_name(a), &seg), MC_OK);
    assert_int_equal(mc_te_register(b, bbuf, L, NULL), MC_OK);
    mc_te_request_t rq = {.opcode = MC_TE_READ, .local = bbuf, .target = seg,
                          .target_addr = (uint64_t)(uintptr_t)abuf, .length = L};
    assert_int_equal(mc_te_transfer_sync(b, &rq, 1, NULL), MC_OK);
    assert_memory_equal(abuf, bbuf, L);
    for (size_t i = 0; i < 4096; i++)
        bbuf[i] = (uint8_t)~bbuf[i];
    rq = (mc_te_request_t){.opcode = MC_TE_WRITE, .local = bbuf, .target = seg,
                           .target_addr = (uint64_t)(uintptr_t)abuf + 4096, .length = 4096};
    assert_int_equal(mc_te_transfer_sync(b, &rq, 1, NULL), MC_OK);
    assert_memory_equal(abuf + 4096, bbuf, 4096);

    /* a leaves: its key goes */
    char akey[MC_TE_NAME_MAX + 32];
    snprintf(akey, sizeof(akey), "mooncake/ram/%s", mc_te_local_name(a));
    mc_te_destroy(a);
    assert_int_equal(raw_int(c, "EXISTS", akey), 0);
    mc_te_destroy(b);
    assert_int_equal(raw_int(c, "EXISTS", key), 0);
    redisFree(c);
    free(abuf);
    free(bbuf);
}

/* Several threads on one handle (pooled connections). */
static void *hammer(void *arg)
{
    mc_meta_t *m = arg;
    char key[64], val[64];
    for (int i = 0; i < 200; i++) {
        snprintf(key, sizeof(key), "t/%lu/%d", (unsigned long)pthread_self() % 1000, i % 10);
        snprintf(val, sizeof(val), "v%d", i);
        if (mc_meta_put(m, key, val) != MC_OK)
            return (void *)1;
        char *v = NULL;
        if (mc_meta_get(m, key, &v) != MC_OK)
            return (void *)1;
        bool ok = strcmp(v, val) == 0;
        free(v);
        if (!ok || mc_meta_del(m, key) != MC_OK)
            return (void *)1;
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    mc_meta_t *m = open_uri("redis://127.0.0.1:%u", g_port, NULL);
    pthread_t th[6];
    for (int i = 0; i < 6; i++)
        assert_int_equal(pthread_create(&th[i], NULL, hammer, m), 0);
    for (int i = 0; i < 6; i++) {
        void *r;
        pthread_join(th[i], &r);
        assert_null(r);
    }
    mc_meta_close(m);
}

/* Pooled connections survive a restart of the server; a stopped server is a clear error. */
static void test_restart_then_down(void **state)
{
    (void)state;
    mc_meta_t *m = open_uri("redis://127.0.0.1:%u", g_port, NULL);
    assert_int_equal(mc_meta_put(m, "r/k", "v"), MC_OK);
    assert_true(mt_stop(g_open, SIGTERM, 5000) != -1);
    char log[320];
    snprintf(log, sizeof(log), "%s/open2.log", g_dir);
    g_open = spawn_redis(g_port, false, log);
    assert_true(g_open > 0);
    check_value(m, "r/k", NULL); /* fresh server, nothing saved: reconnected */
    assert_int_equal(mc_meta_put(m, "r/k", "v"), MC_OK);
    assert_true(mt_stop(g_open, SIGTERM, 5000) != -1);
    g_open = -1;
    char *v = NULL;
    uint64_t t0 = mc_now_ms();
    assert_int_equal(mc_meta_get(m, "r/k", &v), MC_ERR_CONNECTION);
    assert_null(v);
    assert_int_equal(mc_meta_put(m, "r/k", "v"), MC_ERR_CONNECTION);
    assert_true(mc_now_ms() - t0 < 3000);
    mc_meta_close(m);
}

/* The programs' environment (tools/common/te_env.c): MC_REDIS_* into the config fields. */
static void test_tool_env(void **state)
{
    (void)state;
    char err[256];
    mc_te_config_t cfg = {0};
    setenv("MC_REDIS_USERNAME", "alice", 1);
    setenv("MC_REDIS_PASSWORD", PASS, 1);
    setenv("MC_REDIS_DB_INDEX", "7", 1);
    assert_int_equal(mc_tool_te_config_from_env(&cfg, err, sizeof(err)), MC_OK);
    assert_string_equal(cfg.redis_username, "alice");
    assert_string_equal(cfg.redis_password, PASS);
    assert_int_equal(cfg.redis_db_index, 7);
    static const struct {
        const char *var, *val, *msg;
    } bad[] = {
        {"MC_REDIS_DB_INDEX", "256", "MC_REDIS_DB_INDEX must be"},
        {"MC_REDIS_DB_INDEX", "-1", "MC_REDIS_DB_INDEX must be"},
        {"MC_REDIS_DB_INDEX", "3x", "MC_REDIS_DB_INDEX must be"},
        {"MC_REDIS_USERNAME", "al ice", "MC_REDIS_USERNAME must be"},
        {"MC_REDIS_PASSWORD", PASS "\n", "MC_REDIS_PASSWORD must be"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("MC_REDIS_USERNAME", "alice", 1);
        setenv("MC_REDIS_PASSWORD", PASS, 1);
        setenv("MC_REDIS_DB_INDEX", "7", 1);
        setenv(bad[i].var, bad[i].val, 1);
        mc_te_config_t c2 = {0};
        assert_int_equal(mc_tool_te_config_from_env(&c2, err, sizeof(err)),
                         MC_ERR_INVALID_PARAMS);
        if (!strstr(err, bad[i].msg))
            fail_msg("%s=%s: message '%s'", bad[i].var, bad[i].val, err);
        assert_null(strstr(err, PASS));
        assert_null(c2.redis_password); /* cfg unchanged on error */
    }
    char *longpw = malloc(1100);
    memset(longpw, 'p', 1099);
    longpw[1099] = '\0';
    setenv("MC_REDIS_DB_INDEX", "0", 1);
    setenv("MC_REDIS_PASSWORD", longpw, 1);
    assert_int_equal(mc_tool_te_config_from_env(&cfg, err, sizeof(err)), MC_ERR_INVALID_PARAMS);
    assert_null(strstr(err, "pppp"));
    free(longpw);
    unsetenv("MC_REDIS_USERNAME");
    unsetenv("MC_REDIS_PASSWORD");
    unsetenv("MC_REDIS_DB_INDEX");
}

int main(void)
{
    mc_log_set_sink(capture_sink, NULL);
    mc_log_set_level(MC_LOG_LEVEL_DEBUG);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crud_and_layout),
        cmocka_unit_test(test_uri_forms),
        cmocka_unit_test(test_tool_env),
        cmocka_unit_test(test_password),
        cmocka_unit_test(test_unresponsive_and_closed),
        cmocka_unit_test(test_two_engines_transfer),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_restart_then_down), /* last: stops the open server */
    };
    int rc = cmocka_run_group_tests(tests, start_servers, stop_servers);
    mc_log_set_sink(NULL, NULL);
    return rc;
}
