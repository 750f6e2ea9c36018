/* softrdma.wire._bitfields: the compiled codec behind smp.Layout.
 *
 * An IBA attribute is a row of big-endian bit fields (MSB-first offsets).
 * Layout.decode / encode_into in Python turn the attribute into one big
 * integer and shift each field in or out with dictionary look-ups per field;
 * for PortInfo (50 fields) that is ~10 us, and a subnet manager's sweep
 * decodes or encodes one per SMP.  Codec(size, rows, names) precomputes the
 * fields once and does the same in C:
 *
 *   decode(buf, offset) -> dict name -> int, in field order (as Layout.decode)
 *   encode_into(buf, offset, mapping) -> number of fields written: every
 *       field the mapping names is written, the others keep the buffer's bits.
 *
 * Only fields of 1..64 bits are handled (Layout keeps its Python path for a
 * layout with a wider field).  encode_into checks everything before writing
 * anything and raises (KeyError for a name the layout lacks, TypeError for a
 * value that is not an int, OverflowError for one that does not fit), so the
 * caller can re-run its reference path to report the error in its own words
 * with the buffer untouched.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint32_t off;        /* bit offset, MSB first */
    uint32_t width;      /* 1..64 */
    uint32_t first;      /* first byte */
    uint32_t nbytes;     /* bytes the field touches (1..9) */
    uint32_t trailing;   /* bits after the field in its last byte */
    uint64_t mask;
} field_t;

typedef struct {
    PyObject_HEAD
    Py_ssize_t size;
    Py_ssize_t n;
    field_t *f;
    PyObject *names;     /* tuple of str, field order */
} Codec;

static uint64_t get_field(const uint8_t *b, const field_t *f)
{
    unsigned __int128 acc = 0;
    for (uint32_t i = 0; i < f->nbytes; i++)
        acc = (acc << 8) | b[f->first + i];
    return (uint64_t)(acc >> f->trailing) & f->mask;
}

static void put_field(uint8_t *b, const field_t *f, uint64_t v)
{
    unsigned __int128 acc = 0;
    for (uint32_t i = 0; i < f->nbytes; i++)
        acc = (acc << 8) | b[f->first + i];
    unsigned __int128 m = (unsigned __int128)f->mask << f->trailing;
    acc = (acc & ~m) | ((unsigned __int128)v << f->trailing);
    for (int i = (int)f->nbytes - 1; i >= 0; i--) {
        b[f->first + i] = (uint8_t)acc;
        acc >>= 8;
    }
}

static void Codec_dealloc(Codec *self)
{
    PyMem_Free(self->f);
    Py_XDECREF(self->names);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Codec_init(Codec *self, PyObject *args, PyObject *kw)
{
    Py_ssize_t size;
    PyObject *rows, *names;
    if (!PyArg_ParseTuple(args, "nOO!", &size, &rows, &PyTuple_Type, &names))
        return -1;
    PyObject *fast = PySequence_Fast(rows, "Codec: rows is a sequence of (offset, width)");
    if (fast == NULL)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n != PyTuple_GET_SIZE(names) || size <= 0) {
        Py_DECREF(fast);
        PyErr_SetString(PyExc_ValueError, "Codec: one name per row, size > 0");
        return -1;
    }
    field_t *f = PyMem_Calloc((size_t)(n ? n : 1), sizeof(field_t));
    if (f == NULL) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long off, width;
        if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "kk", &off, &width))
            goto bad;
        if (width < 1 || width > 64 || off + width > (unsigned long)size * 8) {
            PyErr_SetString(PyExc_ValueError, "Codec: a field of 1..64 bits inside the attribute");
            goto bad;
        }
        f[i].off = (uint32_t)off;
        f[i].width = (uint32_t)width;
        f[i].first = (uint32_t)(off >> 3);
        uint32_t last = (uint32_t)((off + width - 1) >> 3);
        f[i].nbytes = last - f[i].first + 1;
        f[i].trailing = (last + 1) * 8 - (uint32_t)(off + width);
        f[i].mask = width == 64 ? UINT64_MAX : (((uint64_t)1 << width) - 1);
    }
    Py_DECREF(fast);
    PyMem_Free(self->f);
    Py_XDECREF(self->names);
    self->f = f;
    self->n = n;
    self->size = size;
    Py_INCREF(names);
    self->names = names;
    return 0;
bad:
    Py_DECREF(fast);
    PyMem_Free(f);
    return -1;
}

/* the attribute's bytes at offset: a read-only or writable view of size bytes */
static int get_view(Codec *self, PyObject *buf, Py_ssize_t offset, Py_buffer *view, int writable)
{
    if (PyObject_GetBuffer(buf, view, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0)
        return -1;
    if (offset < 0 || view->len - offset < self->size) {
        PyBuffer_Release(view);
        PyErr_SetString(PyExc_ValueError, "Codec: buffer too short");
        return -1;
    }
    return 0;
}

static PyObject *Codec_decode(Codec *self, PyObject *args)
{
    PyObject *buf;
    Py_ssize_t offset = 0;
    if (!PyArg_ParseTuple(args, "O|n", &buf, &offset))
        return NULL;
    Py_buffer view;
    if (get_view(self, buf, offset, &view, 0) < 0)
        return NULL;
    const uint8_t *b = (const uint8_t *)view.buf + offset;
    PyObject *d = PyDict_New();
    if (d == NULL)
        goto out;
    for (Py_ssize_t i = 0; i < self->n; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(get_field(b, &self->f[i]));
        if (v == NULL || PyDict_SetItem(d, PyTuple_GET_ITEM(self->names, i), v) < 0) {
            Py_XDECREF(v);
            Py_CLEAR(d);
            goto out;
        }
        Py_DECREF(v);
    }
out:
    PyBuffer_Release(&view);
    return d;
}

static PyObject *Codec_encode_into(Codec *self, PyObject *args)
{
    PyObject *buf, *mapping;
    Py_ssize_t offset;
    if (!PyArg_ParseTuple(args, "OnO!", &buf, &offset, &PyDict_Type, &mapping))
        return NULL;
    Py_ssize_t want = PyDict_GET_SIZE(mapping), found = 0;
    uint64_t stackv[128];
    uint8_t stackhave[128];
    uint64_t *vals = stackv;
    uint8_t *have = stackhave;
    if (self->n > 128) {
        vals = PyMem_Malloc((size_t)self->n * sizeof(uint64_t));
        have = PyMem_Malloc((size_t)self->n);
        if (vals == NULL || have == NULL) {
            PyMem_Free(vals == stackv ? NULL : vals);
            PyMem_Free(have == stackhave ? NULL : have);
            return PyErr_NoMemory();
        }
    }
    PyObject *result = NULL;
    /* check every value first: nothing is written unless all of them fit */
    for (Py_ssize_t i = 0; i < self->n && found < want; i++) {
        PyObject *v = PyDict_GetItemWithError(mapping, PyTuple_GET_ITEM(self->names, i));
        have[i] = 0;
        if (v == NULL) {
            if (PyErr_Occurred())
                goto out;
            continue;
        }
        if (!PyLong_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "Codec: not an int");
            goto out;
        }
        unsigned long long x = PyLong_AsUnsignedLongLong(v);
        if (x == (unsigned long long)-1 && PyErr_Occurred())
            goto out;
        if (x & ~self->f[i].mask) {
            PyErr_SetString(PyExc_OverflowError, "Codec: value does not fit its field");
            goto out;
        }
        vals[i] = x;
        have[i] = 1;
        found++;
    }
    if (found != want) {
        PyErr_SetString(PyExc_KeyError, "Codec: a name the layout lacks");
        goto out;
    }
    Py_buffer view;
    if (get_view(self, buf, offset, &view, 1) < 0)
        goto out;
    uint8_t *b = (uint8_t *)view.buf + offset;
    Py_ssize_t done = 0;
    for (Py_ssize_t i = 0; i < self->n && done < found; i++)
        if (have[i]) {
            put_field(b, &self->f[i], vals[i]);
            done++;
        }
    PyBuffer_Release(&view);
    result = PyLong_FromSsize_t(found);
out:
    if (vals != stackv)
        PyMem_Free(vals);
    if (have != stackhave)
        PyMem_Free(have);
    return result;
}

static PyMethodDef Codec_methods[] = {
    {"decode", (PyCFunction)Codec_decode, METH_VARARGS,
     "decode(buf, offset=0) -> {name: int} in field order"},
    {"encode_into", (PyCFunction)Codec_encode_into, METH_VARARGS,
     "encode_into(buf, offset, dict) -> fields written; raises before writing on a bad value"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CodecType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "softrdma.wire._bitfields.Codec",
    .tp_basicsize = sizeof(Codec),
    .tp_dealloc = (destructor)Codec_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Codec(size, [(offset, width), ...], (name, ...)): big-endian bit fields",
    .tp_methods = Codec_methods,
    .tp_init = (initproc)Codec_init,
    .tp_new = PyType_GenericNew,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "softrdma.wire._bitfields",
    "The compiled codec behind smp.Layout (big-endian bit fields of 1..64 bits).", -1, NULL,
};

PyMODINIT_FUNC PyInit__bitfields(void)
{
    if (PyType_Ready(&CodecType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&CodecType);
    if (PyModule_AddObject(m, "Codec", (PyObject *)&CodecType) < 0) {
        Py_DECREF(&CodecType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
