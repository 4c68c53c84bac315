/* System calls of a workload: three threads, a forked child and a vfork
 * child that exec this program again, and a pipe; the same calls on every
 * run but for futex waits, which depend on timing. dup(-7) marks where
 * each image's own calls begin (weft records from the entry, strace from
 * exec). Usage: syscalls_workload [child] */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void *work(void *arg)
{
    char b[4];
    read(*(int *)arg, b, 1);
    close(-3);
    return 0;
}

int main(int argc, char **argv)
{
    dup(-7);
    if (argc > 1 && strcmp(argv[1], "child") == 0) {
        write(1, "child\n", 6);
        return 4;
    }
    int p[2];
    pipe(p);
    write(p[1], "abc", 3);
    pthread_t t[3];
    for (int i = 0; i < 3; i++) {
        pthread_create(&t[i], 0, work, &p[0]);
        pthread_join(t[i], 0);
    }
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        close(-9);
        execl("/proc/self/exe", argv[0], "child", (char *)0);
        _exit(127);
    }
    int st = 0;
    waitpid(c, &st, 0);
    printf("child %d\n", WEXITSTATUS(st));
    fflush(stdout);
    /* A child that runs on this thread's memory and thread pointer until
     * it execs, as posix_spawn's does. */
    pid_t v = vfork();
    if (v == 0) {
        execl("/proc/self/exe", argv[0], "child", (char *)0);
        _exit(127);
    }
    waitpid(v, &st, 0);
    printf("vfork child %d\n", WEXITSTATUS(st));
    return 0;
}
