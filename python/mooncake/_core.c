/* mooncake._core: status table, log level and the log bridge shared by _engine and _store;
 * the cluster HTTP challenge-response for Python HTTP servers (_http_auth.c).
 *
 * Importing it installs the library log sink that forwards to logging.getLogger("mooncake")
 * and registers an atexit hook that removes the sink before the interpreter finalizes, so C
 * threads that log late never touch a dying interpreter.
 */
#include "_common.h"

#include "mooncake/log.h"

int mcpy_http_auth_add(PyObject *m); /* _http_auth.c */

static PyObject *core_status_name(PyObject *self, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (v < INT_MIN || v > INT_MAX)
        return PyUnicode_FromString("UNKNOWN");
    return PyUnicode_FromString(mc_status_name((int)v));
}

static PyObject *core_status_str(PyObject *self, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    if (v < INT_MIN || v > INT_MAX)
        return PyUnicode_FromString("UNKNOWN: unknown status code");
    return PyUnicode_FromString(mc_status_str((int)v));
}

/* {name: code} of every status the library knows (codes are 0 and negatives above -10000). */
static PyObject *core_status_codes(PyObject *self, PyObject *unused)
{
    PyObject *d = PyDict_New();
    if (d == NULL)
        return NULL;
    for (int c = 0; c > -10000; c--) {
        const char *name = mc_status_name(c);
        if (strcmp(name, "UNKNOWN") == 0)
            continue;
        PyObject *v = PyLong_FromLong(c);
        if (v == NULL || PyDict_SetItemString(d, name, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(d);
            return NULL;
        }
        Py_DECREF(v);
    }
    return d;
}

static PyObject *core_set_log_level(PyObject *self, PyObject *arg)
{
    mc_log_level_t level;
    if (PyUnicode_Check(arg)) {
        const char *s = PyUnicode_AsUTF8(arg);
        if (s == NULL)
            return NULL;
        if (mc_log_level_parse(s, &level) != MC_OK) {
            PyErr_Format(PyExc_ValueError, "unknown log level %R", arg);
            return NULL;
        }
    } else {
        long v = PyLong_AsLong(arg);
        if (v == -1 && PyErr_Occurred())
            return NULL;
        /* Python logging numbers: map to the nearest library level at or below. */
        if (v <= 10)
            level = MC_LOG_LEVEL_DEBUG;
        else if (v <= 20)
            level = MC_LOG_LEVEL_INFO;
        else if (v <= 30)
            level = MC_LOG_LEVEL_WARN;
        else if (v <= 40)
            level = MC_LOG_LEVEL_ERROR;
        else
            level = MC_LOG_LEVEL_OFF;
    }
    mc_log_set_level(level);
    Py_RETURN_NONE;
}

static PyObject *core_get_log_level(PyObject *self, PyObject *unused)
{
    return PyLong_FromLong((long)mc_log_get_level());
}

static PyObject *core_flush_logs(PyObject *self, PyObject *unused)
{
    mcpy_bridge_flush();
    Py_RETURN_NONE;
}

static PyObject *core_dropped_log_lines(PyObject *self, PyObject *unused)
{
    return PyLong_FromUnsignedLongLong(mcpy_bridge_dropped());
}

static PyObject *core_shutdown(PyObject *self, PyObject *unused)
{
    Py_BEGIN_ALLOW_THREADS
    mcpy_bridge_uninstall();
    Py_END_ALLOW_THREADS
    mcpy_bridge_flush();
    Py_RETURN_NONE;
}

static PyMethodDef core_methods[] = {
    {"status_name", core_status_name, METH_O, "Symbolic name of a status code."},
    {"status_str", core_status_str, METH_O, "Description of a status code."},
    {"status_codes", core_status_codes, METH_NOARGS, "Dict of every known status name to code."},
    {"set_log_level", core_set_log_level, METH_O,
     "Set the library log level ('debug'|'info'|'warn'|'error'|'off' or a logging level)."},
    {"get_log_level", core_get_log_level, METH_NOARGS, "Library log level (logging numbers)."},
    {"flush_logs", core_flush_logs, METH_NOARGS, "Deliver queued library log lines now."},
    {"dropped_log_lines", core_dropped_log_lines, METH_NOARGS,
     "Number of library log lines dropped because the queue was full."},
    {"_shutdown", core_shutdown, METH_NOARGS, "Remove the log sink (runs at exit)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "mooncake._core",
    "Mooncake-C core helpers: status codes, the bridge from library logs to Python logging and "
    "the cluster HTTP challenge-response.",
    -1, core_methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&core_module);
    if (m == NULL)
        return NULL;
    const mcpy_core_api_t *api = mcpy_core_api_local();
    PyObject *cap = PyCapsule_New((void *)api, MCPY_CORE_CAPSULE, NULL);
    if (cap == NULL || PyModule_AddObject(m, "_C_API", cap) < 0) {
        Py_XDECREF(cap);
        Py_DECREF(m);
        return NULL;
    }
    PyObject *logging = PyImport_ImportModule("logging");
    PyObject *logger = logging ? PyObject_CallMethod(logging, "getLogger", "s", "mooncake") : NULL;
    Py_XDECREF(logging);
    if (logger == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    mcpy_bridge_install(logger);
    Py_DECREF(logger);
    PyObject *atexit = PyImport_ImportModule("atexit");
    PyObject *fn = PyObject_GetAttrString(m, "_shutdown");
    PyObject *r = (atexit && fn) ? PyObject_CallMethod(atexit, "register", "O", fn) : NULL;
    Py_XDECREF(r);
    Py_XDECREF(fn);
    Py_XDECREF(atexit);
    if (r == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "LOG_DEBUG", MC_LOG_LEVEL_DEBUG) < 0 ||
        PyModule_AddIntConstant(m, "LOG_INFO", MC_LOG_LEVEL_INFO) < 0 ||
        PyModule_AddIntConstant(m, "LOG_WARN", MC_LOG_LEVEL_WARN) < 0 ||
        PyModule_AddIntConstant(m, "LOG_ERROR", MC_LOG_LEVEL_ERROR) < 0 ||
        PyModule_AddIntConstant(m, "LOG_OFF", MC_LOG_LEVEL_OFF) < 0 ||
        mcpy_http_auth_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
