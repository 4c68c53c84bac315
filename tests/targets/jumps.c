/* setjmp/longjmp out of instrumented functions: entries still count once,
 * and the exits that longjmp skips are not counted as returns. */
#include "tally.h"
#include <setjmp.h>

TALLY(middle);
TALLY(middle_returns);
TALLY(thrower);
TALLY(caught);
static jmp_buf env;

NOINLINE void thrower(int i) { BUMP(thrower); if (i % 3 == 0) longjmp(env, 1); }
NOINLINE int middle(int i) { BUMP(middle); thrower(i); BUMP(middle_returns); return i; }

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 3000);
    volatile long sum = 0;
    for (volatile int i = 0; i < n; i++) {
        if (setjmp(env) == 0) sum += middle(i);
        else BUMP(caught);
    }
    printf("sum %ld\n", (long)sum);
    PRINT_TALLY(middle);
    PRINT_TALLY(middle_returns);
    PRINT_TALLY(thrower);
    PRINT_TALLY(caught);
    return 0;
}
