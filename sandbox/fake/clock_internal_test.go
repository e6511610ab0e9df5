package fake

import (
	"testing"
	"time"
)

func fired(c <-chan time.Time) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// A hanging command's wait moves the clock only once the server has
// armed its timeout, then exactly to it, firing earlier timers on the way
// and none after; a second waiting command's timeout comes when the first
// has ended.
func TestClockJumpsToTheTimeoutOfTheWaitingCall(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := newClock(t0)
	job, _ := c.After(10 * time.Minute)
	late, _ := c.After(time.Hour)
	doneA := c.waitFor(t0, 20*time.Minute)
	if got := c.Now(); !got.Equal(t0) {
		t.Fatalf("the clock moved to %v before the waiting call's timeout was armed", got)
	}
	a, _ := c.After(20 * time.Minute) // the server arms A's timeout
	if !fired(job) || !fired(a) || fired(late) {
		t.Fatalf("after A's timeout was armed: job fired %v, A %v, the 1h timer %v; want true, true, false", fired(job), fired(a), fired(late))
	}
	if got := c.Now().Sub(t0); got != 20*time.Minute {
		t.Fatalf("the clock is at +%s, want +20m", got)
	}
	start := c.Now()
	doneB := c.waitFor(start, 50*time.Minute)
	b, _ := c.After(50 * time.Minute)
	if fired(b) || fired(late) {
		t.Fatal("B's timeout fired while A still waited")
	}
	doneA()
	if !fired(late) || !fired(b) || c.Now().Sub(t0) != 70*time.Minute {
		t.Fatalf("after A ended: 1h timer fired %v, B %v, clock +%s; want both and +70m", fired(late), fired(b), c.Now().Sub(t0))
	}
	doneB()
	c.Advance(time.Minute)
	if got := c.Now().Sub(t0); got != 71*time.Minute {
		t.Fatalf("Advance: +%s, want +71m", got)
	}
}

// A stopped timer never fires; Advance fires the due ones in order.
func TestClockAdvanceAndStop(t *testing.T) {
	c := newClock(time.Unix(0, 0))
	a, stopA := c.After(time.Second)
	b, _ := c.After(2 * time.Second)
	if !stopA() {
		t.Fatal("stopping a pending timer reported it had fired")
	}
	c.Advance(time.Second)
	if fired(a) || fired(b) {
		t.Fatal("a stopped timer fired, or one not due yet")
	}
	c.Advance(time.Second)
	if !fired(b) {
		t.Fatal("a due timer did not fire")
	}
}
