/* fio as the disk benchmarks' yardstick (mc_disk_bench, mc_disk_e2e_bench): one sequential
 * O_DIRECT read job (--ioengine=io_uring) on a file in the directory measured, so that the
 * store and fio are compared on the same file system in the same run. */
#ifndef MC_BENCH_DISK_FIO_H
#define MC_BENCH_DISK_FIO_H

#include <stdbool.h>
#include <stdint.h>

/* Whether the program fio (a name on PATH or a path) can be run. */
bool disk_fio_available(const char *fio);

/* fio's read bandwidth in bytes/s: `total` bytes of dir/fio.dat (laid out by fio on its first
 * run) read in blocks of bs at queue depth `depth`, `loops` times, the page cache invalidated
 * first; -1 when fio is missing or fails. */
double disk_fio_read_bps(const char *fio, const char *dir, uint64_t bs, uint64_t total,
                         int64_t depth, int64_t loops);

#endif
