/* What a hostile tool call tries from inside a sandbox (tests/cri/test_escape.py).
 *
 * Why C and not a shell line: the task image is busybox-static (no Python, no libc), and the
 * attempts must be the raw system calls an exploit would make, each answered by the kernel
 * with a result or an errno, not a tool's paraphrase. Built static by the test, uploaded
 * into the sandbox with the files API, run with exec. Each attempt prints one line:
 * "<attempt> ok" or "<attempt> <ERRNO-NAME>".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/if_ether.h>

static const char *errname(int e) {
    switch (e) {
    case EPERM: return "EPERM";
    case EACCES: return "EACCES";
    case ENOSYS: return "ENOSYS";
    case EINVAL: return "EINVAL";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ENETUNREACH: return "ENETUNREACH";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ESRCH: return "ESRCH";
    case EAGAIN: return "EAGAIN";
    case ENOSPC: return "ENOSPC";
    default: return "EOTHER";
    }
}

static int report(const char *what, int rc) {
    if (rc < 0) printf("%s %s\n", what, errname(errno));
    else printf("%s ok\n", what);
    return 0;
}

static int raw_socket(void) {
    int fd = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
    report("raw-icmp", fd);
    if (fd >= 0) close(fd);
    fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    report("packet", fd);
    if (fd >= 0) close(fd);
    return 0;
}

static int do_mount(const char *dir) {
    report("mount-tmpfs", mount("none", dir, "tmpfs", 0, NULL));
    report("mount-proc", mount("proc", dir, "proc", 0, NULL));
    report("unshare-user", unshare(CLONE_NEWUSER));
    report("unshare-mount", unshare(CLONE_NEWNS));
    return 0;
}

static int do_ptrace(pid_t pid) {
    char buf[16];
    struct iovec local = {buf, sizeof buf}, remote = {(void *)0x400000, sizeof buf};
    long rc = ptrace(PTRACE_ATTACH, pid, NULL, NULL);
    report("ptrace-attach", (int)rc);
    if (rc == 0) {
        waitpid(pid, NULL, 0);
        ptrace(PTRACE_DETACH, pid, NULL, NULL);
    }
    report("process-vm-readv", (int)process_vm_readv(pid, &local, 1, &remote, 1, 0));
    return 0;
}

static int do_connect(const char *host, int port) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || inet_pton(AF_INET, host, &addr.sin_addr) != 1) return report("connect", -1);
    report("connect", connect(fd, (struct sockaddr *)&addr, sizeof addr));
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc >= 2 && !strcmp(argv[1], "raw")) return raw_socket();
    if (argc >= 3 && !strcmp(argv[1], "mount")) return do_mount(argv[2]);
    if (argc >= 3 && !strcmp(argv[1], "ptrace")) return do_ptrace((pid_t)atoi(argv[2]));
    if (argc >= 4 && !strcmp(argv[1], "connect")) return do_connect(argv[2], atoi(argv[3]));
    fprintf(stderr, "usage: escape raw | mount DIR | ptrace PID | connect HOST PORT\n");
    return 2;
}
