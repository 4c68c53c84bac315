/* Data addresses for abstract execution: loops over arrays (a stride, a
 * store, an index through another array) and pointer chasing through a
 * list whose links jump around a static pool. All of the data is static,
 * so a no-PIE build has the same addresses under valgrind as natively.
 * Usage: paths_data [N] */
#include "tally.h"
#include <stdio.h>
#include <string.h>

#define POOL 512

struct node {
    struct node *next;
    long value;
};

static long numbers[POOL];
static int order[POOL];
static struct node pool[POOL];
static long out[POOL];

NOINLINE long sum_every(const long *a, int n, int stride)
{
    long s = 0;
    for (int i = 0; i < n; i += stride)
        s += a[i];
    return s;
}

NOINLINE void scatter(long *dst, const long *src, const int *idx, int n)
{
    for (int i = 0; i < n; i++)
        dst[idx[i]] = src[i] * 3;
}

NOINLINE long chase(const struct node *p, int steps)
{
    long s = 0;
    while (steps-- > 0 && p) {
        s += p->value;
        p = p->next;
    }
    return s;
}

/* A call that ends its block (at -O2 the loop's head comes right after
 * it), whose result the loop indexes by: the value the copy records after
 * the call is read before the block's way out. */
static char path[64] = "/usr/lib//////";

NOINLINE long trim(const char *s, long known)
{
    long n = known ? known : (long)strlen(s);
    while (n > 1 && s[n - 1] == '/')
        n--;
    return n;
}

NOINLINE void link(int n)
{
    for (int i = 0; i < n; i++) {
        int j = (i * 97 + 13) % n;
        pool[i].next = &pool[j];
        pool[i].value = i;
    }
}

int main(int argc, char **argv)
{
    int n = arg_or(argc, argv, 1, POOL);
    if (n > POOL)
        n = POOL;
    for (int i = 0; i < n; i++) {
        numbers[i] = i * 7;
        order[i] = (i * 31) % n;
    }
    link(n);
    long s = sum_every(numbers, n, 1) + sum_every(numbers, n, 3);
    scatter(out, numbers, order, n);
    s += chase(&pool[0], 3 * n);
    s += trim(path, 0) + trim(path, n % 3 + 1);
    printf("%ld %ld\n", s, out[n / 2]);
    /* Where the program is loaded, for a tool that runs it elsewhere. */
    fprintf(stderr, "main at %p\n", (void *)main);
    return 0;
}
