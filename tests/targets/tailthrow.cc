// Functions that end in a tail call, left in other ways than a return:
// pick -> check, which throws for odd numbers (caught in main); look ->
// frames, which takes a backtrace (glibc's backtrace, through libgcc's
// unwinder); leave -> quit, which ends its thread with pthread_exit; and
// branch -> split, which forks (the child returns through branch too).
// The program times pick with its own clock and checks the backtrace's
// depth against one taken without look in between.
#include <cstdio>
#include <cstdlib>
#include <execinfo.h>
#include <pthread.h>
#include <stdexcept>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long now()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

__attribute__((noinline)) void nap(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, 0);
}

__attribute__((noipa)) int check(int i)
{
    nap(2);
    if (i % 2) throw std::runtime_error("odd");
    return i;
}
__attribute__((noinline)) int pick(int i) { return check(i); }

__attribute__((noipa)) int frames(int)
{
    void *b[64];
    return backtrace(b, 64);
}
__attribute__((noinline)) int look(int i) { return frames(i); }

__attribute__((noipa)) void quit(int ms)
{
    nap(ms);
    pthread_exit(0);
}
__attribute__((noinline)) void leave(int ms) { quit(ms); }

static long leave_us;

// Destroyed when pthread_exit's unwinding leaves leaver: the time the
// thread spent in leave, as the program sees it.
struct Stamp {
    long t0 = now();
    ~Stamp() { leave_us = (now() - t0) / 1000; }
};

static void *leaver(void *)
{
    Stamp stamp;
    leave(30);
    return 0;
}

__attribute__((noipa)) int split(int) { return fork(); }
__attribute__((noinline)) int branch(int i) { return split(i); }

int main(int argc, char **argv)
{
    int n = argc > 1 ? std::atoi(argv[1]) : 20;
    long own_pick = 0, s = 0;
    int caught = 0;
    for (int i = 0; i < n; i++) {
        long t0 = now();
        try {
            s += pick(i);
        } catch (const std::exception &) {
            caught++;
        }
        own_pick += now() - t0;
    }
    int direct = frames(0), through = look(0);
    pthread_t t;
    pthread_create(&t, 0, leaver, 0);
    pthread_join(t, 0);
    int r = branch(0);
    if (r == 0) _exit(42);
    int status = 0;
    waitpid(r, &status, 0);
    std::printf("tally pick_us %ld\ntally caught %d\ntally sum %ld\n", own_pick / 1000, caught, s);
    std::printf("tally frames_direct %d\ntally frames_through %d\n", direct, through);
    std::printf("tally child_status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    std::printf("tally leave_us %ld\n", leave_us);
    return 0;
}
