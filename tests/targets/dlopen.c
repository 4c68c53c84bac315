/* Loads a library with dlopen and calls into it. With "wait" it first waits
 * for a line on stdin (so weft can attach before the library exists), and
 * afterwards for another before exiting. */
#include "tally.h"
#include <dlfcn.h>
#include <string.h>

TALLY(plugin_work);

int main(int argc, char **argv)
{
    if (argc < 2) return 2;
    int n = arg_or(argc, argv, 2, 1000);
    int wait = argc > 3 && strcmp(argv[3], "wait") == 0;
    char line[64];
    if (wait) {
        printf("ready\n");
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) {
        printf("dlopen failed: %s\n", dlerror());
        return 1;
    }
    long (*fn)(long) = (long (*)(long))dlsym(h, "plugin_work");
    long s = 0;
    for (int i = 0; i < n; i++) {
        BUMP(plugin_work);
        s += fn(i);
    }
    printf("sum %ld\n", s);
    PRINT_TALLY(plugin_work);
    fflush(stdout);
    if (wait && !fgets(line, sizeof line, stdin)) return 2;
    dlclose(h);
    return 0;
}
