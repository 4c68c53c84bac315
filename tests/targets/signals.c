/* A timer signal whose handler calls the instrumented function, interrupting
 * it (and its trampoline) at arbitrary instructions. */
#include "tally.h"
#include <signal.h>
#include <string.h>
#include <sys/time.h>

TALLY(work);
TALLY(handled);

NOINLINE long work(long x) { BUMP(work); return x * 7 + 3; }

static void on_alarm(int sig) { work(sig); BUMP(handled); }

int main(int argc, char **argv)
{
    int wanted = arg_or(argc, argv, 1, 200);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, 0);
    struct itimerval it = { { 0, 200 }, { 0, 200 } };
    setitimer(ITIMER_REAL, &it, 0);
    long s = 0;
    while (atomic_load(&tally_handled) < (unsigned long)wanted) s = work(s) & 0xffff;
    struct itimerval off = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &off, 0);
    printf("handled at least %d\n", wanted);
    PRINT_TALLY(work);
    return 0;
}
