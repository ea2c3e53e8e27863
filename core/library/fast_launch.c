/* abebot_fast_launch: one CUDA kernel launch per Python call, arguments packed once.
 *
 * Built at first use by core/library/fast_launch.py (the system C compiler, Python's headers; no CUDA
 * headers: the driver's cuLaunchKernel is resolved with dlopen/dlsym and called through a pointer).
 *
 * A Launch holds a kernel's CUfunction, grid, block, dynamic shared memory and its packed argument
 * buffer (each argument at an 8-byte aligned offset, params[i] pointing at it), and the "slots":
 * which arguments the i-th source of a call sets. Calling it
 *
 *     launch()                 launches with the arguments as they are;
 *     launch(s0, s1, ...)      one source per slot (an int address, or an object with data_ptr(),
 *                              optionally checked for its dtype and get_device()), written into
 *                              every argument of its slot, then launches;
 *
 * on the stream that stream(device) returns (None: the legacy default stream). A failed launch
 * raises RuntimeError with the driver's error code; a wrong source count, dtype or device raises the
 * class given to set_argument_error (TypeError until then) before anything is launched.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>

typedef int (*cu_launch_t)(void *, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           void *, void **, void **);

#define MAX_ARGS 64
#define NO_CHECK LONG_MIN

static PyObject *argument_error = NULL; /* set_argument_error(); TypeError until then */
static PyObject *s_data_ptr, *s_dtype, *s_get_device;

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dict;
    cu_launch_t launch;
    unsigned long long launcher, function;
    unsigned grid[3], block[3], shared;
    Py_ssize_t nargs, size;
    unsigned char *buffer;
    Py_ssize_t offsets[MAX_ARGS], sizes[MAX_ARGS];
    void *params[MAX_ARGS];
    Py_ssize_t nslots;
    Py_ssize_t slot_count[MAX_ARGS];          /* arguments set by source i */
    Py_ssize_t slot_args[MAX_ARGS][MAX_ARGS]; /* their indices */
    PyObject *dtypes[MAX_ARGS];               /* expected dtype of source i, or NULL */
    long devices[MAX_ARGS];                   /* expected get_device() of source i, or NO_CHECK */
    PyObject *names;                          /* the sources' names (a tuple) for messages, or None */
    PyObject *stream, *device;
} Launch;

static PyObject *err_class(void) { return argument_error ? argument_error : PyExc_TypeError; }

static PyObject *source_name(Launch *self, Py_ssize_t i) {
    if (PyTuple_Check(self->names) && i < PyTuple_GET_SIZE(self->names))
        return PyObject_Str(PyTuple_GET_ITEM(self->names, i));
    return PyUnicode_FromFormat("%zd", i);
}

static int argument_problem(Launch *self, Py_ssize_t i, const char *what, PyObject *got, PyObject *wanted) {
    PyObject *name = source_name(self, i);
    if (name == NULL) return -1;
    PyErr_Format(err_class(), "launch source %U has %s %R, expected %R", name, what, got, wanted);
    Py_DECREF(name);
    return -1;
}

static int not_a_tensor(Launch *self, Py_ssize_t i, PyObject *src) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return -1;
    PyErr_Clear();
    PyObject *name = source_name(self, i);
    if (name != NULL) {
        PyErr_Format(err_class(), "launch source %U is a %s, not a tensor or an address", name, Py_TYPE(src)->tp_name);
        Py_DECREF(name);
    }
    return -1;
}

static int address_of(Launch *self, Py_ssize_t i, PyObject *src, unsigned long long *out) {
    if (PyLong_CheckExact(src)) {
        *out = PyLong_AsUnsignedLongLong(src);
        return (*out == (unsigned long long)-1 && PyErr_Occurred()) ? -1 : 0;
    }
    if (self->dtypes[i] != NULL) {
        PyObject *dt = PyObject_GetAttr(src, s_dtype);
        if (dt == NULL) return not_a_tensor(self, i, src);
        int same = dt == self->dtypes[i];
        int rc = same ? 0 : argument_problem(self, i, "dtype", dt, self->dtypes[i]);
        Py_DECREF(dt);
        if (rc < 0) return -1;
    }
    if (self->devices[i] != NO_CHECK) {
        PyObject *dev = PyObject_CallMethodNoArgs(src, s_get_device);
        if (dev == NULL) return not_a_tensor(self, i, src);
        long d = PyLong_AsLong(dev);
        if (d == -1 && PyErr_Occurred()) { Py_DECREF(dev); return -1; }
        int rc = 0;
        if (d != self->devices[i]) {
            PyObject *wanted = PyLong_FromLong(self->devices[i]);
            rc = wanted ? argument_problem(self, i, "device index", dev, wanted) : -1;
            Py_XDECREF(wanted);
        }
        Py_DECREF(dev);
        if (rc < 0) return -1;
    }
    PyObject *p = PyObject_CallMethodNoArgs(src, s_data_ptr);
    if (p == NULL) return not_a_tensor(self, i, src);
    *out = PyLong_AsUnsignedLongLong(p);
    Py_DECREF(p);
    return (*out == (unsigned long long)-1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *fire(Launch *self) {
    void *stream = NULL;
    if (self->stream != Py_None) {
        PyObject *s = PyObject_CallOneArg(self->stream, self->device);
        if (s == NULL) return NULL;
        stream = PyLong_AsVoidPtr(s);
        Py_DECREF(s);
        if (stream == NULL && PyErr_Occurred()) return NULL;
    }
    int rc = self->launch((void *)(uintptr_t)self->function, self->grid[0], self->grid[1], self->grid[2],
                          self->block[0], self->block[1], self->block[2], self->shared, stream, self->params, NULL);
    if (rc != 0) return PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed with CUDA error %d", rc);
    Py_RETURN_NONE;
}

static PyObject *Launch_vectorcall(PyObject *op, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Launch *self = (Launch *)op;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {
        PyErr_SetString(err_class(), "a launch takes no keyword arguments");
        return NULL;
    }
    if (n != 0 && n != self->nslots) {
        PyErr_Format(err_class(), "this launch takes %zd sources %R (or none), got %zd", self->nslots, self->names, n);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long address;
        if (address_of(self, i, args[i], &address) < 0) return NULL;
        for (Py_ssize_t j = 0; j < self->slot_count[i]; j++)
            memcpy(self->params[self->slot_args[i][j]], &address, sizeof address);
    }
    return fire(self);
}

static int pointer_argument(Launch *self, Py_ssize_t index) {
    if (index < 0 || index >= self->nargs || self->sizes[index] != 8) {
        PyErr_Format(PyExc_IndexError, "argument %zd is not an 8-byte argument of this launch", index);
        return -1;
    }
    return 0;
}

static int parse_triple(PyObject *seq, unsigned out[3], const char *what) {
    PyObject *fast = PySequence_Fast(seq, what);
    if (fast == NULL) return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(fast) != 3) {
        PyErr_Format(PyExc_ValueError, "%s must have 3 values", what);
        rc = -1;
    }
    for (int i = 0; rc == 0 && i < 3; i++) {
        unsigned long v = PyLong_AsUnsignedLong(PySequence_Fast_GET_ITEM(fast, i));
        if (PyErr_Occurred() || v > UINT_MAX) {
            if (!PyErr_Occurred()) PyErr_Format(PyExc_OverflowError, "%s value too large", what);
            rc = -1;
        }
        out[i] = (unsigned)v;
    }
    Py_DECREF(fast);
    return rc;
}

static int parse_params(Launch *self, PyObject *params) {
    PyObject *fast = PySequence_Fast(params, "params must be a sequence of bytes");
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), size = 0;
    if (n > MAX_ARGS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "at most %d kernel arguments", MAX_ARGS);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_Fast_GET_ITEM(fast, i);
        if (!PyBytes_Check(b) || PyBytes_GET_SIZE(b) == 0) {
            Py_DECREF(fast);
            PyErr_SetString(PyExc_TypeError, "each kernel argument must be non-empty bytes");
            return -1;
        }
        self->offsets[i] = size;
        self->sizes[i] = PyBytes_GET_SIZE(b);
        size += (self->sizes[i] + 15) & ~(Py_ssize_t)15; /* 16-byte aligned: any scalar or vector type */
    }
    self->buffer = PyMem_Calloc(size ? size : 16, 1);
    if (self->buffer == NULL) { Py_DECREF(fast); PyErr_NoMemory(); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        memcpy(self->buffer + self->offsets[i], PyBytes_AS_STRING(PySequence_Fast_GET_ITEM(fast, i)), self->sizes[i]);
        self->params[i] = self->buffer + self->offsets[i];
    }
    self->nargs = n;
    self->size = size;
    Py_DECREF(fast);
    return 0;
}

static int parse_slots(Launch *self, PyObject *slots, PyObject *dtypes, PyObject *devices) {
    PyObject *fast = PySequence_Fast(slots, "slots must be a sequence of sequences of argument indices");
    if (fast == NULL) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > MAX_ARGS) { Py_DECREF(fast); PyErr_SetString(PyExc_ValueError, "too many slots"); return -1; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *one = PySequence_Fast(PySequence_Fast_GET_ITEM(fast, i), "a slot must be a sequence of indices");
        if (one == NULL) { Py_DECREF(fast); return -1; }
        Py_ssize_t m = PySequence_Fast_GET_SIZE(one);
        for (Py_ssize_t j = 0; j < m && j < MAX_ARGS; j++) {
            Py_ssize_t a = PyLong_AsSsize_t(PySequence_Fast_GET_ITEM(one, j));
            if ((a == -1 && PyErr_Occurred()) || pointer_argument(self, a) < 0) { Py_DECREF(one); Py_DECREF(fast); return -1; }
            self->slot_args[i][j] = a;
        }
        self->slot_count[i] = m < MAX_ARGS ? m : MAX_ARGS;
        Py_DECREF(one);
        self->devices[i] = NO_CHECK;
        if (dtypes != Py_None) {
            PyObject *dt = PySequence_GetItem(dtypes, i);
            if (dt == NULL) { Py_DECREF(fast); return -1; }
            if (dt == Py_None) Py_DECREF(dt); else self->dtypes[i] = dt; /* reference kept */
        }
        if (devices != Py_None) {
            PyObject *d = PySequence_GetItem(devices, i);
            if (d == NULL) { Py_DECREF(fast); return -1; }
            if (d != Py_None) self->devices[i] = PyLong_AsLong(d);
            Py_DECREF(d);
            if (PyErr_Occurred()) { Py_DECREF(fast); return -1; }
        }
    }
    self->nslots = n;
    Py_DECREF(fast);
    return 0;
}

static PyObject *Launch_new(PyTypeObject *type, PyObject *args, PyObject *kw) {
    static char *names[] = {"launcher", "function", "grid", "block", "shared", "params", "slots", "names", "dtypes",
                            "devices", "stream", "device", NULL};
    unsigned long long launcher, function;
    unsigned int shared;
    PyObject *grid, *block, *params, *slots = NULL, *snames = Py_None, *dtypes = Py_None, *devices = Py_None;
    PyObject *stream = Py_None, *device = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "KKOOIO|OOOOOO:Launch", names, &launcher, &function, &grid, &block,
                                     &shared, &params, &slots, &snames, &dtypes, &devices, &stream, &device))
        return NULL;
    if (launcher == 0) { PyErr_SetString(PyExc_ValueError, "launcher is a NULL address"); return NULL; }
    Launch *self = (Launch *)type->tp_alloc(type, 0);
    if (self == NULL) return NULL;
    self->vectorcall = Launch_vectorcall;
    self->launcher = launcher;
    self->launch = (cu_launch_t)(uintptr_t)launcher;
    self->function = function;
    self->shared = shared;
    Py_INCREF(snames); self->names = snames;
    Py_INCREF(stream); self->stream = stream;
    self->device = device ? device : PyLong_FromLong(0);
    if (device) Py_INCREF(device);
    if (self->device == NULL || parse_triple(grid, self->grid, "grid") < 0 ||
        parse_triple(block, self->block, "block") < 0 || parse_params(self, params) < 0 ||
        (slots != NULL && parse_slots(self, slots, dtypes, devices) < 0)) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int Launch_traverse(Launch *self, visitproc visit, void *arg) {
    Py_VISIT(self->dict); Py_VISIT(self->names); Py_VISIT(self->stream); Py_VISIT(self->device);
    for (Py_ssize_t i = 0; i < MAX_ARGS; i++) Py_VISIT(self->dtypes[i]);
    return 0;
}

static int Launch_clear(Launch *self) {
    Py_CLEAR(self->dict); Py_CLEAR(self->names); Py_CLEAR(self->stream); Py_CLEAR(self->device);
    for (Py_ssize_t i = 0; i < MAX_ARGS; i++) Py_CLEAR(self->dtypes[i]);
    return 0;
}

static void Launch_dealloc(Launch *self) {
    PyObject_GC_UnTrack(self);
    Launch_clear(self);
    PyMem_Free(self->buffer);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Launch_set_pointer(Launch *self, PyObject *const *args, Py_ssize_t n) {
    if (n != 2) { PyErr_SetString(PyExc_TypeError, "set_pointer(index, address)"); return NULL; }
    Py_ssize_t index = PyLong_AsSsize_t(args[0]);
    if ((index == -1 && PyErr_Occurred()) || pointer_argument(self, index) < 0) return NULL;
    unsigned long long address = PyLong_AsUnsignedLongLong(args[1]);
    if (address == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    memcpy(self->params[index], &address, sizeof address);
    Py_RETURN_NONE;
}

static PyObject *Launch_update(Launch *self, PyObject *const *args, Py_ssize_t n) {
    if (n != 2) { PyErr_SetString(PyExc_TypeError, "update(indices, addresses)"); return NULL; }
    PyObject *idx = PySequence_Fast(args[0], "indices"), *adr = idx ? PySequence_Fast(args[1], "addresses") : NULL;
    PyObject *result = NULL;
    if (adr == NULL) goto done;
    Py_ssize_t m = PySequence_Fast_GET_SIZE(idx);
    if (PySequence_Fast_GET_SIZE(adr) < m) m = PySequence_Fast_GET_SIZE(adr);
    for (Py_ssize_t i = 0; i < m; i++) {
        PyObject *pair[2] = {PySequence_Fast_GET_ITEM(idx, i), PySequence_Fast_GET_ITEM(adr, i)};
        PyObject *r = Launch_set_pointer(self, pair, 2);
        if (r == NULL) goto done;
        Py_DECREF(r);
    }
    result = Py_None;
    Py_INCREF(result);
done:
    Py_XDECREF(idx);
    Py_XDECREF(adr);
    return result;
}

static PyObject *Launch_values(Launch *self, PyObject *unused) {
    PyObject *out = PyTuple_New(self->nargs);
    for (Py_ssize_t i = 0; out && i < self->nargs; i++) {
        PyObject *b = PyBytes_FromStringAndSize((const char *)self->params[i], self->sizes[i]);
        if (b == NULL) { Py_CLEAR(out); break; }
        PyTuple_SET_ITEM(out, i, b);
    }
    return out;
}

static PyObject *Launch_get_grid(Launch *self, void *c) { return Py_BuildValue("(III)", self->grid[0], self->grid[1], self->grid[2]); }
static PyObject *Launch_get_block(Launch *self, void *c) { return Py_BuildValue("(III)", self->block[0], self->block[1], self->block[2]); }

static PyMethodDef Launch_methods[] = {
    {"set_pointer", (PyCFunction)(void (*)(void))Launch_set_pointer, METH_FASTCALL, "Write an address into 8-byte argument index."},
    {"update", (PyCFunction)(void (*)(void))Launch_update, METH_FASTCALL, "set_pointer for each (index, address) pair."},
    {"values", (PyCFunction)Launch_values, METH_NOARGS, "The arguments' current bytes, a tuple."},
    {NULL}};

static PyMemberDef Launch_members[] = {
    {"launcher", T_ULONGLONG, offsetof(Launch, launcher), READONLY, "the cuLaunchKernel address"},
    {"function", T_ULONGLONG, offsetof(Launch, function), READONLY, "the CUfunction"},
    {"shared", T_UINT, offsetof(Launch, shared), READONLY, "dynamic shared memory bytes"},
    {"names", T_OBJECT, offsetof(Launch, names), READONLY, "the sources' names"},
    {"stream", T_OBJECT, offsetof(Launch, stream), READONLY, "stream(device) -> raw stream"},
    {"device", T_OBJECT, offsetof(Launch, device), READONLY, "the device index given to stream"},
    {"nslots", T_PYSSIZET, offsetof(Launch, nslots), READONLY, "sources a call takes"},
    {NULL}};

static PyGetSetDef Launch_getset[] = {
    {"grid", (getter)Launch_get_grid, NULL, "the grid", NULL},
    {"block", (getter)Launch_get_block, NULL, "the block", NULL},
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL}};

static PyTypeObject LaunchType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "abebot_fast_launch.Launch",
    .tp_basicsize = sizeof(Launch),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "A kernel launch with its arguments packed once (see the module source).",
    .tp_new = Launch_new,
    .tp_dealloc = (destructor)Launch_dealloc,
    .tp_traverse = (traverseproc)Launch_traverse,
    .tp_clear = (inquiry)Launch_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Launch, vectorcall),
    .tp_dictoffset = offsetof(Launch, dict),
    .tp_methods = Launch_methods,
    .tp_members = Launch_members,
    .tp_getset = Launch_getset,
};

static PyObject *resolve(PyObject *m, PyObject *args) {
    const char *path, *symbol;
    if (!PyArg_ParseTuple(args, "ss:resolve", &path, &symbol)) return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) return PyErr_Format(PyExc_OSError, "dlopen %s: %s", path, dlerror());
    void *fn = dlsym(lib, symbol); /* the library stays open: the address must stay valid */
    if (fn == NULL) return PyErr_Format(PyExc_OSError, "dlsym %s in %s: %s", symbol, path, dlerror());
    return PyLong_FromUnsignedLongLong((unsigned long long)(uintptr_t)fn);
}

static PyObject *set_argument_error(PyObject *m, PyObject *cls) {
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, (PyTypeObject *)PyExc_Exception)) {
        PyErr_SetString(PyExc_TypeError, "an exception class is needed");
        return NULL;
    }
    Py_INCREF(cls);
    Py_XSETREF(argument_error, cls);
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"resolve", resolve, METH_VARARGS, "resolve(path, symbol) -> the symbol's address (dlopen, dlsym)."},
    {"set_argument_error", set_argument_error, METH_O, "The class raised for a wrong source count, dtype or device."},
    {NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "abebot_fast_launch", NULL, -1, module_methods};

PyMODINIT_FUNC PyInit_abebot_fast_launch(void) {
    s_data_ptr = PyUnicode_InternFromString("data_ptr");
    s_dtype = PyUnicode_InternFromString("dtype");
    s_get_device = PyUnicode_InternFromString("get_device");
    if (!s_data_ptr || !s_dtype || !s_get_device || PyType_Ready(&LaunchType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL) return NULL;
    Py_INCREF(&LaunchType);
    if (PyModule_AddObject(m, "Launch", (PyObject *)&LaunchType) < 0) { Py_DECREF(&LaunchType); Py_DECREF(m); return NULL; }
    return m;
}
