/* Memory a program holds: N MiB (argument, 48) of its own, every page
 * written, held across a few calls and a 500 ms sleep, then freed. A replay
 * of its record holds as much (weft samples what each process holds while
 * it records). Prints the MiB it held as a tally.
 * Usage: syscalls_memory [mib] */
#include "tally.h"
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    long mib = arg_or(argc, argv, 1, 48);
    size_t bytes = (size_t)mib << 20;
    char *held = malloc(bytes);
    if (!held) return 2;
    memset(held, 1, bytes);
    getppid();
    struct timespec nap = {0, 500 * 1000000L};
    nanosleep(&nap, 0);
    getppid();
    volatile char sink = held[bytes - 1];
    (void)sink;
    free(held);
    printf("tally held_mib %ld\n", mib);
    return 0;
}
