/* A program that handles faults of its own, for abstract execution, whose
 * buffer handovers are SIGSEGVs: it installs a SIGSEGV handler (as GNU
 * grep's stack-overflow guard and libsigsegv users do) and takes N faults
 * on a page it protects, the handler opening the page each time; a
 * worker thread runs with every signal blocked (as xz's do); a SIGUSR1
 * handler whose mask blocks every signal runs traced code. Each part
 * calls step() and prints its own tally; the handler's action is read
 * back as the program set it. Usage: paths_faults [N] */
#define _GNU_SOURCE
#include "tally.h"
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

TALLY(faults);
TALLY(step);
static volatile long sink;
static char *page;
static long page_size;

NOINLINE void step(long i)
{
    BUMP(step);
    if (i % 3 == 0)
        sink += i;
    else
        sink -= 1;
}

static void work(long n)
{
    for (long i = 0; i < n; i++)
        step(i);
}

static void on_fault(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)uc;
    if ((char *)info->si_addr < page || (char *)info->si_addr >= page + page_size)
        _exit(99); /* a fault that is not the program's own */
    BUMP(faults);
    work(50);
    mprotect(page, page_size, PROT_READ | PROT_WRITE);
}

static long usr1_steps;

static void on_usr1(int sig)
{
    (void)sig;
    work(3000);
    usr1_steps = 3000;
}

static void *blocked_worker(void *arg)
{
    long n = (long)arg;
    sigset_t now;
    pthread_sigmask(SIG_SETMASK, NULL, &now);
    work(n);
    printf("worker ran %ld steps with %s blocked\n", n,
           sigismember(&now, SIGINT) ? "signals" : "nothing");
    return NULL;
}

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 200);
    page_size = sysconf(_SC_PAGESIZE);
    page = mmap(NULL, page_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    struct sigaction sa, back;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    sigaction(SIGSEGV, NULL, &back);
    printf("own fault handler read back: %s\n",
           back.sa_sigaction == on_fault ? "yes" : "no");

    for (int i = 0; i < n; i++) {
        mprotect(page, page_size, PROT_NONE);
        page[i % page_size] = 1; /* faults; the handler opens the page */
        work(100);
    }

    /* A thread created with every signal blocked. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    pthread_create(&t, NULL, blocked_worker, (void *)20000L);
    pthread_join(t, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);

    /* A handler whose mask blocks every signal. */
    struct sigaction su;
    memset(&su, 0, sizeof su);
    su.sa_handler = on_usr1;
    sigfillset(&su.sa_mask);
    sigaction(SIGUSR1, &su, NULL);
    raise(SIGUSR1);

    printf("faults %lu handler steps %ld\n", (unsigned long)atomic_load(&tally_faults), usr1_steps);
    PRINT_TALLY(step);
    return 0;
}
