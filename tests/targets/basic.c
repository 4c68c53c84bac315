/* Plain calls, nested calls and recursion, plus a libc call. */
#include "tally.h"
#include <string.h>

TALLY(work);
TALLY(leaf);
TALLY(rec);
TALLY(puts);

NOINLINE int leaf(int x) { BUMP(leaf); return x * 3 + 1; }
NOINLINE int work(int x) { BUMP(work); return leaf(x) + leaf(x + 1); }
/* Recursion the compiler cannot turn into a loop (xor is no accumulator). */
NOINLINE unsigned rec(unsigned n) { BUMP(rec); if (n == 0) return 0; return rec(n - 1) ^ (n * 2654435761u); }

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 1000);
    long sum = 0;
    for (int i = 0; i < n; i++) sum += work(i);
    unsigned r = 0;
    for (int i = 0; i < n / 10; i++) r += rec(12);
    for (int i = 0; i < 3; i++) { BUMP(puts); puts("line"); }
    printf("sum %ld rec %u\n", sum, r);
    PRINT_TALLY(work);
    PRINT_TALLY(leaf);
    PRINT_TALLY(rec);
    PRINT_TALLY(puts);
    return 7;
}
