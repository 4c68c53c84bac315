/* Functions with known timing and call patterns for the metrics tests.
 *   nap        sleeps, 10 times for 20 ms; tallies the wall time it took by
 *              its own clock (nap20_us for those ten, nap_us for all)  -> wall_time, cpu_time ~0
 *   busy       spins ~250 ms on a thread               -> cpu_time ~ wall_time
 *   park       4 threads wait in it together ~400 ms   -> concurrency ~4 while parked
 *   classify   called with kinds 1..3                  -> predicates on arg1
 *   write_line called inside and outside flush_log     -> inside=flush_log
 *   locked     two threads contend for one mutex       -> lock_wait */
#include "tally.h"
#include <pthread.h>
#include <time.h>

TALLY(classify_2);
TALLY(busy_cpu_us);
TALLY(write_inside);
TALLY(write_all);
TALLY(nap20_us);
TALLY(nap_us);

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Sleeps `ms` milliseconds and tallies how long that really took. */
NOINLINE void nap(int ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    double start = now_s();
    nanosleep(&ts, 0);
    unsigned long took_us = (unsigned long)((now_s() - start) * 1e6);
    atomic_fetch_add(&tally_nap_us, took_us);
    if (ms == 20) atomic_fetch_add(&tally_nap20_us, took_us);
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Spins for `seconds` of wall time and tallies the CPU time it got. */
NOINLINE long busy(double seconds)
{
    volatile long s = 0;
    double cpu0 = thread_cpu_s();
    double end = now_s() + seconds;
    while (now_s() < end)
        for (int i = 0; i < 1000; i++) s += i;
    atomic_fetch_add(&tally_busy_cpu_us, (unsigned long)((thread_cpu_s() - cpu0) * 1e6));
    return s;
}

static pthread_barrier_t barrier;
NOINLINE void park(int ms)
{
    pthread_barrier_wait(&barrier);
    nap(ms);
    pthread_barrier_wait(&barrier);
}
static void *parker(void *arg) { park((int)(long)arg); return 0; }

NOINLINE int classify(int kind) { if (kind == 2) BUMP(classify_2); return kind * 3; }

static int in_flush;
NOINLINE int write_line(int n) { BUMP(write_all); if (in_flush) BUMP(write_inside); return n + 1; }
NOINLINE int flush_log(int lines)
{
    int s = 0;
    in_flush = 1;
    for (int i = 0; i < lines; i++) s += write_line(i);
    in_flush = 0;
    return s;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *holder(void *arg)
{
    pthread_mutex_lock(&lock);
    nap((int)(long)arg);
    pthread_mutex_unlock(&lock);
    return 0;
}

static void *doze(void *arg) { nap((int)(long)arg); return 0; }
static void *spinner(void *arg) { busy(*(double *)arg); return 0; }

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    for (int i = 0; i < 10; i++) nap(20);

    double spin = 0.25;
    pthread_t a, b;
    pthread_create(&a, 0, spinner, &spin);
    pthread_create(&b, 0, doze, (void *)250L);
    pthread_join(a, 0);
    pthread_join(b, 0);

    pthread_barrier_init(&barrier, 0, 4);
    pthread_t p[4];
    for (int i = 0; i < 4; i++) pthread_create(&p[i], 0, parker, (void *)400L);
    for (int i = 0; i < 4; i++) pthread_join(p[i], 0);

    long s = 0;
    for (int i = 0; i < 300; i++) s += classify(1 + i % 3);
    for (int i = 0; i < 50; i++) s += write_line(i);
    s += flush_log(70);
    s += flush_log(30);

    pthread_t h;
    pthread_create(&h, 0, holder, (void *)200L);
    nap(21); /* let the holder take the lock (21 ms: not one of the ten 20 ms naps) */
    pthread_mutex_lock(&lock);
    pthread_mutex_unlock(&lock);
    pthread_join(h, 0);

    printf("s %ld\n", s);
    PRINT_TALLY(classify_2);
    PRINT_TALLY(write_inside);
    PRINT_TALLY(write_all);
    PRINT_TALLY(busy_cpu_us);
    PRINT_TALLY(nap20_us);
    PRINT_TALLY(nap_us);
    return 0;
}
