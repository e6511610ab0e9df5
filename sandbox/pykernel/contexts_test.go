package pykernel

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestContexts(t *testing.T) {
	ctx := context.Background()
	newSet := func(t *testing.T, limit int) *Contexts {
		needPython(t)
		c := NewContexts(ExecProc, testOptions(t), limit)
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	names := func(c *Contexts) string {
		var n []string
		for _, i := range c.List() {
			n = append(n, i.Name)
		}
		return strings.Join(n, ",")
	}
	cases := []struct {
		name string
		fn   func(t *testing.T, c *Contexts)
	}{
		{"the default context is created on first use", func(t *testing.T, c *Contexts) {
			if names(c) != "" {
				t.Fatalf("contexts before use: %s", names(c))
			}
			ex, err := c.Run(ctx, "", "a = 1; a", RunOptions{})
			if err != nil || resultOf(ex) != "1" || names(c) != DefaultContext {
				t.Fatalf("%v %v %s", ex, err, names(c))
			}
			if ex, _ := c.Run(ctx, DefaultContext, "a", RunOptions{}); resultOf(ex) != "1" {
				t.Fatalf("default by name: %s", resultOf(ex))
			}
		}},
		{"named contexts are independent and listed", func(t *testing.T, c *Contexts) {
			for _, n := range []string{"b", "a"} {
				if err := c.Create(ctx, n); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Run(ctx, "a", "v = 'a'", RunOptions{}); err != nil {
				t.Fatal(err)
			}
			if ex, _ := c.Run(ctx, "b", "v", RunOptions{}); ex.Error == nil || ex.Error.Name != "NameError" {
				t.Fatalf("b sees a: %+v", ex)
			}
			l := c.List()
			if names(c) != "a,b" || l[0].ExecutionCount != 1 || l[0].Python.PID == l[1].Python.PID {
				t.Fatalf("list = %+v", l)
			}
		}},
		{"creating a name twice fails", func(t *testing.T, c *Contexts) {
			_ = c.Create(ctx, "x")
			if err := c.Create(ctx, "x"); !errors.Is(err, ErrContextExists) {
				t.Fatalf("err = %v", err)
			}
		}},
		{"unknown and bad names fail clearly", func(t *testing.T, c *Contexts) {
			if _, err := c.Run(ctx, "nope", "1", RunOptions{}); !errors.Is(err, ErrNoContext) {
				t.Fatalf("unknown: %v", err)
			}
			for _, bad := range []string{"../x", "a b", strings.Repeat("n", 65)} {
				if err := c.Create(ctx, bad); !errors.Is(err, ErrBadName) {
					t.Fatalf("%q: %v", bad, err)
				}
			}
		}},
		{"the limit is enforced and remove frees a slot", func(t *testing.T, c *Contexts) {
			_ = c.Create(ctx, "one")
			_ = c.Create(ctx, "two")
			if err := c.Create(ctx, "three"); !errors.Is(err, ErrTooManyContexts) {
				t.Fatalf("err = %v", err)
			}
			if err := c.Remove(ctx, "one"); err != nil {
				t.Fatal(err)
			}
			if err := c.Create(ctx, "three"); err != nil || names(c) != "three,two" {
				t.Fatalf("%v %s", err, names(c))
			}
			if err := c.Remove(ctx, "one"); !errors.Is(err, ErrNoContext) {
				t.Fatalf("remove twice: %v", err)
			}
		}},
		{"restart clears the state", func(t *testing.T, c *Contexts) {
			_, _ = c.Run(ctx, "", "s = 1", RunOptions{})
			if err := c.Restart(ctx, ""); err != nil {
				t.Fatal(err)
			}
			if ex, _ := c.Run(ctx, "", "'s' in globals()", RunOptions{}); resultOf(ex) != "False" {
				t.Fatalf("after restart: %s", resultOf(ex))
			}
		}},
		{"a dead context comes back on the next run, saying state was lost", func(t *testing.T, c *Contexts) {
			if _, err := c.Run(ctx, "", "import os; os._exit(1)", RunOptions{}); !errors.Is(err, ErrDied) {
				t.Fatalf("err = %v", err)
			}
			ex, err := c.Run(ctx, "", "40 + 2", RunOptions{})
			if err != nil || resultOf(ex) != "42" || !ex.StateLost {
				t.Fatalf("%+v %v", ex, err)
			}
		}},
		{"closed set refuses work", func(t *testing.T, c *Contexts) {
			_ = c.Create(ctx, "x")
			_ = c.Close()
			if _, err := c.Run(ctx, "x", "1", RunOptions{}); !errors.Is(err, ErrClosed) {
				t.Fatalf("err = %v", err)
			}
			if err := c.Create(ctx, "y"); !errors.Is(err, ErrClosed) {
				t.Fatalf("err = %v", err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newSet(t, 2)) })
	}
}
