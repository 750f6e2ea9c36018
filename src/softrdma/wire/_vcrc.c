/* softrdma.wire._fastpath's VCRC: the InfiniBand VCRC (CRC-16, polynomial
 * 0x100B, seed 0xFFFF, reflected, inverted) of a native IB packet's LRH ..
 * ICRC -- by the sliced table, or by carry-less multiplication where the
 * CPU has it (asked once, in vcrc_init). */
#include <stddef.h>
#include <stdint.h>
#include "_vcrc.h"

/* vcrc(data) -> int: the InfiniBand VCRC (CRC-16, polynomial 0x100B, seed
 * 0xFFFF, reflected, inverted) of a native IB packet's LRH .. ICRC. */
static uint16_t vcrc_table[16][256];     /* slicing by 16 */

static void vcrc_table_init(void)
{
    for (unsigned i = 0; i < 256; i++) {
        uint16_t c = (uint16_t)i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (uint16_t)((c >> 1) ^ 0xD008) : (uint16_t)(c >> 1);
        vcrc_table[0][i] = c;
    }
    for (unsigned i = 0; i < 256; i++)
        for (int t = 1; t < 16; t++)
            vcrc_table[t][i] = (uint16_t)((vcrc_table[t - 1][i] >> 8) ^ vcrc_table[0][vcrc_table[t - 1][i] & 0xFF]);
}

/* From state c (no final inversion): the table's bytewise CRC. */
static uint16_t vcrc_table_run(uint16_t c, const uint8_t *d, ptrdiff_t n)
{
    while (n >= 16) {
        c = (uint16_t)(vcrc_table[15][(d[0] ^ c) & 0xFF] ^ vcrc_table[14][(d[1] ^ (c >> 8)) & 0xFF]
                       ^ vcrc_table[13][d[2]] ^ vcrc_table[12][d[3]] ^ vcrc_table[11][d[4]]
                       ^ vcrc_table[10][d[5]] ^ vcrc_table[9][d[6]] ^ vcrc_table[8][d[7]]
                       ^ vcrc_table[7][d[8]] ^ vcrc_table[6][d[9]] ^ vcrc_table[5][d[10]]
                       ^ vcrc_table[4][d[11]] ^ vcrc_table[3][d[12]] ^ vcrc_table[2][d[13]]
                       ^ vcrc_table[1][d[14]] ^ vcrc_table[0][d[15]]);
        d += 16;
        n -= 16;
    }
    while (n >= 8) {
        c = (uint16_t)(vcrc_table[7][(d[0] ^ c) & 0xFF] ^ vcrc_table[6][(d[1] ^ (c >> 8)) & 0xFF]
                       ^ vcrc_table[5][d[2]] ^ vcrc_table[4][d[3]] ^ vcrc_table[3][d[4]]
                       ^ vcrc_table[2][d[5]] ^ vcrc_table[1][d[6]] ^ vcrc_table[0][d[7]]);
        d += 8;
        n -= 8;
    }
    while (n-- > 0)
        c = (uint16_t)((c >> 8) ^ vcrc_table[0][(c ^ *d++) & 0xFF]);
    return c;
}


#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* Carry-less multiplication (PCLMULQDQ), folding 64 bytes a step in four
 * 128-bit lanes.  A lane holds 16 message bytes as loaded (little-endian,
 * the CRC being reflected: bit i of the register is the coefficient of
 * x^(127-i)), so its low quadword is the high-degree half.  Moving a lane
 * D bits further: lo * (x^(64+D-1) mod P) xor hi * (x^(D-1) mod P) -- each
 * constant stored reflected in the high bits of a quadword, the "-1"
 * absorbing the one-bit offset of a reflected product.  What is left, a
 * 128-bit remainder congruent to the message so far, goes through the
 * table as 16 bytes (from state 0: the seed went into the first bytes). */
static __m128i vcrc_k512, vcrc_k384, vcrc_k256, vcrc_k128;
static int vcrc_pclmul;

static uint64_t vcrc_xpow(unsigned e)        /* x^e mod P, reflected into the top 16 bits of a quadword */
{
    uint32_t r = 1;                           /* normal order: bit d = x^d; P = x^16 + 0x100B */
    for (unsigned i = 0; i < e; i++) {
        r <<= 1;
        if (r & 0x10000)
            r ^= 0x1100B;
    }
    uint64_t k = 0;
    for (unsigned d = 0; d < 16; d++)
        if (r >> d & 1)
            k |= 1ULL << (63 - d);
    return k;
}

static __m128i vcrc_k(unsigned bits)
{
    return _mm_set_epi64x((long long)vcrc_xpow(bits - 1), (long long)vcrc_xpow(64 + bits - 1));
}

__attribute__((target("pclmul,sse2")))
static inline __m128i vcrc_fold(__m128i x, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* Four lanes (the last 64 bytes folded so far) and what follows them (n < 64
 * bytes) to the VCRC. */
__attribute__((target("pclmul,sse2")))
static uint16_t vcrc_finish(__m128i x0, __m128i x1, __m128i x2, __m128i x3, const uint8_t *d, ptrdiff_t n)
{
    __m128i x = _mm_xor_si128(_mm_xor_si128(vcrc_fold(x0, vcrc_k384), vcrc_fold(x1, vcrc_k256)),
                              _mm_xor_si128(vcrc_fold(x2, vcrc_k128), x3));
    while (n >= 16) {
        x = _mm_xor_si128(vcrc_fold(x, vcrc_k128), _mm_loadu_si128((const __m128i *)d));
        d += 16;
        n -= 16;
    }
    uint8_t rem[16];
    _mm_storeu_si128((__m128i *)rem, x);
    uint16_t c = vcrc_table_run(0, rem, 16);
    return (uint16_t)(vcrc_table_run(c, d, n) ^ 0xFFFF);
}

/* The same folds four 128-bit lanes at a time in a 512-bit register
 * (VPCLMULQDQ), four such registers: 256 bytes a step. */
static int vcrc_vpclmul;
static uint64_t vcrc_kz[4][2];               /* (lo, hi) constants for 512, 1024, 1536 and 2048 bits */

__attribute__((target("avx512f,vpclmulqdq")))
static inline __m512i vcrc_fold512(__m512i x, __m512i k)
{
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11));
}

__attribute__((target("avx512f,vpclmulqdq")))
static uint16_t vcrc_vclmul(const uint8_t *d, ptrdiff_t n)   /* n >= 256 */
{
    __m512i k2048 = _mm512_set_epi64((long long)vcrc_kz[3][1], (long long)vcrc_kz[3][0], (long long)vcrc_kz[3][1],
                                     (long long)vcrc_kz[3][0], (long long)vcrc_kz[3][1], (long long)vcrc_kz[3][0],
                                     (long long)vcrc_kz[3][1], (long long)vcrc_kz[3][0]);
    __m512i y0 = _mm512_xor_si512(_mm512_loadu_si512(d), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, 0xFFFF));
    __m512i y1 = _mm512_loadu_si512(d + 64);
    __m512i y2 = _mm512_loadu_si512(d + 128);
    __m512i y3 = _mm512_loadu_si512(d + 192);
    d += 256;
    n -= 256;
    while (n >= 256) {
        y0 = _mm512_xor_si512(vcrc_fold512(y0, k2048), _mm512_loadu_si512(d));
        y1 = _mm512_xor_si512(vcrc_fold512(y1, k2048), _mm512_loadu_si512(d + 64));
        y2 = _mm512_xor_si512(vcrc_fold512(y2, k2048), _mm512_loadu_si512(d + 128));
        y3 = _mm512_xor_si512(vcrc_fold512(y3, k2048), _mm512_loadu_si512(d + 192));
        d += 256;
        n -= 256;
    }
#define VCRC_KZ(i) _mm512_set_epi64((long long)vcrc_kz[i][1], (long long)vcrc_kz[i][0], (long long)vcrc_kz[i][1], \
                                    (long long)vcrc_kz[i][0], (long long)vcrc_kz[i][1], (long long)vcrc_kz[i][0], \
                                    (long long)vcrc_kz[i][1], (long long)vcrc_kz[i][0])
    __m512i k512 = VCRC_KZ(0);
    __m512i y = _mm512_xor_si512(_mm512_xor_si512(vcrc_fold512(y0, VCRC_KZ(2)), vcrc_fold512(y1, VCRC_KZ(1))),
                                 _mm512_xor_si512(vcrc_fold512(y2, k512), y3));
#undef VCRC_KZ
    while (n >= 64) {
        y = _mm512_xor_si512(vcrc_fold512(y, k512), _mm512_loadu_si512(d));
        d += 64;
        n -= 64;
    }
    return vcrc_finish(_mm512_extracti32x4_epi32(y, 0), _mm512_extracti32x4_epi32(y, 1),
                       _mm512_extracti32x4_epi32(y, 2), _mm512_extracti32x4_epi32(y, 3), d, n);
}

__attribute__((target("pclmul,sse2")))
static uint16_t vcrc_clmul(const uint8_t *d, ptrdiff_t n)   /* n >= 64 */
{
    __m128i seed = _mm_cvtsi32_si128(0xFFFF);
    __m128i x0 = _mm_xor_si128(_mm_loadu_si128((const __m128i *)d), seed);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(d + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(d + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(d + 48));
    d += 64;
    n -= 64;
    while (n >= 64) {
        x0 = _mm_xor_si128(vcrc_fold(x0, vcrc_k512), _mm_loadu_si128((const __m128i *)d));
        x1 = _mm_xor_si128(vcrc_fold(x1, vcrc_k512), _mm_loadu_si128((const __m128i *)(d + 16)));
        x2 = _mm_xor_si128(vcrc_fold(x2, vcrc_k512), _mm_loadu_si128((const __m128i *)(d + 32)));
        x3 = _mm_xor_si128(vcrc_fold(x3, vcrc_k512), _mm_loadu_si128((const __m128i *)(d + 48)));
        d += 64;
        n -= 64;
    }
    return vcrc_finish(x0, x1, x2, x3, d, n);
}

static void vcrc_clmul_init(void)
{
    __builtin_cpu_init();
    vcrc_pclmul = __builtin_cpu_supports("pclmul");
    vcrc_vpclmul = vcrc_pclmul && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
    for (int i = 0; i < 4; i++) {
        unsigned bits = 512 * (unsigned)(i + 1);
        vcrc_kz[i][0] = vcrc_xpow(64 + bits - 1);
        vcrc_kz[i][1] = vcrc_xpow(bits - 1);
    }
    vcrc_k512 = vcrc_k(512);
    vcrc_k384 = vcrc_k(384);
    vcrc_k256 = vcrc_k(256);
    vcrc_k128 = vcrc_k(128);
}
#else
static const int vcrc_pclmul = 0, vcrc_vpclmul = 0;
static uint16_t vcrc_clmul(const uint8_t *d, ptrdiff_t n) { (void)d; (void)n; return 0; }
static uint16_t vcrc_vclmul(const uint8_t *d, ptrdiff_t n) { (void)d; (void)n; return 0; }
static void vcrc_clmul_init(void) {}
#endif

VCRC_API uint16_t vcrc_of(const uint8_t *d, ptrdiff_t n)
{
    if (n >= 256 && vcrc_vpclmul)
        return vcrc_vclmul(d, n);
    if (n >= 64 && vcrc_pclmul)
        return vcrc_clmul(d, n);
    return (uint16_t)(vcrc_table_run(0xFFFF, d, n) ^ 0xFFFF);
}

VCRC_API uint16_t vcrc_of_table(const uint8_t *d, ptrdiff_t n)
{
    return (uint16_t)(vcrc_table_run(0xFFFF, d, n) ^ 0xFFFF);
}

VCRC_API void vcrc_init(void)
{
    vcrc_table_init();
    vcrc_clmul_init();
}
