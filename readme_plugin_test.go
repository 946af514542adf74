package berth_test

import (
	"os"
	"strings"
	"testing"
)

// Issue 54: the README says how to write a provider plugin in under 20
// lines of Go, and each of them is compiled and run: the plugin's main is
// internal/daytonaplugin's, word for word; installPlugin and loadPlugin are
// drivers/plugin's example_test.go's (the README indents with four spaces),
// which ExampleLoad runs with that plugin.
func TestREADMEPluginIsTested(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	r := string(readme)
	i := strings.Index(r, "## Write a provider plugin\n")
	if i < 0 {
		t.Fatal(`README.md has no section "## Write a provider plugin"`)
	}
	start := strings.Index(r[i:], "```go\n")
	end := strings.Index(r[i+start+6:], "```\n")
	if start < 0 || end < 0 {
		t.Fatal("the README's plugin section has no Go block")
	}
	block := r[i+start+6 : i+start+6+end]
	if n := strings.Count(block, "\n"); n >= 20 {
		t.Errorf("the README's plugin snippet is %d lines, want under 20", n)
	}
	main, err := os.ReadFile("drivers/plugin/internal/daytonaplugin/main.go")
	if err != nil {
		t.Fatal(err)
	}
	var mainLine string
	for _, l := range strings.Split(string(main), "\n") {
		if strings.HasPrefix(l, "func main() {") {
			mainLine = l
		}
	}
	if mainLine == "" || !strings.Contains(block, mainLine) {
		t.Errorf("the README's plugin snippet does not show internal/daytonaplugin's main %q", mainLine)
	}
	ex, err := os.ReadFile("drivers/plugin/example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	s := string(ex)
	for _, fn := range []string{"installPlugin", "loadPlugin"} {
		i := strings.Index(s, "\nfunc "+fn+"(")
		if i < 0 {
			t.Errorf("no func %s in drivers/plugin/example_test.go", fn)
			continue
		}
		j := strings.Index(s[i+1:], "\n}\n")
		body := s[i+1 : i+1+j+2]
		if !strings.Contains(block, strings.ReplaceAll(body, "\t", "    ")) {
			t.Errorf("the README's plugin snippet does not show %s as drivers/plugin/example_test.go has it:\n%s", fn, body)
		}
	}
}
