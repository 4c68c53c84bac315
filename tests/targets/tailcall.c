/* Functions that end in a tail call, which gcc -O2 compiles to "jmp":
 * park -> nap (sleeps), burn -> spin (runs on the CPU), leap -> fall
 * (sleeps, then longjmps back to main past both), and vault, which
 * calls drop (gcc knows it never returns: vault has no exit at all). The program times
 * every call with its own clocks (CLOCK_MONOTONIC and
 * CLOCK_THREAD_CPUTIME_ID) and prints the totals in microseconds as
 * tallies, with "threads" parkers calling park(ms) together first,
 * "rounds" times each. Arguments: threads (4), ms (300), spin iterations
 * (30000000), rounds (1). */
#include "tally.h"
#include <pthread.h>
#include <setjmp.h>
#include <time.h>

static long now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

/* The time the thread's last nap slept, read inside the timed calls: the
 * least a timer of park, leap or vault can read, whatever the machine does
 * between the callers' own clock reads and the calls. */
static __thread long nap_us;
NOINLINE void nap(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    long t0 = now(CLOCK_MONOTONIC);
    nanosleep(&ts, 0);
    nap_us = (now(CLOCK_MONOTONIC) - t0) / 1000;
}
NOINLINE void park(int ms) { nap(ms); }

static volatile unsigned long sink;
/* The time spin's loop takes, from inside burn's call: the least a timer
 * of burn can read, whatever happens around the call. */
static long spin_us;
NOINLINE unsigned long spin(long n)
{
    long t0 = now(CLOCK_MONOTONIC);
    unsigned long s = 1;
    for (long i = 0; i < n; i++) s = s * 6364136223846793005UL + (unsigned long)i;
    sink = s;
    spin_us = (now(CLOCK_MONOTONIC) - t0) / 1000;
    return s;
}
NOINLINE unsigned long burn(long n) { return spin(n); }

static jmp_buf back;
/* noipa: gcc may not learn that fall never returns, so leap stays "jmp fall". */
TALLY(leap_inner_us);
TALLY(vault_inner_us);
__attribute__((noipa)) void fall(int ms)
{
    nap(ms);
    atomic_fetch_add(&tally_leap_inner_us, nap_us);
    longjmp(back, 1);
}
NOINLINE void leap(int ms) { fall(ms); }

/* gcc learns that drop never returns: vault calls it and has no exit. */
NOINLINE void drop(int ms)
{
    nap(ms);
    atomic_fetch_add(&tally_vault_inner_us, nap_us);
    longjmp(back, 1);
}
NOINLINE void vault(int ms) { drop(ms); }

TALLY(park_us);
TALLY(park_inner_us);
TALLY(park_calls);
TALLY(burn_wall_us);
TALLY(burn_cpu_us);
TALLY(burn_inner_us);
TALLY(leap_us);
TALLY(vault_us);

static int ms, rounds;

static void *parker(void *unused)
{
    (void)unused;
    for (int i = 0; i < rounds; i++) {
        long t0 = now(CLOCK_MONOTONIC);
        park(ms);
        atomic_fetch_add(&tally_park_us, (now(CLOCK_MONOTONIC) - t0) / 1000);
        atomic_fetch_add(&tally_park_inner_us, nap_us);
        BUMP(park_calls);
    }
    return 0;
}

int main(int argc, char **argv)
{
    int threads = arg_or(argc, argv, 1, 4);
    ms = arg_or(argc, argv, 2, 300);
    long iterations = arg_or(argc, argv, 3, 30000000);
    rounds = arg_or(argc, argv, 4, 1);
    pthread_t t[16];
    for (int i = 0; i < threads && i < 16; i++) pthread_create(&t[i], 0, parker, 0);
    for (int i = 0; i < threads && i < 16; i++) pthread_join(t[i], 0);

    /* The thread's CPU clock is a system call: read outside the wall
     * clock's reads (vDSO), which hug the call. */
    long c0 = now(CLOCK_THREAD_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
    burn(iterations);
    long w1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
    atomic_store(&tally_burn_wall_us, (w1 - w0) / 1000);
    atomic_store(&tally_burn_cpu_us, (c1 - c0) / 1000);
    atomic_store(&tally_burn_inner_us, spin_us);

    for (int i = 0; i < 5; i++) {
        volatile long t0 = now(CLOCK_MONOTONIC);
        if (!setjmp(back)) leap(20);
        atomic_fetch_add(&tally_leap_us, (now(CLOCK_MONOTONIC) - t0) / 1000);
    }

    for (int i = 0; i < 5; i++) {
        volatile long t0 = now(CLOCK_MONOTONIC);
        if (!setjmp(back)) vault(20);
        atomic_fetch_add(&tally_vault_us, (now(CLOCK_MONOTONIC) - t0) / 1000);
    }

    PRINT_TALLY(park_us);
    PRINT_TALLY(park_inner_us);
    PRINT_TALLY(park_calls);
    PRINT_TALLY(burn_wall_us);
    PRINT_TALLY(burn_cpu_us);
    PRINT_TALLY(burn_inner_us);
    PRINT_TALLY(leap_us);
    PRINT_TALLY(leap_inner_us);
    PRINT_TALLY(vault_us);
    PRINT_TALLY(vault_inner_us);
    return 0;
}
