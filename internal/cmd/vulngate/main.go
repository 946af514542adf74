// Command vulngate runs govulncheck against a local vulnerability database
// and decides what fails the build (`make vulncheck`):
//
//   - a vulnerability that the code reaches (govulncheck found a call path
//     to a vulnerable symbol) in a module berth depends on fails it, unless
//     the allowlist names it;
//   - allowlisted ones are printed with their reason on every run;
//   - standard-library ones are printed as the toolchain's matter: the
//     adopter's Go toolchain decides them, not berth's go.mod.
//
// Usage:
//
//	vulngate -govulncheck PATH -db DIR -allow FILE [packages]
//
// The allowlist has one entry a line: the vulnerability ID, the module path,
// then the reason. Blank lines and lines starting with # are ignored.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	govulncheck := flag.String("govulncheck", "govulncheck", "the govulncheck binary")
	db := flag.String("db", "", "directory of the vulnerability database (built by indexdb)")
	allowPath := flag.String("allow", "", "the allowlist file")
	flag.Parse()
	if *db == "" || *allowPath == "" {
		fmt.Fprintln(os.Stderr, "usage: vulngate -govulncheck PATH -db DIR -allow FILE [packages]")
		os.Exit(2)
	}
	pkgs := flag.Args()
	if len(pkgs) == 0 {
		pkgs = []string{"./..."}
	}
	if err := run(*govulncheck, *db, *allowPath, pkgs, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "vulngate:", err)
		os.Exit(1)
	}
}

// allowed is one allowlist entry.
type allowed struct {
	id, module, reason string
}

func readAllowlist(path string) ([]allowed, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var list []allowed
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			return nil, fmt.Errorf("%s:%d: want an ID, a module and a reason", path, n)
		}
		list = append(list, allowed{id: fields[0], module: fields[1], reason: strings.Join(fields[2:], " ")})
	}
	return list, sc.Err()
}

// message is the part of govulncheck's JSON stream that vulngate reads.
type message struct {
	OSV *struct {
		ID      string `json:"id"`
		Summary string `json:"summary"`
	} `json:"osv"`
	Finding *struct {
		OSV          string `json:"osv"`
		FixedVersion string `json:"fixed_version"`
		Trace        []struct {
			Module   string `json:"module"`
			Version  string `json:"version"`
			Package  string `json:"package"`
			Function string `json:"function"`
		} `json:"trace"`
	} `json:"finding"`
}

// finding is one reachable vulnerability in one module.
type finding struct {
	id, module, version, fixed, summary, symbol string
}

func run(govulncheck, db, allowPath string, pkgs []string, out io.Writer) error {
	allow, err := readAllowlist(allowPath)
	if err != nil {
		return fmt.Errorf("allowlist: %w", err)
	}
	abs, err := filepath.Abs(db)
	if err != nil {
		return err
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.Command(govulncheck, append([]string{"-db", "file://" + abs, "-format", "json"}, pkgs...)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w\n%s", govulncheck, err, stderr.Bytes())
	}
	findings, err := reachable(&stdout)
	if err != nil {
		return err
	}
	return report(findings, allow, out)
}

// report prints the findings (allowed ones with their reason, standard
// library ones as the toolchain's matter, the rest as failing) and returns
// an error if any finding in a dependency is not allowed.
func report(findings []finding, allow []allowed, out io.Writer) error {
	var failing, std []finding
	matched := map[allowed]bool{}
	for _, f := range findings {
		if f.module == "stdlib" || f.module == "toolchain" {
			std = append(std, f)
			continue
		}
		i := slices.IndexFunc(allow, func(a allowed) bool { return a.id == f.id && a.module == f.module })
		if i < 0 {
			failing = append(failing, f)
			continue
		}
		if !matched[allow[i]] {
			fmt.Fprintf(out, "vulngate: allowed %s in %s@%s (%s): %s\n", f.id, f.module, f.version, f.summary, allow[i].reason)
		}
		matched[allow[i]] = true
	}
	for _, a := range allow {
		if !matched[a] {
			fmt.Fprintf(out, "vulngate: allowlist entry %s %s matches no reachable finding; remove it\n", a.id, a.module)
		}
	}
	for _, f := range std {
		fmt.Fprintf(out, "vulngate: standard library (the Go toolchain's matter, not failing): %s in %s, fixed in %s: %s\n", f.id, f.version, f.fixed, f.summary)
	}
	for _, f := range failing {
		fmt.Fprintf(out, "vulngate: REACHABLE %s in %s@%s (fixed in %s; e.g. %s): %s\n", f.id, f.module, f.version, orNone(f.fixed), f.symbol, f.summary)
	}
	fmt.Fprintf(out, "vulngate: %d reachable in dependencies (%d allowed), %d in the standard library\n",
		len(findings)-len(std), len(findings)-len(std)-len(failing), len(std))
	if len(failing) > 0 {
		return errors.New("reachable vulnerabilities in dependencies: upgrade them, or allowlist them with a reason")
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "no fixed version"
	}
	return s
}

// reachable reads govulncheck's JSON stream and returns one finding per
// vulnerability and module that has a call path to a vulnerable symbol
// (findings at module or package level only are not reachable).
func reachable(r io.Reader) ([]finding, error) {
	summaries := map[string]string{}
	seen := map[[2]string]bool{}
	var list []finding
	dec := json.NewDecoder(r)
	for {
		var m message
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("reading govulncheck's output: %w", err)
		}
		if m.OSV != nil {
			summaries[m.OSV.ID] = m.OSV.Summary
		}
		f := m.Finding
		if f == nil || len(f.Trace) == 0 || f.Trace[0].Function == "" {
			continue
		}
		t := f.Trace[0]
		key := [2]string{f.OSV, t.Module}
		if seen[key] {
			continue
		}
		seen[key] = true
		list = append(list, finding{id: f.OSV, module: t.Module, version: t.Version, fixed: f.FixedVersion,
			symbol: t.Package + "." + t.Function})
	}
	for i := range list {
		list[i].summary = summaries[list[i].id]
	}
	slices.SortFunc(list, func(a, b finding) int {
		return strings.Compare(a.id+" "+a.module, b.id+" "+b.module)
	})
	return list, nil
}
