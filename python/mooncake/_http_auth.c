/* mooncake._core's binding of the cluster HTTP challenge-response (src/common/http_auth.h), for
 * the HTTP servers written in Python (mooncake.mooncake_store_service) and Python clients:
 *
 *   HttpAuthServer(token_file=None)  keyring from a token file (mc_auth_load); None or "":
 *                                    every request passes as an admin (.enabled False)
 *     .check(authz, method, target, body=None) -> (verdict, peer, challenge)
 *                                    body None: headers-only pre-check; else the request is
 *                                    verified and its (nonce, cnonce) recorded against replay;
 *                                    peer {"admin": bool, "tenant": str} when verdict is OK
 *                                    and a body was given, else None; challenge: the
 *                                    WWW-Authenticate value for the 401 of a refusal, else None
 *   http_auth_authorize(secret, nonce, method, target, body=b"") -> str   Authorization value
 *   http_auth_parse(value) -> dict | None                                 header parameters
 *   http_auth_reason(verdict) -> str, HTTP_AUTH_OK .. HTTP_AUTH_BUSY
 *
 * method and target are str as Python's http.server gives them (decoded Latin-1, so encoded
 * back to the bytes on the wire) or bytes. The C calls run with the GIL released (hashing a
 * body of up to the server's cap); the server context is thread-safe.
 */
#include "_common.h"

#include "common/http_auth.h"

#include <string.h>

typedef struct {
    PyObject_HEAD
    mc_auth_t *auth;             /* owned; NULL: authentication off */
    mc_http_auth_server_t *srv;  /* owned */
} http_auth_server_obj;

/* Bytes of a header-ish argument: str encoded Latin-1, or bytes; *hold keeps them alive. NUL
 * bytes cannot be on an HTTP header line: refused with ValueError. */
static int latin1_arg(PyObject *o, const char *what, PyObject **hold, const char **s)
{
    if (PyUnicode_Check(o)) {
        *hold = PyUnicode_AsLatin1String(o);
        if (*hold == NULL)
            return -1;
    } else if (PyBytes_Check(o)) {
        Py_INCREF(o);
        *hold = o;
    } else {
        PyErr_Format(PyExc_TypeError, "%s must be str or bytes, not %.100s", what,
                     Py_TYPE(o)->tp_name);
        return -1;
    }
    *s = PyBytes_AS_STRING(*hold);
    if ((Py_ssize_t)strlen(*s) != PyBytes_GET_SIZE(*hold)) {
        Py_CLEAR(*hold);
        PyErr_Format(PyExc_ValueError, "%s must not contain NUL characters", what);
        return -1;
    }
    return 0;
}

static int srv_init(http_auth_server_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"token_file", NULL};
    PyObject *path_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:HttpAuthServer", kwlist, &path_o))
        return -1;
    if (self->srv != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "HttpAuthServer is already initialised");
        return -1;
    }
    PyObject *path_b = NULL;
    const char *path = NULL;
    if (path_o != Py_None) {
        if (!PyUnicode_FSConverter(path_o, &path_b))
            return -1;
        path = PyBytes_AS_STRING(path_b);
    }
    mc_status_t st = MC_OK;
    if (path != NULL && path[0] != '\0') {
        Py_BEGIN_ALLOW_THREADS
        st = mc_auth_load(path, &self->auth);
        Py_END_ALLOW_THREADS
    }
    mcpy_log_flush(); /* the reason (file, line) was logged by mc_auth_load */
    if (st != MC_OK) {
        PyErr_Format(PyExc_ValueError, "token file %s cannot be used: %s (see the log)", path,
                     mc_status_str(st));
        Py_XDECREF(path_b);
        return -1;
    }
    Py_XDECREF(path_b);
    st = mc_http_auth_server_create(self->auth, &self->srv);
    if (st != MC_OK) {
        PyErr_Format(PyExc_MemoryError, "HTTP auth context: %s", mc_status_str(st));
        return -1;
    }
    return 0;
}

static void srv_dealloc(http_auth_server_obj *self)
{
    mc_http_auth_server_free(self->srv);
    mc_auth_free(self->auth);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int srv_ready(http_auth_server_obj *self)
{
    if (self->srv == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "HttpAuthServer is not initialised");
        return -1;
    }
    return 0;
}

static PyObject *srv_enabled(http_auth_server_obj *self, void *closure)
{
    return PyBool_FromLong(mc_http_auth_server_enabled(self->srv));
}

static PyObject *srv_check(http_auth_server_obj *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"authz", "method", "target", "body", NULL};
    PyObject *authz_o, *method_o, *target_o, *body_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|O:check", kwlist, &authz_o, &method_o,
                                     &target_o, &body_o) ||
        srv_ready(self) < 0)
        return NULL;
    PyObject *authz_b = NULL, *method_b = NULL, *target_b = NULL, *ret = NULL;
    const char *authz = NULL, *method, *target;
    Py_buffer body = {0};
    if ((authz_o != Py_None && latin1_arg(authz_o, "authz", &authz_b, &authz) < 0) ||
        latin1_arg(method_o, "method", &method_b, &method) < 0 ||
        latin1_arg(target_o, "target", &target_b, &target) < 0 ||
        (body_o != Py_None && PyObject_GetBuffer(body_o, &body, PyBUF_SIMPLE) < 0))
        goto out;
    mc_auth_peer_t peer = {0};
    char challenge[MC_HTTP_AUTH_CHALLENGE_MAX];
    mc_http_auth_verdict_t v;
    int with_body = body_o != Py_None;
    Py_BEGIN_ALLOW_THREADS
    uint8_t hash[MC_HTTP_AUTH_BODY_HASH_SIZE];
    if (with_body)
        mc_http_auth_body_hash(body.buf, (size_t)body.len, hash);
    v = mc_http_auth_check(self->srv, authz, method, target, with_body ? hash : NULL, &peer,
                           challenge);
    Py_END_ALLOW_THREADS
    if (v != MC_HTTP_AUTH_OK)
        ret = Py_BuildValue("(iOs)", (int)v, Py_None, challenge);
    else if (with_body)
        ret = Py_BuildValue("(i{s:O,s:s}O)", (int)v, "admin", peer.admin ? Py_True : Py_False,
                            "tenant", peer.tenant, Py_None);
    else
        ret = Py_BuildValue("(iOO)", (int)v, Py_None, Py_None);
out:
    if (body.obj != NULL)
        PyBuffer_Release(&body);
    Py_XDECREF(authz_b);
    Py_XDECREF(method_b);
    Py_XDECREF(target_b);
    mcpy_log_flush();
    return ret;
}

static PyMethodDef srv_methods[] = {
    {"check", MCPY_KWFUNC(srv_check), METH_VARARGS | METH_KEYWORDS,
     "check(authz, method, target, body=None) -> (verdict, peer or None, challenge or None)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef srv_getset[] = {
    {"enabled", (getter)srv_enabled, NULL, "True when requests are checked (a keyring)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject http_auth_server_type = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "mooncake._core.HttpAuthServer",
    .tp_basicsize = sizeof(http_auth_server_obj),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Server side of the cluster HTTP challenge-response over a token file's keyring.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)srv_init,
    .tp_dealloc = (destructor)srv_dealloc,
    .tp_methods = srv_methods,
    .tp_getset = srv_getset,
};

static PyObject *py_authorize(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"secret", "nonce", "method", "target", "body", NULL};
    PyObject *secret_o, *nonce_o, *method_o, *target_o;
    Py_buffer body = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|y*:http_auth_authorize", kwlist, &secret_o,
                                     &nonce_o, &method_o, &target_o, &body))
        return NULL;
    PyObject *secret_b = NULL, *nonce_b = NULL, *method_b = NULL, *target_b = NULL, *ret = NULL;
    const char *secret, *nonce, *method, *target;
    mc_auth_t *auth = NULL;
    if (latin1_arg(secret_o, "secret", &secret_b, &secret) < 0 ||
        latin1_arg(nonce_o, "nonce", &nonce_b, &nonce) < 0 ||
        latin1_arg(method_o, "method", &method_b, &method) < 0 ||
        latin1_arg(target_o, "target", &target_b, &target) < 0)
        goto out;
    if (mc_auth_from_secret(secret, NULL, &auth) != MC_OK) {
        PyErr_Format(PyExc_ValueError, "secret must be %u..%u printable bytes",
                     MC_AUTH_SECRET_MIN, MC_AUTH_SECRET_MAX);
        goto out;
    }
    char out[MC_HTTP_AUTH_HEADER_MAX];
    mc_status_t st;
    Py_BEGIN_ALLOW_THREADS
    st = mc_http_auth_authorize(auth, nonce, method, target, body.buf, (size_t)body.len, out);
    Py_END_ALLOW_THREADS
    if (st != MC_OK)
        PyErr_SetString(PyExc_ValueError, "nonce must be 96 hex characters (and method, target "
                                          "within the signed lengths)");
    else
        ret = PyUnicode_FromString(out);
out:
    mc_auth_free(auth);
    PyBuffer_Release(&body);
    Py_XDECREF(secret_b);
    Py_XDECREF(nonce_b);
    Py_XDECREF(method_b);
    Py_XDECREF(target_b);
    mcpy_log_flush();
    return ret;
}

static PyObject *py_parse(PyObject *mod, PyObject *arg)
{
    PyObject *hold = NULL;
    const char *value;
    if (latin1_arg(arg, "value", &hold, &value) < 0)
        return NULL;
    mc_http_auth_params_t p;
    mc_status_t st = mc_http_auth_parse(value, &p);
    Py_DECREF(hold);
    if (st != MC_OK)
        Py_RETURN_NONE;
    PyObject *d = PyDict_New();
    const char *names[] = {"nonce", "cnonce", "mac", "stale"};
    const char *vals[] = {p.nonce, p.cnonce, p.mac, p.stale};
    for (size_t i = 0; d != NULL && i < 4; i++) {
        if (vals[i] == NULL)
            continue;
        PyObject *v = PyUnicode_DecodeLatin1(vals[i], (Py_ssize_t)strlen(vals[i]), NULL);
        if (v == NULL || PyDict_SetItemString(d, names[i], v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

static PyObject *py_reason(PyObject *mod, PyObject *arg)
{
    long v = PyLong_AsLong(arg);
    if (v == -1 && PyErr_Occurred())
        return NULL;
    return PyUnicode_FromString(mc_http_auth_verdict_str((mc_http_auth_verdict_t)v));
}

static PyMethodDef http_auth_functions[] = {
    {"http_auth_authorize", MCPY_KWFUNC(py_authorize), METH_VARARGS | METH_KEYWORDS,
     "http_auth_authorize(secret, nonce, method, target, body=b'') -> Authorization value"},
    {"http_auth_parse", py_parse, METH_O,
     "Parameters {nonce, cnonce, mac, stale} of a Mooncake header value, or None if malformed."},
    {"http_auth_reason", py_reason, METH_O, "Short English reason for a verdict."},
    {NULL, NULL, 0, NULL},
};

int mcpy_http_auth_add(PyObject *m)
{
    static const struct {
        const char *name;
        int v;
    } verdicts[] = {
        {"HTTP_AUTH_OK", MC_HTTP_AUTH_OK},
        {"HTTP_AUTH_MISSING", MC_HTTP_AUTH_MISSING},
        {"HTTP_AUTH_MALFORMED", MC_HTTP_AUTH_MALFORMED},
        {"HTTP_AUTH_STALE", MC_HTTP_AUTH_STALE},
        {"HTTP_AUTH_BAD_NONCE", MC_HTTP_AUTH_BAD_NONCE},
        {"HTTP_AUTH_BAD_MAC", MC_HTTP_AUTH_BAD_MAC},
        {"HTTP_AUTH_REPLAY", MC_HTTP_AUTH_REPLAY},
        {"HTTP_AUTH_BUSY", MC_HTTP_AUTH_BUSY},
    };
    for (size_t i = 0; i < sizeof(verdicts) / sizeof(verdicts[0]); i++)
        if (PyModule_AddIntConstant(m, verdicts[i].name, verdicts[i].v) < 0)
            return -1;
    if (PyModule_AddFunctions(m, http_auth_functions) < 0 ||
        PyType_Ready(&http_auth_server_type) < 0)
        return -1;
    Py_INCREF(&http_auth_server_type);
    if (PyModule_AddObject(m, "HttpAuthServer", (PyObject *)&http_auth_server_type) < 0) {
        Py_DECREF(&http_auth_server_type);
        return -1;
    }
    return 0;
}
