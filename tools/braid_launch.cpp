// braid-launch: starts N ranks of one job as local processes that meet through a group manager.
//
//     braid-launch -n 3 -- braid-run model.braid --backend gloo
//     braid-launch -n 2 --server 10.0.0.1:29500 --world-size 4 --first-rank 2 -- COMMAND ...
//
// Without --server, braid-launch hosts a rendezvous server itself (on --host, 127.0.0.1 by
// default, at a free port or --port) for as long as the job runs. Every rank gets, besides the
// launcher's own environment:
//     BRAID_RANK         its rank (first rank + local index)
//     BRAID_WORLD_SIZE   the job's number of ranks (--world-size, default N)
//     BRAID_LOCAL_RANK   its index among this launcher's ranks
//     BRAID_SERVER       HOST:PORT of the group manager
// BRAID_TOKEN, when set, is the server's token and passes to the ranks unchanged.
//
// The ranks run in a process group of their own. SIGINT and SIGTERM sent to the launcher are
// forwarded to that group. When a rank exits with a nonzero status or is killed, the launcher
// names it, sends SIGTERM to the other ranks, and SIGKILL to whatever is left --stop-timeout
// seconds later. Its exit status is the first failure's (128 + signal for a rank that was
// killed), 0 when every rank exited with 0, 2 for bad flags, 1 when it could not start. With
// --timeout, a job still running after that many seconds is stopped the same way and the
// launcher exits with 124.
#include "base/error.h"
#include "comm/rendezvous_server.h"
#include "comm/tcp_client.h"

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    int nranks = 0;
    std::string server;
    std::string host = "127.0.0.1";
    uint16_t port = 0;
    int world_size = 0;
    int first_rank = 0;
    double stop_timeout_s = 10;
    double timeout_s = 0;
    std::vector<std::string> command;
};

std::string describe_status(int status) {
    if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                           strsignal(WTERMSIG(status)));
    return fmt::format("ended with wait status {}", status);
}

int exit_code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 1;
}

//! The environment of rank `rank`: the launcher's, with the BRAID_* variables replaced.
std::vector<std::string> rank_environment(const Options& opt, int local_rank,
                                          const std::string& server) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
        std::string entry = *e;
        for (const char* name :
             {"BRAID_RANK=", "BRAID_WORLD_SIZE=", "BRAID_LOCAL_RANK=", "BRAID_SERVER="})
            if (entry.rfind(name, 0) == 0) entry.clear();
        if (!entry.empty()) env.push_back(entry);
    }
    env.push_back(fmt::format("BRAID_RANK={}", opt.first_rank + local_rank));
    env.push_back(fmt::format("BRAID_WORLD_SIZE={}", opt.world_size));
    env.push_back(fmt::format("BRAID_LOCAL_RANK={}", local_rank));
    env.push_back("BRAID_SERVER=" + server);
    return env;
}

std::vector<char*> c_strings(std::vector<std::string>& items) {
    std::vector<char*> out;
    for (auto& s : items) out.push_back(s.data());
    out.push_back(nullptr);
    return out;
}

class Launcher {
public:
    explicit Launcher(Options opt) : m_opt(std::move(opt)) {}

    int run(const std::string& server, const sigset_t& handled) {
        m_pids.assign(size_t(m_opt.nranks), -1);
        for (int i = 0; i < m_opt.nranks; ++i)
            if (!spawn(i, server)) {
                stop_all(SIGTERM);
                wait_rest();
                return 1;
            }
        auto started = Clock::now();
        std::optional<Clock::time_point> kill_at;
        int exit_code = 0;
        while (m_running > 0) {
            reap(exit_code, kill_at);
            if (m_running == 0) break;
            if (kill_at && Clock::now() >= *kill_at) {
                std::fprintf(stderr,
                             "braid-launch: %d rank(s) still running %.3g s after SIGTERM; "
                             "sending SIGKILL\n",
                             m_running, m_opt.stop_timeout_s);
                stop_all(SIGKILL);
                kill_at.reset();
            }
            if (m_opt.timeout_s > 0 && !m_stopping &&
                Clock::now() - started >= seconds(m_opt.timeout_s)) {
                std::fprintf(stderr,
                             "braid-launch: the job is still running after --timeout %g s; "
                             "stopping it\n",
                             m_opt.timeout_s);
                exit_code = 124;
                begin_stop(SIGTERM, kill_at);
            }
            timespec tick{0, 50'000'000};
            siginfo_t info;
            int sig = sigtimedwait(&handled, &info, &tick);
            if (sig == SIGINT || sig == SIGTERM) {
                if (m_stopping) {
                    std::fprintf(stderr, "braid-launch: %s again; sending SIGKILL\n",
                                 strsignal(sig));
                    stop_all(SIGKILL);
                } else {
                    std::fprintf(stderr, "braid-launch: %s; forwarding it to the ranks\n",
                                 strsignal(sig));
                    if (!exit_code) exit_code = 128 + sig;
                    begin_stop(sig, kill_at);
                }
            }
        }
        return exit_code;
    }

private:
    static Clock::duration seconds(double s) {
        return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
    }

    bool spawn(int local_rank, const std::string& server) {
        auto env = rank_environment(m_opt, local_rank, server);
        auto argv_strings = m_opt.command;
        auto argv = c_strings(argv_strings);
        auto envp = c_strings(env);
        posix_spawnattr_t attr;
        posix_spawnattr_init(&attr);
        // One process group for all ranks (the first rank's), so that signals reach whatever
        // the command starts; default signal handling and no blocked signals in the ranks.
        sigset_t none, defaults;
        sigemptyset(&none);
        sigemptyset(&defaults);
        sigaddset(&defaults, SIGINT);
        sigaddset(&defaults, SIGTERM);
        sigaddset(&defaults, SIGCHLD);
        sigaddset(&defaults, SIGPIPE);
        posix_spawnattr_setsigmask(&attr, &none);
        posix_spawnattr_setsigdefault(&attr, &defaults);
        posix_spawnattr_setpgroup(&attr, m_pgid);
        posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                            POSIX_SPAWN_SETPGROUP);
        pid_t pid = -1;
        int rc = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), envp.data());
        posix_spawnattr_destroy(&attr);
        if (rc != 0) {
            std::fprintf(stderr, "braid-launch: cannot start rank %d (%s): %s\n",
                         m_opt.first_rank + local_rank, argv[0], std::strerror(rc));
            return false;
        }
        if (m_pgid == 0) m_pgid = pid;
        m_pids[size_t(local_rank)] = pid;
        ++m_running;
        return true;
    }

    //! Collects the ranks that ended; on the first failure, stops the others.
    void reap(int& exit_code, std::optional<Clock::time_point>& kill_at) {
        for (;;) {
            int status = 0;
            pid_t pid = waitpid(-1, &status, WNOHANG);
            if (pid <= 0) return;
            int local = -1;
            for (size_t i = 0; i < m_pids.size(); ++i)
                if (m_pids[i] == pid) local = int(i);
            if (local < 0) continue;
            m_pids[size_t(local)] = -1;
            --m_running;
            bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            if (!failed) continue;
            if (m_stopping) continue; // an expected end once the job is being stopped
            int rank = m_opt.first_rank + local;
            exit_code = exit_code_of(status);
            std::fprintf(stderr,
                         "braid-launch: rank %d (pid %d) %s; stopping the other %d rank(s)\n", rank,
                         int(pid), describe_status(status).c_str(), m_running);
            begin_stop(SIGTERM, kill_at);
        }
    }

    void begin_stop(int sig, std::optional<Clock::time_point>& kill_at) {
        m_stopping = true;
        stop_all(sig);
        kill_at = Clock::now() + seconds(m_opt.stop_timeout_s);
    }

    void stop_all(int sig) {
        if (m_pgid > 0) kill(-m_pgid, sig);
        for (pid_t pid : m_pids)
            if (pid > 0) kill(pid, sig);
    }

    //! After a failed start: waits (with SIGKILL after the stop timeout) for the started ranks.
    void wait_rest() {
        auto kill_at = Clock::now() + seconds(m_opt.stop_timeout_s);
        while (m_running > 0) {
            int status = 0;
            pid_t pid = waitpid(-1, &status, WNOHANG);
            if (pid > 0) {
                --m_running;
                continue;
            }
            if (pid < 0) return;
            if (Clock::now() >= kill_at) stop_all(SIGKILL);
            usleep(20'000);
        }
    }

    Options m_opt;
    std::vector<pid_t> m_pids;
    pid_t m_pgid = 0;
    int m_running = 0;
    bool m_stopping = false;
};

} // namespace

int main(int argc, char** argv) {
    Options opt;
    CLI::App app{"braid-launch: runs N ranks of a job as local processes that meet through a "
                 "braid group manager (a server it starts, or --server)"};
    app.add_option("-n,--nranks", opt.nranks, "ranks to start on this host")
        ->required()
        ->check(CLI::Range(1, 4096));
    app.add_option("--server", opt.server,
                   "HOST:PORT of a running braid-rendezvous (default: start one in this launcher)");
    app.add_option("--host", opt.host, "address the launcher's own server listens on")
        ->capture_default_str();
    app.add_option("--port", opt.port, "port of the launcher's own server (0: a free one)")
        ->capture_default_str();
    app.add_option("--world-size", opt.world_size,
                   "ranks of the whole job, over all hosts (default: -n)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--first-rank", opt.first_rank, "rank of this host's first process")
        ->capture_default_str()
        ->check(CLI::Range(0, 1 << 20));
    app.add_option("--stop-timeout", opt.stop_timeout_s,
                   "seconds between SIGTERM and SIGKILL when stopping the ranks")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--timeout", opt.timeout_s,
                   "stop the job after this many seconds and exit with 124 (0: no limit)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    app.add_option("command", opt.command, "the command every rank runs, after --")->required();
    app.positionals_at_end();
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        if (e.get_exit_code() == 0) return app.exit(e);
        std::fprintf(stderr, "braid-launch: %s (see braid-launch --help)\n", e.what());
        return 2;
    }
    if (opt.world_size == 0) opt.world_size = opt.nranks;
    if (opt.first_rank + opt.nranks > opt.world_size) {
        std::fprintf(stderr,
                     "braid-launch: ranks %d..%d do not fit a world of %d (--first-rank %d, -n "
                     "%d, --world-size %d)\n",
                     opt.first_rank, opt.first_rank + opt.nranks - 1, opt.world_size,
                     opt.first_rank, opt.nranks, opt.world_size);
        return 2;
    }
    if (opt.first_rank > 0 && opt.server.empty()) {
        std::fprintf(stderr,
                     "braid-launch: --first-rank %d needs --server HOST:PORT (the ranks "
                     "of other hosts meet there)\n",
                     opt.first_rank);
        return 2;
    }

    // The launcher takes SIGINT, SIGTERM and SIGCHLD with sigtimedwait; blocked before the
    // server's threads start, so that none of them receives these signals.
    sigset_t handled;
    sigemptyset(&handled);
    sigaddset(&handled, SIGINT);
    sigaddset(&handled, SIGTERM);
    sigaddset(&handled, SIGCHLD);
    pthread_sigmask(SIG_BLOCK, &handled, nullptr);
    std::signal(SIGPIPE, SIG_IGN);

    std::unique_ptr<braid::comm::RendezvousServer> server;
    std::string address = opt.server;
    if (address.empty()) {
        try {
            braid::comm::ServerOptions options;
            options.host = opt.host;
            options.port = opt.port;
            options.token = braid::comm::TcpClientOptions::token_from_env();
            server = std::make_unique<braid::comm::RendezvousServer>(options);
            uint16_t port = server->start();
            address = opt.host.find(':') != std::string::npos
                          ? fmt::format("[{}]:{}", opt.host, port)
                          : fmt::format("{}:{}", opt.host, port);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "braid-launch: cannot start the group manager on %s:%u: %s\n",
                         opt.host.c_str(), unsigned(opt.port), e.what());
            return 1;
        }
    }
    Launcher launcher(opt);
    int code = launcher.run(address, handled);
    if (server) server->stop();
    return code;
}
