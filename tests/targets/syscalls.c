/* System calls of many kinds, the same on every run, for comparing weft's
 * capture with strace's. The first, close(-7), marks where the program's
 * own calls begin (weft records from the program's entry, strace from
 * exec). Usage: syscalls DIR [wait] (a scratch directory; "wait" sleeps
 * half a second first). */
#define _GNU_SOURCE
#include <dirent.h>
#include <stddef.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysinfo.h>
#include <sys/time.h>
#include <sys/un.h>
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

/* Calls whose flags, signal sets and structures are decoded as strace
 * decodes them, each the same in every run: clones that fail (a child
 * would be weft's but not strace's without -f), signals by the kernel's
 * numbers, buffers strace shows by address at a fixed one. */
static void decoded_calls(const char *dir)
{
    syscall(SYS_clone, CLONE_SIGHAND | SIGCHLD, 0, 0, 0, 0);
    /* Without CLONE_VM: weft loses the calls after a CLONE_VM clone that
     * fails (it waits for the child's return on the parent's thread). */
    syscall(SYS_clone,
            CLONE_FS | CLONE_NEWNS | CLONE_SETTLS | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID |
                CLONE_CHILD_SETTID | SIGCHLD,
            0x1000, 0x2000, 0x3000, 0x4000);
    /* No process group is above the largest pid. */
    kill(-4194305, 32);
    kill(-4194305, 33);
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGRTMIN + 1);
    sigprocmask(SIG_BLOCK, &set, &old);
    sigprocmask(SIG_SETMASK, &old, NULL);
    struct sigaction action;
    sigaction(SIGUSR2, NULL, &action);
    char path[600], other[600], sub[600], entry[700];
    snprintf(path, sizeof path, "%s/m", dir);
    snprintf(other, sizeof other, "%s/n", dir);
    snprintf(sub, sizeof sub, "%s/e", dir);
    snprintf(entry, sizeof entry, "%s/e/x", dir);
    faccessat(AT_FDCWD, path, R_OK, AT_EACCESS);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 04755);
    write(fd, "abc", 3);
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    posix_fadvise(fd, 0, 0, 77);
    int to = open(other, O_CREAT | O_WRONLY | O_TRUNC, 0600);
    lseek(fd, 0, SEEK_SET);
    copy_file_range(fd, NULL, to, NULL, 3, 0);
    fchmod(fd, 07);
    chmod(path, 01777);
    struct statx sx;
    statx(AT_FDCWD, path, 0, STATX_TYPE | STATX_MODE | STATX_SIZE, &sx);
    statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_ALL, &sx);
    syscall(SYS_setresuid, -1, -1, -1);
    syscall(SYS_setresgid, -1, -1, -1);
    struct sysinfo info;
    sysinfo(&info);
    char *fixed = mmap((void *)0x10000000, 65536, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (fixed != MAP_FAILED) {
        mkdir(sub, 0700);
        close(open(entry, O_CREAT | O_WRONLY, 0600));
        int d = open(sub, O_RDONLY | O_DIRECTORY);
        getdents64(d, fixed, 4096);
        getdents64(d, fixed, 4096);
        close(d);
        statx(AT_FDCWD, entry, 0, STATX_ALL, (struct statx *)(fixed + 8192));
        unlink(entry);
        rmdir(sub);
        statx(AT_FDCWD, entry, 0, STATX_ALL, (struct statx *)(fixed + 8192));
        madvise(fixed, 65536, MADV_DONTNEED);
        madvise(fixed, 65536, MADV_WILLNEED);
        munmap(fixed, 65536);
    }
    /* Sockets' protocols and options, a timer set and read back, the
     * close-on-exec ioctls. */
    int tcp = socket(AF_INET, SOCK_STREAM, 0);
    int udp = socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP);
    int one = 1;
    setsockopt(tcp, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int value = 0;
    socklen_t length = sizeof value;
    getsockopt(tcp, SOL_SOCKET, SO_TYPE, &value, &length);
    length = sizeof value;
    getsockopt(tcp, IPPROTO_TCP, TCP_NODELAY, &value, &length);
    /* An option no level has: fails, its length left as given. */
    getsockopt(tcp, SOL_SOCKET, 0x3039, NULL, &length);
    ioctl(udp, FIOCLEX);
    ioctl(udp, FIONCLEX);
    close(tcp);
    close(udp);
    /* Socket addresses the kernel fills in: a named listener's, a
     * connection's unnamed peer, a datagram's source. Each length given is
     * the address's own, which strace then shows as one number. */
    struct sockaddr_un named, got;
    memset(&named, 0, sizeof named);
    named.sun_family = AF_UNIX;
    snprintf(named.sun_path, sizeof named.sun_path, "%s/sock", dir);
    socklen_t named_length = offsetof(struct sockaddr_un, sun_path) + strlen(named.sun_path) + 1;
    int listener = socket(AF_UNIX, SOCK_STREAM, 0);
    bind(listener, (struct sockaddr *)&named, named_length);
    listen(listener, 1);
    int client = socket(AF_UNIX, SOCK_STREAM, 0);
    connect(client, (struct sockaddr *)&named, named_length);
    socklen_t got_length = sizeof(sa_family_t);
    int served = accept(listener, (struct sockaddr *)&got, &got_length);
    got_length = named_length;
    getsockname(listener, (struct sockaddr *)&got, &got_length);
    got_length = named_length;
    getpeername(client, (struct sockaddr *)&got, &got_length);
    got_length = sizeof(sa_family_t);
    getsockname(client, (struct sockaddr *)&got, &got_length);
    struct sockaddr_un target = named, source = named;
    snprintf(target.sun_path, sizeof target.sun_path, "%s/to", dir);
    snprintf(source.sun_path, sizeof source.sun_path, "%s/from", dir);
    socklen_t target_length = offsetof(struct sockaddr_un, sun_path) + strlen(target.sun_path) + 1;
    socklen_t source_length = offsetof(struct sockaddr_un, sun_path) + strlen(source.sun_path) + 1;
    int receiver = socket(AF_UNIX, SOCK_DGRAM, 0);
    int sender = socket(AF_UNIX, SOCK_DGRAM, 0);
    bind(receiver, (struct sockaddr *)&target, target_length);
    bind(sender, (struct sockaddr *)&source, source_length);
    sendto(sender, "d", 1, 0, (struct sockaddr *)&target, target_length);
    char datagram[4];
    got_length = source_length;
    recvfrom(receiver, datagram, sizeof datagram, 0, (struct sockaddr *)&got, &got_length);
    close(served);
    close(client);
    close(listener);
    close(receiver);
    close(sender);
    unlink(named.sun_path);
    unlink(target.sun_path);
    unlink(source.sun_path);
    struct itimerval none = {{0, 0}, {0, 0}}, before;
    setitimer(ITIMER_VIRTUAL, &none, &before);
    getitimer(ITIMER_VIRTUAL, &before);
    close(to);
    close(fd);
    unlink(other);
    unlink(path);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    /* "wait": half a second of sleeps first, for weft to settle the
     * process (rewrite every site, dispatch off) before the calls. */
    if (argc > 2 && strcmp(argv[2], "wait") == 0)
        for (int i = 0; i < 50; i++)
            usleep(10000);
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
    decoded_calls(argv[1]);
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
