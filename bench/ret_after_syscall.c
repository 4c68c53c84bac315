/* What a `ret` costs right after a system call (bench/run.sh retsys).
 *
 * Five ways to make the same call in a loop, the best of 20 rounds of
 * 200,000 calls each, ns a call:
 *   0 inline   the `syscall` instruction in the loop itself
 *   1 call     a function that makes the call and returns (as libc's
 *              `read` and `getppid` do)
 *   2 call2    a function that calls (1) and returns: one `ret` more after
 *              the call, as a mini-trampoline that returned would add
 *   3 jump     a function that makes the call and goes back by a jump
 *              through its return address (what weft's code does now)
 *   4 jump+ret a function that calls (3) and returns: (3) under libc's
 *              `ret`, the shape of a rewritten site
 * Arguments: "getppid" or "read" (64 bytes of /dev/zero). */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

long by_call(long nr, long a, long b, long c);
long by_call2(long nr, long a, long b, long c);
long by_jump(long nr, long a, long b, long c);
long by_jump_ret(long nr, long a, long b, long c);
__asm__(".globl by_call\nby_call:\n mov %rdi,%rax\n mov %rsi,%rdi\n mov %rdx,%rsi\n"
        " mov %rcx,%rdx\n syscall\n ret\n"
        ".globl by_call2\nby_call2:\n call by_call\n ret\n"
        ".globl by_jump\nby_jump:\n mov %rdi,%rax\n mov %rsi,%rdi\n mov %rdx,%rsi\n"
        " mov %rcx,%rdx\n syscall\n lea 8(%rsp),%rsp\n jmp *-8(%rsp)\n"
        ".globl by_jump_ret\nby_jump_ret:\n call by_jump\n ret\n");

static long inline_call(long nr, long a, long b, long c)
{
    long r;
    __asm__ volatile("syscall" : "=a"(r) : "a"(nr), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
    return r;
}

int main(int argc, char **argv)
{
    int reads = argc > 1 && strcmp(argv[1], "read") == 0;
    int fd = open("/dev/zero", O_RDONLY);
    char buf[64];
    long nr = reads ? 0 : 110, a = reads ? fd : 0, b = reads ? (long)buf : 0, c = reads ? 64 : 0;
    const char *names[] = {"inline", "call", "call2", "jump", "jump+ret"};
    for (int way = 0; way < 5; way++) {
        double best = 1e18;
        for (int round = 0; round < 20; round++) {
            struct timespec t0, t1;
            long s = 0;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int i = 0; i < 200000; i++) {
                switch (way) {
                case 0: s += inline_call(nr, a, b, c); break;
                case 1: s += by_call(nr, a, b, c); break;
                case 2: s += by_call2(nr, a, b, c); break;
                case 3: s += by_jump(nr, a, b, c); break;
                default: s += by_jump_ret(nr, a, b, c); break;
                }
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double ns = ((t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec)) / 200000 + (s == 1);
            if (ns < best)
                best = ns;
        }
        printf("%-8s %-9s %8.1f\n", reads ? "read" : "getppid", names[way], best);
    }
    return 0;
}
