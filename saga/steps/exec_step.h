// The built-in `exec` step type (README.md "Custom steps"): runs a program of any
// language as a step, without a shell.
//
//   {"name": "reindex", "type": "exec", "command": ["/opt/app/reindex", "--space"],
//    "timeout_ms": 60000, "env": {"API_TOKEN": "${REINDEX_TOKEN}"},
//    "compensate": {"command": ["/opt/app/reindex", "--undo"]}, "max_output_bytes": 1048576}
//
// Config (checked when the plan is built, one-line ConfigError otherwise):
//   command           required: a non-empty array of strings; the first is the program,
//                     an absolute path (no PATH search, no shell, no globbing).
//   compensate        optional: {"command": [...]}, the same rules. Without it the
//                     step's compensation does nothing.
//   env               optional: {"NAME": "value"}; a value may name the node's
//                     environment variables as ${NAME}, resolved at each call and never
//                     written anywhere. The child's environment is PATH, HOME, LANG,
//                     LC_ALL, TZ and TMPDIR as the node has them, DSYNC_EVENT_CODE,
//                     DSYNC_STEP, DSYNC_IDEMPOTENCY_KEY, DSYNC_ACTION, then these.
//   max_output_bytes  optional, default 1048576 (1 MiB), at most 4194304: the most
//                     stdout kept; a program writing more is killed (permanent).
//   timeout_ms        the step's usual deadline (StepSpec::timeout).
// A call: the context JSON (external_step.h) on stdin, then EOF. Exit 0: success, stdout
// is the step's output (its JSON if it parses, else the text). Exit 75 (EX_TEMPFAIL),
// killed by a signal we did not send, or could not be forked: transient. Any other exit
// code, a program that cannot be executed, too much output: permanent. The error holds
// the last lines of stderr. At the deadline, on drain or shutdown (the stop token) and
// when the node no longer owns the event (checked every 2 s), the child's process group
// gets SIGTERM, then SIGKILL 1 s later (core/child_process.h).
// The compensation runs `compensate.command` the same way with "action": "compensate",
// the key "<step code>-compensate" and the forward output as "forward_output".
//
// Thread safety: the handler is immutable; each call runs its own child.
#pragma once

#include <memory>

#include "config/settings.h"
#include "saga/step_handler.h"

namespace dsync::saga {

// The factory registered as "exec". Throws ConfigError for bad params.
std::unique_ptr<StepHandler> MakeExecStep(const StepSpec& spec);

}  // namespace dsync::saga
