/* User CPU time between two system calls (getppid): the thread's CPU
 * clock read around them, a spin, a sleep (no CPU) and another spin
 * between them. Prints the clock's difference as a tally (read through
 * the vDSO, whose calls are recorded as such, outside the two getppid).
 * The spins are fixed work (millions of steps), so that a CPU limit
 * stretches them. With "fork", a child it forks then does the same
 * (two getppid around a spin) and prints its own tally, child_spin_ns.
 * With "signal", it first blocks in a read of a pipe that a SIGALRM
 * handler (SA_RESTART) writes to, making calls of its own inside the
 * blocked read, as a shell's SIGCHLD handler does.
 * Usage: syscalls_spin [millions] (40) [fork|signal] */
#include "tally.h"
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int wake[2];

static void on_alarm(int sig)
{
    (void)sig;
    getpid();
    char b = 1;
    if (write(wake[1], &b, 1) != 1) _exit(3);
}

/* A read that a signal handler's calls come inside of. */
static void read_across_a_handler(void)
{
    if (pipe(wake) != 0) _exit(2);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval once = {{0, 0}, {0, 50 * 1000}};
    setitimer(ITIMER_REAL, &once, 0);
    char b;
    if (read(wake[0], &b, 1) != 1) _exit(4);
}

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
    if (argc > 2 && strcmp(argv[2], "signal") == 0) read_across_a_handler();
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
