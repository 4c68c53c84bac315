/* A server and its client over a Unix socket (DIR/sock) and over TCP on
 * the loopback (PORT): the parent listens on both, forks the client, and
 * accepts and reads what the client sends through each; it prints what it
 * received. Usage: syscalls_net DIR PORT */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 3) return 2;
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    snprintf(un.sun_path, sizeof un.sun_path, "%s/sock", argv[1]);
    struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[2]))};
    in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    unlink(un.sun_path);
    int u = socket(AF_UNIX, SOCK_STREAM, 0);
    if (bind(u, (struct sockaddr *)&un, sizeof un) || listen(u, 4)) return 3;
    int t = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(t, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(t, (struct sockaddr *)&in, sizeof in) || listen(t, 4)) return 4;
    fflush(stdout);
    pid_t c = fork();
    if (c == 0) {
        int cu = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(cu, (struct sockaddr *)&un, sizeof un)) _exit(5);
        write(cu, "over unix", 9);
        int ct = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(ct, (struct sockaddr *)&in, sizeof in)) _exit(6);
        sendto(ct, "over tcp", 8, 0, 0, 0);
        close(cu);
        close(ct);
        _exit(0);
    }
    char b[64];
    int a = accept(u, 0, 0);
    ssize_t n = read(a, b, sizeof b);
    printf("%.*s\n", (int)(n > 0 ? n : 0), b);
    int at = accept(t, 0, 0);
    n = recvfrom(at, b, sizeof b, 0, 0, 0);
    printf("%.*s\n", (int)(n > 0 ? n : 0), b);
    int st = 0;
    waitpid(c, &st, 0);
    close(a);
    close(at);
    unlink(un.sun_path);
    return WEXITSTATUS(st);
}
