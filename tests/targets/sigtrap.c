/* A program that owns SIGTRAP, calling a function only an int3 can splice
 * (`trapped`: a 1-byte entry with a loop head right after it and an
 * indirect jump, so neither a jmp nor a relocated copy fits).
 *   sigtrap raise      installs its own SIGTRAP handler ("ready"), then calls
 *                      trapped and raises SIGTRAP in turn until a line
 *                      arrives on stdin: its handler must see exactly its
 *                      own signals, never weft's int3s
 *   sigtrap default N  calls trapped N times, then raises SIGTRAP with the
 *                      default action: dies of it, as without weft
 *   sigtrap spin [N]   N threads (1 if not given) call trapped and plain
 *                      (checking their results) until a line arrives on
 *                      stdin ("ready" first), then print "spun OK" or
 *                      "spun BAD"
 *   sigtrap block      a thread that blocks SIGTRAP calls trapped until a
 *                      line arrives on stdin ("ready" once it blocks)
 *   sigtrap late N     two threads call trapped and plain; at a first line
 *                      on stdin (sent once weft has spliced) it installs
 *                      its own SIGTRAP handler with sigaction and raises
 *                      SIGTRAP N times, and says what sigaction answered
 *                      and what its handler saw (its own signals only,
 *                      with SIGTRAP blocked as the kernel blocks it); at a
 *                      second line (once weft has left) it says whether
 *                      its handler is still the action, raises once more
 *                      and stops
 *   sigtrap forks      installs its own SIGTRAP handler, then forks children
 *                      that set SIGTRAP back to the default (as a shell's
 *                      subshell resets its traps) and exit, until a line
 *                      arrives on stdin; then says whether its handler is
 *                      still the action and raises SIGTRAP once */
#include "tally.h"
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int trapped(int n);
__asm__(
    ".text\n"
    ".p2align 4\n.globl trapped\n.type trapped,@function\n"
    "trapped:\n"
    "  push %rbx\n"
    "1:\n"
    "  sub $1, %edi\n"
    "  jg 1b\n"
    "  lea 2f(%rip), %rbx\n"
    "  jmp *%rbx\n"
    "2:\n"
    "  mov %edi, %eax\n"
    "  pop %rbx\n"
    "  ret\n"
    ".size trapped, .-trapped\n");

TALLY(trapped);
TALLY(handled);
TALLY(raised);

static void on_trap(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)uc;
    if (info->si_code <= 0) /* sent by a process (raise), not an int3 */
        BUMP(handled);
}

TALLY(stray);
TALLY(unblocked);

static void on_late_trap(int sig, siginfo_t *info, void *uc)
{
    (void)sig;
    (void)uc;
    if (info->si_code > 0) /* an int3: weft's, never the program's */
        BUMP(stray);
    else
        BUMP(handled);
    sigset_t now;
    sigprocmask(SIG_BLOCK, 0, &now);
    if (!sigismember(&now, SIGTRAP)) BUMP(unblocked);
}

static const char *current_sigtrap_handler(void)
{
    struct sigaction now;
    sigaction(SIGTRAP, 0, &now);
    if (now.sa_sigaction == on_late_trap) return "ours";
    return now.sa_handler == SIG_DFL ? "default" : "foreign";
}

static void call_trapped(int n)
{
    for (int i = 0; i < n; i++) {
        trapped(2);
        BUMP(trapped);
    }
}

/* An ordinary function, which a jmp splices unless int3 is forced. */
NOINLINE int plain(int x) { return x * 3 + 1; }

static atomic_int stop;
static atomic_ulong spun_bad;
static void *spinner(void *arg)
{
    (void)arg;
    unsigned long bad = 0;
    for (int i = 0; !atomic_load(&stop); i++) {
        if (trapped(3) != 0) bad++;
        if (plain(i & 0xff) != (i & 0xff) * 3 + 1) bad++;
    }
    atomic_fetch_add(&spun_bad, bad);
    return 0;
}
static void *wait_for_line(void *arg)
{
    (void)arg;
    char line[64];
    if (!fgets(line, sizeof line, stdin)) line[0] = 0;
    atomic_store(&stop, 1);
    return 0;
}
static void *blocking_thread(void *arg)
{
    (void)arg;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTRAP);
    pthread_sigmask(SIG_BLOCK, &set, 0);
    printf("ready\n");
    fflush(stdout);
    while (!atomic_load(&stop)) call_trapped(1);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "raise";
    int n = arg_or(argc, argv, 2, 1000);
    if (!strcmp(mode, "raise")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_trap;
        /* SA_NODEFER: a thread inside this handler does not block
         * SIGTRAP, so weft may splice int3s while it runs. */
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigaction(SIGTRAP, &sa, 0);
        pthread_t t;
        pthread_create(&t, 0, wait_for_line, 0);
        printf("ready\n");
        fflush(stdout);
        while (!atomic_load(&stop)) {
            trapped(3);
            BUMP(trapped);
            raise(SIGTRAP);
            BUMP(raised);
        }
        pthread_join(t, 0);
    } else if (!strcmp(mode, "default")) {
        call_trapped(n);
        PRINT_TALLY(trapped);
        fflush(stdout);
        raise(SIGTRAP);
        printf("survived SIGTRAP\n");
    } else if (!strcmp(mode, "spin")) {
        int nthreads = arg_or(argc, argv, 2, 1);
        if (nthreads > 64) nthreads = 64;
        pthread_t t[64];
        for (int i = 0; i < nthreads; i++) pthread_create(&t[i], 0, spinner, 0);
        printf("ready\n");
        fflush(stdout);
        wait_for_line(0);
        for (int i = 0; i < nthreads; i++) pthread_join(t[i], 0);
        printf("spun %s\n", atomic_load(&spun_bad) ? "BAD" : "OK");
        return 0;
    } else if (!strcmp(mode, "late")) {
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], 0, spinner, 0);
        printf("ready\n");
        fflush(stdout);
        char line[64];
        if (!fgets(line, sizeof line, stdin)) return 1;
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_late_trap;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGTRAP, &sa, &old);
        printf("old action %s\n", old.sa_handler == SIG_DFL ? "default" : "foreign");
        printf("handler %s\n", current_sigtrap_handler());
        for (int i = 0; i < n; i++) {
            raise(SIGTRAP);
            call_trapped(1);
        }
        PRINT_TALLY(handled);
        PRINT_TALLY(stray);
        PRINT_TALLY(unblocked);
        fflush(stdout);
        if (!fgets(line, sizeof line, stdin)) return 1;
        printf("after: handler %s\n", current_sigtrap_handler());
        raise(SIGTRAP);
        atomic_store(&stop, 1);
        for (int i = 0; i < 2; i++) pthread_join(t[i], 0);
        PRINT_TALLY(handled);
        printf("spun %s\n", atomic_load(&spun_bad) ? "BAD" : "OK");
        return 0;
    } else if (!strcmp(mode, "forks")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_late_trap;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGTRAP, &sa, 0);
        pthread_t t;
        pthread_create(&t, 0, wait_for_line, 0);
        printf("ready\n");
        fflush(stdout);
        unsigned long children = 0;
        while (!atomic_load(&stop)) {
            pid_t child = fork();
            if (child == 0) {
                signal(SIGTRAP, SIG_DFL);
                _exit(0);
            }
            if (child > 0) {
                waitpid(child, 0, 0);
                children++;
            }
            plain((int)children);
        }
        pthread_join(t, 0);
        printf("forked %s\n", children > 0 ? "some" : "none");
        printf("handler %s\n", current_sigtrap_handler());
        raise(SIGTRAP);
        PRINT_TALLY(handled);
        return 0;
    } else if (!strcmp(mode, "block")) {
        pthread_t t;
        pthread_create(&t, 0, blocking_thread, 0);
        wait_for_line(0);
        pthread_join(t, 0);
        printf("blocked SIGTRAP throughout\n");
        PRINT_TALLY(handled);
        return 0;
    }
    PRINT_TALLY(trapped);
    PRINT_TALLY(handled);
    PRINT_TALLY(raised);
    return 0;
}
