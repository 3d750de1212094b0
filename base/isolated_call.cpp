#include "base/isolated_call.h"

#include "base/error.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace braid {
namespace {

//! Writes all of `data` to `fd`; false on an error.
bool write_all(int fd, const char* data, size_t size) {
    while (size) {
        ssize_t n = ::write(fd, data, size);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        data += n;
        size -= size_t(n);
    }
    return true;
}

//! Child's side: status byte ('r' result, 'e' error message), then the bytes. The fatal
//! signals get their default action back first, so that a crash ends the child by its signal
//! even where a handler was installed (a sanitizer's, or the embedding program's) and the
//! caller can name it. The child is killed when the thread that started it ends, so that a
//! child stuck in `fn` never outlives a caller that was itself stopped.
[[noreturn]] void child(int fd, pid_t parent, const std::function<std::string()>& fn) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1); // the caller ended before the line above
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::signal(sig, SIG_DFL);
    char status = 'r';
    std::string out;
    try {
        out = fn();
    } catch (const std::exception& e) {
        status = 'e';
        out = e.what();
    } catch (...) {
        status = 'e';
        out = "an exception that is not a std::exception";
    }
    bool ok = write_all(fd, &status, 1) && write_all(fd, out.data(), out.size());
    ::_exit(ok ? 0 : 1);
}

} // namespace

std::string run_isolated(const std::function<std::string()>& fn, const std::string& what,
                         std::chrono::milliseconds limit) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0)
        BRAID_THROW(SerializationError, "{}: cannot create a pipe: {}", what, std::strerror(errno));
    pid_t parent = ::getpid();
    pid_t pid = ::fork();
    if (pid < 0) {
        int err = errno;
        ::close(fds[0]);
        ::close(fds[1]);
        BRAID_THROW(SerializationError, "{}: cannot fork: {}", what, std::strerror(err));
    }
    if (pid == 0) {
        ::close(fds[0]);
        child(fds[1], parent, fn);
    }
    ::close(fds[1]);
    auto until = std::chrono::steady_clock::now() + limit;
    std::string bytes;
    bool timed_out = false;
    char buf[1 << 16];
    for (;;) {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            timed_out = true;
            break;
        }
        pollfd p{fds[0], POLLIN, 0};
        int r = ::poll(&p, 1, int(std::min<int64_t>(left.count(), 1 << 30)));
        if (r < 0 && errno == EINTR) continue;
        if (r == 0) continue; // the deadline is checked above
        ssize_t n = ::read(fds[0], buf, sizeof(buf));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        bytes.append(buf, size_t(n));
    }
    ::close(fds[0]);
    if (timed_out) ::kill(pid, SIGKILL);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (timed_out)
        BRAID_THROW(SerializationError, "{}: did not finish within {} ms (stopped)", what,
                    limit.count());
    if (WIFSIGNALED(status))
        BRAID_THROW(SerializationError, "{}: crashed (signal {}, {}); the caller is unharmed", what,
                    WTERMSIG(status), strsignal(WTERMSIG(status)));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || bytes.empty())
        BRAID_THROW(SerializationError, "{}: ended without a result (exit status {})", what,
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    if (bytes[0] == 'e') BRAID_THROW(SerializationError, "{}: {}", what, bytes.substr(1));
    bytes.erase(0, 1);
    return bytes;
}

} // namespace braid
