/* Traced calls with known arguments and results: thread k calls
 * traced(i, 1000 * k) for i in 0..n, which returns 3 * i + 1000 * k.
 * Then main calls labelled(LABEL, i) with each of four labels (a word, an
 * empty string, a 40-byte string, NULL) in turn, tallying each label.
 * With a third argument "serial" the threads run one after another, so
 * each new thread reuses the finished one's thread control block.
 * With the default counts bursts stay below one ring's capacity, so
 * nothing may be dropped; large counts overflow the rings on purpose. */
#include "tally.h"
#include <pthread.h>
#include <string.h>

TALLY(traced);
static int calls;

NOINLINE long traced(long a, long b) { BUMP(traced); return a * 3 + b; }

TALLY(label_word);
TALLY(label_empty);
TALLY(label_long);
TALLY(label_null);
static const char *const labels[4] = {"alpha", "", "0123456789abcdefghijklmnopqrstuvwxyzABCD", 0};

NOINLINE long labelled(const char *label, long i)
{
    if (!label) BUMP(label_null);
    else if (!*label) BUMP(label_empty);
    else if (label[1] == 'l') BUMP(label_word);
    else BUMP(label_long);
    return i;
}

static void *body(void *arg)
{
    long s = 0;
    for (long i = 0; i < calls; i++) s += traced(i, (long)arg * 1000);
    return (void *)s;
}

int main(int argc, char **argv)
{
    int threads = arg_or(argc, argv, 1, 3);
    calls = arg_or(argc, argv, 2, 1500);
    pthread_t t[16];
    int serial = argc > 3 && !strcmp(argv[3], "serial");
    for (long i = 0; i < threads && i < 16; i++) {
        pthread_create(&t[i], 0, body, (void *)i);
        if (serial) pthread_join(t[i], 0);
    }
    for (int i = 0; i < threads && i < 16 && !serial; i++) pthread_join(t[i], 0);
    long s = 0;
    for (long i = 0; i < 40; i++) s += labelled(labels[i % 4], i);
    PRINT_TALLY(traced);
    PRINT_TALLY(label_word);
    PRINT_TALLY(label_empty);
    PRINT_TALLY(label_long);
    PRINT_TALLY(label_null);
    return s == 780 ? 0 : 1;
}
