/* A loop that makes only signal-mask calls while a 1 ms interval timer
 * runs: it blocks SIGALRM, asks which signals are pending, and unblocks
 * it (where a pending tick's handler runs). Prints how many ticks the
 * handler took, how many times the loop found one pending, and a trail
 * of where in the loop each tick found it: a rerun reproduces them only
 * if it gives the program the pending set it had and runs each handler
 * where it ran. Usage: syscalls_pending [rounds] (20000) */
#include "tally.h"
#include <signal.h>
#include <string.h>
#include <sys/time.h>

static volatile unsigned long steps;
static unsigned long trail;
TALLY(ticks);

static void on_alarm(int sig)
{
    (void)sig;
    trail = trail * 1000003 + steps;
    BUMP(ticks);
}

int main(int argc, char **argv)
{
    long rounds = arg_or(argc, argv, 1, 20000);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval every = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, 0);
    sigset_t alarm, pending;
    sigemptyset(&alarm);
    sigaddset(&alarm, SIGALRM);
    unsigned long seen = 0;
    for (long i = 0; i < rounds; i++) {
        sigprocmask(SIG_BLOCK, &alarm, 0);
        steps++;
        sigpending(&pending);
        seen += sigismember(&pending, SIGALRM);
        steps++;
        sigprocmask(SIG_UNBLOCK, &alarm, 0);
        steps++;
    }
    setitimer(ITIMER_REAL, &off, 0);
    PRINT_TALLY(ticks);
    printf("seen pending %lu\ntrail %lu\n", seen, trail);
    return 0;
}
