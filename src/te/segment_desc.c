/* Segment descriptor JSON codec (see segment_desc.h for the wire form).
 *
 * The parser is written for hostile input: jansson parses with duplicate keys rejected and
 * NUL bytes in strings refused, then every field is type-checked and capped here. 64-bit
 * unsigned fields (addr, length, shm_offset, timestamp) are accepted as JSON integers
 * (jansson's json_int_t is signed 64-bit) or as decimal strings, so addresses >= 2^63 survive;
 * the encoder writes an integer below 2^63 and a decimal string above.
 */
#include "te/segment_desc.h"

#include "common/alloc.h"
#include "common/log.h"

#include <errno.h>
#include <stdbool.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- encoding */

static json_t *u64_to_json(uint64_t v)
{
    if (v <= (uint64_t)INT64_MAX)
        return json_integer((json_int_t)v);
    char buf[24];
    snprintf(buf, sizeof(buf), "%" PRIu64, v);
    return json_string(buf);
}

/* json_object_set_new that also fails on a NULL value (allocation failure). */
static int set_new(json_t *obj, const char *key, json_t *val)
{
    if (!val)
        return -1;
    return json_object_set_new(obj, key, val);
}

static size_t bounded_len(const char *s, size_t cap)
{
    return strnlen(s, cap);
}

mc_status_t mc_segment_desc_to_json(const mc_segment_desc_t *desc, char **json_p)
{
    if (!desc || !json_p)
        return MC_ERR_INVALID_PARAMS;
    *json_p = NULL;
    if (desc->n_buffers > MC_SEGMENT_MAX_BUFFERS) {
        MC_LOG_ERROR("segment desc: %zu buffers exceed the cap %d", desc->n_buffers,
                     MC_SEGMENT_MAX_BUFFERS);
        return MC_ERR_TOO_LARGE;
    }
    if (desc->n_buffers && !desc->buffers)
        return MC_ERR_INVALID_PARAMS;
    /* Fixed-size fields must be NUL-terminated inside their arrays. */
    if (bounded_len(desc->name, sizeof(desc->name)) == sizeof(desc->name) ||
        bounded_len(desc->protocol, sizeof(desc->protocol)) == sizeof(desc->protocol) ||
        bounded_len(desc->host_id, sizeof(desc->host_id)) == sizeof(desc->host_id))
        return MC_ERR_INVALID_PARAMS;

    mc_status_t st = MC_ERR_NO_MEMORY;
    json_t *root = json_object();
    json_t *bufs = json_array();
    if (!root || !bufs)
        goto out;
    if (set_new(root, "name", json_string(desc->name)) ||
        set_new(root, "protocol", json_string(desc->protocol)) ||
        set_new(root, "tcp_data_port", json_integer(desc->tcp_data_port)) ||
        set_new(root, "host_id", json_string(desc->host_id)) ||
        set_new(root, "pid", json_integer(desc->pid)) ||
        set_new(root, "timestamp", u64_to_json(desc->timestamp)))
        goto out;
    for (size_t i = 0; i < desc->n_buffers; i++) {
        const mc_buffer_desc_t *b = &desc->buffers[i];
        if (bounded_len(b->location, sizeof(b->location)) == sizeof(b->location)) {
            st = MC_ERR_INVALID_PARAMS;
            goto out;
        }
        json_t *jb = json_object();
        if (!jb)
            goto out;
        if (json_array_append_new(bufs, jb) ||
            set_new(jb, "name", json_string(b->location)) ||
            set_new(jb, "addr", u64_to_json(b->addr)) ||
            set_new(jb, "length", u64_to_json(b->length)) ||
            set_new(jb, "shm_fd", json_integer(b->shm_fd)) ||
            set_new(jb, "shm_offset", u64_to_json(b->shm_offset)))
            goto out;
    }
    if (json_object_set(root, "buffers", bufs))
        goto out;
    if (desc->transport_info) {
        json_error_t err;
        json_t *ti = json_loads(desc->transport_info, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
                                &err);
        if (!ti) {
            MC_LOG_ERROR("segment desc: transport_info is not valid JSON: %s", err.text);
            st = MC_ERR_INVALID_PARAMS;
            goto out;
        }
        if (json_object_set_new(root, "transport_info", ti))
            goto out;
    }
    /* jansson allocates with malloc; mc_free (free) releases it like our own strings */
    char *text = json_dumps(root, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!text)
        goto out;
    if (strlen(text) > MC_SEGMENT_DESC_MAX_JSON) {
        MC_LOG_ERROR("segment desc: JSON of %zu bytes exceeds the cap %u", strlen(text),
                     MC_SEGMENT_DESC_MAX_JSON);
        mc_free(text);
        st = MC_ERR_TOO_LARGE;
        goto out;
    }
    *json_p = text; /* jansson uses malloc by default: the caller frees with mc_free() */
    st = MC_OK;
out:
    json_decref(bufs);
    json_decref(root);
    return st;
}

/* ---------------------------------------------------------------- decoding */

/* Strict unsigned decimal: 1..20 digits, no sign, no spaces, no overflow. */
static int parse_u64_str(const char *s, uint64_t *v_p)
{
    size_t n = strlen(s);
    if (n == 0 || n > 20)
        return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *v_p = v;
    return 0;
}

/* u64 from a non-negative JSON integer or a decimal string. */
static int get_u64(const json_t *j, uint64_t *v_p)
{
    if (json_is_integer(j)) {
        json_int_t i = json_integer_value(j);
        if (i < 0)
            return -1;
        *v_p = (uint64_t)i;
        return 0;
    }
    if (json_is_string(j))
        return parse_u64_str(json_string_value(j), v_p);
    return -1;
}

static int get_int_range(const json_t *j, int64_t lo, int64_t hi, int64_t *v_p)
{
    if (!json_is_integer(j))
        return -1;
    json_int_t i = json_integer_value(j);
    if (i < lo || i > hi)
        return -1;
    *v_p = i;
    return 0;
}

/* Copy a JSON string into dst[cap] (needs room for the NUL). -1 if not a string or too long. */
static int get_str(const json_t *j, char *dst, size_t cap, int allow_empty)
{
    if (!json_is_string(j))
        return -1;
    size_t n = json_string_length(j);
    if (n >= cap || (!allow_empty && n == 0))
        return -1;
    memcpy(dst, json_string_value(j), n);
    dst[n] = '\0';
    return 0;
}

static int cmp_buffer_addr(const void *a, const void *b)
{
    const mc_buffer_desc_t *x = a, *y = b;
    if (x->addr < y->addr)
        return -1;
    return x->addr > y->addr;
}

mc_status_t mc_segment_desc_normalize(mc_segment_desc_t *desc)
{
    if (!desc || (desc->n_buffers && !desc->buffers))
        return MC_ERR_INVALID_PARAMS;
    if (desc->n_buffers > MC_SEGMENT_MAX_BUFFERS)
        return MC_ERR_TOO_LARGE;
    for (size_t i = 0; i < desc->n_buffers; i++) {
        const mc_buffer_desc_t *b = &desc->buffers[i];
        if (b->length == 0 || b->addr > UINT64_MAX - b->length || b->shm_fd < -1 ||
            b->shm_offset > UINT64_MAX - b->length)
            return MC_ERR_INVALID_PARAMS;
    }
    if (desc->n_buffers > 1)
        qsort(desc->buffers, desc->n_buffers, sizeof(desc->buffers[0]), cmp_buffer_addr);
    for (size_t i = 1; i < desc->n_buffers; i++) {
        const mc_buffer_desc_t *p = &desc->buffers[i - 1], *b = &desc->buffers[i];
        if (b->addr - p->addr < p->length) /* sorted: b->addr >= p->addr, no overflow */
            return MC_ERR_INVALID_PARAMS;
    }
    return MC_OK;
}

#define BAD(...)                                                                               \
    do {                                                                                       \
        MC_LOG_WARN("segment desc: " __VA_ARGS__);                                             \
        goto fail;                                                                             \
    } while (0)

static int parse_buffer(const json_t *jb, size_t idx, mc_buffer_desc_t *b)
{
    if (!json_is_object(jb))
        BAD("buffer %zu is not an object", idx);
    if (get_str(json_object_get(jb, "name"), b->location, sizeof(b->location), 0))
        BAD("buffer %zu: missing or bad \"name\"", idx);
    if (get_u64(json_object_get(jb, "addr"), &b->addr))
        BAD("buffer %zu: missing or bad \"addr\"", idx);
    if (get_u64(json_object_get(jb, "length"), &b->length) || b->length == 0)
        BAD("buffer %zu: missing, zero or bad \"length\"", idx);
    if (b->addr > UINT64_MAX - b->length)
        BAD("buffer %zu: addr + length overflows", idx);
    const json_t *j = json_object_get(jb, "shm_fd");
    int64_t fd = -1;
    if (j && get_int_range(j, -1, INT32_MAX, &fd))
        BAD("buffer %zu: bad \"shm_fd\"", idx);
    b->shm_fd = (int32_t)fd;
    b->shm_offset = 0;
    j = json_object_get(jb, "shm_offset");
    if (j && get_u64(j, &b->shm_offset))
        BAD("buffer %zu: bad \"shm_offset\"", idx);
    if (b->shm_offset > UINT64_MAX - b->length)
        BAD("buffer %zu: shm_offset + length overflows", idx);
    return 0;
fail:
    return -1;
}

mc_status_t mc_segment_desc_from_json(const char *json, size_t len, mc_segment_desc_t *desc)
{
    if (!desc)
        return MC_ERR_INVALID_PARAMS;
    memset(desc, 0, sizeof(*desc));
    if (!json)
        return MC_ERR_INVALID_PARAMS;
    if (len > MC_SEGMENT_DESC_MAX_JSON) {
        MC_LOG_WARN("segment desc: %zu bytes of JSON exceed the cap %u", len,
                    MC_SEGMENT_DESC_MAX_JSON);
        return MC_ERR_TOO_LARGE;
    }
    mc_status_t st = MC_ERR_PROTOCOL;
    json_error_t err;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        MC_LOG_WARN("segment desc: malformed JSON at %d:%d: %s", err.line, err.column, err.text);
        return MC_ERR_PROTOCOL;
    }
    if (!json_is_object(root))
        BAD("top level is not an object");
    if (get_str(json_object_get(root, "name"), desc->name, sizeof(desc->name), 0))
        BAD("missing or bad \"name\"");
    const json_t *j = json_object_get(root, "protocol");
    if (j && get_str(j, desc->protocol, sizeof(desc->protocol), 1))
        BAD("bad \"protocol\"");
    j = json_object_get(root, "host_id");
    if (j && get_str(j, desc->host_id, sizeof(desc->host_id), 1))
        BAD("bad \"host_id\"");
    int64_t v = 0;
    j = json_object_get(root, "tcp_data_port");
    if (j && get_int_range(j, 0, UINT16_MAX, &v))
        BAD("bad \"tcp_data_port\"");
    desc->tcp_data_port = (uint16_t)v;
    v = 0;
    j = json_object_get(root, "pid");
    if (j && get_int_range(j, INT32_MIN, INT32_MAX, &v))
        BAD("bad \"pid\"");
    desc->pid = (int32_t)v;
    j = json_object_get(root, "timestamp");
    if (j && get_u64(j, &desc->timestamp))
        BAD("bad \"timestamp\"");

    const json_t *bufs = json_object_get(root, "buffers");
    if (!json_is_array(bufs))
        BAD("missing or bad \"buffers\"");
    size_t n = json_array_size(bufs);
    if (n > MC_SEGMENT_MAX_BUFFERS) {
        MC_LOG_WARN("segment desc: %zu buffers exceed the cap %d", n, MC_SEGMENT_MAX_BUFFERS);
        st = MC_ERR_TOO_LARGE;
        goto fail;
    }
    if (n) {
        desc->buffers = mc_calloc(n, sizeof(desc->buffers[0]));
        if (!desc->buffers) {
            st = MC_ERR_NO_MEMORY;
            goto fail;
        }
    }
    desc->n_buffers = n;
    for (size_t i = 0; i < n; i++)
        if (parse_buffer(json_array_get(bufs, i), i, &desc->buffers[i]))
            goto fail;
    if (mc_segment_desc_normalize(desc) != MC_OK)
        BAD("buffers overlap");

    j = json_object_get(root, "transport_info");
    if (j && !json_is_null(j)) {
        /* jansson allocates with malloc; mc_free (free) releases it like our own strings */
        desc->transport_info = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!desc->transport_info) {
            st = MC_ERR_NO_MEMORY;
            goto fail;
        }
    }
    json_decref(root);
    return MC_OK;
fail:
    json_decref(root);
    mc_segment_desc_free(desc);
    return st;
}

void mc_segment_desc_free(mc_segment_desc_t *desc)
{
    if (!desc)
        return;
    mc_free(desc->buffers);
    mc_free(desc->transport_info);
    memset(desc, 0, sizeof(*desc));
}

ptrdiff_t mc_segment_desc_find(const mc_segment_desc_t *desc, uint64_t addr, uint64_t len)
{
    if (!desc || len == 0 || desc->n_buffers == 0 || !desc->buffers)
        return -1;
    /* Last buffer whose start is <= addr (buffers are sorted by addr). */
    size_t lo = 0, hi = desc->n_buffers;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (desc->buffers[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == 0)
        return -1;
    const mc_buffer_desc_t *b = &desc->buffers[lo - 1];
    /* addr >= b->addr here; containment without computing addr + len. */
    if (len > b->length || addr - b->addr > b->length - len)
        return -1;
    return (ptrdiff_t)(lo - 1);
}

/* ---------------------------------------------------------------- signed form */

#define SEAL_HEAD "{\"mac\":\""
#define SEAL_MID "\",\"desc\":"
#define SEAL_HEAD_LEN (sizeof(SEAL_HEAD) - 1)
#define SEAL_MID_LEN (sizeof(SEAL_MID) - 1)
#define SEAL_HEX_LEN (2 * MC_AUTH_MAC_SIZE)
#define SEAL_OVERHEAD (SEAL_HEAD_LEN + SEAL_HEX_LEN + SEAL_MID_LEN + 1)

mc_status_t mc_segment_desc_seal(const mc_auth_t *auth, const char *json, size_t len,
                                 char **out_p, size_t *out_len_p)
{
    *out_p = NULL;
    uint8_t mac[MC_AUTH_MAC_SIZE];
    if (!json || len > MC_SEGMENT_DESC_MAX_JSON)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = mc_auth_sign_cluster(auth, MC_SEGMENT_DESC_MAC_LABEL, json, len, mac);
    if (st != MC_OK)
        return st;
    size_t n = SEAL_OVERHEAD + len;
    char *out = mc_malloc(n + 1);
    if (!out)
        return MC_ERR_NO_MEMORY;
    char *p = out;
    memcpy(p, SEAL_HEAD, SEAL_HEAD_LEN);
    p += SEAL_HEAD_LEN;
    mc_auth_hex(mac, MC_AUTH_MAC_SIZE, p); /* writes a NUL, overwritten next */
    p += SEAL_HEX_LEN;
    memcpy(p, SEAL_MID, SEAL_MID_LEN);
    p += SEAL_MID_LEN;
    memcpy(p, json, len);
    p += len;
    *p++ = '}';
    *p = '\0';
    *out_p = out;
    *out_len_p = n;
    return MC_OK;
}

mc_status_t mc_segment_desc_unseal(const mc_auth_t *auth, const char *in, size_t len,
                                   const char **json_p, size_t *json_len_p, int *signed_p)
{
    if (signed_p)
        *signed_p = 0;
    if (!in)
        return MC_ERR_INVALID_PARAMS;
    bool sealed = len >= SEAL_HEAD_LEN && memcmp(in, SEAL_HEAD, SEAL_HEAD_LEN) == 0;
    if (!sealed) {
        if (auth) {
            MC_LOG_WARN("segment desc: unsigned descriptor refused (this engine has a keyring)");
            return MC_ERR_AUTH;
        }
        *json_p = in;
        *json_len_p = len;
        return MC_OK;
    }
    uint8_t mac[MC_AUTH_MAC_SIZE];
    char hex[SEAL_HEX_LEN + 1];
    const char *mid = in + SEAL_HEAD_LEN + SEAL_HEX_LEN;
    if (len < SEAL_OVERHEAD + 2 || memcmp(mid, SEAL_MID, SEAL_MID_LEN) != 0 ||
        in[len - 1] != '}') {
        MC_LOG_WARN("segment desc: malformed signed envelope");
        return MC_ERR_PROTOCOL;
    }
    memcpy(hex, in + SEAL_HEAD_LEN, SEAL_HEX_LEN);
    hex[SEAL_HEX_LEN] = '\0';
    if (mc_auth_unhex(hex, mac, sizeof(mac)) != MC_OK) {
        MC_LOG_WARN("segment desc: malformed mac in signed envelope");
        return MC_ERR_PROTOCOL;
    }
    const char *json = mid + SEAL_MID_LEN;
    size_t jlen = len - SEAL_OVERHEAD;
    if (auth && mc_auth_verify_cluster(auth, MC_SEGMENT_DESC_MAC_LABEL, json, jlen, mac) != MC_OK) {
        MC_LOG_WARN("segment desc: signature does not verify against this engine's keyring");
        return MC_ERR_AUTH;
    }
    if (signed_p)
        *signed_p = 1;
    *json_p = json;
    *json_len_p = jlen;
    return MC_OK;
}
