/* Calls a thread leaves without returning: a signal handler takes the
 * main thread out of a blocked read with siglongjmp, and pthread_cancel
 * unwinds a thread blocked in a read (its cleanup handler writes a line;
 * not with the argument `longjmp`, nor `stdin`, whose read is standard
 * input's). Neither read ever returns; nothing is
 * written into the pipe. The program prints what happened, and ends with
 * getppid(). With `storm N`, a handler leaves weft's own code (below);
 * with `kill N`, calls it leaves had finished; with `fork`, a child does it all. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static sigjmp_buf back;
static int fds[2];

static void say(const char *text) {
    if (write(1, text, strlen(text)) < 0)
        _exit(2);
}

static void on_alarm(int sig) {
    (void)sig;
    say("alarm\n");
    siglongjmp(back, 1);
}

static void cleanup(void *arg) {
    (void)arg;
    say("cleanup\n");
}

static void *blocked(void *arg) {
    char c;
    (void)arg;
    pthread_cleanup_push(cleanup, NULL);
    if (read(fds[0], &c, 1) >= 0)
        say("the thread's read returned\n");
    pthread_cleanup_pop(0);
    return NULL;
}

/* `storm N`: a 50 us interval timer whose handler jumps back to the loop
 * wherever the thread is, weft's code included, while the loop makes N
 * getppid() calls, and more until the timer has cut it 30 times (at most
 * 100 N: a loaded machine once let it cut 20,000 calls once only). Prints
 * the calls and the jumps. */
static volatile long jumps;

static void jump_back(int sig) {
    (void)sig;
    jumps++;
    siglongjmp(back, 1);
}

static int storm(long n) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = jump_back;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval often = {{0, 50}, {0, 50}};
    setitimer(ITIMER_REAL, &often, NULL);
    static volatile long calls;
    sigsetjmp(back, 1);
    while (calls < n || (jumps < 30 && calls < 100 * n)) {
        calls++;
        getppid();
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("calls %ld jumps %ld\n", calls, jumps);
    return 0;
}

static int scenario(int argc, char **argv) {
    char c;
    if (pipe(fds) != 0)
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval once = {{0, 0}, {0, 50000}};
    /* `stdin`: the read left is one of standard input's. */
    int from_stdin = argc > 1 && strcmp(argv[1], "stdin") == 0;
    if (sigsetjmp(back, 1) == 0) {
        setitimer(ITIMER_REAL, &once, NULL);
        if (read(from_stdin ? 0 : fds[0], &c, 1) >= 0)
            say("the read returned\n");
    }
    say("left the read\n");
    if (from_stdin || (argc > 1 && strcmp(argv[1], "longjmp") == 0))
        return getppid() > 0 ? 0 : 1;
    pthread_t thread;
    if (pthread_create(&thread, NULL, blocked, NULL) != 0)
        return 1;
    struct timespec pause = {0, 100000000};
    nanosleep(&pause, NULL);
    pthread_cancel(thread);
    void *result;
    pthread_join(thread, &result);
    say(result == PTHREAD_CANCELED ? "cancelled\n" : "not cancelled\n");
    return getppid() > 0 ? 0 : 1;
}

/* `kill N`: N times, a kill() of itself whose SIGUSR1, delivered as the
 * call returns, jumps out of it: a call left with its result (0). */
static sigjmp_buf out_of_kill;
static void jump_out_of_kill(int sig) {
    (void)sig;
    siglongjmp(out_of_kill, 1);
}

static int kills(long n) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = jump_out_of_kill;
    sigaction(SIGUSR1, &sa, NULL);
    static volatile long jumped, i;
    for (i = 0; i < n; i++)
        if (sigsetjmp(out_of_kill, 1) == 0)
            kill(getpid(), SIGUSR1);
        else
            jumped++;
    printf("jumped %ld\n", jumped);
    return 0;
}

/* `fork`: a forked child runs the whole scenario, its thread cancelled
 * in a process that is not the first. */
int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "storm") == 0)
        return storm(atol(argv[2]));
    if (argc > 2 && strcmp(argv[1], "kill") == 0)
        return kills(atol(argv[2]));
    if (argc > 1 && strcmp(argv[1], "fork") == 0) {
        pid_t child = fork();
        if (child == 0)
            return scenario(1, argv);
        int status = -1;
        waitpid(child, &status, 0);
        char line[64];
        snprintf(line, sizeof line, "child ended %d\n", status);
        say(line);
        return 0;
    }
    return scenario(argc, argv);
}
