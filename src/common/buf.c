/* Growable byte buffer and array growth (contracts in buf.h). */
#include "common/buf.h"

#include "common/alloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The capacity to grow to for `need` bytes/elements: min_cap, doubled until it fits.
 * 0 when `need` cannot be reached without overflowing `limit`. */
static size_t grown_capacity(size_t cur, size_t need, size_t min_cap, size_t limit)
{
    size_t nc = cur ? cur : (min_cap ? min_cap : 1);
    while (nc < need) {
        if (nc > limit / 2)
            return need <= limit ? need : 0;
        nc *= 2;
    }
    return nc <= limit ? nc : 0;
}

mc_status_t mc_array_reserve_impl(void *arr_pp, size_t *cap_p, size_t need, size_t elem_size,
                                  size_t min_cap)
{
    if (need <= *cap_p)
        return MC_OK;
    size_t nc = grown_capacity(*cap_p, need, min_cap, SIZE_MAX / (elem_size ? elem_size : 1));
    if (!nc)
        return MC_ERR_TOO_LARGE;
    void *arr;
    memcpy(&arr, arr_pp, sizeof(arr)); /* arr_pp is a T** for any T; no aliasing through void** */
    void *na = mc_realloc(arr, nc * elem_size);
    if (!na)
        return MC_ERR_NO_MEMORY;
    memcpy(arr_pp, &na, sizeof(na));
    *cap_p = nc;
    return MC_OK;
}

mc_status_t mc_buf_reserve(mc_buf_t *b, size_t extra)
{
    if (b->off && b->off == b->len)
        b->off = b->len = 0;
    if (extra <= b->cap - b->len)
        return MC_OK;
    if (b->off) { /* compact first: the consumed prefix may be enough */
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
        if (extra <= b->cap - b->len)
            return MC_OK;
    }
    if (extra > SIZE_MAX - b->len)
        return MC_ERR_TOO_LARGE;
    return mc_array_reserve(&b->data, &b->cap, b->len + extra, MC_BUF_MIN_CAP);
}

mc_status_t mc_buf_append(mc_buf_t *b, const void *p, size_t n)
{
    mc_status_t st = mc_buf_reserve(b, n);
    if (st != MC_OK)
        return st;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    return MC_OK;
}

mc_status_t mc_buf_printf(mc_buf_t *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return MC_ERR_INVALID_PARAMS;
    mc_status_t st = mc_buf_reserve(b, (size_t)n + 1);
    if (st != MC_OK)
        return st;
    va_start(ap, fmt);
    vsnprintf((char *)b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return MC_OK;
}

void mc_buf_consume(mc_buf_t *b, size_t n)
{
    b->off += n <= b->len - b->off ? n : b->len - b->off;
    if (b->off == b->len)
        b->off = b->len = 0;
}

void mc_buf_trim(mc_buf_t *b, size_t keep_cap)
{
    if (b->off == b->len && b->cap > keep_cap)
        mc_buf_free(b);
}

char *mc_buf_take_str(mc_buf_t *b)
{
    if (mc_buf_reserve(b, 1) != MC_OK)
        return NULL;
    if (b->off) {
        memmove(b->data, b->data + b->off, b->len - b->off);
        b->len -= b->off;
        b->off = 0;
    }
    b->data[b->len] = '\0';
    char *s = (char *)b->data;
    *b = (mc_buf_t){0};
    return s;
}

void mc_buf_free(mc_buf_t *b)
{
    mc_free(b->data);
    *b = (mc_buf_t){0};
}
