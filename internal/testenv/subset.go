package testenv

import (
	"context"
	"flag"
	"strings"
	"sync"
	"testing"
)

// Subset wraps a conformance suite's harness maker (drivertest's
// HarnessMaker, or any maker called once at the start of each subtest of
// t) so that only the subtests named in names run: the maker skips the
// others, saying so. At t's end it fails t when a name matched no subtest
// (a renamed subtest would drop out of the pass silently), unless -run
// chose subtests or t was skipped. A pass over a subset says in a comment
// why each name is in it.
func Subset[M ~func(context.Context, testing.TB) (H, error), H any](t *testing.T, mk M, names []string) M {
	t.Helper()
	var mu sync.Mutex
	want := map[string]bool{} // escaped subtest name -> seen
	for _, n := range names {
		want[strings.ReplaceAll(n, " ", "_")] = false
	}
	t.Cleanup(func() {
		if f := flag.Lookup("test.run"); f != nil && strings.Contains(f.Value.String(), "/") {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for n, seen := range want {
			if !seen && !t.Skipped() {
				t.Errorf("the subset names %q, which no conformance subtest is called", n)
			}
		}
	})
	return func(ctx context.Context, tb testing.TB) (H, error) {
		name := strings.TrimPrefix(tb.Name(), t.Name()+"/")
		mu.Lock()
		_, ok := want[name]
		if ok {
			want[name] = true
		}
		mu.Unlock()
		if !ok {
			tb.Skip("not in this pass's subset of the conformance suite")
		}
		return mk(ctx, tb)
	}
}
