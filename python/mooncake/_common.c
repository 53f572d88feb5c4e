/* Shared helpers of the Mooncake-C Python bindings; see _common.h for the contract. */
#include "_common.h"

#include "mooncake/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================ integers ================================================ */

int mcpy_u64(PyObject *o, const char *what, uint64_t *out)
{
    if (o == NULL || o == Py_None || PyFloat_Check(o) || !PyIndex_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", what,
                     o ? Py_TYPE(o)->tp_name : "NULL");
        return -1;
    }
    PyObject *idx = PyNumber_Index(o);
    if (idx == NULL)
        return -1;
    int ovf = 0;
    long long sv = PyLong_AsLongLongAndOverflow(idx, &ovf);
    if (sv == -1 && PyErr_Occurred()) {
        Py_DECREF(idx);
        return -1;
    }
    if (ovf < 0 || (ovf == 0 && sv < 0)) {
        Py_DECREF(idx);
        PyErr_Format(PyExc_ValueError, "%s must not be negative", what);
        return -1;
    }
    if (ovf > 0) {
        unsigned long long uv = PyLong_AsUnsignedLongLong(idx);
        Py_DECREF(idx);
        if (uv == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Format(PyExc_OverflowError, "%s does not fit in 64 bits", what);
            return -1;
        }
        *out = (uint64_t)uv;
        return 0;
    }
    Py_DECREF(idx);
    *out = (uint64_t)sv;
    return 0;
}

int mcpy_size(PyObject *o, const char *what, size_t *out)
{
    uint64_t v;
    if (mcpy_u64(o, what, &v) < 0)
        return -1;
    if (v > (uint64_t)PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s is too large", what);
        return -1;
    }
    *out = (size_t)v;
    return 0;
}

static int reject_text(PyObject *seq, const char *what, const char *of)
{
    if (PyUnicode_Check(seq) || PyBytes_Check(seq) || PyByteArray_Check(seq) || seq == Py_None ||
        !PySequence_Check(seq)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list of %s, not %.100s", what, of,
                     Py_TYPE(seq)->tp_name);
        return -1;
    }
    return 0;
}

int mcpy_u64_list(PyObject *seq, const char *what, uint64_t **out, Py_ssize_t *n)
{
    if (reject_text(seq, what, "ints") < 0)
        return -1;
    PyObject *t = PySequence_Tuple(seq);
    if (t == NULL)
        return -1;
    Py_ssize_t cnt = PyTuple_GET_SIZE(t);
    uint64_t *v = PyMem_Malloc(sizeof(uint64_t) * (size_t)(cnt ? cnt : 1));
    if (v == NULL) {
        Py_DECREF(t);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < cnt; i++) {
        if (mcpy_u64(PyTuple_GET_ITEM(t, i), what, &v[i]) < 0) {
            PyMem_Free(v);
            Py_DECREF(t);
            return -1;
        }
    }
    Py_DECREF(t);
    *out = v;
    *n = cnt;
    return 0;
}

/* ================================ strings ================================================= */

int mcpy_cstr(PyObject *o, const char *what, const char **s)
{
    const char *p;
    Py_ssize_t len;
    if (PyUnicode_Check(o)) {
        p = PyUnicode_AsUTF8AndSize(o, &len);
        if (p == NULL)
            return -1;
    } else if (PyBytes_Check(o)) {
        p = PyBytes_AS_STRING(o);
        len = PyBytes_GET_SIZE(o);
    } else {
        PyErr_Format(PyExc_TypeError, "%s must be str, not %.100s", what, Py_TYPE(o)->tp_name);
        return -1;
    }
    if ((Py_ssize_t)strlen(p) != len) {
        PyErr_Format(PyExc_ValueError, "%s must not contain NUL characters", what);
        return -1;
    }
    *s = p;
    return 0;
}

int mcpy_keys_parse(PyObject *seq, const char *what, mcpy_keys_t *k)
{
    memset(k, 0, sizeof(*k));
    if (reject_text(seq, what, "str") < 0)
        return -1;
    k->tuple = PySequence_Tuple(seq);
    if (k->tuple == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(k->tuple);
    k->v = PyMem_Malloc(sizeof(char *) * (size_t)(n ? n : 1));
    if (k->v == NULL) {
        mcpy_keys_release(k);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (mcpy_cstr(PyTuple_GET_ITEM(k->tuple, i), what, &k->v[i]) < 0) {
            mcpy_keys_release(k);
            return -1;
        }
    }
    k->n = n;
    return 0;
}

void mcpy_keys_release(mcpy_keys_t *k)
{
    PyMem_Free(k->v);
    Py_CLEAR(k->tuple);
    k->v = NULL;
    k->n = 0;
}

/* ================================ buffers ================================================= */

int mcpy_get_view(PyObject *o, const char *what, Py_buffer *view)
{
    if (!PyObject_CheckBuffer(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bytes-like object, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    if (PyObject_GetBuffer(o, view, PyBUF_SIMPLE) < 0)
        return -1;
    return 0;
}

int mcpy_views_parse(PyObject *seq, const char *what, mcpy_views_t *vs)
{
    memset(vs, 0, sizeof(*vs));
    if (reject_text(seq, what, "bytes-like objects") < 0)
        return -1;
    vs->tuple = PySequence_Tuple(seq);
    if (vs->tuple == NULL)
        return -1;
    Py_ssize_t n = PyTuple_GET_SIZE(vs->tuple);
    vs->v = PyMem_Calloc((size_t)(n ? n : 1), sizeof(Py_buffer));
    if (vs->v == NULL) {
        mcpy_views_release(vs);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (mcpy_get_view(PyTuple_GET_ITEM(vs->tuple, i), what, &vs->v[i]) < 0) {
            mcpy_views_release(vs);
            return -1;
        }
        vs->n = i + 1;
    }
    return 0;
}

void mcpy_views_release(mcpy_views_t *vs)
{
    for (Py_ssize_t i = 0; i < vs->n; i++)
        PyBuffer_Release(&vs->v[i]);
    PyMem_Free(vs->v);
    Py_CLEAR(vs->tuple);
    vs->v = NULL;
    vs->n = 0;
}

/* ================================ region table ============================================ */

void mcpy_regions_init(mcpy_regions_t *r)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
}

void mcpy_regions_destroy(mcpy_regions_t *r)
{
    free(r->v);
    r->v = NULL;
    r->n = r->cap = 0;
    pthread_mutex_destroy(&r->mu);
}

/* Index of the first entry with addr > x. Caller holds mu. */
static size_t regions_upper(const mcpy_regions_t *r, uint64_t x)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->v[mid].addr <= x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int mcpy_regions_add(mcpy_regions_t *r, uint64_t addr, uint64_t len)
{
    uint64_t end;
    if (len == 0 || __builtin_add_overflow(addr, len, &end))
        return MC_ERR_INVALID_PARAMS;
    pthread_mutex_lock(&r->mu);
    size_t pos = regions_upper(r, addr);
    int overlap = (pos > 0 && r->v[pos - 1].addr + r->v[pos - 1].len > addr) ||
                  (pos < r->n && r->v[pos].addr < end);
    if (overlap) {
        pthread_mutex_unlock(&r->mu);
        return MC_ERR_SEGMENT_ALREADY_EXISTS;
    }
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 16;
        mcpy_region_t *nv = realloc(r->v, cap * sizeof(*nv));
        if (nv == NULL) {
            pthread_mutex_unlock(&r->mu);
            return MC_ERR_NO_MEMORY;
        }
        r->v = nv;
        r->cap = cap;
    }
    memmove(&r->v[pos + 1], &r->v[pos], (r->n - pos) * sizeof(r->v[0]));
    r->v[pos].addr = addr;
    r->v[pos].len = len;
    r->n++;
    pthread_mutex_unlock(&r->mu);
    return MC_OK;
}

uint64_t mcpy_regions_remove(mcpy_regions_t *r, uint64_t addr)
{
    uint64_t len = 0;
    pthread_mutex_lock(&r->mu);
    size_t pos = regions_upper(r, addr);
    if (pos > 0 && r->v[pos - 1].addr == addr) {
        len = r->v[pos - 1].len;
        memmove(&r->v[pos - 1], &r->v[pos], (r->n - pos) * sizeof(r->v[0]));
        r->n--;
    }
    pthread_mutex_unlock(&r->mu);
    return len;
}

uint64_t mcpy_regions_find(mcpy_regions_t *r, uint64_t addr)
{
    uint64_t len = 0;
    pthread_mutex_lock(&r->mu);
    size_t pos = regions_upper(r, addr);
    if (pos > 0 && r->v[pos - 1].addr == addr)
        len = r->v[pos - 1].len;
    pthread_mutex_unlock(&r->mu);
    return len;
}

int mcpy_regions_contains(mcpy_regions_t *r, uint64_t addr, uint64_t len)
{
    uint64_t end;
    if (__builtin_add_overflow(addr, len, &end))
        return 0;
    int ok = 0;
    pthread_mutex_lock(&r->mu);
    size_t pos = regions_upper(r, addr);
    if (pos > 0) {
        const mcpy_region_t *e = &r->v[pos - 1];
        ok = end <= e->addr + e->len;
    }
    pthread_mutex_unlock(&r->mu);
    return ok;
}

mcpy_region_t *mcpy_regions_snapshot(mcpy_regions_t *r, size_t *n)
{
    mcpy_region_t *copy = NULL;
    pthread_mutex_lock(&r->mu);
    *n = r->n;
    if (r->n) {
        copy = PyMem_RawMalloc(r->n * sizeof(*copy));
        if (copy)
            memcpy(copy, r->v, r->n * sizeof(*copy));
        else
            *n = 0;
    }
    pthread_mutex_unlock(&r->mu);
    return copy;
}

int mcpy_range_is_rw_mapped(uint64_t addr, uint64_t len)
{
    uint64_t end;
    if (len == 0)
        len = 1;
    if (__builtin_add_overflow(addr, len, &end))
        return 0;
    FILE *f = fopen("/proc/self/maps", "re");
    if (f == NULL)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    uint64_t cur = addr;
    int ok = 0;
    while (getline(&line, &cap, f) > 0) {
        unsigned long long s, e;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &s, &e, perms) != 3)
            continue;
        if (e <= cur)
            continue;
        if (s > cur)
            break; /* hole */
        if (perms[0] != 'r' || perms[1] != 'w')
            break;
        cur = e;
        if (cur >= end) {
            ok = 1;
            break;
        }
    }
    free(line);
    fclose(f);
    return ok;
}

/* ================================ gate ==================================================== */

void mcpy_gate_init(mcpy_gate_t *g)
{
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->open = 0;
    g->active = 0;
}

void mcpy_gate_destroy(mcpy_gate_t *g)
{
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
}

int mcpy_gate_enter(mcpy_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    int ok = g->open;
    if (ok)
        g->active++;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

void mcpy_gate_leave(mcpy_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    if (--g->active == 0)
        pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

void mcpy_gate_open(mcpy_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    g->open = 1;
    pthread_mutex_unlock(&g->mu);
}

int mcpy_gate_close(mcpy_gate_t *g)
{
    pthread_mutex_lock(&g->mu);
    int was = g->open;
    g->open = 0;
    while (g->active > 0)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return was;
}

/* ================================ logging bridge ========================================== */

/* The library calls the sink from any thread while holding its own sink lock, so the sink must
 * never wait for the GIL (a Python thread holding the GIL may be about to log): it only queues.
 * Delivery happens with the GIL held, from mcpy_bridge_flush (every binding call) or from a
 * pending call scheduled on the main thread. */

#define MCPY_LOG_QUEUE_MAX 4096

typedef struct logq_item {
    struct logq_item *next;
    int level;
    int line;
    size_t file_len;
    char text[]; /* file '\0' msg '\0' */
} logq_item_t;

static pthread_mutex_t logq_mu = PTHREAD_MUTEX_INITIALIZER;
static logq_item_t *logq_head, *logq_tail;
static size_t logq_len;
static atomic_size_t logq_count;
static atomic_int logq_pending;      /* a pending call is scheduled */
static atomic_int bridge_on;         /* sink installed and interpreter alive */
static atomic_ullong bridge_dropped; /* lines dropped because the queue was full */
static PyObject *bridge_logger;      /* owned; GIL */

static int bridge_pending_cb(void *arg)
{
    (void)arg;
    atomic_store(&logq_pending, 0);
    mcpy_bridge_flush();
    return 0;
}

static void bridge_sink(mc_log_level_t level, const char *file, int line, const char *msg,
                        void *arg)
{
    (void)arg;
    if (!atomic_load(&bridge_on))
        return;
    size_t fl = strlen(file), ml = strlen(msg);
    logq_item_t *it = malloc(sizeof(*it) + fl + ml + 2);
    if (it == NULL) {
        atomic_fetch_add(&bridge_dropped, 1);
        return;
    }
    it->next = NULL;
    it->level = (int)level;
    it->line = line;
    it->file_len = fl;
    memcpy(it->text, file, fl + 1);
    memcpy(it->text + fl + 1, msg, ml + 1);
    pthread_mutex_lock(&logq_mu);
    if (logq_len >= MCPY_LOG_QUEUE_MAX) {
        pthread_mutex_unlock(&logq_mu);
        free(it);
        atomic_fetch_add(&bridge_dropped, 1);
        return;
    }
    if (logq_tail)
        logq_tail->next = it;
    else
        logq_head = it;
    logq_tail = it;
    logq_len++;
    atomic_fetch_add(&logq_count, 1);
    pthread_mutex_unlock(&logq_mu);
    if (!atomic_exchange(&logq_pending, 1)) {
        if (Py_AddPendingCall(bridge_pending_cb, NULL) != 0)
            atomic_store(&logq_pending, 0);
    }
}

static void bridge_emit(PyObject *logger, logq_item_t *it)
{
    PyObject *en = PyObject_CallMethod(logger, "isEnabledFor", "i", it->level);
    if (en == NULL) {
        PyErr_Clear();
        return;
    }
    int enabled = PyObject_IsTrue(en);
    Py_DECREF(en);
    if (enabled <= 0) {
        PyErr_Clear();
        return;
    }
    PyObject *name = PyObject_GetAttrString(logger, "name");
    PyObject *args = PyTuple_New(0);
    PyObject *rec = NULL;
    if (name && args)
        rec = PyObject_CallMethod(logger, "makeRecord", "OisisOO", name, it->level, it->text,
                                  it->line, it->text + it->file_len + 1, args, Py_None);
    if (rec) {
        PyObject *r = PyObject_CallMethod(logger, "handle", "O", rec);
        Py_XDECREF(r);
    }
    Py_XDECREF(rec);
    Py_XDECREF(args);
    Py_XDECREF(name);
    if (PyErr_Occurred())
        PyErr_Clear();
}

void mcpy_bridge_flush(void)
{
    if (atomic_load(&logq_count) == 0)
        return;
    pthread_mutex_lock(&logq_mu);
    logq_item_t *it = logq_head;
    logq_head = logq_tail = NULL;
    logq_len = 0;
    atomic_store(&logq_count, 0);
    pthread_mutex_unlock(&logq_mu);
    if (it == NULL)
        return;
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    PyObject *logger = bridge_logger;
    Py_XINCREF(logger);
    while (it) {
        logq_item_t *next = it->next;
        if (logger && Py_IsInitialized())
            bridge_emit(logger, it);
        free(it);
        it = next;
    }
    Py_XDECREF(logger);
    PyErr_Restore(et, ev, tb);
}

int mcpy_bridge_install(PyObject *logger)
{
    Py_INCREF(logger);
    Py_XSETREF(bridge_logger, logger);
    atomic_store(&bridge_on, 1);
    mc_log_set_sink(bridge_sink, NULL);
    return 0;
}

void mcpy_bridge_uninstall(void)
{
    atomic_store(&bridge_on, 0);
    /* Takes the library's sink lock: once it returns no thread is inside bridge_sink. */
    mc_log_set_sink(NULL, NULL);
}

unsigned long long mcpy_bridge_dropped(void)
{
    return atomic_load(&bridge_dropped);
}

static const mcpy_core_api_t core_api_local = {1, mcpy_bridge_flush};
static const mcpy_core_api_t *core_api;

const mcpy_core_api_t *mcpy_core_api_local(void)
{
    core_api = &core_api_local;
    return &core_api_local;
}

int mcpy_import_core(void)
{
    const mcpy_core_api_t *api = PyCapsule_Import(MCPY_CORE_CAPSULE, 0);
    if (api == NULL)
        return -1;
    if (api->version != 1) {
        PyErr_SetString(PyExc_ImportError, "mooncake._core has an incompatible C API version");
        return -1;
    }
    core_api = api;
    return 0;
}

void mcpy_log_flush(void)
{
    if (core_api)
        core_api->log_flush();
}

PyObject *mcpy_ret(long long v)
{
    mcpy_log_flush();
    return PyLong_FromLongLong(v);
}

void mcpy_warn(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    PyObject *et, *ev, *tb;
    PyErr_Fetch(&et, &ev, &tb);
    mcpy_log_flush();
    PyObject *logging = PyImport_ImportModule("logging");
    PyObject *logger = logging ? PyObject_CallMethod(logging, "getLogger", "s", "mooncake") : NULL;
    PyObject *r = logger ? PyObject_CallMethod(logger, "warning", "s", msg) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(logger);
    Py_XDECREF(logging);
    if (PyErr_Occurred())
        PyErr_Clear();
    PyErr_Restore(et, ev, tb);
}
