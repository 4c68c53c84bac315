/* Traced calls with known arguments and results: thread k calls
 * traced(i, 1000 * k) for i in 0..n, which returns 3 * i + 1000 * k.
 * With the default counts bursts stay below one ring's capacity, so
 * nothing may be dropped; large counts overflow the rings on purpose. */
#include "tally.h"
#include <pthread.h>

TALLY(traced);
static int calls;

NOINLINE long traced(long a, long b) { BUMP(traced); return a * 3 + b; }

static void *body(void *arg)
{
    long s = 0;
    for (long i = 0; i < calls; i++) s += traced(i, (long)arg * 1000);
    return (void *)s;
}

int main(int argc, char **argv)
{
    int threads = arg_or(argc, argv, 1, 3);
    calls = arg_or(argc, argv, 2, 1500);
    pthread_t t[16];
    for (long i = 0; i < threads && i < 16; i++) pthread_create(&t[i], 0, body, (void *)i);
    for (int i = 0; i < threads && i < 16; i++) pthread_join(t[i], 0);
    PRINT_TALLY(traced);
    return 0;
}
