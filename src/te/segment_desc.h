/* Segment descriptor: what a process publishes about its registered memory, as JSON under
 * "mooncake/ram/<name>" in the metadata store (or served by the engine for P2PHANDSHAKE).
 *
 * JSON form (field names follow upstream where they exist; extra fields are ours):
 * {"name":"127.0.0.1:12345","protocol":"tcp","tcp_data_port":12345,
 *  "host_id":"<boot id>","pid":1234,"timestamp":<wall ms>,
 *  "buffers":[{"name":"cpu:0","addr":140000000,"length":4096,
 *              "shm_fd":7,"shm_offset":0}, ...]}
 * shm_fd is the owner's memfd descriptor number (-1 if the buffer is not memfd-backed);
 * same-host peers open /proc/<pid>/fd/<shm_fd> and map it once.
 *
 * The parser treats its input as hostile: every field is type-checked and capped.
 *
 * Signed form (an engine with a keyring publishes and accepts only this; docs/internals/
 * metadata.md): exactly the bytes
 *   {"mac":"<64 lower-case hex>","desc":<descriptor JSON>}
 * where mac = mc_auth_sign(keyring, MC_SEGMENT_DESC_MAC_LABEL, <descriptor JSON bytes>). The
 * envelope is matched byte for byte (no blanks, this key order), so the signed bytes are
 * exactly the ones parsed; the whole value is still valid JSON.
 */
#ifndef MC_TE_SEGMENT_DESC_H
#define MC_TE_SEGMENT_DESC_H

#include "common/auth.h"
#include "mooncake/status.h"
#include "mooncake/te.h"

#include <stddef.h>
#include <stdint.h>

#define MC_SEGMENT_MAX_BUFFERS 4096
#define MC_SEGMENT_DESC_MAX_JSON (4u << 20)

typedef struct mc_buffer_desc {
    char location[MC_TE_LOCATION_MAX];
    uint64_t addr;
    uint64_t length;      /* > 0, addr + length does not overflow */
    int32_t shm_fd;       /* -1 if not shareable */
    uint64_t shm_offset;  /* offset of addr inside the memfd */
} mc_buffer_desc_t;

typedef struct mc_segment_desc {
    char name[MC_TE_NAME_MAX];
    char protocol[16];
    char host_id[64];
    int32_t pid;
    uint16_t tcp_data_port;
    uint64_t timestamp;
    size_t n_buffers;
    mc_buffer_desc_t *buffers; /* owned; sorted by addr, non-overlapping after parse */
    /* Engine-private per-transport state (e.g. packed UCX rkeys) as opaque JSON text, or NULL. */
    char *transport_info;
} mc_segment_desc_t;

/* Serialize to a heap JSON string (caller releases with mc_free). */
mc_status_t mc_segment_desc_to_json(const mc_segment_desc_t *desc, char **json_p);
/* Parse JSON of at most len bytes (need not be NUL-terminated). On error *desc is zeroed and
 * MC_ERR_PROTOCOL (malformed) or MC_ERR_TOO_LARGE is returned. */
mc_status_t mc_segment_desc_from_json(const char *json, size_t len, mc_segment_desc_t *desc);
void mc_segment_desc_free(mc_segment_desc_t *desc); /* frees buffers/transport_info, zeroes */

#define MC_SEGMENT_DESC_MAC_LABEL "mc-te-desc-v1"

/* Wrap descriptor JSON (len bytes) in the signed form, signed with the ring's first cluster
 * key (never a tenant key: auth.h); heap string (mc_free) and its length.
 * MC_ERR_PERMISSION without a cluster key. */
mc_status_t mc_segment_desc_seal(const mc_auth_t *auth, const char *json, size_t len,
                                 char **out_p, size_t *out_len_p);
/* The descriptor JSON inside a stored value (a pointer into `in`, not copied).
 * With a keyring: only the signed form whose mac a cluster key of the ring made is accepted:
 * MC_ERR_AUTH for an unsigned value or another mac, MC_ERR_PROTOCOL for a malformed envelope.
 * Without one: the signed form is unwrapped unchecked and any other value is returned whole
 * (the parser judges it). *signed_p (may be NULL) = 1 when the value was in the signed form. */
mc_status_t mc_segment_desc_unseal(const mc_auth_t *auth, const char *in, size_t len,
                                   const char **json_p, size_t *json_len_p, int *signed_p);

/* For descriptors built by hand (the engine): check every buffer (length > 0, no addr+length
 * or shm_offset+length overflow, shm_fd >= -1), sort buffers by addr and refuse overlaps.
 * MC_ERR_INVALID_PARAMS on a bad or overlapping buffer (order may then have changed).
 * mc_segment_desc_find() requires a sorted descriptor (the parser's output always is). */
mc_status_t mc_segment_desc_normalize(mc_segment_desc_t *desc);

/* Index of the buffer containing [addr, addr+len), or -1. len must be > 0; overflow-safe. */
ptrdiff_t mc_segment_desc_find(const mc_segment_desc_t *desc, uint64_t addr, uint64_t len);

#endif
