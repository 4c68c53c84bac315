/* USDT probes from <sys/sdt.h>: `tick` with three arguments on every
 * iteration, and `guarded` behind a semaphore, which the program tests
 * first (as python does) and tallies when it finds it raised. */
#define _SDT_HAS_SEMAPHORES 1
#include "tally.h"
#include <sys/sdt.h>

/* With _SDT_HAS_SEMAPHORES every probe of the file has a semaphore; only
 * `guarded`'s is tested by the program. */
unsigned short weft_test_tick_semaphore __attribute__((section(".probes")));
unsigned short weft_test_guarded_semaphore __attribute__((section(".probes")));

TALLY(ticks);
TALLY(guarded_enabled);

struct item { long id; long weight; };

NOINLINE long step(struct item *it, long i)
{
    BUMP(ticks);
    STAP_PROBE3(weft_test, tick, i, i * 3, it->weight);
    if (weft_test_guarded_semaphore) {
        BUMP(guarded_enabled);
        STAP_PROBE1(weft_test, guarded, i + 1000);
    }
    return it->weight + i;
}

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 1000);
    struct item it = { 1, 7 };
    long s = 0;
    for (long i = 0; i < n; i++) {
        it.weight = i % 5;
        s += step(&it, i);
    }
    printf("s %ld\n", s);
    PRINT_TALLY(ticks);
    PRINT_TALLY(guarded_enabled);
    return 0;
}
