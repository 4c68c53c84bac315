/* Two children that each sleep the milliseconds their file (delay_a,
 * delay_b: three digits, in the current directory) says; the parent
 * looks once, 100 ms on, whether one has ended (WNOHANG), then reaps
 * both, and prints what it found in that order. A test changes the
 * files between a record and its rerun, so the children end in another
 * order in the rerun. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms)
{
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

static pid_t child(const char *file)
{
    pid_t pid = fork();
    if (pid != 0) return pid;
    char digits[4] = { 0 };
    int fd = open(file, O_RDONLY);
    if (fd < 0 || read(fd, digits, 3) != 3) _exit(2);
    sleep_ms(atol(digits));
    _exit(0);
}

static const char *which(pid_t pid, pid_t a, pid_t b)
{
    return pid == 0 ? "none" : pid == a ? "a" : pid == b ? "b" : "?";
}

int main(void)
{
    pid_t a = child("delay_a");
    pid_t b = child("delay_b");
    if (a < 0 || b < 0) return 1;
    sleep_ms(100);
    int status;
    pid_t early = waitpid(-1, &status, WNOHANG);
    pid_t first = early > 0 ? early : waitpid(-1, &status, 0);
    pid_t second = waitpid(-1, &status, 0);
    printf("early %s, first %s, then %s\n", which(early, a, b), which(first, a, b),
           which(second, a, b));
    return 0;
}
