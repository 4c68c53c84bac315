/* Blocks for good in a read of a pipe nobody writes, after printing its
 * pid: a test kills it there, and the record ends inside that read. */
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    int p[2];
    if (pipe(p) != 0) return 1;
    printf("blocking %d\n", getpid());
    fflush(stdout);
    char c;
    return read(p[0], &c, 1) == 1 ? 0 : 1;
}
