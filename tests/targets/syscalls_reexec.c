/* What a rerun cannot reproduce by itself, printed: the time (from the
 * vDSO's clocks, no system call), its pid, a thread's id, random bytes,
 * what it read from its standard input (a pipe from outside, with read
 * and readv), the id of the child it forks and that child's view of both
 * ids. Under `weft syscalls reexec` the output must be the recorded
 * run's, byte for byte. With an argument it opens that file before its
 * random bytes: a call the record does not have (a divergence). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sched.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void print_time(const char *who) {
    struct timespec real, mono;
    struct timeval tv;
    time_t now = 0, again = time(&now);
    clock_gettime(CLOCK_REALTIME, &real);
    clock_gettime(CLOCK_MONOTONIC, &mono);
    gettimeofday(&tv, 0);
    printf("%s time %lld %lld realtime %lld.%09ld monotonic %lld.%09ld timeofday %lld.%06ld\n",
           who, (long long)now, (long long)again, (long long)real.tv_sec, real.tv_nsec,
           (long long)mono.tv_sec, mono.tv_nsec, (long long)tv.tv_sec, (long)tv.tv_usec);
}

static void print_random(const char *who) {
    unsigned char r[8];
    if (getrandom(r, sizeof r, 0) != sizeof r)
        return;
    printf("%s random", who);
    for (unsigned i = 0; i < sizeof r; i++)
        printf(" %02x", r[i]);
    printf("\n");
}

static void *worker(void *arg) {
    printf("thread %d\n", gettid());
    print_time("thread");
    print_random("thread");
    return arg;
}

/* Opens and closes `path`, from a frame of its own: a divergence's
 * backtrace runs through it. */
__attribute__((noinline)) static void touch(const char *path) {
    int fd = open(path, O_RDONLY);
    __asm__ volatile("" ::: "memory");
    close(fd);
}

int main(int argc, char **argv) {
    /* Its first four bytes with read, the rest with readv into two
     * pieces: a rerun gets both from the record, through the vector. */
    char input[256];
    ssize_t n = read(0, input, 4);
    if (n == 4) {
        struct iovec rest[2] = {{input + 4, 5}, {input + 9, sizeof input - 10}};
        ssize_t more = readv(0, rest, 2);
        n += more > 0 ? more : 0;
    }
    input[n > 0 ? n : 0] = 0;
    if (argc > 1)
        touch(argv[1]);
    print_random("main");
    print_time("main");
    unsigned cpu = 0;
    if (getcpu(&cpu, 0) == 0)
        printf("cpu %u\n", cpu);
    printf("pid %d read %zd: %s\n", getpid(), n, input);
    printf("kill(self, 0) = %d\n", kill(getpid(), 0));
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    pthread_join(t, 0);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        printf("child %d of %d\n", getpid(), getppid());
        return 0;
    }
    int status = 0;
    pid_t reaped = waitpid(child, &status, 0);
    printf("forked %d, reaped %d, status %d\n", child, reaped, status);
    return 0;
}
