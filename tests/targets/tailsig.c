/* A signal handler that runs in the middle of calls whose return is
 * hooked: a 1 ms interval timer's SIGALRM handler calls tick, which ends
 * in a tail call (jmp), while main spends its time in burn -> spin (also
 * a tail call) and in nap. The program counts the ticks it handled and
 * times burn with its own clock. */
#include "tally.h"
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

static long now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

TALLY(ticks);
TALLY(burn_us);
static volatile unsigned long sink;

NOINLINE void count_tick(int sig)
{
    (void)sig;
    BUMP(ticks);
}
NOINLINE void tick(int sig) { count_tick(sig); }

NOINLINE unsigned long spin(long n)
{
    unsigned long s = 1;
    for (long i = 0; i < n; i++) s = s * 6364136223846793005UL + (unsigned long)i;
    sink = s;
    return s;
}
NOINLINE unsigned long burn(long n) { return spin(n); }

int main(int argc, char **argv)
{
    int rounds = arg_or(argc, argv, 1, 20);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = tick;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = {{0, 1000}, {0, 1000}};
    setitimer(ITIMER_REAL, &it, 0);
    for (int i = 0; i < rounds; i++) {
        long t0 = now();
        burn(3000000);
        atomic_fetch_add(&tally_burn_us, (now() - t0) / 1000);
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, 0);
    PRINT_TALLY(ticks);
    PRINT_TALLY(burn_us);
    return 0;
}
