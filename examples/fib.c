/* The bundled example: a program whose calls weft counts. It keeps its own
 * tally so the two can be compared. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static unsigned long fib_calls, greet_calls;

__attribute__((noinline)) unsigned long fib(unsigned n)
{
    fib_calls++;
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

__attribute__((noinline)) char *greet(const char *who)
{
    greet_calls++;
    char *s = malloc(strlen(who) + 8);
    sprintf(s, "hello, %s", who);
    return s;
}

int main(int argc, char **argv)
{
    unsigned n = argc > 1 ? (unsigned)atoi(argv[1]) : 20;
    for (int i = 0; i < 3; i++) {
        char *s = greet("weft");
        puts(s);
        free(s);
    }
    printf("fib(%u) = %lu\n", n, fib(n));
    printf("the program's own tally: fib called %lu times, greet %lu times\n", fib_calls, greet_calls);
    return 0;
}
