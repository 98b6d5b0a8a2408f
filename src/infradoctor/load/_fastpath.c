/*
 * infradoctor.load._fastpath: the closed loop's plainest response, taken without running Python.
 *
 * A Reader's bound method ``feed`` stands in for a connection's ``data_received``. When the bytes the event loop
 * hands it are exactly one complete ``HTTP/1.1 200`` response framed by Content-Length, with keep-alive and none
 * of the captured headers, and the connection's sink still takes responses (before ``until``, within the request
 * budget ``left``), it appends the latency (now - conn.t_intended) to the sink's buffer, sets the connection's
 * issue and send times to now and writes the next request: what infradoctor.load.client.fast_completion does in
 * Python, without the parser callbacks and bytecode. Everything else goes to the connection's Python
 * ``data_received`` (``general``): other statuses, close, captured headers, partial or several responses in one
 * read, chunked bodies, anything unusual in the syntax. A read that is not exactly one complete response turns the
 * reader off for the rest of the connection (the Python parser may then hold part of a message, and only it knows
 * where the next one starts), so this parser only ever sees reads that start at a message boundary.
 *
 * The parser is strict on purpose: what it does not accept, httptools judges.
 *
 * Times come from clock_gettime(CLOCK_MONOTONIC), which is time.perf_counter() on Linux, or from a Python clock
 * when one is given (tests inject one; on other platforms the client always passes time.perf_counter).
 *
 * Memory safety: feed() calls Python (attribute reads and writes on the connection, the clock, transport.write,
 * the general path), and any of those may run code that re-initialises the reader, deletes reader.write or drops
 * the connection. So feed() holds strong references to everything it uses for the whole call (Held), and every
 * object member is set through code that owns a reference (no T_OBJECT members).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>
#include <time.h>

#if PY_VERSION_HEX >= 0x030C0000
#define MEMBER_DOUBLE Py_T_DOUBLE
#define MEMBER_LONGLONG Py_T_LONGLONG
#define MEMBER_ULONGLONG Py_T_ULONGLONG
#define MEMBER_BOOL Py_T_BOOL
#define MEMBER_READONLY Py_READONLY
#else
#include <structmember.h>
#define MEMBER_DOUBLE T_DOUBLE
#define MEMBER_LONGLONG T_LONGLONG
#define MEMBER_ULONGLONG T_ULONGLONG
#define MEMBER_BOOL T_BOOL
#define MEMBER_READONLY READONLY
#endif

static PyObject *array_type = NULL;       /* array.array */
static PyObject *str_busy = NULL;         /* interned attribute names */
static PyObject *str_t_intended = NULL;
static PyObject *str_t_send = NULL;

/* ------------------------------------------------------------------------------------------------------ Sink */

typedef struct {
    PyObject_HEAD
    double until;
    double last;
    long long left;
    char counted; /* T_BOOL members are C chars */
    double *buf;
    Py_ssize_t len;
    Py_ssize_t cap;
} SinkObject;

static int
sink_push(SinkObject *s, double value)
{
    if (s->len == s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 4096;
        double *grown = PyMem_Realloc(s->buf, (size_t)cap * sizeof(double));
        if (grown == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->buf = grown;
        s->cap = cap;
    }
    s->buf[s->len++] = value;
    return 0;
}

static int
sink_init(SinkObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"counted", NULL};
    int counted = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p:Sink", kwlist, &counted)) {
        return -1;
    }
    self->counted = (char)counted;
    self->until = -Py_HUGE_VAL;
    self->last = 0.0;
    self->left = 0;
    self->len = 0;
    return 0;
}

static void
sink_dealloc(SinkObject *self)
{
    PyMem_Free(self->buf);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
sink_append(SinkObject *self, PyObject *value)
{
    double v = PyFloat_AsDouble(value);
    if (v == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (sink_push(self, v) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
sink_take(SinkObject *self, PyObject *Py_UNUSED(ignored))
{
    static const char empty[1] = "";
    PyObject *out = PyObject_CallFunction(array_type, "sy#", "d", self->len ? (const char *)self->buf : empty,
                                          (Py_ssize_t)(self->len * (Py_ssize_t)sizeof(double)));
    if (out == NULL) {
        return NULL;
    }
    self->len = 0;
    return out;
}

static Py_ssize_t
sink_length(SinkObject *self)
{
    return self->len;
}

static PyMethodDef sink_methods[] = {
    {"append", (PyCFunction)sink_append, METH_O, "Buffer one latency (seconds)."},
    {"take", (PyCFunction)sink_take, METH_NOARGS, "The buffered latencies, in order, as array('d'); empties the buffer."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef sink_members[] = {
    {"until", MEMBER_DOUBLE, offsetof(SinkObject, until), 0, "Responses completing before this time may be buffered."},
    {"last", MEMBER_DOUBLE, offsetof(SinkObject, last), 0, "Completion time of the last buffered response."},
    {"left", MEMBER_LONGLONG, offsetof(SinkObject, left), 0, "Requests that may still be issued (when counted)."},
    {"counted", MEMBER_BOOL, offsetof(SinkObject, counted), MEMBER_READONLY, "The run is bounded by a request count."},
    {NULL, 0, 0, 0, NULL},
};

static PySequenceMethods sink_as_sequence = {
    .sq_length = (lenfunc)sink_length,
};

static PyTypeObject SinkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "infradoctor.load._fastpath.Sink",
    .tp_doc = "One driver's buffer of fast-path latencies, with the window and budget they are taken in.",
    .tp_basicsize = sizeof(SinkObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)sink_init,
    .tp_dealloc = (destructor)sink_dealloc,
    .tp_methods = sink_methods,
    .tp_members = sink_members,
    .tp_as_sequence = &sink_as_sequence,
};

/* ---------------------------------------------------------------------------------------------------- parser */

enum { NOT_ONE = -1, ONE_OTHER = 0, ONE_FAST = 1 };

static unsigned char tchar[256]; /* token characters of header names (RFC 9110), filled at import */

static void
fill_tchar(void)
{
    const char *extra = "!#$%&'*+-.^_`|~";
    int c;
    for (c = 0; c < 256; c++) {
        tchar[c] = (unsigned char)((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'));
    }
    for (; *extra; extra++) {
        tchar[(unsigned char)*extra] = 1;
    }
}

static int
is_field_char(unsigned char c)
{
    return c == '\t' || (c >= 0x20 && c != 0x7f);
}

static int
name_is(const char *name, Py_ssize_t len, const char *lower)
{
    Py_ssize_t i;
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c >= 'A' && c <= 'Z') {
            c = (unsigned char)(c + 32);
        }
        if (lower[i] == '\0' || (unsigned char)lower[i] != c) {
            return 0;
        }
    }
    return lower[len] == '\0';
}

static int
value_is(const char *value, Py_ssize_t len, const char *lower)
{
    return name_is(value, len, lower);
}

/*
 * ONE_FAST: `data` is exactly one complete HTTP/1.1 200 response with Content-Length framing, keep-alive and
 * none of the captured headers; ONE_OTHER: exactly one complete response that is not that (another status, close,
 * a captured header) and that httptools reads whole; NOT_ONE: anything else.
 */
static int
scan_response(const char *p, Py_ssize_t n, PyObject *capture)
{
    Py_ssize_t i, status;
    long long content_length = -1;
    int close = 0, captured = 0;
    if (n < 17 || memcmp(p, "HTTP/1.1 ", 9) != 0) {
        return NOT_ONE;
    }
    for (i = 9; i < 12; i++) {
        if (p[i] < '0' || p[i] > '9') {
            return NOT_ONE;
        }
    }
    status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
    if (status < 200 || status > 599 || status == 204 || status == 304) {
        return NOT_ONE; /* 1xx, 204 and 304 have no body whatever Content-Length says */
    }
    i = 12;
    if (p[i] == ' ') {
        for (i = 13; i < n && p[i] != '\r'; i++) {
            if (!is_field_char((unsigned char)p[i])) {
                return NOT_ONE;
            }
        }
    }
    if (i + 1 >= n || p[i] != '\r' || p[i + 1] != '\n') {
        return NOT_ONE;
    }
    i += 2;
    for (;;) {
        Py_ssize_t name_start = i, name_len, value_start, value_end;
        if (i + 1 >= n) {
            return NOT_ONE; /* the head does not end in this read */
        }
        if (p[i] == '\r') {
            if (p[i + 1] != '\n') {
                return NOT_ONE;
            }
            i += 2;
            break;
        }
        while (i < n && tchar[(unsigned char)p[i]]) {
            i++;
        }
        name_len = i - name_start;
        if (name_len == 0 || i >= n || p[i] != ':') {
            return NOT_ONE; /* no name, space before the colon, folded line, ... */
        }
        i++;
        while (i < n && (p[i] == ' ' || p[i] == '\t')) {
            i++;
        }
        value_start = i;
        while (i < n && p[i] != '\r') {
            if (!is_field_char((unsigned char)p[i])) {
                return NOT_ONE;
            }
            i++;
        }
        if (i + 1 >= n || p[i + 1] != '\n') {
            return NOT_ONE;
        }
        value_end = i;
        while (value_end > value_start && (p[value_end - 1] == ' ' || p[value_end - 1] == '\t')) {
            value_end--;
        }
        i += 2;
        if (capture != NULL && !captured) {
            Py_ssize_t k, count = PyTuple_GET_SIZE(capture);
            for (k = 0; k < count; k++) {
                if (name_is(p + name_start, name_len, PyBytes_AS_STRING(PyTuple_GET_ITEM(capture, k)))) {
                    captured = 1;
                    break;
                }
            }
        }
        if (name_is(p + name_start, name_len, "content-length")) {
            Py_ssize_t j;
            long long length = 0;
            if (content_length >= 0 || value_end == value_start || value_end - value_start > 15) {
                return NOT_ONE;
            }
            for (j = value_start; j < value_end; j++) {
                if (p[j] < '0' || p[j] > '9') {
                    return NOT_ONE;
                }
                length = length * 10 + (p[j] - '0');
            }
            content_length = length;
        }
        else if (name_is(p + name_start, name_len, "transfer-encoding")) {
            return NOT_ONE;
        }
        else if (name_is(p + name_start, name_len, "connection") ||
                 name_is(p + name_start, name_len, "proxy-connection")) { /* llhttp reads both */
            if (value_is(p + value_start, value_end - value_start, "close")) {
                close = 1;
            }
            else if (!value_is(p + value_start, value_end - value_start, "keep-alive")) {
                return NOT_ONE; /* upgrade, lists of options: left to httptools */
            }
        }
    }
    if (content_length < 0 || (long long)(n - i) != content_length) {
        return NOT_ONE;
    }
    return (status == 200 && !close && !captured) ? ONE_FAST : ONE_OTHER;
}

/* The captured header names as a new tuple of lower-case bytes without NUL (the parser compares them as C
 * strings); NULL without an exception when there are none, NULL with one on bad names. */
static PyObject *
capture_tuple(PyObject *names)
{
    PyObject *tuple;
    Py_ssize_t k;
    if (names == NULL || names == Py_None) {
        return NULL;
    }
    tuple = PySequence_Tuple(names);
    if (tuple == NULL) {
        return NULL;
    }
    for (k = 0; k < PyTuple_GET_SIZE(tuple); k++) {
        PyObject *name = PyTuple_GET_ITEM(tuple, k);
        if (!PyBytes_CheckExact(name) || (Py_ssize_t)strlen(PyBytes_AS_STRING(name)) != PyBytes_GET_SIZE(name)) {
            Py_DECREF(tuple);
            PyErr_SetString(PyExc_TypeError, "capture names must be bytes without NUL");
            return NULL;
        }
    }
    if (PyTuple_GET_SIZE(tuple) == 0) {
        Py_DECREF(tuple);
        return NULL;
    }
    return tuple;
}

/* ---------------------------------------------------------------------------------------------------- Reader */

typedef struct {
    PyObject_HEAD
    SinkObject *sink;
    PyObject *conn;
    PyObject *general;
    PyObject *request;
    PyObject *capture; /* tuple of lower-case bytes, or NULL */
    PyObject *clock;   /* NULL: CLOCK_MONOTONIC */
    PyObject *write;   /* transport.write, once connected */
    char enabled;      /* a bool member: a C char */
    unsigned long long taken;
} ReaderObject;

static int
reader_traverse(ReaderObject *self, visitproc visit, void *arg)
{
    Py_VISIT(self->sink);
    Py_VISIT(self->conn);
    Py_VISIT(self->general);
    Py_VISIT(self->request);
    Py_VISIT(self->capture);
    Py_VISIT(self->clock);
    Py_VISIT(self->write);
    return 0;
}

static int
reader_clear(ReaderObject *self)
{
    Py_CLEAR(self->sink);
    Py_CLEAR(self->conn);
    Py_CLEAR(self->general);
    Py_CLEAR(self->request);
    Py_CLEAR(self->capture);
    Py_CLEAR(self->clock);
    Py_CLEAR(self->write);
    return 0;
}

static void
reader_dealloc(ReaderObject *self)
{
    PyObject_GC_UnTrack(self);
    reader_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
reader_init(ReaderObject *self, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"sink", "conn", "general", "request", "capture", "clock", NULL};
    PyObject *sink, *conn, *general, *request, *capture = NULL, *clock = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!OOO!|OO:Reader", kwlist, &SinkType, &sink, &conn, &general,
                                     &PyBytes_Type, &request, &capture, &clock)) {
        return -1;
    }
    capture = capture_tuple(capture);
    if (capture == NULL && PyErr_Occurred()) {
        return -1;
    }
    if (!PyCallable_Check(general) || (clock != Py_None && !PyCallable_Check(clock))) {
        Py_XDECREF(capture);
        PyErr_SetString(PyExc_TypeError, "general and clock must be callable");
        return -1;
    }
    {
        /* the new references first, the old ones dropped last: a destructor that runs meanwhile (or a
           re-entrant __init__) finds the reader whole */
        PyObject *old[7] = {(PyObject *)self->sink, self->conn, self->general, self->request, self->capture,
                            self->clock, self->write};
        int k;
        self->sink = (SinkObject *)Py_NewRef(sink);
        self->conn = Py_NewRef(conn);
        self->general = Py_NewRef(general);
        self->request = Py_NewRef(request);
        self->capture = capture;
        self->clock = clock != Py_None ? Py_NewRef(clock) : NULL;
        self->write = NULL;
        for (k = 0; k < 7; k++) {
            Py_XDECREF(old[k]);
        }
    }
    self->enabled = 1;
    self->taken = 0;
    return 0;
}

/* What feed() uses, each held by a strong reference for the whole call (see the top of the file). */
typedef struct {
    SinkObject *sink;
    PyObject *conn;
    PyObject *general;
    PyObject *request;
    PyObject *capture;
    PyObject *clock;
    PyObject *write;
} Held;

static void
held_take(Held *held, ReaderObject *self)
{
    held->sink = self->sink;
    held->conn = self->conn;
    held->general = self->general;
    held->request = self->request;
    held->capture = self->capture;
    held->clock = self->clock;
    held->write = self->write;
    Py_XINCREF(held->sink);
    Py_XINCREF(held->conn);
    Py_XINCREF(held->general);
    Py_XINCREF(held->request);
    Py_XINCREF(held->capture);
    Py_XINCREF(held->clock);
    Py_XINCREF(held->write);
}

static void
held_drop(Held *held)
{
    Py_XDECREF(held->sink);
    Py_XDECREF(held->conn);
    Py_XDECREF(held->general);
    Py_XDECREF(held->request);
    Py_XDECREF(held->capture);
    Py_XDECREF(held->clock);
    Py_XDECREF(held->write);
}

/* now in seconds; -1.0 with an exception set on error */
static double
reader_now(PyObject *clock)
{
    if (clock == NULL) {
#ifdef CLOCK_MONOTONIC
        struct timespec ts;
        if (clock_gettime(CLOCK_MONOTONIC, &ts) == 0) {
            /* as time.perf_counter(): integer nanoseconds, then one division */
            long long ns = (long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec;
            return (double)ns / 1e9;
        }
        PyErr_SetFromErrno(PyExc_OSError);
        return -1.0;
#else
        PyErr_SetString(PyExc_RuntimeError, "no monotonic clock: pass clock=time.perf_counter");
        return -1.0;
#endif
    }
    else {
        PyObject *value = PyObject_CallNoArgs(clock);
        double now;
        if (value == NULL) {
            return -1.0;
        }
        now = PyFloat_AsDouble(value);
        Py_DECREF(value);
        return now;
    }
}

/* 1: the response was taken and the next request written; 0: it goes the general way; -1: error */
static int
reader_take(ReaderObject *self, Held *held)
{
    SinkObject *sink = held->sink;
    PyObject *busy, *value, *result;
    double now, intended;
    int ok;
    now = reader_now(held->clock);
    if (now == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    if (!(now < sink->until) || (sink->counted && sink->left <= 0)) {
        return 0;
    }
    busy = PyObject_GetAttr(held->conn, str_busy);
    if (busy == NULL) {
        return -1;
    }
    ok = busy == Py_True;
    Py_DECREF(busy);
    if (!ok) {
        return 0;
    }
    value = PyObject_GetAttr(held->conn, str_t_intended);
    if (value == NULL) {
        return -1;
    }
    intended = PyFloat_AsDouble(value);
    Py_DECREF(value);
    if (intended == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    if (sink_push(sink, now - intended) < 0) {
        return -1;
    }
    if (sink->counted) {
        sink->left--;
    }
    sink->last = now;
    self->taken++;
    /* closed loop: the next request is issued now, on the same connection */
    value = PyFloat_FromDouble(now);
    if (value == NULL) {
        return -1;
    }
    ok = PyObject_SetAttr(held->conn, str_t_intended, value) == 0 &&
         PyObject_SetAttr(held->conn, str_t_send, value) == 0;
    Py_DECREF(value);
    if (!ok) {
        return -1;
    }
    result = PyObject_CallOneArg(held->write, held->request);
    if (result == NULL) {
        return -1;
    }
    Py_DECREF(result);
    return 1;
}

static PyObject *
reader_feed(ReaderObject *self, PyObject *data)
{
    PyObject *args[2], *out = NULL;
    Held held;
    held_take(&held, self);
    if (held.sink == NULL || held.conn == NULL || held.general == NULL || held.request == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Reader.__init__ was not called");
        goto done;
    }
    if (self->enabled && held.write != NULL && PyBytes_CheckExact(data)) {
        int kind = scan_response(PyBytes_AS_STRING(data), PyBytes_GET_SIZE(data), held.capture);
        if (kind == NOT_ONE) {
            self->enabled = 0;
        }
        else if (kind == ONE_FAST) {
            int taken = reader_take(self, &held);
            if (taken < 0) {
                goto done;
            }
            if (taken) {
                out = Py_NewRef(Py_None);
                goto done;
            }
        }
    }
    args[0] = held.conn;
    args[1] = data;
    out = PyObject_Vectorcall(held.general, args, 2, NULL);
done:
    held_drop(&held);
    return out;
}

static PyObject *
reader_get_write(ReaderObject *self, void *Py_UNUSED(closure))
{
    return Py_NewRef(self->write != NULL ? self->write : Py_None);
}

static int
reader_set_write(ReaderObject *self, PyObject *value, void *Py_UNUSED(closure))
{
    PyObject *old = self->write;
    if (value != NULL && value != Py_None && !PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "write must be callable or None");
        return -1;
    }
    self->write = (value == NULL || value == Py_None) ? NULL : Py_NewRef(value);
    Py_XDECREF(old); /* last: a destructor run here sees the reader already consistent */
    return 0;
}

static PyObject *
reader_scan(PyObject *Py_UNUSED(module), PyObject *args)
{
    Py_buffer data;
    PyObject *names = NULL, *capture;
    int kind;
    if (!PyArg_ParseTuple(args, "y*|O!:scan", &data, &PyTuple_Type, &names)) {
        return NULL;
    }
    capture = capture_tuple(names);
    if (capture == NULL && PyErr_Occurred()) {
        PyBuffer_Release(&data);
        return NULL;
    }
    kind = scan_response((const char *)data.buf, data.len, capture);
    Py_XDECREF(capture);
    PyBuffer_Release(&data);
    return PyLong_FromLong(kind);
}

static PyMethodDef reader_methods[] = {
    {"feed", (PyCFunction)reader_feed, METH_O, "The connection's data_received."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef reader_members[] = {
    {"enabled", MEMBER_BOOL, offsetof(ReaderObject, enabled), 0, "Reads may still be taken here."},
    {"taken", MEMBER_ULONGLONG, offsetof(ReaderObject, taken), MEMBER_READONLY, "Responses taken here."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef reader_getset[] = {
    {"write", (getter)reader_get_write, (setter)reader_set_write,
     "The transport's write (set once connected; None or deleted: nothing is taken here).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "infradoctor.load._fastpath.Reader",
    .tp_doc = "Reader(sink, conn, general, request, capture=(), clock=None): a connection's compiled data_received.",
    .tp_basicsize = sizeof(ReaderObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)reader_init,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_traverse = (traverseproc)reader_traverse,
    .tp_clear = (inquiry)reader_clear,
    .tp_methods = reader_methods,
    .tp_members = reader_members,
    .tp_getset = reader_getset,
};

/* ---------------------------------------------------------------------------------------------------- module */

static PyMethodDef module_methods[] = {
    {"scan", reader_scan, METH_VARARGS,
     "scan(data, capture=()) -> 1 (one plain 200, taken), 0 (one other response), -1 (anything else)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef fastpath_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "infradoctor.load._fastpath",
    .m_doc = "The closed loop's plainest response, taken without running Python (see client.FastConnection).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    PyObject *module, *array_module;
    fill_tchar();
    if (PyType_Ready(&SinkType) < 0 || PyType_Ready(&ReaderType) < 0) {
        return NULL;
    }
    array_module = PyImport_ImportModule("array");
    if (array_module == NULL) {
        return NULL;
    }
    array_type = PyObject_GetAttrString(array_module, "array");
    Py_DECREF(array_module);
    if (array_type == NULL) {
        return NULL;
    }
    str_busy = PyUnicode_InternFromString("busy");
    str_t_intended = PyUnicode_InternFromString("t_intended");
    str_t_send = PyUnicode_InternFromString("t_send");
    if (str_busy == NULL || str_t_intended == NULL || str_t_send == NULL) {
        return NULL;
    }
    module = PyModule_Create(&fastpath_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&SinkType);
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(module, "Sink", (PyObject *)&SinkType) < 0 ||
        PyModule_AddObject(module, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
