// Package wsscript holds the shell scripts package workspace runs in a
// lease's sandbox, each as the argv "sh", "-c", SCRIPT, "berth-ws", ARGS:
// POSIX sh with find, stat, sha256sum and readlink (busybox will do). The
// fake driver (drivers/fake) answers them from its in-memory files as a
// real sandbox would, so a workspace can be prepared and collected on it.
package wsscript

// Exit statuses of the scripts besides 0 and 1.
const (
	// ExitNotFound: the directory $1 is not there.
	ExitNotFound = 4
	// ExitLink: a component of the path is a symbolic link.
	ExitLink = 5
	// ExitNewline: a name in the tree holds a newline, which the line
	// format of Facts cannot carry.
	ExitNewline = 6
)

// Facts prints the facts of the tree under $1 (relative to the working
// directory) that the tree hash is made of, in three sections, each entry
// named "./PATH":
//
//	S
//	HEXMODE SIZE ./PATH          one line per entry (stat -c '%f %s %n')
//	H
//	SHA256  ./PATH               one line per regular file (sha256sum)
//	L
//	./PATH                       two lines per symbolic link:
//	TARGET                       its name and its target as written
//	E
//
// No link is followed, no fifo or device opened: $1 itself, .berth or
// .berth/ws being a link exits ExitLink. A name holding a newline exits
// ExitNewline, a missing directory ExitNotFound. The host parses the
// facts, sorts them and hashes them (package workspace: TreeHash's
// definition); the sandbox hashes each file's content itself, so nothing
// but the facts crosses.
const Facts = `nl='
'
for p in .berth .berth/ws "$1"; do [ -L "$p" ] && exit 5; done
cd -- "$1" 2>/dev/null || exit 4
[ -z "$(find . -mindepth 1 -name "*$nl*")" ] || exit 6
echo S
find . -mindepth 1 -exec stat -c '%f %s %n' {} + || exit 1
echo H
find . -mindepth 1 -type f -exec sha256sum {} + || exit 1
echo L
find . -mindepth 1 -type l -exec sh -c 'for f; do printf "%s\n" "$f"; readlink -- "$f" || exit 1; done' berth-ws {} + || exit 1
echo E`

// Remove removes the directory $1 (relative to the working directory,
// under .berth/ws) and everything under it; a missing one is fine. It
// exits ExitLink, removing nothing, when .berth, .berth/ws or $1 is a
// symbolic link (a task's plant, never followed).
const Remove = `for p in .berth .berth/ws "$1"; do [ -L "$p" ] && exit 5; done
[ -e "$1" ] || exit 0
rm -rf -- "$1"`

// HasGit exits 0 when the sandbox has a git command.
const HasGit = `command -v git >/dev/null 2>&1`
