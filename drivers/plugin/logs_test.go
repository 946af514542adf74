package plugin

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
)

// A long line is cut at maxLogLine bytes and says so; lines split across
// writes are joined.
func TestStderrLogLines(t *testing.T) {
	var buf bytes.Buffer
	l := newStderrLog(slog.New(slog.NewJSONHandler(&buf, nil)), "/p")
	_, _ = l.Write([]byte("he"))
	_, _ = l.Write([]byte("llo\n" + strings.Repeat("y", 3000) + "\n"))
	var recs []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		recs = append(recs, m)
	}
	if len(recs) != 2 || recs[0]["line"] != "hello" || recs[0]["truncated"] != nil {
		t.Fatalf("records %v", recs)
	}
	if s, _ := recs[1]["line"].(string); len(s) != maxLogLine || recs[1]["truncated"] != true {
		t.Errorf("a line of 3000 bytes logged as %d bytes, truncated %v", len(s), recs[1]["truncated"])
	}
}
