/* What one witness store costs when a loop makes them one after another,
 * in the forms weft can use (docs/paths.md, "Stores in restartable
 * sequences"): xadd on the cursor, plain moves on it, and plain moves in
 * an armed restartable sequence. The cursor is a word at gs:0, as weft's
 * is at fs:0x40. Prints ns per store for each form.
 * Build: cc -O2 -o store_chain store_chain.c   (glibc 2.35 or later)  */
#define _GNU_SOURCE
#include <asm/prctl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/rseq.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 16];
long cursor;
struct cs { uint32_t version, flags; uint64_t start, post_commit_offset, abort_ip; } __attribute__((aligned(32)));
struct cs section;
extern char sec_abort[], sec_start[], sec_commit[];

static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }

#define ROUNDS 100000L
#define STORES 1000L

static double run(int form) {
    long field = __rseq_offset + 8;
    double t0 = now();
    for (long r = 0; r < ROUNDS; r++) {
        long n = STORES;
        cursor = (long)buf;
        if (form == 0)
            __asm__ volatile("1: mov $1,%%eax\n xadd %%rax,%%gs:0\n movb $3,(%%rax)\n dec %0\n jnz 1b\n"
                             : "+r"(n) : : "rax", "memory", "cc");
        else if (form == 1)
            __asm__ volatile("1: mov %%gs:0,%%rax\n addq $1,%%gs:0\n movb $3,(%%rax)\n dec %0\n jnz 1b\n"
                             : "+r"(n) : : "rax", "memory", "cc");
        else
            __asm__ volatile("1: .byte 0x0f,0x1f,0x80,0x53,0x30,0x05,0x53\n"
                             "sec_abort: lea section(%%rip),%%rax\n"
                             "sec_start: mov %%rax,%%fs:(%1)\n mov %%gs:0,%%rax\n addq $1,%%gs:0\n"
                             "sec_commit: movb $3,(%%rax)\n dec %0\n jnz 1b\n"
                             : "+r"(n) : "r"(field) : "rax", "memory", "cc");
    }
    return (now() - t0) * 1e9 / (ROUNDS * STORES);
}

int main(void) {
    syscall(SYS_arch_prctl, ARCH_SET_GS, (unsigned long)&cursor);
    section.start = (uint64_t)sec_start;
    section.post_commit_offset = sec_commit - sec_start;
    section.abort_ip = (uint64_t)sec_abort;
    if (__rseq_size == 0) { fprintf(stderr, "store_chain: glibc registered no restartable sequence\n"); return 1; }
    const char *names[] = {"xadd fs:[cursor]", "mov; add fs:[cursor]", "restartable (weft)"};
    for (int pass = 0; pass < 3; pass++)
        for (int form = 0; form < 3; form++)
            printf("%-22s %.2f ns a store\n", names[form], run(form));
    return 0;
}
