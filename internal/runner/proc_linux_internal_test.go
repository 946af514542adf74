//go:build linux

package runner

import "testing"

// TestUnreadableMayBeTask: what the stop proof's tag scan counts as
// inconclusive of a live process whose environment it could not read.
func TestUnreadableMayBeTask(t *testing.T) {
	const leader = 1000 // the task leader's start, in clock ticks
	for _, c := range []struct {
		name      string
		info      procInfo
		read      bool
		notBefore uint64
		want      bool
	}{
		{"stat unreadable too", procInfo{}, false, leader, true},
		{"a child of the namespace, after the task", procInfo{pid: 42, ppid: 7, start: leader + 5}, true, leader, true},
		{"started with the task", procInfo{pid: 42, ppid: 7, start: leader}, true, leader, true},
		{"older than the task", procInfo{pid: 42, ppid: 7, start: leader - 1}, true, leader, false},
		{"task start unknown", procInfo{pid: 42, ppid: 7, start: 3}, true, 0, true},
		{"started from outside the namespace", procInfo{pid: 42, ppid: 0, start: leader + 5}, true, leader, false},
		{"the namespace's init", procInfo{pid: 1, ppid: 0, start: leader + 5}, true, leader, true},
	} {
		if got := unreadableMayBeTask(c.info, c.read, c.notBefore); got != c.want {
			t.Errorf("%s: unreadableMayBeTask(%+v, %v, %d) = %v, want %v", c.name, c.info, c.read, c.notBefore, got, c.want)
		}
	}
}
