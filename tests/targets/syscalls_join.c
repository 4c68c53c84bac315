/* A thread whose life is as long as the file named by the first argument
 * says (milliseconds, as digits), and a main thread that sleeps 100 ms
 * and then joins it. Whether the join waits on a futex is timing: not if
 * the thread ended first. Re-executed with another duration in the file
 * (its read is made again), the rerun's thread ends at another moment. */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *path;

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

static void *lives(void *arg) {
    char digits[16] = {0};
    (void)arg;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || read(fd, digits, sizeof digits - 1) < 0)
        _exit(2);
    close(fd);
    sleep_ms(atol(digits));
    if (write(1, "thread\n", 7) != 7)
        _exit(2);
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t thread;
    if (argc < 2)
        return 2;
    path = argv[1];
    if (pthread_create(&thread, NULL, lives, NULL) != 0)
        return 1;
    sleep_ms(100);
    pthread_join(thread, NULL);
    return write(1, "joined\n", 7) == 7 ? 0 : 1;
}
