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
 * "gib_s":...}. Usage: mc_mapping_probe [--size_mb=256]. Exit 1 if memory cannot be had.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define CHUNK (4u << 20)

static char sink[CHUNK];
static int step;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Reads m[0, len) once and prints the pass's rate. */
static void read_pass(const char *what, const char *name, const char *m, size_t len)
{
    double t0 = now_s();
    for (size_t off = 0; off < len; off += CHUNK) {
        memcpy(sink, m + off, CHUNK);
        __asm__ volatile("" : : "r"(sink) : "memory"); /* the copy is not optimised away */
    }
    double gib_s = (double)len / (now_s() - t0) / (double)(1u << 30);
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
    size_t mb = 256;
    for (int i = 1; i < argc; i++) {
        if (!strncmp(argv[i], "--size_mb=", 10) && atoi(argv[i] + 10) >= 4) {
            mb = (size_t)atoi(argv[i] + 10);
        } else {
            fprintf(stderr, "usage: %s [--size_mb=N]  (N >= 4, default 256)\n", argv[0]);
            return 2;
        }
    }
    size_t len = (mb << 20) / CHUNK * CHUNK;
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
