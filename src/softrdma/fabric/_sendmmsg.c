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

static PyMethodDef sendmmsg_methods[] = {
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
