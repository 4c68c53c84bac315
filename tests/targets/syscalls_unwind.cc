/* Unwinding from a thread blocked in a system call: the stack as
 * backtrace() sees it from a signal handler, and the destructors
 * pthread_cancel runs. Twice: blocked in the C library's read() (a
 * cancellation point), and in a raw syscall(SYS_read) with asynchronous
 * cancellation. Prints each backtrace as "frame MODE I WHERE" lines
 * (module+offset where dladdr knows the address, the address itself
 * where it does not) and "tally" lines for what ran.
 * Usage: syscalls_unwind */
#include <atomic>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int pipes[2][2];
static std::atomic<int> destroyed{0}, waiting{0}, handled{0};
static void *frames[64];
static int depth;

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

static void *worker(void *raw)
{
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
    nanosleep(&ts, nullptr);
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

int main()
{
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
        pause_ms(100); /* in the call by now */
        pthread_kill(t, SIGUSR1);
        for (int i = 0; i < 500 && handled == 0; i++) pause_ms(10);
        print_frames(raw ? "syscall" : "read");
        pthread_cancel(t);
        void *result;
        pthread_join(t, &result);
        canceled += result == PTHREAD_CANCELED;
    }
    printf("tally canceled %d\n", canceled);
    printf("tally destroyed %d\n", destroyed.load());
    return 0;
}
