package sandbox

import (
	"testing"

	"github.com/sandboxkit/sandboxkit/sandbox/agent"
)

// TestDefaultsMatchTheAgent: the package states its defaults as values (so that go doc shows
// them); the agent applies them. They must agree.
func TestDefaultsMatchTheAgent(t *testing.T) {
	if DefaultOutputFileLimit != agent.DefaultOutputFileLimit {
		t.Errorf("DefaultOutputFileLimit = %d, the agent applies %d", DefaultOutputFileLimit, agent.DefaultOutputFileLimit)
	}
}
