/* System calls of many kinds, the same on every run, for comparing weft's
 * capture with strace's. The first, close(-7), marks where the program's
 * own calls begin (weft records from the program's entry, strace from
 * exec). Usage: syscalls DIR (a scratch directory). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

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
