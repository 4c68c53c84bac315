/* A shared library whose constructor makes system calls: the loader runs
 * it before the program's entry, after it has mapped and relocated the
 * libraries. Loaded with LD_PRELOAD by the system call tests. */
#include <unistd.h>

__attribute__((constructor)) static void before_main(void)
{
    (void)fchdir(-9);
    (void)getppid();
}
