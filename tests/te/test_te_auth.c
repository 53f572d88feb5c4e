/* Transfer engine authentication and listener budgets: the cluster handshake on the TE port
 * (raw clients with no, a wrong and the right token), signed descriptors, fake servers, floods
 * of unauthenticated connections, idle and slow-frame timeouts. A te_peer target process or an
 * engine in this process serves; metadata is P2PHANDSHAKE (descriptors over GET_DESC). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "te_harness.h"
#include "support/test_util.h"

#include "common/alloc.h"
#include "common/auth.h"
#include "common/grant.h"
#include "common/net.h"
#include "te/grant_window.h"
#include "te/metadata.h"
#include "te/segment_desc.h"
#include "te/tcp_frame.h"
#include "te/te_auth.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define SECRET_A "cluster-secret-A-0123456789"
#define SECRET_B "cluster-secret-B-9876543210"
#define SECRET_C "tenant-secret-C-0123456789"
#define NS(ms) ((uint64_t)(ms) * 1000000ull)

static char g_dir[256], g_tok_a[300], g_tok_b[300];

static void write_token(const char *path, const char *secret)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, secret, strlen(secret)), (ssize_t)strlen(secret));
    assert_int_equal(write(fd, "\n", 1), 1);
    close(fd);
}

static int setup(void **state)
{
    (void)state;
    if (mt_tmpdir(g_dir, sizeof(g_dir)) != 0)
        return -1;
    snprintf(g_tok_a, sizeof(g_tok_a), "%s/a.token", g_dir);
    snprintf(g_tok_b, sizeof(g_tok_b), "%s/b.token", g_dir);
    write_token(g_tok_a, SECRET_A);
    write_token(g_tok_b, SECRET_B);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    mt_rmdir(g_dir);
    return 0;
}

static mc_auth_t *keyring(const char *secret)
{
    mc_auth_t *a = NULL;
    assert_int_equal(mc_auth_from_secret(secret, NULL, &a), MC_OK);
    return a;
}

/* An engine in this process; token NULL = no keyring. */
static mc_te_t *engine(const char *token, uint32_t timeout_ms, uint32_t idle_s, uint32_t max_conns)
{
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                          .protocol = "tcp", .transfer_timeout_ms = timeout_ms,
                          .auth_token_file = token, .tcp_idle_timeout_s = idle_s,
                          .tcp_max_server_conns = max_conns};
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    return te;
}

/* A plain TCP connection to a segment's port (nothing sent yet). */
static int tcp_to(const char *name)
{
    char host[MC_HOST_MAX];
    uint16_t port;
    assert_int_equal(mc_net_split_hostport(name, host, &port), MC_OK);
    int fd;
    assert_int_equal(mc_net_connect(host, port, 2000, &fd), MC_OK);
    return fd;
}

static void frame_send(int fd, uint16_t op, uint64_t id, uint64_t addr, uint64_t len)
{
    mc_te_frame_t h = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION, .opcode = op,
                       .id = id, .addr = addr, .length = len};
    uint8_t b[MC_TE_FRAME_HDR_SIZE];
    mc_te_frame_encode(&h, b);
    /* the server may have closed already: a failed send is fine, what comes back is checked */
    (void)mc_net_send_all(fd, b, sizeof(b), mc_now_ns() + NS(2000));
}

/* Everything the server sends until it closes (deadline 10 s): the byte count. */
static size_t drain_until_closed(int fd, uint8_t *keep, size_t keep_cap)
{
    size_t total = 0;
    uint64_t deadline = mc_now_ns() + NS(10000);
    for (;;) {
        assert_true(mc_now_ns() < deadline);
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        uint8_t b[4096];
        ssize_t n = recv(fd, b, sizeof(b), 0);
        if (n <= 0)
            return total;
        if (keep && total < keep_cap)
            memcpy(keep + total, b, (size_t)n < keep_cap - total ? (size_t)n : keep_cap - total);
        total += (size_t)n;
    }
}

static void peer_check(te_peer_t *p, const char *what)
{
    char ans[64];
    char cmd[96];
    snprintf(cmd, sizeof(cmd), "check 0 0 %llu 1", (unsigned long long)p->len[0]);
    assert_int_equal(te_peer_cmd(p, cmd, ans, sizeof(ans), 20000), 0);
    if (strcmp(ans, "CHECK ok") != 0)
        fail_msg("%s: the target's buffer changed (%s)", what, ans);
}

/* ---- raw clients against a target with a token --------------------------------------- */

/* Without the token a client gets HELLO and a refusing RESULT, then the connection closes:
 * whatever frames it sends (GET_DESC, READ, WRITE) are never served. A wrong token fares the
 * same. With the token, frames work and the descriptor comes in the signed form. */
static void test_auth_raw_clients(void **state)
{
    (void)state;
    const char *args[] = {"--buffers", "1", "--size", "65536", "--token", g_tok_a, NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    uint64_t addr = p.addr[0];

    /* 1. no handshake at all: frames where the PROOF belongs */
    int fd = tcp_to(p.name);
    frame_send(fd, MC_TE_OP_GET_DESC, 1, 0, 0);
    frame_send(fd, MC_TE_OP_READ, 2, addr, 4096);
    frame_send(fd, MC_TE_OP_WRITE, 3, addr, 16);
    uint8_t junk[16];
    memset(junk, 0xEE, sizeof(junk));
    (void)mc_net_send_all(fd, junk, sizeof(junk), mc_now_ns() + NS(2000));
    uint8_t got[256];
    size_t n = drain_until_closed(fd, got, sizeof(got));
    close(fd);
    /* HELLO (auth required) and RESULT (refused), no byte of any frame */
    assert_int_equal(n, MC_AUTH_HELLO_SIZE + MC_AUTH_RESULT_SIZE);
    assert_int_equal(got[6] & 1, 1);
    int32_t rst;
    memcpy(&rst, got + MC_AUTH_HELLO_SIZE + 8, 4);
    assert_int_not_equal(rst, MC_OK);
    peer_check(&p, "frames without a handshake");

    /* 2. a handshake without a token, then frames anyway */
    fd = tcp_to(p.name);
    assert_int_equal(mc_auth_client_handshake(fd, NULL, mc_now_ns() + NS(5000)), MC_ERR_AUTH);
    frame_send(fd, MC_TE_OP_READ, 1, addr, 4096);
    frame_send(fd, MC_TE_OP_WRITE, 2, addr, 16);
    (void)mc_net_send_all(fd, junk, sizeof(junk), mc_now_ns() + NS(2000));
    assert_int_equal(drain_until_closed(fd, NULL, 0), 0);
    close(fd);

    /* 3. the wrong token */
    mc_auth_t *b = keyring(SECRET_B);
    fd = tcp_to(p.name);
    assert_int_equal(mc_auth_client_handshake(fd, b, mc_now_ns() + NS(5000)), MC_ERR_AUTH);
    frame_send(fd, MC_TE_OP_GET_DESC, 1, 0, 0);
    frame_send(fd, MC_TE_OP_WRITE, 2, addr, 16);
    (void)mc_net_send_all(fd, junk, sizeof(junk), mc_now_ns() + NS(2000));
    assert_int_equal(drain_until_closed(fd, NULL, 0), 0);
    close(fd);
    mc_auth_free(b);
    peer_check(&p, "wrong token");

    /* 4. the right token: GET_DESC (signed), READ and WRITE are served */
    mc_auth_t *a = keyring(SECRET_A);
    fd = tcp_to(p.name);
    assert_int_equal(mc_auth_client_handshake(fd, a, mc_now_ns() + NS(5000)), MC_OK);
    mc_te_frame_t h;
    uint8_t hb[MC_TE_FRAME_HDR_SIZE];
    frame_send(fd, MC_TE_OP_GET_DESC, 1, 0, 0);
    assert_int_equal(mc_net_recv_all(fd, hb, sizeof(hb), mc_now_ns() + NS(5000)), MC_OK);
    assert_int_equal(mc_te_frame_decode(hb, sizeof(hb), &h), MC_OK);
    assert_int_equal(h.status, MC_OK);
    char *json = calloc(1, h.length + 1);
    assert_int_equal(mc_net_recv_all(fd, json, h.length, mc_now_ns() + NS(5000)), MC_OK);
    const char *inner;
    size_t inner_len;
    int sealed = 0;
    assert_int_equal(mc_segment_desc_unseal(a, json, h.length, &inner, &inner_len, &sealed),
                     MC_OK);
    assert_int_equal(sealed, 1);
    free(json);
    frame_send(fd, MC_TE_OP_READ, 2, addr + 100, 64);
    assert_int_equal(mc_net_recv_all(fd, hb, sizeof(hb), mc_now_ns() + NS(5000)), MC_OK);
    assert_int_equal(mc_te_frame_decode(hb, sizeof(hb), &h), MC_OK);
    assert_int_equal(h.status, MC_OK);
    assert_int_equal(h.length, 64);
    uint8_t data[64];
    assert_int_equal(mc_net_recv_all(fd, data, 64, mc_now_ns() + NS(5000)), MC_OK);
    assert_int_equal(te_pattern_check(data, 64, 0, 100, 1), -1);
    /* write the pattern's own bytes back (the buffer stays checkable) */
    frame_send(fd, MC_TE_OP_WRITE, 3, addr + 100, 64);
    assert_int_equal(mc_net_send_all(fd, data, 64, mc_now_ns() + NS(5000)), MC_OK);
    assert_int_equal(mc_net_recv_all(fd, hb, sizeof(hb), mc_now_ns() + NS(5000)), MC_OK);
    assert_int_equal(mc_te_frame_decode(hb, sizeof(hb), &h), MC_OK);
    assert_int_equal(h.opcode, MC_TE_OP_WRITE | MC_TE_OP_RESPONSE);
    assert_int_equal(h.status, MC_OK);
    close(fd);
    mc_auth_free(a);
    peer_check(&p, "authenticated writes");
    te_peer_stop(&p, 0);
}

/* ---- engines --------------------------------------------------------------------------- */

/* Same token: transfers work. No token or the wrong one against a target with a token, and a
 * token against a target without one (it cannot prove the secret): refused with AUTH_FAILED. */
static void test_auth_engines(void **state)
{
    (void)state;
    const char *args_a[] = {"--buffers", "2", "--size", "16777216", "--token", g_tok_a, NULL};
    const char *args_open[] = {"--buffers", "1", "--size", "1048576", NULL};
    te_peer_t pa, po;
    assert_int_equal(te_peer_start(&pa, args_a), 0);
    assert_int_equal(te_peer_start(&po, args_open), 0);
    uint8_t *lb = local_buf(16 * MiB);
    mc_te_segment_t seg;

    mc_te_t *te = engine(g_tok_a, 5000, 0, 0);
    assert_int_equal(mc_te_segment_open(te, pa.name, &seg), MC_OK);
    te_roundtrip_sizes(te, &pa, seg, lb, 16 * MiB); /* reads buffer 0, writes buffer 1 */
    /* a target without a keyring cannot prove ours: its descriptor is not even fetched */
    assert_int_equal(mc_te_segment_open(te, po.name, &seg), MC_ERR_AUTH);
    mc_te_destroy(te);

    const char *wrong[] = {NULL, g_tok_b};
    for (int i = 0; i < 2; i++) {
        te = engine(wrong[i], 5000, 0, 0);
        assert_int_equal(mc_te_segment_open(te, pa.name, &seg), MC_ERR_AUTH);
        mc_te_destroy(te);
    }
    peer_check(&pa, "refused engines");
    munmap(lb, 16 * MiB);
    te_peer_stop(&pa, 0);
    te_peer_stop(&po, 0);
}

/* A bad token file makes create fail with the loader's code; ucx with a token is refused. */
static void test_auth_bad_token_file(void **state)
{
    (void)state;
    char open_tok[300], missing[300];
    snprintf(open_tok, sizeof(open_tok), "%s/open.token", g_dir);
    snprintf(missing, sizeof(missing), "%s/missing.token", g_dir);
    write_token(open_tok, SECRET_A);
    assert_int_equal(chmod(open_tok, 0644), 0);
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                          .auth_token_file = open_tok};
    mc_te_t *te = NULL;
    assert_int_equal(mc_te_create(&cfg, &te), MC_ERR_PERMISSION);
    assert_null(te);
    cfg.auth_token_file = missing;
    assert_int_equal(mc_te_create(&cfg, &te), MC_ERR_FILE_OPEN_FAIL);
    assert_null(te);
    /* ucx cannot prove the token on its own connections: refused, not run half-protected */
    cfg.auth_token_file = g_tok_a;
    cfg.protocol = "ucx";
    assert_int_equal(mc_te_create(&cfg, &te), MC_ERR_NOT_SUPPORTED);
    assert_null(te);
}

/* ---- a fake server: serves GET_DESC with a given body, answers every other frame OK ------ */

typedef struct fake {
    int lfd;
    mc_auth_t *auth;          /* what it can prove; NULL = nothing */
    const char *desc;         /* GET_DESC answer */
    _Atomic uint64_t frames;  /* frames other than GET_DESC it received */
    _Atomic uint64_t payload; /* WRITE payload bytes it took */
    _Atomic int stop;
    pthread_t th;
} fake_t;

static void fake_serve(fake_t *f, int fd)
{
    uint8_t hello[MC_AUTH_HELLO_SIZE], proof[MC_AUTH_PROOF_SIZE], result[MC_AUTH_RESULT_SIZE];
    mc_auth_server_hs_t hs;
    mc_auth_server_hello(f->auth, &hs, hello);
    uint64_t dl = mc_now_ns() + NS(3000);
    if (mc_net_send_all(fd, hello, sizeof(hello), dl) != MC_OK ||
        mc_net_recv_all(fd, proof, sizeof(proof), dl) != MC_OK)
        return;
    mc_auth_peer_t peer;
    mc_auth_server_check(f->auth, &hs, proof, result, &peer);
    if (mc_net_send_all(fd, result, sizeof(result), dl) != MC_OK)
        return;
    for (;;) {
        uint8_t hb[MC_TE_FRAME_HDR_SIZE];
        mc_te_frame_t h;
        if (mc_net_recv_all(fd, hb, sizeof(hb), mc_now_ns() + NS(3000)) != MC_OK ||
            mc_te_frame_decode(hb, sizeof(hb), &h) != MC_OK)
            return;
        mc_te_frame_t r = {.magic = MC_TE_FRAME_MAGIC, .version = MC_TE_FRAME_VERSION,
                           .opcode = (uint16_t)(h.opcode | MC_TE_OP_RESPONSE), .id = h.id,
                           .addr = h.addr};
        if (h.opcode == MC_TE_OP_GET_DESC) {
            r.length = strlen(f->desc);
            mc_te_frame_encode(&r, hb);
            if (mc_net_send_all(fd, hb, sizeof(hb), 0) != MC_OK ||
                mc_net_send_all(fd, f->desc, r.length, 0) != MC_OK)
                return;
            continue;
        }
        atomic_fetch_add(&f->frames, 1);
        if (h.opcode == MC_TE_OP_WRITE && h.length <= (64u << 20)) {
            uint8_t *b = malloc(h.length ? h.length : 1);
            mc_status_t st = mc_net_recv_all(fd, b, h.length, mc_now_ns() + NS(3000));
            free(b);
            if (st != MC_OK)
                return;
            atomic_fetch_add(&f->payload, h.length);
        }
        mc_te_frame_encode(&r, hb); /* "done", whatever it was */
        if (mc_net_send_all(fd, hb, sizeof(hb), 0) != MC_OK)
            return;
    }
}

static void *fake_main(void *arg)
{
    fake_t *f = arg;
    while (!atomic_load(&f->stop)) {
        struct pollfd p = {.fd = f->lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(f->lfd, NULL, NULL);
        if (fd < 0)
            continue;
        fake_serve(f, fd);
        close(fd);
    }
    return NULL;
}

static void fake_start(fake_t *f, uint16_t port, mc_auth_t *auth, const char *desc)
{
    memset(f, 0, sizeof(*f));
    f->auth = auth;
    f->desc = desc;
    uint16_t got;
    assert_int_equal(mc_net_listen("127.0.0.1", port, 0, &f->lfd, &got), MC_OK);
    assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_stop(fake_t *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->th, NULL);
    close(f->lfd);
}

/* The descriptor JSON a segment at 127.0.0.1:port with one buffer would publish. */
static char *desc_json(uint16_t port, const char *name_override)
{
    mc_segment_desc_t d;
    memset(&d, 0, sizeof(d));
    if (name_override)
        snprintf(d.name, sizeof(d.name), "%s", name_override);
    else
        snprintf(d.name, sizeof(d.name), "127.0.0.1:%u", port);
    snprintf(d.protocol, sizeof(d.protocol), "tcp");
    d.tcp_data_port = port;
    mc_buffer_desc_t b = {.location = "cpu:0", .addr = 1u << 20, .length = 1u << 20,
                          .shm_fd = -1};
    d.buffers = &b;
    d.n_buffers = 1;
    char *json = NULL;
    assert_int_equal(mc_segment_desc_to_json(&d, &json), MC_OK);
    return json;
}

/* A segment's port taken over by a server without the cluster secret: an engine with a
 * keyring never sends it a byte of data (the write fails with AUTH_FAILED, nothing counted
 * as written); a server that does hold the secret but hands out an unsigned, a tampered or
 * another segment's signed descriptor is refused as well (AUTH_FAILED). */
static void test_auth_fake_server(void **state)
{
    (void)state;
    uint16_t port;
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    char name[64];
    snprintf(name, sizeof(name), "127.0.0.1:%u", port);
    const char *args[] = {"--name", name, "--buffers", "1", "--size", "1048576", "--token",
                          g_tok_a, NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    mc_te_t *te = engine(g_tok_a, 3000, 0, 0);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, name, &seg), MC_OK);
    uint8_t *lb = local_buf(MiB);
    mc_te_xfer_status_t st;
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 4096, &st), MC_OK);
    uint64_t target = p.addr[0];
    te_peer_stop(&p, SIGKILL);

    /* the impostor on the same port, answering every frame with success */
    char *plain = desc_json(port, NULL);
    fake_t f;
    fake_start(&f, port, NULL, plain);
    for (int i = 0; i < 20; i++) {
        mc_status_t r = xfer(te, MC_TE_WRITE, lb, seg, target, 64 * 1024, &st);
        assert_int_not_equal(r, MC_OK);
        assert_int_equal(st.transferred, 0);
        mc_sleep_ms(5);
    }
    assert_int_equal(mc_te_segment_close(te, seg), MC_OK);
    assert_int_not_equal(mc_te_segment_open(te, name, &seg), MC_OK);
    assert_int_equal(atomic_load(&f.frames), 0);
    assert_int_equal(atomic_load(&f.payload), 0);
    fake_stop(&f);

    /* an insider (holds the secret) serving descriptors that are not the cluster's */
    mc_auth_t *a = keyring(SECRET_A);
    char *signed_ok = NULL, *tampered = NULL, *other = NULL;
    size_t l;
    assert_int_equal(mc_segment_desc_seal(a, plain, strlen(plain), &signed_ok, &l), MC_OK);
    tampered = strdup(signed_ok);
    char *port_at = strstr(tampered, "\"tcp_data_port\":");
    assert_non_null(port_at);
    port_at[strlen("\"tcp_data_port\":")] = port_at[strlen("\"tcp_data_port\":")] == '1' ? '2'
                                                                                      : '1';
    char *other_plain = desc_json(port, "127.0.0.1:1");
    assert_int_equal(mc_segment_desc_seal(a, other_plain, strlen(other_plain), &other, &l),
                     MC_OK);
    const char *bodies[] = {plain, tampered, other, signed_ok};
    for (int i = 0; i < 4; i++) {
        fake_start(&f, port, a, bodies[i]);
        mc_te_t *te2 = engine(g_tok_a, 3000, 0, 0);
        mc_status_t r = mc_te_segment_open(te2, name, &seg);
        if (i < 3)
            assert_int_equal(r, MC_ERR_AUTH);
        else /* control: the cluster's own signature on the right name is accepted */
            assert_int_equal(r, MC_OK);
        mc_te_destroy(te2);
        fake_stop(&f);
    }
    mc_auth_free(a);
    free(plain);
    free(other_plain);
    free(signed_ok);
    free(tampered);
    free(other);
    munmap(lb, MiB);
    mc_te_destroy(te);
}

/* ---- a metadata server anyone can write to --------------------------------------------- */

/* An open HTTP metadata server: a target publishes its signed descriptor there; an anonymous
 * writer replaces it with an unsigned one, and with one signed by another cluster, both
 * pointing at a fake server that answers every frame with success. An engine with the token
 * refuses both descriptors (AUTH_FAILED): 20 writes fail, nothing is claimed written and the
 * fake sees no frame. */
static void test_auth_http_meta(void **state)
{
    (void)state;
    uint16_t mport;
    char uri[128];
    pid_t srv = te_meta_server_start(&mport, uri, sizeof(uri));
    const char *args[] = {"--meta", uri, "--buffers", "1", "--size", "1048576", "--token",
                          g_tok_a, NULL};
    te_peer_t p;
    assert_int_equal(te_peer_start(&p, args), 0);
    mc_te_config_t cfg = {.metadata_uri = uri, .local_server_name = "127.0.0.1",
                          .protocol = "tcp", .transfer_timeout_ms = 3000,
                          .auth_token_file = g_tok_a};
    mc_te_t *te;
    assert_int_equal(mc_te_create(&cfg, &te), MC_OK);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_OK);
    uint8_t *lb = local_buf(MiB);
    mc_te_xfer_status_t st;
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p.addr[0], 65536, &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, 65536, 0, 0, 1), -1);

    uint16_t fport;
    assert_int_equal(mc_net_free_port(&fport), MC_OK);
    char *forged = desc_json(fport, p.name); /* our segment's name, the fake's port */
    fake_t f;
    fake_start(&f, fport, NULL, forged);
    mc_auth_t *b = keyring(SECRET_B);
    char *other_signed = NULL;
    size_t l;
    assert_int_equal(mc_segment_desc_seal(b, forged, strlen(forged), &other_signed, &l), MC_OK);
    mc_meta_t *anon;
    assert_int_equal(mc_meta_open(uri, &anon), MC_OK);
    char key[MC_TE_NAME_MAX + 32];
    snprintf(key, sizeof(key), "%s%s", MC_META_SEGMENT_PREFIX, p.name);
    const char *values[] = {forged, other_signed};
    for (int k = 0; k < 2; k++) {
        assert_int_equal(mc_meta_put(anon, key, values[k]), MC_OK); /* the server is open */
        assert_int_equal(mc_te_segment_close(te, seg), MC_OK);
        assert_int_equal(mc_te_segment_open(te, p.name, &seg), MC_ERR_AUTH);
        for (int i = 0; i < 20; i++) {
            mc_status_t r = xfer(te, MC_TE_WRITE, lb, seg, 1u << 20, 4096, &st);
            assert_int_not_equal(r, MC_OK);
            assert_int_equal(st.transferred, 0);
        }
    }
    assert_int_equal(atomic_load(&f.frames), 0);
    peer_check(&p, "forged descriptors");
    mc_meta_close(anon);
    fake_stop(&f);
    mc_auth_free(b);
    free(forged);
    free(other_signed);
    munmap(lb, MiB);
    mc_te_destroy(te);
    te_peer_stop(&p, 0);
    kill(srv, SIGTERM);
    int status;
    waitpid(srv, &status, 0);
}

/* ---- budgets ---------------------------------------------------------------------------- */

static void wait_stats(mc_te_t *te, mc_te_conn_stats_t *s, int (*ok)(const mc_te_conn_stats_t *),
                       int max_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)max_ms;
    for (;;) {
        mc_te_conn_stats(te, s);
        if (ok(s))
            return;
        if (mc_now_ms() > deadline)
            fail_msg("stats not reached: open %llu unauth %llu idle %llu slow %llu displaced "
                     "%llu refused %llu", (unsigned long long)s->open,
                     (unsigned long long)s->closed_unauth, (unsigned long long)s->closed_idle,
                     (unsigned long long)s->closed_slow, (unsigned long long)s->displaced,
                     (unsigned long long)s->refused_full);
        mc_sleep_ms(10);
    }
}

/* Displaced connections count as open until their loop has closed them, so the cap holds once
 * the loops caught up, not at the instant of displacement. */
static int flood_displaced(const mc_te_conn_stats_t *s)
{
    return s->displaced >= 100 && s->open <= 32;
}
static int flood_gone(const mc_te_conn_stats_t *s) { return s->closed_unauth >= 1 && s->open <= 8; }

/* More idle unauthenticated connections than the cap (32) do not lock out a peer with the
 * token: each new connection displaces the oldest unauthenticated one, transfers work while
 * the flood holds its sockets open, and the flood is closed by the handshake deadline. */
static void test_flood_unauthenticated(void **state)
{
    (void)state;
    enum { CAP = 32, FLOOD = 160 };
    mc_te_t *srv = engine(g_tok_a, 5000, 0, CAP);
    uint8_t *sb = local_buf(MiB);
    te_pattern_fill(sb, MiB, 0, 0, 1);
    assert_int_equal(mc_te_register(srv, sb, MiB, "cpu:0"), MC_OK);
    int flood[FLOOD];
    for (int i = 0; i < FLOOD; i++)
        flood[i] = tcp_to(mc_te_local_name(srv)); /* never proves anything */
    mc_te_conn_stats_t s;
    wait_stats(srv, &s, flood_displaced, 5000); /* also: open <= CAP */
    uint64_t t0 = mc_now_ms();
    mc_te_t *cli = engine(g_tok_a, 5000, 0, 0);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(cli, mc_te_local_name(srv), &seg), MC_OK);
    uint8_t *lb = local_buf(MiB);
    mc_te_xfer_status_t st;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(xfer(cli, MC_TE_READ, lb, seg, (uint64_t)(uintptr_t)sb, MiB, &st), MC_OK);
        assert_int_equal(te_pattern_check(lb, MiB, 0, 0, 1), -1);
    }
    /* well before the 5 s handshake deadline: room came from displacing, not from timeouts */
    assert_true(mc_now_ms() - t0 < MC_AUTH_HANDSHAKE_TIMEOUT_MS);
    mc_te_conn_stats(srv, &s);
    assert_int_equal(s.refused_full, 0);
    /* the rest of the flood: closed at the handshake deadline */
    wait_stats(srv, &s, flood_gone, MC_AUTH_HANDSHAKE_TIMEOUT_MS + 5000);
    for (int i = 0; i < FLOOD; i++)
        close(flood[i]);
    mc_te_destroy(cli);
    mc_te_destroy(srv);
    munmap(lb, MiB);
    munmap(sb, MiB);
}

static int idle_closed(const mc_te_conn_stats_t *s) { return s->closed_idle >= 1; }
static int slow_closed(const mc_te_conn_stats_t *s) { return s->closed_slow >= 1; }

/* Idle connections are closed after tcp_idle_timeout_s; the client's next transfer opens a
 * new one at once. */
static void test_idle_timeout(void **state)
{
    (void)state;
    mc_te_t *srv = engine(g_tok_a, 5000, 1, 0);
    uint8_t *sb = local_buf(MiB);
    te_pattern_fill(sb, MiB, 0, 0, 1);
    assert_int_equal(mc_te_register(srv, sb, MiB, "cpu:0"), MC_OK);
    mc_te_t *cli = engine(g_tok_a, 5000, 0, 0);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(cli, mc_te_local_name(srv), &seg), MC_OK);
    uint8_t *lb = local_buf(MiB);
    mc_te_xfer_status_t st;
    assert_int_equal(xfer(cli, MC_TE_READ, lb, seg, (uint64_t)(uintptr_t)sb, 4096, &st), MC_OK);
    mc_te_conn_stats_t s;
    wait_stats(srv, &s, idle_closed, 5000);
    for (int i = 0; i < 3; i++) { /* straight after the close, and again */
        assert_int_equal(xfer(cli, MC_TE_READ, lb, seg, (uint64_t)(uintptr_t)sb, MiB, &st), MC_OK);
        assert_int_equal(te_pattern_check(lb, MiB, 0, 0, 1), -1);
    }
    mc_te_destroy(cli);
    mc_te_destroy(srv);
    munmap(lb, MiB);
    munmap(sb, MiB);
}

/* A WRITE whose payload trickles in (a byte every 100 ms: never idle) is closed once the
 * frame is open longer than twice the transfer timeout (here 2 x 500 ms). */
static void test_slow_frame(void **state)
{
    (void)state;
    mc_te_t *srv = engine(g_tok_a, 500, 0, 0);
    uint8_t *sb = local_buf(MiB);
    assert_int_equal(mc_te_register(srv, sb, MiB, "cpu:0"), MC_OK);
    mc_auth_t *a = keyring(SECRET_A);
    int fd = tcp_to(mc_te_local_name(srv));
    assert_int_equal(mc_auth_client_handshake(fd, a, mc_now_ns() + NS(5000)), MC_OK);
    frame_send(fd, MC_TE_OP_WRITE, 1, (uint64_t)(uintptr_t)sb, 1000);
    uint64_t t0 = mc_now_ms();
    bool closed = false;
    while (!closed && mc_now_ms() - t0 < 10000) {
        closed = send(fd, "x", 1, MSG_NOSIGNAL) != 1;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (!closed && poll(&p, 1, 100) > 0) {
            uint8_t b[64];
            closed = recv(fd, b, sizeof(b), MSG_DONTWAIT) <= 0;
        }
    }
    assert_true(closed);
    mc_te_conn_stats_t s;
    wait_stats(srv, &s, slow_closed, 1000);
    assert_true(mc_now_ms() - t0 >= 1000);
    close(fd);
    mc_auth_free(a);
    mc_te_destroy(srv);
    munmap(sb, MiB);
}

/* Tenant tokens and descriptors: a storage server whose file holds the cluster token and a
 * tenant's publishes a descriptor signed with the cluster token; a reader holding only the
 * tenant token reads it unchecked and moves bytes (the data port's mutual handshake proves the
 * server holds its secret); a descriptor signed with a tenant token is refused by a cluster
 * reader, and an engine with only a tenant token cannot sign one at all. */
static void test_tenant_descriptors(void **state)
{
    (void)state;
    char both[320], tenant[320];
    snprintf(both, sizeof(both), "%s/both.token", g_dir);
    snprintf(tenant, sizeof(tenant), "%s/tenant.token", g_dir);
    write_token(both, SECRET_A "\n" SECRET_B " tenant=t1");
    write_token(tenant, SECRET_B " tenant=t1");
    mc_te_t *srv = engine(both, 5000, 0, 0);
    uint8_t *sb = local_buf(MiB);
    te_pattern_fill(sb, MiB, 0, 0, 7);
    assert_int_equal(mc_te_register(srv, sb, MiB, "cpu:0"), MC_OK);

    mc_te_t *cli = engine(tenant, 5000, 0, 0);
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(cli, mc_te_local_name(srv), &seg), MC_OK);
    uint8_t *lb = local_buf(MiB);
    mc_te_xfer_status_t st;
    mc_auth_t *ring_both = NULL, *ring_tenant = NULL;
    assert_int_equal(mc_auth_load(both, &ring_both), MC_OK);
    assert_int_equal(mc_auth_load(tenant, &ring_tenant), MC_OK);
    /* the tenant's data requests need a grant (docs/security.md, "Data ports and tenants") */
    assert_int_equal(xfer(cli, MC_TE_READ, lb, seg, (uint64_t)(uintptr_t)sb, MiB, &st),
                     MC_ERR_PERMISSION);
    uint8_t g[MC_GRANT_SIZE(1)];
    size_t gl;
    mc_grant_range_t r = {(uint64_t)(uintptr_t)sb, MiB};
    assert_int_equal(mc_grant_sign(ring_both, mc_te_local_name(srv), "t1", MC_GRANT_READ,
                                   mc_wall_ms() + 60000, &r, 1, g, &gl), MC_OK);
    assert_int_equal(mc_te_grant_present(cli, seg, g, gl), MC_OK);
    assert_int_equal(xfer(cli, MC_TE_READ, lb, seg, (uint64_t)(uintptr_t)sb, MiB, &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, MiB, 0, 0, 7), -1);

    /* signatures: cluster keys only */
    char json[] = "{\"name\":\"x\"}";
    char *sealed = NULL;
    size_t sl = 0;
    assert_int_equal(mc_segment_desc_seal(ring_tenant, json, strlen(json), &sealed, &sl),
                     MC_ERR_PERMISSION);
    uint8_t mac[MC_AUTH_MAC_SIZE];
    char hex[2 * MC_AUTH_MAC_SIZE + 1], forged[256];
    assert_int_equal(mc_auth_sign(ring_tenant, MC_SEGMENT_DESC_MAC_LABEL, json, strlen(json), mac),
                     MC_OK);
    mc_auth_hex(mac, sizeof(mac), hex);
    int n = snprintf(forged, sizeof(forged), "{\"mac\":\"%s\",\"desc\":%s}", hex, json);
    const char *inner;
    size_t il;
    assert_int_equal(mc_segment_desc_unseal(ring_both, forged, (size_t)n, &inner, &il, NULL),
                     MC_ERR_AUTH);
    assert_int_equal(mc_segment_desc_seal(ring_both, json, strlen(json), &sealed, &sl), MC_OK);
    assert_int_equal(mc_segment_desc_unseal(ring_both, sealed, sl, &inner, &il, NULL), MC_OK);
    mc_free(sealed);
    mc_auth_free(ring_both);
    mc_auth_free(ring_tenant);
    mc_te_destroy(cli);
    mc_te_destroy(srv);
    munmap(lb, MiB);
    munmap(sb, MiB);
}

/* ---- tenants on the data port (docs/security.md, "Data ports and tenants") -------------- */

/* A raw connection that proved `secret` (tenant-bound when tenant is not NULL). */
static int raw_conn(const char *name, const char *secret, const char *tenant)
{
    mc_auth_t *ring = NULL;
    assert_int_equal(mc_auth_from_secret(secret, tenant, &ring), MC_OK);
    int fd = tcp_to(name);
    assert_int_equal(mc_auth_client_handshake(fd, ring, mc_now_ns() + NS(5000)), MC_OK);
    mc_auth_free(ring);
    return fd;
}

/* A one-range grant signed with the cluster secret A (what the master does). */
static size_t grant1(const char *seg, const char *tenant, uint8_t access, uint64_t expiry_ms,
                     uint64_t addr, uint64_t len, uint8_t *out)
{
    mc_auth_t *ring = keyring(SECRET_A);
    mc_grant_range_t r = {addr, len};
    size_t gl = 0;
    assert_int_equal(mc_grant_sign(ring, seg, tenant, access, expiry_ms, &r, 1, out, &gl), MC_OK);
    mc_auth_free(ring);
    return gl;
}

static void raw_grant(int fd, const uint8_t *g, size_t len)
{
    frame_send(fd, MC_TE_OP_GRANT, 0, 0, len);
    assert_int_equal(mc_net_send_all(fd, g, len, mc_now_ns() + NS(5000)), MC_OK);
}

/* Status of one raw request (READ data, if any, into out; WRITE sends `data`). */
static mc_status_t raw_req(int fd, uint16_t op, uint64_t id, uint64_t addr, uint64_t len,
                           const void *data, void *out)
{
    frame_send(fd, op, id, addr, len);
    if (op == MC_TE_OP_WRITE)
        assert_int_equal(mc_net_send_all(fd, data, len, mc_now_ns() + NS(5000)), MC_OK);
    if (op == MC_TE_OP_CMA_READ) {
        uint8_t body[MC_TE_FRAME_CMA_PAYLOAD] = {0};
        uint64_t pid = (uint64_t)getpid(), la = (uint64_t)(uintptr_t)out;
        memcpy(body, &pid, 8);
        memcpy(body + 8, &la, 8);
        assert_int_equal(mc_net_send_all(fd, body, sizeof(body), mc_now_ns() + NS(5000)), MC_OK);
    }
    uint8_t hb[MC_TE_FRAME_HDR_SIZE];
    mc_te_frame_t h;
    assert_int_equal(mc_net_recv_all(fd, hb, sizeof(hb), mc_now_ns() + NS(5000)), MC_OK);
    assert_int_equal(mc_te_frame_decode(hb, sizeof(hb), &h), MC_OK);
    assert_int_equal(h.id, id);
    assert_int_equal(h.opcode, op | MC_TE_OP_RESPONSE);
    if (h.status == MC_OK && op == MC_TE_OP_READ) {
        assert_int_equal(h.length, len);
        assert_int_equal(mc_net_recv_all(fd, out, len, mc_now_ns() + NS(5000)), MC_OK);
    } else {
        assert_int_equal(h.length, 0);
    }
    return h.status;
}

/* A storage server with a cluster secret and two tenant lines. Tenant-bound peers read and
 * write only inside grants they presented (right segment, tenant, access, unexpired, a
 * cluster mac); everything else is PERMISSION_DENIED and the connection keeps serving; a
 * cluster peer is not restricted; CMA is refused to a tenant; a connection keeps the newest
 * 4096 granted ranges. */
static void test_tenant_grants(void **state)
{
    (void)state;
    char file[320];
    snprintf(file, sizeof(file), "%s/three.token", g_dir);
    write_token(file, SECRET_A "\n" SECRET_B " tenant=t1\n" SECRET_C " tenant=t2");
    mc_te_t *srv = engine(file, 5000, 0, 0);
    uint8_t *sb = local_buf(MiB);
    te_pattern_fill(sb, MiB, 0, 0, 3);
    assert_int_equal(mc_te_register(srv, sb, MiB, "cpu:0"), MC_OK);
    const char *seg = mc_te_local_name(srv);
    uint64_t base = (uint64_t)(uintptr_t)sb, exp = mc_wall_ms() + 60000;
    uint8_t g[MC_GRANT_SIZE(1)], data[8192];
    size_t gl;

    int fd = raw_conn(seg, SECRET_B, "t1");
    /* no grant: refused, the connection stays */
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 1, base, 4096, NULL, data), MC_ERR_PERMISSION);
    gl = grant1(seg, "t1", MC_GRANT_READ, exp, base, 65536, g);
    raw_grant(fd, g, gl); /* pipelined: no answer */
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 2, base + 4096, 4096, NULL, data), MC_OK);
    assert_int_equal(te_pattern_check(data, 4096, 0, 4096, 3), -1);
    /* outside, straddling the end, a read grant used to WRITE: refused, then served again */
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 3, base + 65536, 16, NULL, data),
                     MC_ERR_PERMISSION);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 4, base + 65535, 2, NULL, data),
                     MC_ERR_PERMISSION);
    memset(data, 0xAB, sizeof(data));
    assert_int_equal(raw_req(fd, MC_TE_OP_WRITE, 5, base, 4096, data, NULL), MC_ERR_PERMISSION);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 6, base, 4096, NULL, data), MC_OK);
    assert_int_equal(te_pattern_check(data, 4096, 0, 0, 3), -1); /* the WRITE changed nothing */
    /* CMA reaches the whole segment: never for a tenant, even inside a grant */
    assert_int_equal(raw_req(fd, MC_TE_OP_CMA_READ, 7, base, 4096, NULL, data),
                     MC_ERR_PERMISSION);
    /* a forged (one bit), an expired, another segment's grant: dropped, their ranges refused */
    uint64_t far = base + 512 * 1024;
    gl = grant1(seg, "t1", MC_GRANT_READ, exp, far, 4096, g);
    g[gl - 5] ^= 0x10;
    raw_grant(fd, g, gl);
    gl = grant1(seg, "t1", MC_GRANT_READ, mc_wall_ms() - 1, far, 4096, g);
    raw_grant(fd, g, gl);
    gl = grant1("127.0.0.1:1", "t1", MC_GRANT_READ, exp, far, 4096, g);
    raw_grant(fd, g, gl);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 8, far, 4096, NULL, data), MC_ERR_PERMISSION);
    /* a write grant: WRITE served (the pattern's own bytes, so the buffer stays checkable) */
    gl = grant1(seg, "t1", MC_GRANT_WRITE, exp, far, 4096, g);
    raw_grant(fd, g, gl);
    te_pattern_fill(data, 4096, 0, 512 * 1024, 3);
    assert_int_equal(raw_req(fd, MC_TE_OP_WRITE, 9, far, 4096, data, NULL), MC_OK);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 10, far, 4096, NULL, data), MC_ERR_PERMISSION);
    close(fd);

    /* tenant t1's grant presented by a t2 peer */
    fd = raw_conn(seg, SECRET_C, "t2");
    gl = grant1(seg, "t1", MC_GRANT_READ, exp, base, 65536, g);
    raw_grant(fd, g, gl);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 1, base, 4096, NULL, data), MC_ERR_PERMISSION);
    gl = grant1(seg, "t2", MC_GRANT_READ, exp, base, 65536, g);
    raw_grant(fd, g, gl);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 2, base, 4096, NULL, data), MC_OK);
    close(fd);

    /* a cluster peer: anything registered, no grant */
    fd = raw_conn(seg, SECRET_A, NULL);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 1, far, 4096, NULL, data), MC_OK);
    assert_int_equal(te_pattern_check(data, 4096, 0, 512 * 1024, 3), -1);
    close(fd);

    /* a tenant's connections share its granted ranges: what one presented, another reads;
     * the same grant presented again on the other is verified, not kept twice */
    fd = raw_conn(seg, SECRET_B, "t1");
    int fd2 = raw_conn(seg, SECRET_B, "t1");
    gl = grant1(seg, "t1", MC_GRANT_READ, exp, base + 8192, 4096, g);
    raw_grant(fd, g, gl);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 1, base + 8192, 4096, NULL, data), MC_OK);
    assert_int_equal(raw_req(fd2, MC_TE_OP_READ, 1, base + 8192, 4096, NULL, data), MC_OK);
    assert_int_equal(te_pattern_check(data, 4096, 0, 8192, 3), -1);
    raw_grant(fd2, g, gl);
    assert_int_equal(raw_req(fd2, MC_TE_OP_READ, 2, base + 8192, 4096, NULL, data), MC_OK);
    mc_te_conn_stats_t cs;
    mc_te_conn_stats(srv, &cs);
    assert_int_equal(cs.grants_shared, 1);
    close(fd);
    close(fd2);

    /* a connection alone of its tenant keeps MC_GRANT_WINDOW_RANGES granted ranges: the oldest
     * go first (once the server has closed the others: their count scales the cap) */
    uint64_t deadline = mc_now_ms() + 5000;
    for (mc_te_conn_stats(srv, &cs); cs.open > 0 && mc_now_ms() < deadline;
         mc_te_conn_stats(srv, &cs))
        mc_sleep_ms(1);
    assert_int_equal(cs.open, 0);
    fd = raw_conn(seg, SECRET_B, "t1");
    gl = grant1(seg, "t1", MC_GRANT_READ, exp, base, 4096, g);
    raw_grant(fd, g, gl);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 1, base, 4096, NULL, data), MC_OK);
    mc_auth_t *ring = keyring(SECRET_A);
    mc_grant_range_t *rs = calloc(MC_GRANT_MAX_RANGES, sizeof(*rs));
    uint8_t *big = malloc(MC_GRANT_MAX_SIZE);
    const uint32_t n_big = MC_GRANT_WINDOW_RANGES / MC_GRANT_MAX_RANGES;
    for (uint32_t k = 0; k < n_big; k++) { /* one-byte ranges past the first 4 KiB */
        for (uint32_t i = 0; i < MC_GRANT_MAX_RANGES; i++)
            rs[i] = (mc_grant_range_t){base + 4096 + (uint64_t)k * MC_GRANT_MAX_RANGES + i, 1};
        assert_int_equal(mc_grant_sign(ring, seg, "t1", MC_GRANT_READ, exp, rs,
                                       MC_GRANT_MAX_RANGES, big, &gl), MC_OK);
        raw_grant(fd, big, gl);
    }
    const uint64_t last = base + 4096 + (uint64_t)n_big * MC_GRANT_MAX_RANGES - 1;
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 2, base, 4096, NULL, data), MC_ERR_PERMISSION);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 3, last, 1, NULL, data), MC_OK);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 5, base + 4096, 1, NULL, data), MC_OK);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 4, base + 4096, 2, NULL, data), MC_ERR_PERMISSION);
    free(big);
    free(rs);
    mc_auth_free(ring);
    close(fd);

    mc_te_conn_stats(srv, &cs);
    /* requests 1, 3, 4, 5, 7, 8, 10, t2's 1, and 2, 4 of the capped connection */
    assert_int_equal(cs.denied, 10);
    assert_int_equal(cs.grants_refused, 4); /* forged, expired, other segment, other tenant */
    mc_te_destroy(srv);

    /* A server without a cluster key cannot check grants: its own tenant is served, another
     * tenant is refused whatever it presents. */
    snprintf(file, sizeof(file), "%s/tenants.token", g_dir);
    write_token(file, SECRET_B " tenant=t1\n" SECRET_C " tenant=t2");
    srv = engine(file, 5000, 0, 0);
    assert_int_equal(mc_te_register(srv, sb, MiB, "cpu:0"), MC_OK);
    seg = mc_te_local_name(srv);
    fd = raw_conn(seg, SECRET_B, "t1");
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 1, base, 4096, NULL, data), MC_OK);
    close(fd);
    fd = raw_conn(seg, SECRET_C, "t2");
    gl = grant1(seg, "t2", MC_GRANT_READ, exp, base, 65536, g);
    raw_grant(fd, g, gl);
    assert_int_equal(raw_req(fd, MC_TE_OP_READ, 1, base, 4096, NULL, data), MC_ERR_PERMISSION);
    close(fd);
    mc_te_destroy(srv);
    munmap(sb, MiB);
}

/* Engines: a tenant-bound engine uses tcp to a same-host peer whose memory shm could map
 * (protocol auto), presents grants (one frame for a batch of 128 reads) and is refused
 * outside them. */
static void test_tenant_engine(void **state)
{
    (void)state;
    char file[320], tfile[320];
    snprintf(file, sizeof(file), "%s/srv.token", g_dir);
    snprintf(tfile, sizeof(tfile), "%s/t1.token", g_dir);
    write_token(file, SECRET_A "\n" SECRET_B " tenant=t1");
    write_token(tfile, SECRET_B " tenant=t1");
    mc_te_config_t cfg = {.metadata_uri = "P2PHANDSHAKE", .local_server_name = "127.0.0.1",
                          .protocol = "auto", .transfer_timeout_ms = 5000,
                          .auth_token_file = file};
    mc_te_t *srv = NULL, *cli = NULL;
    assert_int_equal(mc_te_create(&cfg, &srv), MC_OK);
    uint8_t *sb = mc_te_alloc_shareable(srv, MiB); /* memfd: shm could map it */
    assert_non_null(sb);
    te_pattern_fill(sb, MiB, 0, 0, 5);
    assert_int_equal(mc_te_register(srv, sb, MiB, "cpu:0"), MC_OK);
    cfg.auth_token_file = tfile;
    assert_int_equal(mc_te_create(&cfg, &cli), MC_OK);
    assert_true(mc_te_tenant_bound(cli));
    mc_te_segment_t seg;
    assert_int_equal(mc_te_segment_open(cli, mc_te_local_name(srv), &seg), MC_OK);
    uint8_t *lb = local_buf(MiB);
    uint64_t base = (uint64_t)(uintptr_t)sb;
    mc_te_xfer_status_t st;
    /* over shm this read would be served: the tenant-bound engine goes over tcp instead */
    assert_int_equal(xfer(cli, MC_TE_READ, lb, seg, base, 4096, &st), MC_ERR_PERMISSION);
    assert_int_equal(st.state, MC_TE_FAILED);
    enum { N = 128, SZ = 4096 };
    mc_grant_range_t r[N];
    mc_te_request_t reqs[N];
    mc_te_xfer_status_t sts[N];
    for (int i = 0; i < N; i++) {
        r[i] = (mc_grant_range_t){base + (uint64_t)i * 2 * SZ, SZ};
        reqs[i] = (mc_te_request_t){.opcode = MC_TE_READ, .local = lb + (size_t)i * SZ,
                                    .target = seg, .target_addr = r[i].addr, .length = SZ};
    }
    mc_auth_t *ring = keyring(SECRET_A);
    uint8_t *g = malloc(MC_GRANT_SIZE(N));
    size_t gl;
    assert_int_equal(mc_grant_sign(ring, mc_te_local_name(srv), "t1", MC_GRANT_READ,
                                   mc_wall_ms() + 60000, r, N, g, &gl), MC_OK);
    assert_int_equal(mc_te_grant_present(cli, seg, g, gl), MC_OK);
    assert_int_equal(mc_te_grant_present(cli, seg, g, gl - 1), MC_ERR_INVALID_PARAMS);
    assert_int_equal(mc_te_transfer_sync(cli, reqs, N, sts), MC_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(te_pattern_check(lb + (size_t)i * SZ, SZ, 0, (uint64_t)i * 2 * SZ, 5), -1);
    /* the gaps between the granted ranges are not granted */
    assert_int_equal(xfer(cli, MC_TE_READ, lb, seg, base + SZ, SZ, &st), MC_ERR_PERMISSION);
    assert_int_equal(xfer(cli, MC_TE_WRITE, lb, seg, base, SZ, &st), MC_ERR_PERMISSION);
    /* 16 full grants (1,024 ranges of 64 bytes each: the whole segment), 256 KiB of grants,
     * more than one GRANT frame carries: a connection catching up gets them all, the oldest
     * too, so a range of the first and one of the last are both read */
    enum { NG = 16, RS = 64 };
    mc_grant_range_t *rs = calloc(MC_GRANT_MAX_RANGES, sizeof(*rs));
    uint8_t *big = malloc(MC_GRANT_MAX_SIZE);
    for (uint32_t k = 0; k < NG; k++) {
        for (uint32_t i = 0; i < MC_GRANT_MAX_RANGES; i++)
            rs[i] = (mc_grant_range_t){base + ((uint64_t)k * MC_GRANT_MAX_RANGES + i) * RS, RS};
        assert_int_equal(mc_grant_sign(ring, mc_te_local_name(srv), "t1", MC_GRANT_READ,
                                       mc_wall_ms() + 60000, rs, MC_GRANT_MAX_RANGES, big, &gl),
                         MC_OK);
        assert_int_equal(mc_te_grant_present(cli, seg, big, gl), MC_OK);
    }
    const uint64_t offs[] = {5 * RS, MiB - 3 * RS, 700 * RS};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(xfer(cli, MC_TE_READ, lb, seg, base + offs[i], RS, &st), MC_OK);
        assert_int_equal(te_pattern_check(lb, RS, 0, offs[i], 5), -1);
    }
    free(big);
    free(rs);
    mc_te_conn_stats_t cs;
    mc_te_conn_stats(srv, &cs);
    assert_int_equal(cs.denied, 3);
    assert_int_equal(cs.grants_refused, 0);
    free(g);
    mc_auth_free(ring);
    mc_te_destroy(cli);
    mc_te_destroy(srv);
    munmap(lb, MiB);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc > 1)
        cmocka_set_test_filter(argv[1]);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_auth_raw_clients),
        cmocka_unit_test(test_auth_engines),
        cmocka_unit_test(test_auth_bad_token_file),
        cmocka_unit_test(test_auth_fake_server),
        cmocka_unit_test(test_auth_http_meta),
        cmocka_unit_test(test_flood_unauthenticated),
        cmocka_unit_test(test_idle_timeout),
        cmocka_unit_test(test_slow_frame),
        cmocka_unit_test(test_tenant_descriptors),
        cmocka_unit_test(test_tenant_grants),
        cmocka_unit_test(test_tenant_engine),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
