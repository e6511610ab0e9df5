package pykernel

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

// pyenvPython is an interpreter of the machine's pyenv, if present (it is on
// the CI image; elsewhere these tests skip).
func pyenvPython(t *testing.T, version string) string {
	t.Helper()
	path := "/root/.pyenv/versions/" + version + "/bin/python"
	if _, err := os.Stat(path); err != nil {
		t.Skipf("no pyenv Python %s here", version)
	}
	return path
}

// TestSupportedPythons runs the core semantics on every Python the driver
// supports (>= 3.8), since the sandbox's python3 may be any of them.
func TestSupportedPythons(t *testing.T) {
	for _, v := range []string{"3.8.18", "3.9.18", "3.10.13", "3.12.1", "3.13.0"} {
		t.Run(v, func(t *testing.T) {
			o := testOptions(t)
			o.Python = pyenvPython(t, v)
			k := newKernel(t, o)
			if got := k.Info().Version; got != v {
				t.Fatalf("version %q", got)
			}
			steps := []struct {
				code string
				want want
			}{
				{"print('a'); 1+2+3", want{result: "6", stdout: str("a\n")}},
				{"x = 5", want{}},
				{"x;", want{}},
				{"import os; os.system('echo sh')", want{result: "0", stdout: str("sh\n")}},
				{"1/0", want{errName: "ZeroDivisionError", tracebackHas: []string{"1/0"}, tracebackNot: []string{"sandboxkit-driver"}}},
				{"def g(:", want{errName: "SyntaxError"}},
				{"import asyncio\nawait asyncio.sleep(0)\nx + 1", want{result: "6"}},
				{"!echo bang", want{stdout: str("bang\n")}},
			}
			for _, s := range steps {
				s.want.check(t, run(t, k, s.code))
			}
			ex, err := k.Run(context.Background(), "import time\ny = 41; time.sleep(30)", RunOptions{Timeout: 300 * time.Millisecond})
			if err != nil || !ex.TimedOut || ex.StateLost {
				t.Fatalf("interrupt: %+v %v", ex, err)
			}
			want{result: "42"}.check(t, run(t, k, "y + 1"))
		})
	}
}

func TestOldPythonsAreRefused(t *testing.T) {
	for _, v := range []string{"2.7.18", "3.6.15", "3.7.16"} {
		t.Run(v, func(t *testing.T) {
			o := testOptions(t)
			o.Python = pyenvPython(t, v)
			_, err := Start(context.Background(), ExecProc, o)
			if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), "needs Python >= 3.8") || !strings.Contains(err.Error(), v) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}
