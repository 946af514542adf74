package templates

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/berthdev/berth/errcode"
)

// endless yields 'x' forever, counting what was read.
type endless struct{ n int64 }

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	e.n += int64(len(p))
	return len(p), nil
}

// A script longer than maxScriptBytes is refused, naming the bound, and
// no more of it is read than the bound (a hostile or mistaken endless
// input does not exhaust memory).
func TestParseScriptBounded(t *testing.T) {
	src := &endless{}
	r := io.MultiReader(strings.NewReader(`{"steps": [{"run": ["true"]}], "pad": "`), io.LimitReader(src, 2*maxScriptBytes))
	_, err := parseScript(r)
	if !errors.Is(err, errcode.ErrInvalid) || !strings.Contains(err.Error(), "16777216 bytes") {
		t.Errorf("a script past the bound: %v", err)
	}
	if src.n > maxScriptBytes+64<<10 {
		t.Errorf("%d bytes read of a script past the %d-byte bound", src.n, maxScriptBytes)
	}
}
