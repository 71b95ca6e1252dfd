// Runs one external program to completion under a deadline, without a shell: the
// `exec` step type's engine (saga/steps/exec_step.h).
//
//   ChildSpec spec;
//   spec.argv = {"/usr/local/bin/refresh", "--all"};
//   spec.env = {{"PATH", "/usr/bin:/bin"}};
//   spec.stdin_data = context.dump();
//   ChildResult r = RunChild(spec, deadline, stop, [&] { return ctx.StillOwner(); });
//   if (r.end == ChildResult::End::kExited && r.exit_code == 0) use(r.out);
//
// The child (fork + execve, argv[0] an absolute path, never a shell):
//   - runs in a process group of its own (pgid = its pid), so everything it starts is
//     stopped with it; when it ends, whatever it left in that group is killed (SIGKILL);
//   - gets SIGKILL when the thread that started it dies (PR_SET_PDEATHSIG; the node's
//     workers live as long as the node), so a node killed with kill -9 leaves no child
//     behind (grandchildren in other groups are the program's own business);
//   - starts with an empty signal mask and default dispositions (the node blocks
//     SIGTERM/SIGINT for its signal thread; a child must not inherit that), and with
//     no descriptor of the node open but its stdin, stdout and stderr;
//   - gets `stdin_data` on stdin (a socket, so that a child that exits without reading
//     cannot raise SIGPIPE in the node), then EOF.
// stdout and stderr are read together with poll(): whatever the sizes, neither side
// blocks the other. stdout is kept up to max_stdout_bytes (more kills the child: the
// result says so); of stderr only the last stderr_tail_bytes are kept.
// At the deadline, when `stop` is requested, or when `still_wanted()` (called about
// every `check_every`) returns false, the group gets SIGTERM, then SIGKILL after
// term_grace; RunChild returns once the child is reaped, within about term_grace
// after the cause (a process stuck in the kernel excepted).
//
// Thread safety: RunChild may run on many threads at once; it starts and reaps only
// its own child (waitpid on that pid).
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <stop_token>
#include <string>
#include <vector>

namespace dsync {

struct ChildSpec {
  std::vector<std::string> argv;             // argv[0]: the program, an absolute path
  std::map<std::string, std::string> env;    // the child's whole environment
  std::string stdin_data;                    // written to its stdin, then EOF
  size_t max_stdout_bytes = 1 << 20;         // more: the child is killed (kOutputTooLarge)
  size_t stderr_tail_bytes = 4096;           // the last bytes of stderr kept
  std::chrono::milliseconds term_grace{1000};  // SIGTERM -> SIGKILL
};

struct ChildResult {
  enum class End {
    kExited,          // exit_code is its exit status
    kSignaled,        // killed by `signal` (not by us)
    kTimedOut,        // the deadline passed: we stopped it
    kStopped,         // the stop token fired (drain, shutdown): we stopped it
    kUnwanted,        // still_wanted() returned false (the event was lost): we stopped it
    kOutputTooLarge,  // stdout passed max_stdout_bytes: we stopped it
    kSpawnFailed,     // could not start (error says why: no such file, not executable, ...)
  };
  End end = End::kSpawnFailed;
  int exit_code = -1;
  int signal = 0;
  int pid = 0;
  std::string out;       // stdout, at most max_stdout_bytes
  std::string err_tail;  // the last stderr_tail_bytes of stderr
  std::string error;     // kSpawnFailed: one line
  std::chrono::milliseconds took{0};
};

// "exited with 3", "killed by signal 9 (Killed)", "timed out", ... for error texts.
std::string DescribeEnd(const ChildResult& r);

// The last `lines` non-empty lines of `text`, joined with " | " (one line).
std::string LastLines(const std::string& text, int lines);

ChildResult RunChild(const ChildSpec& spec, std::chrono::steady_clock::time_point deadline, std::stop_token stop,
                     const std::function<bool()>& still_wanted = nullptr,
                     std::chrono::milliseconds check_every = std::chrono::milliseconds(2000));

}  // namespace dsync
