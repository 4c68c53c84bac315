/* System calls of many kinds, the same on every run, for comparing weft's
 * capture with strace's. The first, close(-7), marks where the program's
 * own calls begin (weft records from the program's entry, strace from
 * exec). Usage: syscalls DIR (a scratch directory). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

/* Calls whose memory lies behind other structures: vectors, messages
 * with a descriptor passed, and a terminal's ioctls. */
static void vectored_calls(void)
{
    int p[2];
    pipe(p);
    struct iovec out[2] = {{"hello ", 6}, {"vectors\n", 8}};
    writev(p[1], out, 2);
    int n = -1;
    ioctl(p[0], FIONREAD, &n);
    char a[4], b[16];
    struct iovec in[2] = {{a, sizeof a}, {b, sizeof b}};
    readv(p[0], in, 2);
    int s[2];
    socketpair(AF_UNIX, SOCK_STREAM, 0, s);
    union {
        char bytes[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    memset(&control, 0, sizeof control);
    struct iovec part = {"msg!", 4};
    struct msghdr m = {.msg_iov = &part, .msg_iovlen = 1, .msg_control = control.bytes,
                       .msg_controllen = sizeof control.bytes};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &p[0], sizeof(int));
    sendmsg(s[0], &m, 0);
    char got[8], got_control[64];
    struct iovec into = {got, sizeof got};
    struct msghdr r = {.msg_iov = &into, .msg_iovlen = 1, .msg_control = got_control,
                       .msg_controllen = sizeof got_control};
    recvmsg(s[1], &r, MSG_CMSG_CLOEXEC);
    struct cmsghdr *passed = CMSG_FIRSTHDR(&r);
    if (passed && passed->cmsg_type == SCM_RIGHTS) {
        int fd;
        memcpy(&fd, CMSG_DATA(passed), sizeof fd);
        close(fd);
    }
    close(s[0]);
    close(s[1]);
    close(p[0]);
    close(p[1]);
    int pty = open("/dev/ptmx", O_RDWR | O_NOCTTY);
    if (pty < 0)
        return;
    struct winsize size = {24, 80, 0, 0}, back;
    ioctl(pty, TIOCSWINSZ, &size);
    ioctl(pty, TIOCGWINSZ, &back);
    struct termios_kernel {
        unsigned iflag, oflag, cflag, lflag;
        unsigned char line, cc[19];
    } t;
    ioctl(pty, TCGETS, &t);
    close(pty);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    close(-7);
    char path[512], other[512], buf[256], cwd[512];
    snprintf(path, sizeof path, "%s/a", argv[1]);
    snprintf(other, sizeof other, "%s/b", argv[1]);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0600);
    ssize_t w = write(fd, "hello, syscalls\n", 16);
    lseek(fd, 0, SEEK_SET);
    ssize_t r = read(fd, buf, sizeof buf);
    struct stat st;
    fstat(fd, &st);
    int copy = dup(fd);
    dup2(copy, 20);
    fcntl(20, F_GETFD);
    close(20);
    close(copy);
    close(fd);
    rename(path, other);
    access(path, F_OK);
    unlink(other);
    int p[2];
    pipe2(p, O_CLOEXEC);
    write(p[1], "x", 1);
    read(p[0], buf, 1);
    close(p[0]);
    close(p[1]);
    vectored_calls();
    char dir[600];
    snprintf(dir, sizeof dir, "%s/d", argv[1]);
    mkdir(dir, 0700);
    rmdir(dir);
    rmdir(dir);
    getcwd(cwd, sizeof cwd);
    struct utsname u;
    uname(&u);
    umask(022);
    getuid();
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, 0);
    syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
    syscall(SYS_getrandom, buf, 16, 0);
    printf("wrote %zd read %zd size %lld\n", w, r, (long long)st.st_size);
    return 0;
}
