/* A library that the dlopen target loads at run time. Each call also
 * emits a rich event (weft/event.h) with its argument and result. */
#include <weft/event.h>

__attribute__((noinline)) long plugin_work(long x)
{
    long r = x * 5 + 1;
    WEFT_EVENT(plugin, work, "x:i result:i", WEFT_INT(x), WEFT_INT(r));
    return r;
}
