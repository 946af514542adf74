// Package setupscript holds the shell scripts a setup session of package
// templates runs in its sandbox besides the steps, each as the argv
// "sh", "-c", SCRIPT, ...: the fake driver (drivers/fake) answers them as
// a clean sandbox would, and berth's own tests that need more register
// fake handlers under them.
package setupscript

const (
	// WriteFile writes its stdin to $1 with mode $2, making the parent
	// directories; nothing is staged elsewhere.
	WriteFile = `umask 022 && mkdir -p "$(dirname "$1")" && cat > "$1" && chmod "$2" "$1"`
	// Clean removes what berth put into the sandbox before a capture: the
	// runner's state (tickets, logs) under /.berth/state. Setup itself
	// stages nothing (a write step streams its content on stdin). A
	// missing directory is fine.
	Clean = `if [ -d /.berth/state ]; then find /.berth/state -mindepth 1 -delete; fi`
	// Environ prints the environment of the sandbox's process 1, the
	// environment an image made from it carries.
	Environ = `cat /proc/1/environ`
)
