// run_isolated (base/isolated_call.h): a crash, a hang or an exception in the child is an
// error in the caller, which lives on; a result comes back whole.
#include "base/error.h"
#include "base/isolated_call.h"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <string>
#include <thread>

namespace braid {
namespace {

std::string error_of(const std::function<std::string()>& fn,
                     std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    try {
        run_isolated(fn, "the test's call", limit);
    } catch (const SerializationError& e) {
        return e.what();
    }
    return "no error";
}

TEST(IsolatedCall, ReturnsTheChildsBytesWhole) {
    std::string big(3 << 20, 'x'); // larger than a pipe's buffer
    big[12345] = '\0';
    EXPECT_EQ(run_isolated([&] { return big; }, "copy", std::chrono::seconds(20)), big);
    EXPECT_EQ(run_isolated([] { return std::string(); }, "empty", std::chrono::seconds(20)), "");
}

TEST(IsolatedCall, ACrashInTheChildIsAnErrorNamingTheSignal) {
    std::string msg = error_of([]() -> std::string {
        std::raise(SIGSEGV);
        return "unreachable";
    });
    EXPECT_NE(msg.find("the test's call: crashed (signal 11"), std::string::npos) << msg;
}

TEST(IsolatedCall, AnExceptionInTheChildComesBackWithItsMessage) {
    std::string msg = error_of([]() -> std::string { throw std::runtime_error("no adapter"); });
    EXPECT_NE(msg.find("the test's call: no adapter"), std::string::npos) << msg;
}

TEST(IsolatedCall, AChildPastItsLimitIsStopped) {
    auto start = std::chrono::steady_clock::now();
    std::string msg = error_of(
        []() -> std::string {
            std::this_thread::sleep_for(std::chrono::seconds(60));
            return "late";
        },
        std::chrono::milliseconds(300));
    EXPECT_NE(msg.find("did not finish within 300 ms"), std::string::npos) << msg;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// A caller stopped while its child is stuck (a test runner's alarm, a server killed) takes the
// child with it: a child left behind would hold the caller's pipes open and hang whoever reads
// them.
TEST(IsolatedCall, AChildDoesNotOutliveItsCaller) {
    int fds[2];
    ASSERT_EQ(pipe(fds), 0);
    pid_t caller = fork();
    ASSERT_GE(caller, 0);
    if (caller == 0) {
        close(fds[0]);
        try {
            run_isolated(
                [&]() -> std::string {
                    pid_t self = getpid();
                    if (write(fds[1], &self, sizeof self) != sizeof self) _exit(3);
                    std::this_thread::sleep_for(std::chrono::seconds(60));
                    return "late";
                },
                "stuck", std::chrono::seconds(60));
        } catch (...) {
        }
        _exit(0);
    }
    close(fds[1]);
    pid_t child = 0;
    ASSERT_EQ(read(fds[0], &child, sizeof child), ssize_t(sizeof child));
    kill(caller, SIGKILL);
    int status = 0;
    waitpid(caller, &status, 0);
    // The pipe's last writer was the child: end of file once it is gone.
    char byte;
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(read(fds[0], &byte, 1), 0);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
    close(fds[0]);
    // Soon gone, or dead and not yet reaped by whoever adopted it (a large process takes a
    // moment to be torn down after its files are closed).
    auto state = [&] {
        std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
        std::string pid_field, name, s;
        return stat >> pid_field >> name >> s ? s : "gone";
    };
    while (state() != "gone" && state() != "Z" &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(10))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(state() == "gone" || state() == "Z")
        << "child " << child << " outlived its caller: state " << state();
}

} // namespace
} // namespace braid
