/* libFuzzer target: the disk tier's on-disk parsers (record header block and bucket header),
 * which recovery runs on whatever a crash or a bad disk left in a bucket file. A record that
 * parses must re-encode to the same bytes, and its lengths must be within the format's caps.
 * Input: [8 bytes salt selector][bytes]; the seeds (tests/fuzz/corpus/fuzz_disk_record) hold
 * valid records for salt FUZZ_SALT. */
#include "disk/disk_format.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_SALT 0x5eed5a17ull

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    mc_disk_rec_t r;
    size_t need = 0;
    mc_status_t st = mc_disk_rec_parse(data, size, FUZZ_SALT, &r, &need);
    if (st == MC_ERR_BUFFER_OVERFLOW && (need <= size || need > MC_DISK_REC_HDR_SIZE + MC_DISK_STORAGE_KEY_MAX))
        abort();
    if (st == MC_OK) {
        if (r.key_len == 0 || r.key_len > MC_DISK_STORAGE_KEY_MAX ||
            r.hdr_len != mc_disk_hdr_len(r.key_len) || r.value_len > MC_DISK_VALUE_MAX ||
            r.key != (const char *)data + MC_DISK_REC_HDR_SIZE)
            abort();
        uint8_t *out = aligned_alloc(MC_DISK_ALIGN, r.hdr_len);
        mc_disk_rec_encode(&r, FUZZ_SALT, out);
        /* the header and key re-encode to the input's bytes */
        if (memcmp(out, data, MC_DISK_REC_HDR_SIZE + r.key_len) != 0)
            abort();
        free(out);
    }
    mc_disk_bucket_hdr_t bh;
    if (mc_disk_bucket_hdr_parse(data, size, &bh) == MC_OK) {
        uint8_t out[MC_DISK_BUCKET_HDR_SIZE];
        mc_disk_bucket_hdr_encode(&bh, out);
        if (memcmp(out, data, 40) != 0)
            abort();
    }
    return 0;
}
