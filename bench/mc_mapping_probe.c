/* mc_mapping_probe: what reading shared pages through a new or another mapping costs on this
 * machine (docs/benchmarks.md, "On a 2 vCPU AMD EPYC VM").
 *
 * A same-host reader maps its peers' segments (memfd pages, one mapping per engine), so the
 * same physical pages are read through several mappings. On bare metal every pass over
 * resident, mapped pages runs at memory speed; under some memory virtualisation the first
 * pass through a mapping, after the pages are first written or after another mapping of them
 * is made, runs far slower. This probe makes one memfd of --size_mb, maps it three times and
 * reads it pass by pass (4 MiB memcpy chunks into one buffer), in a fixed order, printing one
 * JSON line per pass: {"bench":"mapping_probe","step":N,"what":...,"mapping":"a|b|c",
 * "gib_s":...}. Usage: mc_mapping_probe [--size_mb=256] (--help). Exit 1 if memory cannot be
 * had, 2 on a bad option.
 */
#include "common/config.h"
#include "common/time.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define CHUNK (4u << 20)

static char sink[CHUNK];
static int step;

/* Reads m[0, len) once and prints the pass's rate. */
static void read_pass(const char *what, const char *name, const char *m, size_t len)
{
    uint64_t t0 = mc_now_ns();
    for (size_t off = 0; off < len; off += CHUNK) {
        memcpy(sink, m + off, CHUNK);
        __asm__ volatile("" : : "r"(sink) : "memory"); /* the copy is not optimised away */
    }
    double gib_s = (double)len / ((double)(mc_now_ns() - t0) * 1e-9) / (double)(1u << 30);
    printf("{\"bench\":\"mapping_probe\",\"step\":%d,\"what\":\"%s\",\"mapping\":\"%s\","
           "\"gib_s\":%.2f}\n", ++step, what, name, gib_s);
    fflush(stdout);
}

/* One more shared mapping of fd; with populate, its page tables filled as the shm transport
 * fills a peer buffer's (rbuf_map). Exits the process if it cannot be made. */
static char *map_shared(int fd, size_t len, bool populate)
{
    char *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        perror("mc_mapping_probe: mmap");
        exit(1);
    }
    if (populate)
        madvise(m, len, MADV_POPULATE_WRITE);
    return m;
}

int main(int argc, char **argv)
{
    int64_t mb = 256;
    mc_option_t opts[] = {
        {"size_mb", MC_OPT_INT, &mb, NULL, "size of the shared memory, MiB", 4, 65536},
    };
    mc_config_spec_t spec = {"mc_mapping_probe",
                             "Read passes over one memfd through up to three mappings of it; one "
                             "JSON line per pass (GiB/s).",
                             opts, sizeof(opts) / sizeof(opts[0])};
    int rc = mc_config_main(&spec, argc, argv);
    if (rc >= 0)
        return rc;
    size_t len = ((size_t)mb << 20) / CHUNK * CHUNK;
    int fd = memfd_create("mc-mapping-probe", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        perror("mc_mapping_probe: memfd");
        return 1;
    }
    char *a = map_shared(fd, len, false);
    memset(a, 1, len); /* the pages' first write, through a */
    read_pass("after first write through a", "a", a, len);
    read_pass("again", "a", a, len);
    char *b = map_shared(fd, len, true);
    read_pass("second mapping, populated", "b", b, len);
    read_pass("again", "b", b, len);
    read_pass("after b's passes", "a", a, len);
    memset(a, 2, len);
    read_pass("after a rewrite through a", "b", b, len);
    char *c = map_shared(fd, len, true);
    read_pass("third mapping, populated", "c", c, len);
    read_pass("again", "c", c, len);
    read_pass("after c's passes", "a", a, len);
    read_pass("after c's passes", "b", b, len);
    read_pass("again", "a", a, len);
    read_pass("again", "b", b, len);
    return 0;
}
