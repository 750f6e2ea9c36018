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
 * serve(fd, handler) reads a client's queued requests, hands each to handler
 * and sends a bytes answer back (the fabric server's compiled SMP path, with no
 * Python between a request and its answer but the handler's SMA call).
 * loop(epfd, fast, dirty, answered, timeout, spin) is the server loop's
 * epoll_wait with serve() done inside it for the sockets in fast: it returns
 * to Python only for what Python must do (another socket ready, a request the
 * handler left to Python, a change in dirty, a signal) or at the timeout.
 * Optional: where it was not built, the server sends and reads one datagram
 * per call.
 */
#define _GNU_SOURCE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <sys/socket.h>
#include <sys/epoll.h>
#include <errno.h>
#include <time.h>
#include <sched.h>

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
static unsigned int recv_len[MAX_BATCH];

/* up to n (<= MAX_BATCH) queued datagrams of up to size bytes into recv_buf with one
 * recvmmsg (MSG_DONTWAIT); how many, or -1 with errno */
static int recv_batch(int fd, int n, size_t size)
{
    struct mmsghdr msgs[MAX_BATCH];
    struct iovec iov[MAX_BATCH];
    for (int i = 0; i < n; i++) {
        iov[i].iov_base = recv_buf[i];
        iov[i].iov_len = size;
        memset(&msgs[i], 0, sizeof(msgs[i]));
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
    int got;
    do {
        got = recvmmsg(fd, msgs, (unsigned int)n, MSG_DONTWAIT, NULL);
    } while (got < 0 && errno == EINTR);
    for (int i = 0; i < got; i++)
        recv_len[i] = msgs[i].msg_len;
    return got;
}

/* the first got datagrams recv_batch read, as a list of bytes */
static PyObject *received(int got)
{
    PyObject *list = PyList_New(got);
    if (list == NULL)
        return NULL;
    for (int i = 0; i < got; i++) {
        PyObject *b = PyBytes_FromStringAndSize(recv_buf[i], (Py_ssize_t)recv_len[i]);
        if (b == NULL) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, i, b);
    }
    return list;
}

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
    int got = recv_batch(fd, n, (size_t)size);
    if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return PyList_New(0);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return received(got);
}

/* Read fd's queued datagrams (recvmmsg, up to SERVE_BATCH a round, until none is
 * queued or ROUNDS rounds) and answer each with handler's bytes: the first of a round
 * at once (the client works on it while the rest are handled), the others queued and
 * sent FLUSH_AT at a time with one sendmmsg, the last ones at the end of the round.
 * Small rounds keep a windowed client and the server working side by side: answers
 * leave while the client is still sending and it finds some at every read.  Taking a
 * whole window in one read (64 a round) answered it before the client woke up, which
 * then slept after every window (window 16: 0.7 of ibsim's rate; 8 a round: 1.12).
 * *answered: how many went.  Returns 0 when done; 1 when the handler left one to
 * Python or answers could not be sent: *stop is (fd, datagram, result, [datagrams not
 * handled], [answers not sent, before that datagram's]) -- datagram and result None
 * when only answers are left; 2 when reading failed (errno says why);
 * -1 with an exception. */
#define SERVE_BATCH 8
#define ROUNDS (256 / SERVE_BATCH)
#define FLUSH_AT SERVE_BATCH          /* a round's answers fit in the queue */

struct pending {
    PyObject *answer[FLUSH_AT];
    int n;
};

/* sendmmsg what is queued; 0 when all went, else 1 (the rest still queued) */
static int flush(int fd, struct pending *q, Py_ssize_t *answered)
{
    struct mmsghdr msgs[FLUSH_AT];
    struct iovec iov[FLUSH_AT];
    int done = 0;
    while (done < q->n) {
        int k = q->n - done;
        for (int i = 0; i < k; i++) {
            PyObject *a = q->answer[done + i];
            iov[i].iov_base = PyBytes_AS_STRING(a);
            iov[i].iov_len = (size_t)PyBytes_GET_SIZE(a);
            memset(&msgs[i], 0, sizeof(msgs[i]));
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int sent;
        do {
            sent = sendmmsg(fd, msgs, (unsigned int)k, MSG_DONTWAIT);
        } while (sent < 0 && errno == EINTR);
        if (sent <= 0)
            break;
        done += sent;
    }
    for (int i = 0; i < done; i++)
        Py_DECREF(q->answer[i]);
    *answered += done;
    q->n -= done;
    memmove(q->answer, q->answer + done, (size_t)q->n * sizeof(PyObject *));
    return q->n != 0;
}

static void drop_pending(struct pending *q)
{
    for (int i = 0; i < q->n; i++)
        Py_DECREF(q->answer[i]);
    q->n = 0;
}

/* the stop tuple (see serve_fd); takes over the queued answers; NULL with an exception */
static PyObject *make_stop(int fd, PyObject *datagram, PyObject *result, PyObject *bufs, int from,
                           struct pending *q)
{
    PyObject *unsent = PyList_New(q->n);
    if (unsent == NULL) {
        drop_pending(q);
        return NULL;
    }
    for (int i = 0; i < q->n; i++)
        PyList_SET_ITEM(unsent, i, q->answer[i]);
    q->n = 0;
    PyObject *rest = PyList_GetSlice(bufs, from, PyList_GET_SIZE(bufs));
    if (rest == NULL) {
        Py_DECREF(unsent);
        return NULL;
    }
    return Py_BuildValue("(iOONN)", fd, datagram ? datagram : Py_None, result ? result : Py_None,
                         rest, unsent);
}

static int serve_fd(int fd, PyObject *handler, Py_ssize_t *answered, PyObject **stop)
{
    struct pending q = {.n = 0};
    for (int round = 0; round < ROUNDS; round++) {
        int got = recv_batch(fd, SERVE_BATCH, 1024);
        if (got < 0)
            return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : 2;
        /* every datagram a bytes object before any handler runs (the buffers are shared) */
        PyObject *bufs = received(got);
        if (bufs == NULL)
            return -1;
        for (int i = 0; i < got; i++) {
            PyObject *b = PyList_GET_ITEM(bufs, i);
            PyObject *r = PyObject_CallOneArg(handler, b);
            if (r == NULL) {
                drop_pending(&q);
                Py_DECREF(bufs);
                return -1;
            }
            if (PyBytes_CheckExact(r)) {
                if (i == 0) {
                    ssize_t sent;
                    do {
                        sent = send(fd, PyBytes_AS_STRING(r), (size_t)PyBytes_GET_SIZE(r), MSG_DONTWAIT);
                    } while (sent < 0 && errno == EINTR);
                    if (sent >= 0) {
                        Py_DECREF(r);
                        (*answered)++;
                        continue;
                    }
                } else {
                    q.answer[q.n++] = r;
                    if (q.n < FLUSH_AT || !flush(fd, &q, answered))
                        continue;
                    *stop = make_stop(fd, NULL, NULL, bufs, i + 1, &q);
                    Py_DECREF(bufs);
                    return *stop == NULL ? -1 : 1;
                }
            }
            if (q.n)                           /* the answers before it go first */
                flush(fd, &q, answered);
            *stop = make_stop(fd, b, r, bufs, i + 1, &q);
            Py_DECREF(r);
            Py_DECREF(bufs);
            return *stop == NULL ? -1 : 1;
        }
        if (q.n && flush(fd, &q, answered)) {
            *stop = make_stop(fd, NULL, NULL, bufs, got, &q);
            Py_DECREF(bufs);
            return *stop == NULL ? -1 : 1;
        }
        Py_DECREF(bufs);
        if (got < SERVE_BATCH)
            return 0;
    }
    return 0;
}

/* serve(fd, handler): serve_fd once (see loop) */
static PyObject *py_serve(PyObject *self, PyObject *args)
{
    int fd;
    PyObject *handler;
    if (!PyArg_ParseTuple(args, "iO", &fd, &handler))
        return NULL;
    Py_ssize_t done = 0;
    PyObject *stop = NULL;
    int rc = serve_fd(fd, handler, &done, &stop);
    if (rc < 0)
        return NULL;
    if (rc == 2)
        return PyErr_SetFromErrno(PyExc_OSError);
    return Py_BuildValue("(nN)", done, rc == 1 ? stop : Py_NewRef(Py_None));
}

static double mono_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int count_answered(PyObject *answered, PyObject *key, Py_ssize_t n)
{
    PyObject *old = PyDict_GetItemWithError(answered, key);
    if (old == NULL && PyErr_Occurred())
        return -1;
    PyObject *v = PyLong_FromSsize_t(n + (old == NULL ? 0 : PyLong_AsSsize_t(old)));
    if (v == NULL)
        return -1;
    int rc = PyDict_SetItem(answered, key, v);
    Py_DECREF(v);
    return rc;
}

#define MAX_EVENTS 64

static double last_served;             /* when loop last answered a request (mono_now) */

static PyObject *py_loop(PyObject *self, PyObject *args)
{
    int epfd;
    PyObject *fast, *dirty, *answered;
    double timeout, spin = 0;
    if (!PyArg_ParseTuple(args, "iO!O!O!d|d", &epfd, &PyDict_Type, &fast, &PySet_Type, &dirty,
                          &PyDict_Type, &answered, &timeout, &spin))
        return NULL;
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    Py_ssize_t dirty_at_entry = PySet_GET_SIZE(dirty);
    double deadline = mono_now() + (timeout > 0 ? timeout : 0);
    struct epoll_event evs[MAX_EVENTS];
    for (;;) {
        double left = deadline - mono_now();
        int ms = left <= 0 ? 0 : (int)(left * 1000.0 + 0.999);
        int n;
        Py_BEGIN_ALLOW_THREADS
        n = 0;
        /* a client that sends its next request within the spin of its last answer
         * finds the server awake: no wakeup (tens of microseconds on a VM) between its
         * request and the answer.  Only after serving: other sockets' traffic (devices,
         * commands) does not make the server poll.  sched_yield: any other task that
         * wants this CPU gets it first */
        if (spin > 0 && mono_now() < last_served + spin) {
            double until = last_served + spin;
            while ((n = epoll_wait(epfd, evs, MAX_EVENTS, 0)) == 0 && mono_now() < until)
                sched_yield();
        }
        if (n == 0)
            n = epoll_wait(epfd, evs, MAX_EVENTS, ms);
        Py_END_ALLOW_THREADS
        if (n < 0) {
            if (errno != EINTR)
                goto fail_errno;
            if (PyErr_CheckSignals() < 0)
                goto fail;
            break;                             /* a handler ran: Python looks at what it did */
        }
        for (int k = 0; k < n; k++) {
            int fd = evs[k].data.fd;
            PyObject *key = PyLong_FromLong(fd);
            if (key == NULL)
                goto fail;
            PyObject *handler = PyDict_GetItemWithError(fast, key);
            if (handler == NULL) {
                int rc = PyErr_Occurred() ? -1 : PyList_Append(out, key);
                Py_DECREF(key);
                if (rc < 0)
                    goto fail;
                continue;
            }
            Py_INCREF(handler);                /* the handler may change fast */
            Py_ssize_t done = 0;
            PyObject *stop = NULL;
            int rc = serve_fd(fd, handler, &done, &stop);
            Py_DECREF(handler);
            if (done || rc == 1)
                last_served = mono_now();
            if (rc >= 0 && done && count_answered(answered, key, done) < 0)
                rc = -1;
            if (rc == 1) {
                rc = PyList_Append(out, stop);
            } else if (rc == 2) {                  /* reading failed: (fd, errno) */
                PyObject *failed = Py_BuildValue("(ii)", fd, errno);
                rc = failed == NULL ? -1 : PyList_Append(out, failed);
                Py_XDECREF(failed);
            }
            Py_XDECREF(stop);
            Py_DECREF(key);
            if (rc < 0)
                goto fail;
        }
        if (n == 0 || PyList_GET_SIZE(out) || PySet_GET_SIZE(dirty) > dirty_at_entry)
            break;
    }
    return out;
fail_errno:
    PyErr_SetFromErrno(PyExc_OSError);
fail:
    Py_DECREF(out);
    return NULL;
}

static PyMethodDef sendmmsg_methods[] = {
    {"loop", py_loop, METH_VARARGS,
     "loop(epfd, fast, dirty, answered, timeout, spin=0): epoll_wait on epfd for up to timeout "
     "seconds, polling (and yielding the CPU) until spin seconds after the last request it "
     "served before it sleeps; a socket whose "
     "fd is a key of fast is served there (serve with fast[fd]; answered[fd] counts the "
     "answers).  Returns, as soon as there is any, what Python must do: the fd (int) of another "
     "ready socket, (fd, errno) of a served one whose read failed, (fd, datagram, result, rest, "
     "unsent) where serve stopped; or [] when dirty grew, a signal handler ran or the time is up."},
    {"serve", py_serve, METH_VARARGS,
     "serve(fd, handler): fd's queued datagrams, each to handler, its bytes answers sent back; "
     "(answered, None or (fd, datagram, result, rest, unsent) as loop returns it); OSError "
     "when reading failed."},
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
