package sandboxtest

import (
	"strings"
	"testing"
)

// The platform marker applies only where the workspace is a directory of
// a host whose file system differs, and then names what and why.
func TestPlatformDifferenceMarksOnlyHostsThatDiffer(t *testing.T) {
	for _, tc := range []struct {
		goos, host string
		d          platformDifference
		marked     bool
	}{
		{"linux", "/tmp/ws", diffSymlinks, false},
		{"linux", "/tmp/ws", diffCaseFolding, false},
		{"windows", `C:\Temp\ws`, diffSymlinks, true},
		{"windows", `C:\Temp\ws`, diffPermissions, true},
		{"windows", "", diffSymlinks, false}, // a container's workspace is Linux's
		{"darwin", "/private/tmp/ws", diffCaseFolding, true},
		{"darwin", "/private/tmp/ws", diffSymlinks, false},
		{"darwin", "/private/tmp/ws", diffPermissions, false},
		{"darwin", "", diffCaseFolding, false},
	} {
		msg := hostDiffers(tc.goos, tc.host, tc.d)
		if (msg != "") != tc.marked {
			t.Errorf("%s, workspace %q, %s: marked %q, want marked %v", tc.goos, tc.host, tc.d.what, msg, tc.marked)
		}
		if tc.marked && (!strings.HasPrefix(msg, "platform difference ("+tc.goos+", "+tc.d.what+"): ") || !strings.Contains(msg, tc.d.reason)) {
			t.Errorf("%s, %s: message %q does not name the platform, the semantics and the reason", tc.goos, tc.d.what, msg)
		}
	}
}
