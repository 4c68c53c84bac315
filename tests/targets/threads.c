/* Many threads calling the same function: counts must be exact.
 *   threads [N [ITERATIONS [together]]]  with "together", all N threads are
 *   alive at once around their calls (a barrier before and after). */
#include "tally.h"
#include <pthread.h>
#include <string.h>

TALLY(work);
static int iterations;
static int together;
static pthread_barrier_t all_alive;

NOINLINE long work(long x) { BUMP(work); return x * 7 + 3; }

static void *body(void *arg)
{
    long s = (long)arg;
    if (together) pthread_barrier_wait(&all_alive);
    for (int i = 0; i < iterations; i++) s = work(s) & 0xffff;
    if (together) pthread_barrier_wait(&all_alive);
    return (void *)s;
}

int main(int argc, char **argv)
{
    int nthreads = arg_or(argc, argv, 1, 8);
    iterations = arg_or(argc, argv, 2, 20000);
    together = argc > 3 && !strcmp(argv[3], "together");
    if (nthreads > 64) nthreads = 64;
    if (together) pthread_barrier_init(&all_alive, 0, (unsigned)nthreads);
    pthread_t t[64];
    for (int i = 0; i < nthreads && i < 64; i++) pthread_create(&t[i], 0, body, (void *)(long)i);
    long total = 0;
    for (int i = 0; i < nthreads && i < 64; i++) {
        void *r;
        pthread_join(t[i], &r);
        total += (long)r;
    }
    printf("total %ld\n", total);
    PRINT_TALLY(work);
    return 0;
}
