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
// Stderr says so. Contexts adds named contexts with a default one made on
// first use.
//
// Semantics worth knowing: sys.stdout, sys.stderr, sys.stdin, fds 0-2 and the
// SIGINT handler are reset before every run (a cell cannot break the next
// one's plumbing); output written between runs (by background threads or
// processes) is discarded; per-run env keys are restored after the run even
// if the code changed them; SIGINT goes to the whole process group, so a
// background process started by an earlier cell receives it too (as in
// Jupyter).
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
// process leaks in.
package pykernel
