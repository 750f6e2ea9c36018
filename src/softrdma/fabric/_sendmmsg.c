/* softrdma.fabric._sendmmsg: sendmmsg(2) and recvmmsg(2) for the fabric server's MADs.
 *
 * Python's socket module has sendmsg but not sendmmsg: one system call per
 * datagram, and on a connected AF_UNIX datagram socket each of them may wake
 * the receiving client on its own.  sendmmsg(fd, [datagram, ...]) queues a
 * run of datagrams with one call (MSG_DONTWAIT) and returns how many went;
 * when not even the first one did, it raises OSError with the errno, and the
 * caller sends the rest one at a time (its own EAGAIN and error handling).
 * recvmmsg(fd, n, size) reads up to n queued datagrams of up to size bytes each
 * with one call (MSG_DONTWAIT) and returns them as a list of bytes: empty when
 * nothing is queued (rather than the exception a non-blocking recv raises,
 * which cost the MAD path more than the call), OSError on any other error.
 * serve(fd, handler, n, size) is recvmmsg with each datagram handed to handler
 * and a bytes answer sent back at once (the fabric server's compiled SMP path,
 * with no Python between a request and its answer).
 * Optional: where it was not built, the server sends and reads one datagram
 * per call.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/socket.h>
#include <errno.h>

#define MAX_BATCH 256

static PyObject *py_sendmmsg(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *seq;
    if (!PyArg_ParseTuple(args, "iO", &fd, &seq))
        return NULL;
    PyObject *fast = PySequence_Fast(seq, "sendmmsg: a sequence of bytes-like datagrams");
    if (fast == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    if (n > MAX_BATCH)
        n = MAX_BATCH;
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    Py_buffer views[MAX_BATCH];
    Py_ssize_t got = 0;
    PyObject *result = NULL;
    for (; got < n; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, got), &views[got], PyBUF_SIMPLE) < 0)
            goto out;
        iov[got].iov_base = views[got].buf;
        iov[got].iov_len = (size_t)views[got].len;
        memset(&msgs[got], 0, sizeof(msgs[got]));
        msgs[got].msg_hdr.msg_iov = &iov[got];
        msgs[got].msg_hdr.msg_iovlen = 1;
    }
    int sent;
    if (n == 0) {
        result = PyLong_FromLong(0);
        goto out;
    }
    do {
        sent = sendmmsg(fd, msgs, (unsigned int)n, MSG_DONTWAIT);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0)
        PyErr_SetFromErrno(PyExc_OSError);
    else
        result = PyLong_FromLong(sent);
out:
    for (Py_ssize_t i = 0; i < got; i++)
        PyBuffer_Release(&views[i]);
    Py_DECREF(fast);
    return result;
}

#define RECV_MAX_SIZE 4096

/* recvmmsg's buffers: the GIL is held across the call, so one set serves every caller */
static char recv_buf[MAX_BATCH][RECV_MAX_SIZE];

static PyObject *py_recvmmsg(PyObject *self, PyObject *args)
{
    int fd, n;
    Py_ssize_t size;
    if (!PyArg_ParseTuple(args, "iin", &fd, &n, &size))
        return NULL;
    if (n < 1 || n > MAX_BATCH || size < 1 || size > RECV_MAX_SIZE) {
        PyErr_Format(PyExc_ValueError, "recvmmsg: 1..%d datagrams of 1..%d bytes", MAX_BATCH,
                     RECV_MAX_SIZE);
        return NULL;
    }
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = recv_buf[i];
        iov[i].iov_len = (size_t)size;
        memset(&msgs[i], 0, sizeof(msgs[i]));
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int got;
    do {
        got = recvmmsg(fd, msgs, (unsigned int)n, MSG_DONTWAIT, NULL);
    } while (got < 0 && errno == EINTR);
    if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return PyList_New(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *list = PyList_New(got);
    if (list == NULL)
        return NULL;
    for (int i = 0; i < got; i++) {
        PyObject *b = PyBytes_FromStringAndSize(recv_buf[i], (Py_ssize_t)msgs[i].msg_len);
        if (b == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, b);
    }
    return list;
}

/* serve(fd, handler, n, size): recvmmsg's datagrams, each given to handler(datagram);
 * an answer that is bytes is sent back on fd at once (MSG_DONTWAIT) and the next is
 * handled.  Stops at the first answer that is not bytes or could not be sent:
 * returns (answered, (datagram, answer) or None, [datagrams not yet handled]). */
static PyObject *py_serve(PyObject *self, PyObject *args)
{
    int fd, n;
    Py_ssize_t size;
    PyObject *handler;
    if (!PyArg_ParseTuple(args, "iOin", &fd, &handler, &n, &size))
        return NULL;
    PyObject *rargs = Py_BuildValue("(iin)", fd, n, size);
    if (rargs == NULL)
        return NULL;
    PyObject *bufs = py_recvmmsg(self, rargs);
    Py_DECREF(rargs);
    if (bufs == NULL)
        return NULL;
    Py_ssize_t got = PyList_GET_SIZE(bufs), i = 0, answered = 0;
    PyObject *stop = Py_None, *result = NULL;
    Py_INCREF(stop);
    for (; i < got; i++) {
        PyObject *b = PyList_GET_ITEM(bufs, i);
        PyObject *r = PyObject_CallOneArg(handler, b);
        if (r == NULL)
            goto out;
        if (PyBytes_CheckExact(r)) {
            ssize_t sent;
            do {
                sent = send(fd, PyBytes_AS_STRING(r), (size_t)PyBytes_GET_SIZE(r), MSG_DONTWAIT);
            } while (sent < 0 && errno == EINTR);
            if (sent >= 0) {
                Py_DECREF(r);
                answered++;
                continue;
            }
        }
        Py_DECREF(stop);
        stop = PyTuple_Pack(2, b, r);
        Py_DECREF(r);
        if (stop == NULL)
            goto out;
        i++;
        break;
    }
    PyObject *rest = PyList_GetSlice(bufs, i, got);
    if (rest != NULL)
        result = Py_BuildValue("(nON)", answered, stop, rest);
out:
    Py_XDECREF(stop);
    Py_DECREF(bufs);
    return result;
}

static PyMethodDef sendmmsg_methods[] = {
    {"serve", py_serve, METH_VARARGS,
     "serve(fd, handler, n, size): recvmmsg(fd, n, size), each datagram to handler, a bytes "
     "answer sent back at once; (answered, (datagram, answer) where it stopped or None, rest)."},
    {"sendmmsg", py_sendmmsg, METH_VARARGS,
     "sendmmsg(fd, datagrams): queue them with one sendmmsg(2), MSG_DONTWAIT; how many went."},
    {"recvmmsg", py_recvmmsg, METH_VARARGS,
     "recvmmsg(fd, n, size): up to n queued datagrams (bytes, at most size each) with one "
     "recvmmsg(2), MSG_DONTWAIT; [] when none is queued."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef sendmmsg_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_sendmmsg",
    .m_doc = "sendmmsg(2) and recvmmsg(2) for the fabric server's batched MADs (see softrdma.fabric.server).",
    .m_size = -1,
    .m_methods = sendmmsg_methods,
};

PyMODINIT_FUNC PyInit__sendmmsg(void) { return PyModule_Create(&sendmmsg_module); }
