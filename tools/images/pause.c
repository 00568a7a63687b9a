/* The pod sandbox's process: holds the pod's namespaces open, reaps the
 * zombies of a shared PID namespace, and exits on SIGINT or SIGTERM. Built
 * static by tools/images.sh into the dev cluster's pause image. */
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signo) {
    (void)signo;
    _exit(0);
}

static void reap(int signo) {
    (void)signo;
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

int main(void) {
    struct sigaction on_stop = {.sa_handler = stop};
    struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP};
    if (getpid() != 1) {
        /* Not an init: nothing to hold open, nothing to reap. */
        return 1;
    }
    if (sigaction(SIGINT, &on_stop, NULL) < 0 || sigaction(SIGTERM, &on_stop, NULL) < 0 ||
        sigaction(SIGCHLD, &on_child, NULL) < 0) {
        return 2;
    }
    for (;;) {
        pause();
    }
}
