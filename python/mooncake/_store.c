/* mooncake._store: the C types behind mooncake.store (wraps mooncake/store.h).
 *
 * Return conventions follow upstream Mooncake: ints are 0 or a negative mc_status_t; get_into
 * returns bytes read or a negative status; get returns b"" on a miss or an error; is_exist
 * returns 1 / 0 / negative; batch forms return one such value per key.
 *
 * Memory safety: zero-copy calls (put_from, get_into and their batch / multi-buffer forms) only
 * accept ranges inside buffers registered through this object with register_buffer (which checks
 * that the range is mapped read-write); other ranges get MC_ERR_INVALID_PARAMS for that key.
 * Bytes-like values are pinned with a Py_buffer view for the duration of the C call.
 *
 * Lifetime: a gate counts calls in flight; close()/setup()/dealloc wait for them before the
 * client is destroyed. All store.h calls run with the GIL released.
 */
#include "_common.h"

#include "mooncake/dummy.h"
#include "mooncake/store.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NOT_READY MC_ERR_UNAVAILABLE_IN_CURRENT_STATUS

/* ======================================================================================== */
/* ReplicateConfig                                                                          */
/* ======================================================================================== */

/* Every attribute of upstream's ReplicateConfig (mooncake-store/include/replica.h) with its
 * default. What a put does with each is decided in cfg_parse: honoured, kept as metadata, or
 * refused with MC_ERR_INVALID_PARAMS (python/README.md, "ReplicateConfig"). */
typedef struct {
    PyObject_HEAD
    unsigned long replica_num;
    uint64_t nof_replica_num;
    uint64_t dfs_replica_num;
    int soft_pin_action;      /* SOFT_PIN_* */
    char has_soft_pin_ttl;    /* soft_pin_ttl_ms is not None */
    uint64_t soft_pin_ttl_ms;
    char with_hard_pin;
    char prefer_alloc_in_same_node;
    int data_type;            /* ObjectDataType value, 0..OBJECT_DATA_TYPE_MAX */
    PyObject *preferred_segment;      /* str */
    PyObject *preferred_segments;     /* list of str */
    PyObject *preferred_nof_segments; /* list of str */
    PyObject *group_ids;              /* None or list of str */
} ReplCfgObject;

enum { SOFT_PIN_PRESERVE = 0, SOFT_PIN_ENABLE = 1, SOFT_PIN_DISABLE = 2 };
#define OBJECT_DATA_TYPE_MAX 9

/* The IntEnum classes mooncake.store defines (SoftPinAction, ObjectDataType), handed over by
 * _set_enums so the getters return members; plain ints until then. Strong references. */
static PyObject *g_soft_pin_enum, *g_data_type_enum;

static PyTypeObject ReplCfgType;

static PyObject *replcfg_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    ReplCfgObject *self = (ReplCfgObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->replica_num = 1;
    self->preferred_segment = PyUnicode_FromString("");
    self->preferred_segments = PyList_New(0);
    self->preferred_nof_segments = PyList_New(0);
    self->group_ids = Py_NewRef(Py_None);
    if (self->preferred_segment == NULL || self->preferred_segments == NULL ||
        self->preferred_nof_segments == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void replcfg_dealloc(ReplCfgObject *self)
{
    Py_CLEAR(self->preferred_segment);
    Py_CLEAR(self->preferred_segments);
    Py_CLEAR(self->preferred_nof_segments);
    Py_CLEAR(self->group_ids);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int parse_flag(PyObject *v, const char *what, char *out)
{
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", what);
        return -1;
    }
    if (PyBool_Check(v) || PyLong_Check(v)) {
        int t = PyObject_IsTrue(v);
        if (t < 0)
            return -1;
        *out = (char)t;
        return 0;
    }
    if (PyUnicode_Check(v)) { /* upstream documents prefer_alloc_in_same_node = "True" */
        const char *s = PyUnicode_AsUTF8(v);
        if (s == NULL)
            return -1;
        if (!strcasecmp(s, "true") || !strcmp(s, "1") || !strcasecmp(s, "yes") ||
            !strcasecmp(s, "on")) {
            *out = 1;
            return 0;
        }
        if (!strcasecmp(s, "false") || !strcmp(s, "0") || !strcasecmp(s, "no") ||
            !strcasecmp(s, "off") || !*s) {
            *out = 0;
            return 0;
        }
        PyErr_Format(PyExc_ValueError, "%s: cannot interpret %R as a boolean", what, v);
        return -1;
    }
    PyErr_Format(PyExc_TypeError, "%s must be a bool, not %.100s", what, Py_TYPE(v)->tp_name);
    return -1;
}

#define FLAG_GETSET(field)                                                                         \
    static PyObject *replcfg_get_##field(ReplCfgObject *self, void *c)                           \
    {                                                                                              \
        return PyBool_FromLong(self->field);                                                       \
    }                                                                                              \
    static int replcfg_set_##field(ReplCfgObject *self, PyObject *v, void *c)                    \
    {                                                                                              \
        return parse_flag(v, #field, &self->field);                                                \
    }
FLAG_GETSET(with_hard_pin)
FLAG_GETSET(prefer_alloc_in_same_node)

static PyObject *replcfg_get_replica_num(ReplCfgObject *self, void *c)
{
    return PyLong_FromUnsignedLong(self->replica_num);
}

static int replcfg_set_replica_num(ReplCfgObject *self, PyObject *v, void *c)
{
    uint64_t n;
    if (v == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete replica_num");
        return -1;
    }
    if (mcpy_u64(v, "replica_num", &n) < 0)
        return -1;
    if (n > 1024) {
        PyErr_SetString(PyExc_ValueError, "replica_num must be at most 1024");
        return -1;
    }
    self->replica_num = (unsigned long)n;
    return 0;
}

#define U64_GETSET(field)                                                                          \
    static PyObject *replcfg_get_##field(ReplCfgObject *self, void *c)                           \
    {                                                                                              \
        return PyLong_FromUnsignedLongLong(self->field);                                           \
    }                                                                                              \
    static int replcfg_set_##field(ReplCfgObject *self, PyObject *v, void *c)                    \
    {                                                                                              \
        if (v == NULL) {                                                                           \
            PyErr_SetString(PyExc_AttributeError, "cannot delete " #field);                       \
            return -1;                                                                             \
        }                                                                                          \
        return mcpy_u64(v, #field, &self->field);                                                  \
    }
U64_GETSET(nof_replica_num)
U64_GETSET(dfs_replica_num)

/* An enum-valued attribute: a member of the IntEnum (or a plain int) in [0, max]. */
static int parse_enum(PyObject *v, const char *what, long max, int *out)
{
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", what);
        return -1;
    }
    if (PyBool_Check(v) || !PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s must be a %s member, not %.100s", what,
                     !strcmp(what, "data_type") ? "ObjectDataType" : "SoftPinAction",
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    long n = PyLong_AsLong(v);
    if (n == -1 && PyErr_Occurred())
        return -1;
    if (n < 0 || n > max) {
        PyErr_Format(PyExc_ValueError, "%s: %ld is not a valid value (0..%ld)", what, n, max);
        return -1;
    }
    *out = (int)n;
    return 0;
}

static PyObject *enum_member(PyObject *cls, int v)
{
    if (cls == NULL)
        return PyLong_FromLong(v);
    return PyObject_CallFunction(cls, "i", v);
}

static PyObject *replcfg_get_soft_pin_action(ReplCfgObject *self, void *c)
{
    return enum_member(g_soft_pin_enum, self->soft_pin_action);
}

static int replcfg_set_soft_pin_action(ReplCfgObject *self, PyObject *v, void *c)
{
    return parse_enum(v, "soft_pin_action", SOFT_PIN_DISABLE, &self->soft_pin_action);
}

static PyObject *replcfg_get_data_type(ReplCfgObject *self, void *c)
{
    return enum_member(g_data_type_enum, self->data_type);
}

static int replcfg_set_data_type(ReplCfgObject *self, PyObject *v, void *c)
{
    return parse_enum(v, "data_type", OBJECT_DATA_TYPE_MAX, &self->data_type);
}

/* with_soft_pin: upstream's older boolean. True sets soft_pin_action = ENABLE, False sets
 * PRESERVE (the mapping of upstream's C API, store_c.cpp); reading it tells whether the action
 * is ENABLE. */
static PyObject *replcfg_get_with_soft_pin(ReplCfgObject *self, void *c)
{
    return PyBool_FromLong(self->soft_pin_action == SOFT_PIN_ENABLE);
}

static int replcfg_set_with_soft_pin(ReplCfgObject *self, PyObject *v, void *c)
{
    char on;
    if (parse_flag(v, "with_soft_pin", &on) < 0)
        return -1;
    self->soft_pin_action = on ? SOFT_PIN_ENABLE : SOFT_PIN_PRESERVE;
    return 0;
}

static PyObject *replcfg_get_soft_pin_ttl_ms(ReplCfgObject *self, void *c)
{
    if (!self->has_soft_pin_ttl)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(self->soft_pin_ttl_ms);
}

/* Optional[int]: None = the master's default; like upstream, a negative value or one over 64
 * bits is a TypeError (it does not convert to uint64). */
static int replcfg_set_soft_pin_ttl_ms(ReplCfgObject *self, PyObject *v, void *c)
{
    uint64_t n;
    if (v == NULL || v == Py_None) {
        self->has_soft_pin_ttl = 0;
        self->soft_pin_ttl_ms = 0;
        return 0;
    }
    if (PyBool_Check(v)) {
        PyErr_SetString(PyExc_TypeError, "soft_pin_ttl_ms must be an int or None, not bool");
        return -1;
    }
    if (mcpy_u64(v, "soft_pin_ttl_ms", &n) < 0) {
        if (PyErr_ExceptionMatches(PyExc_ValueError) ||
            PyErr_ExceptionMatches(PyExc_OverflowError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError,
                         "soft_pin_ttl_ms must be None or an int from 0 to 2**64-1, got %R", v);
        }
        return -1;
    }
    self->has_soft_pin_ttl = 1;
    self->soft_pin_ttl_ms = n;
    return 0;
}

static PyObject *replcfg_get_preferred_segment(ReplCfgObject *self, void *c)
{
    return Py_NewRef(self->preferred_segment);
}

static int replcfg_set_preferred_segment(ReplCfgObject *self, PyObject *v, void *c)
{
    const char *s;
    if (v == NULL || v == Py_None) {
        v = PyUnicode_FromString("");
        if (v == NULL)
            return -1;
        Py_SETREF(self->preferred_segment, v);
        return 0;
    }
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "preferred_segment must be str, not %.100s",
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    if (mcpy_cstr(v, "preferred_segment", &s) < 0)
        return -1;
    Py_SETREF(self->preferred_segment, Py_NewRef(v));
    return 0;
}

/* A list-of-str attribute; None clears it (or, with none_ok, stores None). */
static int set_str_list(PyObject **slot, PyObject *v, const char *what, int none_ok)
{
    if (v == NULL || v == Py_None) {
        PyObject *l = none_ok ? Py_NewRef(Py_None) : PyList_New(0);
        if (l == NULL)
            return -1;
        Py_SETREF(*slot, l);
        return 0;
    }
    mcpy_keys_t k;
    if (mcpy_keys_parse(v, what, &k) < 0)
        return -1;
    PyObject *l = PySequence_List(k.tuple);
    mcpy_keys_release(&k);
    if (l == NULL)
        return -1;
    Py_SETREF(*slot, l);
    return 0;
}

static PyObject *get_str_list(PyObject *l)
{
    if (l == Py_None)
        Py_RETURN_NONE;
    return PySequence_List(l);
}

#define LIST_GETSET(field, none_ok)                                                                \
    static PyObject *replcfg_get_##field(ReplCfgObject *self, void *c)                           \
    {                                                                                              \
        return get_str_list(self->field);                                                          \
    }                                                                                              \
    static int replcfg_set_##field(ReplCfgObject *self, PyObject *v, void *c)                    \
    {                                                                                              \
        return set_str_list(&self->field, v, #field, none_ok);                                     \
    }
LIST_GETSET(preferred_segments, 0)
LIST_GETSET(preferred_nof_segments, 0)
LIST_GETSET(group_ids, 1)

#define GS(name, doc) {#name, (getter)replcfg_get_##name, (setter)replcfg_set_##name, doc, NULL}
static PyGetSetDef replcfg_getset[] = {
    GS(replica_num, "Number of memory replicas (default 1)."),
    GS(nof_replica_num, "NVMe-oF replicas (default 0; Mooncake-C has no such tier: a put with "
                        "a value > 0 returns INVALID_PARAMS)."),
    GS(dfs_replica_num, "Distributed-file-system replicas (default 0; no such tier here: a "
                        "put with a value > 0 returns INVALID_PARAMS)."),
    GS(soft_pin_action, "SoftPinAction: PRESERVE (default; a new object is not pinned, an "
                        "upsert keeps the old value's pin), ENABLE (soft pin for "
                        "soft_pin_ttl_ms), DISABLE (not pinned)."),
    GS(soft_pin_ttl_ms, "Soft pin duration in ms, None = the master's "
                        "--default_kv_soft_pin_ttl. Only with soft_pin_action=ENABLE (else "
                        "the put returns INVALID_PARAMS, as upstream)."),
    GS(with_soft_pin, "Older form of soft_pin_action: True = ENABLE, False = PRESERVE."),
    GS(with_hard_pin, "Never evicted (removed only explicitly)."),
    GS(preferred_segments, "Segment names tried first, in order, one replica on each that has "
                           "room (then placement as usual); at most 64."),
    GS(preferred_nof_segments, "NVMe-oF segments (no such tier: non-empty returns "
                               "INVALID_PARAMS)."),
    GS(preferred_segment, "Deprecated single preferred segment (used only when "
                          "preferred_segments is empty)."),
    GS(prefer_alloc_in_same_node, "Refused by puts with INVALID_PARAMS, as upstream's puts do."),
    GS(data_type, "ObjectDataType of the object (metadata; accepted, not stored by the master)."),
    GS(group_ids, "None or one group id per key (metadata for group eviction, accepted and not "
                  "acted on; a batch put with a length other than the key count returns "
                  "INVALID_PARAMS)."),
    {NULL, NULL, NULL, NULL, NULL},
};
#undef GS

static char *replcfg_kwlist[] = {"replica_num", "with_soft_pin", "with_hard_pin",
                                 "preferred_segment", "prefer_alloc_in_same_node",
                                 "soft_pin_ttl_ms", "preferred_segments", "nof_replica_num",
                                 "dfs_replica_num", "soft_pin_action", "preferred_nof_segments",
                                 "data_type", "group_ids", NULL};
#define REPLCFG_NKW 13

static int replcfg_init(ReplCfgObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *v[REPLCFG_NKW] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|OOOOOOOOOOOOO:ReplicateConfig",
                                     replcfg_kwlist, &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                                     &v[6], &v[7], &v[8], &v[9], &v[10], &v[11], &v[12]))
        return -1;
    if (v[1] && v[9]) {
        PyErr_SetString(PyExc_TypeError,
                        "ReplicateConfig: give soft_pin_action or with_soft_pin, not both");
        return -1;
    }
    for (int i = 0; i < REPLCFG_NKW; i++) {
        if (v[i] && PyObject_SetAttrString((PyObject *)self, replcfg_kwlist[i], v[i]) < 0)
            return -1;
    }
    return 0;
}

static PyObject *replcfg_repr(ReplCfgObject *self)
{
    static const char *pins[] = {"PRESERVE", "ENABLE", "DISABLE"};
    PyObject *ttl = replcfg_get_soft_pin_ttl_ms(self, NULL);
    if (ttl == NULL)
        return NULL;
    PyObject *r = PyUnicode_FromFormat(
        "ReplicateConfig(replica_num=%lu, nof_replica_num=%llu, dfs_replica_num=%llu, "
        "soft_pin_action=SoftPinAction.%s, soft_pin_ttl_ms=%R, with_hard_pin=%s, "
        "preferred_segments=%R, preferred_nof_segments=%R, preferred_segment=%R, "
        "prefer_alloc_in_same_node=%s, data_type=%d, group_ids=%R)",
        self->replica_num, (unsigned long long)self->nof_replica_num,
        (unsigned long long)self->dfs_replica_num, pins[self->soft_pin_action], ttl,
        self->with_hard_pin ? "True" : "False", self->preferred_segments,
        self->preferred_nof_segments, self->preferred_segment,
        self->prefer_alloc_in_same_node ? "True" : "False", self->data_type, self->group_ids);
    Py_DECREF(ttl);
    return r;
}

static PyTypeObject ReplCfgType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mooncake.store.ReplicateConfig",
    .tp_basicsize = sizeof(ReplCfgObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Replication settings of a put, with upstream's attributes and defaults: "
              "replica_num=1, nof_replica_num=0, dfs_replica_num=0, "
              "soft_pin_action=SoftPinAction.PRESERVE, soft_pin_ttl_ms=None, "
              "with_hard_pin=False, preferred_segments=[], preferred_nof_segments=[], "
              "preferred_segment='', prefer_alloc_in_same_node=False, "
              "data_type=ObjectDataType.UNKNOWN, group_ids=None; with_soft_pin is the older "
              "boolean form of soft_pin_action. Settings Mooncake-C cannot honour make the put "
              "return INVALID_PARAMS (-600) with a log line; see each attribute.",
    .tp_new = replcfg_new,
    .tp_init = (initproc)replcfg_init,
    .tp_dealloc = (destructor)replcfg_dealloc,
    .tp_getset = replcfg_getset,
    .tp_repr = (reprfunc)replcfg_repr,
};

/* Parsed config: `hold` keeps the preferred segment string alive during the C call. `refused`
 * is MC_OK, or MC_ERR_INVALID_PARAMS when the config asks for something Mooncake-C does not
 * do (logged once here); callers then return it for every key without calling the store. */
typedef struct {
    mc_replicate_config_t c;
    PyObject *hold;     /* the preferred segment str, or the preferred_segments tuple */
    const char **segs;  /* PyMem: c.preferred_segments, borrowed from hold's strs */
    mc_status_t refused;
} cfg_t;

static mc_status_t cfg_refuse(const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mcpy_warn("ReplicateConfig: %s (INVALID_PARAMS)", msg);
    return MC_ERR_INVALID_PARAMS;
}

/* n_keys: keys of the call (group_ids must have one entry per key in a batch; 0 = single). */
static int cfg_parse_n(PyObject *o, cfg_t *cfg, size_t n_keys)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->c.replica_num = 1;
    if (o == NULL || o == Py_None)
        return 0;
    if (!PyObject_TypeCheck(o, &ReplCfgType)) {
        PyErr_Format(PyExc_TypeError, "config must be a ReplicateConfig, not %.100s",
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    ReplCfgObject *r = (ReplCfgObject *)o;
    cfg->c.replica_num = (uint32_t)r->replica_num;
    cfg->c.with_hard_pin = r->with_hard_pin;
    if (r->nof_replica_num > 0 || r->dfs_replica_num > 0) {
        cfg->refused = cfg_refuse("nof_replica_num=%llu, dfs_replica_num=%llu: Mooncake-C keeps "
                                  "replicas in memory only (no NVMe-oF or DFS tier)",
                                  (unsigned long long)r->nof_replica_num,
                                  (unsigned long long)r->dfs_replica_num);
        return 0;
    }
    if (PyList_GET_SIZE(r->preferred_nof_segments) > 0) {
        cfg->refused = cfg_refuse("preferred_nof_segments given: no NVMe-oF tier in Mooncake-C");
        return 0;
    }
    if (r->prefer_alloc_in_same_node) {
        cfg->refused = cfg_refuse("prefer_alloc_in_same_node is not supported by puts (as "
                                  "upstream); use preferred_segments=[store.get_hostname()]");
        return 0;
    }
    if (r->has_soft_pin_ttl && r->soft_pin_action != SOFT_PIN_ENABLE) {
        cfg->refused = cfg_refuse("soft_pin_ttl_ms needs soft_pin_action=ENABLE");
        return 0;
    }
    if (r->group_ids != Py_None && n_keys > 0 &&
        (size_t)PyList_GET_SIZE(r->group_ids) != n_keys) {
        cfg->refused = cfg_refuse("group_ids has %zd entries for %zu keys",
                                  PyList_GET_SIZE(r->group_ids), n_keys);
        return 0;
    }
    cfg->c.with_soft_pin = r->soft_pin_action == SOFT_PIN_ENABLE;
    cfg->c.soft_pin_disable = r->soft_pin_action == SOFT_PIN_DISABLE;
    cfg->c.soft_pin_ttl_ms = r->has_soft_pin_ttl ? r->soft_pin_ttl_ms : 0;
    if (cfg->c.with_soft_pin && r->has_soft_pin_ttl && r->soft_pin_ttl_ms == 0) {
        cfg->refused = cfg_refuse("soft_pin_ttl_ms=0 would pin for no time; use None for the "
                                  "master's default");
        return 0;
    }
    PyObject *seg = r->preferred_segment;
    Py_ssize_t nseg = PyList_GET_SIZE(r->preferred_segments);
    if (nseg > MC_STORE_PREFERRED_MAX) {
        cfg->refused = cfg_refuse("%zd preferred_segments, at most %d", nseg,
                                  MC_STORE_PREFERRED_MAX);
        return 0;
    }
    if (nseg > 0) { /* tried in order by the master; preferred_segment is then not used */
        PyObject *t = PyList_AsTuple(r->preferred_segments);
        const char **v = t ? PyMem_Calloc((size_t)nseg, sizeof(*v)) : NULL;
        for (Py_ssize_t i = 0; v && i < nseg; i++) {
            if (mcpy_cstr(PyTuple_GET_ITEM(t, i), "preferred_segments", &v[i]) < 0) {
                PyMem_Free(v);
                Py_DECREF(t);
                return -1;
            }
        }
        if (v == NULL) {
            Py_XDECREF(t);
            if (!PyErr_Occurred())
                PyErr_NoMemory();
            return -1;
        }
        cfg->hold = t;
        cfg->segs = v;
        cfg->c.preferred_segments = v;
        cfg->c.n_preferred_segments = (size_t)nseg;
        return 0;
    }
    if (PyUnicode_Check(seg) && PyUnicode_GET_LENGTH(seg) > 0) {
        const char *s;
        if (mcpy_cstr(seg, "preferred_segment", &s) < 0)
            return -1;
        cfg->hold = Py_NewRef(seg);
        cfg->c.preferred_segment = s;
    }
    return 0;
}

static int cfg_parse(PyObject *o, cfg_t *cfg)
{
    return cfg_parse_n(o, cfg, 0);
}

static void cfg_release(cfg_t *cfg)
{
    PyMem_Free(cfg->segs);
    cfg->segs = NULL;
    Py_CLEAR(cfg->hold);
}

/* ======================================================================================== */
/* BufferHandle                                                                             */
/* ======================================================================================== */

typedef struct {
    PyObject_HEAD
    void *ptr;       /* malloc'd by the library; freed with free() */
    Py_ssize_t len;
} BufObject;

static PyTypeObject BufType;
static char buf_empty[1];

static void buf_dealloc(BufObject *self)
{
    free(self->ptr);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int buf_getbuffer(BufObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->ptr ? self->ptr : buf_empty,
                             self->len, 0, flags);
}

static PyBufferProcs buf_as_buffer = {(getbufferproc)buf_getbuffer, NULL};

static Py_ssize_t buf_length(BufObject *self)
{
    return self->len;
}

static PySequenceMethods buf_as_sequence = {.sq_length = (lenfunc)buf_length};

static PyObject *buf_ptr(BufObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)self->ptr);
}

static PyObject *buf_size(BufObject *self, PyObject *unused)
{
    return PyLong_FromSsize_t(self->len);
}

static PyObject *buf_tobytes(BufObject *self, PyObject *unused)
{
    return PyBytes_FromStringAndSize(self->ptr ? self->ptr : buf_empty, self->len);
}

static PyObject *buf_repr(BufObject *self)
{
    return PyUnicode_FromFormat("<BufferHandle size=%zd>", self->len);
}

static PyMethodDef buf_methods[] = {
    {"ptr", (PyCFunction)buf_ptr, METH_NOARGS, "Address of the data."},
    {"size", (PyCFunction)buf_size, METH_NOARGS, "Size in bytes."},
    {"tobytes", (PyCFunction)buf_tobytes, METH_NOARGS, "Copy of the data as bytes."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BufType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mooncake.store.BufferHandle",
    .tp_basicsize = sizeof(BufObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Bytes of one object, owned by this handle; supports the buffer protocol "
              "(numpy.frombuffer / memoryview view it without a copy).",
    .tp_dealloc = (destructor)buf_dealloc,
    .tp_as_buffer = &buf_as_buffer,
    .tp_as_sequence = &buf_as_sequence,
    .tp_methods = buf_methods,
    .tp_repr = (reprfunc)buf_repr,
};

/* Takes ownership of ptr (also on failure). */
static PyObject *buf_wrap(void *ptr, size_t len)
{
    BufObject *b = PyObject_New(BufObject, &BufType);
    if (b == NULL) {
        free(ptr);
        return NULL;
    }
    b->ptr = ptr;
    b->len = (Py_ssize_t)len;
    return (PyObject *)b;
}

/* ======================================================================================== */
/* MooncakeDistributedStore                                                                 */
/* ======================================================================================== */

typedef struct {
    PyObject_HEAD
    mc_store_t *store;
    mcpy_gate_t gate;
    mcpy_regions_t regions; /* register_buffer ranges */
    PyObject *weakrefs;
    uint64_t local_buffer_size; /* as given to setup */
} StoreObject;

#define STORE_ENTER(self) ((self)->store != NULL && mcpy_gate_enter(&(self)->gate))
#define STORE_LEAVE(self) mcpy_gate_leave(&(self)->gate)
/* result = expr with the GIL released, if the store is set up (result keeps its value
 * otherwise, e.g. NOT_READY). */
#define STORE_CALL(self, result, expr)                                                             \
    do {                                                                                           \
        if (STORE_ENTER(self)) {                                                                   \
            Py_BEGIN_ALLOW_THREADS                                                                 \
            (result) = (expr);                                                                     \
            Py_END_ALLOW_THREADS                                                                   \
            STORE_LEAVE(self);                                                                     \
        }                                                                                          \
    } while (0)

/* Byte put/get (put, put_parts, put_batch, upsert*, get, get_batch, get_buffer,
 * batch_get_buffer) stage through the local buffer in upstream Mooncake, so a client set up
 * with local_buffer_size=0 cannot use them there; neither can it here (the zero-copy calls,
 * put_from / get_into on registered memory, work). MC_OK or MC_ERR_INVALID_PARAMS, logged. */
static mc_status_t staging_check(StoreObject *self, const char *op)
{
    if (self->store == NULL || self->local_buffer_size > 0)
        return MC_OK;
    mcpy_warn("%s: this client was set up with local_buffer_size=0, and byte puts and gets go "
              "through the local buffer (as upstream): use put_from/get_into on registered "
              "memory, or set up with a local buffer",
              op);
    return MC_ERR_INVALID_PARAMS;
}

/* Argument parsing of the methods that take one object argument named argname, plus an
 * optional bool "force" when force != NULL (left as the caller set it when not given): the
 * errors are PyArg_ParseTupleAndKeywords' for the format "O:fname" / "O|p:fname". *o is
 * borrowed from args/kwds. 0, or -1 with a Python error set. */
static int parse_one(PyObject *args, PyObject *kwds, const char *fname, const char *argname,
                     PyObject **o, int *force)
{
    char *kwlist[] = {(char *)argname, force ? "force" : NULL, NULL};
    char fmt[64];
    snprintf(fmt, sizeof(fmt), force ? "O|p:%s" : "O:%s", fname);
    return PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, o, force) ? 0 : -1;
}

/* parse_one, then the argument as a key string (mcpy_cstr; *key borrowed from args/kwds). */
static int parse_key(PyObject *args, PyObject *kwds, const char *fname, const char *argname,
                     const char **key, int *force)
{
    PyObject *o;
    if (parse_one(args, kwds, fname, argname, &o, force) < 0)
        return -1;
    return mcpy_cstr(o, argname, key);
}

static PyObject *store_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    StoreObject *self = (StoreObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    mcpy_gate_init(&self->gate);
    mcpy_regions_init(&self->regions);
    return (PyObject *)self;
}

static void store_teardown(StoreObject *self)
{
    mc_store_t *s = self->store;
    if (s == NULL)
        return;
    Py_BEGIN_ALLOW_THREADS
    mcpy_gate_close(&self->gate);
    mc_store_destroy(s);
    Py_END_ALLOW_THREADS
    self->store = NULL;
    mcpy_regions_destroy(&self->regions);
    mcpy_regions_init(&self->regions);
    mcpy_log_flush();
}

static void store_dealloc(StoreObject *self)
{
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    store_teardown(self);
    mcpy_regions_destroy(&self->regions);
    mcpy_gate_destroy(&self->gate);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int opt_cstr(PyObject *o, const char *what, const char **s)
{
    *s = NULL;
    if (o == NULL || o == Py_None)
        return 0;
    if (mcpy_cstr(o, what, s) < 0)
        return -1;
    if (**s == '\0')
        *s = NULL;
    return 0;
}

/* An optional count knob: o None (or NULL) leaves *out alone; else o must be an int from 0 to
 * max, and *out takes it, 0 given as `off` (the config's "explicitly off" value, 0 there
 * meaning the default). -1 with a Python error set. */
static int knob_u32(PyObject *o, const char *name, uint32_t max, uint32_t off, uint32_t *out)
{
    uint64_t v;
    if (!o || o == Py_None)
        return 0;
    if (mcpy_u64(o, name, &v) < 0)
        return -1;
    if (v > max) {
        PyErr_Format(PyExc_ValueError, "%s must be from 0 to %u, got %llu", name, max,
                     (unsigned long long)v);
        return -1;
    }
    *out = v ? (uint32_t)v : off;
    return 0;
}

/* The store knobs of _setup (mooncake._config reads them from the environment) into cfg:
 * replica_hints None = default, 0 = no hint table, else 1..MC_STORE_REPLICA_HINTS_MAX entries;
 * lease_cache None = default (on), else its truth; placement_feed None = off, else the key
 * prefix ("" = every key; borrowed from the str for the call); not_ready_wait_ms None =
 * default, 0 = no wait, else up to NOT_READY_WAIT_MAX_MS. */
#define NOT_READY_WAIT_MAX_MS 3600000u
static int setup_store_knobs(PyObject *hints_o, PyObject *lease_o, PyObject *feed_o,
                             PyObject *wait_o, mc_store_config_t *cfg)
{
    if (knob_u32(wait_o, "not_ready_wait_ms", NOT_READY_WAIT_MAX_MS, MC_STORE_NOT_READY_WAIT_OFF,
                 &cfg->not_ready_wait_ms) < 0 ||
        knob_u32(hints_o, "replica_hints", MC_STORE_REPLICA_HINTS_MAX, MC_STORE_REPLICA_HINTS_OFF,
                 &cfg->replica_hint_slots) < 0)
        return -1;
    if (lease_o && lease_o != Py_None) {
        int on = PyObject_IsTrue(lease_o);
        if (on < 0)
            return -1;
        cfg->lease_cache_off = !on;
    }
    if (feed_o && feed_o != Py_None) {
        if (mcpy_cstr(feed_o, "placement_feed", &cfg->placement_feed_prefix) < 0)
            return -1;
        if (strlen(cfg->placement_feed_prefix) > MC_STORE_KEY_MAX) {
            PyErr_Format(PyExc_ValueError, "placement_feed must be at most %d bytes (a key)",
                         MC_STORE_KEY_MAX);
            return -1;
        }
    }
    return 0;
}

/* te_tuning for _setup: a dict {mc_te_config_t tuning field: int, or str for the redis
 * credentials} (mooncake._config te_tuning_from_env; ranges are checked by mc_te_create,
 * which logs the field) into *te. The strings are borrowed from the dict for the call. */
static int setup_te_tuning(PyObject *d, mc_te_config_t *te)
{
    static const struct {
        const char *name;
        size_t off;
    } strs[] = {
        {"redis_username", offsetof(mc_te_config_t, redis_username)},
        {"redis_password", offsetof(mc_te_config_t, redis_password)},
        {"auth_token_file", offsetof(mc_te_config_t, auth_token_file)},
    };
    static const struct {
        const char *name;
        size_t off;
        char kind; /* 'u' uint32_t, 'i' int32_t, 'U' uint64_t */
    } fields[] = {
        {"redis_db_index", offsetof(mc_te_config_t, redis_db_index), 'u'},
        {"transfer_timeout_ms", offsetof(mc_te_config_t, transfer_timeout_ms), 'u'},
        {"tcp_connections", offsetof(mc_te_config_t, tcp_connections), 'u'},
        {"worker_threads", offsetof(mc_te_config_t, worker_threads), 'u'},
        {"slice_size", offsetof(mc_te_config_t, slice_size), 'u'},
        {"force_tcp", offsetof(mc_te_config_t, force_tcp), 'u'},
        {"hugepages", offsetof(mc_te_config_t, hugepages), 'i'},
        {"hugepage_size", offsetof(mc_te_config_t, hugepage_size), 'U'},
        {"tcp_stripe", offsetof(mc_te_config_t, tcp_stripe), 'u'},
        {"tcp_socket_buf", offsetof(mc_te_config_t, tcp_socket_buf), 'u'},
        {"busy_poll_us", offsetof(mc_te_config_t, busy_poll_us), 'i'},
        {"metadata_timeout_ms", offsetof(mc_te_config_t, metadata_timeout_ms), 'u'},
        {"tcp_idle_timeout_s", offsetof(mc_te_config_t, tcp_idle_timeout_s), 'u'},
        {"tcp_max_server_conns", offsetof(mc_te_config_t, tcp_max_server_conns), 'u'},
    };
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "te_tuning must be a dict of transfer-engine fields");
        return -1;
    }
    PyObject *key, *val;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &key, &val)) {
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        size_t j = 0;
        while (name && j < Py_ARRAY_LENGTH(strs) && strcmp(strs[j].name, name) != 0)
            j++;
        if (name && j < Py_ARRAY_LENGTH(strs)) {
            const char *sv = NULL;
            if (val != Py_None && mcpy_cstr(val, name, &sv) < 0)
                return -1;
            memcpy((char *)te + strs[j].off, &sv, sizeof(sv));
            continue;
        }
        size_t i = 0;
        while (name && i < Py_ARRAY_LENGTH(fields) && strcmp(fields[i].name, name) != 0)
            i++;
        if (!name || i == Py_ARRAY_LENGTH(fields)) {
            PyErr_Format(PyExc_ValueError, "te_tuning: unknown transfer-engine field %R", key);
            return -1;
        }
        long long v = PyLong_AsLongLong(val);
        if (v == -1 && PyErr_Occurred())
            return -1;
        bool ok = fields[i].kind == 'i'   ? v >= INT32_MIN && v <= INT32_MAX
                  : fields[i].kind == 'u' ? v >= 0 && v <= UINT32_MAX
                                          : v >= 0;
        if (!ok) {
            PyErr_Format(PyExc_ValueError, "te_tuning: %s out of range, got %lld", name, v);
            return -1;
        }
        char *p = (char *)te + fields[i].off;
        if (fields[i].kind == 'i')
            *(int32_t *)p = (int32_t)v;
        else if (fields[i].kind == 'u')
            *(uint32_t *)p = (uint32_t)v;
        else
            *(uint64_t *)p = (uint64_t)v;
    }
    return 0;
}

/* After setup()'s or _setup_dummy()'s create call (store_teardown before it): on MC_OK this
 * object owns s, whose local buffer is lb bytes, and lets calls in. */
static void store_adopt(StoreObject *self, mc_status_t st, mc_store_t *s, uint64_t lb)
{
    if (st != MC_OK)
        return;
    self->store = s;
    self->local_buffer_size = lb;
    mcpy_gate_open(&self->gate);
}

/* _setup(local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol,
 *        device_name, master_server_addr, host_label=None, rpc_timeout_ms=0,
 *        transfer_timeout_ms=0, replica_hints=None, lease_cache=None, placement_feed=None,
 *        te_tuning=None, client_metric=True, client_http=False, client_http_port=9300,
 *        tenant_id=None, ssd_offload_path=None, not_ready_wait_ms=None) -> status. Use
 *        setup(). */
static PyObject *store_setup(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"local_hostname", "metadata_server", "global_segment_size",
                             "local_buffer_size", "protocol", "device_name",
                             "master_server_addr", "host_label", "rpc_timeout_ms",
                             "transfer_timeout_ms", "replica_hints", "lease_cache",
                             "placement_feed", "te_tuning", "client_metric", "client_http",
                             "client_http_port", "tenant_id", "ssd_offload_path",
                             "not_ready_wait_ms", NULL};
    PyObject *host_o, *meta_o, *gs_o, *lb_o, *proto_o, *dev_o, *master_o, *label_o = NULL;
    PyObject *ssd_o = NULL;
    PyObject *hints_o = NULL, *lease_o = NULL, *feed_o = NULL, *tuning_o = NULL;
    PyObject *tenant_o = NULL, *wait_o = NULL;
    unsigned int rpc_ms = 0, xfer_ms = 0;
    int metric = 1, http = 0, http_port = MC_STORE_CLIENT_HTTP_PORT_DEFAULT;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOO|OIIOOOOppiOOO:_setup", kwlist, &host_o,
                                     &meta_o, &gs_o, &lb_o, &proto_o, &dev_o, &master_o, &label_o,
                                     &rpc_ms, &xfer_ms, &hints_o, &lease_o, &feed_o, &tuning_o,
                                     &metric, &http, &http_port, &tenant_o, &ssd_o, &wait_o))
        return NULL;
    mc_store_config_t cfg = {.rpc_timeout_ms = rpc_ms, .transfer_timeout_ms = xfer_ms,
                             .metrics_off = !metric, .client_http_enable = http,
                             .client_http_port = http_port};
    mc_te_config_t te_tuning = {0};
    if (tuning_o && tuning_o != Py_None) {
        if (setup_te_tuning(tuning_o, &te_tuning) < 0)
            return NULL;
        cfg.te_tuning = &te_tuning;
    }
    uint64_t gs, lb;
    if (mcpy_cstr(host_o, "local_hostname", &cfg.local_hostname) < 0 ||
        mcpy_cstr(meta_o, "metadata_server", &cfg.metadata_server) < 0 ||
        mcpy_u64(gs_o, "global_segment_size", &gs) < 0 ||
        mcpy_u64(lb_o, "local_buffer_size", &lb) < 0 ||
        opt_cstr(proto_o, "protocol", &cfg.protocol) < 0 ||
        opt_cstr(dev_o, "rdma_devices", &cfg.device_name) < 0 ||
        mcpy_cstr(master_o, "master_server_addr", &cfg.master_server_addr) < 0 ||
        opt_cstr(label_o, "host_label", &cfg.host_label) < 0 ||
        opt_cstr(tenant_o, "tenant_id", &cfg.tenant_id) < 0 ||
        opt_cstr(ssd_o, "ssd_offload_path", &cfg.ssd_offload_path) < 0 ||
        setup_store_knobs(hints_o, lease_o, feed_o, wait_o, &cfg) < 0)
        return NULL;
    cfg.global_segment_size = gs;
    cfg.local_buffer_size = lb;
    store_teardown(self); /* setup() again replaces the client, like upstream */
    mc_store_t *s = NULL;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_create(&cfg, &s);
    Py_END_ALLOW_THREADS
    store_adopt(self, st, s, lb);
    return mcpy_ret(st);
}

/* _setup_dummy(server_address, local_buffer_size, mem_pool_size, timeout_ms=0,
 *              max_connections=0, auth_token_file=None, hugepage_size=0) -> status. Use
 *              setup_dummy(). */
static PyObject *store_setup_dummy(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"server_address", "local_buffer_size", "mem_pool_size",
                             "timeout_ms", "max_connections", "auth_token_file",
                             "hugepage_size", NULL};
    PyObject *addr_o, *lb_o, *mp_o;
    unsigned int timeout_ms = 0, max_conns = 0;
    const char *token_file = NULL;
    unsigned long long huge = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO|IIzK:_setup_dummy", kwlist, &addr_o,
                                     &lb_o, &mp_o, &timeout_ms, &max_conns, &token_file, &huge))
        return NULL;
    mc_store_dummy_config_t cfg = {.call_timeout_ms = timeout_ms, .max_connections = max_conns,
                                   .auth_token_file = token_file, .hugepage_size = huge};
    if (mcpy_cstr(addr_o, "server_address", &cfg.server_address) < 0 ||
        mcpy_u64(lb_o, "local_buffer_size", &cfg.local_buffer_size) < 0 ||
        mcpy_u64(mp_o, "mem_pool_size", &cfg.mem_pool_size) < 0)
        return NULL;
    store_teardown(self); /* like setup(): replaces the client */
    mc_store_t *s = NULL;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_create_dummy(&cfg, &s);
    Py_END_ALLOW_THREADS
    store_adopt(self, st, s, cfg.local_buffer_size);
    mcpy_log_flush();
    return mcpy_ret(st);
}

/* _dummy_server_stats() -> {"dummies", "regions", "region_bytes"} of the real client, or a
 * negative status. */
static PyObject *store_dummy_server_stats(StoreObject *self, PyObject *unused)
{
    mc_real_service_stats_t out = {0};
    mc_status_t st = NOT_READY;
    STORE_CALL(self, st, mc_store_dummy_server_stats(self->store, &out));
    if (st != MC_OK)
        return mcpy_ret(st);
    return Py_BuildValue("{s:K,s:K,s:K}", "dummies", (unsigned long long)out.dummies, "regions",
                         (unsigned long long)out.regions, "region_bytes",
                         (unsigned long long)out.region_bytes);
}

static PyObject *store_close(StoreObject *self, PyObject *unused)
{
    store_teardown(self);
    return mcpy_ret(MC_OK);
}

static PyObject *store_health_check(StoreObject *self, PyObject *unused)
{
    if (!STORE_ENTER(self))
        return mcpy_ret(MC_STORE_NOT_SET_UP);
    mc_store_health_t h;
    Py_BEGIN_ALLOW_THREADS
    h = mc_store_health(self->store);
    Py_END_ALLOW_THREADS
    STORE_LEAVE(self);
    return mcpy_ret(h);
}

static PyObject *store_read_stats(StoreObject *self, PyObject *unused)
{
    mc_store_read_stats_t st = {0};
    if (STORE_ENTER(self)) {
        mc_store_read_stats(self->store, &st);
        STORE_LEAVE(self);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K}", "master_lookups",
                         (unsigned long long)st.master_lookups, "lease_hits",
                         (unsigned long long)st.lease_hits, "lease_misses",
                         (unsigned long long)st.lease_misses, "speculative_hits",
                         (unsigned long long)st.speculative_hits, "feed_placements",
                         (unsigned long long)st.feed_placements, "offload_reads_served",
                         (unsigned long long)st.offload_reads_served);
}

/* The client HTTP server's port (0: not serving, or not set up). */
static PyObject *store_client_http_port(StoreObject *self, PyObject *unused)
{
    unsigned port = 0;
    if (STORE_ENTER(self)) {
        port = mc_store_client_http_port(self->store);
        STORE_LEAVE(self);
    }
    return PyLong_FromUnsignedLong(port);
}

/* The client metrics as Prometheus text, or upstream's summary; "" when off or not set up. */
static PyObject *store_metrics_text(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"summary", NULL};
    int summary = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:metrics_text", kwlist, &summary))
        return NULL;
    char *text = NULL;
    if (STORE_ENTER(self)) {
        if (summary)
            mc_store_metrics_summary(self->store, &text);
        else
            mc_store_metrics_text(self->store, &text);
        STORE_LEAVE(self);
    }
    PyObject *r = PyUnicode_DecodeUTF8(text ? text : "", text ? (Py_ssize_t)strlen(text) : 0,
                                       "replace");
    free(text);
    return r;
}

static PyObject *store_get_hostname(StoreObject *self, PyObject *unused)
{
    if (!STORE_ENTER(self))
        return PyUnicode_FromString("");
    const char *h = mc_store_hostname(self->store);
    PyObject *r = PyUnicode_FromString(h ? h : "");
    STORE_LEAVE(self);
    return r;
}

static PyObject *store_is_setup(StoreObject *self, PyObject *unused)
{
    return PyBool_FromLong(self->store != NULL);
}

/* ---- bytes API --------------------------------------------------------------------------- */

/* One put (upsert: upsert) of key from iov[n] with the parsed config: the config's refusal
 * or staging_check's (op names the method; nothing is sent then), NOT_READY when the store is
 * not set up, else the call's status. */
static mc_status_t put_iov(StoreObject *self, const char *key, const struct iovec *iov, size_t n,
                           const cfg_t *cfg, int upsert, const char *op)
{
    mc_status_t st = cfg->refused ? cfg->refused : staging_check(self, op);
    if (st != MC_OK)
        return st;
    if (!STORE_ENTER(self))
        return NOT_READY;
    Py_BEGIN_ALLOW_THREADS
    st = upsert ? mc_store_upsert(self->store, key, iov, n, &cfg->c)
                : mc_store_put(self->store, key, iov, n, &cfg->c);
    Py_END_ALLOW_THREADS
    STORE_LEAVE(self);
    return st;
}

/* put(key, value, config=None) / upsert(...): one value from a buffer-protocol object. */
static PyObject *do_put(StoreObject *self, PyObject *args, PyObject *kwds, int upsert)
{
    static char *kwlist[] = {"key", "value", "config", NULL};
    PyObject *key_o, *value_o, *cfg_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, upsert ? "OO|O:upsert" : "OO|O:put", kwlist,
                                     &key_o, &value_o, &cfg_o))
        return NULL;
    const char *key;
    Py_buffer view;
    cfg_t cfg;
    if (mcpy_cstr(key_o, "key", &key) < 0 || cfg_parse(cfg_o, &cfg) < 0)
        return NULL;
    if (mcpy_get_view(value_o, "value", &view) < 0) {
        cfg_release(&cfg);
        return NULL;
    }
    struct iovec iov = {view.buf, (size_t)view.len};
    mc_status_t st = put_iov(self, key, &iov, 1, &cfg, upsert, upsert ? "upsert" : "put");
    PyBuffer_Release(&view);
    cfg_release(&cfg);
    return mcpy_ret(st);
}

static PyObject *store_put(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return do_put(self, args, kwds, 0);
}

static PyObject *store_upsert(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return do_put(self, args, kwds, 1);
}

/* put_parts(key, *parts, config=None) */
static PyObject *do_put_parts(StoreObject *self, PyObject *args, PyObject *kwds, int upsert)
{
    const char *fname = upsert ? "upsert_parts" : "put_parts";
    PyObject *cfg_o = NULL;
    if (kwds) {
        Py_ssize_t pos = 0;
        PyObject *k, *v;
        while (PyDict_Next(kwds, &pos, &k, &v)) {
            if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, "config") == 0) {
                cfg_o = v;
            } else {
                PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", fname,
                             k);
                return NULL;
            }
        }
    }
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs < 1) {
        PyErr_Format(PyExc_TypeError, "%s() missing required argument 'key'", fname);
        return NULL;
    }
    const char *key;
    cfg_t cfg;
    if (mcpy_cstr(PyTuple_GET_ITEM(args, 0), "key", &key) < 0 || cfg_parse(cfg_o, &cfg) < 0)
        return NULL;
    PyObject *parts = PyTuple_GetSlice(args, 1, nargs);
    mcpy_views_t vs;
    if (parts == NULL || mcpy_views_parse(parts, "parts", &vs) < 0) {
        Py_XDECREF(parts);
        cfg_release(&cfg);
        return NULL;
    }
    Py_DECREF(parts);
    struct iovec *iov = PyMem_Calloc((size_t)(vs.n ? vs.n : 1), sizeof(*iov));
    if (iov == NULL) {
        mcpy_views_release(&vs);
        cfg_release(&cfg);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < vs.n; i++) {
        iov[i].iov_base = vs.v[i].buf;
        iov[i].iov_len = (size_t)vs.v[i].len;
    }
    mc_status_t st = put_iov(self, key, iov, (size_t)vs.n, &cfg, upsert, fname);
    PyMem_Free(iov);
    mcpy_views_release(&vs);
    cfg_release(&cfg);
    return mcpy_ret(st);
}

static PyObject *store_put_parts(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return do_put_parts(self, args, kwds, 0);
}

static PyObject *store_upsert_parts(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return do_put_parts(self, args, kwds, 1);
}

/* put_batch(keys, values, config=None) -> 0 or the first error */
static PyObject *do_put_batch(StoreObject *self, PyObject *args, PyObject *kwds, int upsert)
{
    static char *kwlist[] = {"keys", "values", "config", NULL};
    PyObject *keys_o, *vals_o, *cfg_o = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, upsert ? "OO|O:upsert_batch" : "OO|O:put_batch",
                                     kwlist, &keys_o, &vals_o, &cfg_o))
        return NULL;
    mcpy_keys_t keys;
    mcpy_views_t vs;
    cfg_t cfg;
    if (mcpy_keys_parse(keys_o, "keys", &keys) < 0)
        return NULL;
    if (cfg_parse_n(cfg_o, &cfg, (size_t)keys.n) < 0) {
        mcpy_keys_release(&keys);
        return NULL;
    }
    if (mcpy_views_parse(vals_o, "values", &vs) < 0) {
        mcpy_keys_release(&keys);
        cfg_release(&cfg);
        return NULL;
    }
    long long ret = MC_OK;
    if (keys.n != vs.n) {
        mcpy_warn("%s: %zd keys but %zd values", upsert ? "upsert_batch" : "put_batch", keys.n,
                  vs.n);
        ret = MC_ERR_INVALID_PARAMS;
    } else if (keys.n > 0 && (cfg.refused ||
                              staging_check(self, upsert ? "upsert_batch" : "put_batch"))) {
        ret = MC_ERR_INVALID_PARAMS;
    } else if (keys.n > 0) {
        size_t n = (size_t)keys.n;
        struct iovec *iov = PyMem_Calloc(n, sizeof(*iov));
        const struct iovec **parts = PyMem_Calloc(n, sizeof(*parts));
        size_t *np = PyMem_Calloc(n, sizeof(*np));
        int32_t *res = PyMem_Calloc(n, sizeof(*res));
        if (!iov || !parts || !np || !res) {
            PyErr_NoMemory();
            ret = 1;
        } else {
            for (size_t i = 0; i < n; i++) {
                iov[i].iov_base = vs.v[i].buf;
                iov[i].iov_len = (size_t)vs.v[i].len;
                parts[i] = &iov[i];
                np[i] = 1;
            }
            if (STORE_ENTER(self)) {
                mc_status_t st;
                Py_BEGIN_ALLOW_THREADS
                st = mc_store_batch_put(self->store, n, keys.v, parts, np, &cfg.c, upsert != 0,
                                        res);
                Py_END_ALLOW_THREADS
                STORE_LEAVE(self);
                ret = st;
                for (size_t i = 0; st == MC_OK && i < n; i++)
                    if (res[i] != 0) {
                        ret = res[i];
                        break;
                    }
            } else {
                ret = NOT_READY;
            }
        }
        PyMem_Free(iov);
        PyMem_Free(parts);
        PyMem_Free(np);
        PyMem_Free(res);
    }
    mcpy_views_release(&vs);
    mcpy_keys_release(&keys);
    cfg_release(&cfg);
    if (ret == 1)
        return NULL;
    return mcpy_ret(ret);
}

static PyObject *store_put_batch(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return do_put_batch(self, args, kwds, 0);
}

static PyObject *store_upsert_batch(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return do_put_batch(self, args, kwds, 1);
}

/* Fetch n keys into malloc'd buffers (GIL released): one key is a plain get, several are one
 * batch (one master round trip, one transfer batch). vals/lens/sts are caller arrays. */
static void get_many(StoreObject *self, const char **keys, size_t n, void **vals, size_t *lens,
                     mc_status_t *sts)
{
    int64_t *res = n > 1 ? PyMem_RawCalloc(n, sizeof(*res)) : NULL;
    Py_BEGIN_ALLOW_THREADS
    if (n == 1) {
        vals[0] = NULL;
        lens[0] = 0;
        sts[0] = mc_store_get(self->store, keys[0], &vals[0], &lens[0]);
    } else if (res) {
        mc_status_t st = mc_store_batch_get(self->store, n, keys, vals, res);
        for (size_t i = 0; i < n; i++) {
            sts[i] = st != MC_OK ? st : res[i] < 0 ? (mc_status_t)res[i] : MC_OK;
            lens[i] = st == MC_OK && res[i] >= 0 ? (size_t)res[i] : 0;
            if (sts[i] != MC_OK) {
                free(vals[i]);
                vals[i] = NULL;
            }
        }
    } else {
        for (size_t i = 0; i < n; i++)
            sts[i] = MC_ERR_NO_MEMORY;
    }
    Py_END_ALLOW_THREADS
    PyMem_RawFree(res);
}

/* get(key) -> bytes (b"" on any failure) / get_buffer(key) -> BufferHandle or None
 * (as_handle). */
static PyObject *do_get(StoreObject *self, PyObject *args, PyObject *kwds, int as_handle)
{
    const char *key;
    if (parse_key(args, kwds, as_handle ? "get_buffer" : "get", "key", &key, NULL) < 0)
        return NULL;
    void *val = NULL;
    size_t len = 0;
    mc_status_t st = NOT_READY;
    if (staging_check(self, "get") == MC_OK && STORE_ENTER(self)) {
        get_many(self, &key, 1, &val, &len, &st);
        STORE_LEAVE(self);
    }
    mcpy_log_flush();
    if (as_handle) {
        if (st != MC_OK)
            Py_RETURN_NONE;
        return buf_wrap(val, len);
    }
    PyObject *r = PyBytes_FromStringAndSize(st == MC_OK ? val : NULL,
                                            st == MC_OK ? (Py_ssize_t)len : 0);
    free(val);
    return r;
}

static PyObject *store_get(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return do_get(self, args, kwds, 0);
}

/* get_batch / batch_get_buffer: as_handles selects BufferHandle/None instead of bytes/b"". */
static PyObject *do_get_batch(StoreObject *self, PyObject *keys_o, int as_handles)
{
    mcpy_keys_t keys;
    if (mcpy_keys_parse(keys_o, "keys", &keys) < 0)
        return NULL;
    size_t n = (size_t)keys.n;
    void **vals = PyMem_Calloc(n ? n : 1, sizeof(*vals));
    size_t *lens = PyMem_Calloc(n ? n : 1, sizeof(*lens));
    mc_status_t *sts = PyMem_Calloc(n ? n : 1, sizeof(*sts));
    PyObject *out = NULL;
    if (!vals || !lens || !sts) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        sts[i] = NOT_READY;
    if (n && staging_check(self, as_handles ? "batch_get_buffer" : "get_batch") == MC_OK &&
        STORE_ENTER(self)) {
        get_many(self, keys.v, n, vals, lens, sts);
        STORE_LEAVE(self);
    }
    mcpy_log_flush();
    out = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; out && i < n; i++) {
        PyObject *item;
        if (as_handles) {
            if (sts[i] == MC_OK) {
                item = buf_wrap(vals[i], lens[i]);
                vals[i] = NULL;
            } else {
                item = Py_NewRef(Py_None);
            }
        } else {
            item = PyBytes_FromStringAndSize(sts[i] == MC_OK ? vals[i] : NULL,
                                             sts[i] == MC_OK ? (Py_ssize_t)lens[i] : 0);
        }
        if (item == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)i, item);
    }
done:
    for (size_t i = 0; vals && i < n; i++)
        free(vals[i]);
    PyMem_Free(vals);
    PyMem_Free(lens);
    PyMem_Free(sts);
    mcpy_keys_release(&keys);
    return out;
}

static PyObject *store_get_batch(StoreObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *keys_o;
    if (parse_one(args, kwds, "get_batch", "keys", &keys_o, NULL) < 0)
        return NULL;
    return do_get_batch(self, keys_o, 0);
}

static PyObject *store_batch_get_buffer(StoreObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *keys_o;
    if (parse_one(args, kwds, "batch_get_buffer", "keys", &keys_o, NULL) < 0)
        return NULL;
    return do_get_batch(self, keys_o, 1);
}

static PyObject *store_get_buffer(StoreObject *self, PyObject *args, PyObject *kwds)
{
    return do_get(self, args, kwds, 1);
}

/* ---- registration ------------------------------------------------------------------------ */

static PyObject *store_register_buffer(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"buffer_ptr", "size", NULL};
    PyObject *p_o, *n_o;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO:register_buffer", kwlist, &p_o, &n_o))
        return NULL;
    uint64_t p, n;
    if (mcpy_u64(p_o, "buffer_ptr", &p) < 0 || mcpy_u64(n_o, "size", &n) < 0)
        return NULL;
    if (p == 0 || n == 0 || p + n < p || n > SIZE_MAX) {
        mcpy_warn("register_buffer: empty or wrapping range 0x%llx+%llu", (unsigned long long)p,
                  (unsigned long long)n);
        return mcpy_ret(MC_ERR_INVALID_PARAMS);
    }
    if (!STORE_ENTER(self))
        return mcpy_ret(NOT_READY);
    int mapped;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    mapped = mcpy_range_is_rw_mapped(p, n);
    st = mapped == 0 ? MC_ERR_INVALID_PARAMS
                     : mc_store_register_buffer(self->store, (void *)(uintptr_t)p, (size_t)n);
    Py_END_ALLOW_THREADS
    if (mapped == 0)
        mcpy_warn("register_buffer: [0x%llx, +%llu) is not mapped read-write in this process",
                  (unsigned long long)p, (unsigned long long)n);
    if (st == MC_OK) {
        int rc = mcpy_regions_add(&self->regions, p, n);
        if (rc != MC_OK) {
            Py_BEGIN_ALLOW_THREADS
            mc_store_unregister_buffer(self->store, (void *)(uintptr_t)p);
            Py_END_ALLOW_THREADS
            st = rc;
        }
    }
    STORE_LEAVE(self);
    return mcpy_ret(st);
}

static PyObject *store_unregister_buffer(StoreObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *p_o;
    if (parse_one(args, kwds, "unregister_buffer", "buffer_ptr", &p_o, NULL) < 0)
        return NULL;
    uint64_t p;
    if (mcpy_u64(p_o, "buffer_ptr", &p) < 0)
        return NULL;
    if (!STORE_ENTER(self))
        return mcpy_ret(NOT_READY);
    uint64_t len = mcpy_regions_remove(&self->regions, p);
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_unregister_buffer(self->store, (void *)(uintptr_t)p);
    Py_END_ALLOW_THREADS
    if (st != MC_OK && len)
        mcpy_regions_add(&self->regions, p, len);
    STORE_LEAVE(self);
    return mcpy_ret(st);
}

/* ---- zero-copy --------------------------------------------------------------------------- */

enum { ZC_PUT = 0, ZC_UPSERT = 1, ZC_GET = 2 };

/* Per-key pieces of a zero-copy batch. */
typedef struct {
    mcpy_keys_t keys;
    size_t n;
    struct iovec **parts;  /* per key, PyMem */
    size_t *nparts;
    long long *results;    /* pre-filled per key error, 0 = valid */
} zc_t;

static void zc_free(zc_t *z)
{
    for (size_t i = 0; z->parts && i < z->n; i++)
        PyMem_Free(z->parts[i]);
    PyMem_Free(z->parts);
    PyMem_Free(z->nparts);
    PyMem_Free(z->results);
    mcpy_keys_release(&z->keys);
    memset(z, 0, sizeof(*z));
}

/* Parse keys + (nested) pointer/size lists. multi=0: ptrs/sizes are flat lists (one piece per
 * key). Returns -1 with an exception, 0 otherwise (per-key problems go to results[]). A whole-call
 * problem (length mismatch) sets every result to MC_ERR_INVALID_PARAMS. */
static int zc_parse(StoreObject *self, PyObject *keys_o, PyObject *ptrs_o, PyObject *sizes_o,
                    int multi, zc_t *z)
{
    memset(z, 0, sizeof(*z));
    if (mcpy_keys_parse(keys_o, "keys", &z->keys) < 0)
        return -1;
    z->n = (size_t)z->keys.n;
    size_t n1 = z->n ? z->n : 1;
    z->parts = PyMem_Calloc(n1, sizeof(*z->parts));
    z->nparts = PyMem_Calloc(n1, sizeof(*z->nparts));
    z->results = PyMem_Calloc(n1, sizeof(*z->results));
    if (!z->parts || !z->nparts || !z->results) {
        zc_free(z);
        PyErr_NoMemory();
        return -1;
    }
    const char *pw = multi ? "all_buffer_ptrs" : "buffer_ptrs";
    const char *sw = multi ? "all_sizes" : "sizes";
    PyObject *pt = NULL, *st = NULL;
    if (!PySequence_Check(ptrs_o) || PyUnicode_Check(ptrs_o) || PyBytes_Check(ptrs_o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list, not %.100s", pw,
                     Py_TYPE(ptrs_o)->tp_name);
        goto pyerr;
    }
    if (!PySequence_Check(sizes_o) || PyUnicode_Check(sizes_o) || PyBytes_Check(sizes_o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a list, not %.100s", sw,
                     Py_TYPE(sizes_o)->tp_name);
        goto pyerr;
    }
    pt = PySequence_Tuple(ptrs_o);
    st = PySequence_Tuple(sizes_o);
    if (pt == NULL || st == NULL)
        goto pyerr;
    if ((size_t)PyTuple_GET_SIZE(pt) != z->n || (size_t)PyTuple_GET_SIZE(st) != z->n) {
        mcpy_warn("zero-copy batch: %zu keys, %zd pointer entries, %zd size entries", z->n,
                  PyTuple_GET_SIZE(pt), PyTuple_GET_SIZE(st));
        for (size_t i = 0; i < z->n; i++)
            z->results[i] = MC_ERR_INVALID_PARAMS;
        Py_DECREF(pt);
        Py_DECREF(st);
        return 0;
    }
    for (size_t i = 0; i < z->n; i++) {
        uint64_t *ps = NULL, *ss = NULL, one_p, one_s;
        Py_ssize_t np = 1, ns = 1;
        if (multi) {
            if (mcpy_u64_list(PyTuple_GET_ITEM(pt, i), pw, &ps, &np) < 0)
                goto pyerr;
            if (mcpy_u64_list(PyTuple_GET_ITEM(st, i), sw, &ss, &ns) < 0) {
                PyMem_Free(ps);
                goto pyerr;
            }
        } else {
            if (mcpy_u64(PyTuple_GET_ITEM(pt, i), pw, &one_p) < 0 ||
                mcpy_u64(PyTuple_GET_ITEM(st, i), sw, &one_s) < 0)
                goto pyerr;
            ps = &one_p;
            ss = &one_s;
        }
        if (np != ns) {
            z->results[i] = MC_ERR_INVALID_PARAMS;
        } else {
            z->parts[i] = PyMem_Calloc((size_t)(np ? np : 1), sizeof(struct iovec));
            if (z->parts[i] == NULL) {
                if (multi) {
                    PyMem_Free(ps);
                    PyMem_Free(ss);
                }
                PyErr_NoMemory();
                goto pyerr;
            }
            z->nparts[i] = (size_t)np;
            for (Py_ssize_t j = 0; j < np; j++) {
                if (ss[j] > SIZE_MAX || !mcpy_regions_contains(&self->regions, ps[j], ss[j])) {
                    if (z->results[i] == 0)
                        mcpy_warn("key '%.200s': buffer [0x%llx, +%llu) is not inside a "
                                  "registered buffer",
                                  z->keys.v[i], (unsigned long long)ps[j],
                                  (unsigned long long)ss[j]);
                    z->results[i] = MC_ERR_INVALID_PARAMS;
                }
                z->parts[i][j].iov_base = (void *)(uintptr_t)ps[j];
                z->parts[i][j].iov_len = (size_t)ss[j];
            }
        }
        if (multi) {
            PyMem_Free(ps);
            PyMem_Free(ss);
        }
    }
    Py_DECREF(pt);
    Py_DECREF(st);
    return 0;
pyerr:
    Py_XDECREF(pt);
    Py_XDECREF(st);
    zc_free(z);
    return -1;
}

/* Run the valid keys of z through one batch call; fills z->results. */
static void zc_run(StoreObject *self, zc_t *z, int mode, const cfg_t *cfg)
{
    size_t m = 0;
    for (size_t i = 0; i < z->n; i++)
        if (z->results[i] == 0)
            m++;
    if (m == 0)
        return;
    size_t *idx = PyMem_RawCalloc(m, sizeof(*idx));
    const char **keys = PyMem_RawCalloc(m, sizeof(*keys));
    const struct iovec **parts = PyMem_RawCalloc(m, sizeof(*parts));
    size_t *np = PyMem_RawCalloc(m, sizeof(*np));
    int32_t *r32 = PyMem_RawCalloc(m, sizeof(*r32));
    int64_t *r64 = PyMem_RawCalloc(m, sizeof(*r64));
    if (!idx || !keys || !parts || !np || !r32 || !r64) {
        for (size_t i = 0; i < z->n; i++)
            if (z->results[i] == 0)
                z->results[i] = MC_ERR_NO_MEMORY;
        goto out;
    }
    for (size_t i = 0, k = 0; i < z->n; i++) {
        if (z->results[i] != 0)
            continue;
        idx[k] = i;
        keys[k] = z->keys.v[i];
        parts[k] = z->parts[i];
        np[k] = z->nparts[i];
        k++;
    }
    mc_status_t st = NOT_READY;
    if (STORE_ENTER(self)) {
        Py_BEGIN_ALLOW_THREADS
        if (mode == ZC_GET)
            st = mc_store_batch_get_into(self->store, m, keys, parts, np, r64);
        else
            st = mc_store_batch_put(self->store, m, keys, parts, np, &cfg->c, mode == ZC_UPSERT,
                                    r32);
        Py_END_ALLOW_THREADS
        STORE_LEAVE(self);
    }
    for (size_t k = 0; k < m; k++) {
        long long r = st != MC_OK ? st : (mode == ZC_GET ? (long long)r64[k] : (long long)r32[k]);
        z->results[idx[k]] = r;
    }
out:
    PyMem_RawFree(idx);
    PyMem_RawFree(keys);
    PyMem_RawFree(parts);
    PyMem_RawFree(np);
    PyMem_RawFree(r32);
    PyMem_RawFree(r64);
}

static PyObject *zc_results(zc_t *z)
{
    mcpy_log_flush();
    PyObject *l = PyList_New((Py_ssize_t)z->n);
    for (size_t i = 0; l && i < z->n; i++) {
        PyObject *v = PyLong_FromLongLong(z->results[i]);
        if (v == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    return l;
}

/* Single-key zero-copy forms: put_from / upsert_from / get_into. */
static PyObject *do_zc_single(StoreObject *self, PyObject *args, PyObject *kwds, int mode)
{
    static char *kw_put[] = {"key", "buffer_ptr", "size", "config", NULL};
    static char *kw_get[] = {"key", "buffer_ptr", "size", NULL};
    PyObject *k, *p, *s, *c = NULL;
    int ok = mode == ZC_GET
                 ? PyArg_ParseTupleAndKeywords(args, kwds, "OOO:get_into", kw_get, &k, &p, &s)
                 : PyArg_ParseTupleAndKeywords(args, kwds,
                                               mode == ZC_PUT ? "OOO|O:put_from"
                                                              : "OOO|O:upsert_from",
                                               kw_put, &k, &p, &s, &c);
    if (!ok)
        return NULL;
    const char *key;
    uint64_t ptr, size;
    cfg_t cfg;
    if (mcpy_cstr(k, "key", &key) < 0 || mcpy_u64(p, "buffer_ptr", &ptr) < 0 ||
        mcpy_u64(s, "size", &size) < 0 || cfg_parse(c, &cfg) < 0)
        return NULL;
    long long r;
    if (cfg.refused) {
        r = cfg.refused;
    } else if (size > SIZE_MAX || !mcpy_regions_contains(&self->regions, ptr, size)) {
        mcpy_warn("key '%.200s': buffer [0x%llx, +%llu) is not inside a registered buffer", key,
                  (unsigned long long)ptr, (unsigned long long)size);
        r = MC_ERR_INVALID_PARAMS;
    } else if (!STORE_ENTER(self)) {
        r = NOT_READY;
    } else {
        struct iovec iov = {(void *)(uintptr_t)ptr, (size_t)size};
        Py_BEGIN_ALLOW_THREADS
        if (mode == ZC_GET)
            r = mc_store_get_into(self->store, key, &iov, 1);
        else if (mode == ZC_UPSERT)
            r = mc_store_upsert(self->store, key, &iov, 1, &cfg.c);
        else
            r = mc_store_put(self->store, key, &iov, 1, &cfg.c);
        Py_END_ALLOW_THREADS
        STORE_LEAVE(self);
    }
    cfg_release(&cfg);
    return mcpy_ret(r);
}

static PyObject *store_put_from(StoreObject *self, PyObject *a, PyObject *k)
{
    return do_zc_single(self, a, k, ZC_PUT);
}
static PyObject *store_upsert_from(StoreObject *self, PyObject *a, PyObject *k)
{
    return do_zc_single(self, a, k, ZC_UPSERT);
}
static PyObject *store_get_into(StoreObject *self, PyObject *a, PyObject *k)
{
    return do_zc_single(self, a, k, ZC_GET);
}

static PyObject *do_zc_batch(StoreObject *self, PyObject *args, PyObject *kwds, int mode,
                             int multi, const char *fname)
{
    static char *kw_flat[] = {"keys", "buffer_ptrs", "sizes", "config", NULL};
    static char *kw_multi_put[] = {"keys", "all_buffer_ptrs", "all_sizes", "config", NULL};
    static char *kw_multi_get[] = {"keys", "all_buffer_ptrs", "all_sizes",
                                   "prefer_alloc_in_same_node", NULL};
    char fmt[96];
    PyObject *k, *p, *s, *extra = NULL;
    snprintf(fmt, sizeof(fmt), "OOO|O:%s", fname);
    char **kwlist = multi ? (mode == ZC_GET ? kw_multi_get : kw_multi_put) : kw_flat;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, fmt, kwlist, &k, &p, &s, &extra))
        return NULL;
    cfg_t cfg;
    if (mode == ZC_GET && !multi && extra) {
        PyErr_Format(PyExc_TypeError, "%s() takes 3 arguments", fname);
        return NULL;
    }
    zc_t z;
    if (zc_parse(self, k, p, s, multi, &z) < 0)
        return NULL;
    if (mode == ZC_GET) {
        /* prefer_alloc_in_same_node (gets): always the case here, reads try this client's own
         * segment first (store_replica_order) */
        memset(&cfg, 0, sizeof(cfg));
    } else if (cfg_parse_n(extra, &cfg, z.n) < 0) {
        zc_free(&z);
        return NULL;
    }
    for (size_t i = 0; cfg.refused && i < z.n; i++)
        z.results[i] = cfg.refused;
    zc_run(self, &z, mode, &cfg);
    PyObject *r = zc_results(&z);
    zc_free(&z);
    cfg_release(&cfg);
    return r;
}

static PyObject *store_batch_put_from(StoreObject *self, PyObject *a, PyObject *k)
{
    return do_zc_batch(self, a, k, ZC_PUT, 0, "batch_put_from");
}
static PyObject *store_batch_upsert_from(StoreObject *self, PyObject *a, PyObject *k)
{
    return do_zc_batch(self, a, k, ZC_UPSERT, 0, "batch_upsert_from");
}
static PyObject *store_batch_get_into(StoreObject *self, PyObject *a, PyObject *k)
{
    return do_zc_batch(self, a, k, ZC_GET, 0, "batch_get_into");
}
static PyObject *store_batch_put_from_multi_buffers(StoreObject *self, PyObject *a, PyObject *k)
{
    return do_zc_batch(self, a, k, ZC_PUT, 1, "batch_put_from_multi_buffers");
}
static PyObject *store_batch_get_into_multi_buffers(StoreObject *self, PyObject *a, PyObject *k)
{
    return do_zc_batch(self, a, k, ZC_GET, 1, "batch_get_into_multi_buffers");
}

/* ---- management -------------------------------------------------------------------------- */

static PyObject *store_is_exist(StoreObject *self, PyObject *args, PyObject *kwds)
{
    const char *key;
    if (parse_key(args, kwds, "is_exist", "key", &key, NULL) < 0)
        return NULL;
    int r = NOT_READY;
    STORE_CALL(self, r, mc_store_exists(self->store, key));
    return mcpy_ret(r);
}

static PyObject *store_get_size(StoreObject *self, PyObject *args, PyObject *kwds)
{
    const char *key;
    if (parse_key(args, kwds, "get_size", "key", &key, NULL) < 0)
        return NULL;
    int64_t r = NOT_READY;
    STORE_CALL(self, r, mc_store_get_size(self->store, key));
    return mcpy_ret(r);
}

static PyObject *store_remove(StoreObject *self, PyObject *args, PyObject *kwds)
{
    const char *key;
    int force = 0;
    if (parse_key(args, kwds, "remove", "key", &key, &force) < 0)
        return NULL;
    mc_status_t r = NOT_READY;
    STORE_CALL(self, r, mc_store_remove(self->store, key, force != 0));
    return mcpy_ret(r);
}

static PyObject *store_remove_by_regex(StoreObject *self, PyObject *args, PyObject *kwds)
{
    const char *re;
    int force = 0;
    if (parse_key(args, kwds, "remove_by_regex", "regex_pattern", &re, &force) < 0)
        return NULL;
    int64_t r = NOT_READY;
    STORE_CALL(self, r, mc_store_remove_by_regex(self->store, re, force != 0));
    return mcpy_ret(r);
}

static PyObject *store_remove_all(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"force", NULL};
    int force = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:remove_all", kwlist, &force))
        return NULL;
    int64_t r = NOT_READY;
    STORE_CALL(self, r, mc_store_remove_all(self->store, force != 0));
    return mcpy_ret(r);
}

enum { KB_EXIST = 0, KB_REMOVE = 1, KB_REPLICA_CLEAR = 2 };

/* One per-key batch call over a list of keys -> a list with one status (or 1/0) per key; every
 * entry is the call's status when it failed as a whole. force: KB_REMOVE; segment:
 * KB_REPLICA_CLEAR. */
static PyObject *do_key_batch(StoreObject *self, PyObject *keys_o, int op, int force,
                              const char *segment)
{
    mcpy_keys_t keys;
    if (mcpy_keys_parse(keys_o, "keys", &keys) < 0)
        return NULL;
    size_t n = (size_t)keys.n;
    int32_t *res = PyMem_Calloc(n ? n : 1, sizeof(*res));
    if (res == NULL) {
        mcpy_keys_release(&keys);
        return PyErr_NoMemory();
    }
    mc_status_t st = NOT_READY;
    if (n == 0) {
        st = MC_OK;
    } else if (STORE_ENTER(self)) {
        Py_BEGIN_ALLOW_THREADS
        if (op == KB_EXIST)
            st = mc_store_batch_exists(self->store, n, keys.v, res);
        else if (op == KB_REMOVE)
            st = mc_store_batch_remove(self->store, n, keys.v, force != 0, res);
        else
            st = mc_store_batch_replica_clear(self->store, n, keys.v, segment, res);
        Py_END_ALLOW_THREADS
        STORE_LEAVE(self);
    }
    mcpy_log_flush();
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        PyObject *v = PyLong_FromLong(st == MC_OK ? res[i] : st);
        if (v == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, v);
    }
    PyMem_Free(res);
    mcpy_keys_release(&keys);
    return l;
}

static PyObject *store_batch_is_exist(StoreObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *keys_o;
    if (parse_one(args, kwds, "batch_is_exist", "keys", &keys_o, NULL) < 0)
        return NULL;
    return do_key_batch(self, keys_o, KB_EXIST, 0, NULL);
}

static PyObject *store_batch_remove(StoreObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *keys_o;
    int force = 0;
    if (parse_one(args, kwds, "batch_remove", "keys", &keys_o, &force) < 0)
        return NULL;
    return do_key_batch(self, keys_o, KB_REMOVE, force, NULL);
}

/* _batch_replica_clear(keys, segment_name) -> one status per key (0 = cleared); every entry
 * the call's status when it failed as a whole. batch_replica_clear (_store_more.py) turns it
 * into upstream's list of cleared keys. */
static PyObject *store_batch_replica_clear(StoreObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"keys", "segment_name", NULL};
    PyObject *keys_o;
    const char *segment = "";
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|s:_batch_replica_clear", kwlist, &keys_o,
                                     &segment))
        return NULL;
    return do_key_batch(self, keys_o, KB_REPLICA_CLEAR, 0, segment);
}

/* Replica tasks (mc_store_create_copy_task & co; the upstream-shaped methods are in
 * _store_more.py). */
static PyObject *store_create_copy_task(StoreObject *self, PyObject *args)
{
    const char *key;
    PyObject *targets_o;
    if (!PyArg_ParseTuple(args, "sO:_create_copy_task", &key, &targets_o))
        return NULL;
    PyObject *seq = PySequence_Fast(targets_o, "_create_copy_task(): targets must be a list");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    const char *targets[MC_STORE_TASK_TARGETS_MAX];
    mc_status_t st = n > MC_STORE_TASK_TARGETS_MAX ? MC_ERR_INVALID_PARAMS : MC_OK;
    for (Py_ssize_t i = 0; st == MC_OK && i < n; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        targets[i] = PyUnicode_Check(o) ? PyUnicode_AsUTF8(o) : NULL;
        if (!targets[i]) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "_create_copy_task(): targets must be str");
            Py_DECREF(seq);
            return NULL;
        }
    }
    uint64_t id[2] = {0, 0};
    if (st == MC_OK) {
        st = NOT_READY;
        STORE_CALL(self, st, mc_store_create_copy_task(self->store, key, targets, (size_t)n, id));
    }
    Py_DECREF(seq);
    mcpy_log_flush();
    return Py_BuildValue("(iKK)", (int)st, (unsigned long long)id[0], (unsigned long long)id[1]);
}

static PyObject *store_create_move_task(StoreObject *self, PyObject *args)
{
    const char *key, *source, *target;
    if (!PyArg_ParseTuple(args, "sss:_create_move_task", &key, &source, &target))
        return NULL;
    uint64_t id[2] = {0, 0};
    mc_status_t st = NOT_READY;
    STORE_CALL(self, st, mc_store_create_move_task(self->store, key, source, target, id));
    mcpy_log_flush();
    return Py_BuildValue("(iKK)", (int)st, (unsigned long long)id[0], (unsigned long long)id[1]);
}

/* _query_task(id_high, id_low) -> (status, type, task_status, created_ms, updated_ms,
 * assigned_client (16 bytes), message) */
static PyObject *store_query_task(StoreObject *self, PyObject *args)
{
    unsigned long long hi, lo;
    if (!PyArg_ParseTuple(args, "KK:_query_task", &hi, &lo))
        return NULL;
    uint64_t id[2] = {hi, lo};
    mc_store_task_info_t *ti = PyMem_Calloc(1, sizeof(*ti));
    if (!ti)
        return PyErr_NoMemory();
    mc_status_t st = NOT_READY;
    STORE_CALL(self, st, mc_store_query_task(self->store, id, ti));
    mcpy_log_flush();
    /* the message comes from the task's client: decoded leniently */
    PyObject *msg = PyUnicode_DecodeUTF8(ti->message, (Py_ssize_t)strlen(ti->message), "replace");
    PyObject *r = msg ? Py_BuildValue("(iiiKKy#N)", (int)st, ti->type, ti->status,
                                      (unsigned long long)ti->created_at_ms,
                                      (unsigned long long)ti->last_updated_at_ms,
                                      (const char *)ti->assigned_client, (Py_ssize_t)16, msg)
                      : NULL;
    PyMem_Free(ti);
    return r;
}

/* Extra segments (mc_store_segment_*; the upstream-shaped methods are in _store_more.py). */
static PyObject *store_segment_mount_file(StoreObject *self, PyObject *args)
{
    const char *path, *location;
    unsigned long long offset, size;
    if (!PyArg_ParseTuple(args, "sKKs:_segment_mount_file", &path, &offset, &size, &location))
        return NULL;
    uint8_t id[16] = {0};
    mc_status_t st = NOT_READY;
    STORE_CALL(self, st, mc_store_segment_mount_file(self->store, path, offset, (size_t)size,
                                                     location, id));
    mcpy_log_flush();
    return Py_BuildValue("(iy#)", (int)st, (const char *)id, (Py_ssize_t)16);
}

static PyObject *store_segment_alloc_mount(StoreObject *self, PyObject *args)
{
    const char *location;
    unsigned long long size;
    if (!PyArg_ParseTuple(args, "Ks:_segment_alloc_mount", &size, &location))
        return NULL;
    uint8_t id[16] = {0};
    size_t got = 0;
    mc_status_t st = NOT_READY;
    STORE_CALL(self, st, mc_store_segment_alloc_mount(self->store, (size_t)size, location, id,
                                                      &got));
    mcpy_log_flush();
    return Py_BuildValue("(iy#K)", (int)st, (const char *)id, (Py_ssize_t)16,
                         (unsigned long long)got);
}

static PyObject *store_segment_unmount(StoreObject *self, PyObject *args)
{
    Py_buffer id;
    int kind;
    unsigned long long grace_ms;
    if (!PyArg_ParseTuple(args, "y*iK:_segment_unmount", &id, &kind, &grace_ms))
        return NULL;
    mc_status_t st = MC_ERR_INVALID_PARAMS;
    if (id.len == 16) {
        uint8_t raw[16];
        memcpy(raw, id.buf, 16);
        st = NOT_READY;
        STORE_CALL(self, st, mc_store_segment_unmount(self->store, raw, kind, grace_ms));
    }
    PyBuffer_Release(&id);
    mcpy_log_flush();
    return PyLong_FromLong(st);
}

/* _is_dummy() -> True when this object is a dummy client (setup_dummy). */
static PyObject *store_is_dummy(StoreObject *self, PyObject *unused)
{
    (void)unused;
    return PyBool_FromLong(self->store != NULL && mc_store_is_dummy(self->store));
}

/* Replica descriptors as a list of (segment, endpoint, addr, size, status, replica_type)
 * tuples; [] on error. */
static PyObject *replica_list(StoreObject *self, const char *key)
{
    mc_replica_desc_t *d = NULL;
    size_t n = 0;
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_store_replica_desc(self->store, key, &d, &n);
    Py_END_ALLOW_THREADS
    if (st != MC_OK) {
        free(d);
        return PyList_New(0);
    }
    PyObject *l = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; l && i < n; i++) {
        d[i].segment[sizeof(d[i].segment) - 1] = '\0';
        d[i].endpoint[sizeof(d[i].endpoint) - 1] = '\0';
        PyObject *t = Py_BuildValue("(ssKKii)", d[i].segment, d[i].endpoint,
                                    (unsigned long long)d[i].addr,
                                    (unsigned long long)d[i].size, (int)d[i].status,
                                    (int)d[i].replica_type);
        if (t == NULL) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, (Py_ssize_t)i, t);
    }
    free(d);
    return l;
}

static PyObject *store_get_replica_desc(StoreObject *self, PyObject *args, PyObject *kwds)
{
    const char *key;
    if (parse_key(args, kwds, "_get_replica_desc", "key", &key, NULL) < 0)
        return NULL;
    if (!STORE_ENTER(self))
        return PyList_New(0);
    PyObject *r = replica_list(self, key);
    STORE_LEAVE(self);
    mcpy_log_flush();
    return r;
}

static PyObject *store_batch_get_replica_desc(StoreObject *self, PyObject *args, PyObject *kwds)
{
    PyObject *keys_o;
    if (parse_one(args, kwds, "_batch_get_replica_desc", "keys", &keys_o, NULL) < 0)
        return NULL;
    mcpy_keys_t keys;
    if (mcpy_keys_parse(keys_o, "keys", &keys) < 0)
        return NULL;
    PyObject *d = PyDict_New();
    if (d && STORE_ENTER(self)) {
        for (Py_ssize_t i = 0; i < keys.n; i++) {
            PyObject *l = replica_list(self, keys.v[i]);
            if (l == NULL || PyDict_SetItem(d, PyTuple_GET_ITEM(keys.tuple, i), l) < 0) {
                Py_XDECREF(l);
                Py_CLEAR(d);
                break;
            }
            Py_DECREF(l);
        }
        STORE_LEAVE(self);
    }
    mcpy_keys_release(&keys);
    mcpy_log_flush();
    return d;
}

/* ---- ranged reads (get_into_ranges) ------------------------------------------------------ */

/* Bytes from addr to the end of the registered buffer holding it (0: none holds it). */
static uint64_t region_room(const mcpy_region_t *v, size_t n, uint64_t addr)
{
    for (size_t i = 0; i < n; i++)
        if (addr >= v[i].addr && addr - v[i].addr < v[i].len)
            return v[i].len - (addr - v[i].addr);
    return 0;
}

#define RANGES_CHUNK 4096 /* keys fetched per batch get (below the client's batch cap) */

/* _read_ranges(keys, frag_key, frag_buf, frag_dst, frag_src, frag_size) -> list of int.
 *
 * The engine of MooncakeDistributedStore.get_into_ranges (store.py checks the shapes): keys are
 * the distinct keys of the call; fragment f copies frag_size[f] bytes from offset frag_src[f] of
 * keys[frag_key[f]] to frag_buf[f] + frag_dst[f], where frag_buf[f] lies in a buffer registered
 * with register_buffer. Each key is read once, whole and checksum-verified, through the batch get
 * (one master round trip and one transfer batch per RANGES_CHUNK keys) into a heap copy, then
 * its fragments are copied out; the copy is freed before returning. Result per fragment: the
 * bytes copied, the key's read status (e.g. OBJECT_NOT_FOUND), or INVALID_PARAMS when the range
 * runs past the object or past the registered buffer. */
static PyObject *store_read_ranges(StoreObject *self, PyObject *args)
{
    PyObject *keys_o, *fk_o, *fb_o, *fd_o, *fs_o, *fz_o;
    if (!PyArg_ParseTuple(args, "OOOOOO:_read_ranges", &keys_o, &fk_o, &fb_o, &fd_o, &fs_o,
                          &fz_o))
        return NULL;
    mcpy_keys_t keys;
    if (mcpy_keys_parse(keys_o, "keys", &keys) < 0)
        return NULL;
    uint64_t *fk = NULL, *fb = NULL, *fd = NULL, *fs = NULL, *fz = NULL;
    Py_ssize_t n1, n2, n3, n4, n5;
    PyObject *out = NULL;
    void **vals = NULL;
    size_t *lens = NULL;
    mc_status_t *sts = NULL;
    int64_t *res = NULL;
    mcpy_region_t *regs = NULL;
    if (mcpy_u64_list(fk_o, "frag_key", &fk, &n1) < 0 ||
        mcpy_u64_list(fb_o, "frag_buf", &fb, &n2) < 0 ||
        mcpy_u64_list(fd_o, "frag_dst", &fd, &n3) < 0 ||
        mcpy_u64_list(fs_o, "frag_src", &fs, &n4) < 0 ||
        mcpy_u64_list(fz_o, "frag_size", &fz, &n5) < 0)
        goto done;
    if (n1 != n2 || n1 != n3 || n1 != n4 || n1 != n5) {
        PyErr_SetString(PyExc_ValueError, "_read_ranges: fragment lists differ in length");
        goto done;
    }
    size_t nf = (size_t)n1, nk = (size_t)keys.n;
    for (size_t f = 0; f < nf; f++)
        if (fk[f] >= nk) {
            PyErr_SetString(PyExc_ValueError, "_read_ranges: key index out of range");
            goto done;
        }
    vals = PyMem_Calloc(nk ? nk : 1, sizeof(*vals));
    lens = PyMem_Calloc(nk ? nk : 1, sizeof(*lens));
    sts = PyMem_Calloc(nk ? nk : 1, sizeof(*sts));
    res = PyMem_Calloc(nf ? nf : 1, sizeof(*res));
    if (!vals || !lens || !sts || !res) {
        PyErr_NoMemory();
        goto done;
    }
    for (size_t i = 0; i < nk; i++)
        sts[i] = NOT_READY;
    if (nk && STORE_ENTER(self)) {
        for (size_t i = 0; i < nk; i += RANGES_CHUNK) {
            size_t m = nk - i < RANGES_CHUNK ? nk - i : RANGES_CHUNK;
            get_many(self, keys.v + i, m, vals + i, lens + i, sts + i);
        }
        size_t nregs = 0;
        regs = mcpy_regions_snapshot(&self->regions, &nregs);
        Py_BEGIN_ALLOW_THREADS
        for (size_t f = 0; f < nf; f++) {
            size_t k = (size_t)fk[f];
            uint64_t room = region_room(regs, nregs, fb[f]);
            if (sts[k] != MC_OK)
                res[f] = sts[k];
            else if (fs[f] > lens[k] || fz[f] > lens[k] - fs[f] || fd[f] > room ||
                     fz[f] > room - fd[f])
                res[f] = MC_ERR_INVALID_PARAMS;
            else {
                if (fz[f])
                    memcpy((char *)(uintptr_t)(fb[f] + fd[f]), (char *)vals[k] + fs[f],
                           (size_t)fz[f]);
                res[f] = (int64_t)fz[f];
            }
        }
        Py_END_ALLOW_THREADS
        STORE_LEAVE(self);
    } else {
        for (size_t f = 0; f < nf; f++)
            res[f] = NOT_READY;
    }
    mcpy_log_flush();
    out = PyList_New((Py_ssize_t)nf);
    for (size_t f = 0; out && f < nf; f++) {
        PyObject *v = PyLong_FromLongLong(res[f]);
        if (v == NULL) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, (Py_ssize_t)f, v);
    }
done:
    for (size_t i = 0; vals && i < (size_t)keys.n; i++)
        free(vals[i]);
    PyMem_RawFree(regs);
    PyMem_Free(vals);
    PyMem_Free(lens);
    PyMem_Free(sts);
    PyMem_Free(res);
    PyMem_Free(fk);
    PyMem_Free(fb);
    PyMem_Free(fd);
    PyMem_Free(fs);
    PyMem_Free(fz);
    mcpy_keys_release(&keys);
    return out;
}

/* _buffer_room(ptr) -> bytes from ptr to the end of the registered buffer holding it, 0 if
 * none does (upstream's capacity of a get_into_ranges destination). */
static PyObject *store_buffer_room(StoreObject *self, PyObject *arg)
{
    uint64_t p;
    if (mcpy_u64(arg, "buffer_ptr", &p) < 0)
        return NULL;
    size_t n = 0;
    mcpy_region_t *v = mcpy_regions_snapshot(&self->regions, &n);
    uint64_t room = region_room(v, n, p);
    PyMem_RawFree(v);
    return PyLong_FromUnsignedLongLong(room);
}

static PyMethodDef store_methods[] = {
    {"_setup", MCPY_KWFUNC(store_setup), METH_VARARGS | METH_KEYWORDS,
     "_setup(local_hostname, metadata_server, global_segment_size, local_buffer_size, protocol, "
     "device_name, master_server_addr, host_label=None, rpc_timeout_ms=0, "
     "transfer_timeout_ms=0, replica_hints=None, lease_cache=None, placement_feed=None, "
     "te_tuning=None, ..., not_ready_wait_ms=None) -> status. Use setup()."},
    {"_setup_dummy", MCPY_KWFUNC(store_setup_dummy), METH_VARARGS | METH_KEYWORDS,
     "_setup_dummy(server_address, local_buffer_size, mem_pool_size, timeout_ms=0, "
     "max_connections=0, auth_token_file=None, hugepage_size=0) -> status. Use setup_dummy()."},
    {"_dummy_server_stats", (PyCFunction)store_dummy_server_stats, METH_NOARGS,
     "_dummy_server_stats() -> dict of the real client's dummies, regions, region_bytes, or a "
     "negative status (not a dummy: INVALID_PARAMS)."},
    {"close", (PyCFunction)store_close, METH_NOARGS,
     "Unmount and stop the client (waits for calls in flight). Returns 0."},
    {"health_check", (PyCFunction)store_health_check, METH_NOARGS,
     "0 healthy, 1 not set up, 2 master unreachable (mc_store_health_t)."},
    {"get_hostname", (PyCFunction)store_get_hostname, METH_NOARGS,
     "This client's 'host:port' (its segment name)."},
    {"read_stats", (PyCFunction)store_read_stats, METH_NOARGS,
     "How gets found their bytes since setup, in keys: dict of master_lookups, lease_hits "
     "(read under a cached read lease, no master), lease_misses (cached lease given up), "
     "speculative_hits (read from a hint, confirmed by the lookup), feed_placements (pushed "
     "by the master to the placement feed, MC_STORE_PLACEMENT_FEED). Zeros before setup."},
    {"client_http_port", (PyCFunction)store_client_http_port, METH_NOARGS,
     "Port of the client HTTP server (/health, /metrics, /metrics/summary), 0 when it does "
     "not run."},
    {"metrics_text", MCPY_KWFUNC(store_metrics_text), METH_VARARGS | METH_KEYWORDS,
     "metrics_text(summary=False) -> str: the client metrics in Prometheus text (or "
     "upstream's summary); \"\" when metrics are off (MC_STORE_CLIENT_METRIC=0)."},
    {"is_setup", (PyCFunction)store_is_setup, METH_NOARGS, "True after a successful setup()."},
    {"put", MCPY_KWFUNC(store_put), METH_VARARGS | METH_KEYWORDS,
     "put(key, value, config=None) -> status (an existing key is left unchanged)"},
    {"put_parts", MCPY_KWFUNC(store_put_parts), METH_VARARGS | METH_KEYWORDS,
     "put_parts(key, *parts, config=None) -> status"},
    {"put_batch", MCPY_KWFUNC(store_put_batch), METH_VARARGS | METH_KEYWORDS,
     "put_batch(keys, values, config=None) -> 0 or the first error"},
    {"upsert", MCPY_KWFUNC(store_upsert), METH_VARARGS | METH_KEYWORDS,
     "upsert(key, value, config=None) -> status"},
    {"upsert_parts", MCPY_KWFUNC(store_upsert_parts), METH_VARARGS | METH_KEYWORDS,
     "upsert_parts(key, *parts, config=None) -> status"},
    {"upsert_batch", MCPY_KWFUNC(store_upsert_batch), METH_VARARGS | METH_KEYWORDS,
     "upsert_batch(keys, values, config=None) -> 0 or the first error"},
    {"get", MCPY_KWFUNC(store_get), METH_VARARGS | METH_KEYWORDS,
     "get(key) -> bytes (b'' on a miss or an error)"},
    {"get_batch", MCPY_KWFUNC(store_get_batch), METH_VARARGS | METH_KEYWORDS,
     "get_batch(keys) -> list of bytes (b'' for misses)"},
    {"get_buffer", MCPY_KWFUNC(store_get_buffer), METH_VARARGS | METH_KEYWORDS,
     "get_buffer(key) -> BufferHandle or None"},
    {"batch_get_buffer", MCPY_KWFUNC(store_batch_get_buffer), METH_VARARGS | METH_KEYWORDS,
     "batch_get_buffer(keys) -> list of BufferHandle or None"},
    {"register_buffer", MCPY_KWFUNC(store_register_buffer), METH_VARARGS | METH_KEYWORDS,
     "register_buffer(buffer_ptr, size) -> status"},
    {"unregister_buffer", MCPY_KWFUNC(store_unregister_buffer), METH_VARARGS | METH_KEYWORDS,
     "unregister_buffer(buffer_ptr) -> status"},
    {"put_from", MCPY_KWFUNC(store_put_from), METH_VARARGS | METH_KEYWORDS,
     "put_from(key, buffer_ptr, size, config=None) -> status"},
    {"upsert_from", MCPY_KWFUNC(store_upsert_from), METH_VARARGS | METH_KEYWORDS,
     "upsert_from(key, buffer_ptr, size, config=None) -> status"},
    {"get_into", MCPY_KWFUNC(store_get_into), METH_VARARGS | METH_KEYWORDS,
     "get_into(key, buffer_ptr, size) -> bytes read or negative status"},
    {"batch_put_from", MCPY_KWFUNC(store_batch_put_from), METH_VARARGS | METH_KEYWORDS,
     "batch_put_from(keys, buffer_ptrs, sizes, config=None) -> list of status"},
    {"batch_upsert_from", MCPY_KWFUNC(store_batch_upsert_from), METH_VARARGS | METH_KEYWORDS,
     "batch_upsert_from(keys, buffer_ptrs, sizes, config=None) -> list of status"},
    {"batch_get_into", MCPY_KWFUNC(store_batch_get_into), METH_VARARGS | METH_KEYWORDS,
     "batch_get_into(keys, buffer_ptrs, sizes) -> list of bytes read or negative status"},
    {"batch_put_from_multi_buffers", MCPY_KWFUNC(store_batch_put_from_multi_buffers),
     METH_VARARGS | METH_KEYWORDS,
     "batch_put_from_multi_buffers(keys, all_buffer_ptrs, all_sizes, config=None) -> list"},
    {"batch_get_into_multi_buffers", MCPY_KWFUNC(store_batch_get_into_multi_buffers),
     METH_VARARGS | METH_KEYWORDS,
     "batch_get_into_multi_buffers(keys, all_buffer_ptrs, all_sizes, "
     "prefer_alloc_in_same_node=False) -> list"},
    {"is_exist", MCPY_KWFUNC(store_is_exist), METH_VARARGS | METH_KEYWORDS,
     "is_exist(key) -> 1 exists, 0 absent, negative error"},
    {"batch_is_exist", MCPY_KWFUNC(store_batch_is_exist), METH_VARARGS | METH_KEYWORDS,
     "batch_is_exist(keys) -> list of 1/0/negative"},
    {"get_size", MCPY_KWFUNC(store_get_size), METH_VARARGS | METH_KEYWORDS,
     "get_size(key) -> size in bytes or negative error"},
    {"remove", MCPY_KWFUNC(store_remove), METH_VARARGS | METH_KEYWORDS,
     "remove(key, force=False) -> status"},
    {"batch_remove", MCPY_KWFUNC(store_batch_remove), METH_VARARGS | METH_KEYWORDS,
     "batch_remove(keys, force=False) -> list of status"},
    {"remove_by_regex", MCPY_KWFUNC(store_remove_by_regex), METH_VARARGS | METH_KEYWORDS,
     "remove_by_regex(regex_pattern, force=False) -> number removed or negative error"},
    {"remove_all", MCPY_KWFUNC(store_remove_all), METH_VARARGS | METH_KEYWORDS,
     "remove_all(force=False) -> number removed or negative error"},
    {"_read_ranges", (PyCFunction)store_read_ranges, METH_VARARGS,
     "_read_ranges(keys, frag_key, frag_buf, frag_dst, frag_src, frag_size) -> list. Use "
     "get_into_ranges()."},
    {"_buffer_room", (PyCFunction)store_buffer_room, METH_O,
     "_buffer_room(ptr) -> bytes from ptr to the end of its registered buffer (0: none)."},
    {"_get_replica_desc", MCPY_KWFUNC(store_get_replica_desc), METH_VARARGS | METH_KEYWORDS,
     "_get_replica_desc(key) -> list of (segment, endpoint, addr, size, status, type)"},
    {"_batch_get_replica_desc", MCPY_KWFUNC(store_batch_get_replica_desc),
     METH_VARARGS | METH_KEYWORDS, "_batch_get_replica_desc(keys) -> {key: [tuples]}"},
    {"_batch_replica_clear", MCPY_KWFUNC(store_batch_replica_clear), METH_VARARGS | METH_KEYWORDS,
     "_batch_replica_clear(keys, segment_name='') -> list of status (0 = cleared). Use "
     "batch_replica_clear()."},
    {"_create_copy_task", (PyCFunction)store_create_copy_task, METH_VARARGS,
     "_create_copy_task(key, targets) -> (status, id_high, id_low). Use create_copy_task()."},
    {"_create_move_task", (PyCFunction)store_create_move_task, METH_VARARGS,
     "_create_move_task(key, source, target) -> (status, id_high, id_low). Use "
     "create_move_task()."},
    {"_query_task", (PyCFunction)store_query_task, METH_VARARGS,
     "_query_task(id_high, id_low) -> (status, type, task_status, created_ms, updated_ms, "
     "client, message). Use query_task()."},
    {"_segment_mount_file", (PyCFunction)store_segment_mount_file, METH_VARARGS,
     "_segment_mount_file(path, offset, size, location) -> (status, id). Use mount_segment()."},
    {"_segment_alloc_mount", (PyCFunction)store_segment_alloc_mount, METH_VARARGS,
     "_segment_alloc_mount(size, location) -> (status, id, allocated). Use "
     "allocate_and_mount_segment()."},
    {"_segment_unmount", (PyCFunction)store_segment_unmount, METH_VARARGS,
     "_segment_unmount(id, kind, grace_ms) -> status. Use unmount_segment()."},
    {"_is_dummy", (PyCFunction)store_is_dummy, METH_NOARGS,
     "_is_dummy() -> True for a dummy client (setup_dummy)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject StoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mooncake._store.DistributedStore",
    .tp_basicsize = sizeof(StoreObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Mooncake-C store client (use mooncake.store.MooncakeDistributedStore).",
    .tp_new = store_new,
    .tp_dealloc = (destructor)store_dealloc,
    .tp_methods = store_methods,
    .tp_weaklistoffset = offsetof(StoreObject, weakrefs),
};

/* _set_enums(SoftPinAction, ObjectDataType): mooncake.store's IntEnum classes, so that
 * ReplicateConfig's soft_pin_action and data_type read back as their members. */
static PyObject *mod_set_enums(PyObject *mod, PyObject *args)
{
    PyObject *sp, *dt;
    if (!PyArg_ParseTuple(args, "OO:_set_enums", &sp, &dt))
        return NULL;
    Py_XSETREF(g_soft_pin_enum, Py_NewRef(sp));
    Py_XSETREF(g_data_type_enum, Py_NewRef(dt));
    Py_RETURN_NONE;
}

/* _shm_alloc(size, huge_page_size=0) -> address of process-wide shared memory (0 on failure);
 * huge_page_size as mc_shm_alloc_pages. */
static PyObject *mod_shm_alloc(PyObject *mod, PyObject *args)
{
    PyObject *size_o, *huge_o = NULL;
    uint64_t n, huge = 0;
    if (!PyArg_ParseTuple(args, "O|O:_shm_alloc", &size_o, &huge_o) ||
        mcpy_u64(size_o, "size", &n) < 0 ||
        (huge_o && mcpy_u64(huge_o, "huge_page_size", &huge) < 0))
        return NULL;
    void *p = NULL;
    if (n > 0 && n <= SIZE_MAX && huge <= SIZE_MAX) {
        Py_BEGIN_ALLOW_THREADS
        p = mc_shm_alloc_pages((size_t)n, (size_t)huge);
        Py_END_ALLOW_THREADS
    }
    mcpy_log_flush();
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)p);
}

/* _shm_free(ptr) -> 0, or -1 when ptr is not the start of an allocation. */
static PyObject *mod_shm_free(PyObject *mod, PyObject *arg)
{
    uint64_t p;
    if (mcpy_u64(arg, "ptr", &p) < 0)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = mc_shm_free((void *)(uintptr_t)p);
    Py_END_ALLOW_THREADS
    mcpy_log_flush();
    return PyLong_FromLong(rc);
}

/* upstream's hugepage_memory_alloc / hugepage_memory_free (memory_alloc.h) as built without
 * NVMe-oF: the allocator has no memory to give and free has nothing to do. Their addresses
 * are what get_alloc_func_addr / get_free_func_addr hand out (for ctypes or a pluggable
 * allocator). */
static void *nof_memory_alloc(size_t size)
{
    (void)size;
    return NULL;
}

static void nof_memory_free(void *ptr) { (void)ptr; }

static PyObject *mod_nof_alloc_addr(PyObject *mod, PyObject *unused)
{
    return PyLong_FromVoidPtr((void *)(uintptr_t)&nof_memory_alloc);
}

static PyObject *mod_nof_free_addr(PyObject *mod, PyObject *unused)
{
    return PyLong_FromVoidPtr((void *)(uintptr_t)&nof_memory_free);
}

static PyMethodDef store_module_methods[] = {
    {"_nof_alloc_addr", mod_nof_alloc_addr, METH_NOARGS,
     "_nof_alloc_addr() -> address of void *alloc(size_t) (returns NULL: no NVMe-oF)."},
    {"_nof_free_addr", mod_nof_free_addr, METH_NOARGS,
     "_nof_free_addr() -> address of void free(void *) (no-op)."},
    {"_shm_alloc", mod_shm_alloc, METH_VARARGS,
     "_shm_alloc(size, huge_page_size=0) -> address of shared memory a dummy client can "
     "register (0: failed)."},
    {"_shm_free", mod_shm_free, METH_O, "_shm_free(ptr) -> 0, or -1 (not an allocation)."},
    {"_set_enums", mod_set_enums, METH_VARARGS,
     "_set_enums(SoftPinAction, ObjectDataType): the enum classes ReplicateConfig returns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef store_module = {
    PyModuleDef_HEAD_INIT, "mooncake._store", "Mooncake-C store client binding.", -1,
    store_module_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__store(void)
{
    if (mcpy_import_core() < 0)
        return NULL;
    if (PyType_Ready(&ReplCfgType) < 0 || PyType_Ready(&BufType) < 0 ||
        PyType_Ready(&StoreType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&store_module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReplCfgType);
    Py_INCREF(&BufType);
    Py_INCREF(&StoreType);
    if (PyModule_AddObject(m, "ReplicateConfig", (PyObject *)&ReplCfgType) < 0 ||
        PyModule_AddObject(m, "BufferHandle", (PyObject *)&BufType) < 0 ||
        PyModule_AddObject(m, "DistributedStore", (PyObject *)&StoreType) < 0 ||
        PyModule_AddIntConstant(m, "KEY_MAX", MC_STORE_KEY_MAX - 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
