// Package pykernel is the engine of sandboxkit's persistent Python kernel:
// notebook semantics over one long-lived python3 process per context, with
// nothing but the standard library on either side.
//
// # How it works
//
// A Kernel starts `python -u -c <bootstrap>` through a Starter (the sandbox
// starts it inside the isolation boundary through its agent; ExecProc starts
// it on this machine). The bootstrap reads the driver program (driver.py,
// embedded with go:embed) from stdin, length-prefixed, and runs it, so no
// file is written in the sandbox. The driver moves its original stdin and
// stdout to private, non-inheritable fds and speaks JSON lines over them. Fds
// 1 and 2 become pipes that a driver thread reads, so output of print, of
// child processes and of os.system is captured at the fd level, in order,
// stdout apart from stderr, and streamed to RunOptions.OnOutput as it comes.
// Fd 0 is /dev/null; input() and getpass.getpass() raise at once.
//
// Each run compiles the code once (top-level await allowed); a final
// expression statement not followed by ';' is the result, shown with repr()
// and every _repr_*_ the object has. display(obj) is a builtin; matplotlib
// is forced to the Agg backend and figures come back as PNG on plt.show()
// and at the end of the run; IPython.display, when installed, routes to the
// same display. Lines starting with '!' run in bash (sh if there is none),
// `name = !cmd` gives the command's output lines as a list, %pip runs `python -m pip` of the kernel's interpreter; %cd, %pwd, %env,
// %time, %timeit and %matplotlib (a no-op) work, and so do %%bash, %%sh,
// %%time and %%writefile cells; other magics fail with UsageError. The
// notebook rewrites apply only to code that does not parse as Python, so
// valid Python is never rewritten.
//
// A timeout (or a cancelled ctx) sends SIGINT: the code gets
// KeyboardInterrupt and the context keeps its state. Code that does not stop
// within Options.InterruptGrace (it swallows the interrupt, ignores SIGINT,
// or sits in a long C call) is killed with its process group and the context
// restarts in a fresh process; the Execution then has StateLost set and its
// Stderr says so. When the Proc does not report the killed process's end
// within 2 s (the sandbox's agent stopped reading: SIGSTOP, frozen,
// hostile), the process is given up instead of waited for: the run returns
// (at its deadline plus InterruptGrace plus those 2 s) with StateLost,
// nothing is restarted then (a start would wait for the same agent), and
// the context's next run starts a fresh process. Contexts adds named
// contexts with a default one made on first use.
//
// Semantics worth knowing: sys.stdout, sys.stderr, sys.stdin, fds 0-2 and the
// SIGINT handler are reset before every run (a cell cannot break the next
// one's plumbing); output written between runs (by background threads or
// processes) is discarded; per-run env keys are restored after the run even
// if the code changed them; SIGINT goes to the whole process group, so a
// background process started by an earlier cell receives it too (as in
// Jupyter).
//
// # Contexts forked from a template
//
// With Options.Imports (e.g. numpy, pandas), Contexts starts one template
// interpreter that imports them once, and forks every context from it: a
// new context costs a few pipe hops instead of an interpreter's start plus
// the imports (on a 2-core machine at load ~20, through the sandbox's agent:
// median 1.7 ms locally, 2.9 ms in Docker, against ~1-2 s for importing
// numpy and pandas afresh; see BenchmarkNewContext). The context's process
// is still one the Starter started, so it is confined, limited and killed
// like any other:
//
//   - Each context begins with a stand-in process, `sleep`, started by the
//     Starter exactly as a driver would be (through the sandbox's agent: its
//     rlimits, its kill tag, its pipes). The template hands a child it forked
//     the stand-in's PID; the child opens /proc/PID/fd/0 and 1 (no unix
//     socket: the Landlock tier has none) and speaks the protocol over the
//     stand-in's pipes, takes the stand-in's kill tag (the soft
//     RLIMIT_RTTIME the agent gives each command), and leads a process group
//     of its own. Killing the stand-in's command reaches the child through
//     the tag; the child also watches the stand-in (a pidfd) and kills its
//     own group when it is gone, for Starters without tags (ExecProc). The
//     template reaps the child, reports its exit code, and kills the
//     stand-in, which ends the streams as a driver's exit does. Interrupts go
//     through the template (the child's parent) to the child's group.
//   - The child inherits the template's rlimits, which its Starter applied
//     when it started the template, as it does for any process. Its memory
//     is its own as far as a memory limit is concerned: the template and
//     every context are processes of the sandbox, and pages they share
//     copy-on-write are counted once, where they were first touched.
//   - A child closes every fd of the template's (its protocol pipes, the
//     other contexts' pidfds) before it runs code: a context cannot speak
//     for the template. Fds that the imported modules opened are kept (they
//     were opened by the modules, not by the template's machinery).
//   - The template keeps one child forked ahead (the spare), which has
//     already reseeded and set up its output capture and namespace, and Go
//     keeps one stand-in started ahead: a new context waits for neither a
//     fork nor a process start. Both are replaced once the new context is
//     ready (so they do not compete with it for the CPU); contexts created
//     back to back pay the fork and the start. The template runs no user
//     code and holds no thread of its own when it forks: numpy's OpenBLAS
//     pool shuts its threads down around fork and restarts them in the child
//     (TestForkedContextUsesBLASThreads), so BLAS keeps all its threads in
//     every context.
//   - A context ends with its stand-in: code that kills every `sleep` in the
//     sandbox (`pkill sleep`) ends every forked context, each of which
//     restarts on its next run with StateLost set, as after any death.
//     A template that cannot fork (the sandbox's process limit) fails the
//     context's start with ErrStart and keeps serving.
//   - When the template dies, every context forked from it is killed (their
//     exits could no longer be reported); the next context starts a new
//     template, and a context whose process died restarts, forked again.
//
// A fork copies state, so each child reseeds what every context would
// otherwise share: Python's random module and numpy's legacy global
// generator (numpy.random.rand and friends) get fresh OS entropy
// (TestForkedContextsDoNotShareRandomState). os.urandom, secrets, uuid4,
// numpy.random.default_rng() and tempfile names draw from the kernel or
// reseed after fork by themselves. What a fork cannot make fresh: the
// string hash seed (PYTHONHASHSEED, fixed when the template started: every
// context orders sets of strings the same way and hash("a") agrees); a
// random.Random or numpy Generator that a module created at import time in
// the template (each context starts from the same state); and the address
// space layout (ASLR): every context of a template has the same addresses
// for what the template loaded. Contexts of one sandbox are one trust
// domain, so the shared layout gives nothing away that the sandbox does not.
// A module that fails to import fails the start with ErrImport naming it;
// the next start tries again. A Starter whose processes do not report a
// PID (a PID() int method) cannot host forked contexts: each context then
// starts afresh and imports the modules itself.
//
// # Threat model
//
// The driver shares its process with the code it runs, which is untrusted:
// it can write anything to the protocol fd, read the driver's stdin, or kill
// the driver. The code cannot do more than what the sandbox around the
// process allows; this package's job is that the Go side, which runs outside
// the sandbox and in the same process as the agent's secrets, is never
// harmed by what comes back. So: every line is size-capped (lineReader) and
// decoded strictly (decodeMessage, fuzzed), so lines that do not decode are
// ignored; stream output and rich output are budgeted per run on the Go side
// too, not only in the driver; a forged "done" for another run is ignored;
// every wait has a timeout and every goroutine ends when the process does.
// The worst a hostile cell can do is spoil its own results or make the kernel
// restart. The environment is exactly Options.Env: nothing of the host
// process leaks in. A template's messages are capped and decoded the same
// way. Code in a context can reach the template's pipes through /proc, as
// any process of the sandbox could, and forge the template's messages: the
// worst it gets is a wrong exit code reported, or an interrupt sent to
// another context of the same sandbox (the template signals only its own
// children); the contexts of one sandbox are one trust domain.
package pykernel
