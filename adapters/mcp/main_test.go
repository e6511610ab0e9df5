package mcp

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests when a goroutine outlives them: every
// session, progress ticker and waiter the server starts must end with its
// client or with Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
