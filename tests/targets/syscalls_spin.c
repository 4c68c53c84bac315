/* User CPU time between two system calls (getppid): the thread's CPU
 * clock read around them, a spin, a sleep (no CPU) and another spin
 * between them. Prints the clock's difference as a tally (read through
 * the vDSO, whose calls are recorded as such, outside the two getppid).
 * The spins are fixed work (millions of steps), so that a CPU limit
 * stretches them. With "fork", a child it forks then does the same
 * (two getppid around a spin) and prints its own tally, child_spin_ns.
 * Usage: syscalls_spin [millions] (40) [fork] */
#include "tally.h"
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long now(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static volatile unsigned long sink;

/* `n` steps of work on the CPU, no system call. */
static void spin(long n)
{
    unsigned long s = 1;
    for (long i = 0; i < n; i++) s = s * 6364136223846793005UL + (unsigned long)i;
    sink = s;
}

int main(int argc, char **argv)
{
    long steps = arg_or(argc, argv, 1, 40) * 1000000L;
    long t0 = now(CLOCK_THREAD_CPUTIME_ID);
    getppid();
    spin(steps);
    struct timespec nap = {0, 100 * 1000000L};
    nanosleep(&nap, 0);
    spin(steps);
    getppid();
    long t1 = now(CLOCK_THREAD_CPUTIME_ID);
    printf("tally spin_ns %ld\n", t1 - t0);
    if (argc > 2 && strcmp(argv[2], "fork") == 0) {
        fflush(stdout);
        pid_t child = fork();
        if (child == 0) {
            long c0 = now(CLOCK_THREAD_CPUTIME_ID);
            getppid();
            spin(steps);
            getppid();
            long c1 = now(CLOCK_THREAD_CPUTIME_ID);
            printf("tally child_spin_ns %ld\n", c1 - c0);
            return 0;
        }
        /* Running its own code (its timer on) while weft copies its
         * state for the child. */
        spin(steps);
        waitpid(child, 0, 0);
    }
    return 0;
}
