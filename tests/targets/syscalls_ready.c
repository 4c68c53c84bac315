/* Two children that each write a letter into a pipe of their own after
 * the milliseconds their file (delay_a, delay_b: three digits, in the
 * current directory) says; the parent waits on both pipes, reads the one
 * the wait reports, and prints the letters in the order it read them. It
 * waits with epoll (each pipe registered with its letter as the event's
 * data), or with select when its argument says `select`. A test changes
 * the files between a record and its rerun, so the pipes become ready in
 * another order in the rerun. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static pid_t child(const char *file, int out, char letter)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    char digits[4] = { 0 };
    int fd = open(file, O_RDONLY);
    if (fd < 0 || read(fd, digits, 3) != 3) _exit(2);
    long ms = atol(digits);
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
    _exit(write(out, &letter, 1) == 1 ? 0 : 3);
}

int main(int argc, char **argv)
{
    int by_select = argc > 1 && strcmp(argv[1], "select") == 0;
    int a[2], b[2];
    if (pipe(a) != 0 || pipe(b) != 0) return 1;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = { .events = EPOLLIN };
    ev.data.u64 = 'a';
    if (epoll_ctl(ep, EPOLL_CTL_ADD, a[0], &ev) != 0) return 1;
    ev.data.u64 = 'b';
    if (epoll_ctl(ep, EPOLL_CTL_ADD, b[0], &ev) != 0) return 1;
    pid_t pa = child("delay_a", a[1], 'a');
    pid_t pb = child("delay_b", b[1], 'b');
    char order[3] = { 0 };
    int done_a = 0, done_b = 0;
    for (int k = 0; k < 2; k++) {
        int fd;
        if (by_select) {
            fd_set ready;
            FD_ZERO(&ready);
            if (!done_a) FD_SET(a[0], &ready);
            if (!done_b) FD_SET(b[0], &ready);
            int top = a[0] > b[0] ? a[0] : b[0];
            if (select(top + 1, &ready, NULL, NULL, NULL) < 1) return 1;
            fd = !done_a && FD_ISSET(a[0], &ready) ? a[0] : b[0];
        } else {
            struct epoll_event got;
            if (epoll_wait(ep, &got, 1, -1) != 1) return 1;
            fd = got.data.u64 == 'a' ? a[0] : b[0];
            /* EPOLL_CTL_DEL ignores its event: the second passes an
             * address nothing is mapped at, as the kernel allows. */
            epoll_ctl(ep, EPOLL_CTL_DEL, fd, k == 0 ? NULL : (struct epoll_event *)16);
        }
        if (read(fd, &order[k], 1) != 1) return 1;
        if (fd == a[0]) done_a = 1; else done_b = 1;
    }
    waitpid(pa, NULL, 0);
    waitpid(pb, NULL, 0);
    printf("read %c, then %c\n", order[0], order[1]);
    return 0;
}
