package shell

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// ErrNotFound: no session has the given ID.
var ErrNotFound = errors.New("shell: no such session")

// Manager keeps the sessions of one sandbox: it opens them with one Starter
// and default Options, finds them by ID, and closes them all with the
// sandbox. It is safe for concurrent use.
type Manager struct {
	start    Starter
	defaults Options

	mu       sync.Mutex
	sessions map[string]*Session
	next     int
	closed   bool
}

// NewManager returns a Manager that opens sessions with start; defaults
// fills the fields an Open leaves zero.
func NewManager(start Starter, defaults Options) *Manager {
	return &Manager{start: start, defaults: defaults, sessions: map[string]*Session{}}
}

// Open starts a new session, named "sh-1", "sh-2", ... Zero fields of opts
// take the Manager's defaults; opts.Env is added to the default Env.
func (m *Manager) Open(ctx context.Context, opts Options) (*Session, error) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: the session manager is closed", ErrEnded)
	}
	m.next++
	id := "sh-" + strconv.Itoa(m.next)
	m.mu.Unlock()

	d := m.defaults
	if opts.Bash == "" {
		opts.Bash = d.Bash
	}
	opts.Env = append(slices.Clip(d.Env), opts.Env...)
	if opts.Dir == "" {
		opts.Dir = d.Dir
	}
	if opts.MaxOutputBytes == 0 {
		opts.MaxOutputBytes = d.MaxOutputBytes
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = d.StartTimeout
	}
	if opts.Settle == 0 {
		opts.Settle = d.Settle
	}
	s, err := open(ctx, m.start, opts, id)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		_ = s.Close()
		return nil, fmt.Errorf("%w: the session manager was closed while opening", ErrEnded)
	}
	m.sessions[id] = s
	return s, nil
}

// Get returns the session named id. Ended sessions stay listed until they
// are closed, so a caller learns why they ended.
func (m *Manager) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("%w %q; open sessions: %s (open a new one with Open)", ErrNotFound, id, m.idsLocked())
}

// List describes every session, ordered by ID number.
func (m *Manager) List() []Info {
	m.mu.Lock()
	ss := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		ss = append(ss, s)
	}
	m.mu.Unlock()
	infos := make([]Info, 0, len(ss))
	for _, s := range ss {
		infos = append(infos, s.Info())
	}
	slices.SortFunc(infos, func(a, b Info) int { return compareIDs(a.ID, b.ID) })
	return infos
}

// Close closes the session named id and forgets it.
func (m *Manager) Close(id string) error {
	m.mu.Lock()
	s, ok := m.sessions[id]
	delete(m.sessions, id)
	ids := m.idsLocked()
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w %q; open sessions: %s", ErrNotFound, id, ids)
	}
	return s.Close()
}

// CloseAll closes every session; later Opens fail. It is what the sandbox
// calls when it is closed.
func (m *Manager) CloseAll() error {
	m.mu.Lock()
	m.closed = true
	ss := m.sessions
	m.sessions = map[string]*Session{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 0, len(ss))
	var emu sync.Mutex
	for _, s := range ss {
		wg.Go(func() {
			if err := s.Close(); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (m *Manager) idsLocked() string {
	if len(m.sessions) == 0 {
		return "none"
	}
	ids := make([]string, 0, len(m.sessions))
	for id := range m.sessions {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, compareIDs)
	return strings.Join(ids, ", ")
}

func compareIDs(a, b string) int {
	na, _ := strconv.Atoi(strings.TrimPrefix(a, "sh-"))
	nb, _ := strconv.Atoi(strings.TrimPrefix(b, "sh-"))
	if na != nb {
		return na - nb
	}
	return strings.Compare(a, b)
}
