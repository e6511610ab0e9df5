package toolkit

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Toolkit is a set of tools with unique names, kept in registration order. Adapters list its
// tools for a model and send the model's calls to [Toolkit.Call]. It is safe for concurrent
// use, including Add during calls.
type Toolkit struct {
	mu    sync.RWMutex
	tools []*Tool
	index map[string]*Tool
	guard *policyGuard // see SetPolicy; nil: every call runs
}

// Of returns a toolkit holding tools in the given order. It panics on a nil tool or a
// duplicate name: both are programming errors in a fixed list.
func Of(tools ...*Tool) *Toolkit {
	k := &Toolkit{index: map[string]*Tool{}}
	if err := k.Add(tools...); err != nil {
		panic("toolkit.Of: " + err.Error())
	}
	return k
}

// Add appends tools. It adds none of them and returns an error when one is nil or its name is
// already taken (by the toolkit or earlier in the same call).
func (k *Toolkit) Add(tools ...*Tool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.index == nil {
		k.index = map[string]*Tool{}
	}
	seen := map[string]bool{}
	for i, t := range tools {
		if t == nil {
			return fmt.Errorf("toolkit: tool %d is nil", i)
		}
		if _, dup := k.index[t.name]; dup || seen[t.name] {
			return fmt.Errorf("toolkit: duplicate tool name %q", t.name)
		}
		seen[t.name] = true
	}
	for _, t := range tools {
		k.tools = append(k.tools, t)
		k.index[t.name] = t
	}
	return nil
}

// Tools returns the tools in registration order. The slice is a copy; the tools are shared.
func (k *Toolkit) Tools() []*Tool {
	k.mu.RLock()
	defer k.mu.RUnlock()
	return slices.Clone(k.tools)
}

// Lookup returns the tool called name.
func (k *Toolkit) Lookup(name string) (*Tool, bool) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	t, ok := k.index[name]
	return t, ok
}

// Subset returns a new toolkit with only the named tools, in the order given (a name listed
// twice is kept once), e.g. to offer a model read-only tools. The error names every unknown
// tool and lists the available ones.
func (k *Toolkit) Subset(names ...string) (*Toolkit, error) {
	k.mu.RLock()
	defer k.mu.RUnlock()
	sub := &Toolkit{index: map[string]*Tool{}, guard: k.guard}
	var unknown []string
	for _, n := range names {
		t, ok := k.index[n]
		if !ok {
			unknown = append(unknown, fmt.Sprintf("%q", n))
			continue
		}
		if _, dup := sub.index[n]; dup {
			continue
		}
		sub.tools = append(sub.tools, t)
		sub.index[n] = t
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("toolkit: unknown tools %s (available: %s)", strings.Join(unknown, ", "), k.namesLocked())
	}
	return sub, nil
}

// Call runs the tool called name with arguments JSON as a model sent it. An unknown name is
// an IsError result listing the available tools; a call the policy refuses (see
// [Toolkit.SetPolicy]) is an IsError result naming the rule; everything else is as [Tool.Call].
func (k *Toolkit) Call(ctx context.Context, name string, args json.RawMessage) (Result, error) {
	t, ok := k.Lookup(name)
	if !ok {
		if err := ctx.Err(); err != nil {
			return Result{}, fmt.Errorf("toolkit: tool %s not run: %w", name, context.Cause(ctx))
		}
		k.mu.RLock()
		names := k.namesLocked()
		k.mu.RUnlock()
		return errorResult(fmt.Sprintf("unknown tool %q; available tools: %s", shortName(name), names)), nil
	}
	if res, refused, err := k.checkPolicy(ctx, name, args); refused {
		return res, err
	}
	return t.Call(ctx, args)
}

func (k *Toolkit) namesLocked() string {
	if len(k.tools) == 0 {
		return "(none)"
	}
	names := make([]string, len(k.tools))
	for i, t := range k.tools {
		names[i] = t.name
	}
	return strings.Join(names, ", ")
}

// shortName keeps an invented tool name from flooding the error text.
func shortName(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	for i := max; i > 0; i-- {
		if s[i]&0xC0 != 0x80 {
			return s[:i] + "…"
		}
	}
	return ""
}
