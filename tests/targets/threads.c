/* Many threads calling the same function: counts must be exact. */
#include "tally.h"
#include <pthread.h>

TALLY(work);
static int iterations;

NOINLINE long work(long x) { BUMP(work); return x * 7 + 3; }

static void *body(void *arg)
{
    long s = (long)arg;
    for (int i = 0; i < iterations; i++) s = work(s) & 0xffff;
    return (void *)s;
}

int main(int argc, char **argv)
{
    int nthreads = arg_or(argc, argv, 1, 8);
    iterations = arg_or(argc, argv, 2, 20000);
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
