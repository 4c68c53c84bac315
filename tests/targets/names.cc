// C++ names: weft matches patterns against demangled names.
#include <atomic>
#include <cstdio>
#include <cstdlib>

static std::atomic<unsigned long> tally_run, tally_area;

namespace geo {
struct Square {
    double side;
    __attribute__((noinline)) double area(int scale) const;
};

double Square::area(int scale) const
{
    tally_area++;
    return side * side * scale;
}

__attribute__((noinline)) double run(const Square &sq, int n)
{
    tally_run++;
    double a = 0;
    for (int i = 0; i < n; i++) a += sq.area(i);
    return a;
}
} // namespace geo

int main(int argc, char **argv)
{
    int n = argc > 1 ? std::atoi(argv[1]) : 100;
    geo::Square sq{2.0};
    double total = 0;
    for (int i = 0; i < n; i++) total += geo::run(sq, 10);
    std::printf("total %.0f\ntally run %lu\ntally area %lu\n", total, tally_run.load(), tally_area.load());
    return 0;
}
