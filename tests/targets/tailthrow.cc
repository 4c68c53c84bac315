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

// The time check's nap takes, summed: the least a timer of pick can read.
static long pick_inner_ns;

__attribute__((noipa)) int check(int i)
{
    long t0 = now();
    nap(2);
    pick_inner_ns += now() - t0;
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

static long leave_t0, leave_us, quit_us;

__attribute__((noipa)) void quit(int ms)
{
    nap(ms);
    // The time in leave up to the start of pthread_exit: the least a timer
    // of leave can read, whatever the unwinding after it costs.
    quit_us = (now() - leave_t0) / 1000;
    pthread_exit(0);
}
__attribute__((noinline)) void leave(int ms) { quit(ms); }

// Destroyed when pthread_exit's unwinding leaves leaver: the time the
// thread spent in leave and in unwinding out of it, as the program sees it.
struct Stamp {
    Stamp() { leave_t0 = now(); }
    ~Stamp() { leave_us = (now() - leave_t0) / 1000; }
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
    std::printf("tally pick_inner_us %ld\n", pick_inner_ns / 1000);
    std::printf("tally frames_direct %d\ntally frames_through %d\n", direct, through);
    std::printf("tally child_status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    std::printf("tally leave_us %ld\ntally quit_us %ld\n", leave_us, quit_us);
    return 0;
}
