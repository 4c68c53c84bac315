/* An option loop whose `switch` gcc -O2 compiles to an indirect jump that
 * weft cannot resolve (the table's base is loaded before the loop): the
 * jump stays inside `run`, so `run`'s time must span the whole loop.
 * Each option burns 50 ms of the thread's CPU; the program prints its own
 * CPU time of `run` (CLOCK_THREAD_CPUTIME_ID) in microseconds. */
#include "tally.h"
#include <getopt.h>
#include <time.h>

TALLY(run_cpu_us);
TALLY(options);

static long cpu_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static volatile long sink;
NOINLINE static void burn_ms(int ms)
{
    long end = cpu_ns() + ms * 1000000L;
    while (cpu_ns() < end) sink++;
}

NOINLINE int run(int argc, char **argv)
{
    static struct option longs[] = {
        {"a", 0, 0, 'a'}, {"b", 0, 0, 'b'}, {"c", 0, 0, 'c'},
        {"d", 0, 0, 'd'}, {"e", 0, 0, 'e'}, {"f", 0, 0, 'f'}, {0, 0, 0, 0},
    };
    int c, n = 0;
    while ((c = getopt_long(argc, argv, "abcdef", longs, 0)) != -1) {
        BUMP(options);
        switch (c) {
        case 'a': n += 1; burn_ms(50); break;
        case 'b': n += 2; burn_ms(50); break;
        case 'c': n += 3; burn_ms(50); break;
        case 'd': n += 4; burn_ms(50); break;
        case 'e': n += 5; burn_ms(50); break;
        case 'f': n += 6; burn_ms(50); break;
        default: n--;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    long c0 = cpu_ns();
    int n = run(argc, argv);
    atomic_store(&tally_run_cpu_us, (unsigned long)((cpu_ns() - c0) / 1000));
    printf("n %d\n", n);
    PRINT_TALLY(run_cpu_us);
    PRINT_TALLY(options);
    return 0;
}
