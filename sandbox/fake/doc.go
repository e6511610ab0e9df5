// Package fake is a sandbox for offline tests of an agent's tools and
// loops: no process, no container, no network. fake.New(t) returns a real
// *sandbox.Sandbox, so the built-in tools (toolkit.ForSandbox) and every
// service work on it unchanged, together with a *Fake handle that scripts
// answers and records calls.
//
//	sb, fk := fake.New(t)
//	fk.Script.Command(fake.Exact("go test ./..."), fake.Reply{Stdout: "ok\n"})
//	fk.Script.Python(fake.Regexp(`^df\.describe`), fake.PythonReply{Result: "count 3"})
//	kit := toolkit.ForSandbox(sb)
//	... run the code under test ...
//	calls := fk.CallsOf(fake.KindCommand) // what ran, with the policy in force
//
// How it works: the fake is a backend (a driver.Driver) whose stream leads
// to the real agent server (package sandbox/agent/server) inside the test
// process, serving a temporary directory as the workspace. Everything
// above the stream (package sandbox, the Python kernel client, bash
// sessions, the toolkit) and the server itself are the production code:
// file operations, search, glob, tar in and out, symbolic links, quotas
// from the limits, path confinement (os.Root), output caps, the job table
// and error codes are the real ones by construction. Only the server's
// process side (its Runner) is replaced by a script; it starts no
// process:
//
//   - commands and background jobs are answered from the Script, matched on
//     their command line (the script of `sh -c`, else the arguments joined)
//     by Exact, Regexp or Func; a Hang reply runs until the call's timeout
//     and ends with SBX_TIMEOUT and the partial output, like a real command;
//   - Python cells are answered by a fake kernel driver speaking the kernel's
//     protocol (results, displays, exceptions; a hanging cell is ended by the
//     timeout's interrupt with KeyboardInterrupt, its state kept); with
//     sandbox.WithPythonImports, a fake template plays the interpreter that
//     forks contexts (every import succeeds: the fake has no modules to
//     miss) and its contexts answer from the same rules;
//   - bash sessions are answered by a fake bash speaking the session
//     protocol over the terminal stream (output, exit status, cwd, commands
//     left running that take input and Ctrl-C).
//
// Time: command and job timeouts run on the fake's Clock, which moves only
// when something waits for it. A hanging command moves it to its own
// deadline at once, so a test of a 30 s timeout takes microseconds and
// reports a 30 s Duration; Clock.Advance moves it by hand (a hanging
// background job ends when its timeout has passed on it). Timeouts kept on
// the host side (Python cells, session commands, the caller's context)
// take real time.
//
// A call no rule answers is an error that names it and shows the rule to
// add: a command fails with SBX_NOT_FOUND, a Python cell raises
// NotScriptedError, a session command prints the message and exits 127.
// The test itself also fails at its end, listing those calls, unless the
// fake was made with AllowUnscripted.
//
// Every call (files included) is recorded with its arguments and the
// Policy in force: network allowed or not, the isolation tier reported,
// the limits, the call's timeout and environment.
//
// The workspace is a directory of the host (Info().HostWorkspace, shown to
// the code under test as /workspace), so on macOS and Windows its file
// semantics are the host's: symbolic links, permission bits and case
// folding follow the host's file system there (the contract suite marks
// the cases that differ).
//
// What the fake is not: a security boundary or a model of a real system.
// It reports isolation tier none (ReportTier changes that), Pause and
// Resume do nothing, and a scripted command changes files only if its
// CommandFunc does so through Exec.Workspace.
package fake
