/* Helpers shared by the Mooncake-C CPython extension modules (_core, _engine, _store).
 *
 * Conventions of the bindings (all modules):
 *  - Wrong Python types raise TypeError; negative sizes/addresses raise ValueError; integers
 *    that do not fit 64 bits raise OverflowError. Everything else (unknown segment, memory not
 *    registered, mismatched list lengths, library errors) is returned as a negative mc_status_t
 *    like upstream Mooncake does.
 *  - Every call into libmooncake that can block runs with the GIL released. Python objects whose
 *    memory the C call reads or writes are pinned (Py_buffer views, tuples of keys) until the C
 *    call has returned.
 *  - Library log lines are queued by a sink that never touches Python and are delivered to the
 *    Python logger "mooncake" by the thread that next flushes (every binding call flushes before
 *    returning) or by a pending call on the main thread.
 *
 * Every function here must be called with the GIL held unless its comment says otherwise.
 */
#ifndef MOONCAKE_PY_COMMON_H
#define MOONCAKE_PY_COMMON_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#include "mooncake/status.h"

/* Cast a METH_VARARGS|METH_KEYWORDS function for a PyMethodDef without -Wcast-function-type. */
#define MCPY_KWFUNC(f) ((PyCFunction)(void (*)(void))(f))

/* ---- integers ---------------------------------------------------------------------------- */

/* Parse a non-negative integer (anything with __index__). TypeError / ValueError / OverflowError
 * naming `what` on failure (returns -1). */
int mcpy_u64(PyObject *o, const char *what, uint64_t *out);
/* Same, additionally capped at PY_SSIZE_T_MAX (byte counts that may become Python objects). */
int mcpy_size(PyObject *o, const char *what, size_t *out);
/* Parse a sequence of non-negative integers into a malloc'd array (*out, free with PyMem_Free).
 * The sequence is snapshotted, later mutation by other threads does not matter. */
int mcpy_u64_list(PyObject *seq, const char *what, uint64_t **out, Py_ssize_t *n);

/* ---- strings / keys ---------------------------------------------------------------------- */

/* A key or name from str (UTF-8) or bytes; embedded NUL raises ValueError. The returned pointer is
 * borrowed from `o` (valid while `o` is alive). */
int mcpy_cstr(PyObject *o, const char *what, const char **s);

/* A list of keys: a tuple snapshot keeps the items (and their UTF-8 buffers) alive. */
typedef struct mcpy_keys {
    PyObject *tuple;     /* owned */
    const char **v;      /* PyMem_Malloc'd array of borrowed pointers into tuple items */
    Py_ssize_t n;
} mcpy_keys_t;
int mcpy_keys_parse(PyObject *seq, const char *what, mcpy_keys_t *k);
void mcpy_keys_release(mcpy_keys_t *k);

/* ---- buffers ----------------------------------------------------------------------------- */

/* Read-only contiguous view of a bytes-like object (bytes, bytearray, memoryview, numpy...).
 * TypeError for non-buffers, BufferError for non-contiguous ones. Release with
 * PyBuffer_Release. */
int mcpy_get_view(PyObject *o, const char *what, Py_buffer *view);
/* A list of views; release with mcpy_views_release (works on partial results too). */
typedef struct mcpy_views {
    PyObject *tuple;
    Py_buffer *v;
    Py_ssize_t n;       /* views acquired */
} mcpy_views_t;
int mcpy_views_parse(PyObject *seq, const char *what, mcpy_views_t *vs);
void mcpy_views_release(mcpy_views_t *vs);

/* ---- registered memory table ------------------------------------------------------------- */

/* Ranges this binding registered with the library. Used to refuse raw addresses outside memory
 * the user registered (a stray pointer would otherwise crash the process). Own mutex, so the
 * table may be consulted with or without the GIL. */
typedef struct mcpy_region {
    uint64_t addr;
    uint64_t len;
} mcpy_region_t;
typedef struct mcpy_regions {
    pthread_mutex_t mu;
    mcpy_region_t *v;
    size_t n, cap;
} mcpy_regions_t;
void mcpy_regions_init(mcpy_regions_t *r);
void mcpy_regions_destroy(mcpy_regions_t *r);
/* 0 ok, MC_ERR_SEGMENT_ALREADY_EXISTS if it overlaps an entry, MC_ERR_NO_MEMORY. */
int mcpy_regions_add(mcpy_regions_t *r, uint64_t addr, uint64_t len);
/* Removes the entry starting at addr; returns its length, or 0 if none. */
uint64_t mcpy_regions_remove(mcpy_regions_t *r, uint64_t addr);
/* Length of the entry starting exactly at addr, or 0. */
uint64_t mcpy_regions_find(mcpy_regions_t *r, uint64_t addr);
/* 1 if [addr, addr+len) lies inside one entry (len 0: addr inside or at the end of one). */
int mcpy_regions_contains(mcpy_regions_t *r, uint64_t addr, uint64_t len);
/* Copy of all entries (PyMem_RawMalloc'd, caller frees with PyMem_RawFree); NULL if empty. */
mcpy_region_t *mcpy_regions_snapshot(mcpy_regions_t *r, size_t *n);

/* 1 if [addr, addr+len) is mapped readable and writable in this process (/proc/self/maps),
 * 0 if not, -1 if it cannot be determined. May be called without the GIL. */
int mcpy_range_is_rw_mapped(uint64_t addr, uint64_t len);

/* ---- call gate --------------------------------------------------------------------------- */

/* Lets a handle be closed while other threads have calls in flight: calls enter/leave the gate,
 * close waits (GIL released) for the in-flight count to reach 0 before destroying. */
typedef struct mcpy_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int open;           /* 1 while the handle may be used */
    long active;
} mcpy_gate_t;
void mcpy_gate_init(mcpy_gate_t *g);
void mcpy_gate_destroy(mcpy_gate_t *g);
/* 1 entered (call mcpy_gate_leave later), 0 the handle is not open. No GIL needed. */
int mcpy_gate_enter(mcpy_gate_t *g);
void mcpy_gate_leave(mcpy_gate_t *g);
/* Mark open (after a successful create). */
void mcpy_gate_open(mcpy_gate_t *g);
/* Close: refuses new calls, waits for in-flight ones. Returns 1 if it was open. Call WITHOUT the
 * GIL (it may wait for other threads that need the GIL to finish). */
int mcpy_gate_close(mcpy_gate_t *g);

/* ---- status / logging -------------------------------------------------------------------- */

/* logging.getLogger("mooncake").warning(fmt % ...) for binding-side refusals (GIL held; keeps
 * any pending exception). */
void mcpy_warn(const char *fmt, ...);

/* Python int from a status or byte count, flushing queued library logs first. */
PyObject *mcpy_ret(long long v);
/* Deliver queued library log lines to logging.getLogger("mooncake") now (keeps any pending
 * exception intact). Cheap when the queue is empty. */
void mcpy_log_flush(void);

/* Bridge control, implemented once in _core and reached by the other modules via a capsule. */
typedef struct mcpy_core_api {
    int version;
    void (*log_flush)(void);
} mcpy_core_api_t;
#define MCPY_CORE_CAPSULE "mooncake._core._C_API"
/* For _engine/_store module init: import the capsule (installs the bridge). -1 with exception. */
int mcpy_import_core(void);
/* For _core: the bridge implementation. */
int mcpy_bridge_install(PyObject *logger);
void mcpy_bridge_uninstall(void);   /* call WITHOUT the GIL */
void mcpy_bridge_flush(void);
const mcpy_core_api_t *mcpy_core_api_local(void);
unsigned long long mcpy_bridge_dropped(void);

#endif
