/* Timeouts that leave with siglongjmp: a one-shot 20 ms SIGALRM whose
 * handler jumps out of a getppid() loop, ten times, each round counting
 * how many calls it made before the jump. Where the signal came decides
 * each count, and so the output: a rerun reproduces it only if each
 * handler runs where the record had it, and the jump out of weft's code
 * leaves no call recorded twice. Usage: syscalls_timeouts [rounds] (10) */
#include "tally.h"
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

static sigjmp_buf back;

static void on_alarm(int sig)
{
    (void)sig;
    siglongjmp(back, 1);
}

int main(int argc, char **argv)
{
    int rounds = arg_or(argc, argv, 1, 10);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    for (int i = 0; i < rounds; i++) {
        volatile long calls = 0;
        if (sigsetjmp(back, 1) == 0) {
            struct itimerval once = {{0, 0}, {0, 20000}};
            setitimer(ITIMER_REAL, &once, 0);
            for (;;) {
                getppid();
                calls++;
            }
        }
        printf("round %d: %ld calls\n", i, (long)calls);
    }
    return 0;
}
