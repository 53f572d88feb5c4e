/* On-disk format of the disk tier (docs/internals/disk-tier.md, "Format"). Little-endian
 * (the host's order; x86-64 and arm64). Parsers take untrusted bytes: every length is checked
 * before it is used (tests/disk/fuzz_disk_record.c fuzzes them).
 *
 * A bucket file <id>.bucket is a 4 KiB bucket header, then records, each starting on a 4 KiB
 * boundary:
 *   [record header, 64 bytes][storage key][zeros to 4 KiB]  (hdr_len bytes)
 *   [value][zeros to 4 KiB]                                  (value_len rounded up)
 * The writer writes the value first and the header block last: a record whose header parses
 * (magic, version, lengths, and hdr_checksum = XXH3-64 seeded with the bucket's salt over the
 * header block with the checksum field zeroed) is committed. The salt is random per bucket and
 * only on disk, so value bytes cannot pass for a record header when recovery scans past a
 * corrupted record. */
#ifndef MC_DISK_DISK_FORMAT_H
#define MC_DISK_DISK_FORMAT_H

#include "common/tenant.h"
#include "disk/disk_store.h"

#include <stdint.h>

#define MC_DISK_BUCKET_MAGIC 0x4244434du  /* "MCDB" */
#define MC_DISK_REC_MAGIC 0x5244434du     /* "MCDR" */
#define MC_DISK_FORMAT_VERSION 1u
#define MC_DISK_REC_HDR_SIZE 64u
#define MC_DISK_BUCKET_HDR_SIZE MC_DISK_ALIGN
/* storage key = tenant '\0' key */
#define MC_DISK_STORAGE_KEY_MAX (MC_TENANT_MAX + 1u + MC_DISK_USER_KEY_MAX)
/* A value is at most this big (one io_uring read; also capped by total_size_limit). */
#define MC_DISK_VALUE_MAX (1ull << 30)

#define MC_DISK_REC_TOMBSTONE 0x1u /* the key is removed (value_len 0) */

static inline uint64_t mc_disk_round(uint64_t n)
{
    return (n + MC_DISK_ALIGN - 1) & ~(uint64_t)(MC_DISK_ALIGN - 1);
}

/* Header block length of a record with a key of klen bytes. */
static inline uint32_t mc_disk_hdr_len(uint32_t klen)
{
    return (uint32_t)mc_disk_round(MC_DISK_REC_HDR_SIZE + (uint64_t)klen);
}

typedef struct mc_disk_bucket_hdr {
    uint64_t bucket_id;
    uint64_t salt;
    uint64_t created_ms; /* wall clock */
} mc_disk_bucket_hdr_t;

typedef struct mc_disk_rec {
    uint32_t flags;        /* MC_DISK_REC_* */
    uint32_t key_len;
    uint32_t hdr_len;      /* mc_disk_hdr_len(key_len): the value starts here */
    uint64_t value_len;
    uint64_t value_checksum;
    uint64_t seq;          /* store-wide write sequence */
    const char *key;       /* inside the parsed buffer */
} mc_disk_rec_t;

/* Encodes a bucket header into out (MC_DISK_BUCKET_HDR_SIZE bytes, zero-filled). */
void mc_disk_bucket_hdr_encode(const mc_disk_bucket_hdr_t *h, void *out);
/* MC_OK, or MC_ERR_PROTOCOL (not a bucket header of this version / too short) or
 * MC_ERR_CHECKSUM. */
mc_status_t mc_disk_bucket_hdr_parse(const void *buf, size_t len, mc_disk_bucket_hdr_t *h);

/* Encodes a record's header block into out (r->hdr_len bytes, zero-filled), key from r->key. */
void mc_disk_rec_encode(const mc_disk_rec_t *r, uint64_t salt, void *out);
/* Parses a record header block from buf (len bytes available; at least hdr_len are needed).
 * MC_OK; MC_ERR_PROTOCOL (no record here: magic, version, flags or lengths wrong);
 * MC_ERR_BUFFER_OVERFLOW (valid start, *need_p bytes are needed to check the key);
 * MC_ERR_CHECKSUM (the header checksum does not match). */
mc_status_t mc_disk_rec_parse(const void *buf, size_t len, uint64_t salt, mc_disk_rec_t *r,
                              size_t *need_p);

#endif
