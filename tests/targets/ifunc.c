/* Calls three of the C library's IFUNCs (strlen, memcpy, strcmp) a known
 * number of times each, through pointers so that the compiler cannot
 * replace them with its builtins.
 *   ifunc N   N calls of each (1000 if not given); prints its tallies
 *   ifunc wait  prints "ready", then for each line "N" on stdin makes N
 *               calls of each and writes "done" (with read and write
 *               only, so that nothing else of the C library runs between)
 *   ifunc wipe  the same, after clearing its environment strings in place
 *               (as setproctitle does), so /proc/PID/environ shows none */
#include "tally.h"
#include <string.h>
#include <unistd.h>

TALLY(strlen);
TALLY(memcpy);
TALLY(strcmp);

size_t (*volatile call_strlen)(const char *) = strlen;
void *(*volatile call_memcpy)(void *, const void *, size_t) = memcpy;
int (*volatile call_strcmp)(const char *, const char *) = strcmp;

static unsigned long calls(int n)
{
    char a[64] = "weft counts the implementation";
    char b[64];
    unsigned long sum = 0;
    for (int i = 0; i < n; i++) {
        sum += call_strlen(a);
        BUMP(strlen);
        call_memcpy(b, a, 16 + (i & 7));
        BUMP(memcpy);
        sum += (unsigned)call_strcmp(a, b);
        BUMP(strcmp);
    }
    return sum;
}

int main(int argc, char **argv)
{
    if (argc > 1 && (!strcmp(argv[1], "wait") || !strcmp(argv[1], "wipe"))) {
        char line[32];
        if (!strcmp(argv[1], "wipe")) {
            /* The environment strings follow the last argument on the
             * stack; /proc/self/environ says how many bytes they take. */
            char env[65536];
            FILE *f = fopen("/proc/self/environ", "r");
            size_t len = f ? fread(env, 1, sizeof env, f) : 0;
            if (f) fclose(f);
            char *area = argv[argc - 1] + strlen(argv[argc - 1]) + 1;
            memset(area, 0, len);
        }
        write(1, "ready\n", 6);
        for (;;) {
            ssize_t got = read(0, line, sizeof line - 1);
            if (got <= 0) return 0;
            line[got] = 0;
            calls(atoi(line));
            write(1, "done\n", 5);
        }
    }
    unsigned long sum = calls(arg_or(argc, argv, 1, 1000));
    printf("sum %lu\n", sum & 1);
    PRINT_TALLY(strlen);
    PRINT_TALLY(memcpy);
    PRINT_TALLY(strcmp);
    return 0;
}
