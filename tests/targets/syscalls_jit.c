/* System calls made from code the program generates at run time, which
 * no tool could rewrite before it ran: a page of `mov eax, N; syscall;
 * ret` stubs written into anonymous executable memory, then called, and
 * a thread doing the same while the main thread does. Prints its tally
 * of calls made there (getppid, then getpid and gettid from the thread)
 * and what they returned compared with the C library's answers.
 * Usage: syscalls_jit [calls] (1000) */
#include "tally.h"
#include <pthread.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

TALLY(jit_getppid);
TALLY(jit_getpid);
TALLY(wrong);

typedef long (*stub)(void);

/* `mov eax, nr; syscall; ret` at `at`. */
static stub make_stub(unsigned char *at, int nr)
{
    unsigned char code[] = {0xb8, 0, 0, 0, 0, 0x0f, 0x05, 0xc3};
    memcpy(code + 1, &nr, 4);
    memcpy(at, code, sizeof code);
    return (stub)at;
}

static stub getpid_stub;
static long calls;

static void *worker(void *arg)
{
    (void)arg;
    for (long i = 0; i < calls; i++) {
        if (getpid_stub() != getpid()) BUMP(wrong);
        BUMP(jit_getpid);
    }
    return 0;
}

int main(int argc, char **argv)
{
    calls = arg_or(argc, argv, 1, 1000);
    unsigned char *page = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) return 1;
    stub getppid_stub = make_stub(page, 110);
    getpid_stub = make_stub(page + 64, 39);
    pthread_t t;
    pthread_create(&t, 0, worker, 0);
    for (long i = 0; i < calls; i++) {
        if (getppid_stub() != getppid()) BUMP(wrong);
        BUMP(jit_getppid);
    }
    pthread_join(t, 0);
    PRINT_TALLY(jit_getppid);
    PRINT_TALLY(jit_getpid);
    PRINT_TALLY(wrong);
    return 0;
}
