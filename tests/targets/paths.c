/* Control flow for abstract execution: loops, recursion, a switch, calls through
 * pointers (one a tail call), a callback from libc (qsort), early returns, longjmp out of
 * recursion, signal handlers (one of them leaving by siglongjmp), an
 * interpreter dispatching by computed goto. Prints a tally the tests check
 * against. */
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long tally;
/* classify's own address, taken inside classify (a RIP-relative lea into
 * the function itself): under --paths it must still be the original's. */
static void *volatile seen;

__attribute__((noinline)) int classify(int x) {
    if (x == 4) seen = (void *)classify;
    if (x % 15 == 0) return 3;
    if (x % 5 == 0) return 2;
    if (x % 3 == 0) return 1;
    return 0;
}

__attribute__((noinline)) long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

__attribute__((noinline)) int by_cmp(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

__attribute__((noinline)) long twice(long v) { tally++; return 2 * v; }
__attribute__((noinline)) long thrice(long v) { tally++; return 3 * v; }

/* A tail call through a pointer: at -O2, `jmp *%rdi` once its frame is
 * gone. */
__attribute__((noinline)) long apply(long (*f)(long), long v) {
    if (v > 700000) v -= 700000;
    return f(v);
}

/* Shorter than a 5-byte jump at -O2 (`orl $1, (%rdi); ret`): its entry's
 * jump covers the padding after it. Called directly and through a pointer. */
__attribute__((noinline)) void mark(int *p) { *p |= 1; }
static void (*volatile marker)(int *) = mark;

/* A switch whose table weft cannot find: its address is loaded from memory,
 * not computed by a `lea`. weft dispatches it by a search over every
 * instruction of the function. */
long hidden_switch(long op, long v);
__asm__(".text\n"
        ".globl hidden_switch\n"
        ".type hidden_switch, @function\n"
        "hidden_switch:\n"
        "  and $3, %rdi\n"
        "  mov hidden_table_at(%rip), %rdx\n"
        "  movslq (%rdx,%rdi,4), %rax\n"
        "  add %rdx, %rax\n"
        "  jmp *%rax\n"
        "1: lea 1(%rsi), %rax\n"
        "  ret\n"
        "2: lea (%rsi,%rsi,2), %rax\n"
        "  ret\n"
        "3: mov %rsi, %rax\n"
        "  neg %rax\n"
        "  ret\n"
        "4: mov %rsi, %rax\n"
        "  shr $1, %rax\n"
        "  ret\n"
        ".size hidden_switch, .-hidden_switch\n"
        ".section .rodata\n"
        ".p2align 2\n"
        "hidden_table:\n"
        "  .long 1b - hidden_table, 2b - hidden_table, 3b - hidden_table, 4b - hidden_table\n"
        ".section .data.rel.ro, \"aw\"\n"
        ".p2align 3\n"
        "hidden_table_at: .quad hidden_table\n"
        ".text\n");

/* A dense switch: a jump table at -O2. */
__attribute__((noinline)) long dispatch(int op, long v) {
    switch (op) {
    case 0: return v + 1;
    case 1: return v * 3;
    case 2: return v - 7;
    case 3: return v ^ 0x55;
    case 4: return v << 1;
    case 5: return v >> 1;
    case 6: return v % 13;
    case 7: return -v;
    default: return v;
    }
}

__attribute__((noinline)) long work(int n) {
    long (*ops[2])(long) = {twice, thrice};
    long s = 0;
    for (int i = 0; i < n; i++) {
        s += classify(i);
        s = apply(ops[i & 1], s) % 1000003;
        s = dispatch(i % 9, s) % 1000003;
        if (s < 0) s = -s;
        s = hidden_switch(i, s) % 1000003;
        if (s < 0) s = -s;
        int flags = i & 2;
        if (i & 4) mark(&flags);
        else marker(&flags);
        tally += flags;
        if (s > 500000 && i % 7 == 0) continue;
    }
    return s;
}

static jmp_buf escape;

/* Recurses `depth` frames, then longjmps out of all of them. */
__attribute__((noinline)) void dive(int depth) {
    if (depth == 0) longjmp(escape, depth + 1);
    dive(depth - 1);
    tally += 1000;
}

__attribute__((noinline)) int bail_out(int depth) {
    if (setjmp(escape)) return 1;
    dive(depth);
    return 0;
}

static volatile sig_atomic_t signals;
static sigjmp_buf out_of_handler;

__attribute__((noinline)) void on_signal(int sig) {
    if (sig == SIGUSR1) signals++;
    else signals += 10;
}

__attribute__((noinline)) void on_signal_leave(int sig) {
    (void)sig;
    signals += 100;
    siglongjmp(out_of_handler, 1);
}

__attribute__((noinline)) int handlers(void) {
    signal(SIGUSR1, on_signal);
    signal(SIGUSR2, on_signal);
    raise(SIGUSR1);
    kill(getpid(), SIGUSR2);
    signal(SIGUSR1, on_signal_leave);
    if (sigsetjmp(out_of_handler, 1) == 0) {
        raise(SIGUSR1);
        signals += 1000;
    }
    return signals;
}

/* A little interpreter dispatching by computed goto (GCC's labels as
 * values), as CPython's and Perl's do. */
__attribute__((noinline)) long interpret(const unsigned char *code, long acc) {
    static void *const ops[] = {&&add, &&sub, &&twice, &&stop};
#define NEXT goto *ops[*code++]
    NEXT;
add:
    acc += 3;
    NEXT;
sub:
    acc -= 1;
    NEXT;
twice:
    acc = acc * 2 % 1000003;
    NEXT;
stop:
    return acc;
#undef NEXT
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    unsigned char program[300];
    for (int i = 0; i < 299; i++) program[i] = (i * 7 + n) % 3;
    program[299] = 3;
    tally += interpret(program, n);
    int v[64];
    for (int i = 0; i < 64; i++) v[i] = (i * 37) % 64;
    qsort(v, 64, sizeof v[0], by_cmp);
    long r = work(n) + fib(15) + v[10];
    int jumps = 0;
    for (int d = 0; d < 4; d++) jumps += bail_out(d);
    int sig = handlers();
    printf("result %ld tally %ld self %d jumps %d signals %d\n", r, tally,
           seen == (void *)classify, jumps, sig);
    return 0;
}
