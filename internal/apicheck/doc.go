// Package apicheck holds only tests: repo-wide checks of the exported
// surface. The public API of every package outside internal/ and examples/
// is recorded under api/ at the module root, one file per package and one
// line per exported name with its signature (CONVENTIONS 27, as Go's own
// api/go1.*.txt), and TestAPIIsRecorded fails when code and files differ;
//
//	go test ./internal/apicheck -run TestAPIIsRecorded -update
//
// rewrites them. TestAPICounts prints the surface's size (`make test` shows
// it). The other checks: every exported name has a doc comment (CONVENTIONS
// 13), no package exports a variable other than a sentinel error, and every
// exported service method takes the principal. It parses the module's source
// with go/ast and go/doc and imports nothing of berth.
package apicheck
