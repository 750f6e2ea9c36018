/* The VCRC of softrdma.wire._fastpath (_vcrc.c). */
#ifndef SOFTRDMA_VCRC_H
#define SOFTRDMA_VCRC_H
#include <stddef.h>
#include <stdint.h>

#define VCRC_API __attribute__((visibility("hidden")))

VCRC_API void vcrc_init(void);                                  /* once, before the others */
VCRC_API uint16_t vcrc_of(const uint8_t *d, ptrdiff_t n);       /* the fastest loop the CPU allows */
VCRC_API uint16_t vcrc_of_table(const uint8_t *d, ptrdiff_t n); /* the table loop alone */

#endif
