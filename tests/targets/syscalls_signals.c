/* A signal handler that makes a system call, run often while the thread
 * is busy making calls of its own (a vDSO clock and getppid in a loop):
 * an interval timer of 1 ms whose SIGALRM handler writes a byte into a
 * pipe, as a self-pipe does. Prints how many times the handler ran and
 * how many bytes the pipe holds at the end (the same, unless a write was
 * lost or doubled), and a trail of where in the loop each handler run
 * found it (a count of the loop's steps, one after each call), which a
 * rerun reproduces only if it runs each handler between the same two
 * calls. The loop's and the handler's calls first run for 100 ms without
 * the timer, so that weft has rewritten their sites when it starts: a
 * site's rewriting stops the process, and a signal weft's tracer catches
 * in that stop behind another may reach the thread without its siginfo
 * (docs/syscalls.md, "Not yet"). With EVERY, every EVERYth handler run
 * lasts 1.5 ms (reading the vDSO clock), so that the next tick waits
 * for it to return and comes where it came: raised right after it, the
 * handlers' calls between. With a third argument the loop reads its
 * signal mask instead of calling getppid: a call weft never rewrites, so
 * that every one goes through weft's SIGSYS handler, and signals come
 * while it writes their records. Usage: syscalls_signals [ms] [every]
 * [masks|-] [nap] (300, 0): NAP milliseconds of sleep after the warm-up
 * (for weft to settle the process before the timer starts). */
#include "tally.h"
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

TALLY(handled);
TALLY(piped);
static int pipe_w;
static long every, runs;
static volatile unsigned long steps;
static unsigned long trail;

static void on_alarm(int sig)
{
    (void)sig;
    trail = trail * 1000003 + steps;
    if (write(pipe_w, "x", 1) == 1) BUMP(handled);
    if (every && ++runs % every == 0) {
        struct timespec from, at;
        clock_gettime(CLOCK_MONOTONIC, &from);
        do clock_gettime(CLOCK_MONOTONIC, &at);
        while ((at.tv_sec - from.tv_sec) * 1000000000L + (at.tv_nsec - from.tv_nsec) < 1500000);
    }
}

int main(int argc, char **argv)
{
    long ms = arg_or(argc, argv, 1, 300);
    every = arg_or(argc, argv, 2, 0);
    int p[2];
    if (pipe2(p, O_NONBLOCK) != 0) return 1;
    pipe_w = p[1];
    int null = open("/dev/null", O_WRONLY);
    struct timespec from, at;
    clock_gettime(CLOCK_MONOTONIC, &from);
    do {
        getppid();
        if (write(null, "", 0) != 0) return 1;
        clock_gettime(CLOCK_MONOTONIC, &at);
    } while ((at.tv_sec - from.tv_sec) * 1000 + (at.tv_nsec - from.tv_nsec) / 1000000 < 100);
    for (long nap = arg_or(argc, argv, 4, 0); nap > 0; nap -= 10)
        usleep(10000);
    signal(SIGALRM, on_alarm);
    struct itimerval every = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, 0);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int masks = argc > 3 && strcmp(argv[3], "masks") == 0;
    sigset_t mask;
    do {
        if (masks)
            sigprocmask(SIG_BLOCK, NULL, &mask);
        else
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
