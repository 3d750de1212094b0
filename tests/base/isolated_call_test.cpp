// run_isolated (base/isolated_call.h): a crash, a hang or an exception in the child is an
// error in the caller, which lives on; a result comes back whole.
#include "base/error.h"
#include "base/isolated_call.h"

#include <gtest/gtest.h>

#include <csignal>
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

} // namespace
} // namespace braid
