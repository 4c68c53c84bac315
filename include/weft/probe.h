/* weft probes: WEFT_PROBE(provider, name, args...) marks a point in a C or
 * C++ program that weft (weft run/attach --trace usdt:provider:name), bpftrace,
 * SystemTap and perf can trace.
 *
 * The site is a single 5-byte nop (nopl 0x0(%rax,%rax,1), written as bytes so
 * the assembler cannot shorten it): off, it costs that nop; weft splices it as
 * one instruction. A standard .note.stapsdt entry
 * (SystemTap's v3 format) describes the site and its arguments; there is no
 * semaphore. Up to 12 integer or pointer arguments, each passed as a signed
 * 64-bit value (described as -8@OPERAND).
 *
 *     #include <weft/probe.h>
 *     WEFT_PROBE(myapp, request_done, id, bytes, elapsed_ns);
 */
#ifndef WEFT_PROBE_H
#define WEFT_PROBE_H

#define _WEFT_STR(x) #x
#define _WEFT_XSTR(x) _WEFT_STR(x)

/* The note and, once per object file, the .stapsdt.base section that readers
 * use to correct addresses of prelinked files. */
#define _WEFT_NOTE(provider, name, argfmt)                                             \
    "990: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00\n"                                                 \
    ".pushsection .note.stapsdt,\"\",\"note\"\n"                                      \
    ".balign 4\n"                                                                   \
    ".4byte 992f-991f, 994f-993f, 3\n"                                              \
    "991: .asciz \"stapsdt\"\n"                                                     \
    "992: .balign 4\n"                                                              \
    "993: .8byte 990b\n"                                                            \
    ".8byte _.stapsdt.base\n"                                                       \
    ".8byte 0\n"                                                                    \
    ".asciz \"" _WEFT_XSTR(provider) "\"\n"                                         \
    ".asciz \"" _WEFT_XSTR(name) "\"\n"                                             \
    ".asciz \"" argfmt "\"\n"                                                       \
    "994: .balign 4\n"                                                              \
    ".popsection\n"                                                                 \
    ".ifndef _.stapsdt.base\n"                                                      \
    ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat\n"          \
    ".weak _.stapsdt.base\n"                                                        \
    ".hidden _.stapsdt.base\n"                                                      \
    "_.stapsdt.base: .space 1\n"                                                    \
    ".size _.stapsdt.base, 1\n"                                                     \
    ".popsection\n"                                                                 \
    ".endif\n"

#define _WEFT_PROBE0(provider, name) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "") : : )

#define _WEFT_PROBE1(provider, name, x1) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1]") : : [a1] "nor"((long)(x1)))

#define _WEFT_PROBE2(provider, name, x1, x2) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)))

#define _WEFT_PROBE3(provider, name, x1, x2, x3) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)))

#define _WEFT_PROBE4(provider, name, x1, x2, x3, x4) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)))

#define _WEFT_PROBE5(provider, name, x1, x2, x3, x4, x5) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4] -8@%[a5]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)), [a5] "nor"((long)(x5)))

#define _WEFT_PROBE6(provider, name, x1, x2, x3, x4, x5, x6) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4] -8@%[a5] -8@%[a6]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)), [a5] "nor"((long)(x5)), [a6] "nor"((long)(x6)))

#define _WEFT_PROBE7(provider, name, x1, x2, x3, x4, x5, x6, x7) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4] -8@%[a5] -8@%[a6] -8@%[a7]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)), [a5] "nor"((long)(x5)), [a6] "nor"((long)(x6)), [a7] "nor"((long)(x7)))

#define _WEFT_PROBE8(provider, name, x1, x2, x3, x4, x5, x6, x7, x8) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4] -8@%[a5] -8@%[a6] -8@%[a7] -8@%[a8]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)), [a5] "nor"((long)(x5)), [a6] "nor"((long)(x6)), [a7] "nor"((long)(x7)), [a8] "nor"((long)(x8)))

#define _WEFT_PROBE9(provider, name, x1, x2, x3, x4, x5, x6, x7, x8, x9) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4] -8@%[a5] -8@%[a6] -8@%[a7] -8@%[a8] -8@%[a9]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)), [a5] "nor"((long)(x5)), [a6] "nor"((long)(x6)), [a7] "nor"((long)(x7)), [a8] "nor"((long)(x8)), [a9] "nor"((long)(x9)))

#define _WEFT_PROBE10(provider, name, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4] -8@%[a5] -8@%[a6] -8@%[a7] -8@%[a8] -8@%[a9] -8@%[a10]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)), [a5] "nor"((long)(x5)), [a6] "nor"((long)(x6)), [a7] "nor"((long)(x7)), [a8] "nor"((long)(x8)), [a9] "nor"((long)(x9)), [a10] "nor"((long)(x10)))

#define _WEFT_PROBE11(provider, name, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4] -8@%[a5] -8@%[a6] -8@%[a7] -8@%[a8] -8@%[a9] -8@%[a10] -8@%[a11]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)), [a5] "nor"((long)(x5)), [a6] "nor"((long)(x6)), [a7] "nor"((long)(x7)), [a8] "nor"((long)(x8)), [a9] "nor"((long)(x9)), [a10] "nor"((long)(x10)), [a11] "nor"((long)(x11)))

#define _WEFT_PROBE12(provider, name, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12) \
    __asm__ __volatile__(_WEFT_NOTE(provider, name, "-8@%[a1] -8@%[a2] -8@%[a3] -8@%[a4] -8@%[a5] -8@%[a6] -8@%[a7] -8@%[a8] -8@%[a9] -8@%[a10] -8@%[a11] -8@%[a12]") : : [a1] "nor"((long)(x1)), [a2] "nor"((long)(x2)), [a3] "nor"((long)(x3)), [a4] "nor"((long)(x4)), [a5] "nor"((long)(x5)), [a6] "nor"((long)(x6)), [a7] "nor"((long)(x7)), [a8] "nor"((long)(x8)), [a9] "nor"((long)(x9)), [a10] "nor"((long)(x10)), [a11] "nor"((long)(x11)), [a12] "nor"((long)(x12)))

/* WEFT_PROBE's variable part is the name followed by the arguments, never
 * empty, so counting it needs no __VA_OPT__: 1 to 13 items pick
 * _WEFT_PROBE0 to _WEFT_PROBE12. */
#define _WEFT_NTH(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, n, ...) n
#define _WEFT_COUNT(...) _WEFT_NTH(__VA_ARGS__, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, -)
#define _WEFT_CAT(a, b) a##b
#define _WEFT_PICK(n) _WEFT_CAT(_WEFT_PROBE, n)

/* WEFT_PROBE(provider, name, args...) */
#define WEFT_PROBE(provider, ...) _WEFT_PICK(_WEFT_COUNT(__VA_ARGS__))(provider, __VA_ARGS__)

#endif
