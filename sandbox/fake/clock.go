package fake

import (
	"slices"
	"sync"
	"time"
)

// Clock is the fake sandbox's time: the agent server takes its command
// timeouts from it, and the fake stamps calls, process starts and ends
// with it. It starts at the real time when New runs and moves only when
// something waits for it, never with the wall clock:
//
//   - a command whose reply is Hang waits for its own timeout, and the
//     clock jumps to that deadline at once (firing the timeouts of jobs due
//     before it on the way), so a hanging command with a 30 s timeout ends
//     with SBX_TIMEOUT and a 30 s Duration in microseconds of real time;
//   - Advance moves it by hand, ending hanging background jobs whose
//     timeout has passed.
//
// Timeouts kept on the host side (Python cells, session commands, the
// caller's context) are not on this clock: they take real time.
type Clock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*clockTimer
	// waits holds the calls waiting for time to pass, one entry each.
	waits []*clockWait
}

// clockWait is a hanging command waiting for its timeout of d, which the
// server arms as a timer of d once the command has started.
type clockWait struct {
	start time.Time
	d     time.Duration
}

type clockTimer struct {
	armed time.Time // when it was made
	d     time.Duration
	at    time.Time      // armed + d
	c     chan time.Time // buffered: firing never blocks the clock
}

func newClock(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d and fires every timeout due by
// then, in the order of their deadlines.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	to := c.now.Add(max(d, 0))
	c.fireLocked(to)
	c.now = to
}

// After returns a channel that receives the clock's time once d has
// passed on it, and a function that cancels the timer (reporting whether
// it had not fired yet). It is the agent server's timer.
func (c *Clock) After(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &clockTimer{armed: c.now, d: d, at: c.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- c.now
		return t.c, func() bool { return false }
	}
	c.timers = append(c.timers, t)
	c.jumpLocked()
	return t.c, func() bool { return c.stop(t) }
}

func (c *Clock) stop(t *clockTimer) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	return true
}

// waitFor says that a call which started at start waits for its timeout
// of d (a hanging command): once the server has armed that timeout (a
// timer of d made at or after start), the clock jumps to it, firing the
// timers due by then on the way. The returned function ends the wait.
func (c *Clock) waitFor(start time.Time, d time.Duration) (done func()) {
	w := &clockWait{start: start, d: d}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waits = append(c.waits, w)
	c.jumpLocked()
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if i := slices.Index(c.waits, w); i >= 0 {
				c.waits = slices.Delete(c.waits, i, i+1)
			}
			// Another call may wait for a later timeout: time goes on
			// once this one has ended at its own.
			c.jumpLocked()
		})
	}
}

// jumpLocked moves the clock to the earliest timeout a waiting call
// waits for, firing every timer due by then in order. It waits while any
// waiting call has no pending timeout: one not armed yet (the server arms
// it just after the process starts; moving "now" before would put it
// later than the call's start plus its duration), or one that has fired
// while the call is still ending (its end is stamped with the time it
// fired, not a later one).
func (c *Clock) jumpLocked() {
	var to time.Time
	for _, w := range c.waits {
		var own time.Time
		for _, t := range c.timers {
			if t.d == w.d && !t.armed.Before(w.start) && (own.IsZero() || t.at.Before(own)) {
				own = t.at
			}
		}
		if own.IsZero() {
			return
		}
		if to.IsZero() || own.Before(to) {
			to = own
		}
	}
	if !to.IsZero() {
		c.fireLocked(to)
	}
}

// fireLocked fires, in deadline order, every timer due at or before to,
// moving the clock to each.
func (c *Clock) fireLocked(to time.Time) {
	slices.SortStableFunc(c.timers, func(a, b *clockTimer) int { return a.at.Compare(b.at) })
	n := 0
	for _, t := range c.timers {
		if t.at.After(to) {
			break
		}
		if t.at.After(c.now) {
			c.now = t.at
		}
		t.c <- c.now
		n++
	}
	c.timers = slices.Delete(c.timers, 0, n)
}
