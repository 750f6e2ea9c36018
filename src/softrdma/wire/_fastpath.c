/* softrdma.wire._fastpath: the innermost per-packet loops of the RoCEv2
 * data path, compiled.
 *
 * Four functions, each the exact counterpart of a Python reference in
 * softrdma/wire/fastpath.py (the tests compare them byte for byte):
 *
 *   build_middles   -- a run of MIDDLE packets of one message (and its FIRST
 *                      and LAST, when they are as long), BTH from a template
 *                      with the PSN (and AckReq on the last) patched, payload
 *                      copied, ICRC appended, laid out as the segments of one
 *                      UDP GSO send (segment k: IP ID id0 + k);
 *   verify_segments -- a UDP GRO buffer of a GSO-sending peer: every
 *                      segment's framing (rx_check) and ICRC under the IP ID
 *                      its position gives it; the common DestQP, or -1 when
 *                      anything differs (the Python path then takes it);
 *   place_middles   -- the in-order MIDDLE packets of a RDMA WRITE or SEND
 *                      in such a buffer, copied to their place;
 *   icrc_v4         -- one packet's ICRC (its 4 bytes on the wire) for an
 *                      IPv4 flow and IP ID: the packets sent one by one;
 *   vcrc            -- a native IB packet's VCRC (by carry-less multiplication
 *                      where the CPU has it; vcrc_table: the table loop);
 *   ib_build_run    -- a SegmentRun's packets as native IB packets, laid out
 *                      as the entries of a PACKETS message (wire/lrh.py);
 *   ib_verify_packets -- a whole PACKETS message checked for one QP.
 *
 * No sockets, no state beyond the CRC-32 function and the opcode table set
 * once by the Python side.  The CRC-32 is zlib's unless set_crc32() is
 * given the address of a faster one with zlib's semantics (ISA-L's
 * crc32_gzip_refl, which the isal package carries).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#include "_vcrc.h"

typedef uint32_t (*crc_fn_t)(uint32_t, const unsigned char *, uint64_t);

static uint32_t zlib_crc(uint32_t crc, const unsigned char *buf, uint64_t len)
{
    return (uint32_t)crc32((uLong)crc, buf, (uInt)len);
}

static crc_fn_t crc_fn = zlib_crc;
static uint32_t lrh_seed;              /* CRC after the 8 masked LRH bytes */
static unsigned char op_table[256];    /* header length | 0x80 if a payload may follow; 0: no such opcode */
static int have_table;

#define BTH_BYTES 12
#define ICRC_BYTES 4
#define MASKED_HDR 33                  /* IPv4 (20) + UDP (8) + BTH bytes 0..3 + the masked byte 4 */
#define IP_DF_HI 0x40

static void compute_seed(void)
{
    static const unsigned char ff[8] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    lrh_seed = crc_fn(0, ff, 8);
}

/* The ICRC of packet p (len bytes, without its ICRC) sent from src:sport to
 * dst:dport over IPv4 with identification ident and DF set (wire/icrc.py,
 * Ipv4Flow.icrc). */
static uint32_t icrc_v4(const unsigned char *p, Py_ssize_t len, unsigned ident,
                        const unsigned char *src, const unsigned char *dst,
                        unsigned sport, unsigned dport)
{
    unsigned char h[MASKED_HDR];
    unsigned udp_len = 8 + (unsigned)len + ICRC_BYTES;
    unsigned ip_total = 20 + udp_len;
    h[0] = 0x45; h[1] = 0xff;
    h[2] = (unsigned char)(ip_total >> 8); h[3] = (unsigned char)ip_total;
    h[4] = (unsigned char)(ident >> 8); h[5] = (unsigned char)ident;
    h[6] = IP_DF_HI; h[7] = 0;
    h[8] = 0xff; h[9] = 17; h[10] = 0xff; h[11] = 0xff;
    memcpy(h + 12, src, 4);
    memcpy(h + 16, dst, 4);
    h[20] = (unsigned char)(sport >> 8); h[21] = (unsigned char)sport;
    h[22] = (unsigned char)(dport >> 8); h[23] = (unsigned char)dport;
    h[24] = (unsigned char)(udp_len >> 8); h[25] = (unsigned char)udp_len;
    h[26] = 0xff; h[27] = 0xff;
    memcpy(h + 28, p, 4);
    h[32] = 0xff;
    uint32_t crc = crc_fn(lrh_seed, h, MASKED_HDR);
    return crc_fn(crc, p + 5, (uint64_t)(len - 5));
}

static inline uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void put_le32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}

static int check_addr(Py_buffer *b, const char *what)
{
    if (b->len != 4) {
        PyErr_Format(PyExc_ValueError, "%s must be 4 bytes (IPv4), not %zd", what, b->len);
        return -1;
    }
    return 0;
}

/* set_crc32(address): 0 = zlib's; otherwise the address of a function with
 * zlib's crc32 semantics (uint32 crc, const uint8 *buf, uint64 len).  It is
 * checked against zlib on a test vector before it is used. */
static PyObject *set_crc32(PyObject *self, PyObject *args)
{
    unsigned long long addr;
    if (!PyArg_ParseTuple(args, "K", &addr))
        return NULL;
    crc_fn_t fn = addr ? (crc_fn_t)(uintptr_t)addr : zlib_crc;
    static const unsigned char v[] = "123456789 softrdma ICRC check vector";
    uint32_t want = zlib_crc(0x12345678u, v, sizeof v - 1);
    if (fn(0x12345678u, v, sizeof v - 1) != want) {
        PyErr_SetString(PyExc_ValueError, "that CRC-32 does not compute zlib's crc32");
        return NULL;
    }
    crc_fn = fn;
    compute_seed();
    Py_RETURN_NONE;
}

/* set_opcode_table(table): 256 bytes, header length | 0x80 (payload allowed), 0 = invalid. */
static PyObject *set_opcode_table(PyObject *self, PyObject *args)
{
    Py_buffer t;
    if (!PyArg_ParseTuple(args, "y*", &t))
        return NULL;
    if (t.len != 256) {
        PyBuffer_Release(&t);
        PyErr_SetString(PyExc_ValueError, "the opcode table has 256 entries");
        return NULL;
    }
    memcpy(op_table, t.buf, 256);
    have_table = 1;
    PyBuffer_Release(&t);
    Py_RETURN_NONE;
}

/* crc32(data, value=0) -> int: the CRC-32 in use (for the tests). */
static PyObject *py_crc32(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned int value = 0;
    if (!PyArg_ParseTuple(args, "y*|I", &b, &value))
        return NULL;
    uint32_t c = crc_fn(value, b.buf, (uint64_t)b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

/* Packet i of a SegmentRun of count packets at p: its BTH (the first's /
 * the last's template if given, else hdr; PSN psn0 + i; AckReq on the last
 * if asked) and its payload, without the ICRC. */
static void run_packet(unsigned char *p, Py_ssize_t i, Py_ssize_t count, const Py_buffer *hdr,
                       const Py_buffer *first, const Py_buffer *last, unsigned long psn0, int ackreq_last,
                       const unsigned char *pl, Py_ssize_t mtu)
{
    uint32_t psn = (uint32_t)(psn0 + (unsigned long)i) & 0xffffffu;
    memcpy(p, (first->len && i == 0) ? first->buf : (last->len && i == count - 1) ? last->buf : hdr->buf, BTH_BYTES);
    p[8] = (ackreq_last && i == count - 1) ? 0x80 : 0;
    p[9] = (unsigned char)(psn >> 16); p[10] = (unsigned char)(psn >> 8); p[11] = (unsigned char)psn;
    memcpy(p + BTH_BYTES, pl + i * mtu, (size_t)mtu);
}

/* build_middles(out, hdr, payload, mtu, count, psn0, ackreq_last, src, dst, sport, dport, last, first, id0)
 *   -> bytes written; last / first: b"" or the 12-byte BTH template of the
 *   final / the first packet (a LAST / a FIRST); id0: the IP ID of the first
 *   segment (its place in the GSO send) */
static PyObject *build_middles(PyObject *self, PyObject *args)
{
    Py_buffer out, hdr, payload, src, dst, last = {0}, first = {0};      /* last, first: optional */
    unsigned int id0 = 0;
    Py_ssize_t mtu, count;
    unsigned long psn0;
    int ackreq_last;
    unsigned int sport, dport;
    PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "w*y*y*nnkpy*y*II|y*y*I", &out, &hdr, &payload, &mtu, &count, &psn0,
                          &ackreq_last, &src, &dst, &sport, &dport, &last, &first, &id0))
        return NULL;
    Py_ssize_t stride = BTH_BYTES + mtu + ICRC_BYTES;
    if (hdr.len != BTH_BYTES || (last.len != 0 && last.len != BTH_BYTES)
            || (first.len != 0 && first.len != BTH_BYTES)) {
        PyErr_SetString(PyExc_ValueError, "hdr (and last, first, if given) must be a 12-byte BTH");
        goto done;
    }
    if (id0 + count > 64) {
        PyErr_SetString(PyExc_ValueError, "a GSO send has at most 64 segments (id0 + count)");
        goto done;
    }
    if (check_addr(&src, "src") < 0 || check_addr(&dst, "dst") < 0)
        goto done;
    if (mtu <= 0 || (mtu & 3) || count < 1 || count > 64) {
        PyErr_SetString(PyExc_ValueError, "mtu must be a positive multiple of 4 and count 1..64");
        goto done;
    }
    if (payload.len < count * mtu || out.len < count * stride) {
        PyErr_SetString(PyExc_ValueError, "payload or out too small for count packets");
        goto done;
    }
    {
        unsigned char *o = out.buf;
        const unsigned char *pl = payload.buf;
        for (Py_ssize_t i = 0; i < count; i++) {
            unsigned char *p = o + i * stride;
            run_packet(p, i, count, &hdr, &first, &last, psn0, ackreq_last, pl, mtu);
            put_le32(p + BTH_BYTES + mtu,
                     icrc_v4(p, BTH_BYTES + mtu, id0 + (unsigned)i, src.buf, dst.buf, sport, dport));
        }
        ret = PyLong_FromSsize_t(count * stride);
    }
done:
    PyBuffer_Release(&out); PyBuffer_Release(&hdr); PyBuffer_Release(&payload);
    PyBuffer_Release(&src); PyBuffer_Release(&dst); PyBuffer_Release(&last); PyBuffer_Release(&first);
    return ret;
}

/* packet.rx_check's framing of BTH .. pad (len bytes): a known opcode,
 * TVer 0, the headers there, payload and pad as the opcode allows. */
static int framing_ok(const unsigned char *p, Py_ssize_t len)
{
    unsigned t = op_table[p[0]];
    if (!t || (p[1] & 0x0f))
        return 0;
    Py_ssize_t plen = len - (t & 0x7f);
    unsigned pad = (p[1] >> 4) & 3;
    if (plen < 0)
        return 0;
    if (t & 0x80)
        return (Py_ssize_t)pad <= plen && !(plen & 3);
    return !plen && !pad;
}

/* verify_segments(buf, n, seg, src, dst, sport, dport) -> DestQP, or -1 */
static PyObject *verify_segments(PyObject *self, PyObject *args)
{
    Py_buffer b, src, dst;
    Py_ssize_t n, seg;
    unsigned int sport, dport;
    long dqpn = -1;
    if (!PyArg_ParseTuple(args, "y*nny*y*II", &b, &n, &seg, &src, &dst, &sport, &dport))
        return NULL;
    if (check_addr(&src, "src") < 0 || check_addr(&dst, "dst") < 0 || !have_table) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "set_opcode_table() was not called");
        PyBuffer_Release(&b); PyBuffer_Release(&src); PyBuffer_Release(&dst);
        return NULL;
    }
    if (n > b.len || seg <= 0 || n <= 0)
        goto done;
    {
        const unsigned char *base = b.buf;
        long first = -1;
        unsigned k = 0;
        for (Py_ssize_t off = 0; off < n; off += seg, k++) {
            Py_ssize_t m = n - off < seg ? n - off : seg;
            if (m < BTH_BYTES + ICRC_BYTES || k >= 64)
                goto done;
            const unsigned char *p = base + off;
            Py_ssize_t len = m - ICRC_BYTES;
            if (!framing_ok(p, len))
                goto done;
            long q = (long)p[5] << 16 | (long)p[6] << 8 | p[7];
            if (first < 0)
                first = q;
            else if (q != first)
                goto done;
            if (icrc_v4(p, len, k, src.buf, dst.buf, sport, dport) != get_le32(p + len))
                goto done;
        }
        dqpn = first;
    }
done:
    PyBuffer_Release(&b); PyBuffer_Release(&src); PyBuffer_Release(&dst);
    return PyLong_FromLong(dqpn);
}

/* place_middles(buf, off, end, stride, opcode, psn, pkey, mtu, dst, dst_off, room, extra=0)
 *   -> (packets placed, PSN of the last with AckReq or -1, how many had AckReq)
 *   extra: the bytes around each packet's BTH .. ICRC in the stride (an IB
 *   packet's PACKETS length, LRH and VCRC; 0 for a GRO buffer) */
static PyObject *place_middles(PyObject *self, PyObject *args)
{
    Py_buffer b, d;
    Py_ssize_t off, end, stride, mtu, dst_off, room, extra = 0;
    unsigned int opcode, pkey;
    unsigned long psn;
    if (!PyArg_ParseTuple(args, "y*nnnIkInw*nn|n", &b, &off, &end, &stride, &opcode, &psn, &pkey, &mtu,
                          &d, &dst_off, &room, &extra))
        return NULL;
    Py_ssize_t count = 0, nacks = 0;
    long ack = -1;
    Py_ssize_t frame = BTH_BYTES + mtu + ICRC_BYTES;
    if (extra >= 0 && stride == frame + extra && mtu > 0 && off >= 0 && end <= b.len && dst_off >= 0) {
        const unsigned char *base = b.buf;
        unsigned char *dp = d.buf;
        uint32_t want = (uint32_t)psn & 0xffffffu;
        while (off + frame <= end && mtu <= room && dst_off + mtu <= d.len) {
            const unsigned char *p = base + off;
            if (p[0] != opcode || (p[1] & 0x30) || (((unsigned)p[2] << 8 | p[3]) ^ pkey) & 0x7fff)
                break;
            uint32_t got = (uint32_t)p[9] << 16 | (uint32_t)p[10] << 8 | p[11];
            if (got != want)
                break;
            memcpy(dp + dst_off, p + BTH_BYTES, (size_t)mtu);
            if (p[8] & 0x80) {
                ack = (long)got;
                nacks++;
            }
            want = (want + 1) & 0xffffffu;
            dst_off += mtu;
            room -= mtu;
            off += stride;
            count++;
        }
    }
    PyBuffer_Release(&b); PyBuffer_Release(&d);
    return Py_BuildValue("(nln)", count, ack, nacks);
}

/* icrc_v4(pkt, ident, src, dst, sport, dport) -> the 4 ICRC bytes */
static PyObject *py_icrc_v4(PyObject *self, PyObject *args)
{
    Py_buffer p, src, dst;
    unsigned int ident, sport, dport;
    PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "y*Iy*y*II", &p, &ident, &src, &dst, &sport, &dport))
        return NULL;
    if (check_addr(&src, "src") == 0 && check_addr(&dst, "dst") == 0) {
        if (p.len < BTH_BYTES) {
            PyErr_SetString(PyExc_ValueError, "a packet starts with a 12-byte BTH");
        } else {
            unsigned char out[ICRC_BYTES];
            put_le32(out, icrc_v4(p.buf, p.len, ident & 0xffff, src.buf, dst.buf, sport, dport));
            ret = PyBytes_FromStringAndSize((const char *)out, ICRC_BYTES);
        }
    }
    PyBuffer_Release(&p); PyBuffer_Release(&src); PyBuffer_Release(&dst);
    return ret;
}

static PyObject *vcrc_call(PyObject *args, uint16_t (*loop)(const uint8_t *, ptrdiff_t))
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b))
        return NULL;
    uint16_t c = loop(b.buf, b.len);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(c);
}

static PyObject *py_vcrc_table(PyObject *self, PyObject *args) { return vcrc_call(args, vcrc_of_table); }

static PyObject *py_vcrc(PyObject *self, PyObject *args) { return vcrc_call(args, vcrc_of); }

/* -- native InfiniBand packets (wire/lrh.py) ------------------------------- */

#define LRH_BYTES 8
#define GRH_BYTES 40
#define VCRC_BYTES 2
#define PLEN_BYTES 2                   /* a PACKETS entry's be16 length (wire/fabriclink.py) */
#define PACKETS_HDR 4

/* The CRC-32 of an IB packet's LRH (and GRH) with the variant fields as ones. */
static uint32_t ib_head_crc(const unsigned char *lrh, const unsigned char *grh)
{
    unsigned char h[LRH_BYTES + GRH_BYTES];
    memcpy(h, lrh, LRH_BYTES);
    h[0] |= 0xF0;                                          /* VL */
    Py_ssize_t n = LRH_BYTES;
    if (grh) {
        memcpy(h + n, grh, GRH_BYTES);
        h[n] |= 0x0F; h[n + 1] = h[n + 2] = h[n + 3] = 0xFF;   /* TClass, FlowLabel */
        h[n + 7] = 0xFF;                                   /* HopLmt */
        n += GRH_BYTES;
    }
    return crc_fn(0, h, (uint64_t)n);
}

/* The ICRC of BTH .. pad (len bytes) after a head whose CRC is seed. */
static uint32_t ib_icrc(uint32_t seed, const unsigned char *p, Py_ssize_t len)
{
    static const unsigned char ff = 0xFF;
    uint32_t c = crc_fn(seed, p, 4);
    c = crc_fn(c, &ff, 1);                                 /* resv8a (FECN, BECN) */
    return crc_fn(c, p + 5, (uint64_t)(len - 5));
}

/* ib_build_run(hdr, payload, mtu, run_count, start, count, psn0, ackreq_last, last, first, lrh, grh)
 *   -> bytes: packets start .. start+count-1 of a SegmentRun of run_count
 *   packets as PACKETS entries (be16 length, LRH, GRH if not empty, BTH,
 *   payload, ICRC, VCRC); lrh / grh: the templates every packet of the run
 *   shares (PktLen and PayLen already set). */
static PyObject *ib_build_run(PyObject *self, PyObject *args)
{
    Py_buffer hdr, payload, last, first, lrh, grh;
    Py_ssize_t mtu, run_count, start, count;
    unsigned long psn0;
    int ackreq_last;
    PyObject *ret = NULL;
    if (!PyArg_ParseTuple(args, "y*y*nnnnkpy*y*y*y*", &hdr, &payload, &mtu, &run_count, &start, &count, &psn0,
                          &ackreq_last, &last, &first, &lrh, &grh))
        return NULL;
    if (hdr.len != BTH_BYTES || (last.len != 0 && last.len != BTH_BYTES)
            || (first.len != 0 && first.len != BTH_BYTES) || lrh.len != LRH_BYTES
            || (grh.len != 0 && grh.len != GRH_BYTES)) {
        PyErr_SetString(PyExc_ValueError, "hdr (last, first) a 12-byte BTH, lrh 8 bytes, grh empty or 40 bytes");
        goto done;
    }
    if (mtu <= 0 || (mtu & 3) || start < 0 || count < 1 || start + count > run_count
            || payload.len < run_count * mtu) {
        PyErr_SetString(PyExc_ValueError, "mtu a positive multiple of 4, start + count within the run and its payload");
        goto done;
    }
    {
        Py_ssize_t head = LRH_BYTES + grh.len;
        Py_ssize_t frame = head + BTH_BYTES + mtu + ICRC_BYTES + VCRC_BYTES;
        if (frame > 0xFFFF) {
            PyErr_SetString(PyExc_ValueError, "a packet over 64 KiB");
            goto done;
        }
        Py_ssize_t stride = PLEN_BYTES + frame;
        ret = PyBytes_FromStringAndSize(NULL, count * stride);
        if (!ret)
            goto done;
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(ret);
        uint32_t seed = ib_head_crc(lrh.buf, grh.len ? grh.buf : NULL);
        const unsigned char *pl = payload.buf;
        for (Py_ssize_t j = 0; j < count; j++) {
            Py_ssize_t i = start + j;
            unsigned char *e = o + j * stride;
            e[0] = (unsigned char)(frame >> 8); e[1] = (unsigned char)frame;
            unsigned char *f = e + PLEN_BYTES;
            memcpy(f, lrh.buf, LRH_BYTES);
            if (grh.len)
                memcpy(f + LRH_BYTES, grh.buf, GRH_BYTES);
            unsigned char *p = f + head;
            run_packet(p, i, run_count, &hdr, &first, &last, psn0, ackreq_last, pl, mtu);
            put_le32(p + BTH_BYTES + mtu, ib_icrc(seed, p, BTH_BYTES + mtu));
            uint16_t v = vcrc_of(f, frame - VCRC_BYTES);
            f[frame - 2] = (unsigned char)v; f[frame - 1] = (unsigned char)(v >> 8);
        }
    }
done:
    PyBuffer_Release(&hdr); PyBuffer_Release(&payload); PyBuffer_Release(&last); PyBuffer_Release(&first);
    PyBuffer_Release(&lrh); PyBuffer_Release(&grh);
    return ret;
}

/* ib_verify_packets(msg, lid, lmc_mask) -> (DestQP, ((offset, stride, count), ...)), or None
 *   A whole PACKETS message checked for the QP's run path: every packet LRH
 *   only (LNH IBA local), its PktLen its length, VCRC and ICRC good, to the
 *   unicast DLID lid (within the LMC), well framed (rx_check), and all for
 *   one DestQP, P_Key, DLID, SLID, SL, VL.  The groups: the runs of entries
 *   of one length (offset of the first entry's be16 length, the entries'
 *   stride, how many).  None when anything differs: the packet-by-packet
 *   path takes it. */
static PyObject *ib_verify_packets(PyObject *self, PyObject *args)
{
    Py_buffer b;
    unsigned int lid, lmc_mask;
    PyObject *groups = NULL, *ret = NULL;
    if (!PyArg_ParseTuple(args, "y*II", &b, &lid, &lmc_mask))
        return NULL;
    if (!have_table) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_RuntimeError, "set_opcode_table() was not called");
        return NULL;
    }
    {
        const unsigned char *m = b.buf;
        Py_ssize_t end = b.len;
        if (end < PACKETS_HDR)
            goto done;
        unsigned n = (unsigned)m[2] << 8 | m[3];
        Py_ssize_t o = PACKETS_HDR, g_off = -1, g_len = -1, g_cnt = 0;
        long first = -1;
        const unsigned char *f0 = NULL;
        if (n == 0)
            goto done;
        groups = PyList_New(0);
        if (!groups)
            goto done;
        for (unsigned k = 0; k < n; k++) {
            if (o + PLEN_BYTES > end)
                goto done;
            Py_ssize_t len = (Py_ssize_t)m[o] << 8 | m[o + 1];
            if (o + PLEN_BYTES + len > end || len < LRH_BYTES + BTH_BYTES + ICRC_BYTES + VCRC_BYTES)
                goto done;
            if (len != g_len) {
                if (g_cnt) {
                    PyObject *g = Py_BuildValue("(nnn)", g_off, g_len + PLEN_BYTES, g_cnt);
                    if (!g || PyList_Append(groups, g) < 0) {
                        Py_XDECREF(g);
                        goto done;
                    }
                    Py_DECREF(g);
                }
                g_off = o; g_len = len; g_cnt = 0;
            }
            g_cnt++;
            const unsigned char *f = m + o + PLEN_BYTES;
            o += PLEN_BYTES + len;
            unsigned plen = ((unsigned)f[4] << 8 | f[5]) & 0x7FF;
            unsigned dlid = (unsigned)f[2] << 8 | f[3];
            if ((Py_ssize_t)(plen << 2) + VCRC_BYTES != len || (f[1] & 3) != 2 || dlid >= 0xC000
                    || (dlid & ~lmc_mask & 0xFFFF) != lid)
                goto done;
            if (f0 == NULL)
                f0 = f;
            else if (f[0] != f0[0] || f[1] != f0[1] || memcmp(f + 2, f0 + 2, 2) || memcmp(f + 6, f0 + 6, 2))
                goto done;                                  /* VL, SL, DLID, SLID */
            const unsigned char *p = f + LRH_BYTES;
            Py_ssize_t plen_b = len - LRH_BYTES - ICRC_BYTES - VCRC_BYTES;     /* BTH .. pad */
            if (!framing_ok(p, plen_b))
                goto done;
            long q = (long)p[5] << 16 | (long)p[6] << 8 | p[7];
            if (first < 0)
                first = q;
            else if (q != first || memcmp(p + 2, f0 + LRH_BYTES + 2, 2))
                goto done;                                  /* DestQP, P_Key */
            uint16_t v = vcrc_of(f, len - VCRC_BYTES);
            if (f[len - 2] != (unsigned char)v || f[len - 1] != (unsigned char)(v >> 8))
                goto done;
            if (ib_icrc(ib_head_crc(f, NULL), p, plen_b) != get_le32(p + plen_b))
                goto done;
        }
        if (o != end)
            goto done;
        PyObject *g = Py_BuildValue("(nnn)", g_off, g_len + PLEN_BYTES, g_cnt);
        if (!g || PyList_Append(groups, g) < 0) {
            Py_XDECREF(g);
            goto done;
        }
        Py_DECREF(g);
        PyObject *t = PyList_AsTuple(groups);
        if (t)
            ret = Py_BuildValue("(lN)", first, t);
    }
done:
    PyBuffer_Release(&b);
    Py_XDECREF(groups);
    if (ret == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return ret;
}

static PyMethodDef methods[] = {
    {"vcrc", py_vcrc, METH_VARARGS, "vcrc(data): the InfiniBand VCRC of LRH .. ICRC."},
    {"vcrc_table", py_vcrc_table, METH_VARARGS, "vcrc_table(data): the same VCRC by the table alone (for the tests)."},
    {"set_crc32", set_crc32, METH_VARARGS, "Use the CRC-32 at this address (0: zlib's)."},
    {"set_opcode_table", set_opcode_table, METH_VARARGS, "The opcode table verify_segments checks framing with."},
    {"crc32", py_crc32, METH_VARARGS, "crc32(data, value=0): the CRC-32 in use."},
    {"build_middles", build_middles, METH_VARARGS, "A run of MIDDLE packets as GSO segments."},
    {"verify_segments", verify_segments, METH_VARARGS, "Check a GRO buffer; its DestQP or -1."},
    {"place_middles", place_middles, METH_VARARGS, "Place in-order MIDDLE packets."},
    {"ib_build_run", ib_build_run, METH_VARARGS, "A SegmentRun's packets as native IB PACKETS entries."},
    {"ib_verify_packets", ib_verify_packets, METH_VARARGS, "Check a PACKETS message whole; (DestQP, groups) or None."},
    {"icrc_v4", py_icrc_v4, METH_VARARGS, "One packet's ICRC bytes for an IPv4 flow and IP ID."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_fastpath",
    "The compiled per-packet loops of the RoCEv2 data path (see softrdma.wire.fastpath).",
    -1, methods,
};

PyMODINIT_FUNC PyInit__fastpath(void)
{
    compute_seed();
    vcrc_init();
    return PyModule_Create(&module);
}
