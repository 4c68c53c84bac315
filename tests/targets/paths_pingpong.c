/* Two processes, then two threads, taking turns through pipes: ping(i)
 * runs, then the other side's pong(i), then ping(i+1), ... Each side
 * waits in read() for the other's write(), so the order in time is fixed
 * by the program itself: an interleaved trace must show the calls
 * alternating. The child comes back from fork inside a helper, and goes
 * on in main's frame, which its own trace never entered: it is its
 * parent's. Usage: paths_pingpong [ROUNDS] */
#define _GNU_SOURCE
#include "tally.h"
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile long sink;

NOINLINE void ping(long i)
{
    for (long k = 0; k < 20; k++)
        sink += i ^ k;
}

NOINLINE void pong(long i)
{
    for (long k = 0; k < 30; k++)
        sink -= i + k;
}

static int to_other[2], to_me[2];

NOINLINE pid_t spawn(void)
{
    pid_t p = fork();
    if (p < 0)
        _exit(5);
    return p;
}
static int rounds;

static void pinger(void)
{
    char c = 0;
    for (long i = 0; i < rounds; i++) {
        ping(i);
        if (write(to_other[1], &c, 1) != 1 || read(to_me[0], &c, 1) != 1)
            _exit(2);
    }
}

static void *ponger(void *unused)
{
    (void)unused;
    char c;
    for (long i = 0; i < rounds; i++) {
        if (read(to_other[0], &c, 1) != 1)
            _exit(3);
        pong(i);
        if (write(to_me[1], &c, 1) != 1)
            _exit(4);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    rounds = arg_or(argc, argv, 1, 50);
    if (pipe(to_other) || pipe(to_me))
        return 1;
    pid_t child = spawn();
    if (child == 0) {
        ponger(NULL);
        _exit(0);
    }
    pinger();
    int status;
    waitpid(child, &status, 0);
    pthread_t t;
    pthread_create(&t, NULL, ponger, NULL);
    pinger();
    pthread_join(t, NULL);
    printf("%d rounds with a process, %d with a thread\n", rounds, rounds);
    return 0;
}
