package plugin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/berthdev/berth/drivers"
)

// PinsFile is the file of a plugin directory that lists its plugins with
// their pins, one a line in the form sha256sum prints ("HEX  NAME", or
// "HEX *NAME"); NAME is a binary in the directory. Blank lines and lines
// starting with # are skipped. The operator writes it (sha256sum acme >
// pins, after reviewing acme), never the plugin's author.
const PinsFile = "pins"

// LoadDir loads every plugin that the pins file of dir lists (PinsFile),
// each with Load, in the file's order. A line that is malformed, names a
// path outside dir, or whose plugin Load refuses is an error naming the
// line; then no driver is returned (those loaded are closed).
func LoadDir(dir string, opts *Options) ([]drivers.Driver, error) {
	b, err := os.ReadFile(filepath.Join(dir, PinsFile))
	if err != nil {
		return nil, fmt.Errorf("plugin directory %s: %w", dir, err)
	}
	var out []drivers.Driver
	fail := func(err error) ([]drivers.Driver, error) {
		for _, d := range out {
			_ = d.(io.Closer).Close()
		}
		return nil, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		name = strings.TrimPrefix(strings.TrimPrefix(name, " "), "*")
		if !ok || name == "" || name != filepath.Base(name) || name == "." || name == ".." {
			return fail(fmt.Errorf("%s line %d: want \"SHA256  NAME\", NAME a file of the directory", filepath.Join(dir, PinsFile), n))
		}
		d, err := Load(Plugin{Binary: filepath.Join(dir, name), SHA256: sum}, opts)
		if err != nil {
			return fail(fmt.Errorf("%s line %d: %w", filepath.Join(dir, PinsFile), n, err))
		}
		out = append(out, d)
	}
	if err := sc.Err(); err != nil {
		return fail(err)
	}
	if len(out) == 0 {
		return nil, errors.New("plugin directory " + dir + ": the pins file lists no plugin")
	}
	return out, nil
}
