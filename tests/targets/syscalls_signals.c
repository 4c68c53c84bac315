/* A signal handler that makes a system call, run often while the thread
 * is busy making calls of its own (a vDSO clock and getppid in a loop):
 * an interval timer of 1 ms whose SIGALRM handler writes a byte into a
 * pipe, as a self-pipe does. Prints how many times the handler ran and
 * how many bytes the pipe holds at the end (the same, unless a write was
 * lost or doubled), and a trail of where in the loop each handler run
 * found it (a count of the loop's steps, one after each call), which a
 * rerun reproduces only if it runs each handler between the same two
 * calls. Usage: syscalls_signals [ms] (300) */
#include "tally.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

TALLY(handled);
TALLY(piped);
static int pipe_w;
static volatile unsigned long steps;
static unsigned long trail;

static void on_alarm(int sig)
{
    (void)sig;
    trail = trail * 1000003 + steps;
    if (write(pipe_w, "x", 1) == 1) BUMP(handled);
}

int main(int argc, char **argv)
{
    long ms = arg_or(argc, argv, 1, 300);
    int p[2];
    if (pipe2(p, O_NONBLOCK) != 0) return 1;
    pipe_w = p[1];
    signal(SIGALRM, on_alarm);
    struct itimerval every = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, 0);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        getppid();
        steps++;
        clock_gettime(CLOCK_MONOTONIC, &now);
        steps++;
    } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
    setitimer(ITIMER_REAL, &off, 0);
    char buf[4096];
    long n;
    while ((n = read(p[0], buf, sizeof buf)) > 0)
        for (long i = 0; i < n; i++) BUMP(piped);
    PRINT_TALLY(handled);
    PRINT_TALLY(piped);
    printf("trail %lu\n", trail);
    return 0;
}
