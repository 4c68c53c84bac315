/* Runs until killed, calling step() in a loop, for attaching with --paths. */
#include <stdio.h>
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void step(long i) { if (i % 3 == 0) sink += i; else sink--; }
int main(void) { for (long i = 0;; i++) { step(i); if (i % 100 == 0) usleep(1000); } }
