package sandbox

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent/wire"
)

// TestDefaultsMatchTheAgent: the package states its defaults as values (so that go doc shows
// them); the agent applies them. They must agree.
func TestDefaultsMatchTheAgent(t *testing.T) {
	if DefaultOutputFileLimit != wire.DefaultOutputFileLimit {
		t.Errorf("DefaultOutputFileLimit = %d, the agent applies %d", DefaultOutputFileLimit, wire.DefaultOutputFileLimit)
	}
}
