/* A handler its own signal interrupts (SA_NODEFER): a 1 ms interval
 * timer whose SIGALRM handler, the first time, reads the vDSO clock for
 * 3 ms, so that the next ticks come inside it, often while weft writes
 * the record of a clock read. Prints how many times the handler ran and
 * how deep it nested (2: a handler inside the handler). */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int runs, depth, deepest;

static long since(struct timespec a, struct timespec b)
{
    return (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
}

static void on_alarm(int sig)
{
    (void)sig;
    int first = runs++ == 0;
    if (++depth > deepest) deepest = depth;
    if (first) {
        struct timespec from, at;
        clock_gettime(CLOCK_MONOTONIC, &from);
        do clock_gettime(CLOCK_MONOTONIC, &at);
        while (since(from, at) < 3000000);
    }
    depth--;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART | SA_NODEFER;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval every = {{0, 1000}, {0, 5000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, 0);
    for (long i = 0; i < 200000000 && runs < 3; i++) getppid();
    setitimer(ITIMER_REAL, &off, 0);
    printf("ran %s, nested %d deep\n", runs >= 3 ? "3 times or more" : "fewer than 3 times", deepest);
    return 0;
}
