/* Shared helpers for weft's test targets: each target keeps its own tally of
 * calls and prints it as "tally NAME COUNT" lines, which the tests compare
 * with weft's counts. Output is deterministic (no pids, no addresses), so a
 * run with weft can be compared byte for byte with a run without it. */
#ifndef WEFT_TALLY_H
#define WEFT_TALLY_H
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define NOINLINE __attribute__((noinline, noclone))
#define TALLY(name) static atomic_ulong tally_##name
#define BUMP(name) atomic_fetch_add_explicit(&tally_##name, 1, memory_order_relaxed)
#define PRINT_TALLY(name) printf("tally %s %lu\n", #name, (unsigned long)atomic_load(&tally_##name))

static inline int arg_or(int argc, char **argv, int i, int dflt)
{
    return argc > i ? atoi(argv[i]) : dflt;
}
#endif
