/* Fuzz target: the master core's WAL replay (master_wal.c), which a restart and every HA
 * standby run on each record, on arbitrary payloads. The input is a sequence of chunks
 * [u8 type][u16 LE length][payload]; each is framed as a WAL record (so the checksums pass and
 * the record decoders are what is exercised: MOUNT, UNMOUNT, COMMIT, REMOVE, PUT_START,
 * RESERVE, the disk tier's, unknown types), applied as a standby applies them
 * (mc_master_follow_apply), then the core is promoted (allocators rebuilt from the extents,
 * overlaps dropped, pending puts kept, reserved blocks quarantined) and runs one cron. Nothing
 * may crash, leak or trip a sanitizer. */
#include "master/master.h"
#include "master/wal.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mc_buf_t recs = {0};
    for (size_t off = 0; off + 3 <= size;) {
        uint8_t type = data[off];
        size_t len = (size_t)data[off + 1] | (size_t)data[off + 2] << 8;
        off += 3;
        if (len > size - off)
            len = size - off;
        if (mc_wal_frame(&recs, type, data + off, len) != MC_OK)
            abort();
        off += len;
    }
    mc_master_config_t cfg;
    mc_master_config_default(&cfg);
    mc_master_t *m;
    if (mc_master_create(&cfg, &m) != MC_OK || mc_master_follow_begin(m) != MC_OK)
        abort();
    size_t used = 0;
    mc_status_t st = mc_master_follow_apply(m, recs.data, recs.len, &used, NULL, NULL);
    if (st != MC_OK || used != recs.len) /* every frame is whole and valid */
        abort();
    if (mc_master_follow_promote(m, NULL, 1) == MC_OK)
        mc_master_cron(m);
    mc_master_destroy(m);
    mc_buf_free(&recs);
    return 0;
}
