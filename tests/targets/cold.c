/* A function gcc -O2 splits in two: `check` and `check.cold`, the path it
 * expects rarely (here every tenth call), moved away and entered by a jump.
 * Both parts return to check's caller.
 *   cold [N]   calls check N times (1000 if not given); prints its tallies */
#include "tally.h"

TALLY(check);
TALLY(rare);

static volatile int sink;

__attribute__((cold, noinline)) void report(int x) { sink = x; }

NOINLINE int check(int x)
{
    BUMP(check);
    if (__builtin_expect(x % 10 == 0, 0)) {
        BUMP(rare);
        report(x);
        sink = x + 1;
        return -x;
    }
    return x * 2;
}

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 1000);
    long sum = 0;
    for (int i = 0; i < n; i++) sum += check(i);
    printf("sum %ld\n", sum);
    PRINT_TALLY(check);
    PRINT_TALLY(rare);
    return 0;
}
