/* Preloaded before pltown.c's library: its `leaf` is the one that
 * library's PLT calls reach. */

long leaf(long x)
{
    return 3 * x;
}
