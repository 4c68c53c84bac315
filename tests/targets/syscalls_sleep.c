/* Sleeps in a system call most of the time: a process to attach to while
 * its thread is blocked in the kernel. Usage: syscalls_sleep ROUNDS
 * (each a getppid and a 20 ms nanosleep); prints its tally. */
#include "tally.h"
#include <time.h>
#include <unistd.h>

TALLY(getppid);

int main(int argc, char **argv)
{
    int rounds = arg_or(argc, argv, 1, 100);
    for (int i = 0; i < rounds; i++) {
        getppid();
        BUMP(getppid);
        struct timespec ts = {0, 20 * 1000 * 1000};
        nanosleep(&ts, 0);
    }
    PRINT_TALLY(getppid);
    return 0;
}
