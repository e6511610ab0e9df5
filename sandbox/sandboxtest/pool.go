package sandboxtest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxkit/sandboxkit/sandbox"
)

// ComparePoolGet is issue 22's pool benchmark on any backend: Pool.Get plus
// a first command (Commands.Run "true") against a cold sandbox.New plus the
// same command ("cold"), and against the same command in a sandbox already
// held ("warm", the lower bound), in the same run (CompareWithFloors). opts
// are the options of New (the driver among them); the pool has cfg (Size 4
// when zero). The pool's replacements start in the background during the
// measurement, as they would for a real caller; closing the sandboxes is
// not timed. The first Get waits for the pool's first start, one sample of
// many that the median ignores.
func ComparePoolGet(b *testing.B, cfg sandbox.PoolConfig, opts ...sandbox.Option) {
	b.Helper()
	ctx := context.Background()
	if cfg.Size == 0 {
		cfg.Size = 4
	}
	pool, err := sandbox.NewPool(ctx, cfg, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	first := func(b *testing.B, sb *sandbox.Sandbox) func() {
		if res, err := sb.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
			sb.Close()
			b.Fatalf("true in the sandbox: %v %+v", err, res)
		}
		return func() { sb.Close() }
	}
	warm, err := sandbox.New(ctx, opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer warm.Close()
	first(b, warm) // its first command is not the one measured
	CompareWithFloors(b, func(b *testing.B) func() {
		sb, err := pool.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		return first(b, sb)
	}, Floor{Name: "cold", Run: func(b *testing.B) func() {
		sb, err := sandbox.New(ctx, opts...)
		if err != nil {
			b.Fatal(err)
		}
		return first(b, sb)
	}}, Floor{Name: "warm", Run: func(b *testing.B) func() {
		if res, err := warm.Commands.Run(ctx, sandbox.Command{Args: []string{"true"}}); err != nil || res.ExitCode != 0 {
			b.Fatalf("true in the held sandbox: %v %+v", err, res)
		}
		return nil
	}})
}

// PoolLoadOptions shapes RunPoolLoad.
type PoolLoadOptions struct {
	// Size of the pool (default 8) and Callers, the concurrent Gets
	// (default 50): the load.
	Size, Callers int
	// MaxStarting is the pool's (default: the pool's default).
	MaxStarting int
	// Timeout bounds the whole load (default 5 minutes).
	Timeout time.Duration
	// Leftovers, when set, lists what the backend left behind once the
	// pool and every caller closed (processes, containers, workspaces);
	// RunPoolLoad polls it for up to 30 s and fails on what remains.
	Leftovers func() []string
}

// RunPoolLoad is issue 22's load test on any backend: Callers concurrent
// Gets on a pool of Size sandboxes created with opts. Nothing fails, no
// sandbox is handed out twice, each starts with an empty workspace
// (nothing of an earlier caller's reaches the next: every caller writes a
// file after listing the workspace), its TTL runs from Get (opts should
// not set one; RunPoolLoad asks for an hour), Get after Close is
// SBX_CLOSED, and after Close the backend leaves nothing
// (PoolLoadOptions.Leftovers).
func RunPoolLoad(t *testing.T, o PoolLoadOptions, opts ...sandbox.Option) {
	t.Helper()
	if o.Size <= 0 {
		o.Size = 8
	}
	if o.Callers <= 0 {
		o.Callers = 50
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	pool, err := sandbox.NewPool(ctx, sandbox.PoolConfig{Size: o.Size, MaxStarting: o.MaxStarting}, append(opts, sandbox.WithTTL(time.Hour))...)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen = map[string]bool{}
		errs []error
	)
	for i := range o.Callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("caller %d: %w", i, err))
				mu.Unlock()
			}
			got := time.Now()
			sb, err := pool.Get(ctx)
			if err != nil {
				fail(err)
				return
			}
			defer sb.Close()
			mu.Lock()
			dup := seen[sb.ID()]
			seen[sb.ID()] = true
			mu.Unlock()
			if dup {
				fail(fmt.Errorf("sandbox %s handed out twice", sb.ID()))
				return
			}
			if exp := sb.Info().Expires; exp.Before(got.Add(time.Hour - time.Second)) {
				fail(fmt.Errorf("TTL runs from creation, not from Get: expires %s, Get at %s", exp, got))
			}
			res, err := sb.Commands.Run(ctx, sandbox.Command{Shell: fmt.Sprintf("ls -A; echo caller-%d > mine.txt", i)})
			if err != nil {
				fail(err)
				return
			}
			if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "" {
				fail(fmt.Errorf("a fresh pooled sandbox's workspace is not empty: exit %d, ls: %q %q", res.ExitCode, res.Stdout, res.Stderr))
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(seen) != o.Callers {
		t.Errorf("%d distinct sandboxes for %d Gets", len(seen), o.Callers)
	}
	if err := pool.Close(); err != nil {
		t.Errorf("Pool.Close: %v", err)
	}
	if _, err := pool.Get(ctx); sandbox.CodeOf(err) != sandbox.CodeClosed {
		t.Errorf("Get after Close: %v; want SBX_CLOSED", err)
	}
	if o.Leftovers == nil {
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left := o.Leftovers()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Pool.Close and every caller's Close, left behind: %s", strings.Join(left, "; "))
		}
		time.Sleep(100 * time.Millisecond)
	}
}
