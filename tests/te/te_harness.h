/* Test harness for multi-process TE tests: spawn te_peer, talk to it over pipes, stop it by
 * pid. Header-only (static functions); include after cmocka. */
#ifndef MC_TESTS_TE_HARNESS_H
#define MC_TESTS_TE_HARNESS_H

#include "te_pattern.h"

#include "common/net.h"
#include "common/time.h"
#include "mooncake/te.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MC_ARRAY_LEN_T(a) (sizeof(a) / sizeof((a)[0]))

#ifndef TE_PEER_PATH
#error "TE_PEER_PATH must be defined by the build"
#endif

#define MiB (1ull << 20)

/* ThreadSanitizer makes every byte access slow: test smaller maxima there */
#if defined(__SANITIZE_THREAD__)
#define BIG (16 * MiB)
#else
#define BIG (64 * MiB)
#endif

/* Starts mooncake_http_metadata_server (from MC_BIN_DIR) on a free loopback port and waits
 * until it accepts connections; *port_p and uri ("http://127.0.0.1:<port>/metadata", urilen
 * bytes) are filled in. Skips the calling test when the program is not built. Returns its pid
 * (the caller stops it by pid). */
static inline pid_t te_meta_server_start(uint16_t *port_p, char *uri, size_t urilen)
{
    const char *bindir = getenv("MC_BIN_DIR");
    char server[1024];
    snprintf(server, sizeof(server), "%s/mooncake_http_metadata_server", bindir ? bindir : ".");
    if (access(server, X_OK) != 0) {
        print_message("skipping: %s not built\n", server);
        skip();
    }
    uint16_t port;
    assert_int_equal(mc_net_free_port(&port), MC_OK);
    char port_arg[32];
    snprintf(port_arg, sizeof(port_arg), "--port=%u", port);
    snprintf(uri, urilen, "http://127.0.0.1:%u/metadata", port);
    pid_t srv = fork();
    assert_true(srv >= 0);
    if (srv == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execl(server, server, port_arg, "--host=127.0.0.1", "--log_level=warn", (char *)NULL);
        _exit(127);
    }
    uint64_t deadline = mc_now_ms() + 10000; /* until it accepts connections */
    for (;;) {
        int fd;
        if (mc_net_connect("127.0.0.1", port, 200, &fd) == MC_OK) {
            close(fd);
            break;
        }
        assert_true(mc_now_ms() < deadline);
        mc_sleep_ms(20);
    }
    *port_p = port;
    return srv;
}

/* Pre-faulted anonymous memory for a test's local side (munmap when done). */
static uint8_t *local_buf(size_t len)
{
    uint8_t *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                      -1, 0);
    assert_true(p != MAP_FAILED);
    return p;
}

static mc_status_t xfer(mc_te_t *te, mc_te_opcode_t op, void *local, mc_te_segment_t seg,
                        uint64_t addr, size_t len, mc_te_xfer_status_t *st)
{
    mc_te_request_t r = {.opcode = op, .local = local, .target = seg, .target_addr = addr,
                         .length = len};
    return mc_te_transfer_sync(te, &r, 1, st);
}

typedef struct te_peer {
    pid_t pid;
    int in_fd;   /* our write end -> peer stdin */
    int out_fd;  /* peer stdout -> our read end */
    char name[MC_TE_NAME_MAX];
    int nbuf;
    uint64_t addr[64];
    uint64_t len[64];
    char rbuf[4096];
    size_t rlen;
} te_peer_t;

/* Read one line (without '\n') into out within timeout_ms. 0 ok, -1 timeout/EOF. */
static int te_peer_line(te_peer_t *p, char *out, size_t cap, int timeout_ms)
{
    uint64_t deadline = mc_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        char *nl = memchr(p->rbuf, '\n', p->rlen);
        if (nl) {
            size_t l = (size_t)(nl - p->rbuf);
            size_t c = l < cap - 1 ? l : cap - 1;
            memcpy(out, p->rbuf, c);
            out[c] = '\0';
            memmove(p->rbuf, nl + 1, p->rlen - l - 1);
            p->rlen -= l + 1;
            return 0;
        }
        uint64_t now = mc_now_ms();
        if (now >= deadline || p->rlen == sizeof(p->rbuf))
            return -1;
        struct pollfd pf = {.fd = p->out_fd, .events = POLLIN};
        int r = poll(&pf, 1, (int)(deadline - now));
        if (r <= 0)
            continue;
        ssize_t n = read(p->out_fd, p->rbuf + p->rlen, sizeof(p->rbuf) - p->rlen);
        if (n <= 0)
            return -1;
        p->rlen += (size_t)n;
    }
}

/* Start te_peer with extra args (NULL-terminated list). Returns 0 when READY was read. */
static int te_peer_start(te_peer_t *p, const char *const *args)
{
    memset(p, 0, sizeof(*p));
    int in[2], out[2];
    if (pipe(in) || pipe(out))
        return -1;
    const char *argv[32];
    int k = 0;
    argv[k++] = TE_PEER_PATH;
    for (int i = 0; args && args[i] && k < 31; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
        dup2(in[0], 0);
        dup2(out[1], 1);
        close(in[0]);
        close(in[1]);
        close(out[0]);
        close(out[1]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in[0]);
    close(out[1]);
    p->pid = pid;
    p->in_fd = in[1];
    p->out_fd = out[0];
    char line[512];
    if (te_peer_line(p, line, sizeof(line), 20000) != 0)
        return -1;
    int ppid;
    if (sscanf(line, "READY %255s %d", p->name, &ppid) != 2)
        return -1;
    for (;;) {
        if (te_peer_line(p, line, sizeof(line), 5000) != 0)
            return -1;
        if (!strcmp(line, "END"))
            break;
        unsigned i;
        unsigned long long a, l;
        if (sscanf(line, "BUF %u %llu %llu", &i, &a, &l) == 3 && i < 64) {
            p->addr[i] = a;
            p->len[i] = l;
            if ((int)i + 1 > p->nbuf)
                p->nbuf = (int)i + 1;
        }
    }
    return 0;
}

/* Send a command, read its one-line answer into out. */
static int te_peer_cmd(te_peer_t *p, const char *cmd, char *out, size_t cap, int timeout_ms)
{
    char buf[256];
    int n = snprintf(buf, sizeof(buf), "%s\n", cmd);
    if (write(p->in_fd, buf, (size_t)n) != n)
        return -1;
    return te_peer_line(p, out, cap, timeout_ms);
}

/* Stop by pid: signal (SIGTERM-like quit first if sig == 0), then reap with a deadline. */
static void te_peer_stop(te_peer_t *p, int sig)
{
    if (p->pid <= 0)
        return;
    if (sig == 0) {
        ssize_t w = write(p->in_fd, "quit\n", 5);
        (void)w;
    } else {
        kill(p->pid, sig);
    }
    uint64_t deadline = mc_now_ms() + 10000;
    int status;
    while (waitpid(p->pid, &status, WNOHANG) == 0) {
        if (mc_now_ms() > deadline) {
            kill(p->pid, SIGKILL);
            waitpid(p->pid, &status, 0);
            break;
        }
        mc_sleep_ms(5);
    }
    close(p->in_fd);
    close(p->out_fd);
    p->pid = 0;
}

/* One size of the read/write round trip against a te_peer whose two buffers hold the pattern
 * (buffer 0, seed 1): READ buffer 0 at off and check it; WRITE seed 7 into buffer 1, have the
 * owner check it (COMPLETED means the bytes are in the target), READ it back. */
static void te_roundtrip(mc_te_t *te, te_peer_t *p, mc_te_segment_t seg, uint8_t *lb,
                         uint64_t off, size_t s)
{
    mc_te_xfer_status_t st;
    memset(lb, 0, s);
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p->addr[0] + off, s, &st), MC_OK);
    assert_int_equal(st.state, MC_TE_COMPLETED);
    assert_int_equal(st.transferred, s);
    assert_int_equal(te_pattern_check(lb, s, 0, off, 1), -1);
    te_pattern_fill(lb, s, 1, off, 7);
    assert_int_equal(xfer(te, MC_TE_WRITE, lb, seg, p->addr[1] + off, s, &st), MC_OK);
    assert_int_equal(st.transferred, s);
    char cmd[128], ans[128];
    snprintf(cmd, sizeof(cmd), "check 1 %llu %zu 7", (unsigned long long)off, s);
    assert_int_equal(te_peer_cmd(p, cmd, ans, sizeof(ans), 20000), 0);
    assert_string_equal(ans, "CHECK ok");
    memset(lb, 0, s);
    assert_int_equal(xfer(te, MC_TE_READ, lb, seg, p->addr[1] + off, s, &st), MC_OK);
    assert_int_equal(te_pattern_check(lb, s, 1, off, 7), -1);
}

/* te_roundtrip over the sizes every transport must handle (1 byte to `len`, the peer's buffer
 * size), each at its own offset. */
static void te_roundtrip_sizes(mc_te_t *te, te_peer_t *p, mc_te_segment_t seg, uint8_t *lb,
                               size_t len)
{
    const size_t sizes[] = {1, 100, 4095, 4096, 65537, MiB + 3, 8 * MiB, len};
    for (size_t k = 0; k < MC_ARRAY_LEN_T(sizes); k++) {
        size_t s = sizes[k];
        uint64_t off = s < len ? (12345ull * (k + 1)) % (len - s + 1) : 0;
        te_roundtrip(te, p, seg, lb, off, s);
    }
}

#endif
