/* A long-running multi-threaded target for attach tests, driven by commands
 * on stdin so the test knows exactly which calls happen while weft is attached:
 *   go N T   start T new threads that call work() N times each; print "done TOTAL"
 *   spin T   start T background threads calling work() and leaf() until "stop"
 *   stop     stop the spinners, check every result, print "stopped OK|BAD ..."
 *   fork N   fork a child that calls work() N times, prints "child done N" and
 *            exits; print "forked PID" once it has
 *   quit     exit */
#include "tally.h"
#include <pthread.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

TALLY(work);
NOINLINE long leaf(long x) { return (x ^ 0x5a5a) + 1; }
NOINLINE long work(long x) { BUMP(work); return leaf(x) * 3; }

static int go_n;
static void *go_body(void *arg)
{
    long s = (long)arg;
    for (int i = 0; i < go_n; i++) s += work(i);
    return (void *)s;
}

static atomic_int spinning;
static atomic_ulong spin_calls, spin_bad;
static void *spin_body(void *arg)
{
    long x = (long)arg;
    while (atomic_load(&spinning)) {
        long want = ((x ^ 0x5a5a) + 1) * 3;
        if (work(x) != want) atomic_fetch_add(&spin_bad, 1);
        atomic_fetch_add_explicit(&spin_calls, 1, memory_order_relaxed);
        x = (x * 1103515245 + 12345) & 0x7fffffff;
    }
    return 0;
}

int main(void)
{
    setvbuf(stdout, 0, _IOLBF, 0);
    printf("ready\n");
    char line[128];
    pthread_t spinners[16];
    int nspin = 0;
    while (fgets(line, sizeof line, stdin)) {
        int n, t;
        if (sscanf(line, "go %d %d", &n, &t) == 2) {
            unsigned long before = atomic_load(&tally_work);
            pthread_t th[64];
            go_n = n;
            for (int i = 0; i < t && i < 64; i++) pthread_create(&th[i], 0, go_body, (void *)(long)i);
            for (int i = 0; i < t && i < 64; i++) pthread_join(th[i], 0);
            printf("done %lu\n", atomic_load(&tally_work) - before);
        } else if (sscanf(line, "spin %d", &t) == 1) {
            atomic_store(&spinning, 1);
            for (int i = 0; i < t && nspin < 16; i++) pthread_create(&spinners[nspin++], 0, spin_body, (void *)(long)(i + 1));
            printf("spinning %d\n", nspin);
        } else if (strncmp(line, "stop", 4) == 0) {
            /* On a loaded machine the spinners may not have run yet: give
             * them up to 5 s to make a call, so "calls>0" means they can. */
            for (int i = 0; i < 500 && nspin && atomic_load(&spin_calls) == 0; i++) usleep(10000);
            atomic_store(&spinning, 0);
            for (int i = 0; i < nspin; i++) pthread_join(spinners[i], 0);
            nspin = 0;
            printf("stopped %s calls>0:%d bad=%lu\n", atomic_load(&spin_bad) ? "BAD" : "OK",
                   atomic_load(&spin_calls) > 0, (unsigned long)atomic_load(&spin_bad));
        } else if (sscanf(line, "fork %d", &n) == 1) {
            pid_t child = fork();
            if (child == 0) {
                unsigned long before = atomic_load(&tally_work);
                long s = 0;
                for (int i = 0; i < n; i++) s += work(i);
                printf("child done %lu\n", atomic_load(&tally_work) - before + (s == 42));
                _exit(0);
            }
            waitpid(child, 0, 0);
            printf("forked %d\n", (int)child);
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        }
    }
    return 0;
}
