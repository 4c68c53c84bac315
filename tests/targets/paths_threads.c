/* Threads for abstract execution: two waves of threads, the second
 * created after the first has exited (so glibc hands it the first wave's
 * stacks and thread control blocks). Each thread calls step() a number
 * of times of its own and prints its tid and that number. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static volatile long sink;

__attribute__((noinline)) void step(long i) {
    if (i % 3 == 0)
        sink += i;
    else
        sink -= 1;
}

static void *run(void *arg) {
    long n = (long)arg;
    for (long i = 0; i < n; i++)
        step(i);
    printf("%d %ld\n", gettid(), n);
    fflush(stdout);
    return NULL;
}

int main(void) {
    for (int wave = 0; wave < 2; wave++) {
        pthread_t t[3];
        for (int i = 0; i < 3; i++)
            pthread_create(&t[i], NULL, run, (void *)(long)(1000 * (wave * 3 + i + 1) + 7 * i));
        for (int i = 0; i < 3; i++)
            pthread_join(t[i], NULL);
    }
    return 0;
}
