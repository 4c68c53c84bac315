/* A library whose exported function calls another exported function of
 * its own: built with -fPIC and GCC's default semantic interposition, the
 * call goes through the library's PLT (`call leaf@plt`), and an earlier
 * definition of `leaf` (pltpre.c, preloaded) takes it over. */

__attribute__((noinline)) long leaf(long x)
{
    return x % 7 == 0 ? x / 7 : x + 1;
}

long sum_leaves(long n)
{
    long s = 0;
    for (long i = 0; i < n; i++)
        s += leaf(i);
    return s;
}
