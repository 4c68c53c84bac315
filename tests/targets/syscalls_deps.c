/* Resources shared between processes, for `weft syscalls deps`: a file
 * opened once and shared with a forked child through one description, the
 * same file opened again under another path (its own description), a
 * pipe, a socket pair, descriptors moved with dup2 and F_DUPFD_CLOEXEC,
 * and an exec that keeps one descriptor and loses the close-on-exec one.
 * waitpid orders the processes, so the order between them does not
 * depend on timing. dup(-7) marks where each process's own calls begin
 * (weft records from the entry, strace from exec).
 * Usage: syscalls_deps DIR (a directory to work in) */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static void execed(int keep, int lost)
{
    char b[8];
    lseek(keep, 0, SEEK_SET);
    read(keep, b, 4);
    if (read(lost, b, 1) < 0) write(1, "lost\n", 5);
    close(keep);
}

int main(int argc, char **argv)
{
    dup(-7);
    if (argc > 3 && strcmp(argv[1], "exec") == 0) {
        execed(atoi(argv[2]), atoi(argv[3]));
        return 0;
    }
    if (argc < 2 || chdir(argv[1]) != 0) return 2;
    mkdir("sub", 0755);
    int f = open("data", O_RDWR | O_CREAT | O_TRUNC, 0644);
    write(f, "0123456789", 10);
    lseek(f, 0, SEEK_SET);
    int p[2], s[2];
    pipe(p);
    socketpair(AF_UNIX, SOCK_STREAM, 0, s);
    char b[16];
    pid_t c = fork();
    if (c == 0) {
        dup(-7);
        close(p[0]);
        read(f, b, 4); /* through the parent's description: offset 4 */
        int again = open("sub/../data", O_RDONLY); /* a description of its own */
        read(again, b, 2);
        write(p[1], "piped", 5);
        write(s[1], "sock", 4);
        close(again);
        _exit(0);
    }
    waitpid(c, 0, 0);
    close(p[1]);
    read(p[0], b, sizeof b); /* "piped" */
    read(p[0], b, sizeof b); /* 0: the child's end is closed */
    read(s[0], b, sizeof b);
    read(f, b, 2);           /* offset 4: after the child's read */
    int other = open("data", O_RDONLY);
    read(other, b, 3);       /* its own description: no order with the child's */
    dup2(f, 10);
    int lost = fcntl(f, F_DUPFD_CLOEXEC, 20);
    write(f, "!", 1);
    fflush(stdout);
    pid_t e = fork();
    if (e == 0) {
        dup(-7);
        char keep[16], gone[16];
        snprintf(keep, sizeof keep, "%d", 10);
        snprintf(gone, sizeof gone, "%d", lost);
        execl("/proc/self/exe", argv[0], "exec", keep, gone, (char *)0);
        _exit(127);
    }
    waitpid(e, 0, 0);
    unlink("data");
    rmdir("sub");
    write(1, "done\n", 5);
    return 0;
}
