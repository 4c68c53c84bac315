/* A library that the dlopen target loads at run time. */
__attribute__((noinline)) long plugin_work(long x) { return x * 5 + 1; }
