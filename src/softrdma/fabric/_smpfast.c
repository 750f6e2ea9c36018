/* softrdma.fabric._smpfast: the fabric server's common directed-route SMP, compiled.
 *
 * An SM's sweep is tens of thousands of directed-route Gets and Sets, each a
 * walk of a few hops through the model, one call of the SMA, and the walk back.
 * route.Router._directed does that in Python (the reference); directed() here
 * does the same on the same live objects -- model.Port and model.Node, read
 * through their __slots__ offsets, so there is no copy of the model to keep in
 * step -- and calls the SMA (a Python callable) for the attribute itself.
 *
 *   setup(Port, Node, pc_indexes, consts)   once: the slot offsets, the constants
 *   directed(port, tid_top, sma_process, answer_port, router, request)
 *
 * request is one 288-byte sim_request from a client attached at port (last, so
 * that functools.partial of the rest is a one-argument handler).  What the SMA
 * leaves for the caller (the traps a Set raises) collects in router._pending,
 * a list directed() puts there before it calls the SMA.  The result is one of:
 *   None         not the common case: nothing was changed, take the Python path.
 *                (responses, traps, SMInfo, a LID-routed part, a hop count or
 *                path the reference drops, a link that is not up, a port with
 *                an error rate, anything unexpected in the model)
 *   bytes        the 288-byte sim_request answering it, for the client at
 *                answer_port (the walk ended there, as the reference's would);
 *                router._pending is empty.
 *   (0, back, mad)          answered; the response mad leaves the fabric at
 *                           port back, which is not answer_port: the caller delivers it.
 *   (1, cur, mad, hop_cnt)  a Set was applied and the way back is not a plain
 *                           walk (a link the Set took down, an error rate): the
 *                           caller walks mad back from cur with the reference.
 * The SMA answers (status, 64 bytes), as every agent of the fabric does;
 * anything else raises TypeError.  A NodeInfo Get is answered from the SMA's
 * own node.node_info_cache where it has the entry (NodeInfo never changes).
 *   (2, packet)             as bytes, after router._pending's deliveries.
 * Every link crossed counts PortXmit/RcvPkts and Data on both ends, as
 * route._count_hop does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

#define SIM_REQ 288
#define MAD_OFF 32
#define MAD_SIZE 256
#define SMP_DATA 64
#define DR_PATH 128
#define DR_RPATH 192
#define DR_MAX_HOPS 63
#define PERMISSIVE 0xFFFF

static PyTypeObject *port_type, *node_type;
static Py_ssize_t o_p_node, o_p_num, o_p_remote, o_p_phys, o_p_err, o_p_pc;
static Py_ssize_t o_n_type, o_n_nports, o_n_ports, o_n_ni_cache;
static Py_ssize_t pc_xmit_data, pc_rcv_data, pc_xmit_pkts, pc_rcv_pkts;
static long link_up, switch_type, mad_words, m_get, m_set, m_get_resp, a_sm_info, a_notice,
    trap_repress, dr_class, a_node_info;
static PyObject *s_counters, *s_pending;

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))

/* a small int slot; -1 when unset or not an int */
static long slot_long(PyObject *o, Py_ssize_t off)
{
    PyObject *v = SLOT(o, off);
    if (v == NULL || !PyLong_Check(v))
        return -1;
    long x = PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return x;
}

static int is_port(PyObject *o) { return o != NULL && Py_TYPE(o) == port_type; }
static int is_node(PyObject *o) { return o != NULL && Py_TYPE(o) == node_type; }

/* node.ports[i] when it is a Port; NULL otherwise (borrowed) */
static PyObject *node_port(PyObject *node, long i)
{
    PyObject *ports = SLOT(node, o_n_ports);
    if (ports == NULL || !PyList_Check(ports) || i < 0 || i >= PyList_GET_SIZE(ports))
        return NULL;
    PyObject *p = PyList_GET_ITEM(ports, i);
    return is_port(p) ? p : NULL;
}

/* a hop the common case can take: both ends cabled to each other, physically
 * up, no error rate on either */
static PyObject *plain_hop(PyObject *out)
{
    PyObject *r = SLOT(out, o_p_remote);
    if (!is_port(r) || SLOT(r, o_p_remote) != out)
        return NULL;
    if (slot_long(out, o_p_phys) != link_up || slot_long(r, o_p_phys) != link_up)
        return NULL;
    if (slot_long(out, o_p_err) != 0 || slot_long(r, o_p_err) != 0)
        return NULL;
    if (!is_node(SLOT(r, o_p_node)))
        return NULL;
    return r;
}

/* port.pc, made by port.counters() the first time: PC_COUNT 64-bit slots
 * (model.Port.counters), or a list of ints where a caller put one */
static PyObject *counters(PyObject *port)
{
    PyObject *pc = SLOT(port, o_p_pc);
    if (pc != NULL && pc != Py_None)
        return pc;
    PyObject *r = PyObject_CallMethodNoArgs(port, s_counters);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);                          /* port.pc holds it */
    pc = SLOT(port, o_p_pc);
    if (pc == NULL || pc == Py_None) {
        PyErr_SetString(PyExc_TypeError, "_smpfast: Port.counters() left Port.pc unset");
        return NULL;
    }
    return pc;
}

static int bump_list(PyObject *list, Py_ssize_t i, long long by)
{
    if (i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "_smpfast: Port.pc too short");
        return -1;
    }
    PyObject *v = PyList_GET_ITEM(list, i);
    long long x = PyLong_AsLongLong(v);
    if (x == -1 && PyErr_Occurred())
        return -1;
    PyObject *n = PyLong_FromLongLong(x + by);
    if (n == NULL)
        return -1;
    PyList_SET_ITEM(list, i, n);
    Py_DECREF(v);
    return 0;
}

/* pkts and data words into a port's counters */
static int bump(PyObject *port, Py_ssize_t i_pkts, Py_ssize_t i_data)
{
    PyObject *pc = counters(port);
    if (pc == NULL)
        return -1;
    if (PyList_CheckExact(pc))
        return bump_list(pc, i_pkts, 1) < 0 ? -1 : bump_list(pc, i_data, mad_words);
    Py_buffer v;
    if (PyObject_GetBuffer(pc, &v, PyBUF_WRITABLE | PyBUF_FORMAT) < 0)
        return -1;
    if (v.itemsize != 8 || v.format == NULL || strcmp(v.format, "Q") != 0 ||
        v.len / 8 <= i_pkts || v.len / 8 <= i_data) {
        PyBuffer_Release(&v);
        PyErr_SetString(PyExc_TypeError, "_smpfast: Port.pc is not the counters array");
        return -1;
    }
    ((uint64_t *)v.buf)[i_pkts] += 1;
    ((uint64_t *)v.buf)[i_data] += (uint64_t)mad_words;
    PyBuffer_Release(&v);
    return 0;
}

/* one MAD over the link from out to into (route._count_hop) */
static int count_hop(PyObject *out, PyObject *into)
{
    if (bump(out, pc_xmit_pkts, pc_xmit_data) < 0)
        return -1;
    return bump(into, pc_rcv_pkts, pc_rcv_data);
}

/* a switch answers behind its port 0 */
static PyObject *answer_port_of(PyObject *p)
{
    PyObject *node = SLOT(p, o_p_node);
    if (slot_long(node, o_n_type) == switch_type) {
        PyObject *p0 = node_port(node, 0);
        return p0 ? p0 : p;
    }
    return p;
}

/* a new empty list as router._pending (a new reference to it), or NULL */
static PyObject *fresh_pending(PyObject *router)
{
    PyObject *pending = PyList_New(0);
    if (pending != NULL && PyObject_SetAttr(router, s_pending, pending) < 0)
        Py_CLEAR(pending);
    return pending;
}

static PyObject *py_directed(PyObject *self, PyObject *args)
{
    PyObject *start, *req, *process, *expect, *router;
    unsigned int tid_top;
    if (!PyArg_ParseTuple(args, "OIOOOS", &start, &tid_top, &process, &expect, &router, &req))
        return NULL;
    if (port_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_smpfast.setup() first");
        return NULL;
    }
    if (PyBytes_GET_SIZE(req) != SIM_REQ || !is_port(start) || !is_node(SLOT(start, o_p_node)))
        Py_RETURN_NONE;
    const uint8_t *in = (const uint8_t *)PyBytes_AS_STRING(req);
    const uint8_t *m = in + MAD_OFF;
    long method = m[3];
    if (m[0] != 1 || m[1] != dr_class || m[2] > 2 || (method & 0x80) || method == trap_repress)
        Py_RETURN_NONE;
    if (m[4] & 0x80)                                   /* D bit on a request: the reference drops it */
        Py_RETURN_NONE;
    int hop_ptr = m[6], hop_cnt = m[7];
    if (hop_cnt > DR_MAX_HOPS || hop_ptr != 0)
        Py_RETURN_NONE;
    if (((m[32] << 8) | m[33]) != PERMISSIVE || ((m[34] << 8) | m[35]) != PERMISSIVE)
        Py_RETURN_NONE;
    long attr = (m[16] << 8) | m[17];
    if ((method != m_get && method != m_set) || attr == a_sm_info || attr == a_notice)
        Py_RETURN_NONE;

    /* the way out, checked before anything changes */
    PyObject *outs[DR_MAX_HOPS + 1], *ins[DR_MAX_HOPS + 1];
    PyObject *cur = start;
    for (int i = 1; i <= hop_cnt; i++) {
        PyObject *node = SLOT(cur, o_p_node);
        if (i > 1 && slot_long(node, o_n_type) != switch_type)
            Py_RETURN_NONE;
        long o = m[DR_PATH + i], nports = slot_long(node, o_n_nports);
        if (o < 1 || o > nports)
            Py_RETURN_NONE;
        PyObject *out = node_port(node, o);
        PyObject *r = out ? plain_hop(out) : NULL;
        if (r == NULL)
            Py_RETURN_NONE;
        outs[i] = out;
        ins[i] = r;
        cur = r;
    }
    PyObject *node = SLOT(cur, o_p_node);
    PyObject *dest = answer_port_of(cur);
    if (slot_long(dest, o_p_err) != 0 || slot_long(cur, o_p_err) != 0)
        Py_RETURN_NONE;                                /* the agent may drop it: the reference decides */
    long arrival = slot_long(cur, o_p_num);
    if (arrival < 0)
        Py_RETURN_NONE;

    /* committed: the MAD goes out */
    uint8_t mad[MAD_SIZE];
    memcpy(mad, m, MAD_SIZE);
    mad[8] = (uint8_t)(tid_top >> 8);                  /* the client index in TID bits 48..63 */
    mad[9] = (uint8_t)tid_top;
    for (int i = 1; i <= hop_cnt; i++) {
        if (count_hop(outs[i], ins[i]) < 0)
            return NULL;
        mad[DR_RPATH + i] = (uint8_t)slot_long(ins[i], o_p_num);
    }
    mad[6] = (uint8_t)(hop_cnt + 1);
    uint32_t mod = ((uint32_t)mad[20] << 24) | ((uint32_t)mad[21] << 16) | ((uint32_t)mad[22] << 8) | mad[23];
    long status;
    int traps = 0;
    PyObject *ni = NULL;
    if (method == m_get && attr == a_node_info) {
        /* NodeInfo never changes for a (node, arrival port): the SMA keeps each one it
         * built in node.node_info_cache (agents.node_info), and a Get of it changes
         * nothing -- taken from there, the SMA is not called */
        PyObject *cache = SLOT(node, o_n_ni_cache);
        if (cache != NULL && PyDict_CheckExact(cache)) {
            PyObject *key = PyLong_FromLong(arrival);
            if (key == NULL)
                return NULL;
            ni = PyDict_GetItemWithError(cache, key);
            Py_DECREF(key);
            if (ni == NULL && PyErr_Occurred())
                return NULL;
            if (ni != NULL && !(PyBytes_CheckExact(ni) && PyBytes_GET_SIZE(ni) == SMP_DATA))
                ni = NULL;
        }
    }
    if (ni != NULL) {
        /* router._pending reads empty, as after an SMA call that raised nothing */
        PyObject *left = PyObject_GetAttr(router, s_pending);
        if (left == NULL)
            return NULL;
        int stale = !PyList_CheckExact(left) || PyList_GET_SIZE(left) > 0;
        Py_DECREF(left);
        if (stale) {
            PyObject *pending = fresh_pending(router);
            if (pending == NULL)
                return NULL;
            Py_DECREF(pending);
        }
        status = 0;
        memcpy(mad + SMP_DATA, PyBytes_AS_STRING(ni), SMP_DATA);
    } else {
        /* what the SMA leaves for the caller (traps of a Set) collects in router._pending */
        PyObject *pending = fresh_pending(router);
        if (pending == NULL)
            return NULL;
        PyObject *data = PyByteArray_FromStringAndSize((const char *)mad + SMP_DATA, SMP_DATA);
        if (data == NULL) {
            Py_DECREF(pending);
            return NULL;
        }
        PyObject *res = PyObject_CallFunction(process, "OlllkO", node, arrival, method, attr,
                                              (unsigned long)mod, data);
        Py_DECREF(data);
        /* the list the SMA appended to, if it replaced ours */
        PyObject *left = PyObject_GetAttr(router, s_pending);
        Py_DECREF(pending);
        if (left == NULL) {
            Py_XDECREF(res);
            return NULL;
        }
        traps = PyList_Check(left) ? PyList_GET_SIZE(left) > 0 : PyObject_IsTrue(left);
        Py_DECREF(left);
        if (res == NULL || traps < 0) {
            Py_XDECREF(res);
            return NULL;
        }
        Py_buffer ans;
        if (!PyTuple_Check(res) || PyTuple_GET_SIZE(res) != 2) {
            Py_DECREF(res);
            PyErr_SetString(PyExc_TypeError, "_smpfast: the SMA answers (status, data)");
            return NULL;
        }
        status = PyLong_AsLong(PyTuple_GET_ITEM(res, 0));
        if (status == -1 && PyErr_Occurred()) {
            Py_DECREF(res);
            return NULL;
        }
        if (PyObject_GetBuffer(PyTuple_GET_ITEM(res, 1), &ans, PyBUF_SIMPLE) < 0) {
            Py_DECREF(res);
            return NULL;
        }
        if (ans.len != SMP_DATA) {                     /* every agent answers 64 bytes */
            PyBuffer_Release(&ans);
            Py_DECREF(res);
            PyErr_SetString(PyExc_TypeError, "_smpfast: the SMA's data is not 64 bytes");
            return NULL;
        }
        memcpy(mad + SMP_DATA, ans.buf, SMP_DATA);
        PyBuffer_Release(&ans);
        Py_DECREF(res);
    }
    mad[3] = (uint8_t)m_get_resp;
    uint16_t word = 0x8000 | (uint16_t)(status & 0x7FFF);
    mad[4] = (uint8_t)(word >> 8);
    mad[5] = (uint8_t)word;
    mad[6] = (uint8_t)(hop_cnt + 1);
    mad[7] = (uint8_t)hop_cnt;

    /* the way back */
    PyObject *back;
    if (method == m_get) {
        /* a Get changed nothing: the same links the other way (Router._dr_back) */
        for (int i = hop_cnt; i >= 1; i--)
            if (count_hop(ins[i], outs[i]) < 0)
                return NULL;
        back = answer_port_of(hop_cnt ? outs[1] : start);
    } else {
        /* a Set may have changed the links: walk the return path as it is now,
         * checked first; anything but plain hops goes to the reference */
        PyObject *p = cur;
        int plain = 1;
        for (int hp = hop_cnt; hp >= 1 && plain; hp--) {
            PyObject *nd = SLOT(p, o_p_node);
            if (!is_node(nd) || (hp < hop_cnt && slot_long(nd, o_n_type) != switch_type)) {
                plain = 0;
                break;
            }
            long o = mad[DR_RPATH + hp];
            if (o < 1 || o > slot_long(nd, o_n_nports)) {
                plain = 0;
                break;
            }
            PyObject *out = node_port(nd, o);
            PyObject *r = out ? plain_hop(out) : NULL;
            if (r == NULL) {
                plain = 0;
                break;
            }
            outs[hp] = out;
            ins[hp] = r;
            p = r;
        }
        if (!plain) {
            PyObject *mb = PyByteArray_FromStringAndSize((const char *)mad, MAD_SIZE);
            if (mb == NULL)
                return NULL;
            PyObject *t = Py_BuildValue("(iOOi)", 1, cur, mb, hop_cnt);
            Py_DECREF(mb);
            return t;
        }
        for (int hp = hop_cnt; hp >= 1; hp--)
            if (count_hop(outs[hp], ins[hp]) < 0)
                return NULL;
        back = answer_port_of(p);
    }
    mad[6] = 0;                                        /* the hop pointer */
    if (back != expect)
        return Py_BuildValue("(iOy#)", 0, back, (const char *)mad, (Py_ssize_t)MAD_SIZE);
    /* the sim_request to the client: as the receiver sees it (ibsim.build_request) */
    PyObject *pkt = PyBytes_FromStringAndSize(NULL, SIM_REQ);
    if (pkt == NULL)
        return NULL;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(pkt);
    memset(o, 0, MAD_OFF);
    o[0] = o[1] = 0xFF;                                /* dlid, slid: permissive */
    o[4] = o[5] = 0xFF;
    memcpy(o + 8, in + 12, 4);                         /* dqp: the request's sqp */
    memcpy(o + 12, in + 8, 4);                         /* sqp: the request's dqp */
    o[30] = MAD_SIZE >> 8;                             /* length 256 */
    memcpy(o + MAD_OFF, mad, MAD_SIZE);
    if (traps) {                                       /* the caller delivers them first */
        PyObject *t = Py_BuildValue("(iN)", 2, pkt);
        return t;
    }
    return pkt;
}

static int slot_offset(PyTypeObject *t, const char *name, Py_ssize_t *off)
{
    PyObject *d = PyObject_GetAttrString((PyObject *)t, name);
    if (d == NULL)
        return -1;
    if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        Py_DECREF(d);
        PyErr_Format(PyExc_TypeError, "_smpfast: %s.%s is not a slot", t->tp_name, name);
        return -1;
    }
    *off = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return 0;
}

static PyObject *py_setup(PyObject *self, PyObject *args)
{
    PyObject *pt, *nt;
    if (!PyArg_ParseTuple(args, "O!O!(nnnn)(lllllllllll)", &PyType_Type, &pt, &PyType_Type, &nt,
                          &pc_xmit_data, &pc_rcv_data, &pc_xmit_pkts, &pc_rcv_pkts,
                          &link_up, &switch_type, &mad_words, &m_get, &m_set, &m_get_resp,
                          &a_sm_info, &a_notice, &trap_repress, &dr_class, &a_node_info))
        return NULL;
    PyTypeObject *P = (PyTypeObject *)pt, *N = (PyTypeObject *)nt;
    if (slot_offset(P, "node", &o_p_node) < 0 || slot_offset(P, "num", &o_p_num) < 0 ||
        slot_offset(P, "remote", &o_p_remote) < 0 || slot_offset(P, "phys", &o_p_phys) < 0 ||
        slot_offset(P, "err_rate", &o_p_err) < 0 || slot_offset(P, "pc", &o_p_pc) < 0 ||
        slot_offset(N, "type", &o_n_type) < 0 || slot_offset(N, "nports", &o_n_nports) < 0 ||
        slot_offset(N, "ports", &o_n_ports) < 0 || slot_offset(N, "node_info_cache", &o_n_ni_cache) < 0)
        return NULL;
    Py_INCREF(P);
    Py_INCREF(N);
    Py_XSETREF(port_type, P);
    Py_XSETREF(node_type, N);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", py_setup, METH_VARARGS, "setup(Port, Node, (pc indexes), (constants))"},
    {"directed", py_directed, METH_VARARGS,
     "directed(port, tid_top, sma_process, answer_port, router, request) -> None | bytes | tuple"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "softrdma.fabric._smpfast",
    "The fabric server's common directed-route SMP, compiled (route.Router._directed is the reference).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__smpfast(void)
{
    s_counters = PyUnicode_InternFromString("counters");
    s_pending = PyUnicode_InternFromString("_pending");
    if (s_counters == NULL || s_pending == NULL)
        return NULL;
    return PyModule_Create(&module);
}
