/* Blocking reads a signal interrupts, with a system call in the handler:
 * N times, a one-shot 20 ms timer (setitimer) whose SIGALRM handler calls
 * getppid times out a read of an empty pipe (no SA_RESTART: EINTR). The
 * program times each read on its own clock and prints the total as a
 * tally, read_ns, with how many were interrupted.
 * Usage: syscalls_interrupted [N] (5) */
#include "tally.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

TALLY(interrupted);

static void on_alarm(int sig)
{
    (void)sig;
    getppid();
}

static long now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 5);
    int p[2];
    if (pipe(p) != 0) return 1;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_alarm;
    sigaction(SIGALRM, &action, 0);
    long total = 0;
    char c;
    for (int i = 0; i < n; i++) {
        struct itimerval once = {{0, 0}, {0, 20000}};
        setitimer(ITIMER_REAL, &once, 0);
        long t0 = now();
        if (read(p[0], &c, 1) < 0 && errno == EINTR) BUMP(interrupted);
        total += now() - t0;
    }
    PRINT_TALLY(interrupted);
    printf("tally read_ns %ld\n", total);
    return 0;
}
