/* Benchmark target: N system calls in a loop, timed around the loop, so
 * tool start-up is not counted. Arguments: N, and "getppid" (a call with no
 * arguments and a small result), "read" (64 bytes from /dev/zero into
 * the program's memory) or "clock" (clock_gettime(CLOCK_MONOTONIC), which
 * the vDSO answers without entering the kernel); then, optionally, how
 * many milliseconds to sleep before the loop (for weft to settle the
 * program first: `weft syscalls record --settle-after 0`). Prints the ns a
 * call over the whole loop, and the median over its rounds of 100,000
 * calls (`round_median`), which the few slower rounds after the loop
 * starts under weft do not move (bench/RESULTS.md, session 32). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int by_value(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int reads = argc > 2 && strcmp(argv[2], "read") == 0;
    int clocks = argc > 2 && strcmp(argv[2], "clock") == 0;
    long wait_ms = argc > 3 ? atol(argv[3]) : 0;
    for (long i = 0; i < wait_ms / 10; i++)
        usleep(10000);
    int fd = open("/dev/zero", O_RDONLY);
    char buf[64];
    long s = 0;
    struct timespec a, b, r;
    clock_gettime(CLOCK_MONOTONIC, &a);
    struct timespec t;
    /* Rounds of ROUND calls, each timed too (its clock read is one call
     * more in a round: none for getppid and read, one in ROUND for clock). */
    enum { ROUND = 100000, ROUNDS = 256 };
    static double round_ns[ROUNDS];
    int rounds = 0;
    r = a;
    for (long i = 0; i < n; i++) {
        if (clocks) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            s += t.tv_nsec & 1;
        } else {
            s += reads ? read(fd, buf, sizeof buf) : getppid();
        }
        if ((i + 1) % ROUND == 0 && rounds < ROUNDS) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            round_ns[rounds++] = ((t.tv_sec - r.tv_sec) * 1e9 + (t.tv_nsec - r.tv_nsec)) / ROUND;
            r = t;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    qsort(round_ns, rounds, sizeof round_ns[0], by_value);
    printf("calls %ld sum %ld ns_per_call %.2f round_median %.2f\n", n, s, ns / n,
           rounds ? round_ns[rounds / 2] : ns / n);
    return 0;
}
