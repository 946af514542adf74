// Package apicheck holds only tests: repo-wide checks of the exported
// surface (CONVENTIONS 13): every exported name has a doc comment, and no
// package exports a variable other than a sentinel error (configuration
// that callers could reassign is a function or a constant). It parses the
// module's source with go/ast and imports nothing of berth.
package apicheck
