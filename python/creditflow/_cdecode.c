/* creditflow._cdecode: the straight-line Avro decoder of _avro_fast, compiled.

   decode(program, b, mv, pos) -> (value, end) reads one value of a record schema from the
   bytes object b at pos, following `program`, the schema compiled into nested tuples by
   creditflow._native (one tuple per schema node; the op codes below). It returns exactly
   what the Python decoder that _avro_fast generates for the same schema returns, and checks
   nothing it can leave to the checking decoder of _avro: whenever the bytes are not what it
   expects (a length past the end, a bad union branch or boolean, an int out of range, a
   string that is not UTF-8, a varint past 64 bits) it raises the Fallback exception given to
   init(), and the caller runs the checking decoder, which gives the value or the precise error.

   Packed fields (top-level bytes fields read as numpy arrays) are read-only views of b, no
   copy: made with numpy's C API where the module was built with numpy's headers
   (CREDITFLOW_NUMPY_API) and that numpy's API could be imported at init(), else by calling
   the frombuffer function given to init() (numpy.frombuffer). Both give the same array: the
   dtype, the count, b's bytes at pos, b as its base, not writeable. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if PY_VERSION_HEX < 0x030B0000 /* public from 3.11 */
#define PyFloat_Unpack4 _PyFloat_Unpack4
#define PyFloat_Unpack8 _PyFloat_Unpack8
#endif
#if PY_VERSION_HEX < 0x030A0000 /* from 3.10 */
static inline PyObject *Py_NewRef(PyObject *o) {
    Py_INCREF(o);
    return o;
}
#endif
#if PY_VERSION_HEX < 0x030900A4 || !defined(Py_XSETREF)
#define Py_XSETREF(op, op2)                                                                        \
    do {                                                                                           \
        PyObject *_tmp = (PyObject *)(op);                                                         \
        (op) = (op2);                                                                              \
        Py_XDECREF(_tmp);                                                                          \
    } while (0)
#endif

enum { OP_NULL, OP_BOOL, OP_INT, OP_LONG, OP_FLOAT, OP_DOUBLE, OP_STRING, OP_BYTES, OP_PACKED, OP_UNION,
       OP_ARRAY, OP_RECORD };

#ifdef CREDITFLOW_NUMPY_API
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#endif
static int numpy_api; /* 1 once init() imported numpy's C API (never without its headers) */

static PyObject *Fallback;   /* the exception that sends the caller to the checking decoder */
static PyObject *frombuffer; /* numpy.frombuffer */

typedef struct {
    const unsigned char *p;
    Py_ssize_t len, pos;
    PyObject *b, *mv;
    Py_ssize_t pc; /* whole records: the packed fields' common count, -1 before the first */
    int whole;
} Reader;

static PyObject *fallback(void) {
    PyErr_SetNone(Fallback);
    return NULL;
}

/* A zigzag varint of at most maxbytes bytes; -1 (no exception set) where the checking
   decoder must decide. */
static int varint(Reader *r, int maxbytes, int64_t *out) {
    uint64_t u = 0;
    for (int k = 0; k < maxbytes; k++) {
        if (r->pos >= r->len)
            return -1;
        unsigned c = r->p[r->pos++];
        if (k == 9 && c > 1)
            return -1;
        u |= (uint64_t)(c & 127) << (7 * k);
        if (c < 128) {
            *out = (int64_t)(u >> 1) ^ -(int64_t)(u & 1);
            return 0;
        }
    }
    return -1;
}

static PyObject *node(Reader *r, PyObject *prog);

/* A dict with room for n keys (no resizing while it fills). */
static PyObject *new_dict(Py_ssize_t n) {
#if PY_VERSION_HEX < 0x030D0000
    return _PyDict_NewPresized(n);
#else
    (void)n;
    return PyDict_New();
#endif
}

/* Reads past one value of prog, checking exactly what node() checks (so that a record is
   accepted or refused alike whether a field is built or read past) without building it.
   0, or -1 with an exception set (Fallback where the checking decoder must decide). */
static int skip(Reader *r, PyObject *prog) {
    int64_t n;
    long op = PyLong_AsLong(PyTuple_GET_ITEM(prog, 0));
    switch (op) {
    case OP_NULL:
        return 0;
    case OP_BOOL:
        if (r->pos >= r->len || r->p[r->pos] > 1)
            break;
        r->pos++;
        return 0;
    case OP_INT:
        if (varint(r, 5, &n) < 0 || n < INT32_MIN || n > INT32_MAX)
            break;
        return 0;
    case OP_LONG:
        if (varint(r, 10, &n) < 0)
            break;
        return 0;
    case OP_FLOAT:
    case OP_DOUBLE: {
        Py_ssize_t size = op == OP_FLOAT ? 4 : 8;
        if (r->len - r->pos < size)
            break;
        r->pos += size;
        return 0;
    }
    case OP_STRING:
    case OP_BYTES:
    case OP_PACKED: {
        if (op != OP_BYTES) { /* decoded (checked), then dropped */
            PyObject *v = node(r, prog);
            if (v == NULL)
                return -1;
            Py_DECREF(v);
            return 0;
        }
        if (varint(r, 10, &n) < 0 || n < 0 || n > r->len - r->pos)
            break;
        r->pos += (Py_ssize_t)n;
        return 0;
    }
    case OP_UNION: {
        if (r->pos >= r->len)
            break;
        unsigned char br = r->p[r->pos++];
        if (br == 0)
            return 0;
        if (br == 2)
            return skip(r, PyTuple_GET_ITEM(prog, 1));
        break;
    }
    case OP_ARRAY: {
        int64_t size;
        if (varint(r, 10, &n) < 0)
            break;
        while (n) {
            if (n < 0) {
                if (n == INT64_MIN || varint(r, 10, &size) < 0 || size < 0 || size > r->len - r->pos)
                    goto fb;
                n = -n;
            }
            if (n > r->len - r->pos)
                goto fb;
            for (int64_t k = 0; k < n; k++)
                if (skip(r, PyTuple_GET_ITEM(prog, 1)) < 0)
                    return -1;
            if (varint(r, 10, &n) < 0)
                goto fb;
        }
        return 0;
    }
    case OP_RECORD: {
        PyObject *nodes = PyTuple_GET_ITEM(prog, 2);
        if (Py_EnterRecursiveCall(" in creditflow._cdecode"))
            return -1;
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(nodes); i++)
            if (skip(r, PyTuple_GET_ITEM(nodes, i)) < 0) {
                Py_LeaveRecursiveCall();
                return -1;
            }
        Py_LeaveRecursiveCall();
        return 0;
    }
    default:
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "creditflow._cdecode: unknown op in the program");
        return -1;
    }
fb:
    PyErr_SetNone(Fallback);
    return -1;
}

static PyObject *record(Reader *r, PyObject *prog) {
    /* (OP_RECORD, keys, nodes, defaults): keys[i] is the dict key of the writer's field i, or
       None for a field the reader lacks (read past); defaults are (key, value, fresh) for the
       reader's fields the writer lacks, fresh a function that makes a new mutable default or None. */
    PyObject *keys = PyTuple_GET_ITEM(prog, 1), *nodes = PyTuple_GET_ITEM(prog, 2);
    PyObject *defaults = PyTuple_GET_ITEM(prog, 3);
    PyObject *d = new_dict(PyTuple_GET_SIZE(keys) + PyTuple_GET_SIZE(defaults));
    if (d == NULL)
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(nodes);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *k = PyTuple_GET_ITEM(keys, i);
        if (k == Py_None) { /* a field the reader lacks: read past, checked */
            if (skip(r, PyTuple_GET_ITEM(nodes, i)) < 0)
                goto fail;
            continue;
        }
        PyObject *v = node(r, PyTuple_GET_ITEM(nodes, i));
        if (v == NULL)
            goto fail;
        if (PyDict_SetItem(d, k, v) < 0) {
            Py_DECREF(v);
            goto fail;
        }
        Py_DECREF(v);
    }
    n = PyTuple_GET_SIZE(defaults);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *def = PyTuple_GET_ITEM(defaults, i);
        PyObject *fresh = PyTuple_GET_ITEM(def, 2), *v;
        if (fresh == Py_None) {
            v = PyTuple_GET_ITEM(def, 1);
            Py_INCREF(v);
        } else if ((v = PyObject_CallNoArgs(fresh)) == NULL) {
            goto fail;
        }
        int rc = PyDict_SetItem(d, PyTuple_GET_ITEM(def, 0), v);
        Py_DECREF(v);
        if (rc < 0)
            goto fail;
    }
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *array(Reader *r, PyObject *item) {
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    int64_t n, size;
    if (varint(r, 10, &n) < 0)
        goto fb;
    while (n) {
        if (n < 0) { /* a block with its byte size */
            if (n == INT64_MIN || varint(r, 10, &size) < 0 || size < 0 || size > r->len - r->pos)
                goto fb;
            n = -n;
        }
        if (n > r->len - r->pos)
            goto fb;
        for (int64_t k = 0; k < n; k++) {
            PyObject *v = node(r, item);
            if (v == NULL)
                goto fail;
            int rc = PyList_Append(list, v);
            Py_DECREF(v);
            if (rc < 0)
                goto fail;
        }
        if (varint(r, 10, &n) < 0)
            goto fb;
    }
    return list;
fb:
    PyErr_SetNone(Fallback);
fail:
    Py_DECREF(list);
    return NULL;
}

static PyObject *packed(Reader *r, PyObject *prog, int64_t n) {
    /* (OP_PACKED, dtype, itemsize): n bytes at pos as a numpy view */
    Py_ssize_t itemsize = PyLong_AsSsize_t(PyTuple_GET_ITEM(prog, 2));
    if (itemsize <= 0 || n % itemsize)
        return fallback();
    Py_ssize_t count = (Py_ssize_t)(n / itemsize);
    if (r->whole) { /* every packed field of the record holds the same count */
        if (r->pc < 0)
            r->pc = count;
        else if (count != r->pc)
            return fallback();
    }
#ifdef CREDITFLOW_NUMPY_API
    PyObject *dtype = PyTuple_GET_ITEM(prog, 1);
    if (numpy_api && PyArray_DescrCheck(dtype)) { /* what frombuffer makes, without its call */
        npy_intp dims[1] = {count};
        Py_INCREF(dtype); /* stolen by PyArray_NewFromDescr */
        PyObject *v = PyArray_NewFromDescr(&PyArray_Type, (PyArray_Descr *)dtype, 1, dims, NULL,
                                           (void *)(r->p + r->pos), 0 /* not writeable */, NULL);
        if (v == NULL)
            return NULL;
        if (PyArray_SetBaseObject((PyArrayObject *)v, Py_NewRef(r->b)) < 0) { /* steals b's reference */
            Py_DECREF(v);
            return NULL;
        }
        r->pos += (Py_ssize_t)n;
        return v;
    }
#endif
    PyObject *args[4] = {r->b, PyTuple_GET_ITEM(prog, 1), PyLong_FromSsize_t(count), PyLong_FromSsize_t(r->pos)};
    PyObject *v = NULL;
    if (args[2] != NULL && args[3] != NULL)
        v = PyObject_Vectorcall(frombuffer, args, 4, NULL);
    Py_XDECREF(args[2]);
    Py_XDECREF(args[3]);
    if (v != NULL)
        r->pos += (Py_ssize_t)n;
    return v;
}

static PyObject *node(Reader *r, PyObject *prog) {
    int64_t n;
    long op = PyLong_AsLong(PyTuple_GET_ITEM(prog, 0));
    switch (op) {
    case OP_NULL:
        Py_RETURN_NONE;
    case OP_BOOL: {
        if (r->pos >= r->len || r->p[r->pos] > 1)
            return fallback();
        return PyBool_FromLong(r->p[r->pos++]);
    }
    case OP_INT:
        if (varint(r, 5, &n) < 0 || n < INT32_MIN || n > INT32_MAX)
            return fallback();
        return PyLong_FromLongLong(n);
    case OP_LONG:
        if (varint(r, 10, &n) < 0)
            return fallback();
        return PyLong_FromLongLong(n);
    case OP_FLOAT:
    case OP_DOUBLE: {
        Py_ssize_t size = op == OP_FLOAT ? 4 : 8;
        if (r->len - r->pos < size)
            return fallback();
        const char *at = (const char *)r->p + r->pos;
        double x = op == OP_FLOAT ? PyFloat_Unpack4(at, 1) : PyFloat_Unpack8(at, 1);
        if (x == -1.0 && PyErr_Occurred())
            return NULL;
        r->pos += size;
        return PyFloat_FromDouble(x);
    }
    case OP_STRING:
    case OP_BYTES:
    case OP_PACKED: {
        if (varint(r, 10, &n) < 0 || n < 0 || n > r->len - r->pos)
            return fallback();
        if (op == OP_PACKED)
            return packed(r, prog, n);
        PyObject *v;
        if (op == OP_STRING) {
            v = PyUnicode_DecodeUTF8((const char *)r->p + r->pos, (Py_ssize_t)n, NULL);
            if (v == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    return NULL;
                PyErr_Clear();
                return fallback();
            }
        } else {
            if (r->mv == Py_None && (r->mv = PyMemoryView_FromObject(r->b)) == NULL) {
                r->mv = Py_None;
                return NULL;
            }
            v = PySequence_GetSlice(r->mv, r->pos, r->pos + (Py_ssize_t)n);
            if (v == NULL)
                return NULL;
        }
        r->pos += (Py_ssize_t)n;
        return v;
    }
    case OP_UNION: { /* ["null", T]: the branch is one byte, zigzag 0 or 1 */
        if (r->pos >= r->len)
            return fallback();
        unsigned char br = r->p[r->pos++];
        if (br == 0)
            Py_RETURN_NONE;
        if (br == 2)
            return node(r, PyTuple_GET_ITEM(prog, 1));
        return fallback();
    }
    case OP_ARRAY:
        return array(r, PyTuple_GET_ITEM(prog, 1));
    case OP_RECORD: {
        if (Py_EnterRecursiveCall(" in creditflow._cdecode"))
            return NULL;
        PyObject *v = record(r, prog);
        Py_LeaveRecursiveCall();
        return v;
    }
    }
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "creditflow._cdecode: unknown op in the program");
    return NULL;
}

/* Reads one value of program (record node, whole) at r->pos; with whole the record must end
   the input and its packed fields hold one count. A memoryview made for plain bytes fields
   (r->mv None) is released here. */
static PyObject *run(Reader *r, PyObject *program) {
    PyObject *mv = r->mv;
    r->pc = -1;
    r->whole = PyObject_IsTrue(PyTuple_GET_ITEM(program, 1));
    PyObject *v = node(r, PyTuple_GET_ITEM(program, 0));
    if (r->mv != mv)
        Py_DECREF(r->mv);
    if (v != NULL && r->whole && r->pos != r->len) {
        Py_DECREF(v);
        return fallback();
    }
    return v;
}

/* decode(program, b, mv, pos) -> (value, end) */
static PyObject *decode(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4 || !PyTuple_Check(args[0]) || PyTuple_GET_SIZE(args[0]) != 2 || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "decode(program, b: bytes, mv, pos)");
        return NULL;
    }
    Reader r;
    r.b = args[1];
    r.mv = args[2];
    r.p = (const unsigned char *)PyBytes_AS_STRING(args[1]);
    r.len = PyBytes_GET_SIZE(args[1]);
    r.pos = PyLong_AsSsize_t(args[3]);
    if (r.pos == -1 && PyErr_Occurred())
        return NULL;
    if (r.pos < 0 || r.pos > r.len)
        return fallback();
    PyObject *v = run(&r, args[0]);
    return v == NULL ? NULL : Py_BuildValue("(Nn)", v, r.pos);
}

/* decode_framed(table, value): a whole framed record (the magic c3 01, the writer's 8-byte
   fingerprint, its body, nothing after) as a dict, where table is a tuple of (fingerprint,
   whole program) pairs; None for another header or fingerprint (the caller's checking path
   decides). The trainer's path: one call a sample (wire.decode_sample). */
static PyObject *decode_framed(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyTuple_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "decode_framed(table: tuple, value: bytes)");
        return NULL;
    }
    const char *p = PyBytes_AS_STRING(args[1]);
    Py_ssize_t len = PyBytes_GET_SIZE(args[1]);
    if (len < 10 || (unsigned char)p[0] != 0xc3 || p[1] != 0x01)
        Py_RETURN_NONE;
    PyObject *table = args[0];
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(table); i++) {
        PyObject *e = PyTuple_GET_ITEM(table, i), *fp = PyTuple_GET_ITEM(e, 0);
        if (PyBytes_GET_SIZE(fp) != 8 || memcmp(PyBytes_AS_STRING(fp), p + 2, 8) != 0)
            continue;
        Reader r = {(const unsigned char *)p, len, 10, args[1], Py_None, -1, 0};
        return run(&r, PyTuple_GET_ITEM(e, 1));
    }
    Py_RETURN_NONE;
}

/* init(Fallback, frombuffer[, numpy_api=True]) -> whether the views are made with numpy's C
   API (numpy_api=False: with frombuffer, as without numpy's headers; the tests check both) */
static PyObject *init(PyObject *self, PyObject *args) {
    PyObject *fb, *fn;
    int want = 1;
    if (!PyArg_ParseTuple(args, "OO|p", &fb, &fn, &want))
        return NULL;
    Py_XSETREF(Fallback, Py_NewRef(fb));
    Py_XSETREF(frombuffer, Py_NewRef(fn));
#ifdef CREDITFLOW_NUMPY_API
    /* numpy's C API; where it cannot be had (a numpy older than the headers built against),
       frombuffer makes the views: slower, the same arrays */
    numpy_api = 0;
    if (want) {
        if (_import_array() < 0)
            PyErr_Clear();
        else
            numpy_api = 1;
    }
#endif
    return PyBool_FromLong(numpy_api);
}

static PyMethodDef methods[] = {
    {"decode", (PyCFunction)(void (*)(void))decode, METH_FASTCALL,
     "decode(program, b, mv, pos) -> (value, end); raises the Fallback exception where the checking decoder must decide"},
    {"decode_framed", (PyCFunction)(void (*)(void))decode_framed, METH_FASTCALL,
     "decode_framed(table, value) -> dict, or None for another header or writer"},
    {"init", init, METH_VARARGS, "init(Fallback, frombuffer[, numpy_api]) -> whether numpy's C API makes the views"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_cdecode", NULL, -1, methods};

PyMODINIT_FUNC PyInit__cdecode(void) { return PyModule_Create(&module); }
