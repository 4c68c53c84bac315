/* Real-time signals queued in bursts (sigqueue): 12 to itself while it
 * blocks them, then 40 from a child, 4 at a time 300 us apart, while the parent
 * makes calls in a loop. Every one reaches the handler (real-time
 * signals are queued, never merged), and none stays blocked: prints how
 * many the handler ran, and whether SIGRTMIN is blocked or pending at
 * the end. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile int handled;

static void on_signal(int sig, siginfo_t *info, void *context)
{
    (void)sig, (void)info, (void)context;
    handled++;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigset_t rt;
    sigemptyset(&rt);
    for (int s = SIGRTMIN; s <= SIGRTMIN + 3; s++) {
        sigaction(s, &sa, 0);
        sigaddset(&rt, s);
    }
    sigprocmask(SIG_BLOCK, &rt, 0);
    for (int i = 0; i < 12; i++) {
        union sigval v = {.sival_int = 100 + i};
        sigqueue(getpid(), SIGRTMIN + 3 - i % 4, v);
    }
    sigprocmask(SIG_UNBLOCK, &rt, 0);
    pid_t parent = getpid(), child = fork();
    if (child == 0) {
        for (int i = 0; i < 40; i++) {
            union sigval v = {.sival_int = 200 + i};
            sigqueue(parent, SIGRTMIN + i % 2, v);
            if (i % 4 == 3) usleep(300);
        }
        _exit(0);
    }
    int status;
    long rounds = 0, grace = -1;
    while (handled < 52 && (grace < 0 || rounds < grace)) {
        getppid();
        rounds++;
        if (grace < 0 && rounds % 256 == 0 && waitpid(child, &status, WNOHANG) == child)
            grace = rounds + 200000;
    }
    if (grace < 0) waitpid(child, &status, 0);
    sigset_t pending, blocked;
    sigpending(&pending);
    sigprocmask(SIG_BLOCK, 0, &blocked);
    printf("handled %d blocked %d pending %d\n", handled, sigismember(&blocked, SIGRTMIN),
           sigismember(&pending, SIGRTMIN));
    return 0;
}
