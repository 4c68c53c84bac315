/* Sleeps a timer's signal cuts short: clock_nanosleep and nanosleep of
 * 1 s, each interrupted by a 50 ms ITIMER_REAL whose handler does
 * nothing (no SA_RESTART: the kernel returns EINTR and writes the time
 * left). Prints each call's result and the time left it was given, to
 * the nanosecond, which a rerun that answers the calls from the record
 * must give back as the kernel gave it. */
#include <signal.h>
#include <stdio.h>
#include <sys/time.h>
#include <time.h>

static void on_alarm(int sig) { (void)sig; }

static void arm(void)
{
    struct itimerval once = {{0, 0}, {0, 50000}};
    setitimer(ITIMER_REAL, &once, 0);
}

int main(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, 0);
    struct timespec second = {1, 0}, left = {0, 0};
    arm();
    int r = clock_nanosleep(CLOCK_MONOTONIC, 0, &second, &left);
    printf("clock_nanosleep %d left %ld.%09ld\n", r, (long)left.tv_sec, left.tv_nsec);
    struct timespec left2 = {0, 0};
    arm();
    r = nanosleep(&second, &left2);
    printf("nanosleep %d left %ld.%09ld\n", r, (long)left2.tv_sec, left2.tv_nsec);
    return 0;
}
