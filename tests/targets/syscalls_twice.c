/* One signal pending twice at once, and let in by one call: while the
 * thread blocks SIGUSR1, it sends it to itself (the thread's own pending
 * set) and to its process (the process's set, a second one the kernel
 * keeps apart), then unblocks it. The handler runs twice as the
 * `sigprocmask` returns, the second time as the first returns. Prints
 * how many times the handler ran and a trail of the rounds it ran in: a
 * rerun reproduces them only if it runs both handlers there.
 * Usage: syscalls_twice [rounds] (50) */
#define _GNU_SOURCE
#include "tally.h"
#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long round_now;
static unsigned long trail;
TALLY(usr1);

static void on_usr1(int sig)
{
    (void)sig;
    trail = trail * 1000003 + round_now;
    BUMP(usr1);
}

int main(int argc, char **argv)
{
    long rounds = arg_or(argc, argv, 1, 50);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &sa, 0);
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    for (long i = 0; i < rounds; i++) {
        round_now = i + 1;
        sigprocmask(SIG_BLOCK, &usr1, 0);
        tgkill(getpid(), gettid(), SIGUSR1);
        kill(getpid(), SIGUSR1);
        sigprocmask(SIG_UNBLOCK, &usr1, 0);
        round_now = 0;
    }
    PRINT_TALLY(usr1);
    printf("trail %lu\n", trail);
    return 0;
}
