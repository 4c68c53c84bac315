/* CPU time with known answers, each measured by the thread itself with
 * CLOCK_THREAD_CPUTIME_ID (tallies in microseconds):
 *   spin(150)     CPU-bound for 150 ms of its thread's CPU   -> spin_cpu_us
 *   doze(300)     sleeps 300 ms                              -> doze_cpu_us (~0)
 *   tick()        2 µs of spinning, called 100,000 times in a loop that does
 *                 nothing else                               -> ticks_cpu_us (the loop)
 *   share(400)    two threads spin 400 ms of wall time each; run under
 *                 `taskset -c 0` they share one CPU          -> share_cpu_us_{0,1}
 * Arguments: calls of tick (100000); with a second argument, `spin(1000)`
 * over and over instead (1 s calls, for attaching mid-call). */
#include "tally.h"
#include <pthread.h>
#include <time.h>

TALLY(spin_cpu_us);
TALLY(doze_cpu_us);
TALLY(ticks_cpu_us);
TALLY(share_cpu_us_0);
TALLY(share_cpu_us_1);

static long now(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* Spins until its thread has used `ms` of CPU. */
NOINLINE long spin(int ms)
{
    volatile long s = 0;
    long end = now(CLOCK_THREAD_CPUTIME_ID) + ms * 1000000L;
    while (now(CLOCK_THREAD_CPUTIME_ID) < end)
        for (int i = 0; i < 1000; i++) s += i;
    return s;
}

NOINLINE void doze(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, 0);
}

/* About 2 µs of spinning, by the monotonic clock (vDSO, no system call). */
NOINLINE long tick(void)
{
    volatile long s = 0;
    long end = now(CLOCK_MONOTONIC) + 2000;
    while (now(CLOCK_MONOTONIC) < end) s++;
    return s;
}

/* Spins for `ms` of wall time. */
NOINLINE long share(int ms)
{
    volatile long s = 0;
    long end = now(CLOCK_MONOTONIC) + ms * 1000000L;
    while (now(CLOCK_MONOTONIC) < end)
        for (int i = 0; i < 100; i++) s += i;
    return s;
}

static pthread_barrier_t start;
static void *sharer(void *arg)
{
    pthread_barrier_wait(&start);
    long c0 = now(CLOCK_THREAD_CPUTIME_ID);
    share(400);
    unsigned long us = (now(CLOCK_THREAD_CPUTIME_ID) - c0) / 1000;
    atomic_store(arg ? &tally_share_cpu_us_1 : &tally_share_cpu_us_0, us);
    return 0;
}

int main(int argc, char **argv)
{
    int calls = arg_or(argc, argv, 1, 100000);
    if (argc > 2)
        for (;;) spin(1000);
    long c0 = now(CLOCK_THREAD_CPUTIME_ID);
    spin(150);
    long c1 = now(CLOCK_THREAD_CPUTIME_ID);
    doze(300);
    long c2 = now(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < calls; i++) tick();
    long c3 = now(CLOCK_THREAD_CPUTIME_ID);
    atomic_store(&tally_spin_cpu_us, (c1 - c0) / 1000);
    atomic_store(&tally_doze_cpu_us, (c2 - c1) / 1000);
    atomic_store(&tally_ticks_cpu_us, (c3 - c2) / 1000);

    pthread_barrier_init(&start, 0, 2);
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], 0, sharer, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], 0);

    PRINT_TALLY(spin_cpu_us);
    PRINT_TALLY(doze_cpu_us);
    PRINT_TALLY(ticks_cpu_us);
    PRINT_TALLY(share_cpu_us_0);
    PRINT_TALLY(share_cpu_us_1);
    return 0;
}
