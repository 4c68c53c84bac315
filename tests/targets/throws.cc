// Throws and catches C++ exceptions a known number of times; libstdc++'s
// USDT probe libstdcxx:throw fires in __cxa_throw for each.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

static unsigned long tally_throws, tally_caught;

__attribute__((noinline)) int risky(int i)
{
    if (i % 3 == 0) {
        tally_throws++;
        throw std::runtime_error("three");
    }
    return i;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? std::atoi(argv[1]) : 300;
    long s = 0;
    for (int i = 0; i < n; i++) {
        try {
            s += risky(i);
        } catch (const std::exception &) {
            tally_caught++;
        }
    }
    std::printf("s %ld\ntally throws %lu\ntally caught %lu\n", s, tally_throws, tally_caught);
    return 0;
}
