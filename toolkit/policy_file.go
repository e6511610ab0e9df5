package toolkit

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"gopkg.in/yaml.v3"
)

// policyFile is the document ParsePolicy reads.
type policyFile struct {
	Undecidable       string     `yaml:"undecidable"`
	UnmatchedCommands string     `yaml:"unmatched_commands"`
	Rules             []fileRule `yaml:"rules"`
}

type fileRule struct {
	Decision    string   `yaml:"decision"`
	Command     string   `yaml:"command"`
	Tool        string   `yaml:"tool"`
	Paths       []string `yaml:"paths"`
	ExceptPaths []string `yaml:"except_paths"`
	Message     string   `yaml:"message"`
}

// ParsePolicy reads a policy file, YAML or JSON (JSON is YAML too), and builds the policy;
// opts come after the file's settings and may add an approver or an audit handler:
//
//	undecidable: ask            # deny (default) or ask
//	unmatched_commands: allow   # allow (default), ask or deny
//	rules:
//	  - {decision: deny, command: rm -rf, message: delete single files with delete_file}
//	  - {decision: deny, command: git push}
//	  - {decision: ask,  command: pip install *}
//	  - {decision: deny, tool: write_file, paths: [.git]}
//	  - {decision: ask,  tool: delete_file, except_paths: [tmp]}
//
// Unknown keys and decisions are errors, so a typo cannot silently drop a rule.
func ParsePolicy(data []byte, opts ...PolicyOption) (*Policy, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f policyFile
	if err := dec.Decode(&f); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("toolkit: policy file: %v", err)
	}
	var fileOpts []PolicyOption
	if f.Undecidable != "" {
		d, err := parseDecision(f.Undecidable)
		if err != nil {
			return nil, fmt.Errorf("toolkit: policy file: undecidable: %v", err)
		}
		fileOpts = append(fileOpts, Undecidable(d))
	}
	if f.UnmatchedCommands != "" {
		d, err := parseDecision(f.UnmatchedCommands)
		if err != nil {
			return nil, fmt.Errorf("toolkit: policy file: unmatched_commands: %v", err)
		}
		fileOpts = append(fileOpts, UnmatchedCommands(d))
	}
	rules := make([]Rule, len(f.Rules))
	for i, r := range f.Rules {
		d, err := parseDecision(r.Decision)
		if err != nil {
			return nil, fmt.Errorf("toolkit: policy file: rule %d: decision: %v", i+1, err)
		}
		rules[i] = Rule{Decision: d, Command: r.Command, Tool: r.Tool, Paths: r.Paths, ExceptPaths: r.ExceptPaths, Message: r.Message}
	}
	p, err := NewPolicy(rules, append(fileOpts, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w (in the policy file)", err)
	}
	return p, nil
}

func parseDecision(s string) (Decision, error) {
	switch s {
	case "allow":
		return Allow, nil
	case "ask":
		return Ask, nil
	case "deny":
		return Deny, nil
	}
	return 0, fmt.Errorf("%q is not allow, ask or deny", s)
}
