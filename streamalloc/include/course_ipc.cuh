// course_ipc.cuh: two processes of one program, for the lessons on IPC pools (not the allocator's API).
// The exporter starts the importer (this same program, with the role "importer" as argv[1] and its end of a
// Unix socket pair as argv[2]); they exchange fixed-size messages, and a file descriptor travels with SCM_RIGHTS.
//   proc::Child c = proc::start_importer({args...}, seconds);  // both die by SIGALRM after `seconds`
//   proc::send(c.sock, message, fd);  T m = proc::recv<T>(sock, &fd);  int status = proc::wait_importer(c);
#pragma once
#include "course.cuh"
#include <csignal>
#include <cstring>
#include <string>
#include <vector>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

namespace proc {
[[noreturn]] inline void fail(const char* what) {
    std::fprintf(stderr, "%s failed: %s\n", what, std::strerror(errno));
    std::exit(1);
}
// Send one message of n bytes over `sock`, with the file descriptor `fd` attached if fd >= 0.
inline void send_bytes(int sock, const void* data, size_t n, int fd = -1) {
    iovec iov{const_cast<void*>(data), n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    if (fd >= 0) {
        msg.msg_control = control;
        msg.msg_controllen = sizeof control;
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        std::memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    if (sendmsg(sock, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(n)) fail("sendmsg");
}
// Receive one message of exactly n bytes; returns the file descriptor that came with it, or -1.
inline int recv_bytes(int sock, void* data, size_t n) {
    iovec iov{data, n};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    const ssize_t got = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (got == 0) {
        std::fprintf(stderr, "the other process closed the socket (it exited or failed)\n");
        std::exit(1);
    }
    if (got != static_cast<ssize_t>(n)) fail("recvmsg");
    int fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}
// One message holding one struct (and a descriptor), and its receiving end.
template <typename T> void send(int sock, const T& v, int fd = -1) { send_bytes(sock, &v, sizeof v, fd); }
template <typename T> T recv(int sock, int* fd = nullptr) {
    T v;
    const int got = recv_bytes(sock, &v, sizeof v);
    if (fd) *fd = got;
    return v;
}

struct Child {
    pid_t pid;
    int sock;  // the exporter's end of the socket pair
};
// Start this program again as `argv[0] importer SOCKET args...`; it dies with its parent, and it and the parent
// are killed by SIGALRM after `seconds` (alarm), so that neither can hang the notebook.
inline Child start_importer(const std::vector<std::string>& args, unsigned seconds) {
    alarm(seconds);
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) != 0) fail("socketpair");
    std::vector<std::string> text = {"importer", "importer", std::to_string(sv[1])};
    text.insert(text.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (std::string& t : text) argv.push_back(&t[0]);
    argv.push_back(nullptr);
    std::fflush(stdout);
    std::fflush(stderr);
    const pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {  // the child: only async-signal-safe calls until exec
        close(sv[0]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        execv("/proc/self/exe", argv.data());
        _exit(127);
    }
    close(sv[1]);
    return {pid, sv[0]};
}
// The importer's exit status (0: it succeeded); waits for it, within the alarm.
inline int wait_importer(Child& c) {
    int status = 0;
    while (waitpid(c.pid, &status, 0) < 0)
        if (errno != EINTR) fail("waitpid");
    close(c.sock);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
}  // namespace proc
