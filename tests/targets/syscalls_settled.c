/* A process weft settles (every `syscall` site rewritten, Syscall User
 * Dispatch off) before it does anything: half a second of sleeps, then
 * dup(-7), the marker, and calls that need weft's SIGSYS handler or
 * dispatch's help otherwise: a signal handler installed, deliveries to it
 * (one pending until a mask lets it come), a thread made, a child forked.
 * Prints how many deliveries its handler saw. Usage: syscalls_settled */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t handled;

static void on_usr1(int sig)
{
    (void)sig;
    getppid();
    handled++;
}

static void *work(void *arg)
{
    (void)arg;
    for (int i = 0; i < 3; i++)
        getppid();
    close(-3);
    return 0;
}

int main(void)
{
    for (int i = 0; i < 60; i++)
        usleep(10000);
    dup(-7);
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, 0);
    for (int i = 0; i < 5; i++)
        kill(getpid(), SIGUSR1);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigprocmask(SIG_BLOCK, &set, 0);
    kill(getpid(), SIGUSR1);
    close(-4);
    sigprocmask(SIG_UNBLOCK, &set, 0);
    pthread_t t;
    pthread_create(&t, 0, work, 0);
    pthread_join(t, 0);
    pid_t child = fork();
    if (child == 0) {
        getppid();
        _exit(3);
    }
    int status;
    waitpid(child, &status, 0);
    printf("handled %d child %d\n", (int)handled, WEXITSTATUS(status));
    return 0;
}
