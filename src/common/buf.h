/* Growable memory: one byte buffer type (mc_buf_t) and one way to grow an array
 * (mc_array_reserve). Every place in the tree that grows memory as it goes uses these, so
 * overflow checks, growth policy and failure handling live here and nowhere else.
 *
 * Failure contract: a function that cannot grow returns MC_ERR_NO_MEMORY (or MC_ERR_TOO_LARGE
 * when the size would overflow) and leaves the buffer or array exactly as it was. */
#ifndef MC_COMMON_BUF_H
#define MC_COMMON_BUF_H

#include "mooncake/status.h"

#include <stddef.h>
#include <stdint.h>

/* A byte buffer that owns its memory. Bytes [off, len) are unread; [0, off) were consumed by
 * mc_buf_consume and are reclaimed on the next reserve. Zero-initialised ({0}) is a valid
 * empty buffer; release with mc_buf_free. */
typedef struct mc_buf {
    uint8_t *data;
    size_t off; /* start of the unread bytes */
    size_t len; /* end of the written bytes */
    size_t cap;
} mc_buf_t;

/* Room for `extra` more bytes after len (compacting away consumed bytes first). The first
 * allocation is at least `MC_BUF_MIN_CAP`; then the capacity doubles. */
#define MC_BUF_MIN_CAP 256
mc_status_t mc_buf_reserve(mc_buf_t *b, size_t extra);
mc_status_t mc_buf_append(mc_buf_t *b, const void *p, size_t n);
/* Appends formatted text and keeps a NUL after it (not counted in len), so a buffer built only
 * with mc_buf_printf can be used as a C string at any time. */
mc_status_t mc_buf_printf(mc_buf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline size_t mc_buf_unread(const mc_buf_t *b) { return b->len - b->off; }
static inline uint8_t *mc_buf_head(const mc_buf_t *b) { return b->data + b->off; }
/* Marks n unread bytes as consumed (n <= mc_buf_unread). Empties the buffer when all are. */
void mc_buf_consume(mc_buf_t *b, size_t n);
/* Drops everything written, keeps the memory. */
static inline void mc_buf_reset(mc_buf_t *b) { b->off = b->len = 0; }
/* Frees the memory when nothing is unread and the capacity is above keep_cap, so that one
 * large message does not pin its buffer for the life of a connection. */
void mc_buf_trim(mc_buf_t *b, size_t keep_cap);
/* Hands the bytes to the caller (NUL-terminated, release with mc_free) and leaves b empty.
 * Returns NULL (b unchanged) if the terminator cannot be added. */
char *mc_buf_take_str(mc_buf_t *b);
void mc_buf_free(mc_buf_t *b);

/* Grows the array *arr_pp (elements of sizeof(**arr_pp) bytes, capacity *cap_p elements) so
 * it holds at least `need` elements: doubling, starting at min_cap. New elements are not
 * initialised. Usage:
 *     if (mc_array_reserve(&m->items, &m->cap_items, m->n_items + 1, 16) != MC_OK) ...   */
#define mc_array_reserve(arr_pp, cap_p, need, min_cap)                                         \
    mc_array_reserve_impl((arr_pp), (cap_p), (need), sizeof(**(arr_pp)), (min_cap))
mc_status_t mc_array_reserve_impl(void *arr_pp, size_t *cap_p, size_t need, size_t elem_size,
                                  size_t min_cap);

#endif
