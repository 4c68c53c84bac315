/* Probes placed with weft's own header, <weft/probe.h>: `step` with four
 * arguments (a counter, an expression, a pointer and a constant), `wide`
 * with the full twelve, `idle` with none, and `totals` with two globals,
 * which gcc tends to describe as symbol(%rip) operands. The program tallies
 * how many times it passed each site. */
#include "tally.h"
#include <weft/probe.h>

TALLY(steps);
TALLY(idles);

static long slots[4];
long total;
struct pair { long a, b; } last = { 1, 2 };

NOINLINE void account(long i)
{
    total += i;
    last.b = 2 * i;
}

NOINLINE long step(long i)
{
    BUMP(steps);
    slots[i % 4] += i;
    WEFT_PROBE(weft_probe, step, i, i * 3, &slots[i % 4], 7);
    WEFT_PROBE(weft_probe, wide, i, i + 1, i + 2, i + 3, i + 4, i + 5, i + 6, i + 7, i + 8,
               i + 9, i + 10, -i);
    account(i);
    WEFT_PROBE(weft_probe, totals, total, last.b);
    if (i % 10 == 0) {
        BUMP(idles);
        WEFT_PROBE(weft_probe, idle);
    }
    return slots[i % 4];
}

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 1000);
    long s = 0;
    for (long i = 0; i < n; i++)
        s += step(i);
    printf("s %ld\n", s);
    PRINT_TALLY(steps);
    PRINT_TALLY(idles);
    return 0;
}
