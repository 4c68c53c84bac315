/* Threads cancelled asynchronously while they loop on getppid(): the
 * cancellation comes wherever the thread is, inside weft's code too.
 * Each thread's end (its exit) must still be recorded. Prints how many
 * threads were cancelled. */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define THREADS 40

static pthread_barrier_t ready;

static void *spin(void *arg) {
    (void)arg;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
    pthread_barrier_wait(&ready);
    for (;;)
        getppid();
    return NULL;
}

int main(void) {
    pthread_t threads[THREADS];
    pthread_barrier_init(&ready, NULL, THREADS + 1);
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&threads[i], NULL, spin, NULL) != 0)
            return 1;
    pthread_barrier_wait(&ready);
    struct timespec a_while = {0, 50000000};
    nanosleep(&a_while, NULL);
    int cancelled = 0;
    for (int i = 0; i < THREADS; i++) {
        void *result;
        pthread_cancel(threads[i]);
        pthread_join(threads[i], &result);
        cancelled += result == PTHREAD_CANCELED;
    }
    printf("cancelled %d\n", cancelled);
    return 0;
}
