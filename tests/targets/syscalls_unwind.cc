/* Unwinding from a thread blocked in a system call: the stack as
 * backtrace() sees it from a signal handler, and the destructors
 * pthread_cancel runs. Twice: blocked in the C library's read() (a
 * cancellation point), and in a raw syscall(SYS_read) with asynchronous
 * cancellation. Prints each backtrace as "frame MODE I WHERE" lines
 * (module+offset where dladdr knows the address, the address itself
 * where it does not) and "tally" lines for what ran. The first worker
 * waits BEFORE_READ ms before its call, and the signal comes
 * BEFORE_SIGNAL ms after that (a weft that attached meanwhile may have
 * detached while the worker waits in its code). Last, after AFTER ms of
 * short sleeps, the main thread throws and catches an exception (through
 * the C unwinder that a weft gone since hooked).
 * Usage: syscalls_unwind [BEFORE_READ [BEFORE_SIGNAL [AFTER]]] (0, 100, 0) */
#include <atomic>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int pipes[2][2];
static std::atomic<int> destroyed{0}, waiting{0}, handled{0};
static void *frames[64];
static int depth;
static long before_read;

struct Guard {
    ~Guard() { destroyed++; }
};

extern "C" __attribute__((noinline)) void blocked_in_read(int raw)
{
    Guard guard;
    char c;
    waiting++;
    if (raw) {
        pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, nullptr);
        syscall(SYS_read, pipes[1][0], &c, 1);
    } else {
        read(pipes[0][0], &c, 1);
    }
}

static void pause_ms(long ms);

static void *worker(void *raw)
{
    if (raw == nullptr) pause_ms(before_read);
    blocked_in_read(raw != nullptr);
    return nullptr;
}

static void on_usr1(int)
{
    depth = backtrace(frames, 64);
    handled++;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static void print_frames(const char *mode)
{
    for (int i = 0; i < depth; i++) {
        Dl_info info;
        if (dladdr(frames[i], &info) && info.dli_fname && info.dli_fname[0]) {
            const char *base = strrchr(info.dli_fname, '/');
            printf("frame %s %d %s+%#lx\n", mode, i, base ? base + 1 : info.dli_fname,
                   (unsigned long)((char *)frames[i] - (char *)info.dli_fbase));
        } else {
            printf("frame %s %d %p\n", mode, i, frames[i]);
        }
    }
}

int main(int argc, char **argv)
{
    before_read = argc > 1 ? atol(argv[1]) : 0;
    long before_signal = argc > 2 ? atol(argv[2]) : 100;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_usr1;
    action.sa_flags = SA_RESTART;
    sigaction(SIGUSR1, &action, nullptr);
    int canceled = 0;
    for (int raw = 0; raw < 2; raw++) {
        if (pipe(pipes[raw]) != 0) return 1;
        waiting = 0;
        handled = 0;
        pthread_t t;
        pthread_create(&t, nullptr, worker, raw ? (void *)1 : nullptr);
        for (int i = 0; i < 500 && waiting == 0; i++) pause_ms(10);
        pause_ms(raw ? 100 : before_signal); /* in the call by now */
        pthread_kill(t, SIGUSR1);
        for (int i = 0; i < 500 && handled == 0; i++) pause_ms(10);
        print_frames(raw ? "syscall" : "read");
        pthread_cancel(t);
        void *result;
        pthread_join(t, &result);
        canceled += result == PTHREAD_CANCELED;
    }
    long after = argc > 3 ? atol(argv[3]) : 0;
    for (long waited = 0; waited < after; waited += 10) pause_ms(10);
    int caught = 0;
    try {
        throw 1;
    } catch (int) {
        caught = 1;
    }
    printf("tally caught %d\n", caught);
    printf("tally canceled %d\n", canceled);
    printf("tally destroyed %d\n", destroyed.load());
    return 0;
}
