/* mooncake._engine: the C type behind mooncake.engine.TransferEngine (wraps mooncake/te.h).
 *
 * Return conventions follow upstream Mooncake: ints are 0 or a negative mc_status_t; batch ids
 * are positive, 0 when the submission failed (transfer_submit_write, batch_transfer_async*);
 * allocate_managed_buffer / get_first_buffer_address return 0 on failure. A notification given
 * to transfer_sync / batch_transfer_sync is sent to the target once the transfer completed
 * (mc_te_notify_send); get_notifies drains what this engine received.
 *
 * Memory safety: local addresses of transfers and of write_bytes_to_buffer /
 * read_bytes_from_buffer must lie inside memory registered through this object
 * (register_memory, batch_register_memory, allocate_managed_buffer); register_memory checks that
 * the range is mapped read-write. Anything else is refused with MC_ERR_OUT_OF_RANGE instead of
 * letting the process touch a stray pointer. Remote ranges are checked by the serving peer.
 *
 * Lifetime: a gate counts calls in flight; close()/dealloc wait for them, then destroy the
 * engine. All te.h calls run with the GIL released.
 */
#include "_common.h"

#include "mooncake/te.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    mc_te_t *te;
    mcpy_gate_t gate;
    mcpy_regions_t regions; /* everything registered through this object (incl. managed) */
    mcpy_regions_t managed; /* allocate_managed_buffer allocations */
    PyObject *batches;      /* {id: (batch handle, n requests)} of async batches */
    unsigned long long next_batch_id;
    PyObject *weakrefs;
} EngineObject;

#define NOT_READY MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS

/* True when the engine is set up and this call entered its gate (ENGINE_LEAVE after). */
#define ENGINE_TRY(self) ((self)->te != NULL && mcpy_gate_enter(&(self)->gate))
/* Enter the gate or return `fail` from the calling method. */
#define ENGINE_ENTER(self, fail)                                                                   \
    do {                                                                                           \
        if (!ENGINE_TRY(self))                                                                     \
            return (fail);                                                                         \
    } while (0)
#define ENGINE_LEAVE(self) mcpy_gate_leave(&(self)->gate)

static PyObject *engine_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    EngineObject *self = (EngineObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    mcpy_gate_init(&self->gate);
    mcpy_regions_init(&self->regions);
    mcpy_regions_init(&self->managed);
    self->batches = PyDict_New();
    self->next_batch_id = 1;
    if (self->batches == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

/* Tear the engine down; GIL held on entry and exit, released while waiting. */
static void engine_teardown(EngineObject *self)
{
    mc_te_t *te = self->te;
    if (te == NULL)
        return;
    size_t nm = 0;
    mcpy_region_t *managed = NULL;
    Py_BEGIN_ALLOW_THREADS
    mcpy_gate_close(&self->gate);
    managed = mcpy_regions_snapshot(&self->managed, &nm);
    for (size_t i = 0; i < nm; i++) {
        mc_te_unregister(te, (void *)(uintptr_t)managed[i].addr);
        mc_te_free_shareable(te, (void *)(uintptr_t)managed[i].addr);
    }
    mc_te_destroy(te);
    Py_END_ALLOW_THREADS
    PyMem_RawFree(managed);
    self->te = NULL;
    mcpy_regions_destroy(&self->managed);
    mcpy_regions_init(&self->managed);
    mcpy_regions_destroy(&self->regions);
    mcpy_regions_init(&self->regions);
    if (self->batches)
        PyDict_Clear(self->batches);
    mcpy_log_flush();
}

static void engine_dealloc(EngineObject *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    engine_teardown(self);
    Py_CLEAR(self->batches);
    mcpy_regions_destroy(&self->regions);
    mcpy_regions_destroy(&self->managed);
    mcpy_gate_destroy(&self->gate);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int engine_traverse(EngineObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->batches);
    return 0;
}

static int engine_clear(EngineObject *self)
{
    /* batches only holds ints and tuples of ints: nothing to break. */
    return 0;
}

/* _create(local_server_name, metadata_uri, protocol, transfer_timeout_ms=0,
 *         tcp_connections=0, worker_threads=0, slice_size=0, force_tcp=0, hugepages=0,
 *         tcp_stripe=0, tcp_socket_buf=0, busy_poll_us=0, metadata_timeout_ms=0,
 *         redis_username=None, redis_password=None, redis_db_index=0,
 *         auth_token_file=None, tcp_idle_timeout_s=0, tcp_max_server_conns=0) -> status.
 * The keyword arguments are the tuning fields of mc_te_config_t (0/None = the engine's
 * default; engine.py fills them from the environment through _config.te_tuning_from_env). */
static PyObject *engine_create(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"local_server_name", "metadata_uri", "protocol",
                             "transfer_timeout_ms", "tcp_connections", "worker_threads",
                             "slice_size", "force_tcp", "hugepages", "tcp_stripe",
                             "tcp_socket_buf", "busy_poll_us", "metadata_timeout_ms",
                             "redis_username", "redis_password", "redis_db_index",
                             "auth_token_file", "tcp_idle_timeout_s", "tcp_max_server_conns",
                             NULL};
    PyObject *name_o, *meta_o, *proto_o;
    unsigned int timeout_ms = 0, conns = 0, workers = 0, slice = 0, force_tcp = 0, stripe = 0,
                 sockbuf = 0, meta_ms = 0, redis_db = 0, idle_s = 0, max_srv = 0;
    int hugepages = 0, busy_us = 0;
    const char *redis_user = NULL, *redis_pass = NULL, *token_file = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|IIIIIiIIiIzzIzII:_create", kwlist, &name_o,
                                     &meta_o, &proto_o, &timeout_ms, &conns, &workers, &slice,
                                     &force_tcp, &hugepages, &stripe, &sockbuf, &busy_us,
                                     &meta_ms, &redis_user, &redis_pass, &redis_db, &token_file,
                                     &idle_s, &max_srv))
        return NULL;
    const char *name, *meta, *proto;
    if (mcpy_cstr(name_o, "local_hostname", &name) < 0 ||
        mcpy_cstr(meta_o, "metadata_server", &meta) < 0 ||
        mcpy_cstr(proto_o, "protocol", &proto) < 0)
        return NULL;
    if (self->te != NULL) {
        mcpy_warn("TransferEngine.initialize: already initialized");
        return mcpy_ret(MC_ERR_INVALID_PARAMS);
    }
    mc_te_config_t cfg = {
        .metadata_uri = meta,
        .local_server_name = name,
        .protocol = proto,
        .transfer_timeout_ms = timeout_ms,
        .tcp_connections = conns,
        .worker_threads = workers,
        .slice_size = slice,
        .force_tcp = force_tcp,
        .hugepages = hugepages,
        .tcp_stripe = stripe,
        .tcp_socket_buf = sockbuf,
        .busy_poll_us = busy_us,
        .metadata_timeout_ms = meta_ms,
        .redis_username = redis_user,
        .redis_password = redis_pass,
        .redis_db_index = redis_db,
        .auth_token_file = token_file,
        .tcp_idle_timeout_s = idle_s,
        .tcp_max_server_conns = max_srv,
    };
    mc_te_t *te = NULL;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_te_create(&cfg, &te);
    Py_END_ALLOW_THREADS
    if (st == MC_OK) {
        self->te = te;
        mcpy_gate_open(&self->gate);
    }
    return mcpy_ret(st);
}

static PyObject *engine_close(EngineObject *self, PyObject *unused)
{
    engine_teardown(self);
    return mcpy_ret(MC_OK);
}

static PyObject *engine_get_rpc_port(EngineObject *self, PyObject *unused)
{
    ENGINE_ENTER(self, mcpy_ret(NOT_READY));
    uint16_t port = mc_te_rpc_port(self->te);
    ENGINE_LEAVE(self);
    return mcpy_ret(port);
}

static PyObject *engine_get_local_hostname(EngineObject *self, PyObject *unused)
{
    ENGINE_ENTER(self, PyUnicode_FromString(""));
    PyObject *r = PyUnicode_FromString(mc_te_local_name(self->te));
    ENGINE_LEAVE(self);
    return r;
}

/* ---- memory ------------------------------------------------------------------------------ */

static mc_status_t register_range(EngineObject *self, uint64_t addr, uint64_t len,
                                  const char *location)
{
    if (len == 0 || addr == 0 || addr + len < addr) {
        mcpy_warn("register_memory: empty or wrapping range 0x%llx+%llu",
                  (unsigned long long)addr, (unsigned long long)len);
        return MC_ERR_INVALID_PARAMS;
    }
    int mapped;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    mapped = mcpy_range_is_rw_mapped(addr, len);
    st = mapped == 0 ? MC_ERR_INVALID_PARAMS
                     : mc_te_register(self->te, (void *)(uintptr_t)addr, (size_t)len, location);
    Py_END_ALLOW_THREADS
    if (mapped == 0) {
        mcpy_warn("register_memory: [0x%llx, +%llu) is not mapped read-write in this process",
                  (unsigned long long)addr, (unsigned long long)len);
        return st;
    }
    if (st != MC_OK)
        return st;
    int rc = mcpy_regions_add(&self->regions, addr, len);
    if (rc != MC_OK) {
        Py_BEGIN_ALLOW_THREADS
        mc_te_unregister(self->te, (void *)(uintptr_t)addr);
        Py_END_ALLOW_THREADS
        return rc;
    }
    return MC_OK;
}

static mc_status_t unregister_range(EngineObject *self, uint64_t addr)
{
    if (mcpy_regions_find(&self->managed, addr) != 0) {
        mcpy_warn("unregister_memory: 0x%llx is a managed buffer; use free_managed_buffer",
                  (unsigned long long)addr);
        return MC_ERR_INVALID_PARAMS;
    }
    uint64_t len = mcpy_regions_remove(&self->regions, addr);
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_te_unregister(self->te, (void *)(uintptr_t)addr);
    Py_END_ALLOW_THREADS
    if (st != MC_OK && len != 0)
        mcpy_regions_add(&self->regions, addr, len); /* still registered (e.g. BUSY) */
    return st;
}

static int parse_location(PyObject *loc_o, const char **loc)
{
    *loc = NULL;
    if (loc_o == NULL || loc_o == Py_None)
        return 0;
    if (mcpy_cstr(loc_o, "location", loc) < 0)
        return -1;
    if (**loc == '\0')
        *loc = NULL;
    return 0;
}

static PyObject *engine_register_memory(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer_addr", "capacity", "location", NULL};
    PyObject *addr_o, *cap_o, *loc_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:register_memory", kwlist, &addr_o, &cap_o,
                                     &loc_o))
        return NULL;
    uint64_t addr, cap;
    const char *loc;
    if (mcpy_u64(addr_o, "buffer_addr", &addr) < 0 || mcpy_u64(cap_o, "capacity", &cap) < 0 ||
        parse_location(loc_o, &loc) < 0)
        return NULL;
    ENGINE_ENTER(self, mcpy_ret(NOT_READY));
    mc_status_t st = register_range(self, addr, cap, loc);
    ENGINE_LEAVE(self);
    return mcpy_ret(st);
}

static PyObject *engine_unregister_memory(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer_addr", NULL};
    PyObject *addr_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:unregister_memory", kwlist, &addr_o))
        return NULL;
    uint64_t addr;
    if (mcpy_u64(addr_o, "buffer_addr", &addr) < 0)
        return NULL;
    ENGINE_ENTER(self, mcpy_ret(NOT_READY));
    mc_status_t st = unregister_range(self, addr);
    ENGINE_LEAVE(self);
    return mcpy_ret(st);
}

static PyObject *engine_batch_register_memory(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer_addresses", "capacities", "location", NULL};
    PyObject *addrs_o, *caps_o, *loc_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:batch_register_memory", kwlist, &addrs_o,
                                     &caps_o, &loc_o))
        return NULL;
    uint64_t *addrs = NULL, *caps = NULL;
    Py_ssize_t na, nc;
    const char *loc;
    if (mcpy_u64_list(addrs_o, "buffer_addresses", &addrs, &na) < 0)
        return NULL;
    if (mcpy_u64_list(caps_o, "capacities", &caps, &nc) < 0 || parse_location(loc_o, &loc) < 0) {
        PyMem_Free(addrs);
        PyMem_Free(caps);
        return NULL;
    }
    mc_status_t st = MC_OK;
    if (na != nc) {
        mcpy_warn("batch_register_memory: %zd addresses but %zd capacities", na, nc);
        st = MC_ERR_INVALID_PARAMS;
    } else if (!ENGINE_TRY(self)) {
        st = NOT_READY;
    } else {
        Py_ssize_t i;
        for (i = 0; i < na && st == MC_OK; i++)
            st = register_range(self, addrs[i], caps[i], loc);
        if (st != MC_OK) /* roll back what this call registered */
            for (Py_ssize_t j = 0; j + 1 < i; j++)
                unregister_range(self, addrs[j]);
        ENGINE_LEAVE(self);
    }
    PyMem_Free(addrs);
    PyMem_Free(caps);
    return mcpy_ret(st);
}

static PyObject *engine_batch_unregister_memory(EngineObject *self, PyObject *args,
                                                PyObject *kwds)
{
    static char *kwlist[] = {"buffer_addresses", NULL};
    PyObject *addrs_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:batch_unregister_memory", kwlist, &addrs_o))
        return NULL;
    uint64_t *addrs;
    Py_ssize_t n;
    if (mcpy_u64_list(addrs_o, "buffer_addresses", &addrs, &n) < 0)
        return NULL;
    mc_status_t first = MC_OK;
    if (!ENGINE_TRY(self)) {
        first = NOT_READY;
    } else {
        for (Py_ssize_t i = 0; i < n; i++) {
            mc_status_t st = unregister_range(self, addrs[i]);
            if (st != MC_OK && first == MC_OK)
                first = st;
        }
        ENGINE_LEAVE(self);
    }
    PyMem_Free(addrs);
    return mcpy_ret(first);
}

static PyObject *engine_allocate_managed_buffer(EngineObject *self, PyObject *args,
                                                PyObject *kwds)
{
    static char *kwlist[] = {"length", NULL};
    PyObject *len_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:allocate_managed_buffer", kwlist, &len_o))
        return NULL;
    size_t len;
    if (mcpy_size(len_o, "length", &len) < 0)
        return NULL;
    if (len == 0)
        return mcpy_ret(0);
    ENGINE_ENTER(self, mcpy_ret(0));
    void *p;
    mc_status_t st = MC_OK;
    Py_BEGIN_ALLOW_THREADS
    p = mc_te_alloc_shareable(self->te, len);
    if (p != NULL) {
        st = mc_te_register(self->te, p, len, NULL);
        if (st != MC_OK) {
            mc_te_free_shareable(self->te, p);
            p = NULL;
        }
    }
    Py_END_ALLOW_THREADS
    if (p != NULL) {
        if (mcpy_regions_add(&self->regions, (uintptr_t)p, len) != MC_OK ||
            mcpy_regions_add(&self->managed, (uintptr_t)p, len) != MC_OK) {
            mcpy_regions_remove(&self->regions, (uintptr_t)p);
            Py_BEGIN_ALLOW_THREADS
            mc_te_unregister(self->te, p);
            mc_te_free_shareable(self->te, p);
            Py_END_ALLOW_THREADS
            p = NULL;
        }
    }
    ENGINE_LEAVE(self);
    return mcpy_ret((long long)(uintptr_t)p);
}

static PyObject *engine_free_managed_buffer(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer_addr", "length", NULL};
    PyObject *addr_o, *len_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|O:free_managed_buffer", kwlist, &addr_o,
                                     &len_o))
        return NULL;
    uint64_t addr, len = 0;
    if (mcpy_u64(addr_o, "buffer_addr", &addr) < 0 ||
        (len_o && mcpy_u64(len_o, "length", &len) < 0))
        return NULL;
    ENGINE_ENTER(self, mcpy_ret(NOT_READY));
    mc_status_t st = MC_OK;
    uint64_t have = mcpy_regions_remove(&self->managed, addr);
    if (have == 0) {
        mcpy_warn("free_managed_buffer: 0x%llx was not returned by allocate_managed_buffer",
                  (unsigned long long)addr);
        st = MC_ERR_INVALID_PARAMS;
    } else if (len != 0 && len != have) {
        mcpy_regions_add(&self->managed, addr, have);
        mcpy_warn("free_managed_buffer: length %llu does not match the allocation (%llu)",
                  (unsigned long long)len, (unsigned long long)have);
        st = MC_ERR_INVALID_PARAMS;
    } else {
        mcpy_regions_remove(&self->regions, addr);
        Py_BEGIN_ALLOW_THREADS
        st = mc_te_unregister(self->te, (void *)(uintptr_t)addr);
        if (st == MC_OK)
            mc_te_free_shareable(self->te, (void *)(uintptr_t)addr);
        Py_END_ALLOW_THREADS
        if (st != MC_OK) {
            mcpy_regions_add(&self->regions, addr, have);
            mcpy_regions_add(&self->managed, addr, have);
        }
    }
    ENGINE_LEAVE(self);
    return mcpy_ret(st);
}

/* ---- raw buffer I/O ---------------------------------------------------------------------- */

static PyObject *engine_write_bytes_to_buffer(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"dest_address", "src_ptr", "length", NULL};
    PyObject *dest_o, *src_o, *len_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|O:write_bytes_to_buffer", kwlist, &dest_o,
                                     &src_o, &len_o))
        return NULL;
    uint64_t dest;
    Py_buffer view;
    if (mcpy_u64(dest_o, "dest_address", &dest) < 0 || mcpy_get_view(src_o, "src_ptr", &view) < 0)
        return NULL;
    uint64_t len = (uint64_t)view.len;
    if (len_o && mcpy_u64(len_o, "length", &len) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    mc_status_t st = MC_OK;
    if (len > (uint64_t)view.len) {
        mcpy_warn("write_bytes_to_buffer: length %llu exceeds the %zd source bytes",
                  (unsigned long long)len, view.len);
        st = MC_ERR_INVALID_PARAMS;
    } else if (!ENGINE_TRY(self)) {
        st = NOT_READY;
    } else {
        if (!mcpy_regions_contains(&self->regions, dest, len)) {
            mcpy_warn("write_bytes_to_buffer: [0x%llx, +%llu) is not registered memory",
                      (unsigned long long)dest, (unsigned long long)len);
            st = MC_ERR_OUT_OF_RANGE;
        } else {
            Py_BEGIN_ALLOW_THREADS
            memcpy((void *)(uintptr_t)dest, view.buf, (size_t)len);
            Py_END_ALLOW_THREADS
        }
        ENGINE_LEAVE(self);
    }
    PyBuffer_Release(&view);
    return mcpy_ret(st);
}

static PyObject *engine_read_bytes_from_buffer(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"source_address", "length", NULL};
    PyObject *src_o, *len_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:read_bytes_from_buffer", kwlist, &src_o,
                                     &len_o))
        return NULL;
    uint64_t src;
    size_t len;
    if (mcpy_u64(src_o, "source_address", &src) < 0 || mcpy_size(len_o, "length", &len) < 0)
        return NULL;
    if (!ENGINE_TRY(self)) {
        PyErr_SetString(PyExc_RuntimeError, "TransferEngine is not initialized");
        return NULL;
    }
    if (!mcpy_regions_contains(&self->regions, src, len)) {
        ENGINE_LEAVE(self);
        PyErr_Format(PyExc_ValueError,
                     "read_bytes_from_buffer: [0x%llx, +%zu) is not registered memory",
                     (unsigned long long)src, len);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
    if (out != NULL) {
        char *dst = PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS
        memcpy(dst, (const void *)(uintptr_t)src, len);
        Py_END_ALLOW_THREADS
    }
    ENGINE_LEAVE(self);
    mcpy_log_flush();
    return out;
}

/* ---- transfers --------------------------------------------------------------------------- */

static int parse_opcode(PyObject *o, mc_te_opcode_t *op)
{
    uint64_t v;
    if (mcpy_u64(o, "opcode", &v) < 0)
        return -1;
    if (v != MC_TE_READ && v != MC_TE_WRITE) {
        PyErr_Format(PyExc_ValueError, "opcode must be TransferOpcode.READ (0) or WRITE (1)");
        return -1;
    }
    *op = (mc_te_opcode_t)v;
    return 0;
}

/* Parsed arguments of a transfer call. */
typedef struct {
    const char *target;
    mc_te_request_t *reqs;
    Py_ssize_t n;
    mc_te_segment_t seg; /* set by xfer_prepare */
} xfer_args_t;

static void xfer_args_free(xfer_args_t *x)
{
    PyMem_Free(x->reqs);
    x->reqs = NULL;
}

/* Build requests from single values or lists. Returns -1 with an exception for Python-level
 * errors, else a status (MC_OK or a negative code to return to the caller). Sets x->reqs. */
static int xfer_build(PyObject *target_o, PyObject *local_o, PyObject *peer_o, PyObject *len_o,
                      mc_te_opcode_t op, int batch, xfer_args_t *x)
{
    memset(x, 0, sizeof(*x));
    if (mcpy_cstr(target_o, "target_hostname", &x->target) < 0)
        return -1;
    uint64_t *locals = NULL, *peers = NULL, *lens = NULL, one_l, one_p, one_n;
    Py_ssize_t nl = 1, np = 1, nn = 1;
    if (batch) {
        if (mcpy_u64_list(local_o, "buffers", &locals, &nl) < 0)
            goto pyerr;
        if (mcpy_u64_list(peer_o, "peer_buffer_addresses", &peers, &np) < 0)
            goto pyerr;
        if (mcpy_u64_list(len_o, "lengths", &lens, &nn) < 0)
            goto pyerr;
    } else {
        if (mcpy_u64(local_o, "buffer", &one_l) < 0 ||
            mcpy_u64(peer_o, "peer_buffer_address", &one_p) < 0 ||
            mcpy_u64(len_o, "length", &one_n) < 0)
            goto pyerr;
        locals = &one_l;
        peers = &one_p;
        lens = &one_n;
    }
    int st = MC_OK;
    if (nl != np || nl != nn) {
        mcpy_warn("batch transfer: %zd buffers, %zd peer addresses, %zd lengths", nl, np, nn);
        st = MC_ERR_INVALID_PARAMS;
    } else {
        x->reqs = PyMem_Calloc((size_t)(nl ? nl : 1), sizeof(mc_te_request_t));
        if (x->reqs == NULL) {
            PyErr_NoMemory();
            goto pyerr;
        }
        x->n = nl;
        for (Py_ssize_t i = 0; i < nl; i++) {
            if (lens[i] > (uint64_t)SIZE_MAX) {
                st = MC_ERR_INVALID_PARAMS;
                break;
            }
            x->reqs[i].opcode = op;
            x->reqs[i].local = (void *)(uintptr_t)locals[i];
            x->reqs[i].target_addr = peers[i];
            x->reqs[i].length = (size_t)lens[i];
        }
    }
    if (batch) {
        PyMem_Free(locals);
        PyMem_Free(peers);
        PyMem_Free(lens);
    }
    return st;
pyerr:
    if (batch) {
        PyMem_Free(locals);
        PyMem_Free(peers);
        PyMem_Free(lens);
    }
    xfer_args_free(x);
    return -1;
}

/* Check local ranges and open the target segment (GIL held; the open runs without it). */
static mc_status_t xfer_prepare(EngineObject *self, xfer_args_t *x)
{
    for (Py_ssize_t i = 0; i < x->n; i++) {
        const mc_te_request_t *r = &x->reqs[i];
        if (r->length && !mcpy_regions_contains(&self->regions, (uintptr_t)r->local, r->length)) {
            mcpy_warn("transfer: local buffer [0x%llx, +%zu) is not registered with this engine",
                      (unsigned long long)(uintptr_t)r->local, r->length);
            return MC_ERR_OUT_OF_RANGE;
        }
    }
    mc_te_segment_t seg = 0;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_te_segment_open(self->te, x->target, &seg);
    Py_END_ALLOW_THREADS
    if (st != MC_OK)
        return st;
    x->seg = seg;
    for (Py_ssize_t i = 0; i < x->n; i++)
        x->reqs[i].target = seg;
    return MC_OK;
}

static mc_status_t xfer_sync(EngineObject *self, xfer_args_t *x)
{
    mc_status_t st = xfer_prepare(self, x);
    if (st != MC_OK || x->n == 0)
        return st;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t off = 0; off < x->n && st == MC_OK; off += MC_TE_MAX_BATCH) {
        Py_ssize_t cnt = x->n - off < MC_TE_MAX_BATCH ? x->n - off : MC_TE_MAX_BATCH;
        st = mc_te_transfer_sync(self->te, x->reqs + off, (size_t)cnt, NULL);
    }
    Py_END_ALLOW_THREADS
    return st;
}

/* Submit asynchronously; on success *id_p is the new batch id (> 0). */
static mc_status_t xfer_async(EngineObject *self, xfer_args_t *x, long long *id_p)
{
    mc_status_t st = xfer_prepare(self, x);
    if (st != MC_OK)
        return st;
    if (x->n == 0 || x->n > MC_TE_MAX_BATCH) {
        mcpy_warn("async transfer: %zd requests (must be 1..%d)", x->n, MC_TE_MAX_BATCH);
        return x->n == 0 ? MC_ERR_INVALID_PARAMS : MC_ERR_TOO_LARGE;
    }
    mc_te_batch_t b = 0;
    Py_BEGIN_ALLOW_THREADS
    st = mc_te_batch_alloc(self->te, (size_t)x->n, &b);
    if (st == MC_OK) {
        st = mc_te_batch_submit(self->te, b, x->reqs, (size_t)x->n);
        if (st != MC_OK)
            mc_te_batch_free(self->te, b);
    }
    Py_END_ALLOW_THREADS
    if (st != MC_OK)
        return st;
    long long id = (long long)self->next_batch_id++;
    PyObject *key = PyLong_FromLongLong(id);
    PyObject *val = Py_BuildValue("(KK)", (unsigned long long)b, (unsigned long long)x->n);
    if (key == NULL || val == NULL || PyDict_SetItem(self->batches, key, val) < 0) {
        Py_XDECREF(key);
        Py_XDECREF(val);
        PyErr_Clear();
        /* cannot track it: wait for it so the batch can be freed */
        Py_BEGIN_ALLOW_THREADS
        while (mc_te_batch_free(self->te, b) == MC_ERR_BUSY) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        Py_END_ALLOW_THREADS
        return MC_ERR_NO_MEMORY;
    }
    Py_DECREF(key);
    Py_DECREF(val);
    *id_p = id;
    return MC_OK;
}

enum { POLL_RUNNING = 0, POLL_DONE = 1, POLL_FAILED = -1, POLL_TIMEOUT = -2 };

/* Poll a batch once (no GIL needed). */
static int batch_poll(mc_te_t *te, mc_te_batch_t b, size_t n, mc_te_xfer_status_t *sts)
{
    for (size_t i = 0; i < n; i++)
        sts[i].state = (mc_te_state_t)-1;
    mc_status_t st = mc_te_batch_status_all(te, b, sts, n);
    int failed = 0, timeout = 0;
    for (size_t i = 0; i < n; i++) {
        switch ((int)sts[i].state) {
        case MC_TE_WAITING:
        case MC_TE_PENDING: return POLL_RUNNING;
        case MC_TE_COMPLETED: break;
        case MC_TE_TIMEOUT: timeout = 1; break;
        case MC_TE_INVALID:
        case MC_TE_CANCELED:
        case MC_TE_FAILED: failed = 1; break;
        default: failed = 1; break; /* not filled: the status call itself failed */
        }
    }
    if (failed)
        return POLL_FAILED;
    if (timeout)
        return POLL_TIMEOUT;
    return st == MC_OK || n == 0 ? POLL_DONE : POLL_FAILED;
}

/* Look up an async batch id. Returns 0 if unknown. */
static int batch_lookup(EngineObject *self, PyObject *id_o, mc_te_batch_t *b, size_t *n)
{
    PyObject *val = PyDict_GetItemWithError(self->batches, id_o);
    if (val == NULL)
        return 0;
    unsigned long long bb, nn;
    if (!PyArg_ParseTuple(val, "KK", &bb, &nn)) {
        PyErr_Clear();
        return 0;
    }
    *b = (mc_te_batch_t)bb;
    *n = (size_t)nn;
    return 1;
}

static void batch_release(EngineObject *self, PyObject *id_o, mc_te_batch_t b)
{
    if (PyDict_DelItem(self->batches, id_o) < 0)
        PyErr_Clear();
    Py_BEGIN_ALLOW_THREADS
    mc_te_batch_free(self->te, b);
    Py_END_ALLOW_THREADS
}

/* ---- notifications ----------------------------------------------------------------------- */

/* A notification to send after a transfer: TransferNotify-like object (attributes name and
 * msg, each str or bytes-like). str is sent as UTF-8 (surrogateescape, so bytes received as
 * str go back out unchanged). */
typedef struct {
    PyObject *name, *msg; /* bytes (owned), NULL when no notification */
} notify_args_t;

static PyObject *notify_field(PyObject *o, const char *attr)
{
    PyObject *v = PyObject_GetAttrString(o, attr);
    if (v == NULL)
        return NULL;
    PyObject *b = NULL;
    if (PyUnicode_Check(v))
        b = PyUnicode_AsEncodedString(v, "utf-8", "surrogateescape");
    else if (PyBytes_Check(v))
        b = Py_NewRef(v);
    else if (PyObject_CheckBuffer(v))
        b = PyBytes_FromObject(v);
    else
        PyErr_Format(PyExc_TypeError, "notify.%s must be str or bytes, not %s", attr,
                     Py_TYPE(v)->tp_name);
    Py_DECREF(v);
    return b;
}

/* -1 with an exception, else 0 (n->name == NULL when notify is None). */
static int notify_parse(PyObject *notify, notify_args_t *n)
{
    n->name = n->msg = NULL;
    if (notify == NULL || notify == Py_None)
        return 0;
    n->name = notify_field(notify, "name");
    if (n->name == NULL)
        return -1;
    n->msg = notify_field(notify, "msg");
    if (n->msg == NULL) {
        Py_CLEAR(n->name);
        return -1;
    }
    return 0;
}

static void notify_release(notify_args_t *n)
{
    Py_CLEAR(n->name);
    Py_CLEAR(n->msg);
}

/* Send the notification to the transfer's target (after it completed), GIL held on entry. */
static mc_status_t notify_send(EngineObject *self, mc_te_segment_t seg, notify_args_t *n)
{
    const char *name = PyBytes_AS_STRING(n->name), *msg = PyBytes_AS_STRING(n->msg);
    size_t nl = (size_t)PyBytes_GET_SIZE(n->name), ml = (size_t)PyBytes_GET_SIZE(n->msg);
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_te_notify_send(self->te, seg, name, nl, msg, ml);
    Py_END_ALLOW_THREADS
    mcpy_log_flush();
    return st;
}

/* Sync transfer, then (if it completed) the notification: the target finds the notification
 * only once the bytes are in its memory. A notification that cannot be delivered makes the
 * call fail with its status (upstream only logs it). */
static mc_status_t xfer_sync_notify(EngineObject *self, xfer_args_t *x, notify_args_t *n)
{
    if (n->name != NULL && (PyBytes_GET_SIZE(n->name) > MC_TE_NOTIFY_NAME_MAX ||
                            PyBytes_GET_SIZE(n->msg) > MC_TE_NOTIFY_MSG_MAX)) {
        mcpy_warn("notify: name %zd bytes (at most %d), msg %zd bytes (at most %d): nothing "
                  "transferred", PyBytes_GET_SIZE(n->name), MC_TE_NOTIFY_NAME_MAX,
                  PyBytes_GET_SIZE(n->msg), MC_TE_NOTIFY_MSG_MAX);
        return MC_ERR_TOO_LARGE; /* refused before anything moved */
    }
    mc_status_t st = xfer_sync(self, x);
    if (st == MC_OK && n->name != NULL)
        st = notify_send(self, x->seg, n);
    return st;
}

/* Build the requests from the Python arguments (t, l, p, n) and run them: synchronously, then
 * the notification na if any (async == 0; GIL released inside xfer_sync), or submitted with
 * *id set to the batch id (async != 0). *st: the status (NOT_READY when the engine is not set
 * up). 0, or -1 with a Python error set when the arguments are bad (*st unset). */
static int xfer_run(EngineObject *self, PyObject *t, PyObject *l, PyObject *p, PyObject *n,
                    mc_te_opcode_t op, int batch, int async, notify_args_t *na, long long *id,
                    int *st)
{
    xfer_args_t x;
    int rc = xfer_build(t, l, p, n, op, batch, &x);
    if (rc < 0 && PyErr_Occurred())
        return -1;
    if (rc == MC_OK) {
        if (!ENGINE_TRY(self)) {
            rc = NOT_READY;
        } else {
            rc = async ? xfer_async(self, &x, id) : xfer_sync_notify(self, &x, na);
            ENGINE_LEAVE(self);
        }
    }
    xfer_args_free(&x);
    *st = rc;
    return 0;
}

/* xfer_run synchronously with the notification `notify` (None: none), as the upstream-style
 * int result. */
static PyObject *xfer_run_sync(EngineObject *self, PyObject *t, PyObject *l, PyObject *p,
                               PyObject *n, mc_te_opcode_t op, int batch, PyObject *notify)
{
    notify_args_t na;
    if (notify_parse(notify, &na) < 0)
        return NULL;
    int st;
    int rc = xfer_run(self, t, l, p, n, op, batch, 0, &na, NULL, &st);
    notify_release(&na);
    return rc < 0 ? NULL : mcpy_ret(st);
}

#define TRANSFER_KWLIST {"target_hostname", "buffer", "peer_buffer_address", "length",          \
                         "transport_hint", NULL}

static PyObject *do_sync_single(EngineObject *self, PyObject *args, PyObject *kwds,
                                mc_te_opcode_t op, const char *fmt)
{
    static char *kwlist[] = TRANSFER_KWLIST;
    PyObject *t, *l, *p, *n, *hint = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &t, &l, &p, &n, &hint))
        return NULL;
    return xfer_run_sync(self, t, l, p, n, op, 0, NULL);
}

static PyObject *engine_transfer_sync_write(EngineObject *self, PyObject *args, PyObject *kwds)
{
    return do_sync_single(self, args, kwds, MC_TE_WRITE, "OOOO|O:transfer_sync_write");
}

static PyObject *engine_transfer_sync_read(EngineObject *self, PyObject *args, PyObject *kwds)
{
    return do_sync_single(self, args, kwds, MC_TE_READ, "OOOO|O:transfer_sync_read");
}

static PyObject *engine_transfer_sync(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"target_hostname", "buffer", "peer_buffer_address", "length",
                             "opcode", "notify", "transport_hint", NULL};
    PyObject *t, *l, *p, *n, *op_o, *notify = Py_None, *hint = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOO|OO:transfer_sync", kwlist, &t, &l, &p, &n,
                                     &op_o, &notify, &hint))
        return NULL;
    mc_te_opcode_t op;
    if (parse_opcode(op_o, &op) < 0)
        return NULL;
    return xfer_run_sync(self, t, l, p, n, op, 0, notify);
}

static PyObject *engine_transfer_submit_write(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = TRANSFER_KWLIST;
    PyObject *t, *l, *p, *n, *hint = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOO|O:transfer_submit_write", kwlist, &t, &l,
                                     &p, &n, &hint))
        return NULL;
    long long id = 0;
    int st;
    if (xfer_run(self, t, l, p, n, MC_TE_WRITE, 0, 1, NULL, &id, &st) < 0)
        return NULL;
    return mcpy_ret(st == MC_OK ? id : 0); /* upstream: batch id, or 0 on failure */
}

static PyObject *engine_transfer_check_status(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"batch_id", NULL};
    PyObject *id_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:transfer_check_status", kwlist, &id_o))
        return NULL;
    uint64_t idv;
    if (mcpy_u64(id_o, "batch_id", &idv) < 0)
        return NULL;
    ENGINE_ENTER(self, mcpy_ret(POLL_FAILED));
    PyObject *key = PyLong_FromUnsignedLongLong(idv);
    if (key == NULL) {
        ENGINE_LEAVE(self);
        return NULL;
    }
    mc_te_batch_t b;
    size_t n;
    int r = POLL_FAILED;
    if (batch_lookup(self, key, &b, &n)) {
        mc_te_xfer_status_t *sts = PyMem_RawCalloc(n ? n : 1, sizeof(*sts));
        if (sts == NULL) {
            Py_DECREF(key);
            ENGINE_LEAVE(self);
            return PyErr_NoMemory();
        }
        Py_BEGIN_ALLOW_THREADS
        r = batch_poll(self->te, b, n, sts);
        Py_END_ALLOW_THREADS
        PyMem_RawFree(sts);
        if (r != POLL_RUNNING)
            batch_release(self, key, b);
    } else if (PyErr_Occurred()) {
        Py_DECREF(key);
        ENGINE_LEAVE(self);
        return NULL;
    }
    Py_DECREF(key);
    ENGINE_LEAVE(self);
    return mcpy_ret(r);
}

#define BATCH_KWLIST {"target_hostname", "buffers", "peer_buffer_addresses", "lengths",         \
                      "transport_hint", NULL}

static PyObject *do_batch(EngineObject *self, PyObject *args, PyObject *kwds, int has_opcode,
                          mc_te_opcode_t op, int async, const char *fname)
{
    static char *kw_plain[] = BATCH_KWLIST;
    static char *kw_sync_op[] = {"target_hostname", "buffers", "peer_buffer_addresses", "lengths",
                                 "opcode", "notify", "transport_hint", NULL};
    static char *kw_async_op[] = {"target_hostname", "buffers", "peer_buffer_addresses",
                                  "lengths", "opcode", "transport_hint", NULL};
    PyObject *t, *l, *p, *n, *op_o = NULL, *notify = Py_None, *hint = NULL;
    char fmt[96];
    int ok;
    if (!has_opcode) {
        snprintf(fmt, sizeof(fmt), "OOOO|O:%s", fname);
        ok = PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw_plain, &t, &l, &p, &n, &hint);
    } else if (!async) {
        snprintf(fmt, sizeof(fmt), "OOOOO|OO:%s", fname);
        ok = PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw_sync_op, &t, &l, &p, &n, &op_o,
                                         &notify, &hint);
    } else {
        snprintf(fmt, sizeof(fmt), "OOOOO|O:%s", fname);
        ok = PyArg_ParseTupleAndKeywords(args, kwds, fmt, kw_async_op, &t, &l, &p, &n, &op_o,
                                         &hint);
    }
    if (!ok)
        return NULL;
    if (op_o && parse_opcode(op_o, &op) < 0)
        return NULL;
    notify_args_t na;
    if (notify_parse(notify, &na) < 0)
        return NULL;
    long long id = 0;
    int st;
    int rc = xfer_run(self, t, l, p, n, op, 1, async, &na, &id, &st);
    notify_release(&na);
    if (rc < 0)
        return NULL;
    if (async) /* upstream: batch id, or 0 on failure */
        return mcpy_ret(st == MC_OK ? id : 0);
    return mcpy_ret(st);
}

static PyObject *engine_batch_transfer_sync_write(EngineObject *self, PyObject *a, PyObject *k)
{
    return do_batch(self, a, k, 0, MC_TE_WRITE, 0, "batch_transfer_sync_write");
}
static PyObject *engine_batch_transfer_sync_read(EngineObject *self, PyObject *a, PyObject *k)
{
    return do_batch(self, a, k, 0, MC_TE_READ, 0, "batch_transfer_sync_read");
}
static PyObject *engine_batch_transfer_sync(EngineObject *self, PyObject *a, PyObject *k)
{
    return do_batch(self, a, k, 1, MC_TE_READ, 0, "batch_transfer_sync");
}
static PyObject *engine_batch_transfer_async_write(EngineObject *self, PyObject *a, PyObject *k)
{
    return do_batch(self, a, k, 0, MC_TE_WRITE, 1, "batch_transfer_async_write");
}
static PyObject *engine_batch_transfer_async_read(EngineObject *self, PyObject *a, PyObject *k)
{
    return do_batch(self, a, k, 0, MC_TE_READ, 1, "batch_transfer_async_read");
}
static PyObject *engine_batch_transfer_async(EngineObject *self, PyObject *a, PyObject *k)
{
    return do_batch(self, a, k, 1, MC_TE_READ, 1, "batch_transfer_async");
}

/* Wait for every batch; 0 if all completed, -1 if any failed, timed out or is unknown. */
static PyObject *engine_get_batch_transfer_status(EngineObject *self, PyObject *args,
                                                  PyObject *kwds)
{
    static char *kwlist[] = {"batch_ids", NULL};
    PyObject *ids_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_batch_transfer_status", kwlist, &ids_o))
        return NULL;
    uint64_t *ids;
    Py_ssize_t nids;
    if (mcpy_u64_list(ids_o, "batch_ids", &ids, &nids) < 0)
        return NULL;
    if (!ENGINE_TRY(self)) {
        PyMem_Free(ids);
        return mcpy_ret(-1);
    }
    int result = 0;
    PyObject *ret = NULL;
    for (Py_ssize_t i = 0; i < nids; i++) {
        PyObject *key = PyLong_FromUnsignedLongLong(ids[i]);
        if (key == NULL)
            goto out;
        mc_te_batch_t b;
        size_t n;
        if (!batch_lookup(self, key, &b, &n)) {
            Py_DECREF(key);
            if (PyErr_Occurred())
                goto out;
            result = -1;
            continue;
        }
        mc_te_xfer_status_t *sts = PyMem_RawCalloc(n ? n : 1, sizeof(*sts));
        if (sts == NULL) {
            Py_DECREF(key);
            PyErr_NoMemory();
            goto out;
        }
        int r = POLL_RUNNING;
        for (;;) {
            /* Wait up to ~100 ms without the GIL, then let signal handlers run. */
            Py_BEGIN_ALLOW_THREADS
            long sleep_ns = 20000;
            struct timespec t0, now;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (;;) {
                r = batch_poll(self->te, b, n, sts);
                if (r != POLL_RUNNING)
                    break;
                clock_gettime(CLOCK_MONOTONIC, &now);
                if ((now.tv_sec - t0.tv_sec) * 1000000000L + (now.tv_nsec - t0.tv_nsec) >
                    100000000L)
                    break;
                struct timespec ts = {0, sleep_ns};
                nanosleep(&ts, NULL);
                if (sleep_ns < 1000000)
                    sleep_ns *= 2;
            }
            Py_END_ALLOW_THREADS
            if (r != POLL_RUNNING)
                break;
            if (PyErr_CheckSignals() < 0) {
                PyMem_RawFree(sts);
                Py_DECREF(key);
                goto out;
            }
        }
        PyMem_RawFree(sts);
        /* another thread may have released it while we waited */
        mc_te_batch_t b2;
        size_t n2;
        if (batch_lookup(self, key, &b2, &n2) && b2 == b)
            batch_release(self, key, b);
        PyErr_Clear();
        Py_DECREF(key);
        if (r != POLL_DONE)
            result = -1;
    }
    ret = mcpy_ret(result);
out:
    ENGINE_LEAVE(self);
    PyMem_Free(ids);
    return ret;
}

static PyObject *engine_get_first_buffer_address(EngineObject *self, PyObject *args,
                                                 PyObject *kwds)
{
    static char *kwlist[] = {"segment_name", NULL};
    PyObject *name_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O:get_first_buffer_address", kwlist, &name_o))
        return NULL;
    const char *name;
    if (mcpy_cstr(name_o, "segment_name", &name) < 0)
        return NULL;
    ENGINE_ENTER(self, mcpy_ret(0));
    uint64_t addr = 0;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    mc_te_segment_t seg;
    st = mc_te_segment_open(self->te, name, &seg);
    if (st == MC_OK)
        st = mc_te_segment_first_buffer(self->te, seg, &addr);
    Py_END_ALLOW_THREADS
    ENGINE_LEAVE(self);
    mcpy_log_flush();
    return PyLong_FromUnsignedLongLong(st == MC_OK ? addr : 0);
}

/* Received notifications, oldest first, as a list of (name, msg) str pairs (engine.py wraps
 * them in TransferNotify). Bytes that are not UTF-8 come back through surrogateescape. */
static PyObject *engine_drain_notifies(EngineObject *self, PyObject *unused)
{
    ENGINE_ENTER(self, PyList_New(0));
    mc_te_notify_t *v = NULL;
    size_t n = 0;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_te_notify_drain(self->te, 0, &v, &n);
    Py_END_ALLOW_THREADS
    ENGINE_LEAVE(self);
    if (st != MC_OK) {
        mcpy_warn("get_notifies: %s", mc_status_name(st));
        return PyList_New(0);
    }
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *nm = PyUnicode_DecodeUTF8(v[i].name, (Py_ssize_t)v[i].name_len,
                                            "surrogateescape");
        PyObject *msg = PyUnicode_DecodeUTF8(v[i].msg, (Py_ssize_t)v[i].msg_len,
                                             "surrogateescape");
        PyObject *t = (nm && msg) ? PyTuple_Pack(2, nm, msg) : NULL;
        Py_XDECREF(nm);
        Py_XDECREF(msg);
        if (t == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    mc_te_notify_free(v);
    return l;
}

/* Counters of the notification queue: dict queued/received/refused_full/refused_bad. */
static PyObject *engine_notify_stats(EngineObject *self, PyObject *unused)
{
    mc_te_notify_stats_t s = {0};
    if (ENGINE_TRY(self)) {
        mc_te_notify_stats(self->te, &s);
        ENGINE_LEAVE(self);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:K}", "queued", (unsigned long long)s.queued,
                         "received", (unsigned long long)s.received, "refused_full",
                         (unsigned long long)s.refused_full, "refused_bad",
                         (unsigned long long)s.refused_bad);
}

/* send_probe(peer_server_name, timeout_ms=0) -> 0 when the peer's engine answered, else a
 * negative status; bounded by timeout_ms (0 = the transfer timeout). */
static PyObject *engine_send_probe(EngineObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"peer_server_name", "timeout_ms", NULL};
    PyObject *name_o;
    unsigned int timeout_ms = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|I:send_probe", kwlist, &name_o, &timeout_ms))
        return NULL;
    const char *name;
    if (mcpy_cstr(name_o, "peer_server_name", &name) < 0)
        return NULL;
    ENGINE_ENTER(self, mcpy_ret(NOT_READY));
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_te_probe(self->te, name, timeout_ms);
    Py_END_ALLOW_THREADS
    ENGINE_LEAVE(self);
    mcpy_log_flush();
    return mcpy_ret(st);
}

/* Registered ranges of this engine as a list of (addr, length) (debugging aid). */
static PyObject *engine_registered_ranges(EngineObject *self, PyObject *unused)
{
    size_t n = 0;
    mcpy_region_t *v = mcpy_regions_snapshot(&self->regions, &n);
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *t = Py_BuildValue("(KK)", (unsigned long long)v[i].addr,
                                    (unsigned long long)v[i].len);
        if (t == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    PyMem_RawFree(v);
    return l;
}

static PyMethodDef engine_methods[] = {
    {"_create", MCPY_KWFUNC(engine_create), METH_VARARGS | METH_KEYWORDS,
     "_create(local_server_name, metadata_uri, protocol, transfer_timeout_ms=0, "
     "tcp_connections=0, worker_threads=0, slice_size=0, force_tcp=0, hugepages=0, "
     "tcp_stripe=0, tcp_socket_buf=0, busy_poll_us=0, metadata_timeout_ms=0, "
     "redis_username=None, redis_password=None, redis_db_index=0, auth_token_file=None, "
     "tcp_idle_timeout_s=0, tcp_max_server_conns=0) -> status. "
     "Use initialize()."},
    {"close", (PyCFunction)engine_close, METH_NOARGS,
     "Stop the engine (waits for calls in flight). Idempotent; returns 0."},
    {"get_rpc_port", (PyCFunction)engine_get_rpc_port, METH_NOARGS,
     "Port the engine serves on."},
    {"get_local_hostname", (PyCFunction)engine_get_local_hostname, METH_NOARGS,
     "This engine's segment name ('host:port'), the target_hostname peers use."},
    {"register_memory", MCPY_KWFUNC(engine_register_memory), METH_VARARGS | METH_KEYWORDS,
     "register_memory(buffer_addr, capacity, location=None) -> status"},
    {"unregister_memory", MCPY_KWFUNC(engine_unregister_memory), METH_VARARGS | METH_KEYWORDS,
     "unregister_memory(buffer_addr) -> status"},
    {"batch_register_memory", MCPY_KWFUNC(engine_batch_register_memory),
     METH_VARARGS | METH_KEYWORDS,
     "batch_register_memory(buffer_addresses, capacities, location=None) -> status"},
    {"batch_unregister_memory", MCPY_KWFUNC(engine_batch_unregister_memory),
     METH_VARARGS | METH_KEYWORDS, "batch_unregister_memory(buffer_addresses) -> status"},
    {"allocate_managed_buffer", MCPY_KWFUNC(engine_allocate_managed_buffer),
     METH_VARARGS | METH_KEYWORDS,
     "allocate_managed_buffer(length) -> address (registered), 0 on failure"},
    {"free_managed_buffer", MCPY_KWFUNC(engine_free_managed_buffer), METH_VARARGS | METH_KEYWORDS,
     "free_managed_buffer(buffer_addr, length) -> status"},
    {"write_bytes_to_buffer", MCPY_KWFUNC(engine_write_bytes_to_buffer),
     METH_VARARGS | METH_KEYWORDS,
     "write_bytes_to_buffer(dest_address, src_ptr: bytes, length) -> status"},
    {"read_bytes_from_buffer", MCPY_KWFUNC(engine_read_bytes_from_buffer),
     METH_VARARGS | METH_KEYWORDS, "read_bytes_from_buffer(source_address, length) -> bytes"},
    {"transfer_sync_write", MCPY_KWFUNC(engine_transfer_sync_write), METH_VARARGS | METH_KEYWORDS,
     "transfer_sync_write(target_hostname, buffer, peer_buffer_address, length) -> status"},
    {"transfer_sync_read", MCPY_KWFUNC(engine_transfer_sync_read), METH_VARARGS | METH_KEYWORDS,
     "transfer_sync_read(target_hostname, buffer, peer_buffer_address, length) -> status"},
    {"transfer_sync", MCPY_KWFUNC(engine_transfer_sync), METH_VARARGS | METH_KEYWORDS,
     "transfer_sync(target_hostname, buffer, peer_buffer_address, length, opcode, notify=None)"
     " -> status"},
    {"transfer_submit_write", MCPY_KWFUNC(engine_transfer_submit_write),
     METH_VARARGS | METH_KEYWORDS,
     "transfer_submit_write(target_hostname, buffer, peer_buffer_address, length) -> batch id "
     "(> 0), 0 on failure"},
    {"transfer_check_status", MCPY_KWFUNC(engine_transfer_check_status),
     METH_VARARGS | METH_KEYWORDS,
     "transfer_check_status(batch_id) -> 1 completed, 0 in progress, -1 failed, -2 timed out"},
    {"batch_transfer_sync_write", MCPY_KWFUNC(engine_batch_transfer_sync_write),
     METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_sync_write(target_hostname, buffers, peer_buffer_addresses, lengths)"},
    {"batch_transfer_sync_read", MCPY_KWFUNC(engine_batch_transfer_sync_read),
     METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_sync_read(target_hostname, buffers, peer_buffer_addresses, lengths)"},
    {"batch_transfer_sync", MCPY_KWFUNC(engine_batch_transfer_sync), METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, opcode, "
     "notify=None)"},
    {"batch_transfer_async_write", MCPY_KWFUNC(engine_batch_transfer_async_write),
     METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_async_write(...) -> batch id, 0 on failure"},
    {"batch_transfer_async_read", MCPY_KWFUNC(engine_batch_transfer_async_read),
     METH_VARARGS | METH_KEYWORDS, "batch_transfer_async_read(...) -> batch id, 0 on failure"},
    {"batch_transfer_async", MCPY_KWFUNC(engine_batch_transfer_async),
     METH_VARARGS | METH_KEYWORDS,
     "batch_transfer_async(..., opcode) -> batch id, 0 on failure"},
    {"get_batch_transfer_status", MCPY_KWFUNC(engine_get_batch_transfer_status),
     METH_VARARGS | METH_KEYWORDS,
     "get_batch_transfer_status(batch_ids) -> 0 all completed, -1 otherwise (waits)"},
    {"get_first_buffer_address", MCPY_KWFUNC(engine_get_first_buffer_address),
     METH_VARARGS | METH_KEYWORDS,
     "get_first_buffer_address(segment_name) -> address, 0 if unknown"},
    {"_drain_notifies", (PyCFunction)engine_drain_notifies, METH_NOARGS,
     "Received notifications as [(name, msg)], oldest first (use get_notifies())."},
    {"notify_stats", (PyCFunction)engine_notify_stats, METH_NOARGS,
     "Notification queue counters: {queued, received, refused_full, refused_bad}."},
    {"send_probe", MCPY_KWFUNC(engine_send_probe), METH_VARARGS | METH_KEYWORDS,
     "send_probe(peer_server_name, timeout_ms=0) -> 0 if the peer answers, else negative "
     "(bounded by timeout_ms; 0 = the transfer timeout)"},
    {"registered_ranges", (PyCFunction)engine_registered_ranges, METH_NOARGS,
     "List of (address, length) registered through this engine."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mooncake._engine.TransferEngine",
    .tp_basicsize = sizeof(EngineObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Mooncake-C Transfer Engine (use mooncake.engine.TransferEngine).",
    .tp_new = engine_new,
    .tp_dealloc = (destructor)engine_dealloc,
    .tp_traverse = (traverseproc)engine_traverse,
    .tp_clear = (inquiry)engine_clear,
    .tp_methods = engine_methods,
    .tp_weaklistoffset = offsetof(EngineObject, weakrefs),
};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "mooncake._engine", "Mooncake-C Transfer Engine binding.", -1, NULL,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__engine(void)
{
    if (mcpy_import_core() < 0)
        return NULL;
    if (PyType_Ready(&EngineType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&engine_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "TransferEngine", (PyObject *)&EngineType) < 0 ||
        PyModule_AddIntConstant(m, "OPCODE_READ", MC_TE_READ) < 0 ||
        PyModule_AddIntConstant(m, "OPCODE_WRITE", MC_TE_WRITE) < 0 ||
        PyModule_AddIntConstant(m, "MAX_BATCH", MC_TE_MAX_BATCH) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
