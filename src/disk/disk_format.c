/* Encoding and parsing of bucket and record headers (disk_format.h). */
#include "disk/disk_format.h"

#include "common/hash.h"

#include <string.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the disk format is little-endian");

/* Bucket header: magic u32, version u16, size u16, bucket_id u64, salt u64, created_ms u64,
 * checksum u64 (XXH3-64 of the first 32 bytes). */
#define BH_CSUM_OFF 32u

/* Record header: magic u32, version u16, flags u16, key_len u32, hdr_len u32, value_len u64,
 * value_checksum u64, seq u64, 16 reserved bytes (zero), hdr_checksum u64 at 56, then the key. */
#define RH_CSUM_OFF 56u

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

void mc_disk_bucket_hdr_encode(const mc_disk_bucket_hdr_t *h, void *out)
{
    uint8_t *p = out;
    memset(p, 0, MC_DISK_BUCKET_HDR_SIZE);
    put32(p, MC_DISK_BUCKET_MAGIC);
    put16(p + 4, MC_DISK_FORMAT_VERSION);
    put16(p + 6, 40);
    put64(p + 8, h->bucket_id);
    put64(p + 16, h->salt);
    put64(p + 24, h->created_ms);
    put64(p + BH_CSUM_OFF, mc_hash64(p, BH_CSUM_OFF));
}

mc_status_t mc_disk_bucket_hdr_parse(const void *buf, size_t len, mc_disk_bucket_hdr_t *h)
{
    const uint8_t *p = buf;
    if (len < 40 || get32(p) != MC_DISK_BUCKET_MAGIC || get16(p + 4) != MC_DISK_FORMAT_VERSION ||
        get16(p + 6) != 40)
        return MC_ERR_PROTOCOL;
    if (get64(p + BH_CSUM_OFF) != mc_hash64(p, BH_CSUM_OFF))
        return MC_ERR_CHECKSUM;
    h->bucket_id = get64(p + 8);
    h->salt = get64(p + 16);
    h->created_ms = get64(p + 24);
    return MC_OK;
}

/* Checksum of a header block: seeded with the bucket's salt, checksum field counted as 0. */
static uint64_t rec_checksum(const uint8_t *p, uint32_t klen, uint64_t salt)
{
    uint8_t head[MC_DISK_REC_HDR_SIZE];
    memcpy(head, p, sizeof(head));
    put64(head + RH_CSUM_OFF, 0);
    uint64_t h = mc_hash64_seed(head, sizeof(head), salt);
    return mc_hash64_seed(p + MC_DISK_REC_HDR_SIZE, klen, h);
}

void mc_disk_rec_encode(const mc_disk_rec_t *r, uint64_t salt, void *out)
{
    uint8_t *p = out;
    memset(p, 0, r->hdr_len);
    put32(p, MC_DISK_REC_MAGIC);
    put16(p + 4, MC_DISK_FORMAT_VERSION);
    put16(p + 6, (uint16_t)r->flags);
    put32(p + 8, r->key_len);
    put32(p + 12, r->hdr_len);
    put64(p + 16, r->value_len);
    put64(p + 24, r->value_checksum);
    put64(p + 32, r->seq);
    memcpy(p + MC_DISK_REC_HDR_SIZE, r->key, r->key_len);
    put64(p + RH_CSUM_OFF, rec_checksum(p, r->key_len, salt));
}

mc_status_t mc_disk_rec_parse(const void *buf, size_t len, uint64_t salt, mc_disk_rec_t *r,
                              size_t *need_p)
{
    const uint8_t *p = buf;
    if (len < MC_DISK_REC_HDR_SIZE || get32(p) != MC_DISK_REC_MAGIC ||
        get16(p + 4) != MC_DISK_FORMAT_VERSION)
        return MC_ERR_PROTOCOL;
    uint32_t flags = get16(p + 6), klen = get32(p + 8), hlen = get32(p + 12);
    uint64_t vlen = get64(p + 16);
    if ((flags & ~MC_DISK_REC_TOMBSTONE) || klen == 0 || klen > MC_DISK_STORAGE_KEY_MAX ||
        hlen != mc_disk_hdr_len(klen) || vlen > MC_DISK_VALUE_MAX ||
        ((flags & MC_DISK_REC_TOMBSTONE) && vlen != 0) || get64(p + 40) || get64(p + 48))
        return MC_ERR_PROTOCOL; /* the reserved bytes must be zero */
    if (len < MC_DISK_REC_HDR_SIZE + (size_t)klen) {
        if (need_p)
            *need_p = MC_DISK_REC_HDR_SIZE + (size_t)klen;
        return MC_ERR_BUFFER_OVERFLOW;
    }
    if (get64(p + RH_CSUM_OFF) != rec_checksum(p, klen, salt))
        return MC_ERR_CHECKSUM;
    r->flags = flags;
    r->key_len = klen;
    r->hdr_len = hlen;
    r->value_len = vlen;
    r->value_checksum = get64(p + 24);
    r->seq = get64(p + 32);
    r->key = (const char *)p + MC_DISK_REC_HDR_SIZE;
    return MC_OK;
}
