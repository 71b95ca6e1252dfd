#include "core/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace dsync {
namespace {

using SteadyClock = std::chrono::steady_clock;

// One descriptor, closed when it goes out of scope.
class ChildFd {
 public:
  ChildFd() = default;
  explicit ChildFd(int fd) : fd_(fd) {}
  ChildFd(const ChildFd&) = delete;
  ChildFd& operator=(const ChildFd&) = delete;
  ~ChildFd() { Close(); }
  int get() const { return fd_; }
  void Reset(int fd) {
    Close();
    fd_ = fd;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// The child's side between fork and execve: async-signal-safe calls only.
[[noreturn]] void ExecChild(pid_t parent, int in_fd, int out_fd, int err_fd, int report_fd, char* const* argv,
                            char* const* envp) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGPIPE, SIGTERM, SIGINT, SIGHUP, SIGCHLD}) ::sigaction(sig, &dfl, nullptr);
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) {
    int e = errno;
    (void)!::write(report_fd, &e, sizeof e);
    ::_exit(127);
  }
  // Every other descriptor of the node (database sockets, listeners) closed; the report
  // pipe is close-on-exec, so a successful execve closes it (EOF: started).
  bool ranged = true;
  if (report_fd > 3) ranged = ::syscall(SYS_close_range, 3u, static_cast<unsigned>(report_fd - 1), 0u) == 0;
  ranged = ranged && ::syscall(SYS_close_range, static_cast<unsigned>(report_fd + 1), ~0u, 0u) == 0;
  if (!ranged) {  // no close_range (old kernel): one by one
    for (int fd = 3; fd < 65536; ++fd) {
      if (fd != report_fd) ::close(fd);
    }
  }
  ::execve(argv[0], argv, envp);
  int e = errno;
  (void)!::write(report_fd, &e, sizeof e);
  ::_exit(127);
}

void KillGroup(pid_t pgid, int sig) { ::kill(-pgid, sig); }

}  // namespace

std::string DescribeEnd(const ChildResult& r) {
  switch (r.end) {
    case ChildResult::End::kExited: return "exited with " + std::to_string(r.exit_code);
    case ChildResult::End::kSignaled: {
      const char* name = ::strsignal(r.signal);
      return "killed by signal " + std::to_string(r.signal) + (name ? std::string(" (") + name + ")" : "");
    }
    case ChildResult::End::kTimedOut: return "timed out after " + std::to_string(r.took.count()) + " ms (killed)";
    case ChildResult::End::kStopped: return "stopped (the step's deadline, a drain or a shutdown; killed)";
    case ChildResult::End::kUnwanted: return "stopped (this node lost the event; killed)";
    case ChildResult::End::kOutputTooLarge: return "wrote more than the stdout limit (killed)";
    case ChildResult::End::kSpawnFailed: return "could not start: " + r.error;
  }
  return "ended";
}

std::string LastLines(const std::string& text, int lines) {
  std::vector<std::string> kept;
  size_t end = text.size();
  while (end > 0 && static_cast<int>(kept.size()) < lines) {
    size_t nl = text.rfind('\n', end - 1);
    size_t begin = nl == std::string::npos ? 0 : nl + 1;
    std::string line = text.substr(begin, end - begin);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
    if (!line.empty()) kept.push_back(std::move(line));
    if (nl == std::string::npos) break;
    end = nl;
  }
  std::string out;
  for (auto it = kept.rbegin(); it != kept.rend(); ++it) {
    if (!out.empty()) out += " | ";
    out += *it;
  }
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20) c = ' ';
  }
  return out;
}

ChildResult RunChild(const ChildSpec& spec, SteadyClock::time_point deadline, std::stop_token stop,
                     const std::function<bool()>& still_wanted, std::chrono::milliseconds check_every) {
  ChildResult r;
  const auto started = SteadyClock::now();
  if (spec.argv.empty() || spec.argv[0].empty() || spec.argv[0][0] != '/') {
    r.error = "the command must start with an absolute path";
    return r;
  }
  // Everything the child needs, built before fork (the child may not allocate).
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const std::string& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (std::string& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  int in_pair[2], out_pipe[2], err_pipe[2], report_pipe[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, in_pair) != 0) {
    r.error = std::string("socketpair: ") + std::strerror(errno);
    return r;
  }
  ChildFd in_parent(in_pair[0]), in_child(in_pair[1]);
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  ChildFd out_parent(out_pipe[0]), out_child(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  ChildFd err_parent(err_pipe[0]), err_child(err_pipe[1]);
  if (::pipe2(report_pipe, O_CLOEXEC) != 0) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  ChildFd report_parent(report_pipe[0]), report_child(report_pipe[1]);

  // The child's ends above 2, so that its dup2s onto 0, 1 and 2 never overwrite one
  // another (a node started with a closed stdin may have been handed fd 0 here).
  for (ChildFd* end : {&in_child, &out_child, &err_child, &report_child}) {
    if (end->get() > 2) continue;
    int moved = ::fcntl(end->get(), F_DUPFD_CLOEXEC, 3);
    if (moved < 0) {
      r.error = std::string("fcntl: ") + std::strerror(errno);
      return r;
    }
    end->Reset(moved);
  }

  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    r.error = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  if (pid == 0) {
    ExecChild(parent, in_child.get(), out_child.get(), err_child.get(), report_child.get(), argv.data(),
              envp.data());
  }
  r.pid = pid;
  ::setpgid(pid, pid);  // also here: no window in which a kill of the group misses it
  in_child.Close();
  out_child.Close();
  err_child.Close();
  report_child.Close();

  // Did execve succeed? The report pipe closes on exec (EOF) or carries errno.
  {
    int child_errno = 0;
    ssize_t n;
    do {
      n = ::read(report_parent.get(), &child_errno, sizeof child_errno);
    } while (n < 0 && errno == EINTR);
    if (n == static_cast<ssize_t>(sizeof child_errno)) {
      int status = 0;
      ::waitpid(pid, &status, 0);
      r.error = spec.argv[0] + ": " + std::strerror(child_errno);
      r.took = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started);
      return r;
    }
  }
  report_parent.Close();

  SetNonBlocking(in_parent.get());
  SetNonBlocking(out_parent.get());
  SetNonBlocking(err_parent.get());
  size_t written = 0;
  if (spec.stdin_data.empty()) {
    ::shutdown(in_parent.get(), SHUT_WR);
    in_parent.Close();
  }

  std::string err_all;
  auto keep_tail = [&] {
    if (err_all.size() > 2 * spec.stderr_tail_bytes + 4096) err_all.erase(0, err_all.size() - spec.stderr_tail_bytes);
  };
  char buf[65536];
  // Reads what is ready on `fd`; false at EOF or a hard error.
  auto drain = [&](ChildFd& fd, bool is_out) {
    while (true) {
      ssize_t n = ::read(fd.get(), buf, sizeof buf);
      if (n > 0) {
        if (is_out) {
          if (r.out.size() < spec.max_stdout_bytes + 1) {
            r.out.append(buf, std::min(static_cast<size_t>(n), spec.max_stdout_bytes + 1 - r.out.size()));
          }
        } else {
          err_all.append(buf, static_cast<size_t>(n));
          keep_tail();
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
      fd.Close();
      return false;
    }
  };

  std::optional<ChildResult::End> cause;  // why we stop it, once decided
  SteadyClock::time_point kill_at{};       // SIGKILL due (after SIGTERM)
  bool killed = false;
  auto next_check = SteadyClock::now() + check_every;
  int status = 0;
  bool reaped = false;
  SteadyClock::time_point reaped_at{};

  auto stop_it = [&](ChildResult::End why) {
    if (cause) return;
    cause = why;
    KillGroup(pid, SIGTERM);
    kill_at = SteadyClock::now() + spec.term_grace;
  };

  while (true) {
    if (!reaped) {
      pid_t w = ::waitpid(pid, &status, WNOHANG);
      if (w == pid) {
        reaped = true;
        reaped_at = SteadyClock::now();
        KillGroup(pid, SIGKILL);  // whatever it left running in its group
      }
    }
    const bool pipes_open = out_parent.get() >= 0 || err_parent.get() >= 0;
    if (reaped && (!pipes_open || SteadyClock::now() - reaped_at > std::chrono::milliseconds(500))) break;

    const auto now = SteadyClock::now();
    if (!cause && !reaped) {
      if (now >= deadline) {
        stop_it(ChildResult::End::kTimedOut);
      } else if (stop.stop_requested()) {
        stop_it(ChildResult::End::kStopped);
      } else if (r.out.size() > spec.max_stdout_bytes) {
        stop_it(ChildResult::End::kOutputTooLarge);
      } else if (still_wanted && now >= next_check) {
        next_check = now + check_every;
        if (!still_wanted()) stop_it(ChildResult::End::kUnwanted);
      }
    }
    if (cause && !killed && !reaped && SteadyClock::now() >= kill_at) {
      KillGroup(pid, SIGKILL);
      killed = true;
    }

    pollfd fds[3];
    int nfds = 0;
    int in_i = -1, out_i = -1, err_i = -1;
    if (in_parent.get() >= 0) {
      in_i = nfds;
      fds[nfds++] = {in_parent.get(), POLLOUT, 0};
    }
    if (out_parent.get() >= 0) {
      out_i = nfds;
      fds[nfds++] = {out_parent.get(), POLLIN, 0};
    }
    if (err_parent.get() >= 0) {
      err_i = nfds;
      fds[nfds++] = {err_parent.get(), POLLIN, 0};
    }
    // Short waits: the exit of the child, the stop token and the checks are polled.
    int wait_ms = pipes_open ? 50 : 10;
    if (!cause) {
      auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - SteadyClock::now()).count();
      wait_ms = static_cast<int>(std::clamp<int64_t>(left, 0, wait_ms));
    }
    int ready = ::poll(fds, static_cast<nfds_t>(nfds), wait_ms);
    if (ready < 0 && errno != EINTR) break;
    if (ready <= 0) continue;
    if (in_i >= 0 && fds[in_i].revents != 0) {
      if (fds[in_i].revents & (POLLERR | POLLHUP)) {
        in_parent.Close();  // the child closed its stdin: it reads no more
      } else {
        ssize_t n = ::send(in_parent.get(), spec.stdin_data.data() + written, spec.stdin_data.size() - written,
                           MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) written += static_cast<size_t>(n);
        if ((n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) ||
            written == spec.stdin_data.size()) {
          ::shutdown(in_parent.get(), SHUT_WR);
          in_parent.Close();
        }
      }
    }
    if (out_i >= 0 && fds[out_i].revents != 0) drain(out_parent, true);
    if (err_i >= 0 && fds[err_i].revents != 0) drain(err_parent, false);
  }
  if (!reaped) {  // poll failed: make sure it ends
    KillGroup(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
  }
  KillGroup(pid, SIGKILL);

  r.took = std::chrono::duration_cast<std::chrono::milliseconds>(SteadyClock::now() - started);
  if (err_all.size() > spec.stderr_tail_bytes) err_all.erase(0, err_all.size() - spec.stderr_tail_bytes);
  r.err_tail = std::move(err_all);
  if (r.out.size() > spec.max_stdout_bytes) {
    r.out.resize(spec.max_stdout_bytes);
    if (!cause) cause = ChildResult::End::kOutputTooLarge;
  }
  if (cause) {
    r.end = *cause;
  } else if (WIFEXITED(status)) {
    r.end = ChildResult::End::kExited;
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.end = ChildResult::End::kSignaled;
    r.signal = WTERMSIG(status);
  }
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

}  // namespace dsync
