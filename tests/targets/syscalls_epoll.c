/* Two children that each write a letter into a pipe of their own after
 * the milliseconds their file (delay_a, delay_b: three digits, in the
 * current directory) says; the parent waits on both pipes with epoll
 * (each registered with its letter as the event's data), reads the one
 * the wait reports, and prints the letters in the order it read them. A
 * test changes the files between a record and its rerun, so the pipes
 * become ready in another order in the rerun. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
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

int main(void)
{
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
    for (int k = 0; k < 2; k++) {
        struct epoll_event got;
        if (epoll_wait(ep, &got, 1, -1) != 1) return 1;
        int fd = got.data.u64 == 'a' ? a[0] : b[0];
        if (read(fd, &order[k], 1) != 1) return 1;
        epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    }
    waitpid(pa, NULL, 0);
    waitpid(pb, NULL, 0);
    printf("read %c, then %c\n", order[0], order[1]);
    return 0;
}
