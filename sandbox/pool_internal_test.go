package sandbox

import (
	"context"
	"testing"
	"time"
)

// TestPoolSurplusDoesNotBlock: while expireIdle holds a ready sandbox out
// to look at it, topUp sees a place free and a start fills it; putting the
// first one back must not block (it used to send on the full channel with
// the pool's lock held, which hung every Get and start after it).
func TestPoolSurplusDoesNotBlock(t *testing.T) {
	p, ctx := newTestPool(t, "starts two sandboxes")
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor("the first sandbox", func() bool { return len(p.ready) == 1 })
	held := <-p.ready // what expireIdle does before it looks at one
	p.mu.Lock()
	p.waiting++ // a Get arrives: the pool looks empty
	p.mu.Unlock()
	p.nudge()
	waitFor("the second sandbox", func() bool { return len(p.ready) == 1 })
	p.mu.Lock()
	p.waiting--
	p.mu.Unlock()
	back := make(chan struct{})
	go func() {
		p.putBack(held)
		close(back)
	}()
	select {
	case <-back:
	case <-time.After(10 * time.Second):
		t.Fatal("putting a sandbox back into a full pool blocked (with the pool's lock held)")
	}
	held.sb.mu.Lock()
	closed := held.sb.closed
	held.sb.mu.Unlock()
	if !closed {
		t.Error("the surplus sandbox is still open though the full pool had no place for it: it would leak")
	}
	sb, err := p.Get(ctx)
	if err != nil {
		t.Fatalf("Get after the surplus: %v", err)
	}
	sb.Close()
}

// A Get holds the replacement start back for refillDelay, so that the
// caller's first command does not compete with it; a burst of Gets closer
// together than that must not keep pushing the start back (a review found
// that each Get moved the hold, so a steady stream of Gets 5 ms apart
// started no replacement until the pool was empty and every Get then
// waited for a whole create).
func TestPoolHoldIsNotPushedBackByEveryGet(t *testing.T) {
	p, _ := newTestPool(t, "starts a sandbox")
	first := time.Now()
	moved := 0
	for time.Since(first) < 5*refillDelay {
		p.mu.Lock()
		prev := p.holdUntil
		p.mu.Unlock()
		now := time.Now()
		if !p.hold() {
			t.Fatal("the pool closed")
		}
		p.mu.Lock()
		after := p.holdUntil
		p.mu.Unlock()
		if now.Before(prev) && !after.Equal(prev) {
			moved++
		}
		time.Sleep(refillDelay / 4)
	}
	if moved > 0 {
		t.Errorf("%d Gets %v apart moved a pending hold later: the replacement start was pushed back by every Get", moved, refillDelay/4)
	}
}

// newTestPool is a pool of one sandbox on the best local tier, closed with
// the test; ctx bounds the test to a minute. Short tests skip it (why).
func newTestPool(t *testing.T, why string) (*Pool, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	p, err := NewPool(ctx, PoolConfig{Size: 1, MaxStarting: 1}, AllowWeaker(TierLandlock, TierProcess))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ctx
}
