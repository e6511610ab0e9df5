package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/sandboxkit/sandboxkit/toolkit"
)

// policyFlags are the tool-call policy settings: a policy file and command patterns to deny
// or to ask about.
type policyFlags struct {
	file      string
	deny, ask stringList
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ", ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

// policy builds the policy the flags describe, deciding asks with approve; nil when the
// flags name none.
func (f policyFlags) policy(approve toolkit.AskFunc) (*toolkit.Policy, error) {
	if f.file == "" && len(f.deny) == 0 && len(f.ask) == 0 {
		return nil, nil
	}
	opts := []toolkit.PolicyOption{toolkit.Approver(approve)}
	for _, p := range f.deny {
		opts = append(opts, toolkit.WithRules(toolkit.Rule{Decision: toolkit.Deny, Command: p}))
	}
	for _, p := range f.ask {
		opts = append(opts, toolkit.WithRules(toolkit.Rule{Decision: toolkit.Ask, Command: p}))
	}
	if f.file == "" {
		return toolkit.NewPolicy(nil, opts...)
	}
	data, err := os.ReadFile(f.file)
	if err != nil {
		return nil, fmt.Errorf("--policy: %w", err)
	}
	p, err := toolkit.ParsePolicy(data, opts...)
	if err != nil {
		return nil, fmt.Errorf("--policy %s: %w", f.file, err)
	}
	return p, nil
}

// terminalApprover asks the person at the terminal about the calls the policy asks about:
// allow once, always, or deny, with the call shown as the policy parsed it.
type terminalApprover struct {
	mu    sync.Mutex // one question at a time, even when the model calls tools in parallel
	in    *os.File
	lines chan string // lines read from in, by one reader for the whole run
	once  sync.Once
	tr    *tracer
}

func newTerminalApprover(in *os.File, tr *tracer) *terminalApprover {
	return &terminalApprover{in: in, tr: tr}
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (a *terminalApprover) ask(ctx context.Context, req toolkit.ApprovalRequest) (toolkit.Approval, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !isTerminal(a.in) {
		return toolkit.Approval{Message: "It needs the approval of the person running the agent, and there is no terminal to ask on."}, nil
	}
	a.once.Do(func() {
		// Reading a terminal cannot be interrupted; one reader serves every question, and a
		// question abandoned by Ctrl-C does not leave a second reader behind.
		a.lines = make(chan string)
		go func() {
			r := bufio.NewReader(a.in)
			for {
				line, err := r.ReadString('\n')
				if err != nil && line == "" {
					close(a.lines)
					return
				}
				a.lines <- line
			}
		}()
	})
	t := a.tr
	t.endLine()
	t.printf("%s %s\n", t.style(styleYellow+styleBold, "? approval needed:"), req.Tool)
	if len(req.Commands) > 0 {
		for _, c := range req.Commands {
			t.printf("    runs  %s\n", c)
		}
	} else {
		t.printf("    args  %s\n", req.Arguments)
	}
	for _, r := range req.Reasons {
		t.printf("    why   %s\n", r)
	}
	for {
		t.printf("  allow [o]nce, [a]lways, or [d]eny? ")
		var line string
		select {
		case <-ctx.Done():
			t.printf("\n")
			return toolkit.Approval{}, ctx.Err()
		case l, ok := <-a.lines:
			if !ok {
				t.printf("\n")
				return toolkit.Approval{Message: "The terminal closed before anyone answered."}, nil
			}
			line = l
		}
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "o", "once", "y", "yes":
			return toolkit.Approval{Allow: true}, nil
		case "a", "always":
			return toolkit.Approval{Allow: true, Always: true}, nil
		case "d", "deny", "n", "no":
			return toolkit.Approval{}, nil // "A person reviewing tool calls denied it."
		}
	}
}
