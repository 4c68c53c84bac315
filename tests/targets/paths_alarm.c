/* Asynchronous signals whose handler runs traced code: a timer fires every
 * 200 microseconds while the main loop calls step(), and the handler calls
 * step() too. A signal may come between any two instructions, inside the
 * stores that record the main loop's path. Prints the calls it made.
 * Usage: paths_alarm [N] */
#include "tally.h"
#include <signal.h>
#include <sys/time.h>

TALLY(step);
static volatile long sink;
static volatile sig_atomic_t alarms;

NOINLINE void step(long i)
{
    BUMP(step);
    if (i % 3 == 0)
        sink += i;
    else
        sink -= 1;
}

static void on_alarm(int sig)
{
    (void)sig;
    alarms++;
    for (int i = 0; i < 20; i++)
        step(i);
}

int main(int argc, char **argv)
{
    long n = arg_or(argc, argv, 1, 3000000);
    signal(SIGALRM, on_alarm);
    struct itimerval every = {{0, 200}, {0, 200}}, stop = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &every, NULL);
    for (long i = 0; i < n; i++)
        step(i);
    setitimer(ITIMER_REAL, &stop, NULL);
    printf("alarms %s\n", alarms > 10 ? "many" : "few");
    PRINT_TALLY(step);
    return 0;
}
