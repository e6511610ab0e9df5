package toolkit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"

	"github.com/sandboxkit/sandboxkit/sandbox/shell"
	"github.com/sandboxkit/sandboxkit/toolkit/internal/shellscan"
)

// Decision is what a [Policy] does with a tool call.
type Decision int

const (
	// Allow runs the call.
	Allow Decision = iota
	// Ask runs the call only if the policy's approver (see [Approver]) says so.
	Ask
	// Deny does not run the call; the model gets a result naming the rule that refused it.
	Deny
)

// String returns "allow", "ask" or "deny".
func (d Decision) String() string {
	switch d {
	case Allow:
		return "allow"
	case Ask:
		return "ask"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("Decision(%d)", int(d))
}

// Rule is one rule of a [Policy]: either a command rule (Command set), decided for every
// program a shell command would run, or a tool rule (Tool set), decided for calls of a tool.
type Rule struct {
	// Decision is what a match decides.
	Decision Decision
	// Command is a command pattern: a program and optionally options and a glob on the other
	// arguments, e.g. "rm", "rm -rf", "git push", "pip install *". See the package doc.
	Command string
	// Tool is a glob on tool names, e.g. "delete_file" or "*_file".
	Tool string
	// Paths, for a tool rule, limit it to calls with a path argument (path, source,
	// destination, cwd) at or under one of these, e.g. ".git". Empty: any path.
	Paths []string
	// ExceptPaths, for a tool rule, exempt calls whose path arguments are all at or under one
	// of these, e.g. "tmp": the rule then decides for paths outside tmp/.
	ExceptPaths []string
	// Message is shown to the model when this rule denies a call: what to do instead.
	Message string
}

// String describes the rule as the model and the audit log see it: `deny command "rm -rf"`.
func (r Rule) String() string {
	if r.Command != "" {
		return fmt.Sprintf("%s command %q", r.Decision, r.Command)
	}
	s := fmt.Sprintf("%s tool %q", r.Decision, r.Tool)
	if len(r.Paths) > 0 {
		s += fmt.Sprintf(" on paths under %s", strings.Join(r.Paths, ", "))
	}
	if len(r.ExceptPaths) > 0 {
		s += fmt.Sprintf(" except under %s", strings.Join(r.ExceptPaths, ", "))
	}
	return s
}

// ApprovalRequest is a call the policy asks a person about.
type ApprovalRequest struct {
	// Tool and Arguments are the call in full, as the model sent it.
	Tool      string
	Arguments json.RawMessage
	// Commands are the programs found in the call's shell text, as parsed, with what reaches
	// them: "rm -r -f build (via sudo)". Empty for calls without shell text.
	Commands []string
	// Reasons say why the call is asked about: the rules that matched, or the default.
	Reasons []string
}

// Approval is a person's answer to an [ApprovalRequest].
type Approval struct {
	// Allow runs the call.
	Allow bool
	// Always, with Allow, also allows later calls the same rules ask about, for the life of
	// the toolkit. A call asked about by the default for undecidable commands is remembered
	// only as that exact call.
	Always bool
	// Message, when not allowed, is shown to the model instead of "A person reviewing tool
	// calls denied it." (e.g. who refused and what to do instead).
	Message string
}

// AskFunc decides an [Ask]. An error denies the call (the model is told approval failed);
// when ctx is done the call fails with ctx's error.
type AskFunc func(ctx context.Context, req ApprovalRequest) (Approval, error)

// Policy decides, before a tool call runs, whether it runs. Build it with [NewPolicy],
// [DenyCommands] or [ParsePolicy] and give it to [Toolkit.SetPolicy]. A Policy is immutable
// and may be shared by toolkits; what a policy learns during calls (a bash session's
// aliases, approvals given "always") is kept per toolkit.
type Policy struct {
	rules       []Rule
	patterns    []*shellscan.Pattern // per rule; nil for tool rules
	undecidable Decision
	unmatched   Decision
	ask         AskFunc
	audit       *slog.Logger
	commands    bool // some rule or default needs the shell text parsed
}

type policyConfig struct {
	rules       []Rule
	undecidable Decision
	unmatched   Decision
	ask         AskFunc
	audit       slog.Handler
}

// PolicyOption adjusts a policy built by [NewPolicy], [DenyCommands] or [ParsePolicy].
type PolicyOption func(*policyConfig)

// Undecidable sets what happens to a command whose program cannot be known before it runs
// (a name built at run time like `$(printf rm) x`, `eval "$cmd"`, `source file`, a shell
// reading a script or its input, text that does not parse): [Deny] (the default) or [Ask].
// [Allow] is refused by NewPolicy: such a command would slip past every rule.
func Undecidable(d Decision) PolicyOption { return func(c *policyConfig) { c.undecidable = d } }

// UnmatchedCommands sets what happens to a command no command rule names: [Allow] (the
// default), or [Ask] / [Deny] to allow only what allow rules name.
func UnmatchedCommands(d Decision) PolicyOption {
	return func(c *policyConfig) { c.unmatched = d }
}

// Approver sets who decides an [Ask]. Without one, a call that needs asking is denied, and
// the model is told that nobody was there to approve it.
func Approver(fn AskFunc) PolicyOption { return func(c *policyConfig) { c.ask = fn } }

// PolicyAudit sends an event for every decision to h (message "policy decision", attributes
// tool, args, decision, decided_by, rule, matched); the shape of the sandbox's own audit
// events (sandbox.WithAudit), so one handler can take both.
func PolicyAudit(h slog.Handler) PolicyOption { return func(c *policyConfig) { c.audit = h } }

// WithRules adds rules after those given to [NewPolicy] or read by [ParsePolicy], e.g. the
// --deny-command flags of a program next to its policy file.
func WithRules(rules ...Rule) PolicyOption {
	return func(c *policyConfig) { c.rules = append(c.rules, rules...) }
}

// NewPolicy builds a policy from rules. It fails on a rule that is neither a command nor a
// tool rule, a bad pattern or glob, or an undecidable default of Allow.
func NewPolicy(rules []Rule, opts ...PolicyOption) (*Policy, error) {
	cfg := policyConfig{undecidable: Deny, unmatched: Allow}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.undecidable != Deny && cfg.undecidable != Ask {
		return nil, fmt.Errorf("toolkit: the default for undecidable commands must be deny or ask, not %s: a command the policy cannot check must not run unseen", cfg.undecidable)
	}
	if cfg.unmatched < Allow || cfg.unmatched > Deny {
		return nil, fmt.Errorf("toolkit: bad decision %d for unmatched commands", cfg.unmatched)
	}
	p := &Policy{undecidable: cfg.undecidable, unmatched: cfg.unmatched, ask: cfg.ask, commands: cfg.unmatched != Allow}
	if cfg.audit != nil {
		p.audit = slog.New(cfg.audit)
	}
	for i, r := range append(append([]Rule(nil), rules...), cfg.rules...) {
		if r.Decision < Allow || r.Decision > Deny {
			return nil, fmt.Errorf("toolkit: rule %d: bad decision %d", i+1, r.Decision)
		}
		var pat *shellscan.Pattern
		switch {
		case r.Command != "" && r.Tool != "":
			return nil, fmt.Errorf("toolkit: rule %d names both a command (%q) and a tool (%q); make two rules", i+1, r.Command, r.Tool)
		case r.Command != "":
			if len(r.Paths)+len(r.ExceptPaths) > 0 {
				return nil, fmt.Errorf("toolkit: rule %d: paths apply to tool rules only, not to command %q", i+1, r.Command)
			}
			var err error
			if pat, err = shellscan.ParsePattern(r.Command); err != nil {
				return nil, fmt.Errorf("toolkit: rule %d: %v", i+1, err)
			}
			p.commands = true
		case r.Tool != "":
			for _, g := range append([]string{r.Tool}, append(r.Paths, r.ExceptPaths...)...) {
				if _, err := path.Match(g, ""); err != nil {
					return nil, fmt.Errorf("toolkit: rule %d: bad glob %q", i+1, g)
				}
			}
		default:
			return nil, fmt.Errorf("toolkit: rule %d names neither a command nor a tool", i+1)
		}
		p.rules = append(p.rules, r)
		p.patterns = append(p.patterns, pat)
	}
	return p, nil
}

// DenyCommands returns a policy that denies every run of the named programs, however they
// are reached (paths, wrappers such as env or sudo, bash -c, xargs, quoting), and denies
// commands whose program cannot be known before they run:
//
//	kit.SetPolicy(toolkit.DenyCommands("rm", "sudo", "shutdown"))
//
// Each pattern may also carry options and arguments ("git push", "rm -rf"); see [Rule]. It
// panics on a bad pattern, a programming error in a fixed list.
func DenyCommands(patterns ...string) *Policy {
	rules := make([]Rule, len(patterns))
	for i, p := range patterns {
		rules[i] = Rule{Decision: Deny, Command: p}
	}
	p, err := NewPolicy(rules)
	if err != nil {
		panic("toolkit.DenyCommands: " + err.Error())
	}
	return p
}

// SetPolicy makes every call through k — [Toolkit.Call] and the toolkits [Toolkit.Subset]
// makes from it afterwards — pass p first. nil removes the policy. What the policy learns
// (a bash session's aliases, "always" approvals) starts afresh.
func (k *Toolkit) SetPolicy(p *Policy) {
	var g *policyGuard
	if p != nil {
		g = &policyGuard{p: p, defs: map[string]*shellscan.Defs{}, always: map[string]bool{}}
	}
	k.mu.Lock()
	k.guard = g
	k.mu.Unlock()
}

// policyGuard is a policy applied to one toolkit, with what it learned there.
type policyGuard struct {
	p      *Policy
	mu     sync.Mutex
	defs   map[string]*shellscan.Defs // bash session -> its aliases and functions
	always map[string]bool            // what approvals said "always" to
}

// finding is one reason for a decision.
type finding struct {
	decision Decision
	by       string // "rule", "default" (undecidable), "unmatched"
	rule     int    // index, for "rule"
	subject  string // what matched: a command as parsed, a path
	reason   string // for "default": why it cannot be decided
}

// checkPolicy runs k's policy on a call. done reports that the call must not run; res and err
// are then what Call returns.
func (k *Toolkit) checkPolicy(ctx context.Context, name string, args json.RawMessage) (res Result, done bool, err error) {
	k.mu.RLock()
	g := k.guard
	k.mu.RUnlock()
	if g == nil {
		return Result{}, false, nil
	}
	return g.check(ctx, name, args)
}

func (g *policyGuard) check(ctx context.Context, tool string, args json.RawMessage) (Result, bool, error) {
	p := g.p
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(args, &fields) // bad JSON runs nothing: the tool refuses it next
	str := func(key string) (string, bool) {
		var s string
		if raw, ok := fields[key]; ok && json.Unmarshal(raw, &s) == nil && s != "" {
			return s, true
		}
		return "", false
	}

	var found []finding
	var commands []shellscan.Command
	for i, r := range p.rules {
		if r.Tool == "" {
			continue
		}
		if ok, _ := path.Match(r.Tool, tool); !ok {
			continue
		}
		if subject, ok := toolRuleMatches(r, str); ok {
			found = append(found, finding{decision: r.Decision, by: "rule", rule: i, subject: subject})
		}
	}

	// The shell text of the built-in tools: what run_command, start_background and bash run,
	// text typed into a bash session (bash reads it as commands once the running program
	// exits without reading it), and the shell lines of a Python cell.
	var session string
	var defs *shellscan.Defs
	if p.commands {
		var scans []shellscan.Result
		switch tool {
		case "run_command", "start_background":
			if s, ok := str("command"); ok {
				scans = append(scans, shellscan.Shell(s, nil))
			}
		case "bash":
			session, _ = str("session_id")
			if session == "" {
				session = "default"
			}
			g.mu.Lock()
			defs = g.defs[session].Clone()
			g.mu.Unlock()
			if s, ok := str("command"); ok {
				scans = append(scans, shellscan.Shell(s, defs))
			}
			// Input is typed into the session; bash reads it as commands once the running
			// program exits without reading it. Key names (C-c, Enter) are not text: the
			// session sends them as keys (the same test decides), and history, which Up
			// would recall, is off in sandbox sessions.
			if s, ok := str("input"); ok {
				if _, keys := shell.ParseKeys(s); !keys {
					scans = append(scans, shellscan.Shell(s, defs))
				}
			}
		case "run_python":
			if s, ok := str("code"); ok {
				scans = append(scans, shellscan.PythonCell(s, nil))
			}
		}
		for _, sc := range scans {
			for _, u := range sc.Unknown {
				found = append(found, finding{decision: p.undecidable, by: "default", subject: u.Text, reason: u.Reason})
			}
			for _, c := range sc.Commands {
				commands = append(commands, c)
				found = append(found, p.decideCommand(c)...)
			}
		}
	}

	decision, why, always := g.decide(found)
	by := "no rule"
	switch {
	case why != nil:
		by = why.by
	case always:
		by = "approver" // an earlier "always"
	}
	if decision == Ask {
		var req ApprovalRequest
		req, why = g.request(tool, args, commands, found)
		if p.ask == nil {
			g.log(ctx, tool, args, Deny, "default", why, "no approver")
			return errorResult(denyText(p, tool, why, "It needs a person's approval, and there is no one to ask here: do without it, or tell the user what you need and why.")), true, nil
		}
		ans, err := p.ask(ctx, req)
		if ctx.Err() != nil {
			return Result{}, true, fmt.Errorf("toolkit: tool %s not run: %w", tool, context.Cause(ctx))
		}
		switch {
		case err != nil:
			g.log(ctx, tool, args, Deny, "approver", why, "approval failed: "+err.Error())
			return errorResult(denyText(p, tool, why, fmt.Sprintf("Asking a person for approval failed (%v), so it was not run.", err))), true, nil
		case !ans.Allow:
			msg := ans.Message
			if msg == "" {
				msg = "A person reviewing tool calls denied it."
			}
			g.log(ctx, tool, args, Deny, "approver", why, ans.Message)
			return errorResult(denyText(p, tool, why, msg)), true, nil
		}
		if ans.Always {
			g.mu.Lock()
			for _, f := range found {
				if f.decision == Ask {
					g.always[alwaysKey(tool, f)] = true
				}
			}
			g.mu.Unlock()
		}
		decision, by = Allow, "approver"
	}
	if decision == Deny {
		g.log(ctx, tool, args, Deny, by, why, "")
		return errorResult(denyText(p, tool, why, "")), true, nil
	}
	g.log(ctx, tool, args, Allow, by, why, "")
	if defs != nil {
		// Only a call that runs defines anything in its session.
		g.mu.Lock()
		g.defs[session] = defs
		g.mu.Unlock()
	}
	return Result{}, false, nil
}

// decideCommand returns the findings for one command: the rules that match it, the default
// where a rule may match depending on run-time values, or the unmatched default.
func (p *Policy) decideCommand(c shellscan.Command) []finding {
	var out []finding
	allowed := false
	for i, r := range p.rules {
		pat := p.patterns[i]
		if pat == nil {
			continue
		}
		switch pat.Match(c) {
		case shellscan.Match:
			if r.Decision == Allow {
				allowed = true
				continue
			}
			out = append(out, finding{decision: r.Decision, by: "rule", rule: i, subject: c.String()})
		case shellscan.Maybe:
			if r.Decision == Allow {
				continue
			}
			// Uncertain whether the rule applies: the default decides, but never more
			// strictly than the rule would (an ask rule that may apply asks).
			d := min(p.undecidable, r.Decision)
			out = append(out, finding{decision: d, by: "default", subject: c.String(),
				reason: fmt.Sprintf("whether rule %s applies depends on values only known when it runs", r)})
		}
	}
	if len(out) == 0 && !allowed && p.unmatched != Allow {
		out = append(out, finding{decision: p.unmatched, by: "unmatched", subject: c.String()})
	}
	return out
}

// decide returns the strongest decision among the findings and the finding that made it.
// Asks already approved "always" count as allowed, and always reports that one did.
func (g *policyGuard) decide(found []finding) (decision Decision, why *finding, always bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range found {
		f := &found[i]
		d := f.decision
		if d == Ask && g.always[alwaysKey("", *f)] {
			d, always = Allow, true
		}
		if d > decision || why == nil && d == decision && d != Allow {
			decision, why = d, f
		}
	}
	return decision, why, always
}

// request builds what the approver is shown, and returns the first finding that asks.
func (g *policyGuard) request(tool string, args json.RawMessage, commands []shellscan.Command, found []finding) (ApprovalRequest, *finding) {
	req := ApprovalRequest{Tool: tool, Arguments: args}
	for _, c := range commands {
		req.Commands = append(req.Commands, c.String())
	}
	var first *finding
	for i := range found {
		f := &found[i]
		if f.decision != Ask {
			continue
		}
		if first == nil {
			first = f
		}
		req.Reasons = append(req.Reasons, g.p.describe(f))
	}
	return req, first
}

// alwaysKey names what an "always" approval covers: the rule, or for a default the exact
// command (never a blanket allow of what the policy cannot check).
func alwaysKey(_ string, f finding) string {
	if f.by == "rule" {
		return fmt.Sprintf("rule %d", f.rule)
	}
	return f.by + "\x00" + f.subject
}

// describe says in one line why a finding decided as it did.
func (p *Policy) describe(f *finding) string {
	switch f.by {
	case "rule":
		return fmt.Sprintf("rule %s matched %s", p.rules[f.rule], f.subject)
	case "default":
		return fmt.Sprintf("not a rule but the policy's default for commands it cannot check decided (%s): %s — %s", f.decision, f.subject, f.reason)
	case "unmatched":
		return fmt.Sprintf("no rule allows %s, and the policy's default for such commands is %s", f.subject, p.unmatched)
	}
	return ""
}

// denyText is the result text a model reads for a refused call: what was refused, by which
// rule or default, and what it can do instead.
func denyText(p *Policy, tool string, why *finding, extra string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s was not run: the tool policy refused it.\n", tool)
	if why != nil {
		b.WriteString(p.describe(why) + ".\n")
	}
	switch {
	case extra != "":
		b.WriteString(extra)
	case why != nil && why.by == "rule" && p.rules[why.rule].Message != "":
		b.WriteString(p.rules[why.rule].Message)
	case why != nil && why.by == "default":
		b.WriteString("Write the command so that every program it runs is named literally (no $(...), variables, globs, eval or source in a program's place, no script piped into a shell), and it will be checked against the rules.")
	default:
		b.WriteString("Do not try to reach the same effect another way (other paths, wrappers, quoting and bash -c are checked the same way): choose another approach, or tell the user what you need and why.")
	}
	return b.String()
}

func (g *policyGuard) log(ctx context.Context, tool string, args json.RawMessage, d Decision, by string, why *finding, note string) {
	if g.p.audit == nil {
		return
	}
	level := slog.LevelInfo
	if d == Deny {
		level = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String("tool", tool), slog.String("args", shortName(string(args))),
		slog.String("decision", d.String()), slog.String("decided_by", by)}
	if why != nil {
		if why.by == "rule" {
			attrs = append(attrs, slog.String("rule", g.p.rules[why.rule].String()))
		} else {
			attrs = append(attrs, slog.String("rule", why.by))
		}
		attrs = append(attrs, slog.String("matched", why.subject))
	}
	if note != "" {
		attrs = append(attrs, slog.String("note", note))
	}
	g.p.audit.LogAttrs(ctx, level, "policy decision", attrs...)
}

// toolRuleMatches reports whether a tool rule's paths select the call, and the path that did.
func toolRuleMatches(r Rule, str func(string) (string, bool)) (string, bool) {
	var paths []string
	for _, key := range []string{"path", "source", "destination", "cwd"} {
		if s, ok := str(key); ok {
			paths = append(paths, s)
		}
	}
	if len(paths) == 0 {
		paths = []string{"."} // the tool's default: the workspace
	}
	if len(r.Paths) == 0 && len(r.ExceptPaths) == 0 {
		return strings.Join(paths, ", "), true
	}
	for _, p := range paths {
		if len(r.Paths) > 0 && !underAny(p, r.Paths) {
			continue
		}
		if len(r.ExceptPaths) > 0 && underAny(p, r.ExceptPaths) {
			continue
		}
		return p, true
	}
	return "", false
}

// underAny reports whether p is at or under one of the patterns. A pattern without a leading
// slash matches at any depth (".git" matches .git/config, a/.git/x and /workspace/.git); one
// with a leading slash matches from the root of an absolute path. Each pattern component is
// a glob on one path component.
func underAny(p string, patterns []string) bool {
	clean := path.Clean(strings.ReplaceAll(p, "\\", "/"))
	comps := strings.Split(strings.TrimPrefix(clean, "/"), "/")
	for _, pat := range patterns {
		anchored := strings.HasPrefix(pat, "/")
		pc := strings.Split(strings.Trim(path.Clean(pat), "/"), "/")
		for start := 0; start+len(pc) <= len(comps); start++ {
			if anchored && (start > 0 || !strings.HasPrefix(clean, "/")) {
				break
			}
			ok := true
			for i, g := range pc {
				if m, _ := path.Match(g, comps[start+i]); !m {
					ok = false
					break
				}
			}
			if ok {
				return true
			}
		}
	}
	return false
}
