/* Signals whose handlers make system calls, coming where timing puts
 * them: a record's rerun must run each handler where the record had it.
 *
 * - SIGCHLD (SA_RESTART): the handler reaps with waitpid(WNOHANG) and
 *   counts; the main thread sleeps 50 us at a time until every child is
 *   reaped, and prints after how many sleeps (timing: another number
 *   every run).
 * - SIGUSR1 (SA_SIGINFO) from the last child, which kill()s its parent:
 *   the handler prints its si_code and whether si_pid is that child.
 * - SIGUSR2 without SA_RESTART into a blocked read of a pipe: the read
 *   fails with EINTR, the program says so and reads again; the last
 *   child sends the signal 50 ms after the parent says it is about to
 *   read, and SIGUSR1 only once the parent's SIGUSR2 handler has said it
 *   ran (both pending as the read is interrupted, the kernel delivers
 *   SIGUSR1 first, whose SA_RESTART restarts the read: a loaded machine
 *   that ran the parent 3 ms after SIGUSR2, 1 ms after SIGUSR1, lost the
 *   EINTR), then writes the byte.
 *
 * Prints the handlers' tallies ("tally sigchld N" counts every SIGCHLD,
 * the stops and continues a tracer's holds send too). Usage:
 * syscalls_deliveries [children] (4) */
#include "tally.h"
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

TALLY(sigchld);
TALLY(sigusr1);
TALLY(sigusr2);
static volatile sig_atomic_t reaped;
static volatile pid_t last_child;
static int handled[2];

static void say(const char *text)
{
    if (write(1, text, strlen(text)) < 0)
        _exit(2);
}

static void on_child(int sig)
{
    (void)sig;
    int saved = errno;
    BUMP(sigchld);
    while (waitpid(-1, NULL, WNOHANG) > 0)
        reaped++;
    errno = saved;
}

static void on_usr1(int sig, siginfo_t *info, void *context)
{
    (void)sig;
    (void)context;
    BUMP(sigusr1);
    char line[64];
    snprintf(line, sizeof line, "usr1 code %d from the child %d\n", info->si_code,
             info->si_pid == last_child);
    say(line);
}

static void on_usr2(int sig)
{
    (void)sig;
    BUMP(sigusr2);
    say("usr2\n");
    if (write(handled[1], "h", 1) != 1)
        _exit(2);
}

static void handle(int sig, void (*plain)(int), void (*full)(int, siginfo_t *, void *),
                   int flags)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    if (full) {
        sa.sa_sigaction = full;
        flags |= SA_SIGINFO;
    } else {
        sa.sa_handler = plain;
    }
    sa.sa_flags = flags;
    if (sigaction(sig, &sa, NULL) != 0)
        _exit(3);
}

int main(int argc, char **argv)
{
    int children = arg_or(argc, argv, 1, 4);
    handle(SIGCHLD, on_child, NULL, SA_RESTART);
    handle(SIGUSR1, NULL, on_usr1, SA_RESTART);
    handle(SIGUSR2, on_usr2, NULL, 0);
    // SIGUSR1 waits until the last child's pid is known.
    sigset_t usr1, old;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, &old);
    int fds[2], ready[2];
    if (pipe(fds) != 0 || pipe(ready) != 0 || pipe(handled) != 0)
        return 4;
    for (int i = 0; i < children; i++) {
        pid_t child = fork();
        if (child == 0) {
            if (i == children - 1) {
                // Once the parent is about to read (and 50 ms more, for it
                // to block in the read).
                char go;
                if (read(ready[0], &go, 1) != 1)
                    _exit(5);
                usleep(50000);
                kill(getppid(), SIGUSR2);
                if (read(handled[0], &go, 1) != 1)
                    _exit(5);
                kill(getppid(), SIGUSR1);
                usleep(2000);
                if (write(fds[1], "x", 1) != 1)
                    _exit(5);
            }
            usleep(3000 * (i + 1));
            _exit(0);
        }
        last_child = child;
    }
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (write(ready[1], "r", 1) != 1)
        return 7;
    char byte;
    ssize_t got;
    while ((got = read(fds[0], &byte, 1)) < 0 && errno == EINTR)
        say("read interrupted\n");
    if (got != 1)
        return 6;
    // Short sleeps (the signals mostly come as one returns: a signal
    // inside the few instructions that write a call's record loses the
    // handler's records, docs/syscalls.md).
    long naps = 0;
    struct timespec nap = {0, 50000};
    while (reaped < children && naps < 100000) {
        nanosleep(&nap, NULL);
        naps++;
    }
    printf("reaped %d after %ld naps\n", (int)reaped, naps);
    PRINT_TALLY(sigchld);
    PRINT_TALLY(sigusr1);
    PRINT_TALLY(sigusr2);
    return 0;
}
