/* Sleeps in a system call most of the time: a process to attach to while
 * its thread is blocked in the kernel. Usage: syscalls_sleep ROUNDS
 * [FIRST_MS] (each round a getppid and a 20 ms nanosleep; the first
 * sleep lasts FIRST_MS, 20 unless given); prints its tally. */
#include "tally.h"
#include <time.h>
#include <unistd.h>

TALLY(getppid);

int main(int argc, char **argv)
{
    int rounds = arg_or(argc, argv, 1, 100);
    int first_ms = arg_or(argc, argv, 2, 20);
    for (int i = 0; i < rounds; i++) {
        getppid();
        BUMP(getppid);
        int ms = i == 0 ? first_ms : 20;
        struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000 * 1000};
        nanosleep(&ts, 0);
    }
    PRINT_TALLY(getppid);
    return 0;
}
