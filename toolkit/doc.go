// Package toolkit turns typed Go functions into tools a model can call, and dispatches the
// calls.
//
// A tool is a name, a description written for the model, and a func(ctx, In) (Out, error).
// [New] derives the argument schema from In's struct tags (see package schemas), so nobody
// writes JSON Schema by hand. A [Toolkit] holds tools in registration order, lists them for an
// adapter (OpenAI, langchaingo, MCP), and runs [Toolkit.Call] with the raw arguments JSON a
// model produced.
//
// The split between the two kinds of failure is the contract adapters rely on:
//
//   - Anything the model can fix — an unknown tool name, malformed JSON, a wrong type, a
//     missing or extra argument, an error returned by the tool — is a [Result] with IsError
//     set and a Text saying what was wrong and what was expected. The agent loop sends it back
//     to the model and carries on.
//   - Infrastructure failures — the context is done, the sandbox is dead or closed (errors with
//     a Fatal() bool method returning true) — are Go errors from Call. Retrying the model
//     cannot help, so the loop should stop.
//
// Threat model: arguments come from a model and are untrusted. They are validated against the
// schema and decoded with unknown fields refused before the function runs, so a tool sees
// only well-typed input; it must still check meaning (paths, sizes) itself. Error texts quote
// what the model sent (shortened) and never include Go stack traces.
//
// # Policy
//
// A [Policy] set with [Toolkit.SetPolicy] sees every call before it runs and decides:
// [Allow]; [Deny], answered to the model with an IsError result naming the rule (or default)
// that refused and what to do instead; or [Ask], decided by the program's [Approver] (a
// terminal prompt, an MCP elicitation) with the call shown in full and the commands as
// parsed. Every decision is an audit event ([PolicyAudit]). [DenyCommands] is the one-line
// form; [NewPolicy] takes [Rule]s; [ParsePolicy] reads them from a YAML or JSON file.
//
// Tool rules name tools by glob, optionally limited to path arguments (path, source,
// destination, cwd) at or under some paths, or outside some ([Rule.ExceptPaths]): "no
// write_file under .git", "ask before delete_file outside tmp". A path pattern without a
// leading slash matches at any depth (".git" covers .git/config and /workspace/a/.git/HEAD);
// ".." is resolved lexically first. Symlinks are not followed: a guardrail, not a
// confinement (the sandbox confines).
//
// Command rules apply to the shell text of run_command, start_background, bash (its command
// and the input typed into it) and the shell lines of run_python cells (!cmd, x = !cmd,
// %pip, %%bash, %%sh). The text is parsed with mvdan.cc/sh, and every simple command anywhere
// in it is decided: in pipelines, lists, subshells, command and process substitutions,
// parameter defaults, here-documents, function bodies, strings run by bash -c / sh -c / eval /
// trap / watch / su -c / env -S (recursively), and programs run through wrappers (env, sudo,
// doas, nice, nohup, timeout, stdbuf, ionice, setsid, chroot, flock, xargs, find -exec and
// -execdir, command, exec, python -m, ...). Quoting is undone as the shell does (\rm, 'r'm, r""m and
// $'\x72m' are rm), brace expansion is applied, and assignments before a command are skipped.
// In a bash session the aliases and functions the session defines are followed from the
// commands sent to it, so a later call of such a name is decided by what it runs. Sandbox
// sessions read no startup files, so that is all they define, except what a source or eval
// defines — which the Undecidable default refuses, or a person approved without the policy
// seeing its definitions.
//
// The rule language: a pattern is words separated by spaces.
//
//   - The first word is a glob on the program's base name, whatever path or wrapper reaches
//     it: "rm" matches rm, /bin/rm, ./rm, `env rm`, `sudo -u x rm`, `xargs rm`.
//   - Words starting with "-" are options the command must have, however they are combined,
//     ordered or spelled: "rm -rf" matches `rm -r -f x`, `rm -fr x`, `rm -Rf x`,
//     `rm x -f -r` and `rm --recursive --force x` (long/short synonyms of common programs
//     are known; unique abbreviations of long options count). More options do not hinder
//     a match.
//   - The remaining words are a glob (* ? [...]) on the command's other arguments with its
//     options removed, joined by single spaces, matched as a prefix on word boundaries:
//     "git push" matches `git push origin main` and `git -C repo push`; "pip install *"
//     matches `pip -q install numpy`.
//
// Among the rules that match a command, deny beats ask beats allow. A command no rule
// matches is allowed, unless [UnmatchedCommands] makes it ask or deny (an allow list); allow
// rules only matter then. A call's decision is the strongest of its commands' and of the
// tool rules that match it.
//
// What cannot be decided before the command runs — a program name built at run time
// (`$(printf rm) x`, `$cmd`, a glob like /bin/r?), eval of a variable, source or . of a file,
// a shell reading a script file or its input (`curl ... | sh`), options or arguments that
// come from variables or xargs input where a rule depends on them, text that does not parse —
// is decided by the [Undecidable] default, deny or ask, never allow (and never more strictly
// than the rule in doubt: where only an ask rule may apply, it asks), and the message says it
// was the default and not a rule.
//
// The policy is a guardrail on what a model asks for, not a security boundary: a program the
// rules allow can still do what a denied one does (python -c "import os; os.system('rm
// x')", a script written with write_file and then run, make with a Makefile). What a command
// can reach is bounded by the sandbox — the kernel's namespaces, Landlock and seccomp — not by
// this policy.
//
// [Render] and friends format tool output the same compact way for every tool (exit code,
// stdout/stderr sections, truncation markers that say how to get the rest), so a model learns
// one layout.
//
// # What the model sees of long output
//
// Output a model reads (run_command, bash, background jobs, run_python streams) shows its start
// and its end, [DefaultShownOutput] in all per stream ([OutputLimit]), around one marker line:
// "[… 196,971 lines (1.3 MB) omitted; the whole output is in FILE: read_file with offset, or
// search_files …]". The whole output is written to FILE under ".sandboxkit/outputs" where it
// is produced — by the agent for commands and jobs (sandbox.Command.OutputFile), by the bash
// session as it cleans the terminal's output, by the Python driver inside the sandbox — up to
// [SavedOutputLimit]; the marker says when even the file was cut or could not be written. A
// file is removed again when its output was shown whole. run_python shows prints, display()
// outputs and the result in the order the code produced them. Messages name tools and
// arguments (never Go APIs), and what they quote of the model's input is bounded.
package toolkit
