/* User CPU time between two system calls (getppid): the thread's CPU
 * clock read around them, a spin, a sleep (no CPU) and another spin
 * between them. Prints the clock's difference as a tally (the vDSO
 * passes that clock to the kernel from code weft does not splice, so
 * these reads are not among the recorded calls).
 * Usage: syscalls_spin [ms] (40) */
#include "tally.h"
#include <time.h>
#include <unistd.h>

static long now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static volatile unsigned long sink;

/* Spins until this thread has run `ns` on a CPU, reading only the vDSO's
 * monotonic clock (no system call in between). */
static void spin(long ns)
{
    long until = now(CLOCK_MONOTONIC) + ns;
    unsigned long s = 1;
    while (now(CLOCK_MONOTONIC) < until) s = s * 6364136223846793005UL + 1;
    sink = s;
}

int main(int argc, char **argv)
{
    long ms = arg_or(argc, argv, 1, 40);
    long t0 = now(CLOCK_THREAD_CPUTIME_ID);
    getppid();
    spin(ms * 1000000L);
    struct timespec nap = {0, 100 * 1000000L};
    nanosleep(&nap, 0);
    spin(ms * 1000000L);
    getppid();
    long t1 = now(CLOCK_THREAD_CPUTIME_ID);
    printf("tally spin_ns %ld\n", t1 - t0);
    return 0;
}
