/* Benchmark target: calls one small function N times and reports the time
 * per call measured around the loop, so tool start-up is not counted.
 * Arguments: N, threads, and "tail" to call bench_tail instead, which ends
 * in a tail call to bench_fn (jmp at -O2). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) long bench_fn(long x)
{
    __asm__ volatile("" : "+r"(x));
    return x + 1;
}

/* noipa: gcc keeps it a separate function ending in "jmp bench_fn". */
__attribute__((noipa)) long bench_tail(long x) { return bench_fn(x); }

static long iterations;
static int tail;

static void *body(void *arg)
{
    long s = (long)arg;
    if (tail)
        for (long i = 0; i < iterations; i++) s = bench_tail(s);
    else
        for (long i = 0; i < iterations; i++) s = bench_fn(s);
    return (void *)s;
}

int main(int argc, char **argv)
{
    iterations = argc > 1 ? atol(argv[1]) : 10000000;
    int threads = argc > 2 ? atoi(argv[2]) : 1;
    tail = argc > 3 && argv[3][0] == 't';
    struct timespec a, b;
    pthread_t t[64];
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (int i = 0; i < threads; i++) pthread_create(&t[i], 0, body, (void *)(long)i);
    long s = 0;
    for (int i = 0; i < threads; i++) {
        void *r;
        pthread_join(t[i], &r);
        s += (long)r;
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    printf("calls %ld ns_per_call %.2f checksum %ld\n", iterations * threads, ns / iterations, s);
    return 0;
}
