/* Test helper: a transfer-engine target process.
 *
 *   te_peer [--name host[:port]] [--meta URI] [--buffers N] [--size BYTES] [--shareable]
 *           [--register_offset BYTES] [--timeout MS] [--seed S] [--protocol auto|tcp|shm|ucx]
 *           [--token FILE] [--max_conns N] [--idle_s S]
 * (--token, --max_conns, --idle_s: the config's auth_token_file, tcp_max_server_conns,
 * tcp_idle_timeout_s)
 *
 * Allocates N buffers of SIZE bytes and registers each from register_offset (default 0) to
 * its end, filled with te_pattern(i, off, seed) from there (the BUF lines and the commands
 * below name the registered part), then prints
 *   READY <name> <pid>
 *   BUF <i> <addr> <len>     (one per buffer)
 *   END
 * and serves commands from stdin, one per line, answering one line each:
 *   unregister <i>           -> "UNREG <i> <status name>"
 *   register <i>             -> "REG <i> <status name>"
 *   serve <i> past|none|<ms> -> "SERVE <i> <status name>" (mc_te_set_serve_until: already
 *                               over, no limit, or ms from now)
 *   check <i> <off> <len> <seed> -> "CHECK <ok|bad>" (buffer bytes == pattern with seed)
 *   readloop <segment> <addr> <len> -> "READLOOP <ok|bad|status name>" after one READ of
 *                               [addr, addr+len) of that segment (ok: the bytes are
 *                               te_pattern(0, 0, 1)), then READs it again and again until
 *                               killed (tests/te/test_te_transfer.c, shm_dead_initiator)
 *   quit                     -> exits 0
 * EOF on stdin also exits.
 */
#include "te_pattern.h"

#include "mooncake/te.h"
#include "common/time.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* The readloop command: answers once, then never returns (the test kills us mid-copy). */
static void read_loop(mc_te_t *te, const char *segment, uint64_t addr, size_t len)
{
    uint8_t *lb = mmap(NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    mc_te_segment_t seg = 0;
    mc_status_t st = lb == MAP_FAILED ? MC_ERR_NO_MEMORY : mc_te_segment_open(te, segment, &seg);
    mc_te_request_t r = {MC_TE_READ, lb, seg, addr, len};
    if (st == MC_OK)
        st = mc_te_transfer_sync(te, &r, 1, NULL);
    printf("READLOOP %s\n", st != MC_OK                           ? mc_status_name(st)
                            : te_pattern_check(lb, len, 0, 0, 1) < 0 ? "ok"
                                                                   : "bad");
    fflush(stdout);
    for (;;)
        mc_te_transfer_sync(te, &r, 1, NULL);
}

int main(int argc, char **argv)
{
    const char *name = "127.0.0.1";
    const char *meta = "P2PHANDSHAKE";
    size_t nbuf = 2, size = 1 << 20, reg_off = 0;
    int shareable = 0;
    uint32_t timeout = 0;
    unsigned seed = 1;
    const char *proto = NULL; /* --protocol ucx: publish UCX rkeys (tests/te/test_te_ucx.c) */
    const char *token = NULL;
    uint32_t max_conns = 0, idle_s = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--name") && i + 1 < argc)
            name = argv[++i];
        else if (!strcmp(argv[i], "--meta") && i + 1 < argc)
            meta = argv[++i];
        else if (!strcmp(argv[i], "--buffers") && i + 1 < argc)
            nbuf = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--size") && i + 1 < argc)
            size = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--timeout") && i + 1 < argc)
            timeout = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = (unsigned)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--protocol") && i + 1 < argc)
            proto = argv[++i];
        else if (!strcmp(argv[i], "--register_offset") && i + 1 < argc)
            reg_off = strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--token") && i + 1 < argc)
            token = argv[++i];
        else if (!strcmp(argv[i], "--max_conns") && i + 1 < argc)
            max_conns = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--idle_s") && i + 1 < argc)
            idle_s = (uint32_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--shareable"))
            shareable = 1;
        else {
            fprintf(stderr, "te_peer: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (nbuf == 0 || nbuf > 64 || size == 0 || reg_off >= size)
        return 2;
    mc_te_config_t cfg = {.metadata_uri = meta, .local_server_name = name,
                          .transfer_timeout_ms = timeout, .protocol = proto,
                          .auth_token_file = token, .tcp_max_server_conns = max_conns,
                          .tcp_idle_timeout_s = idle_s};
    mc_te_t *te;
    mc_status_t st = mc_te_create(&cfg, &te);
    if (st != MC_OK) {
        printf("FAIL %s\n", mc_status_name(st));
        return 1;
    }
    uint8_t *bufs[64]; /* the registered parts */
    for (size_t i = 0; i < nbuf; i++) {
        uint8_t *m = shareable ? mc_te_alloc_shareable(te, size)
                               : mmap(NULL, size, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (!m || m == MAP_FAILED)
            return 1;
        bufs[i] = m + reg_off;
    }
    size -= reg_off;
    for (size_t i = 0; i < nbuf; i++) {
        te_pattern_fill(bufs[i], size, (unsigned)i, 0, seed);
        st = mc_te_register(te, bufs[i], size, "cpu:0");
        if (st != MC_OK) {
            printf("FAIL register %s\n", mc_status_name(st));
            return 1;
        }
    }
    printf("READY %s %d\n", mc_te_local_name(te), (int)getpid());
    for (size_t i = 0; i < nbuf; i++)
        printf("BUF %zu %llu %zu\n", i, (unsigned long long)(uintptr_t)bufs[i], size);
    printf("END\n");
    fflush(stdout);
    char line[256];
    while (fgets(line, sizeof(line), stdin)) {
        unsigned i = 0, s = 0;
        unsigned long long off = 0, len = 0;
        char word[32], word2[128];
        if (sscanf(line, "unregister %u", &i) == 1 && i < nbuf) {
            st = mc_te_unregister(te, bufs[i]);
            printf("UNREG %u %s\n", i, mc_status_name(st));
        } else if (sscanf(line, "serve %u %31s", &i, word) == 2 && i < nbuf) {
            uint64_t until = !strcmp(word, "past")   ? 1
                             : !strcmp(word, "none") ? 0
                                                     : mc_now_ns() + strtoull(word, NULL, 10) * 1000000ull;
            st = mc_te_set_serve_until(te, bufs[i], until);
            printf("SERVE %u %s\n", i, mc_status_name(st));
        } else if (sscanf(line, "register %u", &i) == 1 && i < nbuf) {
            st = mc_te_register(te, bufs[i], size, "cpu:0");
            printf("REG %u %s\n", i, mc_status_name(st));
        } else if (sscanf(line, "check %u %llu %llu %u", &i, &off, &len, &s) == 4 && i < nbuf &&
                   off <= size && len <= size - off) {
            /* read through our own local segment: the copy synchronizes with the engine's
             * serving threads (in-flight references), so we see what they wrote */
            uint8_t *tmp = malloc(len ? len : 1);
            mc_te_segment_t self = 0;
            int ok = tmp && mc_te_segment_open(te, mc_te_local_name(te), &self) == MC_OK;
            mc_te_request_t r = {MC_TE_READ, tmp, self, (uint64_t)(uintptr_t)(bufs[i] + off), len};
            ok = ok && (len == 0 || mc_te_transfer_sync(te, &r, 1, NULL) == MC_OK);
            ok = ok && te_pattern_check(tmp, len, i, off, s) < 0;
            free(tmp);
            printf("CHECK %s\n", ok ? "ok" : "bad");
        } else if (sscanf(line, "readloop %127s %llu %llu", word2, &off, &len) == 3 && len > 0 &&
                   len <= (1ull << 30)) {
            read_loop(te, word2, off, (size_t)len);
        } else if (!strncmp(line, "quit", 4)) {
            break;
        } else {
            printf("ERR\n");
        }
        fflush(stdout);
    }
    mc_te_destroy(te);
    return 0;
}
