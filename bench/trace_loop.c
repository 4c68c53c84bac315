/* Per-event cost: a paced loop with one event per iteration carrying one
 * integer. Built four ways: plain (weft and bpftrace instrument
 * traced_fn's entry), with -DPROBE (a WEFT_PROBE site in traced_fn, a
 * 5-byte nop plus a USDT note), with -DRICH (a WEFT_EVENT site) and with
 * -DLTTNG (an LTTng-UST tracepoint in the same place).
 * Usage: trace_loop N PACE [WARMUP]: with WARMUP, first WARMUP untimed
 * iterations, then a 300 ms pause (the tracer's consumer catches up and
 * the buffers' pages are all touched), then the N timed ones.
 * Prints the timed loop's own ns per iteration. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#ifdef PROBE
#include <weft/probe.h>
#endif
#ifdef RICH
#include <weft/event.h>
#endif
#ifdef LTTNG
#define LTTNG_UST_TRACEPOINT_DEFINE
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#include "lttng_tp.h"
#endif

__attribute__((noinline)) long traced_fn(long v)
{
    __asm__ volatile("" : "+r"(v));
#ifdef PROBE
    WEFT_PROBE(weft_bench, event, v);
#endif
#ifdef RICH
    WEFT_EVENT(weft_bench, event, "v:i", WEFT_INT(v));
#endif
#ifdef LTTNG
    lttng_ust_tracepoint(weft_bench, event, v);
#endif
    return v;
}

/* A neighbour, so that traced_fn is followed by alignment padding rather
 * than by .fini: the splice can then be a jmp, as for most functions. */
__attribute__((noinline)) long untraced_fn(long v) { return v ^ 1; }

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    int pace = argc > 2 ? atoi(argv[2]) : 200;
    long warmup = argc > 3 ? atol(argv[3]) : 0;
    struct timespec a, b;
    long s = 0;
    for (long i = 0; i < warmup; i++) s += traced_fn(i);
    if (warmup) {
        struct timespec pause = {0, 300 * 1000 * 1000};
        nanosleep(&pause, 0);
    }
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < n; i++) {
        for (volatile int k = 0; k < pace; k++) {
        }
        s += traced_fn(i);
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double ns = (b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec);
    s += untraced_fn(s);
    s -= warmup * (warmup - 1) / 2;
    printf("events %ld ns_per_call %.2f checksum %ld\n", n, ns / n, s);
    return 0;
}
