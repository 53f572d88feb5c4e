/* Helpers shared by the disk tier's tests: deterministic values, small configs, reads. */
#ifndef MC_TESTS_DISK_DISK_TEST_H
#define MC_TESTS_DISK_DISK_TEST_H

#include "common/hash.h"
#include "disk/disk_store.h"

#include <liburing.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The store needs io_uring; where the kernel or a seccomp filter refuses it (containers often
 * do), the test exits 77, which ctest reports as skipped (SKIP_RETURN_CODE), with the reason. */
static inline void dt_require_uring(void)
{
    struct io_uring r;
    int rc = io_uring_queue_init(1, &r, 0);
    if (rc != 0) {
        fprintf(stderr, "io_uring unavailable (%s): disk tier test skipped\n", strerror(-rc));
        exit(77);
    }
    io_uring_queue_exit(&r);
}

/* The value of key i: len bytes derived from i (so a reader can check any recovered object). */
static inline void dt_fill(uint8_t *p, size_t len, uint64_t i)
{
    uint64_t x = i * 0x9e3779b97f4a7c15ull + 1;
    for (size_t k = 0; k < len; k += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(p + k, &x, len - k < 8 ? len - k : 8);
    }
}

static inline uint8_t *dt_value(size_t len, uint64_t i)
{
    uint8_t *p = malloc(len ? len : 1);
    dt_fill(p, len, i);
    return p;
}

static inline void dt_key(char *out, size_t cap, uint64_t i)
{
    snprintf(out, cap, "key-%llu", (unsigned long long)i);
}

/* Puts key i with len bytes of its value. */
static inline mc_status_t dt_put(mc_disk_store_t *s, const char *tenant, uint64_t i, size_t len)
{
    char k[64];
    dt_key(k, sizeof(k), i);
    uint8_t *v = dt_value(len, i);
    mc_status_t st = mc_disk_store_put(s, tenant, k, strlen(k), v, len, mc_hash64(v, len));
    free(v);
    return st;
}

/* Reads key i into a 4 KiB-aligned buffer (direct when deadline is 0); on MC_OK checks the
 * bytes against the value of i (returns MC_ERR_INTERNAL when they differ). *len_p optional. */
static inline mc_status_t dt_get(mc_disk_store_t *s, const char *tenant, uint64_t i,
                                 uint64_t deadline_ns, size_t *len_p)
{
    char k[64];
    dt_key(k, sizeof(k), i);
    mc_disk_loc_t loc;
    mc_status_t st = mc_disk_store_lookup(s, tenant, k, strlen(k), &loc);
    if (st != MC_OK)
        return st;
    size_t cap = (loc.data_size + 4095) / 4096 * 4096 + 4096;
    uint8_t *buf = aligned_alloc(4096, cap);
    mc_disk_read_t r = {.tenant = tenant, .key = k, .key_len = strlen(k), .buf = buf, .cap = cap};
    st = mc_disk_store_read_batch(s, &r, 1, deadline_ns);
    if (st == MC_OK)
        st = r.status;
    if (st == MC_OK) {
        uint8_t *want = dt_value(r.len, i);
        if (memcmp(want, buf, r.len) != 0)
            st = MC_ERR_INTERNAL;
        free(want);
    }
    if (len_p)
        *len_p = r.len;
    free(buf);
    return st;
}

/* A store config for tests: small buckets, no eviction surprises. */
static inline void dt_config(mc_disk_config_t *c)
{
    mc_disk_config_default(c);
    c->rings = 2;
    c->io_depth = 16;
}

#endif
