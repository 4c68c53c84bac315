/* fork and exec: the child of fork keeps the instrumentation and its calls
 * add to the same counters; exec replaces the image (uninstrumented). */
#include "tally.h"
#include <sys/wait.h>
#include <unistd.h>

TALLY(work);

NOINLINE long work(long x) { BUMP(work); return x * 7 + 3; }

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, 500);
    int m = arg_or(argc, argv, 2, 300);
    long s = 0;
    for (int i = 0; i < n; i++) s += work(i);
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
        for (int i = 0; i < m; i++) s += work(i);
        printf("child tally work %lu\n", (unsigned long)atomic_load(&tally_work));
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    printf("parent sum %ld\n", s);
    PRINT_TALLY(work);
    fflush(stdout);
    execl("/bin/sh", "sh", "-c", "echo exec ok", (char *)0);
    return 1;
}
