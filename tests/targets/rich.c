/* Rich events (weft/event.h): each of THREADS threads emits ROUNDS events
 * "rich:request" carrying its index, a label (one of four, or NULL), a byte
 * array with NULs in it and a length that grows with the index, then an
 * "rich:done" event with its count, and prints its tallies. With a third
 * argument "serve" it reads commands instead: "go N" runs a batch (THREADS
 * threads of N rounds) and answers "done TOTAL", "quit" ends. */
#include "tally.h"
#include <pthread.h>
#include <string.h>
#include <weft/event.h>

TALLY(request);
TALLY(done);
static int rounds;
static const char *const labels[4] = {"get", "", "a-label-much-longer-than-sixteen-bytes", 0};

static void *body(void *arg)
{
    long k = (long)arg;
    unsigned char bytes[40];
    for (int i = 0; i < 40; i++) bytes[i] = (unsigned char)(i % 3 == 0 ? 0 : i + k);
    for (long i = 0; i < rounds; i++) {
        WEFT_EVENT(rich, request, "index:i label:s payload:b",
                   WEFT_INT(k * 1000000 + i), WEFT_STR(labels[i % 4]),
                   WEFT_BYTES(bytes, (size_t)(i % 24)));
        BUMP(request);
    }
    WEFT_EVENT(rich, done, "thread:i count:i", WEFT_INT(k), WEFT_INT(rounds));
    BUMP(done);
    return 0;
}

static void batch(int threads)
{
    pthread_t t[16];
    for (long i = 0; i < threads && i < 16; i++) pthread_create(&t[i], 0, body, (void *)i);
    for (int i = 0; i < threads && i < 16; i++) pthread_join(t[i], 0);
}

int main(int argc, char **argv)
{
    int threads = arg_or(argc, argv, 1, 2);
    rounds = arg_or(argc, argv, 2, 1000);
    if (argc > 3 && !strcmp(argv[3], "serve")) {
        char line[64];
        setvbuf(stdout, 0, _IOLBF, 0);
        while (fgets(line, sizeof line, stdin)) {
            if (!strncmp(line, "go ", 3)) {
                rounds = atoi(line + 3);
                batch(threads);
                printf("done %lu\n", (unsigned long)atomic_load(&tally_request));
            } else if (!strncmp(line, "quit", 4)) {
                break;
            }
        }
    } else {
        batch(threads);
    }
    PRINT_TALLY(request);
    PRINT_TALLY(done);
    return 0;
}
