/* Calls that fail with EINTR when a stop interrupts them (epoll_wait,
 * sigtimedwait), in threads that wait while weft stops the process: the
 * main thread's first backtrace() loads libgcc_s, which weft instruments
 * in a stop. Without weft nothing interrupts them. Each thread counts the
 * calls that failed, then is woken: its signal sent, its pipe written.
 * With "timed", the main thread alone waits in epoll_wait for MS ms (for a
 * weft to attach meanwhile), and counts whether it timed out.
 * Usage: syscalls_eintr [timed MS] */
#include "tally.h"
#include <errno.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

TALLY(interrupted);
TALLY(woken);
TALLY(timed_out);
static int wake[2];
static atomic_int waiting;

static void *signal_waiter(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    waiting++;
    for (;;) {
        int got = sigwaitinfo(&set, NULL);
        if (got == SIGUSR2) break;
        if (got < 0 && errno == EINTR) BUMP(interrupted);
    }
    BUMP(woken);
    return NULL;
}

static void *epoll_waiter(void *arg)
{
    (void)arg;
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, wake[0], &ev);
    waiting++;
    for (;;) {
        int n = epoll_wait(ep, &ev, 1, -1);
        if (n == 1) break;
        if (n < 0 && errno == EINTR) BUMP(interrupted);
    }
    BUMP(woken);
    close(ep);
    return NULL;
}

static void pause_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000};
    nanosleep(&ts, NULL);
}

static int timed(int ms)
{
    int ep = epoll_create1(0);
    struct epoll_event ev;
    int n = epoll_wait(ep, &ev, 1, ms);
    if (n == 0) BUMP(timed_out);
    if (n < 0 && errno == EINTR) BUMP(interrupted);
    PRINT_TALLY(timed_out);
    PRINT_TALLY(interrupted);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[1], "timed") == 0) return timed(atoi(argv[2]));
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR2);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    if (pipe(wake) != 0) return 1;
    pthread_t a, b;
    pthread_create(&a, NULL, signal_waiter, NULL);
    pthread_create(&b, NULL, epoll_waiter, NULL);
    for (int i = 0; i < 500 && waiting < 2; i++) pause_ms(10);
    pause_ms(100); /* both in their calls */
    void *frames[8];
    backtrace(frames, 8);
    pause_ms(100);
    pthread_kill(a, SIGUSR2);
    if (write(wake[1], "w", 1) != 1) return 1;
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    PRINT_TALLY(interrupted);
    PRINT_TALLY(woken);
    return 0;
}
