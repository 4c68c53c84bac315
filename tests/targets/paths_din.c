/* For `weft regen --din`: prints the runtime address of `work` (to
 * stderr, as "work at 0x..."), so the test can check the runtime
 * addresses weft writes against the program's own. */
#include <stdio.h>
#include <stdlib.h>

__attribute__((noinline)) long work(long i) {
    long s = 0;
    for (long k = 0; k < i % 7; k++) s += k * i;
    return s % 11 ? s : s + 1;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 100;
    fprintf(stderr, "work at %p\n", (void *)work);
    long s = 0;
    for (int i = 0; i < n; i++) s += work(i);
    printf("%ld\n", s);
    return 0;
}
