// C++ exceptions through traced frames: a throw from deep recursion, a
// cleanup (a destructor) on the way, a catch further up. Prints a tally
// the tests check.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

static long tally;

__attribute__((noinline)) long deep(int n) {
    if (n == 0) throw std::runtime_error("bottom");
    long r = deep(n - 1);
    tally += 1000;
    return r + 1;
}

struct Guard {
    ~Guard() { tally++; }
};

__attribute__((noinline)) long middle(int n) {
    Guard g;
    return deep(n) + 1;
}

__attribute__((noinline)) int catcher(int n) {
    try {
        return (int)middle(n);
    } catch (const std::exception &) {
        return -1;
    }
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 50;
    long s = 0;
    for (int i = 0; i < n; i++) s += catcher(i % 5);
    std::printf("sum %ld tally %ld\n", s, tally);
    return 0;
}
