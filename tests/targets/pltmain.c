/* Calls into pltown.c's library (linked against it): the sum of
 * leaf(i) for i < N, whichever `leaf` the dynamic linker bound. */
#include <stdio.h>
#include <stdlib.h>

long sum_leaves(long n);

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    printf("sum %ld\n", sum_leaves(n));
    return 0;
}
