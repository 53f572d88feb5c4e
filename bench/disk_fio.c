/* fio as the disk benchmarks' yardstick (disk_fio.h). */
#include "disk_fio.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

bool disk_fio_available(const char *fio)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "command -v '%s' >/dev/null 2>&1", fio);
    return system(cmd) == 0;
}

double disk_fio_read_bps(const char *fio, const char *dir, uint64_t bs, uint64_t total,
                         int64_t depth, int64_t loops)
{
    char cmd[2048];
    snprintf(cmd, sizeof(cmd),
             "'%s' --name=mc_disk_bench --filename='%s/fio.dat' --size=%llu --bs=%llu --rw=read "
             "--direct=1 --ioengine=io_uring --iodepth=%lld --loops=%lld --invalidate=1 "
             "--output-format=json 2>/dev/null",
             fio, dir, (unsigned long long)total, (unsigned long long)bs, (long long)depth,
             (long long)loops);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    json_error_t jerr;
    json_t *root = json_loadf(p, JSON_DISABLE_EOF_CHECK, &jerr);
    int rc = pclose(p);
    double bw = -1;
    json_t *jobs = root ? json_object_get(root, "jobs") : NULL;
    json_t *rd = json_is_array(jobs) && json_array_size(jobs)
                     ? json_object_get(json_array_get(jobs, 0), "read")
                     : NULL;
    json_t *b = rd ? json_object_get(rd, "bw_bytes") : NULL;
    if (rc == 0 && json_is_number(b))
        bw = json_number_value(b);
    json_decref(root);
    return bw;
}
